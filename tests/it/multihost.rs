//! One cluster across several hosts, on real Docker Engines (`crate::hosts`: a network
//! namespace and a `dockerd` per emulated host): the image brought to the hosts that lack
//! it, Ray spanning them with each node at its own host's address, the Jobs API reached
//! through a tunnel, an unreachable host named and survived, and a supervised run that
//! outlives a host's engine stopping mid-run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use crate::harness::{IMAGE, Profile, TestContext, inspect, poll, read_json};
use crate::hosts::{Hosts, Options};

/// A profile with the head on `head` and one worker on each of `workers`; the endpoint of
/// each host as `endpoint` picks it.
fn profile(
    ctx: &mut TestContext,
    hosts: &Hosts,
    names: &[(&str, &str)],
    head: &str,
    workers: &[&str],
) -> (String, PathBuf, PathBuf) {
    let cluster = ctx.cluster("mh");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("code")).expect("shared");
    let mut hosts_yaml = String::from("hosts:\n");
    for (name, kind) in names {
        let host = hosts.host(name);
        let endpoint = match *kind {
            "ssh" => host.ssh.clone().expect("the instance runs sshd"),
            "tcp" | "tls" => host.tcp.clone(),
            _ => host.unix.clone(),
        };
        // "tls": the client's files named in the profile ("tcp" on a TLS instance takes them
        // from DOCKER_TLS_VERIFY / DOCKER_CERT_PATH).
        let tls = match (*kind, hosts.tls_certs()) {
            ("tls", Some(dir)) => format!(
                ", tls: {{ca: {0}/ca.pem, cert: {0}/cert.pem, key: {0}/key.pem}}",
                dir.display()
            ),
            _ => String::new(),
        };
        hosts_yaml.push_str(&format!(
            "  - {{name: {name}, docker: '{endpoint}', address: {}{tls}}}\n",
            host.ip
        ));
    }
    let text = Profile::small(&cluster)
        .shared(&shared)
        .head("host", head)
        .workers_on_hosts(workers)
        .yaml(&hosts_yaml)
        .yaml("network: {mode: host}\n")
        .build();
    let path = ctx.write("profile.yaml", &text);
    (cluster, shared, path)
}

/// argus with the fixture's `ssh` (its key and known hosts) first on PATH.
fn argus(ctx: &TestContext, hosts: &Hosts, profile: &Path) -> crate::harness::Argus {
    // bollard's ssh transport keeps its ControlMaster sockets under XDG_STATE_HOME.
    let argus = ctx
        .argus()
        .env("XDG_STATE_HOME", ctx.path("xdg-state"))
        .profile(profile);
    match hosts.ssh_path() {
        Some(_) => {
            let (key, value) = hosts.ssh_path_env();
            argus.env(&key, value)
        }
        None => argus,
    }
}

fn dirs_home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

/// The ids of the cluster's containers on one host, by name.
fn containers(hosts: &Hosts, host: &str, cluster: &str) -> BTreeMap<String, String> {
    let out = hosts.docker_ok(
        host,
        &[
            "ps",
            "-a",
            "--filter",
            &format!("label=argus.cluster={cluster}"),
            "--format",
            "{{.Names}} {{.ID}}",
        ],
    );
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, id)| (name.to_string(), id.to_string()))
        .collect()
}

