//! Failure bundles and their triage (`argus job diagnose`, and `argus run` by itself), on a
//! real 3-node Ray cluster (a head and two workers) of the project's image: a job whose
//! actor fails to import a module on a worker, a worker's task OOM-killed by the kernel
//! under the container's memory limit, no secret value anywhere in a bundle, the bundle's
//! bounds; and bad ids refused before anything is written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use argus::secrets;

use crate::harness::{Profile, TestContext, free_port, read_json};

/// The job: a driver that places an actor or a task on the worker container `DIAG_NODE`
/// (its hostname), both printing the secrets they were given, then fails as its argument
/// says (`actor-import`: the actor's constructor imports a module that does not exist;
/// `oom`: the task allocates far past the container's memory limit).
const DIAG_PY: &str = r#"
import os
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

mode = sys.argv[1]
ray.init()
print("driver secrets:", os.environ.get("DIAG_SECRET_TOKEN"), os.environ.get("DIAG_JOB_PASSWORD"), flush=True)
# The way programs print a string: JSON (ASCII-only and not), Python's repr, shell-quoted.
import json, shlex  # noqa: E401
pw = os.environ.get("DIAG_JOB_PASSWORD", "")
print("driver printed:", json.dumps(pw), json.dumps(pw, ensure_ascii=False), repr(pw), shlex.quote(pw), {"pw": pw}, flush=True)
target = os.environ["DIAG_NODE"]
node = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerHostname"] == target]
assert node, f"no node {target}: {[n['NodeManagerHostname'] for n in ray.nodes()]}"
where = NodeAffinitySchedulingStrategy(node[0]["NodeID"], soft=False)


@ray.remote(num_cpus=0, max_retries=0)
def work():
    print("task on", os.uname().nodename, flush=True)
    blocks = []
    for _ in range(64):
        blocks.append(b"\x01" * (256 << 20))
    return len(blocks)


@ray.remote(num_cpus=0, max_restarts=0)
class Worker:
    def __init__(self):
        print("actor on", os.uname().nodename, flush=True)
        print("secrets:", os.environ.get("DIAG_SECRET_TOKEN"), os.environ.get("DIAG_JOB_PASSWORD"), flush=True)
        import argus_diag_missing_module  # noqa: F401

    def ping(self):
        return 1


@ray.remote(num_cpus=0, max_restarts=0)
class Holder:
    def hold(self):
        print("holding on", os.uname().nodename, flush=True)
        import time
        time.sleep(600)


if mode == "actor-import":
    ray.get(Worker.options(scheduling_strategy=where).remote().ping.remote())
elif mode == "hold":
    ray.get(Holder.options(scheduling_strategy=where).remote().hold.remote())
else:
    ray.get(work.options(scheduling_strategy=where).remote())
"#;

/// The cluster the scenarios share.
struct Diag {
    ctx: TestContext,
    profile: PathBuf,
    shared: PathBuf,
    name: String,
    /// The secret values given to the profile's env and to the JobSpec's env_vars.
    profile_secret: String,
    job_secret: String,
}

impl Diag {
    fn up() -> Option<Diag> {
        let mut ctx = TestContext::docker()?;
        let name = ctx.cluster("c");
        let shared = ctx.path("shared");
        let profile_secret = format!("prof-{}-s3cret", ctx.prefix);
        // A quote, a backslash and a non-ASCII letter: each way of printing it differs.
        let job_secret = format!("job-{}-s3\"cr\\é't", ctx.prefix);
        // Ray's memory monitor off: the kernel, not Ray, kills what outgrows a container.
        let profile = Profile::small(&name)
            .shared(&shared)
            .port(free_port())
            .workers(2)
            .env("RAY_memory_monitor_refresh_ms", "0")
            .env("DIAG_SECRET_TOKEN", &profile_secret)
            .write(&ctx, "p.yaml");
        let diag = Diag {
            ctx,
            profile,
            shared,
            name,
            profile_secret,
            job_secret,
        };
        diag.argus(&["up"]).code(0);
        diag.ctx.write("diag-src/diag.py", DIAG_PY);
        let src = diag.ctx.path("diag-src").display().to_string();
        diag.argus(&["snapshot", "--name", "diag", "--code-id", "diag-1", &src])
            .code(0);
        Some(diag)
    }

