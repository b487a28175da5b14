//! `argus slurm` end to end on a real Slurm (`crate::slurm_hosts`: slurm-wlm 22.05 on
//! emulated hosts, each with its own Docker Engine and 2 fake GPUs as GRES).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Profile, TestContext};
use crate::slurm_hosts::Slurm;

/// Slurm's KillWait for these tests: as on real clusters (30 s), so a node step has time to
/// remove its containers on a loaded machine before Slurm kills it (at 5 s it once did not).
const KILL_WAIT_S: u32 = 30;

/// What the job's driver runs: the ALIVE Ray nodes, then on every GPU node a task holding
/// one GPU that prints the devices its container was given.
const PROBE: &str = r#"
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
for n in nodes:
    print("NODE", n["NodeManagerAddress"], int(n["Resources"].get("GPU", 0)), flush=True)

@ray.remote(num_gpus=1)
def devices():
    return os.environ.get("NVIDIA_VISIBLE_DEVICES", "unset")

for n in nodes:
    if n["Resources"].get("GPU", 0) >= 1:
        strategy = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        print("GPU", n["NodeManagerAddress"], ray.get(devices.options(scheduling_strategy=strategy).remote()), flush=True)
if os.environ.get("PROBE_SLEEP"):
    import time
    time.sleep(float(os.environ["PROBE_SLEEP"]))
print("PROBE DONE", flush=True)
"#;

/// A profile for Slurm: NVIDIA workers (the hosts' engines have the stand-in hook), the
/// shared storage a path every emulated host sees.
fn profile(ctx: &mut TestContext) -> (PathBuf, PathBuf) {
    profile_with(ctx, "nvidia")
}

/// [`profile`] with the workers' `gpu_mode` (`simulated`: Ray's GPU resources only, what
/// a healthy cluster is on a machine without GPUs).
fn profile_with(ctx: &mut TestContext, gpu_mode: &str) -> (PathBuf, PathBuf) {
    let name = ctx.cluster("sl");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("code")).expect("shared");
    std::fs::write(shared.join("code/probe.py"), PROBE).expect("probe");
    let text = Profile::small(&name)
        .shared(&shared)
        .worker("gpus", "1")
        .worker("gpu_mode", gpu_mode)
        .yaml("slurm: {nodes: 3, gpus_per_node: 1}\n")
        .build();
    (ctx.write("profile.yaml", &text), shared)
}

fn jobspec(ctx: &TestContext, name: &str, env: &str) -> PathBuf {
    ctx.write(
        &format!("{name}.yaml"),
        &format!(
            "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 /mnt/shared/code/probe.py\n{env}"
        ),
    )
}

/// argus with the profile and the Slurm fixture's environment (SLURM_CONF, ...).
pub(crate) fn argus(ctx: &TestContext, slurm: &Slurm, profile: &Path) -> crate::harness::Argus {
    let mut argus = ctx.argus().profile(profile);
    for (key, value) in slurm.env() {
        argus = argus.env(&key, value);
    }
    argus
}

/// argus's containers on each host (name list), Slurm jobs' or not.
fn argus_containers(slurm: &Slurm, hosts: &[&str]) -> BTreeMap<String, Vec<String>> {
    hosts
        .iter()
        .map(|h| {
            let out = slurm.hosts().docker_ok(
                h,
                &[
                    "ps",
                    "-a",
                    "--filter",
                    "label=argus.cluster",
                    "--format",
                    "{{.Names}}",
                ],
            );
            (
                h.to_string(),
                out.lines().map(str::to_string).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, names)| !names.is_empty())
        .collect()
}

/// The lines of the probe: NODE <ip> <gpus>, GPU <ip> <devices>.
fn probe_lines<'a>(out: &'a str, kind: &str) -> BTreeMap<&'a str, &'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(kind)?.trim().split_once(' '))
        .collect()
}

#[test]
fn a_submitted_run_comes_up_on_three_nodes_with_slurms_gpus_and_leaves_nothing() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b", "c"], 2, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    // Another job holds GPU 0 on every node: argus's job must get index 1 everywhere.
    let holder = slurm.sbatch(&[
        "-N3",
        "--gres=gpu:1",
        &format!("--chdir={}", shared.display()),
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 600",
    ]);
    slurm.wait_state(&holder, &["RUNNING"], Duration::from_secs(30));

    let spec = jobspec(&ctx, "probe", "");
    let dry = argus(&ctx, &slurm, &profile)
        .args(["slurm", "submit", "--dry-run"])
        .arg_path(&spec)
        .run()
        .code(0)
        .stdout_has("#SBATCH --nodes=3")
        .stdout_has("#SBATCH --gres=gpu:1");
    assert!(dry.stdout.contains(" slurm run run-"), "{}", dry.stdout);

    let started = Instant::now();
    let run = argus(&ctx, &slurm, &profile)
        .args(["slurm", "submit", "--follow"])
        .arg_path(&spec)
        .run();
    eprintln!("measure: slurm submit --follow in {:?}", started.elapsed());
    let run = run.code(0);
    let out = format!("{}\n{}", run.stdout, run.stderr);
    assert!(out.contains("PROBE DONE"), "{out}");

    // Three ALIVE Ray nodes' worth of hosts, each at its host's address.
    let nodes = probe_lines(&out, "NODE");
    let ip = |h: &str| slurm.hosts().host(h).ip.to_string();
    let addresses: std::collections::BTreeSet<&str> = nodes.keys().copied().collect();
    let want: std::collections::BTreeSet<String> = ["a", "b", "c"].iter().map(|h| ip(h)).collect();
    assert_eq!(
        addresses,
        want.iter().map(String::as_str).collect(),
        "{out}"
    );
    // Each worker's devices: exactly the index Slurm gave the job on that node (1: the
    // holder has 0).
    let gpus = probe_lines(&out, "GPU");
    for h in ["a", "b", "c"] {
        assert_eq!(gpus.get(ip(h).as_str()), Some(&"1"), "{h}: {out}");
    }
    slurm.run_ok(&["scancel", &holder]);
    // The run's record says how the Slurm job ended.
    let runs = shared.join("runs");
    let run_dir = std::fs::read_dir(&runs)
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("slurm.json").exists())
        .expect("a Slurm run");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("slurm.json")).expect("record"))
            .expect("json");
    assert_eq!(record["slurm_state"], "COMPLETED", "{record}");
    let batch: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("slurm/batch.json")).expect("batch"),
    )
    .expect("json");
    assert_eq!(batch["job_status"], "SUCCEEDED", "{batch}");
    eprintln!(
        "measure: allocation start to 3+1 Ray nodes ALIVE: {}s",
        batch["seconds_to_ready"]
    );
    // Nothing is left on any host.
    assert_nothing_left(&slurm, &["a", "b", "c"], &out);
}

