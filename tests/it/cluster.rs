//! End to end against the Docker Engine on this machine and a real Ray cluster in it.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{TestContext, docker, ensure_image, free_port, inspect, poll, test_profile};

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

/// up -> re-up (no change) -> a removed worker is restored -> a killed raylet is restarted
/// by Docker and rejoins -> down removes only this cluster's things -> shared data survives.
#[test]
fn cluster_lifecycle() {
    if TestContext::skip_docker("cluster_lifecycle") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("lifecycle");
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 2, ""));
    let head = format!("{name}-head");
    let (w0, w1) = (format!("{name}-gpu-0"), format!("{name}-gpu-1"));

    // Bystanders: another cluster's container, and one with our prefix but no label.
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

    // Cold up: 3 ALIVE nodes with the right GPUs and resources.
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["up", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(alive_nodes(&report).len(), 3, "{report:#}");
    let h = node(&report, &head);
    assert_eq!(h["resources_total"]["GPU"].as_f64().unwrap_or(0.0), 0.0);
    assert_eq!(h["resources_total"]["head_node"], 1.0);
    for w in [&w0, &w1] {
        let n = node(&report, w);
        assert_eq!(n["resources_total"]["GPU"], 2.0, "{n:#}");
        assert_eq!(n["resources_total"]["worker_node"], 1.0, "{n:#}");
        assert!(n["resources_total"].get("head_node").is_none());
    }
    assert_eq!(report["gpus"], 4.0);
    for dir in [
        "common/code",
        "common/datasets",
        "common/hf",
        "user/code",
        "jobs",
        "runs",
    ] {
        assert!(shared.join(dir).is_dir(), "shared layout lacks {dir}");
    }
    std::fs::write(shared.join("user/keep.txt"), "still here").expect("write shared file");

    // Second up: nothing changes.
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["up", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(report["changed"], false, "{report:#}");
    assert!(actions(&report).iter().all(|(a, _)| a == "keep"));

    // The human summary says so too.
    ctx.argus()
        .profile(&profile)
        .args(["up"])
        .run()
        .code(0)
        .stderr_has("already up to date")
        .stdout_has("dashboard: http://127.0.0.1:");

    // A worker removed by hand is restored; nothing else is touched.
    let head_id = inspect(&head)["Id"].clone();
    docker(&["rm", "-f", &w1]);
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["up", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        actions(&report),
        vec![
            ("keep".into(), head.clone()),
            ("keep".into(), w0.clone()),
            ("create".into(), w1.clone())
        ]
    );
    assert_eq!(alive_nodes(&report).len(), 3);
    assert_eq!(
        inspect(&head)["Id"],
        head_id,
        "the head must not be recreated"
    );

    // A worker whose raylet is killed is restarted by Docker and rejoins Ray.
    let old_node_id = node(&report, &w0)["node_id"].clone();
    let kill_raylet = "import os, signal\nfor p in os.listdir('/proc'):\n    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0]\n    except Exception:\n        continue\n    if cmd.endswith(b'raylet'):\n        os.kill(int(p), signal.SIGKILL)\n";
    docker(&["exec", &w0, "python3", "-c", kill_raylet]);
    poll(
        "the worker container to be restarted",
        Duration::from_secs(90),
        || (inspect(&w0)["RestartCount"].as_i64().unwrap_or(0) >= 1).then_some(()),
    );
    poll(
        "the restarted worker to rejoin Ray",
        Duration::from_secs(180),
        || {
            let status = ctx
                .argus()
                .profile(&profile)
                .args(["status", "--json"])
                .run()
                .json();
            let rejoined = status["nodes"].as_array()?.iter().any(|n| {
                n["node_name"] == w0.as_str()
                    && n["state"] == "ALIVE"
                    && n["node_id"] != old_node_id
            });
            rejoined.then_some(())
        },
    );
    let status = ctx.argus().profile(&profile).args(["status"]).run().code(0);
    assert!(
        status.stdout.contains(&w0) && status.stdout.contains("ALIVE"),
        "{}",
        status.stdout
    );

    // Down removes this cluster's containers and network, and nothing else.
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["down", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        report["removed_containers"].as_array().map(Vec::len),
        Some(3),
        "{report:#}"
    );
    assert!(ctx.cluster_containers(&name).is_empty());
    assert!(
        docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("name=^{name}-net$")
        ])
        .trim()
        .is_empty()
    );
    assert!(
        !inspect(&other).is_null(),
        "another cluster's container must survive down"
    );
    assert!(
        !inspect(&unlabelled).is_null(),
        "an unlabelled container must survive down"
    );
    ctx.argus()
        .profile(&profile)
        .args(["down"])
        .run()
        .code(0)
        .stderr_has("already down");

    // The shared data survives down + up, and the containers see it.
    assert_eq!(
        std::fs::read_to_string(shared.join("user/keep.txt")).expect("kept file"),
        "still here"
    );
    ctx.argus()
        .profile(&profile)
        .args(["up", "--json"])
        .run()
        .code(0);
    assert_eq!(
        docker(&["exec", &head, "cat", "/mnt/shared/user/keep.txt"]),
        "still here"
    );
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}

/// nvidia mode: the created container carries the device request with the profile's ids
/// (it cannot start here without a GPU, which argus reports as a failure).
#[test]
fn nvidia_workers_carry_their_device_request() {
    if TestContext::skip_docker("nvidia_workers_carry_their_device_request") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("nvidia");
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
    assert!(
        ctx.cluster_containers(&name).is_empty(),
        "a dry run creates nothing"
    );

    let run = ctx
        .argus()
        .profile(&profile)
        .args(["up", "--timeout", "60"])
        .run();
    assert_ne!(
        run.code, 0,
        "a GPU container cannot start on this machine:\n{}",
        run.stderr
    );
    let worker = inspect(&format!("{name}-gpu-0"));
    let request = &worker["HostConfig"]["DeviceRequests"][0];
    assert_eq!(request["Driver"], "nvidia", "{worker:#}");
    assert_eq!(request["DeviceIDs"], serde_json::json!(["1", "3"]));
    assert_eq!(request["Capabilities"], serde_json::json!([["gpu"]]));
    assert_eq!(worker["Config"]["Labels"]["argus.role"], "worker");
}

/// A worker whose Ray refuses to start (an object store below Ray's minimum) fails `up`
/// quickly with the container's own log, instead of waiting out the timeout.
#[test]
fn a_node_that_cannot_start_fails_fast_with_its_log() {
    if TestContext::skip_docker("a_node_that_cannot_start_fails_fast_with_its_log") {
        return;
    }
    ensure_image();
    let mut ctx = TestContext::new("crash");
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