    fn argus(&self, args: &[&str]) -> crate::harness::Run {
        self.ctx.argus().profile(&self.profile).args(args).run()
    }

    /// The worker container `n` of the cluster.
    fn worker(&self, n: u32) -> String {
        format!("{}-gpu-{n}", self.name)
    }

    /// A custom JobSpec `<id>.yaml` running diag.py `mode` against worker `n`.
    fn spec(&self, id: &str, mode: &str, n: u32) -> PathBuf {
        self.ctx.write(
            &format!("{id}.yaml"),
            &format!(
                "workload: custom\nsubmission_id: {id}\ncode_id: diag-1\nentrypoint: python3 diag.py {mode}\nenv_vars:\n  DIAG_NODE: {}\n  DIAG_JOB_PASSWORD: {}\n",
                self.worker(n),
                serde_json::to_string(&self.job_secret).expect("a JSON string is YAML")
            ),
        )
    }

    fn bundle(&self, id: &str) -> PathBuf {
        self.shared.join(format!("jobs/{id}/diagnostics/1"))
    }
}

/// Every file below `dir`, as (path relative to `dir`, bytes).
fn files_below(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("below").display().to_string();
                out.push((rel, std::fs::read(&path).expect("read")));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn failure_bundles_on_a_real_cluster() {
    let Some(d) = Diag::up() else {
        return;
    };
    a_worker_import_error_under_run_is_bundled_and_named(&d);
    a_supervised_attempt_carries_its_diagnosis(&d);
    no_secret_value_is_in_any_bundle_file(&d);
    a_bundle_is_bounded_and_its_time_recorded(&d);
    a_killed_worker_is_named_and_its_logs_read_from_the_stopped_container(&d);
    an_oom_killed_worker_is_named_with_its_container(&d);
    d.argus(&["down"]).code(0);
}

/// (a) `argus run` of a job whose actor fails with ModuleNotFoundError on worker 1: the run
/// fails, collects the bundle by itself and names the cause and the worker's own log;
/// `job status` shows the line; `job diagnose` again finds the same.
fn a_worker_import_error_under_run_is_bundled_and_named(d: &Diag) {
    let id = "diag-import";
    let spec = d.spec(id, "actor-import", 1);
    let run = d
        .ctx
        .argus()
        .profile(&d.profile)
        .args(["run", "--json"])
        .arg_path(&spec)
        .run()
        .code(1);
    let report: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("the report ({e}): {}\n{}", run.stdout, run.stderr));
    let line = report["diagnosis"].as_str().expect("report.diagnosis");
    assert!(
        line.contains("ModuleNotFound") && line.contains("argus_diag_missing_module"),
        "{line}"
    );
    assert!(run.stderr.contains("diagnosis: "), "{}", run.stderr);
    let triage = read_json(&d.bundle(id).join("triage.json"));
    assert_eq!(triage["cause"], "import", "{triage:#}");
    let file = triage["file"].as_str().expect("file");
    let worker_log = format!("nodes/{}/ray/worker-", d.worker(1));
    assert!(
        file.starts_with(&worker_log) && file.ends_with(".err"),
        "the worker's own log: {file}"
    );
    let held = std::fs::read_to_string(d.bundle(id).join(file)).expect("the named file");
    let n = triage["line"].as_u64().expect("line") as usize;
    assert!(
        held.lines()
            .nth(n - 1)
            .unwrap_or_default()
            .contains("ModuleNotFoundError"),
        "line {n} of {file}:\n{held}"
    );
    for want in [
        "manifest.json",
        "driver.log",
        "profile.yaml",
        "jobspec.yaml",
        &format!("nodes/{}-head/state.json", d.name),
        &format!("nodes/{}-head/ray/gcs_server.out", d.name),
        &format!("nodes/{}/ray/raylet.out", d.worker(0)),
        &format!("nodes/{}/env.txt", d.worker(1)),
        &format!("nodes/{}/output.log", d.worker(1)),
    ] {
        assert!(d.bundle(id).join(want).is_file(), "{want} in the bundle");
    }
    let status = d.argus(&["job", "status", id]).code(0).stdout;
    assert!(
        status.lines().any(|l| l.starts_with("diagnosis")
            && l.contains("ModuleNotFound")
            && l.contains(file)),
        "{status}"
    );
    let again = d.argus(&["job", "diagnose", id, "--json"]).code(0).json();
    assert_eq!(again["triage"]["cause"], "import", "{again:#}");
    assert_eq!(again["triage"]["file"], file);
}

