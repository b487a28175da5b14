//! End to end against the Docker Engine on this machine and a real Ray cluster in it.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, docker, free_port, inspect, poll, test_profile};

fn alive_nodes(report: &Value) -> Vec<&Value> {
    report["nodes"]
        .as_array()
        .map(|n| n.iter().filter(|n| n["state"] == "ALIVE").collect())
        .unwrap_or_default()
}

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    alive_nodes(report)
        .into_iter()
        .find(|n| n["node_name"] == name)
        .unwrap_or_else(|| panic!("no ALIVE node {name} in {report:#}"))
}

fn actions(report: &Value) -> Vec<(String, String)> {
    report["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or("").to_string(),
                a["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A small cluster of this test's own: its profile path and container names.
struct Cluster {
    name: String,
    profile: std::path::PathBuf,
    shared: std::path::PathBuf,
    head: String,
    workers: Vec<String>,
}

fn cluster(ctx: &mut TestContext, workers: u32) -> Cluster {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &shared, free_port(), workers, ""),
    );
    Cluster {
        head: format!("{name}-head"),
        workers: (0..workers).map(|i| format!("{name}-gpu-{i}")).collect(),
        name,
        profile,
        shared,
    }
}

fn up_json(ctx: &TestContext, c: &Cluster) -> Value {
    ctx.argus()
        .profile(&c.profile)
        .args(["up", "--json"])
        .run()
        .code(0)
        .json()
}

/// Ray's nodes as `argus status --json` reports them right now.
fn ray_nodes(ctx: &TestContext, c: &Cluster) -> Vec<Value> {
    ctx.argus()
        .profile(&c.profile)
        .args(["status", "--json"])
        .run()
        .json()["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The ids of the networks labelled as this cluster's and named `<cluster>-net`.
fn cluster_networks(c: &Cluster) -> Vec<String> {
    docker(&[
        "network",
        "ls",
        "-q",
        "--filter",
        &format!("label=argus.cluster={}", c.name),
        "--filter",
        &format!("name=^{}-net$", c.name),
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// Cold up: exactly the planned nodes with their GPUs and resources, the shared layout;
/// a second up changes nothing and says so.
#[test]
fn up_converges_and_a_second_up_changes_nothing() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 2);
    let report = up_json(&ctx, &c);
    assert_eq!(alive_nodes(&report).len(), 3, "{report:#}");
    let h = node(&report, &c.head);
    assert_eq!(h["resources_total"]["GPU"].as_f64().unwrap_or(0.0), 0.0);
    assert_eq!(h["resources_total"]["head_node"], 1.0);
    for w in &c.workers {
        let n = node(&report, w);
        assert_eq!(n["resources_total"]["GPU"], 2.0, "{n:#}");
        assert_eq!(n["resources_total"]["worker_node"], 1.0, "{n:#}");
        assert!(n["resources_total"].get("head_node").is_none());
    }
    assert_eq!(report["gpus"], 4.0);
    // Where the head shares cores with workers it goes first (CPU weight; default 1024).
    assert_eq!(inspect(&c.head)["HostConfig"]["CpuShares"], 8192);
    for w in &c.workers {
        assert_eq!(inspect(w)["HostConfig"]["CpuShares"], 0, "{w}");
    }
    for dir in [
        "common/code",
        "common/datasets",
        "common/hf",
        "user/code",
        "jobs",
        "runs",
    ] {
        assert!(c.shared.join(dir).is_dir(), "shared layout lacks {dir}");
    }
    let report = up_json(&ctx, &c);
    assert_eq!(report["changed"], false, "{report:#}");
    assert!(actions(&report).iter().all(|(a, _)| a == "keep"));
    ctx.argus()
        .profile(&c.profile)
        .args(["up"])
        .run()
        .code(0)
        .stderr_has("already up to date")
        .stdout_has("dashboard: http://127.0.0.1:");
    assert_eq!(cluster_networks(&c).len(), 1);
}

/// A worker removed by hand is recreated, and `up` returns only once Ray has the NEW
/// container's node: the removed one's node (same name, ALIVE until Ray's health check
/// expires) never counts.
#[test]
fn a_recreated_worker_counts_only_with_its_new_node() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 1);
    let report = up_json(&ctx, &c);
    let w = &c.workers[0];
    let old_id = node(&report, w)["node_id"].clone();
    let head_id = inspect(&c.head)["Id"].clone();
    docker(&["rm", "-f", w]);
    let report = up_json(&ctx, &c);
    assert_eq!(
        actions(&report),
        vec![
            ("keep".into(), c.head.clone()),
            ("create".into(), w.clone())
        ]
    );
    assert_eq!(
        inspect(&c.head)["Id"],
        head_id,
        "the head must not be recreated"
    );
    // At the moment up returned: the ALIVE node of that name is the new one, alone.
    let alive: Vec<Value> = ray_nodes(&ctx, &c)
        .into_iter()
        .filter(|n| n["node_name"] == w.as_str() && n["state"] == "ALIVE")
        .collect();
    assert_eq!(alive.len(), 1, "{alive:#?}");
    assert_ne!(
        alive[0]["node_id"], old_id,
        "up counted the removed container's node"
    );
    assert_ne!(node(&report, w)["node_id"], old_id);
}

/// A worker whose raylet dies is restarted by Docker and rejoins Ray as a new node; `up`
/// then counts the new node, not the one of the container's previous life.
#[test]
fn a_killed_raylet_is_restarted_and_up_counts_its_new_node() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 1);
    let report = up_json(&ctx, &c);
    let w = &c.workers[0];
    let old_id = node(&report, w)["node_id"].clone();
    let kill_raylet = "import os, signal\nfor p in os.listdir('/proc'):\n    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0]\n    except Exception:\n        continue\n    if cmd.endswith(b'raylet'):\n        os.kill(int(p), signal.SIGKILL)\n";
    docker(&["exec", w, "python3", "-c", kill_raylet]);
    poll(
        "the worker container to be restarted",
        Duration::from_secs(90),
        || (inspect(w)["RestartCount"].as_i64().unwrap_or(0) >= 1).then_some(()),
    );
    // up right after the restart: it waits for the new node, whatever Ray still lists.
    let report = up_json(&ctx, &c);
    assert!(
        actions(&report).iter().all(|(a, _)| a == "keep"),
        "{report:#}"
    );
    let alive: Vec<Value> = ray_nodes(&ctx, &c)
        .into_iter()
        .filter(|n| n["node_name"] == w.as_str() && n["state"] == "ALIVE")
        .collect();
    assert_eq!(alive.len(), 1, "{alive:#?}");
    assert_ne!(alive[0]["node_id"], old_id);
}