/// `f`'s result while `host`'s dockerd is stopped (SIGSTOP: its containers, and Ray in
/// them, keep running, but its API does not answer); resumed before returning.
fn with_engine_frozen<T>(slurm: &Slurm, host: &str, f: impl FnOnce() -> T) -> T {
    let pid_file = slurm.hosts().state().join(host).join("dockerd.pid");
    let dockerd: i32 = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{host}'s dockerd pid: {e}"))
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: kill(2) of the fixture's own dockerd, resumed right after.
    assert_eq!(unsafe { libc::kill(dockerd, libc::SIGSTOP) }, 0);
    let out = f();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(dockerd, libc::SIGCONT) }, 0);
    out
}

/// No argus container on any host (the node steps removed theirs when they ended).
#[track_caller]
fn assert_nothing_left(slurm: &Slurm, hosts: &[&str], out: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = argus_containers(slurm, hosts);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left: {left:?}\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `argus slurm submit` without --follow: (run id, Slurm job id).
fn submit(
    ctx: &TestContext,
    slurm: &Slurm,
    profile: &Path,
    spec: &Path,
    flags: &[&str],
) -> (String, String) {
    let run = argus(ctx, slurm, profile)
        .args(["slurm", "submit"])
        .args(flags)
        .arg_path(spec)
        .run()
        .code(0);
    let (run_id, job) = run
        .stdout
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("submit printed {:?}", run.stdout));
    (run_id.to_string(), job.to_string())
}

/// The batch step's report, once it is in `stage`.
#[track_caller]
fn wait_stage(shared: &Path, run_id: &str, stage: &str, timeout: Duration) -> serde_json::Value {
    let path = shared.join("runs").join(run_id).join("slurm/batch.json");
    let deadline = Instant::now() + timeout;
    loop {
        let batch: Option<serde_json::Value> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if let Some(b) = batch.filter(|b| b["stage"] == stage) {
            return b;
        }
        let output = std::fs::read_dir(shared.join("runs").join(run_id))
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".out"))
            .and_then(|e| std::fs::read_to_string(e.path()).ok())
            .unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "batch step not in stage {stage} after {timeout:?}\n{output}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `argus slurm status --json`, polled until Slurm's state is final; returns the record's.