/// A supervised run (`restart:`, here none left to use): the failed attempt's bundle is
/// `diagnostics/<attempt>` of its job, its triage on the attempt in the run's report.
fn a_supervised_attempt_carries_its_diagnosis(d: &Diag) {
    let id = "diag-sup";
    let spec = d.spec(id, "actor-import", 0);
    let mut text = std::fs::read_to_string(&spec).expect("spec");
    text.push_str("restart: {max: 0, backoff: 0s}\n");
    std::fs::write(&spec, text).expect("spec");
    let run = d
        .ctx
        .argus()
        .profile(&d.profile)
        .args(["run", "--json"])
        .arg_path(&spec)
        .run()
        .code(1);
    let report: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("the report ({e}): {}\n{}", run.stdout, run.stderr));
    let attempt = &report["attempts"][0];
    assert_eq!(attempt["cause"], "failed", "{report:#}");
    let line = attempt["diagnosis"]
        .as_str()
        .expect("attempts[0].diagnosis");
    assert!(
        line.contains("ModuleNotFound")
            && line.contains(&format!("nodes/{}/ray/worker-", d.worker(0))),
        "{line}"
    );
    let triage = read_json(&d.bundle(id).join("triage.json"));
    assert_eq!(triage["cause"], "import", "{triage:#}");
}

/// (c) The profile's secret and the JobSpec's, printed by the driver and the actor, are in
/// no file of any bundle (env, logs, configs, manifest).
fn no_secret_value_is_in_any_bundle_file(d: &Diag) {
    let files = files_below(&d.shared.join("jobs/diag-import/diagnostics"));
    assert!(
        files.len() > 10,
        "{:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (path, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        for secret in [&d.profile_secret, &d.job_secret] {
            assert!(!text.contains(secret.as_str()), "{secret} in {path}");
        }
        // In no printed form either: each begins as the secret does.
        let start = format!("job-{}-s3", d.ctx.prefix);
        assert!(
            !text.contains(&start),
            "a printed form of the job's secret in {path}:\n{text}"
        );
    }
    let forms = files
        .iter()
        .filter(|(_, b)| {
            let text = String::from_utf8_lossy(b);
            text.lines()
                .any(|l| l.contains("driver printed:") && l.matches(secrets::REDACTED).count() >= 5)
        })
        .count();
    assert!(forms >= 1, "the driver's printed forms were there to hide");
    // They were there to be hidden: the actor and the driver printed them.
    let printed = files
        .iter()
        .filter(|(_, b)| String::from_utf8_lossy(b).contains("secrets: <redacted> <redacted>"))
        .count();
    assert!(
        printed >= 2,
        "the printed secrets are redacted where they were printed"
    );
    let env = files
        .iter()
        .find(|(p, _)| p.ends_with(&format!("{}/env.txt", d.worker(1))))
        .expect("env.txt");
    assert!(
        String::from_utf8_lossy(&env.1).contains("DIAG_SECRET_TOKEN=<redacted>"),
        "redacted by name"
    );
}

/// (d) Under 50 MB, the time it took in the manifest (and under 30 s), every file listed.
fn a_bundle_is_bounded_and_its_time_recorded(d: &Diag) {
    let bundle = d.bundle("diag-import");
    let manifest = read_json(&bundle.join("manifest.json"));
    let seconds = manifest["seconds"].as_f64().expect("seconds");
    assert!(seconds > 0.0 && seconds < 30.0, "{seconds}");
    let bytes: u64 = files_below(&bundle)
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum();
    assert!(bytes < 50_000_000, "{bytes}");
    eprintln!("bundle of a 3-node cluster: {bytes} bytes in {seconds:.2} s");
    let listed = manifest["files"].as_array().expect("files").len();
    // Every file but the manifest itself.
    assert_eq!(listed + 1, files_below(&bundle).len(), "{manifest:#}");
    assert_eq!(manifest["limits"]["total_bytes"].as_u64(), Some(48 << 20));
}

