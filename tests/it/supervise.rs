//! Supervised runs (`restart:`), on the training scenarios' real Ray cluster with the
//! stand-in verl (its log lines and checkpoint layout are verl's): a worker container
//! killed, a hang, a failure that repeats, a half-written checkpoint, Ctrl-C. The same on
//! real verl is in verl.rs.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{docker, poll, read_json};
use crate::training::Training;

/// A supervised PPO run of the stand-in: `total` steps, a checkpoint every 2.
fn spec(t: &Training, id: &str, total: u32, extra: &str) -> PathBuf {
    t.ctx.write(
        &format!("{id}.yaml"),
        &format!(
            "workload: ppo\nsubmission_id: {id}\ncode_id: fakeverl\nmodel_id: /mnt/shared/models/none\ntrain_file: /mnt/shared/models/none/config.json\nval_file: /mnt/shared/models/none/config.json\ntotal_training_steps: {total}\nsave_freq: 2\n{extra}"
        ),
    )
}

/// The report of the one run whose first job is `id`.
fn report_of(t: &Training, id: &str) -> Option<Value> {
    std::fs::read_dir(t.shared.join("runs"))
        .ok()?
        .flatten()
        .map(|d| read_json(&d.path().join("report.json")))
        .find(|r| r["attempts"][0]["submission_id"] == id)
}

fn attempts(report: &Value) -> Vec<Value> {
    report["attempts"].as_array().cloned().unwrap_or_default()
}

/// The steps of the run's metrics (`job metrics` of its last job reads the attempts as
/// one run).
fn steps_of(t: &Training, last: &str) -> Vec<u64> {
    let csv = t
        .argus(&["job", "metrics", last, "--csv", "--keys", "actor/pg_loss"])
        .code(0)
        .stdout;
    csv.lines()
        .skip(1)
        .filter(|l| !l.ends_with(','))
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .collect()
}

fn checkpoint(t: &Training, id: &str, step: u32) -> PathBuf {
    t.shared
        .join(format!("jobs/{id}/checkpoints/global_step_{step}"))
}

/// kill -9 of the worker at step 3: detected as a lost node (exit 137), the cluster made
/// whole again, the run resumed from global_step_2 (global_step_4, half-written when the
/// worker died, passed over) and finished: steps 1..6 each once. The stand-in's actor
/// holds a GPU, so it runs on the worker, as verl's do.
pub fn a_killed_worker_is_recovered_from_the_last_complete_checkpoint(t: &Training) {
    let id = "sup-kill";
    let path = spec(
        t,
        id,
        6,
        "env_vars: {FAKE_STEP_SLEEP: \"2.5\", FAKE_GPUS: \"1\"}\nrestart: {max: 2, backoff: 0s}\n",
    );
    let out = t.ctx.path("sup-kill.out");
    let err = t.ctx.path("sup-kill.err");
    let mut run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .spawn_to(&out, &err);
    let marker = t.shared.join(format!(
        "jobs/{id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    poll("global_step_4", Duration::from_secs(180), || {
        (std::fs::read_to_string(&marker).ok()?.trim() == "4").then_some(())
    });
    // global_step_4 as a rank that died mid-save leaves it: the tracker names it, one
    // shard is missing.
    std::fs::remove_file(checkpoint(t, id, 4).join("actor/optim_world_size_1_rank_0.pt"))
        .expect("a shard");
    let worker = t
        .ctx
        .cluster_containers(&t.name)
        .into_iter()
        .find(|n| n.contains("gpu"))
        .expect("a worker container");
    docker(&["kill", "-s", "KILL", &worker]);
    let status = run.wait().expect("run");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    eprintln!("{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
        .unwrap_or_else(|_| panic!("the report as JSON; stderr: {stderr}"));
    let all = attempts(&report);
    assert_eq!(all.len(), 2, "{report:#}");
    assert_eq!(all[0]["cause"], "node_lost", "{report:#}");
    let detail = all[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&worker) && detail.contains("137"),
        "the lost container and its exit code: {detail}"
    );
    assert_eq!(all[1]["submission_id"], format!("{id}-attempt-2"));
    assert_eq!(all[1]["resumed_from"]["step"], 2, "{report:#}");
    let skipped = all[1]["resumed_from"]["skipped"].to_string();
    assert!(
        skipped.contains("4"),
        "global_step_4 passed over: {skipped}"
    );
    assert_eq!(all[1]["status"], "SUCCEEDED");
    assert!(all[0]["steps_lost"].as_u64().expect("steps lost") <= 2);
    assert!(all[1]["recovery"]["repair_s"].as_f64().is_some());
    assert_eq!(report["job_status"], "SUCCEEDED");
    assert_eq!(report["submission_id"], format!("{id}-attempt-2"));
    // job status names the run and the attempt, and the job it continues.
    let status = t
        .argus(&["job", "status", &format!("{id}-attempt-2")])
        .code(0)
        .stdout;
    assert!(
        status.contains(&format!(
            "{}, attempt 2",
            report["run_id"].as_str().unwrap_or("?")
        )) && status
            .lines()
            .any(|l| l.starts_with("resumes") && l.trim_end().ends_with(id)),
        "{status}"
    );
    // The worker is back, running.
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &worker]).trim(),
        "true"
    );
    let first = std::fs::read_to_string(t.shared.join(format!("jobs/{id}/job.json")));
    let log = std::fs::read_dir(t.shared.join(format!("jobs/{id}/logs")))
        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    assert_eq!(
        steps_of(t, &format!("{id}-attempt-2")),
        (1..=6).collect::<Vec<_>>(),
        "{report:#}\n{first:?}\n{log:?}"
    );
}

