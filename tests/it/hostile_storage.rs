//! A hostile or damaged shared storage (issue 26 items 8 and 10): records are input. A
//! `resumes` that is a path, symbolic links planted at `jobs/`, `runs/`, a job's
//! `logs/driver.log`, `.argus/locks` or `common/datasets/<name>`, a driver log that is not
//! UTF-8, a `job.json` cut short. Each bad entry is one clear error (exit 2) that names
//! it, and nothing is written, inside the storage or outside it. No Docker, no Ray.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::harness::{Run, TestContext, free_port, poll, test_profile};

/// A profile whose cluster is not running (its dashboard port has no listener) and whose
/// shared storage is `<tmp>/shared`, plus a directory outside it (`<tmp>/outside`).
fn world(test: &str) -> (TestContext, PathBuf, PathBuf, PathBuf) {
    let mut ctx = TestContext::new(test);
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&shared).expect("shared");
    std::fs::create_dir_all(&outside).expect("outside");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    (ctx, profile, shared, outside)
}

/// Every entry below `dir` as (kind, content or link target), links not followed: what
/// a test compares before and after a command to tell that nothing was written.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let rel = path.strip_prefix(dir).expect("below").to_path_buf();
            let what = if meta.file_type().is_symlink() {
                format!(
                    "link {}",
                    std::fs::read_link(&path).expect("link").display()
                )
            } else if meta.is_dir() {
                todo.push(path);
                "dir".to_string()
            } else {
                format!(
                    "file {:?}",
                    String::from_utf8_lossy(&std::fs::read(&path).expect("read"))
                )
            };
            out.insert(rel, what);
        }
    }
    out
}

fn argus(ctx: &TestContext, profile: &Path, args: &[&str]) -> Run {
    ctx.argus().profile(profile).args(args).run()
}

/// A job's record as `argus submit` leaves it once the job ended, with `extra` fields.
fn record(shared: &Path, id: &str, extra: serde_json::Value) {
    let dir = shared.join("jobs").join(id);
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    let mut json = serde_json::json!({
        "submission_id": id, "workload": "ppo", "code_id": "c", "code_path": "/mnt/shared/common/code/verl/c",
        "entrypoint": "python3 -m verl.trainer.main_ppo trainer.total_training_steps=4",
        "cluster": "gone", "dashboard": "", "submitted_at": "2026-01-01T00:00:00Z",
        "status": "SUCCEEDED", "start_time": 1_000_000, "end_time": 1_090_000,
    });
    if let (Some(map), Some(more)) = (json.as_object_mut(), extra.as_object()) {
        map.extend(more.clone());
    }
    std::fs::write(dir.join("job.json"), json.to_string()).expect("record");
}

const LOG: &str = "(TaskRunner pid=1) Total training steps: 4\n(TaskRunner pid=1) step:1 - critic/score/mean:0.1\n";

/// One clear error, exit 2, naming what was refused.
fn refused(run: Run, says: &[&str]) -> Run {
    let run = run.code(2);
    for text in says {
        assert!(run.stderr.contains(text), "{text:?} not in {}", run.stderr);
    }
    assert_eq!(
        run.stderr.matches("error: ").count(),
        1,
        "one error: {}",
        run.stderr
    );
    run
}

#[test]
fn a_resumes_that_is_a_path_is_a_corrupt_record_never_joined() {
    let (ctx, profile, shared, outside) = world("resumespath");
    // What `../..` and `/etc` would reach if they were joined below jobs/.
    record(&shared, "j-up", serde_json::json!({"resumes": "../.."}));
    record(&shared, "j-abs", serde_json::json!({"resumes": "/etc"}));
    for id in ["j-up", "j-abs"] {
        std::fs::write(shared.join("jobs").join(id).join("logs/driver.log"), LOG).expect("log");
    }
    let plot = ctx.path("plot.png");
    let (before, outside_before) = (tree(&shared), tree(&outside));
    for id in ["j-up", "j-abs"] {
        let plot = plot.display().to_string();
        for args in [
            vec!["job", "metrics", id],
            vec!["job", "status", id],
            vec!["job", "plot", id, "-o", &plot],
        ] {
            let run = refused(
                argus(&ctx, &profile, &args),
                &["corrupt record", "job.json", "invalid submission id"],
            );
            assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
        }
    }
    assert_eq!(tree(&shared), before, "nothing changed on the storage");
    assert_eq!(tree(&outside), outside_before);
    assert!(!plot.exists());
}