/// (b) A task allocating far past worker 0's 2 GiB limit: the kernel kills it, the job
/// fails, and the bundle names the OOM kill and the container.
fn an_oom_killed_worker_is_named_with_its_container(d: &Diag) {
    let id = "diag-oom";
    let spec = d.spec(id, "oom", 0);
    d.ctx
        .argus()
        .profile(&d.profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(1);
    let started = std::time::Instant::now();
    let out = d.argus(&["job", "diagnose", id, "--json"]).code(0).json();
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(out["triage"]["cause"], "oom_killed", "{out:#}");
    let summary = out["triage"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&d.worker(0)), "{summary}");
    assert!(
        out["line"]
            .as_str()
            .unwrap_or_default()
            .starts_with("OOM-killed: "),
        "{out:#}"
    );
    let state = read_json(
        &d.bundle(id)
            .join(format!("nodes/{}/state.json", d.worker(0))),
    );
    let events = state["state"]["events"].as_array().expect("events");
    assert!(events.iter().any(|e| e["action"] == "oom"), "{state:#}");
    let status = d.argus(&["job", "status", id]).code(0).stdout;
    assert!(status.contains("OOM-killed"), "{status}");
}

/// A worker container killed under a job (it stays exited): the bundle names the node that
/// died, and its Ray logs are still copied out of the stopped container.
fn a_killed_worker_is_named_and_its_logs_read_from_the_stopped_container(d: &Diag) {
    let id = "diag-kill";
    let spec = d.spec(id, "hold", 1);
    d.ctx
        .argus()
        .profile(&d.profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    crate::harness::poll("the actor holding", Duration::from_secs(120), || {
        let logs = d.argus(&["job", "logs", id]);
        logs.stdout.contains("holding on").then_some(())
    });
    crate::harness::docker(&["kill", "-s", "KILL", &d.worker(1)]);
    d.argus(&["job", "wait", id, "--timeout", "180"]).code(1);
    let out = d.argus(&["job", "diagnose", id, "--json"]).code(0).json();
    assert_eq!(out["triage"]["cause"], "node_died", "{out:#}");
    let summary = out["triage"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains(&d.worker(1)) && summary.contains("137"),
        "{summary}"
    );
    let raylet = d
        .bundle(id)
        .join(format!("nodes/{}/ray/raylet.out", d.worker(1)));
    let text = std::fs::read_to_string(&raylet).expect("the dead node's raylet.out");
    assert!(text.contains("(raylet)"), "{text}");
    let state = read_json(
        &d.bundle(id)
            .join(format!("nodes/{}/state.json", d.worker(1))),
    );
    assert_eq!(state["state"]["running"], false, "{state:#}");
}

/// (e) An id that is a path is bad input and nothing is written; an unknown id is named.
/// Neither reaches Docker or Ray.
#[test]
fn diagnose_refuses_a_path_id_and_names_an_unknown_one() {
    let ctx = TestContext::new("diagbad");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("jobs")).expect("mkdir");
    let profile = Profile::small("diagbad")
        .shared(&shared)
        .port(free_port())
        .write(&ctx, "p.yaml");
    let before = files_below(ctx.dir.path());
    for id in ["../../etc", "a/b", ".."] {
        let run = ctx
            .argus()
            .profile(&profile)
            .args(["job", "diagnose", id])
            .run()
            .code(2);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    ctx.argus()
        .profile(&profile)
        .args(["job", "diagnose", "no-such-job"])
        .run()
        .code(2)
        .stderr_has("argus has no record of job no-such-job")
        .stderr_has("hint: `argus job list`");
    assert_eq!(files_below(ctx.dir.path()), before, "nothing was written");
}
