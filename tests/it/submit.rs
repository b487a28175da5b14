//! `argus submit` and `argus job ...`: dry runs and bad input without a cluster, then the
//! old tool's acceptance test and the job lifecycle on a real Ray cluster.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, docker, ensure_image, free_port, poll, test_profile};

/// A profile whose shared storage is in the context's temp dir, on `port`.
fn profile_at(ctx: &mut TestContext, port: u16, workers: u32) -> (String, PathBuf, PathBuf) {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, port, workers, ""));
    (name, shared, profile)
}

/// A snapshot carrying verl-shaped configs (the keys the example jobspecs use).
fn verl_shaped_snapshot(ctx: &TestContext, profile: &Path) {
    let src = ctx.path("verl-src");
    let config = src.join("verl/trainer/config");
    std::fs::create_dir_all(config.join("model")).expect("mkdir");
    std::fs::create_dir_all(config.join("optim")).expect("mkdir");
    std::fs::write(
        config.join("ppo_trainer.yaml"),
        "data:\n  train_files: x\n  val_files: x\n  train_batch_size: 1\n  max_prompt_length: 1\n  max_response_length: 1\nactor_rollout_ref:\n  model:\n    path: x\n  actor:\n    optim:\n      lr: 1\n    ppo_mini_batch_size: 1\n    use_kl_loss: false\n    kl_loss_coef: 0\n  rollout:\n    name: x\n    n: 1\n    gpu_memory_utilization: 0.5\n    tensor_model_parallel_size: 1\ncritic:\n  model:\n    path: x\n  optim:\n    lr: 1\nalgorithm:\n  adv_estimator: gae\ntrainer:\n  nnodes: 1\n  n_gpus_per_node: 1\n  total_training_steps: null\n  save_freq: 1\n  test_freq: 1\n  default_local_dir: x\n  logger: [console]\n  project_name: x\n  experiment_name: x\n",
    )
    .expect("write");
    std::fs::write(
        config.join("sft_trainer_engine.yaml"),
        "defaults:\n  - model@model: hf_model\n  - optim@optim: fsdp\n  - _self_\ndata:\n  train_files: x\n  val_files: x\n  messages_key: messages\n  micro_batch_size_per_gpu: 1\ntrainer:\n  device: cuda\n  nnodes: 1\n  n_gpus_per_node: 1\n  total_training_steps: 1\n  save_freq: 1\n  default_local_dir: x\n  logger: console\n",
    )
    .expect("write");
    std::fs::write(config.join("model/hf_model.yaml"), "path: x\n").expect("write");
    std::fs::write(config.join("optim/fsdp.yaml"), "lr: 1\n").expect("write");
    ctx.argus()
        .profile(profile)
        .args(["snapshot", "--code-id", "verl-snapshot-id"])
        .arg_path(&src)
        .run()
        .code(0);
}

#[test]
fn dry_run_payloads_of_the_example_jobspecs() {
    let mut ctx = TestContext::new("dryrun");
    let (_name, _shared, profile) = profile_at(&mut ctx, 8265, 1);
    verl_shaped_snapshot(&ctx, &profile);
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
    verl_shaped_snapshot(&ctx, &profile);
    ctx.argus()
        .profile(&profile)
        .args([
            "submit",
            "--dry-run",
            "--set",
            "overrides.trainer.save_frq=5",
        ])
        .arg_path(Path::new("profiles/jobs/ppo.yaml"))
        .run()
        .code(2)
        .stderr_has("override `trainer.save_frq` is not a key of verl's config")
        .stderr_has("did you mean `trainer.save_freq`?");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--set", "overrides.+new.key=1"])
        .arg_path(Path::new("profiles/jobs/ppo.yaml"))
        .run()
        .code(0)
        .stdout_has("+new.key=1");
    ctx.argus()
        .profile(&profile)
        .args([
            "submit",
            "--dry-run",
            "--no-check",
            "--set",
            "overrides.trainer.save_frq=5",
        ])
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
    assert!(
        !shared.join("jobs").exists()
            || std::fs::read_dir(shared.join("jobs"))
                .expect("jobs")
                .count()
                == 0
    );
}