#[test]
fn links_planted_at_jobs_runs_or_a_driver_log_are_refused_not_followed() {
    let (ctx, profile, shared, outside) = world("linkedjobs");
    // Outside: a job and a run that look like argus's, and a secret.
    record(&outside, "j-1", serde_json::json!({}));
    std::fs::write(outside.join("jobs/j-1/logs/driver.log"), "SECRET-OUTSIDE\n").expect("log");
    std::fs::create_dir_all(outside.join("runs/r-1")).expect("run");
    std::fs::write(
        outside.join("runs/r-1/report.json"),
        r#"{"run_id": "r-1", "submission_id": "j-1", "stage": "done", "stages": [], "seconds": 0}"#,
    )
    .expect("report");
    std::fs::write(outside.join("secret.log"), "SECRET-OUTSIDE\n").expect("secret");
    std::os::unix::fs::symlink(outside.join("jobs"), shared.join("jobs")).expect("jobs link");
    std::os::unix::fs::symlink(outside.join("runs"), shared.join("runs")).expect("runs link");
    let (before, outside_before) = (tree(&shared), tree(&outside));

    let jobs_link = shared.join("jobs").display().to_string();
    for args in [
        &["job", "list"][..],
        &["job", "status", "j-1"],
        &["job", "logs", "j-1"],
        &["job", "metrics", "j-1"],
    ] {
        let run = refused(
            argus(&ctx, &profile, args),
            &[&jobs_link, "is a symbolic link", "does not follow links"],
        );
        assert!(!run.stdout.contains("SECRET"), "{args:?}: {}", run.stdout);
    }
    let runs_link = shared.join("runs").display().to_string();
    refused(
        argus(&ctx, &profile, &["run", "--resume", "r-1"]),
        &[&runs_link, "is a symbolic link"],
    );
    assert_eq!(tree(&shared), before);
    assert_eq!(tree(&outside), outside_before, "nothing written outside");

    // A job's own driver log a link to a file outside.
    std::fs::remove_file(shared.join("jobs")).expect("unlink");
    record(&shared, "j-2", serde_json::json!({}));
    let log = shared.join("jobs/j-2/logs/driver.log");
    std::os::unix::fs::symlink(outside.join("secret.log"), &log).expect("log link");
    let before = tree(&shared);
    let log = log.display().to_string();
    for args in [&["job", "logs", "j-2"][..], &["job", "metrics", "j-2"]] {
        let run = refused(argus(&ctx, &profile, args), &[&log, "is a symbolic link"]);
        assert!(!run.stdout.contains("SECRET"), "{args:?}: {}", run.stdout);
    }
    assert_eq!(tree(&shared), before);
    assert_eq!(tree(&outside), outside_before);
}

