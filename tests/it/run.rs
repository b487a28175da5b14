//! `argus run`: the quickstart from a clean state, replay from its lock, refusal on drift;
//! runs killed at a test point in each stage and finished by running them again, a run
//! that has ended not run again, two runs of one JobSpec at once making one job, and bad
//! input leaving nothing behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, entry_names, free_port, poll, read_json, test_profile};
use crate::hub::{Olah, tiny_model};

/// Copies the shipped quickstart (JobSpec, code, sample) so a test may change it.
pub(crate) fn quickstart_copy(ctx: &TestContext) -> PathBuf {
    let dir = ctx.path("jobs");
    copy_tree(
        Path::new("profiles/jobs/quickstart"),
        &dir.join("quickstart"),
    );
    std::fs::copy("profiles/jobs/quickstart.yaml", dir.join("quickstart.yaml"))
        .expect("copy jobspec");
    dir.join("quickstart.yaml")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn the_quickstart_runs_from_scratch_replays_and_refuses_drift() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let olah = Olah::start(&ctx.path("olah"));
    tiny_model(&olah.mirrors, "acme/tiny", 5000);
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &format!(
            "{}env: {{HF_ENDPOINT: \"{}\"}}\n",
            test_profile(&name, &shared, free_port(), 2, ""),
            olah.endpoint
        ),
    );
    let quickstart = quickstart_copy(&ctx);

    // From a clean state: no containers, an empty shared root.
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--json"])
        .arg_path(&quickstart)
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let stages: Vec<&str> = report["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter_map(|s| s["stage"].as_str())
        .collect();
    assert_eq!(
        stages,
        ["up", "prepare", "snapshot", "submit", "wait", "collect"]
    );
    // A cold up says where its seconds went: containers started and Ray ready take time,
    // and the parts fit within the stage.
    let up = &report["stages"][0];
    let parts: Vec<(&str, f64)> = up["parts"]
        .as_array()
        .expect("up's parts")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name"),
                p["seconds"].as_f64().expect("s"),
            )
        })
        .collect();
    assert_eq!(
        parts.iter().map(|p| p.0).collect::<Vec<_>>(),
        ["image", "containers", "ray_ready"],
        "{up:#}"
    );
    assert!(parts[1].1 > 0.0 && parts[2].1 > 0.0, "{up:#}");
    let sum: f64 = parts.iter().map(|p| p.1).sum();
    assert!(
        sum <= up["seconds"].as_f64().expect("seconds") + 1e-6,
        "{up:#}"
    );
    assert_eq!(report["stage"], "done");
    let driver_log = std::fs::read_to_string(report["driver_log"].as_str().expect("driver_log"))
        .expect("driver.log");
    assert!(
        driver_log.contains("quickstart OK")
            && driver_log.contains("train rows: 64, test rows: 16"),
        "{driver_log}"
    );
    assert!(Path::new(report["checkpoints"].as_str().expect("checkpoints")).is_dir());
    let lock_path = PathBuf::from(report["lock"].as_str().expect("lock"));
    let lock: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&lock_path).expect("lock")).expect("yaml");
    assert!(
        lock["image"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("sha256:")),
        "{lock:#?}"
    );
    assert_eq!(lock["ray_version"], "2.51.1");
    assert_eq!(lock["code"]["name"], "quickstart");
    assert_eq!(lock["code"]["tree_hash"].as_str().map(str::len), Some(64));
    assert_eq!(lock["datasets"][0]["name"], "gsm8k");
    assert_eq!(
        lock["datasets"][0]["files"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(lock["jobspec"]["workload"], "custom");
    assert_eq!(lock["profile"]["name"], name.as_str());
    assert!(lock_path.with_file_name("report.json").is_file());

    // Replaying with the lock succeeds.
    let lock_arg = lock_path.display().to_string();
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock", &lock_arg])
        .run()
        .code(0);

    // That replay has ended: a new one is asked for with --new. One file of the code
    // source changed: refused, named.
    let marker = quickstart.with_file_name("quickstart/code/marker.py");
    let original = std::fs::read_to_string(&marker).expect("marker");
    std::fs::write(&marker, "MARKER = \"changed\"\n").expect("change code");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--new", "--lock", &lock_arg])
        .run()
        .code(1)
        .stderr_has("drifted")
        .stderr_has("code ")
        .stderr_has("the tree hash is");
    std::fs::write(&marker, original).expect("restore code");

    // The refused replay is resumed by the next one. One byte of the dataset changed:
    // refused, named (before prepare could repair it).
    let train = shared.join("common/datasets/gsm8k/train.parquet");
    let bytes = std::fs::read(&train).expect("train");
    let mut changed = bytes.clone();
    let middle = changed.len() / 2;
    changed[middle] ^= 0xff;
    std::fs::write(&train, &changed).expect("change dataset");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock", &lock_arg])
        .run()
        .code(1)
        .stderr_has("dataset gsm8k/train.parquet: sha256 is");
    std::fs::write(&train, bytes).expect("restore dataset");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock", &lock_arg])
        .run()
        .code(0);

    // A run with a model from the mirror; then the model's ref moves: refused, named.
    let with_model = quickstart.with_file_name("with-model.yaml");
    let text = std::fs::read_to_string(&quickstart).expect("jobspec").replace("entrypoint: python3 -m quickstart", "model_id: acme/tiny\nentrypoint: python3 -c \"import os; print('model at', os.environ['ARGUS_MODEL_PATH'])\"");
    std::fs::write(&with_model, text).expect("jobspec with model");
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--json"])
        .arg_path(&with_model)
        .run()
        .code(0)
        .json();
    let log = std::fs::read_to_string(report["driver_log"].as_str().expect("driver_log"))
        .expect("driver.log");
    assert!(
        log.contains("model at /mnt/shared/common/hf/hub/models--acme--tiny/snapshots/"),
        "{log}"
    );
    let model_lock = report["lock"].as_str().expect("lock").to_string();
    let lock: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&model_lock).expect("lock")).expect("yaml");
    assert_eq!(lock["model"]["repo"], "acme/tiny");
    assert_eq!(lock["model"]["files"].as_array().map(Vec::len), Some(6));
    std::fs::write(
        shared.join("common/hf/hub/models--acme--tiny/refs/main"),
        "0000000000000000000000000000000000000000",
    )
    .expect("move ref");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock", &model_lock])
        .run()
        .code(1)
        .stderr_has(
            "model acme/tiny@main: the cache's ref is 0000000000000000000000000000000000000000",
        );
    // --allow-drift runs anyway and records the drift.
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--json", "--allow-drift", "--lock", &model_lock])
        .run()
        .code(0)
        .json();
    assert!(
        report["drift"][0]
            .as_str()
            .is_some_and(|d| d.starts_with("model acme/tiny@main")),
        "{report:#}"
    );

    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}