#[track_caller]
fn final_state(ctx: &TestContext, slurm: &Slurm, profile: &Path, run_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = argus(ctx, slurm, profile)
            .args(["--json", "slurm", "status", run_id])
            .run()
            .code(0)
            .json();
        if let Some(state) = status["run"]["slurm_state"].as_str() {
            return state.to_string();
        }
        assert!(Instant::now() < deadline, "{status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_cancelled_run_leaves_no_container_within_killwait_and_says_cancelled() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b", "c"], 2, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "sleepy", "env_vars: {PROBE_SLEEP: '600'}\n");
    let (run_id, _job) = submit(&ctx, &slurm, &profile, &spec, &[]);
    wait_stage(&shared, &run_id, "wait", Duration::from_secs(240));
    assert_eq!(argus_containers(&slurm, &["a", "b", "c"]).len(), 3);
    check_live_run(&ctx, &slurm, &profile, &run_id);

    // A node whose engine hangs is named in `errors` after its own deadline; the others
    // are listed. (b's dockerd is frozen: its containers, and Ray in them, keep running.)
    let status = with_engine_frozen(&slurm, "b", || {
        argus(&ctx, &slurm, &profile)
            .args(["--json", "slurm", "status", &run_id])
            .run()
    });
    let status = status.code(0).json();
    let listed: Vec<&str> = status["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|n| n["node"].as_str())
        .collect();
    assert_eq!(listed, ["a", "c"], "{status}");
    assert!(status["errors"]["containers on b"].is_string(), "{status}");

    // Someone follows the job's log from the login node while the allocation is cancelled.
    let (wait_out, wait_err) = (ctx.path("follow.out"), ctx.path("follow.err"));
    let mut waiting = argus(&ctx, &slurm, &profile)
        .args(["--slurm-run", &run_id, "job", "logs", "-f", &run_id])
        .spawn_to(&wait_out, &wait_err);
    crate::harness::poll("the log followed", Duration::from_secs(60), || {
        std::fs::read_to_string(&wait_out)
            .ok()
            .filter(|out| out.contains("NODE"))
    });

    let started = Instant::now();
    argus(&ctx, &slurm, &profile)
        .args(["slurm", "cancel", &run_id])
        .run()
        .code(0);
    assert_nothing_left(&slurm, &["a", "b", "c"], "after cancel");
    let gone = started.elapsed();
    eprintln!("measure: cancel to no container on any host: {gone:?}");
    assert!(
        gone < Duration::from_secs(5),
        "{gone:?} (a node step removes its containers at once)"
    );
    assert_eq!(final_state(&ctx, &slurm, &profile, &run_id), "CANCELLED");
    // The follower ends as the job did: stopped with the allocation (exit 3), not unreachable.
    let code = crate::harness::poll("job logs -f to end", Duration::from_secs(60), || {
        waiting.try_wait().expect("wait").map(|s| s.code())
    });
    let said = std::fs::read_to_string(&wait_err).unwrap_or_default();
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains("STOPPED") && said.contains("Slurm job"),
        "{said}"
    );

    // The allocation is gone: the job's status comes from argus's record.
    let status = argus(&ctx, &slurm, &profile)
        .args(["--json", "--slurm-run", &run_id, "job", "status", &run_id])
        .run()
        .code(0)
        .json();
    assert_eq!(status["from_cluster"], false, "{status}");
    // ... which says the job ended with the allocation (not PENDING or RUNNING for ever),
    assert_eq!(status["job"]["status"], "STOPPED", "{status}");
    assert!(
        status["job"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Slurm job")),
        "{status}"
    );
    // ... and its log is what the batch step streamed.
    argus(&ctx, &slurm, &profile)
        .args(["--slurm-run", &run_id, "job", "logs", &run_id])
        .run()
        .code(0)
        .stdout_has(&format!("NODE {}", slurm.hosts().host("c").ip));
    // A second cancel has nothing to cancel.
    argus(&ctx, &slurm, &profile)
        .args(["slurm", "cancel", &run_id])
        .run()
        .code(0)
        .stderr_has("has already ended");
}

/// While the allocation lives, from the login node: `slurm status` shows each node's own
/// containers and Ray's nodes at the nodes' addresses, and `argus job` reaches the job
/// (through srun into the allocation: the dashboard stays on the first node's loopback).
#[track_caller]
fn check_live_run(ctx: &TestContext, slurm: &Slurm, profile: &Path, run_id: &str) {
    // The job through `argus job`, until its driver runs.
    let job = crate::harness::poll("the job RUNNING", Duration::from_secs(120), || {
        let job = argus(ctx, slurm, profile)
            .args(["--json", "--slurm-run", run_id, "job", "status", run_id])
            .run()
            .code(0)
            .json();
        assert_eq!(job["from_cluster"], true, "{job}");
        (job["job"]["status"] == "RUNNING").then_some(job)
    });
    assert_eq!(job["job"]["submission_id"], run_id, "{job}");
    let status = argus(ctx, slurm, profile)
        .args(["--json", "slurm", "status", run_id])
        .run()
        .code(0)
        .json();
    assert_eq!(status["errors"], serde_json::json!({}), "{status}");
    let cluster = status["batch"]["cluster"]
        .as_str()
        .expect("cluster")
        .to_string();
    let listed: BTreeMap<String, Vec<String>> = status["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|n| {
            let names = n["containers"]
                .as_array()
                .expect("list")
                .iter()
                .map(|c| {
                    assert_eq!(c["state"], "running", "{status}");
                    c["name"].as_str().expect("name").to_string()
                })
                .collect();
            (n["node"].as_str().expect("node").to_string(), names)
        })
        .collect();
    let want: BTreeMap<String, Vec<String>> = [
        (
            "a",
            vec![format!("{cluster}-head"), format!("{cluster}-node0-0")],
        ),
        ("b", vec![format!("{cluster}-node1-0")]),
        ("c", vec![format!("{cluster}-node2-0")]),
    ]
    .into_iter()
    .map(|(h, names)| (h.to_string(), names))
    .collect();
    assert_eq!(listed, want, "{status}");
    // The same as each host's engine says.
    for (host, names) in &want {
        let mut on_engine = argus_containers(slurm, &[host])
            .remove(host)
            .unwrap_or_default();
        on_engine.sort();
        assert_eq!(&on_engine, names, "{host}");
    }
    let ip = |h: &str| slurm.hosts().host(h).ip.to_string();
    let mut alive: Vec<(String, bool)> = status["ray_nodes"]
        .as_array()
        .expect("ray_nodes")
        .iter()
        .filter(|n| n["state"] == "ALIVE")
        .map(|n| {
            (
                n["node_ip"].as_str().expect("ip").to_string(),
                n["is_head_node"] == true,
            )
        })
        .collect();
    alive.sort();
    let mut want_nodes = vec![
        (ip("a"), true),
        (ip("a"), false),
        (ip("b"), false),
        (ip("c"), false),
    ];
    want_nodes.sort();
    assert_eq!(alive, want_nodes, "{status}");
    assert_eq!(status["job"]["status"], "RUNNING", "{status}");

    crate::harness::poll("the driver's log", Duration::from_secs(60), || {
        argus(ctx, slurm, profile)
            .args(["--slurm-run", run_id, "job", "logs", run_id])
            .run()
            .code(0)
            .stdout
            .contains(&format!("NODE {}", ip("c")))
            .then_some(())
    });
    argus(ctx, slurm, profile)
        .args(["--slurm-run", run_id, "job", "list"])
        .run()
        .code(0)
        .stdout_has(run_id);
}