/// down removes this cluster's containers and every network labelled as its own (even
/// two of one name, which Docker allows), nothing else, and keeps the shared data.
#[test]
fn down_removes_only_this_cluster_and_keeps_shared_data() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 1);
    let other = ctx.container("other-head");
    docker(&[
        "create",
        "--name",
        &other,
        "--label",
        "argus.cluster=someone-else",
        "argus/ray:2.51.1",
        "true",
    ]);
    let unlabelled = ctx.container("c-gpu-9");
    docker(&["create", "--name", &unlabelled, "argus/ray:2.51.1", "true"]);
    up_json(&ctx, &c);
    std::fs::write(c.shared.join("user/keep.txt"), "still here").expect("write shared file");
    // A second network of the same name and label, as two racing ups made before locks.
    // The CLI refuses a duplicate name; the API allows it (CheckDuplicate: false).
    let body = serde_json::json!({
        "Name": format!("{}-net", c.name),
        "CheckDuplicate": false,
        "Labels": {"argus.cluster": c.name},
    });
    let created = std::process::Command::new("curl")
        .args(["-sf", "--unix-socket", "/var/run/docker.sock", "-X", "POST"])
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ])
        .arg("http://localhost/networks/create")
        .output()
        .expect("curl");
    assert!(created.status.success(), "{created:?}");
    assert_eq!(cluster_networks(&c).len(), 2);

    let report = ctx
        .argus()
        .profile(&c.profile)
        .args(["down", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        report["removed_containers"].as_array().map(Vec::len),
        Some(2),
        "{report:#}"
    );
    assert!(ctx.cluster_containers(&c.name).is_empty());
    assert!(cluster_networks(&c).is_empty(), "down left a network");
    assert!(
        !inspect(&other).is_null(),
        "another cluster's container must survive"
    );
    assert!(
        !inspect(&unlabelled).is_null(),
        "an unlabelled container must survive"
    );
    ctx.argus()
        .profile(&c.profile)
        .args(["down"])
        .run()
        .code(0)
        .stderr_has("already down");
    assert_eq!(
        std::fs::read_to_string(c.shared.join("user/keep.txt")).expect("kept file"),
        "still here"
    );
    up_json(&ctx, &c);
    assert_eq!(
        docker(&["exec", &c.head, "cat", "/mnt/shared/user/keep.txt"]),
        "still here"
    );
}