#[test]
fn links_planted_at_the_locks_or_a_dataset_stop_prepare_before_it_writes() {
    let (ctx, profile, shared, outside) = world("linkedprep");
    let from = ctx.path("raw");
    std::fs::create_dir_all(&from).expect("raw");
    std::fs::create_dir_all(shared.join(".argus")).expect(".argus");
    let locks = shared.join(".argus/locks");
    std::os::unix::fs::symlink(&outside, &locks).expect("locks link");
    let prepare = |ctx: &TestContext| {
        ctx.argus()
            .profile(&profile)
            .args(["prepare", "--dataset", "gsm8k", "--from"])
            .arg_path(&from)
            .run()
    };
    let (before, outside_before) = (tree(&shared), tree(&outside));
    refused(
        prepare(&ctx),
        &[&locks.display().to_string(), "is a symbolic link"],
    );
    assert_eq!(tree(&shared), before, "nothing made on the storage");
    assert_eq!(tree(&outside), outside_before, "no lock made outside");

    std::fs::remove_file(&locks).expect("unlink");
    std::fs::create_dir_all(shared.join("common/datasets")).expect("datasets");
    let dataset = shared.join("common/datasets/gsm8k");
    std::os::unix::fs::symlink(&outside, &dataset).expect("dataset link");
    let before = tree(&shared);
    refused(
        prepare(&ctx),
        &[&dataset.display().to_string(), "is a symbolic link"],
    );
    assert_eq!(tree(&shared), before);
    assert_eq!(tree(&outside), outside_before);
}

/// The race a check-then-use path walk loses: `prepare` holds its lock, then
/// `.argus/locks` is swapped for a link to a directory outside the storage. The lock's
/// heartbeat and release go on in the directory it was taken in (held open), and nothing
/// is made, written or removed outside.
#[test]
fn a_lock_directory_swapped_for_a_link_while_held_is_never_followed() {
    let (ctx, profile, shared, outside) = world("swappedlock");
    let from = ctx.path("raw");
    std::fs::create_dir_all(&from).expect("raw");
    let tp = ctx.path("testpoint");
    let mut child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "prepare:locked")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&from)
        .spawn_to(&ctx.path("out"), &ctx.path("err"));
    poll(
        "prepare to hold its lock",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    let locks = shared.join(".argus/locks");
    let moved = ctx.path("moved-locks");
    std::fs::rename(&locks, &moved).expect("move the locks away");
    std::os::unix::fs::symlink(&outside, &locks).expect("plant the link");
    let outside_before = tree(&outside);
    assert!(
        std::fs::read_dir(&moved)
            .expect("moved")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("prepare-")),
        "the lock is held in the moved directory"
    );
    std::fs::remove_file(&tp).expect("let prepare go on");
    child.wait().expect("prepare ends");
    assert_eq!(
        tree(&outside),
        outside_before,
        "nothing made or removed outside"
    );
    let left: Vec<_> = std::fs::read_dir(&moved)
        .expect("moved")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "released where it was taken: {left:?}");
}

#[test]
fn a_saved_driver_log_that_is_not_utf8_is_shown() {
    let (ctx, profile, shared, _outside) = world("nonutf8log");
    record(&shared, "j-bytes", serde_json::json!({}));
    std::fs::write(
        shared.join("jobs/j-bytes/logs/driver.log"),
        b"caf\xe9 au lait\nstep:1 - a:1\n",
    )
    .expect("log");
    let run = argus(&ctx, &profile, &["job", "logs", "j-bytes"]).code(0);
    assert_eq!(run.stdout, "caf\u{fffd} au lait\nstep:1 - a:1\n");
    assert!(
        run.stderr.contains("the cluster no longer has this job"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("cannot write"), "{}", run.stderr);
}

#[test]
fn a_truncated_record_is_named_corrupt_and_still_listed() {
    let (ctx, profile, shared, _outside) = world("cutrecord");
    record(&shared, "j-ok", serde_json::json!({}));
    record(&shared, "j-cut", serde_json::json!({}));
    let path = shared.join("jobs/j-cut/job.json");
    let text = std::fs::read_to_string(&path).expect("record");
    std::fs::write(&path, &text[..text.len() / 2]).expect("cut");
    let before = tree(&shared);

    refused(
        argus(&ctx, &profile, &["job", "status", "j-cut"]),
        &[
            &format!("corrupt record {}", path.display()),
            "EOF while parsing",
        ],
    );
    let run = argus(&ctx, &profile, &["job", "list"]).code(0);
    let line = |id: &str| {
        run.stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not listed: {}", run.stdout))
            .to_string()
    };
    assert!(line("j-cut").contains("UNREADABLE"), "{}", run.stdout);
    assert!(line("j-ok").contains("SUCCEEDED"), "{}", run.stdout);
    assert!(run.stderr.contains("corrupt record"), "{}", run.stderr);
    let json = argus(&ctx, &profile, &["job", "list", "--json"])
        .code(0)
        .json();
    let ids: Vec<&str> = json
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|j| j["submission_id"].as_str())
        .collect();
    assert_eq!(ids, ["j-cut", "j-ok"]);
    assert_eq!(tree(&shared), before, "nothing changed on the storage");
}