/// A job that stops printing steps while RUNNING is a hang: seen within hang_after (+ the
/// poll), stopped, and resumed (the stand-in hangs once per checkpoint directory).
pub fn a_hang_is_detected_and_restarted(t: &Training) {
    let id = "sup-hang";
    let path = spec(
        t,
        id,
        4,
        "env_vars: {FAKE_STEP_SLEEP: \"0.3\", FAKE_HANG_AFTER: \"3\"}\nrestart: {max: 1, on: [hang], hang_after: 15s, backoff: 0s}\n",
    );
    let mut run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .spawn();
    let hung = t.shared.join(format!("jobs/{id}/checkpoints/hung"));
    poll("the stand-in to hang", Duration::from_secs(180), || {
        hung.exists().then_some(())
    });
    // hang_after + 30 s.
    poll("the hang to be seen", Duration::from_secs(45), || {
        let report = report_of(t, id)?;
        (attempts(&report).first()?["cause"] == "hang").then_some(())
    });
    assert_eq!(run.wait().expect("run").code(), Some(0));
    let report = report_of(t, id).expect("report");
    let all = attempts(&report);
    assert_eq!(all.len(), 2, "{report:#}");
    assert_eq!(all[0]["status"], "STOPPED", "argus stopped the hung job");
    assert!(
        all[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no new training step"),
        "{report:#}"
    );
    assert_eq!(all[1]["resumed_from"]["step"], 2);
    assert_eq!(
        steps_of(t, &format!("{id}-attempt-2")),
        (1..=4).collect::<Vec<_>>()
    );
}

/// A failure that repeats: restarted `max` times, every attempt recorded with verl's
/// error, then the run gives up with the last attempt's exit code (FAILED: 1).
pub fn a_repeated_failure_gives_up_after_max(t: &Training) {
    let id = "sup-fail";
    let path = spec(
        t,
        id,
        4,
        "env_vars: {FAKE_STEP_SLEEP: \"0.1\", FAKE_FAIL_AT: \"1\"}\n",
    );
    let run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json", "--restart", "2", "--restart-backoff", "0s"])
        .arg_path(&path)
        .run();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("giving up"), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    let all = attempts(&report);
    assert_eq!(all.len(), 3, "{report:#}");
    for (n, a) in all.iter().enumerate() {
        assert_eq!(a["n"], n + 1);
        assert_eq!(a["status"], "FAILED");
        assert_eq!(a["cause"], "failed");
        assert!(
            a["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("ValueError: FAKE_FAIL_AT"),
            "verl's error, not a generic one: {a:#}"
        );
    }
    assert_eq!(report["job_status"], "FAILED");
}

/// Ctrl-C stops the job and says how to go on; `argus run` again resumes the same run as
/// its next attempt, from the checkpoint.
pub fn ctrl_c_stops_the_run_and_a_second_run_resumes_it(t: &Training) {
    let id = "sup-int";
    let path = spec(
        t,
        id,
        6,
        "env_vars: {FAKE_STEP_SLEEP: \"1\"}\nrestart: {max: 1, backoff: 0s}\n",
    );
    let out = t.ctx.path("sup-int.out");
    let err = t.ctx.path("sup-int.err");
    let run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run"])
        .arg_path(&path)
        .spawn_to(&out, &err);
    let marker = t.shared.join(format!(
        "jobs/{id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    poll("global_step_2", Duration::from_secs(180), || {
        (std::fs::read_to_string(&marker).ok()?.trim() == "2").then_some(())
    });
    let pid = run.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = wait_child(run);
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(status, Some(3), "{stderr}");
    assert!(stderr.contains("resumes the run"), "{stderr}");
    let report = report_of(t, id).expect("report");
    assert_ne!(report["stage"], "done");
    assert_eq!(attempts(&report)[0]["status"], "STOPPED");
    let again = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let report: Value = serde_json::from_str(&again.stdout).expect("json");
    let all = attempts(&report);
    assert_eq!(all.len(), 2, "{report:#}");
    assert!(all[0]["cause"].is_null(), "an interrupt is not a failure");
    assert!(all[1]["resumed_from"]["step"].as_u64() >= Some(2));
    assert_eq!(
        steps_of(t, &format!("{id}-attempt-2")),
        (1..=6).collect::<Vec<_>>()
    );
}

/// A second `argus run` of a run being supervised follows it (no second supervisor, no
/// second job) and ends with its outcome.
pub fn a_second_run_follows_the_supervisor(t: &Training) {
    let id = "sup-follow";
    let path = spec(
        t,
        id,
        4,
        "env_vars: {FAKE_STEP_SLEEP: \"1.5\"}\nrestart: {max: 1}\n",
    );
    let first = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .spawn();
    poll(
        "the first run to supervise",
        Duration::from_secs(180),
        || {
            report_of(t, id)
                .filter(|r| r["stage"] == "wait")
                .map(|_| ())
        },
    );
    let second = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .run();
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains("is supervised by"),
        "{}",
        second.stderr
    );
    let followed: Value = serde_json::from_str(&second.stdout).expect("json");
    assert_eq!(wait_child(first), Some(0));
    let report = report_of(t, id).expect("report");
    assert_eq!(followed["run_id"], report["run_id"]);
    assert_eq!(followed["job_status"], "SUCCEEDED");
    assert_eq!(
        attempts(&report).len(),
        1,
        "one supervisor, one job: {report:#}"
    );
}

/// The Ray head killed: nothing of the job can be stopped through Ray, so its remnants go
/// with the cluster's containers; the cluster comes back and the run resumes from the
/// newest complete checkpoint. Each step is in the metrics at most once, and a step the
/// remnants trained after the head died but that no log kept is named as unlogged.
pub fn a_killed_head_takes_the_cluster_down_and_up_and_resumes(t: &Training) {
    let id = "sup-head";
    let path = spec(
        t,
        id,
        8,
        "env_vars: {FAKE_STEP_SLEEP: \"2\", FAKE_GPUS: \"1\"}\nrestart: {max: 1, backoff: 0s}\n",
    );
    let out = t.ctx.path("sup-head.out");
    let err = t.ctx.path("sup-head.err");
    let mut run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run", "--json"])
        .arg_path(&path)
        .spawn_to(&out, &err);
    let marker = t.shared.join(format!(
        "jobs/{id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    poll("global_step_2", Duration::from_secs(180), || {
        (std::fs::read_to_string(&marker).ok()?.trim() == "2").then_some(())
    });
    // The actor's lines reach the driver's log through Ray, a moment after it printed them.
    poll("the step:2 line", Duration::from_secs(60), || {
        let logs = t.argus(&["job", "logs", id]);
        logs.stdout.contains("step:2 - ").then_some(())
    });
    let head = format!("{}-head", t.name);
    docker(&["kill", "-s", "KILL", &head]);
    let status = run.wait().expect("run");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the Ray head is gone"), "{stderr}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default()).expect("json");
    let all = attempts(&report);
    assert_eq!(all.len(), 2, "{report:#}");
    assert_eq!(all[0]["cause"], "node_lost");
    assert!(
        all[1]["resumed_from"]["step"].as_u64() >= Some(2),
        "{report:#}"
    );
    let log = std::fs::read_to_string(t.shared.join(format!("jobs/{id}/logs/driver.log")))
        .unwrap_or_default();
    // What streamed before the head died is kept (Ray's copy died with it).
    assert!(!log.is_empty(), "the streamed log was kept");
    let mut steps = steps_of(t, &format!("{id}-attempt-2"));
    let unlogged: Vec<u64> = all[0]["unlogged_steps"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    steps.extend(unlogged);
    steps.sort();
    assert_eq!(steps, (1..=8).collect::<Vec<_>>(), "{report:#}");
}

fn wait_child(mut child: std::process::Child) -> Option<i32> {
    child.wait().expect("wait").code()
}
