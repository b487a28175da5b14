//! `argus submit` and `argus job ...`: dry runs and bad input without a cluster, then the
//! old tool's acceptance test and the job lifecycle on a real Ray cluster.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, docker, entry_names, free_port, poll, test_profile};

/// A profile whose shared storage is in the context's temp dir, on `port`.
fn profile_at(ctx: &mut TestContext, port: u16, workers: u32) -> (String, PathBuf, PathBuf) {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, port, workers, ""));
    (name, shared, profile)
}

/// verl 0.9.1's configs (tests/fixtures/verl-0.9.1-config), the release the example
/// JobSpecs run, as the snapshot `verl-snapshot-id` they are pointed at with
/// [`AT_SNAPSHOT`] (their `code.source` is snapshotted by `argus run`).
fn verl_snapshot(ctx: &TestContext, profile: &Path) {
    ctx.argus()
        .profile(profile)
        .args(["snapshot", "--code-id", "verl-snapshot-id"])
        .arg_path(Path::new("tests/fixtures/verl-0.9.1-config"))
        .run()
        .code(0);
}

/// `--set` that points an example JobSpec at [`verl_snapshot`].
const AT_SNAPSHOT: [&str; 2] = ["--set", "code_id=verl-snapshot-id"];

#[test]
fn dry_run_payloads_of_the_example_jobspecs() {
    let mut ctx = TestContext::new("dryrun");
    let (_name, _shared, profile) = profile_at(&mut ctx, 8265, 1);
    verl_snapshot(&ctx, &profile);
    for job in ["ppo", "grpo", "sft"] {
        let run = ctx
            .argus()
            .profile(&profile)
            .args([
                "submit",
                "--dry-run",
                "--json",
                "--set",
                "submission_id=snap-test",
            ])
            .args(AT_SNAPSHOT)
            .arg_path(Path::new(&format!("profiles/jobs/{job}.yaml")))
            .run()
            .code(0);
        let out = run.json();
        assert!(
            out["checked_overrides_against"]
                .as_str()
                .is_some_and(|s| s.contains("verl-snapshot-id")),
            "{out:#}"
        );
        insta::assert_yaml_snapshot!(format!("payload-{job}"), out["payload"]);
    }
    assert!(
        !ctx.path("shared/jobs/snap-test").exists(),
        "a dry run writes nothing"
    );
}

#[test]
fn quoting_edge_cases_reach_the_command_line_intact() {
    let mut ctx = TestContext::new("quoting");
    let (_name, _shared, profile) = profile_at(&mut ctx, 8265, 1);
    let spec = ctx.write(
        "q.yaml",
        "workload: ppo\ncode_path: /mnt/shared/common/code/verl/x\nsubmission_id: q1\noverrides:\n  trainer.experiment_name: \"it's a $HOME test\"\n  data.tags: [a, 'b c']\n  data.kwargs: {x: 1, y: 'z w'}\n  trainer.flag: 'true'\n",
    );
    let out = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&spec)
        .run()
        .code(0)
        .json();
    let entrypoint = out["entrypoint"].as_str().expect("entrypoint").to_string();
    insta::assert_snapshot!("entrypoint-quoting", entrypoint);
    // The shell gives Hydra exactly the tokens argus meant.
    let words = shlex::split(&entrypoint).expect("valid shell words");
    assert!(
        words.contains(&r"trainer.experiment_name='it\'s a $HOME test'".to_string()),
        "{words:?}"
    );
    assert!(
        words.contains(&"data.tags=[a,'b c']".to_string()),
        "{words:?}"
    );
    assert!(
        words.contains(&"trainer.flag='true'".to_string()),
        "{words:?}"
    );
}

#[test]
fn override_typos_are_caught_with_a_suggestion_and_new_keys_pass() {
    let mut ctx = TestContext::new("ovcheck");
    let (_name, _shared, profile) = profile_at(&mut ctx, 8265, 1);
    verl_snapshot(&ctx, &profile);
    ctx.argus()
        .profile(&profile)
        .args([
            "submit",
            "--dry-run",
            "--set",
            "overrides.trainer.save_frq=5",
        ])
        .args(AT_SNAPSHOT)
        .arg_path(Path::new("profiles/jobs/ppo.yaml"))
        .run()
        .code(2)
        .stderr_has("override `trainer.save_frq` is not a key of verl's config")
        .stderr_has("did you mean `trainer.save_freq`?");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--set", "overrides.+new.option=1"])
        .args(AT_SNAPSHOT)
        .arg_path(Path::new("profiles/jobs/ppo.yaml"))
        .run()
        .code(0)
        .stdout_has("+new.option=1");
    ctx.argus()
        .profile(&profile)
        .args([
            "submit",
            "--dry-run",
            "--no-check",
            "--set",
            "overrides.trainer.save_frq=5",
        ])
        .args(AT_SNAPSHOT)
        .arg_path(Path::new("profiles/jobs/ppo.yaml"))
        .run()
        .code(0);
}

