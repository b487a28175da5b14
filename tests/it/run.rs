//! `argus run`: the quickstart from a clean state, replay from its lock, refusal on drift,
//! and runs killed in each stage finished by running them again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, ensure_image, free_port, test_profile};
use crate::hub::{Olah, tiny_model};

/// Copies the shipped quickstart (JobSpec, code, sample) so a test may change it.
fn quickstart_copy(ctx: &TestContext) -> PathBuf {
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

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default()).unwrap_or(Value::Null)
}

#[test]
fn the_quickstart_runs_from_scratch_replays_and_refuses_drift() {
    if TestContext::skip_docker("the_quickstart_runs_from_scratch_replays_and_refuses_drift") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("runquick");
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

    // One file of the code source changed: refused, named.
    let marker = quickstart.with_file_name("quickstart/code/marker.py");
    let original = std::fs::read_to_string(&marker).expect("marker");
    std::fs::write(&marker, "MARKER = \"changed\"\n").expect("change code");
    ctx.argus()
        .profile(&profile)
        .args(["run", "--lock", &lock_arg])
        .run()
        .code(1)
        .stderr_has("drifted")
        .stderr_has("code ")
        .stderr_has("the tree hash is");
    std::fs::write(&marker, original).expect("restore code");

    // One byte of the dataset changed: refused, named (before prepare could repair it).
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

/// Newest run report under `runs/`.
fn newest_report(shared: &Path) -> Value {
    let runs = shared.join("runs");
    let newest = std::fs::read_dir(&runs)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .max();
    newest
        .map(|p| read_json(&p.join("report.json")))
        .unwrap_or(Value::Null)
}

#[test]
fn a_run_killed_in_any_stage_is_finished_by_running_it_again() {
    if TestContext::skip_docker("a_run_killed_in_any_stage_is_finished_by_running_it_again") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("runkill");
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    let quickstart = quickstart_copy(&ctx);
    let order = [
        "up", "prepare", "snapshot", "submit", "wait", "collect", "done",
    ];
    let mut hit = Vec::new();
    for target in ["up", "prepare", "snapshot", "submit", "wait"] {
        // Give prepare and snapshot something to do.
        let _ = std::fs::remove_dir_all(shared.join("common/datasets/gsm8k"));
        let _ = std::fs::remove_dir_all(shared.join("common/code/quickstart"));
        let runs_before = std::fs::read_dir(shared.join("runs"))
            .map(|d| d.count())
            .unwrap_or(0);
        let mut child = ctx
            .argus()
            .profile(&profile)
            .args(["run"])
            .arg_path(&quickstart)
            .spawn();
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        let reached = loop {
            let count = std::fs::read_dir(shared.join("runs"))
                .map(|d| d.count())
                .unwrap_or(0);
            let stage = if count > runs_before {
                newest_report(&shared)["stage"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            } else {
                String::new()
            };
            let position = order.iter().position(|s| *s == stage);
            let wanted = order.iter().position(|s| *s == target);
            if position >= wanted && position.is_some() {
                break stage;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the run never reached {target}"
            );
            if child.try_wait().ok().flatten().is_some() {
                break "exited".to_string();
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        child.kill().expect("kill");
        let _ = child.wait();
        if reached == target {
            hit.push(target);
        }
        // Running it again finishes the job, without any cleanup by hand.
        let report = ctx
            .argus()
            .profile(&profile)
            .args(["run", "--json"])
            .arg_path(&quickstart)
            .run()
            .code(0)
            .json();
        assert_eq!(
            report["job_status"], "SUCCEEDED",
            "after a kill in {reached}: {report:#}"
        );
        let leftovers: Vec<_> = std::fs::read_dir(shared.join("common/code/quickstart"))
            .expect("code")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "snapshot leftovers after a kill in {reached}"
        );
    }
    for long in ["up", "submit", "wait"] {
        assert!(
            hit.contains(&long),
            "the {long} stage was never interrupted: {hit:?}"
        );
    }
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}