/// `argus --slurm-run RUN doctor` on a live run of simulated GPUs: every node checked on
/// itself, nothing found (exit 0); each node's containers carry the interface variables
/// argus set from that node's own route to the head, which the doctor's probe (the
/// kernel's choice, seen inside a host-network container) confirms (`collective_iface`).
/// Then with b's engine frozen: b named `unknown` (exit 4), the others still checked.
fn check_doctor(ctx: &TestContext, slurm: &Slurm, profile: &Path, run_id: &str) {
    let doctor = || {
        let started = Instant::now();
        let run = argus(ctx, slurm, profile)
            .args(["--json", "--slurm-run", run_id, "doctor"])
            .run();
        eprintln!(
            "measure: doctor --slurm-run on 3 nodes in {:?}",
            started.elapsed()
        );
        let report = run.json();
        let mut findings = Vec::new();
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for host in report["hosts"].as_array().expect("hosts") {
            let name = host["host"].as_str().expect("host").to_string();
            for c in host["checks"].as_array().expect("checks") {
                let check = c["name"].as_str().expect("name").to_string();
                if c["status"] != "ok" {
                    findings.push(format!("{name} {check} {}", c["status"]));
                }
                seen.entry(name.clone()).or_default().push(check);
            }
        }
        (run.code, report, findings, seen)
    };
    let (code, report, findings, seen) = doctor();
    assert_eq!(findings, Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0, "{report:#}");
    for h in ["a", "b", "c"] {
        let names = seen.get(h).unwrap_or_else(|| panic!("{h}: {report:#}"));
        for want in [
            "engine",
            "clock",
            "image",
            "shm",
            "disk_shared",
            "ports",
            "head_route",
            "collective_iface",
            "shared_storage",
        ] {
            assert!(names.iter().any(|n| n == want), "{h} {want}: {report:#}");
        }
    }
    // The variables as the containers have them: one interface, named, on both.
    for host in ["a", "b", "c"] {
        let names = argus_containers(slurm, &[host])
            .remove(host)
            .unwrap_or_default();
        assert!(!names.is_empty(), "{host}");
        for name in names {
            let env = slurm.hosts().docker_ok(
                host,
                &[
                    "inspect",
                    "--format",
                    "{{range .Config.Env}}{{println .}}{{end}}",
                    &name,
                ],
            );
            let nccl = env
                .lines()
                .find_map(|l| l.strip_prefix("NCCL_SOCKET_IFNAME="));
            let gloo = env
                .lines()
                .find_map(|l| l.strip_prefix("GLOO_SOCKET_IFNAME="));
            assert!(nccl.is_some_and(|v| !v.is_empty()), "{host} {name}: {env}");
            assert_eq!(nccl, gloo, "{host} {name}");
        }
    }
    // b's engine frozen (its containers, and Ray in them, keep running).
    let (code, report, findings, _) = with_engine_frozen(slurm, "b", doctor);
    assert_eq!(code, 4, "{report:#}");
    assert!(
        findings.iter().all(|f| f.starts_with("b "))
            && findings.iter().any(|f| f.starts_with("b engine")),
        "{findings:?}\n{report:#}"
    );
}

#[test]
fn a_killed_node_step_leaves_containers_that_the_epilog_removes() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b", "c"], 2, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "sleepy", "env_vars: {PROBE_SLEEP: '600'}\n");
    let (run_id, job) = submit(&ctx, &slurm, &profile, &spec, &[]);
    wait_stage(&shared, &run_id, "wait", Duration::from_secs(240));

    // The node step on b, killed outright: nothing removes b's container.
    let step = node_step_pid("b", &run_id).expect("the node step on b");
    // SAFETY: kill(2) of a process this test's job started.
    assert_eq!(unsafe { libc::kill(step as i32, libc::SIGKILL) }, 0);
    slurm.run_ok(&["scancel", &job]);
    slurm.wait_state(&job, &["CANCELLED", "PURGED"], Duration::from_secs(30));
    // a and c removed theirs; b's is left.
    let deadline = Instant::now() + Duration::from_secs(30);
    let left = loop {
        let left = argus_containers(&slurm, &["a", "b", "c"]);
        if left.keys().all(|h| h == "b") || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(left.keys().collect::<Vec<_>>(), ["b"], "{left:?}");

    let removed = argus(&ctx, &slurm, &profile)
        .args(["--json", "slurm", "epilog", "--engine"])
        .args([slurm.hosts().host("b").unix.as_str()])
        .run()
        .code(0)
        .json();
    assert_eq!(
        removed["removed"].as_array().map(Vec::len),
        Some(1),
        "{removed}"
    );
    assert_nothing_left(&slurm, &["a", "b", "c"], "after the epilog");
}

/// The pid of `argus slurm node <run_id>` on `host` (the emulated hosts share this pid
/// namespace; a step's environment names its node).
fn node_step_pid(host: &str, run_id: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_step = words
            .windows(3)
            .any(|w| w[0] == b"slurm" && w[1] == b"node" && w[2] == run_id.as_bytes());
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        let on_host = environ
            .split(|b| *b == 0)
            .any(|v| v == format!("SLURMD_NODENAME={host}").as_bytes());
        (is_step && on_host).then_some(pid)
    })
}