/// A profile whose engine does not answer (a closed port): `argus run` creates its run and
/// stops at `up` (exit 4), without Docker. The shared storage is `shared`.
fn unreachable_profile(ctx: &mut TestContext, shared: &Path) -> PathBuf {
    let name = ctx.cluster("gone");
    ctx.write(
        "gone.yaml",
        &format!(
            "name: {name}\nimage: {}\ndocker: {{host: 'tcp://127.0.0.1:{}'}}\nshared: {{host_path: {}}}\nworkers: [{{name: g, count: 1}}]\n",
            crate::harness::IMAGE,
            free_port(),
            shared.display()
        ),
    )
}

/// `runs/<id>/report.json` is input: a planted run of the same JobSpec, ended SUCCEEDED,
/// whose job id is a path (`../../x`), is a clear error naming the report (exit 2), not a
/// finished run (exit 0) whose job argus would go on to read, watch or stop.
#[test]
fn a_planted_report_whose_job_id_is_a_path_is_refused_naming_it() {
    let (mut ctx, _, shared, _) = world("plantrep");
    let profile = unreachable_profile(&mut ctx, &shared);
    std::fs::create_dir_all(shared.join("code")).expect("code");
    std::fs::write(shared.join("code/main.py"), "print(1)\n").expect("code");
    let job = ctx.write(
        "job.yaml",
        "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 -c pass\n",
    );
    let job = job.to_str().expect("utf-8 path");
    // The first run is created, then stops at `up`: its report carries the JobSpec's key.
    argus(&ctx, &profile, &["run", job]).code(4);
    let runs: Vec<PathBuf> = std::fs::read_dir(shared.join("runs"))
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let first = crate::harness::read_json(&runs[0].join("report.json"));
    let key = first["key"].as_str().expect("key");
    // A newer run of that key, done, SUCCEEDED, its job id a path.
    let planted = shared.join("runs/run-planted");
    std::fs::create_dir_all(&planted).expect("planted");
    let report = serde_json::json!({
        "run_id": "run-planted", "key": key, "started_at": "2099-01-01T00:00:00.000Z",
        "resumed": 0, "stage": "done", "stages": [], "submission_id": "../../x",
        "job_status": "SUCCEEDED", "job_message": null, "driver_log": null,
        "checkpoints": null, "lock": null, "replay_of": null, "drift": [], "seconds": 1.0,
    });
    std::fs::write(planted.join("report.json"), report.to_string()).expect("plant");
    refused(
        argus(&ctx, &profile, &["run", job]),
        &[
            "runs/run-planted/report.json",
            "invalid submission id \"../../x\"",
        ],
    );
}