/// A cluster of one head and one worker, and a copy of the quickstart to run on it.
struct Quick {
    ctx: TestContext,
    profile: PathBuf,
    shared: PathBuf,
    jobspec: PathBuf,
}

impl Quick {
    /// The quickstart on a fresh small cluster, in a Docker test's context (`None`: skipped).
    fn start() -> Option<Quick> {
        let mut ctx = TestContext::docker()?;
        let name = ctx.cluster("c");
        let shared = ctx.path("shared");
        let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
        let jobspec = quickstart_copy(&ctx);
        Some(Quick {
            ctx,
            profile,
            shared,
            jobspec,
        })
    }

    fn argus(&self) -> crate::harness::Argus {
        self.ctx.argus().profile(&self.profile)
    }

    /// `argus run --json` of the JobSpec, with `extra` flags.
    fn run(&self, extra: &[&str]) -> crate::harness::Run {
        self.argus()
            .args(["run", "--json"])
            .args(extra)
            .arg_path(&self.jobspec)
            .run()
    }

    /// Starts `argus run` of the JobSpec and returns once it paused at the test point
    /// `point` (it waits there until killed, or until the returned file is removed).
    fn paused_at(&self, point: &str, extra: &[&str]) -> (std::process::Child, PathBuf) {
        let name = format!("tp-{}", point.replace(':', "-"));
        let tp = self.ctx.path(&name);
        let said = self.ctx.path(&format!("{name}.stderr"));
        let out = self.ctx.path(&format!("{name}.stdout"));
        let mut child = self
            .argus()
            .env("ARGUS_TESTPOINT", point)
            .env("ARGUS_TESTPOINT_FILE", &tp)
            .args(["run"])
            .args(extra)
            .arg_path(&self.jobspec)
            .spawn_to(&out, &said);
        poll(
            &format!("argus run to reach {point}"),
            Duration::from_secs(400),
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "argus run ended ({status}) before it reached {point}:\n{}",
                        std::fs::read_to_string(&said).unwrap_or_default()
                    );
                }
                tp.exists().then_some(())
            },
        );
        (child, tp)
    }

    /// The run directories under `runs/`.
    fn runs(&self) -> Vec<String> {
        entry_names(&self.shared.join("runs"))
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .collect()
    }

    fn report(&self, run_id: &str) -> Value {
        read_json(&self.shared.join("runs").join(run_id).join("report.json"))
    }

    /// The submission ids of the jobs Ray knows (`argus job list`, source cluster).
    fn jobs_on_cluster(&self) -> Vec<String> {
        let list = self
            .argus()
            .args(["job", "list", "--json"])
            .run()
            .code(0)
            .json();
        let mut ids: Vec<String> = list
            .as_array()
            .expect("job list")
            .iter()
            .filter(|j| {
                j["source"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("cluster"))
            })
            .filter_map(|j| j["submission_id"].as_str().map(str::to_string))
            .collect();
        ids.sort();
        ids
    }

    /// The job records argus keeps under `jobs/`.
    fn job_records(&self) -> Vec<String> {
        entry_names(&self.shared.join("jobs"))
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .collect()
    }

    /// A run that ended SUCCEEDED with its whole record: report done, lock pinning the job,
    /// the driver's log collected.
    #[track_caller]
    fn assert_complete(&self, report: &Value) {
        assert_eq!(report["stage"], "done", "{report:#}");
        assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
        let lock: Value = serde_yaml::from_str(
            &std::fs::read_to_string(report["lock"].as_str().expect("lock")).expect("lock file"),
        )
        .expect("lock yaml");
        assert_eq!(lock["submission_id"], report["submission_id"], "{lock:#?}");
        assert_eq!(lock["run_id"], report["run_id"]);
        assert_eq!(lock["code"]["name"], "quickstart");
        assert_eq!(
            lock["datasets"][0]["files"].as_array().map(Vec::len),
            Some(2)
        );
        let log = std::fs::read_to_string(report["driver_log"].as_str().expect("driver_log"))
            .expect("driver.log");
        assert!(log.contains("quickstart OK"), "{log}");
        let leftovers: Vec<_> = std::fs::read_dir(self.shared.join("common/code/quickstart"))
            .expect("code")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "snapshot leftovers: {leftovers:?}");
    }
}