/// Two `up`s at once on one profile: the second waits for the first's lock, naming its
/// holder, then finds the cluster converged. One network, one set of containers.
#[test]
fn two_concurrent_ups_end_with_one_healthy_cluster() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 1);
    let tp = ctx.path("testpoint");
    let mut first = ctx
        .argus()
        .profile(&c.profile)
        .env("ARGUS_TESTPOINT", "cluster:locked")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["up"])
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    poll(
        "the first up to hold the lock",
        Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    let mut second = ctx
        .argus()
        .profile(&c.profile)
        .args(["up", "--json"])
        .spawn_to(&ctx.path("2.out"), &ctx.path("2.err"));
    let holder = format!("pid {}", first.id());
    poll(
        "the second up to wait for the first",
        Duration::from_secs(60),
        || {
            let err = std::fs::read_to_string(ctx.path("2.err")).unwrap_or_default();
            (err.contains(&format!("waiting for cluster {}", c.name)) && err.contains(&holder))
                .then_some(())
        },
    );
    std::fs::remove_file(&tp).expect("release the first up");
    assert!(first.wait().expect("first up").success());
    assert!(second.wait().expect("second up").success());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(ctx.path("2.out")).unwrap_or_default())
            .expect("second up's JSON");
    assert_eq!(report["changed"], false, "{report:#}");
    assert_eq!(cluster_networks(&c).len(), 1);
    assert_eq!(ctx.cluster_containers(&c.name).len(), 2);
    assert_eq!(alive_nodes(&report).len(), 2);
}

/// A lock left by an `up` that was killed is taken over at once (its holder is gone).
#[test]
fn a_lock_left_by_a_killed_up_is_taken_over() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let c = cluster(&mut ctx, 1);
    let tp = ctx.path("testpoint");
    let mut first = ctx
        .argus()
        .profile(&c.profile)
        .env("ARGUS_TESTPOINT", "cluster:locked")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["up"])
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    poll(
        "the first up to hold the lock",
        Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    first.kill().expect("kill the first up");
    let _ = first.wait();
    let lock = c.shared.join(format!(".argus/locks/cluster-{}", c.name));
    assert!(lock.is_dir(), "the killed up left its lock");
    let report = up_json(&ctx, &c);
    assert_eq!(alive_nodes(&report).len(), 2, "{report:#}");
    assert!(!lock.exists(), "the lock is released after the second up");
}

/// With host networking the dashboard (the Jobs API runs code for whoever reaches it)
/// listens on `ray.dashboard_bind` only, not on every interface of the host.
#[test]
fn host_mode_dashboard_listens_only_on_dashboard_bind() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let port = free_port();
    let profile = test_profile(&name, &shared, port, 1, "").replace(
        "ray:\n",
        &format!(
            "network:\n  mode: host\nray:\n  gcs_port: {}\n  dashboard_bind: 127.0.0.1\n",
            free_port()
        ),
    );
    let profile = ctx.write("p.yaml", &profile);
    ctx.argus()
        .profile(&profile)
        .args(["up", "--json"])
        .run()
        .code(0);
    let cmd = inspect(&format!("{name}-head"))["Config"]["Cmd"].to_string();
    assert!(cmd.contains("--dashboard-host=127.0.0.1"), "{cmd}");
    assert!(!cmd.contains("0.0.0.0"), "{cmd}");
    // Reachable on loopback, refused on the host's other addresses.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let addresses = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut checked = 0;
    for ip in addresses
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
    {
        if ip.is_loopback() {
            continue;
        }
        checked += 1;
        assert!(
            std::net::TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(2))
                .is_err(),
            "the dashboard answers on {ip}:{port}"
        );
    }
    assert!(
        checked > 0,
        "no non-loopback address to check: {addresses:?}"
    );
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}