/// A model path is checked one way by `submit` and `doctor`: a model directory linked out
/// of the shared storage, and a `model_id` with `..`, are refused by `submit --dry-run`
/// (exit 2) and are failures of doctor's `model_cache`, with the same words.
#[test]
fn a_model_path_linked_out_or_climbing_is_refused_by_submit_and_doctor_alike() {
    let (mut ctx, _, shared, outside) = world("modelpath");
    let profile = unreachable_profile(&mut ctx, &shared);
    std::fs::create_dir_all(outside.join("m")).expect("outside model");
    std::fs::write(outside.join("m/config.json"), "{}").expect("config");
    std::fs::create_dir_all(shared.join("models/real")).expect("models");
    std::fs::write(shared.join("models/real/config.json"), "{}").expect("config");
    std::os::unix::fs::symlink(outside.join("m"), shared.join("models/linked")).expect("link");
    let climbing = format!("/mnt/shared/models/real/../../../{}/m", outside.display());
    let cases = [
        ("/mnt/shared/models/linked", "symbolic link"),
        (climbing.as_str(), "would leave its directory"),
    ];
    let job = |model: &str| {
        let path = ctx.write(
            "model-job.yaml",
            &format!("workload: custom\ncode_path: /mnt/shared/code\nmodel_id: \"{model}\"\nentrypoint: python3 -c pass\n"),
        );
        path.to_str().expect("utf-8 path").to_string()
    };
    let model_cache = |spec: &str| {
        let run = argus(&ctx, &profile, &["--json", "doctor", spec]);
        let report = run.json();
        report["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|h| h["host"] == "cluster")
            .flat_map(|h| h["checks"].as_array().cloned().unwrap_or_default())
            .find(|c| c["name"] == "model_cache")
            .unwrap_or_else(|| panic!("no model_cache check: {report:#}"))
    };
    for (model, says) in cases {
        let spec = job(model);
        let submit = refused(
            argus(&ctx, &profile, &["submit", "--dry-run", &spec]),
            &[says],
        );
        let check = model_cache(&spec);
        assert_eq!(check["status"], "fail", "{model}: {check:#}");
        let seen = check["seen"].as_str().unwrap_or_default();
        assert!(seen.contains(says), "{model}: {seen}");
        assert!(
            submit.stderr.contains(seen),
            "the same words: {seen} / {}",
            submit.stderr
        );
    }
    // The real directory passes both.
    let spec = job("/mnt/shared/models/real");
    argus(&ctx, &profile, &["submit", "--dry-run", &spec]).code(0);
    assert_eq!(model_cache(&spec)["status"], "ok");
}

/// Checkpoints that are all incomplete: `submit --resume` says why each `global_step_<n>/`
/// was passed over, never that there is none (exit 2, nothing submitted or written).
#[test]
fn a_resume_says_why_each_checkpoint_was_passed_over() {
    let (ctx, profile, shared, _) = world("resumeincomplete");
    record(&shared, "j-inc", serde_json::json!({"status": "FAILED"}));
    let checkpoints = shared.join("jobs/j-inc/checkpoints");
    // Step 4: the tracker names it, but its data.pt never arrived; step 2: nothing saved.
    std::fs::create_dir_all(checkpoints.join("global_step_4/actor")).expect("mkdir");
    std::fs::write(
        checkpoints.join("global_step_4/actor/model_world_size_1_rank_0.pt"),
        "x",
    )
    .expect("shard");
    std::fs::create_dir_all(checkpoints.join("global_step_2")).expect("mkdir");
    std::fs::write(checkpoints.join("latest_checkpointed_iteration.txt"), "4").expect("tracker");
    let before = tree(&shared);
    let run = refused(
        argus(&ctx, &profile, &["submit", "--resume", "j-inc"]),
        &[
            "job j-inc has no checkpoint to resume from: no checkpoint in ",
            "global_step_4/ passed over: ",
            "global_step_2/ passed over: ",
        ],
    );
    assert!(
        !run.stderr.contains("no global_step_<n>/ and no"),
        "{}",
        run.stderr
    );
    assert_eq!(tree(&shared), before, "nothing written");
    // No directory at all is still said as such.
    record(&shared, "j-none", serde_json::json!({"status": "FAILED"}));
    refused(
        argus(&ctx, &profile, &["submit", "--resume", "j-none"]),
        &["has no global_step_<n>/ and no latest_checkpointed_iteration.txt"],
    );
}