fn sigkill(mut child: std::process::Child) {
    child.kill().expect("SIGKILL");
    let _ = child.wait();
}

/// Killed at the start of `stage`, before its job was submitted: running it again resumes
/// the same run and ends it with one job.
fn killed_before_its_job_was_submitted(stage: &str) {
    let Some(quick) = Quick::start() else {
        return;
    };
    let (child, _) = quick.paused_at(&format!("run:{stage}"), &[]);
    let runs = quick.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(quick.report(&runs[0])["stage"], stage);
    sigkill(child);

    let run = quick.run(&[]).code(0).stderr_has("resuming run");
    let report = run.json();
    assert_eq!(report["run_id"], runs[0].as_str(), "{report:#}");
    assert_eq!(report["resumed"], 1);
    quick.assert_complete(&report);
    assert_eq!(quick.runs(), runs);
    let id = report["submission_id"].as_str().expect("submission_id");
    assert_eq!(quick.jobs_on_cluster(), [id]);
    assert_eq!(quick.job_records(), [id]);
    quick.argus().args(["down"]).run().code(0);
}

#[test]
fn a_run_killed_in_up_is_finished_by_running_it_again() {
    killed_before_its_job_was_submitted("up");
}

#[test]
fn a_run_killed_in_prepare_is_finished_by_running_it_again() {
    killed_before_its_job_was_submitted("prepare");
}

