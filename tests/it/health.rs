//! The health watcher (`argus::cluster::health`) against the Docker Engine on this machine:
//! a real cluster whose workers are killed, removed, recreated or OOM-killed, and an engine
//! that stops answering or is not there.

use std::path::Path;
use std::time::{Duration, Instant};

use argus::cluster::health::{Lost, LostWhy, Watcher};
use argus::config::LoadedProfile;
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::watch;

use crate::harness::{Profile, TestContext, docker, free_port, inspect, test_profile};

/// The local host's name in a profile without `hosts:`.
const LOCAL: &str = "local";

fn load(path: &Path) -> LoadedProfile {
    LoadedProfile::load(Some(path)).expect("the test profile loads")
}

fn up(ctx: &TestContext, profile: &Path) {
    ctx.argus().profile(profile).args(["up"]).run().code(0);
}

fn lost(container: &str, why: LostWhy) -> Lost {
    Lost {
        host: LOCAL.into(),
        container: Some(container.into()),
        why,
        head: container.ends_with("-head"),
    }
}

/// Checks every half second until `done` holds for what a check reports, at most `timeout`.
async fn check_until(
    watcher: &mut Watcher,
    what: &str,
    timeout: Duration,
    done: impl Fn(&[Lost]) -> bool,
) -> Vec<Lost> {
    let deadline = Instant::now() + timeout;
    loop {
        let lost = watcher.check().await;
        if done(&lost) {
            return lost;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {timeout:?}; the last check said {lost:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A healthy cluster reports nothing; a worker killed with `docker kill` is seen as exited
/// (137, not OOM) within 10 s, then gone once removed, then replaced once `up` recreated it;
/// a watcher made after the repair sees a healthy cluster again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_sees_a_killed_removed_and_replaced_worker() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &ctx.path("shared"), free_port(), 1, ""),
    );
    up(&ctx, &profile);
    let loaded = load(&profile);
    let mut watcher = Watcher::new(&loaded).await.expect("watcher");
    assert_eq!(watcher.check().await, Vec::<Lost>::new(), "healthy cluster");

    let worker = format!("{name}-gpu-0");
    docker(&["kill", &worker]);
    let killed_at = Instant::now();
    let seen = check_until(
        &mut watcher,
        "the killed worker",
        Duration::from_secs(10),
        |l| !l.is_empty(),
    )
    .await;
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    let exited = lost(
        &worker,
        LostWhy::Exited {
            code: 137,
            oom_killed: false,
        },
    );
    assert_eq!(seen, vec![exited.clone()]);
    assert!(!seen[0].is_oom());
    assert_eq!(
        seen[0].to_string(),
        format!("container {worker} on host local exited with code 137")
    );

    docker(&["rm", "-f", &worker]);
    let seen = watcher.check().await;
    assert_eq!(seen, vec![lost(&worker, LostWhy::Missing)]);
    assert_eq!(
        seen[0].to_string(),
        format!("container {worker} on host local is gone")
    );

    up(&ctx, &profile);
    let seen = watcher.check().await;
    assert_eq!(seen, vec![lost(&worker, LostWhy::Replaced)]);

    let mut after_repair = Watcher::new(&loaded).await.expect("watcher");
    assert_eq!(after_repair.check().await, Vec::<Lost>::new());
}

/// A worker whose raylet the kernel OOM-kills (the worker's memory limit lowered under what
/// it holds plus an allocation, the raylet made the OOM killer's first choice): Ray's node
/// exits with it, Docker restarts the container, and the watcher says it was OOM-killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_sees_an_oom_killed_worker() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &ctx.path("shared"), free_port(), 1, ""),
    );
    up(&ctx, &profile);
    let mut watcher = Watcher::new(&load(&profile)).await.expect("watcher");
    assert_eq!(watcher.check().await, Vec::<Lost>::new(), "healthy cluster");
    let worker = format!("{name}-gpu-0");

    let raylet_first = "import os\nfor p in os.listdir('/proc'):\n    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0]\n    except Exception:\n        continue\n    if cmd.endswith(b'raylet'):\n        open(f'/proc/{p}/oom_score_adj', 'w').write('1000')\n        print(p)\n";
    let raylet = docker(&["exec", &worker, "python3", "-c", raylet_first]);
    assert!(!raylet.trim().is_empty(), "no raylet in {worker}");
    let usage = docker(&[
        "exec",
        &worker,
        "sh",
        "-c",
        "cat /sys/fs/cgroup/memory.current 2>/dev/null || cat /sys/fs/cgroup/memory/memory.usage_in_bytes",
    ]);
    let usage: u64 = usage.trim().parse().expect("the worker's memory usage");
    let limit = (usage + (128 << 20)).to_string();
    let update = std::process::Command::new("docker")
        .args([
            "update",
            "--memory",
            &limit,
            "--memory-swap",
            &limit,
            &worker,
        ])
        .output()
        .expect("run docker update");
    assert!(
        update.status.success(),
        "docker update --memory: {}",
        String::from_utf8_lossy(&update.stderr)
    );
    // 512 MiB written page by page: over the limit, so the kernel kills (the raylet first).
    docker(&["exec", &worker, "python3", "-c", "x = b'\\1' * (512 << 20)"]);
    let seen = check_until(
        &mut watcher,
        "the OOM-killed worker",
        Duration::from_secs(90),
        |l| !l.is_empty(),
    )
    .await;
    // Let it come back whole (the test's cleanup removes it anyway).
    docker(&["update", "--memory", "2g", "--memory-swap", "4g", &worker]);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].container.as_deref(), Some(worker.as_str()));
    assert!(
        seen[0].is_oom(),
        "{seen:?}; the engine says {:#}",
        inspect(&worker)["State"]
    );
    assert!(
        seen[0]
            .to_string()
            .starts_with(&format!("container {worker} on host local was OOM-killed")),
        "{}",
        seen[0]
    );
}