/// ALIVE nodes from `status --json`: name -> ip.
fn alive_nodes(status: &serde_json::Value) -> BTreeMap<String, String> {
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["state"] == "ALIVE")
        .map(|n| {
            (
                n["node_name"].as_str().unwrap_or_default().to_string(),
                n["node_ip"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A cluster across hosts a (head, over SSH), b (a worker, TCP with TLS) and c (a worker, its
/// socket), before its first `up`.
/// (Fields drop in order: the hosts go before the context's temp dir, as they did as locals.)
struct Spanning {
    hosts: Hosts,
    ctx: TestContext,
    cluster: String,
    shared: PathBuf,
    profile: PathBuf,
    head: String,
    w0: String,
    w1: String,
    local_id: String,
}

impl Spanning {
    fn new() -> Option<Spanning> {
        let mut ctx = TestContext::docker()?;
        let hosts = Hosts::up(
            &ctx,
            &["a", "b", "c"],
            Options {
                ssh: true,
                tls: true,
                ..Options::default()
            },
        );
        // Every transport at once: the head's host over SSH, b over TCP with TLS (client
        // certificates named in the profile), c over its socket.
        let (cluster, shared, profile) = profile(
            &mut ctx,
            &hosts,
            &[("a", "ssh"), ("b", "tls"), ("c", "unix")],
            "a",
            &["b", "c"],
        );
        let local_id = inspect(IMAGE)["Id"].as_str().expect("image id").to_string();
        for h in ["a", "b", "c"] {
            assert_eq!(
                hosts.image_id(h, IMAGE),
                None,
                "host {h} starts without the image"
            );
        }
        Some(Spanning {
            head: format!("{cluster}-head"),
            w0: format!("{cluster}-gpu-0"),
            w1: format!("{cluster}-gpu-1"),
            ctx,
            hosts,
            cluster,
            shared,
            profile,
            local_id,
        })
    }

    fn argus(&self) -> crate::harness::Argus {
        argus(&self.ctx, &self.hosts, &self.profile)
    }

    /// Each node ALIVE at its own host's address: name -> ip.
    fn want(&self) -> BTreeMap<String, String> {
        [
            (self.head.clone(), self.hosts.host("a").ip.to_string()),
            (self.w0.clone(), self.hosts.host("b").ip.to_string()),
            (self.w1.clone(), self.hosts.host("c").ip.to_string()),
        ]
        .into_iter()
        .collect()
    }
}

/// The scenarios share one three-host cluster (three engines, the image brought to each, Ray
/// across them: minutes here), so they are one test, each a named function called in
/// sequence on the state the one before left.
#[test]
fn a_cluster_spans_three_hosts_and_survives_one_going_away() {
    let Some(s) = Spanning::new() else {
        return;
    };
    an_unknown_host_key_is_refused_before_dialing(&s);
    let status = up_brings_the_image_to_every_host_and_ray_spans_them(&s);
    a_jobs_driver_runs_on_a_worker_host_and_reads_the_shared_storage(&s, &status);
    a_supervised_run_waits_for_a_host_whose_engine_stopped_and_resumes(&s);
    let before = a_second_up_changes_nothing(&s);
    a_host_gone_is_named_and_up_changes_nothing(&s, &before);
    a_host_back_without_its_container_is_repaired_alone(&s, &before);
    down_without_a_host_removes_the_rest_and_names_it(&s);
}

/// Without the fixture's ssh configuration (root's own, which has never seen host a)
/// argus refuses to trust a's host key: it never dials, nothing is recorded anywhere.
fn an_unknown_host_key_is_refused_before_dialing(s: &Spanning) {
    let known_hosts = dirs_home().join(".ssh/known_hosts");
    let before = std::fs::read(&known_hosts).ok();
    let run = s
        .ctx
        .argus()
        .env("XDG_STATE_HOME", s.ctx.path("xdg-state"))
        .profile(&s.profile)
        .args(["up"])
        .run()
        .code(4);
    assert!(
        run.stderr.contains("host a (") && run.stderr.contains("known-hosts files"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read(&known_hosts).ok(),
        before,
        "known_hosts untouched"
    );
    assert_eq!(s.hosts.image_id("b", IMAGE), None, "nothing was done");
}

/// up: the image is brought to every host, Ray spans them at their addresses.
fn up_brings_the_image_to_every_host_and_ray_spans_them(s: &Spanning) -> serde_json::Value {
    let up = s.argus().args(["--json", "up"]).run().code(0);
    let report = up.json();
    assert_eq!(report["changed"], true);
    for h in ["a", "b", "c"] {
        assert_eq!(
            s.hosts.image_id(h, IMAGE).as_deref(),
            Some(s.local_id.as_str()),
            "image on {h}"
        );
    }
    assert_eq!(
        containers(&s.hosts, "a", &s.cluster)
            .keys()
            .collect::<Vec<_>>(),
        [&s.head]
    );
    assert_eq!(
        containers(&s.hosts, "b", &s.cluster)
            .keys()
            .collect::<Vec<_>>(),
        [&s.w0]
    );
    assert_eq!(
        containers(&s.hosts, "c", &s.cluster)
            .keys()
            .collect::<Vec<_>>(),
        [&s.w1]
    );
    let status = s.argus().args(["--json", "status"]).run().code(0).json();
    assert_eq!(
        alive_nodes(&status),
        s.want(),
        "each node from its own host"
    );
    for h in status["hosts"].as_array().expect("hosts") {
        assert_eq!(h["reachable"], true, "{h}");
        assert_eq!(h["image_id"].as_str(), Some(s.local_id.as_str()), "{h}");
    }
    status
}

/// A job: its driver runs on a worker host and reads the shared storage there.
fn a_jobs_driver_runs_on_a_worker_host_and_reads_the_shared_storage(
    s: &Spanning,
    status: &serde_json::Value,
) {
    std::fs::write(s.shared.join("input.txt"), "shared-across-hosts").expect("input");
    let spec = s.ctx.write(
        "job.yaml",
        "workload: custom\nsubmission_id: mh-job-1\ncode_path: /mnt/shared/code\nentrypoint: python3 -c \"import socket; print('DRIVER', socket.gethostname(), open('/mnt/shared/input.txt').read())\"\n",
    );
    s.argus()
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0);
    let log = s
        .argus()
        .args(["job", "logs", "mh-job-1"])
        .run()
        .code(0)
        .stdout;
    assert!(
        log.contains("DRIVER b shared-across-hosts")
            || log.contains("DRIVER c shared-across-hosts"),
        "the driver runs on a worker host and sees the shared file:\n{log}"
    );
    let job = s
        .argus()
        .args(["--json", "job", "status", "mh-job-1"])
        .run()
        .code(0)
        .json();
    let driver = job["job"]["driver_node_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let driver_node = status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["node_id"] == driver.as_str())
        .unwrap_or_else(|| panic!("driver node {driver} is one of the cluster's: {job}"));
    assert_ne!(
        driver_node["node_name"],
        s.head.as_str(),
        "never on the head"
    );
}

/// A stand-in for verl's trainer: a Ray actor pinned to one host (`MH_TRAINER_IP`, by
/// Ray's `node:<ip>` resource) prints verl's step lines and saves verl's checkpoint layout
/// (every shard of its one rank, then the tracker) every `MH_SAVE_FREQ` steps; started
/// again, it goes on after the step the tracker names.
const PINNED_TRAINER: &str = r#"
import os
import time

import ray

@ray.remote(num_cpus=0)
class Trainer:
    def run(self, ckpt, total, save_freq, sleep):
        marker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
        start = 1
        if os.path.exists(marker):
            with open(marker) as f:
                last = int(f.read())
            print(f"Load from checkpoint folder: {ckpt}/global_step_{last}", flush=True)
            start = last + 1
        for step in range(start, total + 1):
            time.sleep(sleep)
            print(f"step:{step} - actor/pg_loss:{-0.01 * step} - timing_s/step:{sleep}", flush=True)
            if step % save_freq == 0:
                actor = os.path.join(ckpt, f"global_step_{step}", "actor")
                os.makedirs(actor, exist_ok=True)
                for kind in ("model", "optim", "extra_state"):
                    with open(os.path.join(actor, f"{kind}_world_size_1_rank_0.pt"), "w") as f:
                        f.write(str(step))
                with open(os.path.join(ckpt, f"global_step_{step}", "data.pt"), "w") as f:
                    f.write(str(step))
                with open(marker + ".tmp", "w") as f:
                    f.write(str(step))
                os.replace(marker + ".tmp", marker)
        return total

ckpt = os.environ.get("ARGUS_CHECKPOINT_DIR") or os.path.join(os.environ["ARGUS_JOB_DIR"], "checkpoints")
ray.init()
pinned = {"node:" + os.environ["MH_TRAINER_IP"]: 0.01}
trainer = Trainer.options(resources=pinned).remote()
ray.get(trainer.run.remote(ckpt, int(os.environ["MH_TOTAL"]), int(os.environ["MH_SAVE_FREQ"]), float(os.environ["MH_STEP_SLEEP"])))
# The actor's last lines reach the driver's log through Ray's log monitor.
time.sleep(3)
"#;

/// Waits for `child` until `timeout`, killing it then: its exit code.
fn wait_or_kill(child: &mut std::process::Child, timeout: Duration, what: &str) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A supervised run whose trainer runs on host c: c's engine stops mid-run (its
/// container with it). argus sees the host lost (its engine, not verl), waits for it
/// (`host_wait`) rather than shrink the cluster, and once c is back brings its worker back
/// and resumes from the last complete checkpoint: 2 attempts, steps 1..6 each once.
fn a_supervised_run_waits_for_a_host_whose_engine_stopped_and_resumes(s: &Spanning) {
    let id = "mh-sup";
    s.ctx.write("mhcode/mhtrainer.py", PINNED_TRAINER);
    let spec = s.ctx.write(
        "sup.yaml",
        &format!(
            "workload: custom\nsubmission_id: {id}\ncode: {{source: mhcode, name: mhcode}}\nentrypoint: python3 -m mhtrainer\nenv_vars: {{MH_TRAINER_IP: \"{}\", MH_TOTAL: \"6\", MH_SAVE_FREQ: \"2\", MH_STEP_SLEEP: \"4\"}}\nrestart: {{max: 1, on: [node_lost], backoff: 0s, host_wait: 5m}}\n",
            s.hosts.host("c").ip
        ),
    );
    let (out, err) = (s.ctx.path("sup.out"), s.ctx.path("sup.err"));
    let mut run = s
        .argus()
        .args(["run", "--json"])
        .arg_path(&spec)
        .spawn_to(&out, &err);
    let stderr = || std::fs::read_to_string(&err).unwrap_or_default();
    let marker = s.shared.join(format!(
        "jobs/{id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    poll("the step-2 checkpoint", Duration::from_secs(300), || {
        (std::fs::read_to_string(&marker).ok()?.trim() == "2").then_some(())
    });
    s.hosts.stop_engine("c");
    // Seen as host c lost, and the repair waits for it (the run goes on only with c).
    poll("argus to wait for host c", Duration::from_secs(60), || {
        stderr().contains("waiting up to 5m").then_some(())
    });
    let report = std::fs::read_dir(s.shared.join("runs"))
        .expect("runs")
        .flatten()
        .map(|d| read_json(&d.path().join("report.json")))
        .find(|r| r["attempts"][0]["submission_id"] == id)
        .expect("the run's report");
    let first = &report["attempts"][0];
    assert_eq!(first["cause"], "node_lost", "{report:#}\n{}", stderr());
    let detail = first["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("host c's Docker engine stopped answering"),
        "the engine named: {detail}"
    );
    assert_eq!(
        report["attempts"].as_array().map(Vec::len),
        Some(1),
        "no attempt 2 while c is gone: {report:#}"
    );
    s.hosts.start_engine("c");
    let code = wait_or_kill(&mut run, Duration::from_secs(420), "the supervised run");
    let stderr = stderr();
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
            .unwrap_or_else(|_| panic!("the report as JSON; stderr: {stderr}"));
    let all = report["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 2, "{report:#}");
    assert_eq!(all[1]["submission_id"], format!("{id}-attempt-2"));
    assert_eq!(all[1]["status"], "SUCCEEDED", "{report:#}");
    let resumed = all[1]["resumed_from"]["step"].as_u64().unwrap_or_default();
    assert!(resumed >= 2, "resumed from a checkpoint: {report:#}");
    assert!(
        all[0]["steps_lost"].as_u64().expect("steps lost") <= 2,
        "{report:#}"
    );
    assert_eq!(report["job_status"], "SUCCEEDED");
    // The whole cluster again, c's worker at c's address.
    let status = s.argus().args(["--json", "status"]).run().code(0).json();
    assert_eq!(alive_nodes(&status), s.want());
    let csv = s
        .argus()
        .args([
            "job",
            "metrics",
            &format!("{id}-attempt-2"),
            "--csv",
            "--keys",
            "actor/pg_loss",
        ])
        .run()
        .code(0)
        .stdout;
    let mut steps: Vec<u64> = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .collect();
    // A host stopped between a step's checkpoint and its line: the step was trained, its
    // line never came; the report names it.
    steps.extend(
        report["attempts"][0]["unlogged_steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_u64),
    );
    steps.sort();
    assert_eq!(steps, (1..=6).collect::<Vec<_>>(), "{csv}\n{report:#}");
}

/// A second up changes nothing.
fn a_second_up_changes_nothing(s: &Spanning) -> Vec<BTreeMap<String, String>> {
    let again = s.argus().args(["--json", "up"]).run().code(0).json();
    assert_eq!(again["changed"], false, "{again}");
    ["a", "b", "c"]
        .iter()
        .map(|h| containers(&s.hosts, h, &s.cluster))
        .collect()
}

/// Host c's engine goes away: status names it, up refuses and changes nothing.
fn a_host_gone_is_named_and_up_changes_nothing(s: &Spanning, before: &[BTreeMap<String, String>]) {
    s.hosts.stop_engine("c");
    let run = s.argus().args(["--json", "status"]).run().code(4);
    let status = run.json();
    let c = status["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .find(|h| h["name"] == "c")
        .expect("host c")
        .clone();
    assert_eq!(c["reachable"], false, "{c}");
    s.argus().args(["up"]).run().code(4).stderr_has("host c (");
    assert_eq!(
        containers(&s.hosts, "a", &s.cluster),
        before[0],
        "nothing changed on a"
    );
    assert_eq!(
        containers(&s.hosts, "b", &s.cluster),
        before[1],
        "nothing changed on b"
    );
}

/// c is back, its container lost: up repairs c alone.
fn a_host_back_without_its_container_is_repaired_alone(
    s: &Spanning,
    before: &[BTreeMap<String, String>],
) {
    s.hosts.start_engine("c");
    s.hosts.docker_ok("c", &["rm", "-f", &s.w1]);
    let repair = s.argus().args(["--json", "up"]).run().code(0).json();
    let acted: Vec<String> = repair["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter(|a| a["action"] != "keep")
        .map(|a| format!("{} {} {}", a["action"], a["name"], a["host"]))
        .collect();
    assert_eq!(
        acted,
        [format!("\"create\" \"{}\" \"c\"", s.w1)],
        "{repair}"
    );
    assert_eq!(
        containers(&s.hosts, "a", &s.cluster),
        before[0],
        "the head kept"
    );
    assert_eq!(
        containers(&s.hosts, "b", &s.cluster),
        before[1],
        "b's worker kept"
    );
    let status = s.argus().args(["--json", "status"]).run().code(0).json();
    assert_eq!(alive_nodes(&status), s.want());
}

/// c goes away again: down removes the rest and says what it could not reach.
fn down_without_a_host_removes_the_rest_and_names_it(s: &Spanning) {
    s.hosts.stop_engine("c");
    s.argus()
        .args(["down"])
        .run()
        .code(4)
        .stderr_has("host c (");
    assert!(containers(&s.hosts, "a", &s.cluster).is_empty());
    assert!(containers(&s.hosts, "b", &s.cluster).is_empty());
    s.hosts.start_engine("c");
    s.argus().args(["down"]).run().code(0);
    assert!(containers(&s.hosts, "c", &s.cluster).is_empty());
    assert!(
        s.shared.join("input.txt").exists(),
        "down keeps the shared data"
    );
}

#[test]
fn a_host_whose_shared_mount_differs_is_refused_before_ray_starts() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let hosts = Hosts::up(
        &ctx,
        &["a", "b"],
        Options {
            tls: true,
            ..Options::default()
        },
    );
    // Both engines on TCP with TLS, the client's certificates found the Docker CLI's way.
    let (cluster, shared, profile) =
        profile(&mut ctx, &hosts, &[("a", "tcp"), ("b", "tcp")], "a", &["b"]);
    let certs = hosts.tls_certs().expect("TLS instance").to_path_buf();
    let tls_argus = |certs: &Path| {
        argus(&ctx, &hosts, &profile)
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", certs)
    };
    // With a client certificate the engines' CA did not sign (here: the client's own
    // certificate posing as the CA) no engine answers: both are named, nothing is made.
    let strangers = ctx.path("wrong-ca");
    std::fs::create_dir_all(&strangers).expect("dir");
    for file in ["cert.pem", "key.pem"] {
        std::fs::copy(certs.join(file), strangers.join(file)).expect("copy");
    }
    std::fs::copy(certs.join("cert.pem"), strangers.join("ca.pem")).expect("copy");
    let run = tls_argus(&strangers).args(["up"]).run().code(4);
    assert!(
        run.stderr.contains("host a (") && run.stderr.contains("host b ("),
        "{}",
        run.stderr
    );
    // Host b has an empty directory where the shared storage should be mounted.
    let elsewhere = ctx.path("not-the-nfs-export");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    hosts.bind_over("b", &shared, &elsewhere);
    let run = tls_argus(&certs)
        .args(["up"])
        .run()
        .code(1)
        .stderr_has("host b does not see the shared storage the head's host sees");
    assert!(
        run.stderr.contains("hint: mount the same storage"),
        "{}",
        run.stderr
    );
    for h in ["a", "b"] {
        assert!(
            containers(&hosts, h, &cluster).is_empty(),
            "no Ray container on {h}"
        );
    }
    // Nothing is left of the probe on the storage.
    let probes: Vec<_> = std::fs::read_dir(shared.join(".argus/probe"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(probes.is_empty(), "{probes:?}");
}

/// Thaws a host's containers when dropped: frozen processes cannot be killed, so a failed
/// test would otherwise leave the fixture unable to go down.
struct Frozen(PathBuf);

impl Frozen {
    /// Freezes every container the host's engine makes from now on (their cgroup parent).
    fn host(hosts: &Hosts, host: &str) -> Self {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/freezer/argus-mh-{}-{host}",
            hosts.instance()
        ));
        std::fs::create_dir_all(&dir).expect("the host's freezer cgroup (cgroup v1)");
        std::fs::write(dir.join("freezer.state"), "FROZEN").expect("freeze");
        Self(dir)
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
    }
}

/// `up`'s probe of a host's interface (a container of the image) takes as long as that host
/// takes to run a container: one that needs longer than doctor's 5 s bound is a busy host,
/// not a failed one, and the `up` goes on.
#[test]
fn a_host_slow_to_run_the_interface_probe_does_not_fail_up() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    for h in ["a", "b"] {
        hosts.load_image(h, IMAGE);
    }
    let (cluster, _shared, profile) = profile(
        &mut ctx,
        &hosts,
        &[("a", "unix"), ("b", "unix")],
        "a",
        &["b"],
    );
    let tp = ctx.path("testpoint");
    let mut up = argus(&ctx, &hosts, &profile)
        .env("ARGUS_TESTPOINT", "up:before-iface-probe")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["--json", "up"])
        .spawn_to(&ctx.path("up.out"), &ctx.path("up.err"));
    poll("up to reach the probe", Duration::from_secs(120), || {
        tp.exists().then_some(())
    });
    // Host b runs nothing for 8 s from here: its probe container starts only then.
    let frozen = Frozen::host(&hosts, "b");
    std::fs::remove_file(&tp).expect("let up go on");
    let released = Instant::now();
    poll(
        "b's probe container to be made",
        Duration::from_secs(60),
        || {
            let out = hosts.docker_ok("b", &["ps", "-aq", "--filter", "label=argus.probe"]);
            (!out.trim().is_empty()).then_some(())
        },
    );
    while released.elapsed() < Duration::from_secs(8) {
        assert!(
            up.try_wait().expect("up").is_none(),
            "up ended while b was frozen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    frozen.thaw();
    let status = wait_or_kill(&mut up, Duration::from_secs(240), "up");
    let err = std::fs::read_to_string(ctx.path("up.err")).unwrap_or_default();
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(read_json(&ctx.path("up.out"))["changed"], true);
    let status = argus(&ctx, &hosts, &profile)
        .args(["--json", "status"])
        .run()
        .code(0)
        .json();
    assert_eq!(alive_nodes(&status).len(), 2, "{status:#}");
    // Both hosts' containers carry the interface b's late probe (and a's) found.
    for h in ["a", "b"] {
        let names = containers(&hosts, h, &cluster);
        let name = names.keys().next().expect("a container");
        let env = hosts.docker_ok(h, &["inspect", "-f", "{{json .Config.Env}}", name]);
        assert!(env.contains("NCCL_SOCKET_IFNAME="), "{h}: {env}");
    }
    assert!(
        hosts
            .docker_ok("b", &["ps", "-aq", "--filter", "label=argus.probe"])
            .trim()
            .is_empty(),
        "the probe container is removed"
    );
}

/// What a Ray task holding one GPU sees on every GPU node: `GPU <hostname> <GPUs> <ids>`.
const GPU_PROBE: &str = r#"
import os, socket, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="auto")

@ray.remote(num_gpus=1)
def devices():
    return socket.gethostname(), os.environ.get("NVIDIA_VISIBLE_DEVICES", "unset")

for n in ray.nodes():
    if n["Alive"] and n["Resources"].get("GPU", 0) >= 1:
        strategy = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        host, ids = ray.get(devices.options(scheduling_strategy=strategy).remote())
        print("GPU", host, int(n["Resources"]["GPU"]), ids, flush=True)
"#;

/// The shipped `profiles/h20-8gpu.yaml` as it is (two NVIDIA workers of 4 GPUs pinned to
/// device ids 0-3 and 4-7, a bridge network), with only what this machine cannot give
/// changed: its engine (an emulated host whose dockerd has the stand-in NVIDIA hook), the
/// shared path, the image (the Ray image, not the 10 GB GPU one: the devices are Docker's
/// part), CPUs and memory. `argus up` makes it, and a Ray task on each worker sees exactly
/// that worker's device ids, as NVIDIA's hook would get them.
#[test]
fn the_h20_profile_gives_each_worker_exactly_its_device_ids() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let hosts = Hosts::up(
        &ctx,
        &["a"],
        Options {
            nvidia: true,
            ..Options::default()
        },
    );
    let cluster = ctx.cluster("h20");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let text = std::fs::read_to_string("profiles/h20-8gpu.yaml").expect("h20 profile");
    let mut p: serde_yaml::Value = serde_yaml::from_str(&text).expect("yaml");
    let workers = &p["workers"][0];
    assert_eq!(workers["gpu_mode"].as_str(), Some("nvidia"));
    assert_eq!(workers["count"].as_u64(), Some(2));
    let shipped_ids: Vec<Vec<u64>> =
        serde_yaml::from_value(workers["device_ids"].clone()).expect("device_ids");
    assert_eq!(shipped_ids, [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    let set = |v: &mut serde_yaml::Value, key: &str, value: serde_yaml::Value| {
        v.as_mapping_mut()
            .expect("a mapping")
            .insert(key.into(), value);
    };
    let host = hosts.host("a");
    set(&mut p, "name", cluster.clone().into());
    set(&mut p, "image", IMAGE.into());
    let endpoint: serde_yaml::Value = serde_yaml::from_str(&format!(
        "[{{name: a, docker: '{}', address: {}}}]",
        host.unix, host.ip
    ))
    .expect("hosts");
    set(&mut p, "hosts", endpoint);
    set(
        &mut p["shared"],
        "host_path",
        shared.display().to_string().into(),
    );
    let fit = |node: &mut serde_yaml::Value| {
        set(node, "cpus", 1.into());
        set(node, "memory", "3g".into());
        set(node, "shm_size", "512m".into());
        set(node, "object_store_memory", "256m".into());
    };
    fit(&mut p["head"]);
    fit(&mut p["workers"][0]);
    let profile = ctx.write(
        "h20.yaml",
        &serde_yaml::to_string(&p).expect("profile yaml"),
    );
    ctx.argus()
        .profile(&profile)
        .args(["up", "--timeout", "300"])
        .run()
        .code(0);
    let head = format!("{cluster}-head");
    let out = hosts.docker_ok(
        "a",
        &["exec", &head, "/opt/ray/bin/python3", "-c", GPU_PROBE],
    );
    let seen: BTreeMap<String, (u64, String)> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("GPU ")?.split_whitespace();
            let host = w.next()?.to_string();
            let gpus = w.next()?.parse().ok()?;
            Some((host, (gpus, w.next()?.to_string())))
        })
        .collect();
    let mut want = BTreeMap::new();
    for (i, ids) in ["0,1,2,3", "4,5,6,7"].iter().enumerate() {
        let name = format!("{cluster}-gpu-{i}");
        let hostname = hosts.docker_ok("a", &["inspect", "-f", "{{.Config.Hostname}}", &name]);
        want.insert(hostname.trim().to_string(), (4, ids.to_string()));
    }
    assert_eq!(seen, want, "{out}");
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}