#[test]
fn unreachable_ray_is_exit_4_after_bounded_retries() {
    let mut ctx = TestContext::new("noray");
    let (_name, shared, profile) = profile_at(&mut ctx, free_port(), 1);
    let spec = ctx.write(
        "j.yaml",
        "workload: custom\ncode_path: /x\nentrypoint: echo hi\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(4)
        .stderr_has("cannot reach the Ray dashboard")
        .stderr_has("hint: is the cluster up?");
    assert!(
        !shared.join("jobs").exists()
            || std::fs::read_dir(shared.join("jobs"))
                .expect("jobs")
                .flatten()
                .next()
                .is_none()
    );
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
        "workload: custom\ncode_path: /x\nentrypoint: echo hi\nsubmission_id: tb-1\n",
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

/// The old tool's acceptance test, then stop, follow, time limit, interop, duplicates and
/// records that outlive the cluster, all on one real Ray cluster.
#[test]
fn jobs_on_a_real_cluster() {
    if TestContext::skip_docker("jobs_on_a_real_cluster") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("jobs");
    let port = free_port();
    let (name, shared, profile) = profile_at(&mut ctx, port, 2);
    let dashboard = format!("http://127.0.0.1:{port}");
    ctx.argus().profile(&profile).args(["up"]).run().code(0);

    // Two snapshots whose marker module differs.
    for (id, marker) in [("codeA", "marker-alpha"), ("codeB", "marker-beta")] {
        let src = ctx.path(id);
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::write(src.join("marker.py"), format!("MARKER = {marker:?}\n")).expect("write");
        ctx.argus()
            .profile(&profile)
            .args(["snapshot", "--code-id", id])
            .arg_path(&src)
            .run()
            .code(0);
    }
    let print_marker = "python3 -c \"import marker; print('MARKER=' + marker.MARKER)\"";
    let mut worker_ids = Vec::new();
    let status = ctx
        .argus()
        .profile(&profile)
        .args(["status", "--json"])
        .run()
        .code(0)
        .json();
    let head_id = status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["is_head_node"] == true)
        .expect("head")["node_id"]
        .clone();
    for n in status["nodes"].as_array().expect("nodes") {
        if n["is_head_node"] == false {
            worker_ids.push(n["node_id"].clone());
        }
    }
    for (id, code, mine, other) in [
        ("job-a", "codeA", "marker-alpha", "marker-beta"),
        ("job-b", "codeB", "marker-beta", "marker-alpha"),
    ] {
        let spec = job(&ctx, id, code, print_marker);
        ctx.argus()
            .profile(&profile)
            .args(["submit", "--wait"])
            .arg_path(&spec)
            .run()
            .code(0)
            .stderr_has(&format!("job {id} SUCCEEDED"));
        let logs = ctx
            .argus()
            .profile(&profile)
            .args(["job", "logs", id])
            .run()
            .code(0)
            .stdout;
        assert!(
            logs.contains(&format!("MARKER={mine}")) && !logs.contains(other),
            "{id}: {logs}"
        );
        let status = ctx
            .argus()
            .profile(&profile)
            .args(["job", "status", id, "--json"])
            .run()
            .code(0)
            .json();
        let driver = &status["job"]["driver_node_id"];
        assert!(
            worker_ids.contains(driver) && *driver != head_id,
            "{id} ran on {driver}, workers {worker_ids:?}, head {head_id}"
        );
        // The artifacts.
        let dir = shared.join("jobs").join(id);
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

    // A duplicate id is refused and the existing job's files are untouched.
    let before = std::fs::read(shared.join("jobs/job-a/job.json")).expect("record");
    let spec = job(&ctx, "job-a", "codeA", "echo again");
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("submission id job-a is already used");
    assert_eq!(
        std::fs::read(shared.join("jobs/job-a/job.json")).expect("record"),
        before
    );

    // logs --follow streams lines as they are printed and returns when the job ends.
    let slow = "python3 -u -c \"import time\nfor i in range(4): print('tick', i, flush=True); time.sleep(2)\"";
    let spec = ctx.write(
        "slow.yaml",
        &format!(
            "workload: custom\nsubmission_id: job-slow\ncode_id: codeA\nentrypoint: |-\n  {}\n",
            slow.replace('\n', "\n  ")
        ),
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
        .args(["-p"])
        .arg(&profile)
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
    let status = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "job-slow", "--json"])
        .run()
        .json();
    assert_eq!(
        status["job"]["status"], "RUNNING",
        "the first line arrived while the job was still running"
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("tick 3")), "{rest:?}");
    assert!(follower.wait().expect("wait").success());

    // stop: a long job is stopped; its status is STOPPED and the exit code says so.
    let spec = job(&ctx, "job-long", "codeA", "sleep 300");
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    poll("job-long to run", Duration::from_secs(60), || {
        (ctx.argus()
            .profile(&profile)
            .args(["job", "status", "job-long", "--json"])
            .run()
            .json()["job"]["status"]
            == "RUNNING")
            .then_some(())
    });
    ctx.argus()
        .profile(&profile)
        .args(["job", "stop", "job-long", "--wait"])
        .run()
        .code(3)
        .stderr_has("STOPPED");
    ctx.argus()
        .profile(&profile)
        .args(["job", "wait", "job-long"])
        .run()
        .code(3);

    // time_limit: --wait stops the job once it is exceeded and records why.
    let spec = ctx.write("limited.yaml", "workload: custom\nsubmission_id: job-limited\ncode_id: codeA\nentrypoint: sleep 300\ntime_limit: 3s\n");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(3);
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join("jobs/job-limited/job.json")).expect("record"),
    )
    .expect("json");
    assert_eq!(record["status"], "STOPPED");
    assert_eq!(record["stopped_by_argus"], "time_limit 3s exceeded");

    // A failing job exits 1.
    let spec = job(
        &ctx,
        "job-fail",
        "codeA",
        "python3 -c 'raise SystemExit(7)'",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(1)
        .stderr_has("job job-fail FAILED");

    // Interop: Ray's own CLI sees argus's job, and argus lists a job Ray's CLI submitted.
    let head = format!("{name}-head");
    let ray_status = docker(&[
        "exec",
        &head,
        "ray",
        "job",
        "status",
        "--address",
        &dashboard,
        "job-a",
    ]);
    assert!(ray_status.contains("succeeded"), "{ray_status}");
    let submitted = docker(&[
        "exec",
        &head,
        "ray",
        "job",
        "submit",
        "--address",
        &dashboard,
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
        .profile(&profile)
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

    // The records outlive the cluster: after down (and up again) argus still knows the jobs.
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
    let status = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "job-a", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(status["job"]["status"], "SUCCEEDED");
    assert_eq!(status["from_cluster"], false);
    ctx.argus()
        .profile(&profile)
        .args(["job", "logs", "job-a"])
        .run()
        .code(0)
        .stdout_has("MARKER=marker-alpha");
    ctx.argus().profile(&profile).args(["up"]).run().code(0);
    let list = ctx
        .argus()
        .profile(&profile)
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
    for id in [
        "job-a",
        "job-b",
        "job-slow",
        "job-long",
        "job-limited",
        "job-fail",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
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