#[test]
fn a_binary_the_nodes_cannot_see_is_refused_before_anything_starts() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b"], 1, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "probe", "");
    argus(&ctx, &slurm, &profile)
        .args([
            "slurm",
            "submit",
            "--nodes",
            "2",
            "--argus",
            "/nonexistent/argus",
        ])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("/nonexistent/argus is not visible on the compute nodes")
        .stderr_has("hint:");
    // Nothing was written or queued.
    assert!(
        !shared.join("runs").exists()
            || std::fs::read_dir(shared.join("runs"))
                .expect("runs")
                .next()
                .is_none()
    );
    // (The check's own `srun test -x` may still be completing.)
    let queued = slurm.run_ok(&["squeue", "-h", "-o", "%j"]);
    assert!(!queued.contains("argus"), "{queued}");
}

/// The run's directory swapped for a link to another directory while `submit` writes the
/// run's files (paused at `slurm:run-created`, after it made the directory): every file
/// lands in the directory it made, none through the link, and sbatch is given the script
/// as written (on its stdin, never read back through the link).
#[test]
fn a_run_directory_swapped_while_submitting_keeps_the_runs_files_inside() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a"], 1, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "probe", "");
    let tp = ctx.path("testpoint");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    let (out, err) = (ctx.path("submit.out"), ctx.path("submit.err"));
    let mut child = argus(&ctx, &slurm, &profile)
        .env("ARGUS_TESTPOINT", "slurm:run-created")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["slurm", "submit", "--nodes", "1", "--sbatch-arg", "--hold"])
        .arg_path(&spec)
        .spawn_to(&out, &err);
    crate::harness::poll(
        "submit to make the run's directory",
        Duration::from_secs(300),
        || tp.exists().then_some(()),
    );
    let run_dir = std::fs::read_dir(shared.join("runs"))
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("the run's directory");
    let moved = ctx.path("moved");
    std::fs::rename(&run_dir, &moved).expect("move the run's directory");
    std::os::unix::fs::symlink(&outside, &run_dir).expect("link");
    std::fs::remove_file(&tp).expect("let submit go on");
    let status = child.wait().expect("submit");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "{stderr}");
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let (_, job) = stdout.trim().split_once(' ').expect("run id and job id");
    for file in [
        "slurm.json",
        "slurm.sbatch",
        "slurm/profile.yaml",
        "slurm/jobspec.yaml",
    ] {
        assert!(moved.join(file).is_file(), "{file} in {}", moved.display());
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(moved.join("slurm.json")).expect("record"))
            .expect("record JSON");
    assert_eq!(record["slurm_job_id"].to_string(), job);
    let leaked: Vec<_> = std::fs::read_dir(&outside)
        .expect("outside")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(leaked.is_empty(), "written through the link: {leaked:?}");
    // Slurm queued the script argus wrote (held: it never runs here).
    let shown = slurm.run_ok(&["scontrol", "show", "job", job]);
    assert!(shown.contains("JobState=PENDING"), "{shown}");
    slurm.run_ok(&["scancel", job]);
}

#[test]
fn a_run_past_its_time_limit_leaves_nothing_and_says_timeout() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b", "c"], 2, KILL_WAIT_S);
    let (profile, _shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "sleepy", "env_vars: {PROBE_SLEEP: '600'}\n");
    let run = argus(&ctx, &slurm, &profile)
        .args(["slurm", "submit", "--follow", "--time", "1"])
        .arg_path(&spec)
        .run();
    let out = format!("{}\n{}", run.stdout, run.stderr);
    // Stopped by Slurm: exit 3, as a STOPPED job.
    assert_eq!(run.code, 3, "{out}");
    assert!(out.contains("TIMEOUT"), "{out}");
    assert_nothing_left(&slurm, &["a", "b", "c"], &out);
}