#[test]
fn bad_jobspecs_are_usage_errors_that_write_nothing() {
    let mut ctx = TestContext::new("badjob");
    let (_name, shared, profile) = profile_at(&mut ctx, free_port(), 1);
    let cases = [
        (
            "workload: dpo\ncode_path: /x\n",
            ":1:11: workload: unknown variant `dpo`, expected one of `ppo`, `grpo`, `sft`, `custom`",
        ),
        ("workload: ppo\n", "missing code_path"),
        (
            "workload: custom\ncode_path: /x\nentrypoint: echo\nsubmission_id: ../x\n",
            ":4:16: submission_id: invalid submission id",
        ),
        (
            "workload: ppo\ncode_path: /x\nbogus: 1\n",
            ":3:1: unknown field `bogus`",
        ),
        ("workload: ppo\ncode_id: nope\n", "no snapshot nope"),
    ];
    for (i, (text, message)) in cases.iter().enumerate() {
        let spec = ctx.write(&format!("bad{i}.yaml"), text);
        ctx.argus()
            .profile(&profile)
            .args(["submit"])
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has(message);
    }
    assert!(entry_names(&shared.join("jobs")).is_empty());
}

#[test]
fn unreachable_ray_is_exit_4_after_bounded_retries() {
    let mut ctx = TestContext::new("noray");
    let (_name, shared, profile) = profile_at(&mut ctx, free_port(), 1);
    let spec = ctx.write(
        "j.yaml",
        "workload: custom\ncode_path: /mnt/shared/x\nentrypoint: echo hi\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(4)
        .stderr_has("cannot reach the Ray dashboard")
        .stderr_has("hint: is the cluster up?");
    assert!(entry_names(&shared.join("jobs")).is_empty());
}

/// Ray's error bodies are often Python tracebacks; a real head cannot be made to answer a
/// 500 to a well-formed submit, so this one failure shape uses a fake server.
#[test]
fn traceback_error_bodies_are_reported_by_their_last_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // Answers what argus asks before submitting (is the id free? the node list), then the POST.
    std::thread::spawn(move || {
        for stream in listener.incoming().take(10).flatten() {
            let mut stream = stream;
            let mut request = [0u8; 8192];
            let n = stream.read(&mut request).unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..n]).to_string();
            let (status, body) = if head.starts_with("GET /api/jobs/") {
                ("404 Not Found", "Job does not exist".to_string())
            } else if head.starts_with("GET") {
                ("200 OK", "{}".to_string())
            } else {
                ("500 Internal Server Error", "Traceback (most recent call last):\n  File \"job_head.py\", line 1, in submit\n    raise RuntimeError(x)\nRuntimeError: Failed to start supervisor actor: out of CPUs\n".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let mut ctx = TestContext::new("traceback");
    let (_name, shared, profile) = profile_at(&mut ctx, port, 1);
    let spec = ctx.write(
        "j.yaml",
        "workload: custom\ncode_path: /mnt/shared/x\nentrypoint: echo hi\nsubmission_id: tb-1\n",
    );
    let run = ctx.argus().profile(&profile).args(["submit"]).arg_path(&spec).run().code(1).stderr_has("Ray answered 500 to /api/jobs/: RuntimeError: Failed to start supervisor actor: out of CPUs");
    assert!(
        !run.stderr.contains("Traceback"),
        "only the meaningful line: {}",
        run.stderr
    );
    assert!(
        !shared.join("jobs/tb-1").exists(),
        "a refused submission leaves no record"
    );
    let leftovers: Vec<_> = std::fs::read_dir(shared.join("jobs"))
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    assert!(
        leftovers.is_empty(),
        "no staged directory left behind: {leftovers:?}"
    );
}

/// A custom JobSpec with a secret env var (which must never reach the records in clear).
fn job(ctx: &TestContext, id: &str, code_id: &str, entrypoint: &str) -> PathBuf {
    ctx.write(&format!("{id}.yaml"), &format!("workload: custom\nsubmission_id: {id}\ncode_id: {code_id}\nentrypoint: {entrypoint}\nenv_vars: {{API_TOKEN: do-not-leak}}\n"))
}

/// A running cluster of the test's own with snapshot `codeA` (marker-alpha) on it.
struct Jobs {
    name: String,
    shared: PathBuf,
    profile: PathBuf,
    dashboard: String,
}

fn cluster_with_code(ctx: &mut TestContext, workers: u32) -> Jobs {
    let port = free_port();
    let (name, shared, profile) = profile_at(ctx, port, workers);
    ctx.argus().profile(&profile).args(["up"]).run().code(0);
    snapshot_marker(ctx, &profile, "codeA", "marker-alpha");
    Jobs {
        name,
        shared,
        profile,
        dashboard: format!("http://127.0.0.1:{port}"),
    }
}

/// A snapshot `id` whose module `marker` says `marker`.
fn snapshot_marker(ctx: &TestContext, profile: &Path, id: &str, marker: &str) {
    let src = ctx.path(id);
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("marker.py"), format!("MARKER = {marker:?}\n")).expect("write");
    ctx.argus()
        .profile(profile)
        .args(["snapshot", "--code-id", id])
        .arg_path(&src)
        .run()
        .code(0);
}

fn job_status(ctx: &TestContext, j: &Jobs, id: &str) -> Value {
    ctx.argus()
        .profile(&j.profile)
        .args(["job", "status", id, "--json"])
        .run()
        .json()
}

/// The old tool's acceptance test: two jobs pinned to two code snapshots each import
/// their own marker; each driver runs on a worker, never the head; every artifact is
/// there; no secret is in clear anywhere under jobs/<id>.
#[test]
fn jobs_import_their_own_snapshot_run_on_a_worker_and_leave_their_records() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 2);
    snapshot_marker(&ctx, &j.profile, "codeB", "marker-beta");
    let print_marker = "python3 -c \"import marker; print('MARKER=' + marker.MARKER)\"";
    let status = ctx
        .argus()
        .profile(&j.profile)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    let nodes = status["nodes"].as_array().expect("nodes").clone();
    let head_id = nodes
        .iter()
        .find(|n| n["is_head_node"] == true)
        .expect("head")["node_id"]
        .clone();
    let worker_ids: Vec<Value> = nodes
        .iter()
        .filter(|n| n["is_head_node"] == false && n["state"] == "ALIVE")
        .map(|n| n["node_id"].clone())
        .collect();
    assert_eq!(worker_ids.len(), 2, "{nodes:#?}");
    assert!(!worker_ids.contains(&head_id));
    for (id, code, mine, other) in [
        ("job-a", "codeA", "marker-alpha", "marker-beta"),
        ("job-b", "codeB", "marker-beta", "marker-alpha"),
    ] {
        let spec = job(&ctx, id, code, print_marker);
        ctx.argus()
            .profile(&j.profile)
            .args(["submit", "--wait"])
            .arg_path(&spec)
            .run()
            .code(0)
            .stderr_has(&format!("job {id} SUCCEEDED"));
        let logs = ctx
            .argus()
            .profile(&j.profile)
            .args(["job", "logs", id])
            .run()
            .code(0)
            .stdout;
        assert!(
            logs.contains(&format!("MARKER={mine}")) && !logs.contains(other),
            "{id}: {logs}"
        );
        let driver = job_status(&ctx, &j, id)["job"]["driver_node_id"].clone();
        assert!(
            worker_ids.contains(&driver),
            "{id} ran on {driver}, not on a worker {worker_ids:?} (head {head_id})"
        );
        let dir = j.shared.join("jobs").join(id);
        for file in [
            "config/profile.yaml",
            "config/jobspec.yaml",
            "config/submit_payload.json",
            "logs/submit.out",
            "logs/driver.log",
            "debug/nodes_before.json",
            "debug/jobs_after.json",
            "job.json",
        ] {
            assert!(dir.join(file).is_file(), "{id} lacks {file}");
        }
        assert!(dir.join("checkpoints").is_dir());
        let payload: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config/submit_payload.json")).expect("payload"),
        )
        .expect("json");
        assert_eq!(payload["entrypoint_resources"]["worker_node"], 1.0);
        assert_eq!(
            payload["runtime_env"]["env_vars"]["API_TOKEN"],
            "<redacted>"
        );
        assert!(
            payload["runtime_env"]["env_vars"]["PYTHONPATH"]
                .as_str()
                .expect("pythonpath")
                .starts_with(&format!("/mnt/shared/common/code/verl/{code}:"))
        );
        assert!(
            std::fs::read_to_string(dir.join("logs/driver.log"))
                .expect("driver.log")
                .contains(&format!("MARKER={mine}"))
        );
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("job.json")).expect("record"))
                .expect("json");
        assert_eq!(record["status"], "SUCCEEDED");
        assert_eq!(record["code_id"], code);
        for file in walk(&dir) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(
                !text.contains("do-not-leak"),
                "secret in clear in {}",
                file.display()
            );
        }
    }
}