#[test]
fn a_run_killed_in_snapshot_is_finished_by_running_it_again() {
    killed_before_its_job_was_submitted("snapshot");
}

#[test]
fn a_run_killed_in_submit_is_finished_by_running_it_again() {
    killed_before_its_job_was_submitted("submit");
}

#[test]
fn a_run_killed_while_its_job_runs_attaches_to_that_job() {
    let Some(quick) = Quick::start() else {
        return;
    };
    let (child, _) = quick.paused_at("run:wait", &[]);
    let runs = quick.runs();
    let first = quick.report(&runs[0]);
    let id = first["submission_id"]
        .as_str()
        .expect("submitted before wait")
        .to_string();
    assert_eq!(quick.jobs_on_cluster(), [id.as_str()]);
    sigkill(child);

    let report = quick
        .run(&[])
        .code(0)
        .stderr_has(&format!("job {id} was already submitted"))
        .json();
    assert_eq!(report["run_id"], runs[0].as_str());
    assert_eq!(report["submission_id"], id.as_str());
    let submit = report["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|s| s["stage"] == "submit")
        .expect("submit stage");
    assert!(
        submit["note"]
            .as_str()
            .is_some_and(|n| n.contains("attached")),
        "{report:#}"
    );
    quick.assert_complete(&report);
    assert_eq!(quick.jobs_on_cluster(), [id.as_str()]);
    assert_eq!(quick.job_records(), [id.as_str()]);
    assert_eq!(quick.runs(), runs);
    quick.argus().args(["down"]).run().code(0);
}

#[test]
fn a_run_killed_after_ray_took_its_job_but_before_argus_recorded_it_adopts_the_job() {
    let Some(quick) = Quick::start() else {
        return;
    };
    let (child, _) = quick.paused_at("submit:posted", &[]);
    let runs = quick.runs();
    let id = runs[0].clone();
    assert_eq!(quick.jobs_on_cluster(), [id.as_str()]);
    assert!(quick.job_records().is_empty());
    sigkill(child);

    let report = quick
        .run(&[])
        .code(0)
        .stderr_has("argus never recorded it")
        .json();
    assert_eq!(report["submission_id"], id.as_str());
    quick.assert_complete(&report);
    assert_eq!(quick.jobs_on_cluster(), [id.as_str()]);
    assert_eq!(quick.job_records(), [id.as_str()]);
    let record = read_json(&quick.shared.join("jobs").join(&id).join("job.json"));
    assert_eq!(record["status"], "SUCCEEDED", "{record:#}");
    quick.argus().args(["down"]).run().code(0);
}

#[test]
fn a_finished_run_is_not_run_again_unless_new() {
    let Some(quick) = Quick::start() else {
        return;
    };
    // A job that fails, so the exit code says whose it is.
    std::fs::write(
        &quick.jobspec,
        "workload: custom\ncode: {source: quickstart/code, name: quickstart}\nentrypoint: python3 -c \"import sys; print('failing on purpose'); sys.exit(7)\"\n",
    )
    .expect("jobspec");
    let first = quick.run(&[]).code(1).json();
    assert_eq!(first["job_status"], "FAILED", "{first:#}");
    let id = first["submission_id"].as_str().expect("id").to_string();

    let again = quick
        .run(&[])
        .code(1)
        .stderr_has(&format!(
            "run {} already finished: job {id} FAILED",
            first["run_id"].as_str().expect("run_id")
        ))
        .stderr_has("report.json");
    assert_eq!(again.json()["run_id"], first["run_id"]);
    assert_eq!(quick.jobs_on_cluster(), [id.as_str()]);
    assert_eq!(quick.runs().len(), 1);

    let new = quick.run(&["--new"]).code(1).json();
    assert_ne!(new["run_id"], first["run_id"]);
    let second = new["submission_id"].as_str().expect("id").to_string();
    assert_ne!(second, id);
    let mut both = vec![id, second];
    both.sort();
    assert_eq!(quick.jobs_on_cluster(), both);
    assert_eq!(quick.runs().len(), 2);
    quick.argus().args(["down"]).run().code(0);
}

#[test]
fn two_runs_of_one_jobspec_at_once_make_one_job() {
    let Some(quick) = Quick::start() else {
        return;
    };
    // The first holds the run's lock, paused before it submits.
    let (mut first, tp) = quick.paused_at("run:submit", &[]);
    let said = quick.ctx.path("second.stderr");
    let out = quick.ctx.path("second.stdout");
    let mut second = quick
        .argus()
        .args(["run"])
        .arg_path(&quick.jobspec)
        .spawn_to(&out, &said);
    let text = poll(
        "the second run to wait for the first",
        Duration::from_secs(120),
        || {
            let text = std::fs::read_to_string(&said).unwrap_or_default();
            text.contains("waiting for the run of").then_some(text)
        },
    );
    assert!(
        text.contains(&format!("pid {}", first.id())),
        "the message names the holder: {text}"
    );
    std::fs::remove_file(&tp).expect("let the first go on");

    let status = first.wait().expect("first");
    assert_eq!(status.code(), Some(0));
    let status = second.wait().expect("second");
    let text = std::fs::read_to_string(&said).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("already finished"), "{text}");
    let runs = quick.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(quick.jobs_on_cluster(), [runs[0].as_str()]);
    quick.argus().args(["down"]).run().code(0);
}