/// A healthy run (simulated GPUs) is found healthy by `doctor --slurm-run` while it runs
/// (see [`check_doctor`]). Then its job's task fails on a worker with a
/// ModuleNotFoundError: the batch step makes its failure bundle with each node's part
/// gathered on that node (the worker containers of b and c included), its triage names
/// the import, the attempt records it, and no file of the bundle holds the JobSpec's
/// token. After the allocation, `job diagnose` refuses (exit 4) rather than replace that
/// bundle with one that has no node in it.
#[test]
fn a_slurm_run_is_doctored_then_its_failure_diagnosed_from_every_node() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up(&ctx, &["a", "b", "c"], 1);
    let (profile, shared) = profile_with(&mut ctx, "simulated");
    std::fs::write(
        shared.join("code/fail.py"),
        "import os, time, ray\nray.init()\nwhile not os.path.exists('/mnt/shared/code/go'):\n    time.sleep(0.2)\n\n@ray.remote(num_gpus=1, max_restarts=0)\nclass Loader:\n    def __init__(self):\n        import argus_module_that_is_not_there\n\n    def ping(self):\n        return 1\n\nray.get(Loader.remote().ping.remote())\n",
    )
    .expect("script");
    let secret = "hf_bundleSecretValue0123456789abcdef";
    let spec = ctx.write(
        "fail.yaml",
        &format!(
            "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 /mnt/shared/code/fail.py\nenv_vars: {{HF_TOKEN: '{secret}'}}\n"
        ),
    );
    // A secret comes to the nodes from the environment sbatch exports (the staged JobSpec
    // has it redacted).
    let run = argus(&ctx, &slurm, &profile)
        .env("HF_TOKEN", secret)
        .args(["slurm", "submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    let run_id = run
        .stdout
        .split_whitespace()
        .next()
        .expect("run id")
        .to_string();
    wait_stage(&shared, &run_id, "wait", Duration::from_secs(240));
    check_doctor(&ctx, &slurm, &profile, &run_id);

    let started = Instant::now();
    std::fs::write(shared.join("code/go"), "").expect("go");
    let batch = wait_stage(&shared, &run_id, "done", Duration::from_secs(120));
    eprintln!(
        "measure: the job's failure to its bundle made in {:?}",
        started.elapsed()
    );
    let out = std::fs::read_dir(shared.join("runs").join(&run_id))
        .expect("run dir")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".out"))
        .and_then(|e| std::fs::read_to_string(e.path()).ok())
        .unwrap_or_default();
    assert_eq!(batch["job_status"], "FAILED", "{batch:#}\n{out}");
    let attempt = &batch["attempts"][0];
    let id = attempt["submission_id"].as_str().expect("id");
    let bundle = shared.join("jobs").join(id).join("diagnostics/1");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(bundle.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    let diagnosis = attempt["diagnosis"].as_str().unwrap_or_default();
    assert!(
        diagnosis.contains("No module named 'argus_module_that_is_not_there'"),
        "{batch:#}\n{manifest:#}\n{out}"
    );
    let cluster = batch["cluster"].as_str().expect("cluster");
    for node in ["head", "node0-0", "node1-0", "node2-0"] {
        let state = bundle.join(format!("nodes/{cluster}-{node}/state.json"));
        assert!(
            state.is_file(),
            "{} missing\n{manifest:#}\n{out}",
            state.display()
        );
    }
    let raylets = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/ray/raylet.out"))
        })
        .count();
    assert_eq!(raylets, 4, "{manifest:#}");
    let triage: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("triage.json")).expect("triage"))
            .expect("json");
    assert_eq!(triage["cause"], "import", "{triage:#}");
    // Named in the actor's own log, on whichever worker node ran it.
    let file = triage["file"].as_str().expect("file");
    assert!(
        file.starts_with(&format!("nodes/{cluster}-node"))
            && file.contains("/ray/worker-")
            && file.ends_with(".err"),
        "{triage:#}"
    );
    // No file of the bundle holds the token.
    let mut dirs = vec![bundle.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("file");
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(secret),
                    "{} holds the token",
                    path.display()
                );
            }
        }
    }
    // The allocation is over: a bundle made now would have no node in it.
    let state = final_state(&ctx, &slurm, &profile, &run_id);
    assert_eq!(state, "FAILED", "the batch step's exit code 1: {out}");
    argus(&ctx, &slurm, &profile)
        .args(["--slurm-run", &run_id, "job", "diagnose", id])
        .run()
        .code(4)
        .stderr_has("went with the allocation");
    assert!(bundle.join("triage.json").is_file());
}

#[test]
fn two_runs_sharing_two_nodes_get_disjoint_gpus_ports_and_names() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b"], 2, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    // Each job holds its cluster until the other's is up too (both on the same nodes at once).
    let spec = jobspec(&ctx, "probe", "env_vars: {PROBE_SLEEP: '20'}\n");
    let children: Vec<_> = (0..2)
        .map(|i| {
            let mut argus = argus(&ctx, &slurm, &profile).args([
                "slurm",
                "submit",
                "--follow",
                "--nodes",
                "2",
                "--gpus-per-node",
                "1",
            ]);
            argus = argus.arg_path(&spec);
            let (out, err) = (ctx.path(&format!("out{i}")), ctx.path(&format!("err{i}")));
            (argus.spawn_to(&out, &err), out, err)
        })
        .collect();
    let mut outputs = Vec::new();
    for (mut child, out, err) in children {
        let status = child.wait().expect("wait");
        let text = format!(
            "{}\n{}",
            std::fs::read_to_string(&out).unwrap_or_default(),
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        assert!(status.success(), "{text}");
        assert!(text.contains("PROBE DONE"), "{text}");
        outputs.push(text);
    }
    // Disjoint GPUs on each node.
    for h in ["a", "b"] {
        let ip = slurm.hosts().host(h).ip.to_string();
        let held: Vec<&str> = outputs
            .iter()
            .map(|o| *probe_lines(o, "GPU").get(ip.as_str()).expect("a GPU line"))
            .collect();
        assert_ne!(held[0], held[1], "{h}: {held:?}");
    }
    // Different port slots (and so ports), different cluster names.
    let batches: Vec<serde_json::Value> = std::fs::read_dir(shared.join("runs"))
        .expect("runs")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("slurm/batch.json")).ok())
        .map(|t| serde_json::from_str(&t).expect("json"))
        .collect();
    assert_eq!(batches.len(), 2);
    assert_ne!(batches[0]["slot"], batches[1]["slot"]);
    assert_ne!(batches[0]["cluster"], batches[1]["cluster"]);
    assert_nothing_left(&slurm, &["a", "b"], &outputs.join("\n"));
}

#[test]
fn run_slurm_inside_an_salloc_uses_that_allocation() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b"], 2, KILL_WAIT_S);
    let (profile, _shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "probe", "");
    let argus = env!("CARGO_BIN_EXE_argus");
    let out = slurm.run(&[
        "salloc",
        "-N2",
        "--gres=gpu:1",
        argus,
        "--no-progress",
        "-p",
        &profile.to_string_lossy(),
        "run",
        "--slurm",
        &spec.to_string_lossy(),
    ]);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PROBE DONE"), "{text}");
    let gpus = probe_lines(&text, "GPU");
    assert_eq!(gpus.len(), 2, "{text}");
    assert_nothing_left(&slurm, &["a", "b"], &text);
}