/// A job that prints the secret it was given: the driver log argus saves under jobs/<id>/
/// carries it redacted (by value, whatever the job printed around it).
#[test]
fn a_secret_a_job_prints_is_redacted_in_its_saved_log() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = job(
        &ctx,
        "job-echo",
        "codeA",
        "python3 -c \"import os; print('TOKEN=' + os.environ['API_TOKEN'] + '!')\" --arg do-not-leak",
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    let log = std::fs::read_to_string(j.shared.join("jobs/job-echo/logs/driver.log"))
        .expect("driver.log");
    assert!(log.contains("TOKEN="), "{log}");
    // Nowhere under jobs/<id>: not the saved log, nor the record or submit.out that carry
    // the command line with the secret on it.
    for file in walk(&j.shared.join("jobs/job-echo")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            !text.contains("do-not-leak"),
            "secret in clear in {}",
            file.display()
        );
    }
}

/// A submission id already used is refused, and the existing job's files are untouched.
#[test]
fn a_duplicate_submission_id_is_refused_and_changes_nothing() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = job(&ctx, "job-d", "codeA", "echo once");
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    let dir = j.shared.join("jobs/job-d");
    let before: Vec<(PathBuf, Vec<u8>)> = walk(&dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).expect("read");
            (f, bytes)
        })
        .collect();
    let spec = job(&ctx, "job-d", "codeA", "echo again");
    ctx.argus()
        .profile(&j.profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("submission id job-d is already used");
    for (file, bytes) in before {
        assert_eq!(
            std::fs::read(&file).expect("read"),
            bytes,
            "{} changed",
            file.display()
        );
    }
}