#[test]
fn bad_input_leaves_nothing_under_runs() {
    let ctx = TestContext::new("runbad");
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&ctx.prefix, &shared, free_port(), 1, ""),
    );
    let quickstart = quickstart_copy(&ctx);
    let text = std::fs::read_to_string(&quickstart).expect("jobspec");
    let cases = [
        (
            "unknown-key.yaml",
            format!("{text}colour: blue\n"),
            "colour",
        ),
        (
            "no-source.yaml",
            text.replace("quickstart/code", "quickstart/absent"),
            "is not a directory",
        ),
        (
            "no-data.yaml",
            text.replace("quickstart/gsm8k-sample", "quickstart/absent"),
            "data_from",
        ),
    ];
    for (file, yaml, says) in cases {
        let path = quickstart.with_file_name(file);
        std::fs::write(&path, yaml).expect("jobspec");
        ctx.argus()
            .profile(&profile)
            .args(["run"])
            .arg_path(&path)
            .run()
            .code(2)
            .stderr_has(says);
        assert!(!shared.join("runs").exists(), "{file} wrote runs/");
    }
    let lock = ctx.write("future.lock.yaml", "format: 2\nrun_id: r\ncreated: t\nargus_version: '9'\nimage: {reference: i, id: i}\nray_version: '9'\nprofile: {}\njobspec: {}\ncode: {name: n, code_id: c, tree_hash: h}\nsubmission_id: s\n");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock"])
        .arg_path(&lock)
        .run()
        .code(2)
        .stderr_has("a run lock of format 2");
    assert!(!shared.join("runs").exists());
}

/// A GPU image is never built on the way (about 5 GB): `run` on a profile naming an absent
/// one stops before anything starts and says the command that builds it.
#[test]
fn an_absent_gpu_image_is_named_with_the_command_that_builds_it() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let image = "argus/verl:0.9.1-gpu-ray2.59.0";
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &shared, free_port(), 1, "")
            .replace("image: argus/ray:2.51.1", &format!("image: {image}")),
    );
    let quickstart = quickstart_copy(&ctx);
    ctx.argus()
        .profile(&profile)
        .args(["run"])
        .arg_path(&quickstart)
        .run()
        .code(2)
        .stderr_has(&format!("{image} is absent"))
        .stderr_has("argus image build --verl --verl-version 0.9.1 --gpu --ray-version 2.59.0");
    assert!(ctx.cluster_containers(&name).is_empty());
}