/// `ray.auth: token` under Slurm: the token is made on the login node (0600, never on the
/// shared storage), travels to the allocation in sbatch's environment, and Ray on the first
/// node refuses whoever lacks it; `argus job` from the login node carries it.
#[test]
fn a_run_with_token_auth_refuses_requests_without_the_token() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    crate::auth::ensure_image_260(&ctx);
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a"], 1, KILL_WAIT_S);
    let name = ctx.cluster("tk");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("code")).expect("shared");
    std::fs::write(shared.join("code/probe.py"), PROBE).expect("probe");
    let profile = ctx.write(
        "profile.yaml",
        &format!(
            "name: {name}\nimage: argus/ray:2.60.0\nshared: {{host_path: {}}}\nray: {{ready_timeout_s: 240, auth: token, token_env: ARGUS_TEST_UNSET_SLURM_TOKEN}}\nslurm: {{nodes: 1, gpus_per_node: 1}}\nhead: {{cpus: 1, memory: 2g, shm_size: 256m, object_store_memory: 128m}}\nworkers:\n  - {{name: gpu, count: 1, gpus: 1, gpu_mode: nvidia, cpus: 1, memory: 2g, shm_size: 256m, object_store_memory: 128m}}\n",
            shared.display()
        ),
    );
    let config = ctx.path("config");
    let with_config = |argus: crate::harness::Argus| argus.env("XDG_CONFIG_HOME", &config);
    let spec = jobspec(&ctx, "sleepy", "env_vars: {PROBE_SLEEP: '600'}\n");
    let out = with_config(argus(&ctx, &slurm, &profile))
        .args(["slurm", "submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    let run_id = out
        .stdout
        .split_whitespace()
        .next()
        .expect("run id")
        .to_string();
    let batch = wait_stage(&shared, &run_id, "wait", Duration::from_secs(300));

    let token_file = config.join(format!("argus/tokens/{name}.token"));
    let token = std::fs::read_to_string(&token_file).expect("the login node's token");
    let token = token.trim();
    assert_eq!(token.len(), 64, "{token}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token_file).expect("meta").permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        crate::auth::files_containing(&shared, token).is_empty(),
        "the token is on the shared storage"
    );

    // On the first node: Ray refuses a request without the token, answers one with it.
    let slot = u32::try_from(batch["slot"].as_u64().expect("slot")).expect("slot");
    let (_, port) = argus::slurm::ports::head_ports(slot);
    let code = |auth: Option<&str>| {
        let mut args = vec![
            "curl".to_string(),
            "-s".into(),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
        ];
        if let Some(token) = auth {
            args.push("-H".into());
            args.push(format!("Authorization: Bearer {token}"));
        }
        args.push(format!("http://127.0.0.1:{port}/api/jobs/"));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = slurm.hosts().exec("a", &refs);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(code(None), "401");
    assert_eq!(code(Some(token)), "200");

    // From the login node, `argus job` carries it (through srun into the allocation).
    let job = crate::harness::poll("the job RUNNING", Duration::from_secs(120), || {
        let job = with_config(argus(&ctx, &slurm, &profile))
            .args(["--json", "--slurm-run", &run_id, "job", "status", &run_id])
            .run()
            .code(0)
            .json();
        assert_eq!(job["from_cluster"], true, "{job}");
        (job["job"]["status"] == "RUNNING").then_some(job)
    });
    assert_eq!(job["job"]["submission_id"], run_id.as_str());
    // Without this machine's token, one clear error.
    let other_config = ctx.path("other-config");
    argus(&ctx, &slurm, &profile)
        .env("XDG_CONFIG_HOME", &other_config)
        .args(["--slurm-run", &run_id, "job", "status", &run_id])
        .run()
        .code(2)
        .stderr_has("ARGUS_TEST_UNSET_SLURM_TOKEN");

    argus(&ctx, &slurm, &profile)
        .args(["slurm", "cancel", &run_id])
        .run()
        .code(0);
    assert_nothing_left(&slurm, &["a"], "after cancel");
}

/// A stand-in for verl's trainer: a step every STEP_S seconds, verl's step lines, and
/// verl's checkpoint layout every SAVE_FREQ steps (one rank's shards, `data.pt`, then the
/// tracker); it resumes after the step the tracker names.
const TRAINER: &str = r#"
import os, pathlib, time
d = pathlib.Path(os.environ["ARGUS_CHECKPOINT_DIR"])
d.mkdir(parents=True, exist_ok=True)
total, save = int(os.environ["STEPS"]), int(os.environ["SAVE_FREQ"])
tracker = d / "latest_checkpointed_iteration.txt"
start = int(tracker.read_text()) if tracker.exists() else 0
print(f"RESUMED FROM {start}", flush=True)
for step in range(start + 1, total + 1):
    time.sleep(float(os.environ.get("STEP_S", "2")))
    print(f"step:{step} - critic/score/mean:0.5", flush=True)
    if step % save == 0:
        g = d / f"global_step_{step}"
        (g / "actor").mkdir(parents=True, exist_ok=True)
        for k in ("model", "optim", "extra_state"):
            (g / "actor" / f"{k}_world_size_1_rank_0.pt").write_bytes(b"x")
        (g / "data.pt").write_bytes(b"x")
        (d / "tracker.tmp").write_text(str(step))
        (d / "tracker.tmp").replace(tracker)
print("TRAINING DONE", flush=True)
"#;

/// The steps a driver log shows, in order.
fn steps_of(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("step:").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

/// A node of the allocation set DOWN while the job trains: Slurm requeues the supervised
/// batch, which starts again on the nodes left, continues the run as attempt 2 from the
/// newest complete checkpoint, and completes; both attempts are recorded, and the second
/// one's steps start right after the checkpoint.
#[test]
fn a_node_failure_requeues_a_supervised_run_which_resumes_from_its_checkpoint() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a", "b", "c"], 1, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    std::fs::write(shared.join("code/train.py"), TRAINER).expect("trainer");
    let spec = ctx.write(
        "train.yaml",
        "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 /mnt/shared/code/train.py\n\
         env_vars: {STEPS: '14', SAVE_FREQ: '2', STEP_S: '2'}\n\
         restart: {max: 2, backoff: 0s}\n",
    );
    let (run_id, job) = submit(&ctx, &slurm, &profile, &spec, &["--nodes", "2"]);
    let script = std::fs::read_to_string(shared.join("runs").join(&run_id).join("slurm.sbatch"))
        .expect("script");
    assert!(script.contains("#SBATCH --requeue\n"), "{script}");
    assert!(script.contains("#SBATCH --signal=B:USR1@120\n"), "{script}");

    // Training, with a checkpoint at step 4 or later.
    let tracker = shared
        .join("jobs")
        .join(&run_id)
        .join("checkpoints/latest_checkpointed_iteration.txt");
    let deadline = Instant::now() + Duration::from_secs(360);
    let saved = loop {
        let step: u64 = std::fs::read_to_string(&tracker)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        if step >= 4 {
            break step;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint 4 at {}",
            tracker.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let nodes = slurm.hostnames(&slurm.run_ok(&["squeue", "-h", "-j", &job, "-o", "%N"]));
    let down = nodes.last().expect("a node").clone();
    slurm.run_ok(&[
        "scontrol",
        "update",
        &format!("nodename={down}"),
        "state=down",
        "reason=argus-test",
    ]);

    // The run goes on in a new allocation and completes.
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        let status = argus(&ctx, &slurm, &profile)
            .args(["--json", "slurm", "status", &run_id])
            .run()
            .code(0)
            .json();
        let done = status["batch"]["stage"] == "done"
            && status["slurm"]["state"]
                .as_str()
                .is_none_or(|s| s == "COMPLETED");
        if done {
            break status;
        }
        assert!(Instant::now() < deadline, "{status:#}");
        std::thread::sleep(Duration::from_secs(1));
    };
    // (With ReturnToService=2 the node is back as soon as its slurmd answers.)
    let _ = slurm.run(&[
        "scontrol",
        "update",
        &format!("nodename={down}"),
        "state=resume",
    ]);
    let batch = &status["batch"];
    assert_eq!(batch["job_status"], "SUCCEEDED", "{status:#}");
    assert_eq!(batch["exit_code"], 0, "{status:#}");
    assert!(batch["requeues"].as_u64() >= Some(1), "{status:#}");
    let attempts = batch["attempts"].as_array().expect("attempts");
    assert!(attempts.len() >= 2, "{status:#}");
    assert_eq!(attempts[0]["cause"], "node_lost", "{status:#}");
    assert_eq!(attempts[0]["status"], "STOPPED", "{status:#}");
    let last = attempts.last().expect("last");
    assert_eq!(
        last["submission_id"],
        format!("{run_id}-attempt-{}", attempts.len()),
        "{status:#}"
    );
    let from = last["resumed_from"]["step"].as_u64().expect("resumed from");
    assert!(
        from >= saved,
        "resumed from {from}, saved {saved}: {status:#}"
    );
    let lost = attempts[attempts.len() - 2]["steps_lost"]
        .as_u64()
        .expect("steps lost");
    assert!(lost <= 2, "lost {lost} > save_freq: {status:#}");
    // The last attempt printed each step after the checkpoint once, to the end.
    let id = last["submission_id"].as_str().expect("id");
    let log = std::fs::read_to_string(shared.join("jobs").join(id).join("logs/driver.log"))
        .expect("driver log");
    assert!(log.contains(&format!("RESUMED FROM {from}")), "{log}");
    assert_eq!(steps_of(&log), (from + 1..=14).collect::<Vec<_>>(), "{log}");
    assert!(log.contains("TRAINING DONE"), "{log}");
    // `slurm status` shows the attempts to a human too.
    let text = argus(&ctx, &slurm, &profile)
        .args(["slurm", "status", &run_id])
        .run()
        .code(0);
    assert!(text.stdout.contains("attempts: "), "{}", text.stdout);
    assert!(text.stdout.contains("ended: node_lost"), "{}", text.stdout);
}

/// A restart policy with an sbatch argument that would undo it is bad input: exit 2,
/// nothing submitted.
#[test]
fn a_restart_policy_with_a_conflicting_sbatch_arg_is_refused() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a"], 1, KILL_WAIT_S);
    let (profile, shared) = profile(&mut ctx);
    let spec = jobspec(&ctx, "probe", "");
    for arg in ["--sbatch-arg=--no-requeue", "--sbatch-arg=--signal=USR2@60"] {
        argus(&ctx, &slurm, &profile)
            .args(["slurm", "submit", "--nodes", "1", "--restart", "2", arg])
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has("restart policy");
    }
    // Without a policy the same argument is the user's own.
    argus(&ctx, &slurm, &profile)
        .args(["slurm", "submit", "--dry-run", "--sbatch-arg=--no-requeue"])
        .arg_path(&spec)
        .run()
        .code(0)
        .stdout_has("#SBATCH --no-requeue");
    assert!(!shared.join("runs").exists());
}