/// logs --follow streams lines as they are printed and returns when the job ends.
#[test]
fn logs_follow_streams_lines_while_the_job_runs() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let slow = "python3 -u -c \"import time\nfor i in range(4): print('tick', i, flush=True); time.sleep(2)\"";
    let spec = ctx.write(
        "slow.yaml",
        &format!(
            "workload: custom\nsubmission_id: job-slow\ncode_id: codeA\nentrypoint: |-\n  {}\n",
            slow.replace('\n', "\n  ")
        ),
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
        .args(["-p"])
        .arg(&j.profile)
        .args(["job", "logs", "job-slow", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("follow");
    let mut lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let first = poll("the first streamed line", Duration::from_secs(60), || {
        lines
            .next()
            .and_then(Result::ok)
            .filter(|l| l.contains("tick"))
    });
    assert!(first.contains("tick 0"), "{first}");
    assert_eq!(
        job_status(&ctx, &j, "job-slow")["job"]["status"],
        "RUNNING",
        "the first line arrived while the job was still running"
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("tick 3")), "{rest:?}");
    assert!(follower.wait().expect("wait").success());
}

/// A reader that goes away (`argus job logs -f ID | head -1`) ends argus quietly, exit 0.
#[test]
fn logs_follow_into_a_closed_pipe_ends_quietly() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = ctx.write(
        "chatty.yaml",
        "workload: custom\nsubmission_id: job-chatty\ncode_id: codeA\nentrypoint: |-\n  python3 -u -c \"import time\n  for i in range(600): print('line', i, flush=True); time.sleep(0.1)\"\n",
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
        .args(["-p"])
        .arg(&j.profile)
        .args(["job", "logs", "job-chatty", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("follow");
    let mut out = BufReader::new(follower.stdout.take().expect("stdout"));
    let mut first = String::new();
    poll("a first line", Duration::from_secs(60), || {
        (out.read_line(&mut first).ok()? > 0 && first.contains("line")).then_some(())
    });
    drop(out); // the reader goes away, as `head -1` does
    let status = poll("argus to end", Duration::from_secs(60), || {
        follower.try_wait().ok().flatten()
    });
    let mut err = String::new();
    let _ = follower
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("error") && !err.contains("panicked"), "{err}");
    assert_eq!(
        job_status(&ctx, &j, "job-chatty")["job"]["status"],
        "RUNNING"
    );
}

/// stop: a long job is stopped; its status is STOPPED and the exit codes say so (3).
#[test]
fn a_stopped_job_exits_3() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = job(&ctx, "job-long", "codeA", "sleep 300");
    ctx.argus()
        .profile(&j.profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    poll("job-long to run", Duration::from_secs(60), || {
        (job_status(&ctx, &j, "job-long")["job"]["status"] == "RUNNING").then_some(())
    });
    ctx.argus()
        .profile(&j.profile)
        .args(["job", "stop", "job-long", "--wait"])
        .run()
        .code(3)
        .stderr_has("STOPPED");
    ctx.argus()
        .profile(&j.profile)
        .args(["job", "wait", "job-long"])
        .run()
        .code(3);
}

/// time_limit: --wait stops the job once it is exceeded (exit 3) and records why; a
/// failing job exits 1.
#[test]
fn a_time_limit_stops_the_job_and_a_failure_exits_1() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = ctx.write("limited.yaml", "workload: custom\nsubmission_id: job-limited\ncode_id: codeA\nentrypoint: sleep 300\ntime_limit: 3s\n");
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(3);
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(j.shared.join("jobs/job-limited/job.json")).expect("record"),
    )
    .expect("json");
    assert_eq!(record["status"], "STOPPED");
    assert_eq!(record["stopped_by_argus"], "time_limit 3s exceeded");
    let spec = job(
        &ctx,
        "job-fail",
        "codeA",
        "python3 -c 'raise SystemExit(7)'",
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(1)
        .stderr_has("job job-fail FAILED");
}

/// Interop: Ray's own CLI sees argus's job, and argus lists a job Ray's CLI submitted.
#[test]
fn ray_cli_and_argus_see_each_others_jobs() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let spec = job(&ctx, "job-i", "codeA", "echo hi");
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    let head = format!("{}-head", j.name);
    let ray_status = docker(&[
        "exec",
        &head,
        "ray",
        "job",
        "status",
        "--address",
        &j.dashboard,
        "job-i",
    ]);
    assert!(ray_status.contains("succeeded"), "{ray_status}");
    let submitted = docker(&[
        "exec",
        &head,
        "ray",
        "job",
        "submit",
        "--address",
        &j.dashboard,
        "--submission-id",
        "from-ray-cli",
        "--no-wait",
        "--",
        "echo",
        "hi",
    ]);
    assert!(submitted.contains("from-ray-cli"), "{submitted}");
    let list = ctx
        .argus()
        .profile(&j.profile)
        .args(["job", "list", "--json"])
        .run()
        .code(0)
        .json();
    assert!(
        list.as_array()
            .expect("list")
            .iter()
            .any(|j| j["submission_id"] == "from-ray-cli" && j["source"] == "cluster"),
        "{list:#}"
    );
}