/// A TCP front for this machine's Docker socket that can be told to stop answering: the
/// connections it holds and those it accepts from then on get no byte back.
async fn engine_front() -> (u16, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("local addr").port();
    let (freeze, frozen) = watch::channel(false);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            if *frozen.borrow() {
                held.push(tcp);
                continue;
            }
            let mut frozen = frozen.clone();
            tokio::spawn(async move {
                let Ok(mut unix) = UnixStream::connect("/var/run/docker.sock").await else {
                    return;
                };
                let froze = async { frozen.wait_for(|f| *f).await.is_ok() };
                let hung = tokio::select! {
                    _ = copy_bidirectional(&mut tcp, &mut unix) => false,
                    froze = froze => froze,
                };
                if hung {
                    // Both ends stay open, nothing moves.
                    std::future::pending::<()>().await;
                }
            });
        }
    });
    (port, freeze)
}

/// An engine that answered when the watcher was made and then hangs is reported within the
/// round's bound, as is an endpoint where no engine listens; neither hangs the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_an_engine_that_hangs_or_is_gone_within_3s() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let bound = Duration::from_millis(3500);
    let (port, freeze) = engine_front().await;
    let name = ctx.cluster("c");
    let profile = Profile::small(&name)
        .shared(&ctx.path("shared"))
        .port(free_port())
        .yaml(&format!("docker:\n  host: tcp://127.0.0.1:{port}\n"))
        .write(&ctx, "front.yaml");
    let mut watcher = Watcher::new(&load(&profile)).await.expect("watcher");
    // The engine answers: the planned containers (never started) are missing.
    let seen = watcher.check().await;
    assert_eq!(
        seen,
        vec![
            lost(&format!("{name}-head"), LostWhy::Missing),
            lost(&format!("{name}-gpu-0"), LostWhy::Missing),
        ]
    );

    freeze.send_replace(true);
    for round in 0..2 {
        let started = Instant::now();
        let seen = watcher.check().await;
        let took = started.elapsed();
        assert!(took < bound, "round {round} took {took:?}");
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].host, LOCAL);
        assert_eq!(seen[0].container, None);
        assert!(
            matches!(seen[0].why, LostWhy::EngineDown { .. }),
            "{seen:?}"
        );
        assert!(
            seen[0]
                .to_string()
                .starts_with("host local's Docker engine stopped answering: no answer within"),
            "{}",
            seen[0]
        );
    }

    // No engine at all where the profile points: the watcher is made, the check says so.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let gone = Profile::small(&name)
        .shared(&ctx.path("shared"))
        .port(free_port())
        .yaml(&format!("docker:\n  host: tcp://127.0.0.1:{closed}\n"))
        .write(&ctx, "gone.yaml");
    let mut watcher = Watcher::new(&load(&gone)).await.expect("watcher");
    let started = Instant::now();
    let seen = watcher.check().await;
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert_eq!(seen.len(), 1, "{seen:?}");
    let LostWhy::EngineDown { error } = &seen[0].why else {
        panic!("{seen:?}")
    };
    assert!(error.contains(&closed.to_string()), "{error}");
}