/// nvidia mode: the plan carries the profile's device ids; on an engine without NVIDIA's
/// runtime (this machine's) `up`'s preflight refuses before creating anything, naming the
/// runtime. (The device request a worker is created with is proven on an engine that has
/// the driver, with the stand-in hook: tests/it/slurm.rs.)
#[test]
fn nvidia_workers_carry_their_device_request() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "").replace(
        "    gpus: 2\n",
        "    gpus: 2\n    gpu_mode: nvidia\n    device_ids: [[1, 3]]\n",
    );
    let profile = ctx.write("p.yaml", &text);

    // The plan shows the device ids without touching Docker state.
    ctx.argus()
        .profile(&profile)
        .args(["up", "--dry-run"])
        .run()
        .code(0)
        .stdout_has("nvidia GPUs [1, 3]");
    let plan = ctx
        .argus()
        .profile(&profile)
        .args(["--json", "up", "--dry-run"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        plan["plan"]["containers"][1]["gpu"],
        serde_json::json!({"mode": "nvidia", "device_ids": [1, 3]}),
        "{plan:#}"
    );
    assert!(
        ctx.cluster_containers(&name).is_empty(),
        "a dry run creates nothing"
    );

    let run = ctx
        .argus()
        .profile(&profile)
        .args(["up", "--timeout", "60"])
        .run()
        .code(1)
        .stderr_has("gpu_runtime");
    assert!(
        run.stderr.contains("could not select device driver"),
        "{}",
        run.stderr
    );
    assert!(
        ctx.cluster_containers(&name).is_empty(),
        "refused before anything is created"
    );
}

/// A worker whose Ray refuses to start (an object store below Ray's minimum) fails `up`
/// quickly with the container's own log, instead of waiting out the timeout.
#[test]
fn a_node_that_cannot_start_fails_fast_with_its_log() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    // Only the worker's line has four spaces of indent.
    let text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "").replace(
        "    object_store_memory: 128m\n",
        "    object_store_memory: 1m\n",
    );
    let profile = ctx.write("p.yaml", &text);
    // "stopped while starting Ray" is the fail-fast error; a timeout says "was not ready after".
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["up"])
        .run()
        .code(1)
        .stderr_has(&format!(
            "container {name}-gpu-0 stopped while starting Ray"
        ));
    assert!(
        run.stderr.to_lowercase().contains("object store"),
        "the error shows Ray's own words:\n{}",
        run.stderr
    );
}

/// The port block a container's Ray node uses (host mode), from its command.
fn port_block(container: &str) -> u32 {
    let cmd = inspect(container)["Config"]["Cmd"].clone();
    cmd.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--node-manager-port="))
        .and_then(|p| p.parse::<u32>().ok())
        .map(|p| (p - 20000) / 1000)
        .unwrap_or_else(|| panic!("{container} has no --node-manager-port: {cmd}"))
}

/// Two host-mode clusters on one host (several users share GPU hosts): the second takes
/// port blocks the first does not hold, read from the engine, and both come up; an `up`
/// again keeps its blocks; a third whose GCS port the first one's head holds is refused
/// (exit 2) naming that cluster, and creates nothing.
#[test]
fn two_host_mode_clusters_on_one_host_take_their_own_port_blocks() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let host_mode = |ctx: &mut TestContext, suffix: &str, gcs: u16| {
        let name = ctx.cluster(suffix);
        let text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "").replace(
            "ray:\n",
            &format!("network:\n  mode: host\nray:\n  gcs_port: {gcs}\n"),
        );
        (name.clone(), ctx.write(&format!("{suffix}.yaml"), &text))
    };
    let gcs_a = free_port();
    let (a, profile_a) = host_mode(&mut ctx, "a", gcs_a);
    let (b, profile_b) = host_mode(&mut ctx, "b", free_port());
    for profile in [&profile_a, &profile_b] {
        let report = ctx
            .argus()
            .profile(profile)
            .args(["up", "--json"])
            .run()
            .code(0)
            .json();
        assert_eq!(alive_nodes(&report).len(), 2, "{report:#}");
    }
    let blocks_a = [
        port_block(&format!("{a}-head")),
        port_block(&format!("{a}-gpu-0")),
    ];
    let blocks_b = [
        port_block(&format!("{b}-head")),
        port_block(&format!("{b}-gpu-0")),
    ];
    assert!(
        blocks_a.iter().all(|x| !blocks_b.contains(x)),
        "{a} has blocks {blocks_a:?}, {b} {blocks_b:?}"
    );
    let again = ctx
        .argus()
        .profile(&profile_b)
        .args(["up", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(again["changed"], false, "{again:#}");

    let (c, profile_c) = host_mode(&mut ctx, "c", gcs_a);
    ctx.argus()
        .profile(&profile_c)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(&format!(
            "gcs_port {gcs_a} of cluster {c} is already taken on host local by cluster {a} (container {a}-head)"
        ));
    assert!(ctx.cluster_containers(&c).is_empty());
    for profile in [&profile_a, &profile_b] {
        ctx.argus().profile(profile).args(["down"]).run().code(0);
    }
}