/// The records outlive the cluster: after down (and up again) argus still knows the jobs,
/// their final status and their logs.
#[test]
fn job_records_outlive_the_cluster() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);
    let print_marker = "python3 -c \"import marker; print('MARKER=' + marker.MARKER)\"";
    for id in ["job-x", "job-y"] {
        let spec = job(&ctx, id, "codeA", print_marker);
        ctx.argus()
            .profile(&j.profile)
            .args(["submit", "--wait"])
            .arg_path(&spec)
            .run()
            .code(0);
    }
    ctx.argus().profile(&j.profile).args(["down"]).run().code(0);
    let status = job_status(&ctx, &j, "job-x");
    assert_eq!(status["job"]["status"], "SUCCEEDED");
    assert_eq!(status["from_cluster"], false);
    ctx.argus()
        .profile(&j.profile)
        .args(["job", "logs", "job-x"])
        .run()
        .code(0)
        .stdout_has("MARKER=marker-alpha");
    ctx.argus().profile(&j.profile).args(["up"]).run().code(0);
    let list = ctx
        .argus()
        .profile(&j.profile)
        .args(["job", "list", "--json"])
        .run()
        .code(0)
        .json();
    let ids: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter(|j| j["source"] == "record")
        .filter_map(|j| j["submission_id"].as_str())
        .collect();
    assert!(ids.contains(&"job-x") && ids.contains(&"job-y"), "{ids:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Every output of a job lands on the shared storage: a custom job's relative file under
/// `jobs/<id>/work/`, and a verl-shaped Hydra app's run directory (`.hydra/config.yaml`)
/// under `jobs/<id>/hydra/`, through the overrides argus implies for a verl workload.
#[test]
fn job_outputs_land_on_the_shared_storage() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let j = cluster_with_code(&mut ctx, 1);

    // A custom job writing a relative path.
    let spec = ctx.write(
        "rel.yaml",
        "workload: custom\nsubmission_id: job-rel\ncode_id: codeA\nentrypoint: python3 -c \"open('out.txt', 'w').write('written here')\"\n",
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(j.shared.join("jobs/job-rel/work/out.txt")).expect("out.txt"),
        "written here"
    );

    // A Hydra app shaped like verl's trainer, with hydra-core copied into the snapshot
    // from the test venv (pure Python, the same 3.11 as the image's).
    let src = ctx.path("fake-verl");
    let trainer = src.join("verl/trainer");
    std::fs::create_dir_all(trainer.join("config")).expect("mkdir");
    std::fs::write(src.join("verl/__init__.py"), "").expect("write");
    std::fs::write(trainer.join("__init__.py"), "").expect("write");
    std::fs::write(
        trainer.join("main_ppo.py"),
        "import os\nimport hydra\n\n@hydra.main(config_path='config', config_name='ppo_trainer', version_base=None)\ndef main(cfg):\n    print('HYDRA_APP_RAN in', os.getcwd(), 'checkpoints', cfg.trainer.default_local_dir)\n\nif __name__ == '__main__':\n    main()\n",
    )
    .expect("write");
    std::fs::write(
        trainer.join("config/ppo_trainer.yaml"),
        "data:\n  train_files: null\n  val_files: null\nactor_rollout_ref:\n  rollout:\n    name: null\ntrainer:\n  default_local_dir: null\n  logger: null\n  total_training_steps: null\n",
    )
    .expect("write");
    let site = crate::hub::python()
        .parent()
        .and_then(Path::parent)
        .expect("venv")
        .join("lib/python3.11/site-packages");
    for package in ["hydra", "omegaconf", "antlr4"] {
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(site.join(package))
            .arg(&src)
            .status()
            .expect("cp");
        assert!(
            status.success(),
            "hydra-core is in the test venv (tests/venvs.sh)"
        );
    }
    // Installed packages carry their repository's .gitignore files (Hydra's ignores its
    // generated parser), which a snapshot honours: these copies are not a checkout.
    let status = std::process::Command::new("find")
        .arg(&src)
        .args(["-name", ".gitignore", "-delete"])
        .status()
        .expect("find");
    assert!(status.success());
    ctx.argus()
        .profile(&j.profile)
        .args(["snapshot", "--code-id", "fakeverl"])
        .arg_path(&src)
        .run()
        .code(0);
    let spec = ctx.write(
        "hydra.yaml",
        "workload: ppo\nsubmission_id: job-hydra\ncode_id: fakeverl\ntotal_training_steps: 2\n",
    );
    ctx.argus()
        .profile(&j.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    let dir = j.shared.join("jobs/job-hydra");
    let config = std::fs::read_to_string(dir.join("hydra/.hydra/config.yaml"))
        .expect("Hydra's run directory is under jobs/<id>/hydra");
    assert!(
        config.contains("default_local_dir: /mnt/shared/jobs/job-hydra/checkpoints"),
        "{config}"
    );
    assert!(dir.join("hydra/.hydra/overrides.yaml").is_file());
    let log = std::fs::read_to_string(dir.join("logs/driver.log")).expect("driver.log");
    assert!(log.contains("HYDRA_APP_RAN"), "{log}");
    assert!(dir.join("work").is_dir());
}
