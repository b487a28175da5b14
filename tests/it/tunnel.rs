//! The port-forward through Docker exec streams (`cluster::tunnel`), against the real
//! engine: servers in a container that has no network at all (only its own loopback), so
//! the exec stream is the only way in; and a real Ray head whose dashboard listens on the
//! container's loopback with no published port.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argus::cluster::docker;
use argus::cluster::tunnel::{RELAY_GRACE_S, Tunnel, TunnelError};
use argus::ray::RayClient;
use argus::ray::jobs::JobsApi;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{self, TestContext, ensure_image, inspect};
use crate::hosts::{Hosts, Options};

const IMAGE: &str = "argus/ray:2.51.1";

/// Port 8001 (on the address of argv[1]): HTTP/1.1 with keep-alive, GET serves /srv, POST echoes its body.
/// Port 8002: raw TCP echo that answers everything it read once its client half-closes.
const SERVERS: &str = r#"
import http.server, os, socket, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        with open(os.path.join("/srv", os.path.basename(self.path)), "rb") as f:
            self.reply(f.read())
    def do_POST(self):
        self.reply(self.rfile.read(int(self.headers["Content-Length"])))
    def log_message(self, *args):
        pass
def echo_until_eof():
    server = socket.create_server(("127.0.0.1", 8002))
    while True:
        conn, _ = server.accept()
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        conn.sendall(data)
        conn.close()
threading.Thread(target=echo_until_eof, daemon=True).start()
http.server.ThreadingHTTPServer((sys.argv[1], 8001), H).serve_forever()
"#;

/// The process-wide TLS provider reqwest needs (argus's `run` installs it; tests call
/// the library directly).
fn tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn random_bytes(n: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    std::fs::File::open("/dev/urandom")
        .expect("urandom")
        .take(n)
        .read_to_end(&mut bytes)
        .expect("random bytes");
    bytes
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A container running the servers with `network` (`none`, or `bridge` plus `publish`), on
/// the engine at `engine` (None: this machine's).
fn start_servers(
    ctx: &mut TestContext,
    engine: Option<&str>,
    network: &str,
    publish: Option<u16>,
) -> String {
    let srv = ctx.path("srv");
    std::fs::create_dir_all(&srv).expect("srv");
    std::fs::write(srv.join("blob"), random_bytes(3 << 20)).expect("blob");
    std::fs::write(srv.join("small"), random_bytes(4 << 10)).expect("small");
    std::fs::write(srv.join("servers.py"), SERVERS).expect("servers.py");
    let name = ctx.container("srv");
    let volume = format!("{}:/srv:ro", srv.display());
    let mut args: Vec<String> = engine
        .map(|e| vec!["-H".to_string(), e.to_string()])
        .unwrap_or_default();
    args.extend([
        "run".to_string(),
        "-d".into(),
        "--init".into(),
        "--name".into(),
        name.clone(),
        "--network".into(),
        network.into(),
        "-v".into(),
        volume,
        "-w".into(),
        "/srv".into(),
    ]);
    if let Some(port) = publish {
        args.extend(["-p".into(), format!("127.0.0.1:{port}:8001")]);
    }
    args.extend([
        IMAGE.into(),
        "sh".into(),
        "-c".into(),
        format!(
            "python3 -m http.server --bind 127.0.0.1 8000 & exec python3 /srv/servers.py {}",
            // A published port reaches the container's own address, not its loopback.
            if publish.is_some() {
                "0.0.0.0"
            } else {
                "127.0.0.1"
            }
        ),
    ]);
    let out = std::process::Command::new("docker")
        .args(&args)
        .output()
        .expect("docker run");
    assert!(
        out.status.success(),
        "docker run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    name
}

/// Opens a tunnel once the port inside accepts (servers take a moment to start).
async fn open_when_ready(container: &str, port: u16) -> Tunnel {
    open_on_when_ready(None, container, port).await
}

/// The same through the engine at `engine`.
async fn open_on_when_ready(engine: Option<&str>, container: &str, port: u16) -> Tunnel {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let docker = docker::connect(engine).await.expect("docker");
        match Tunnel::open(docker, container, port).await {
            Ok(tunnel) => return tunnel,
            Err(TunnelError::Refused { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("tunnel to {container}:{port}: {e:#?}"),
        }
    }
}

/// The local address of every listening TCP socket on `port`, from /proc/net/tcp{,6}.
fn listening_addresses(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let Some((addr, hex_port)) = local.split_once(':') else {
                continue;
            };
            // 0A is LISTEN.
            if *state == "0A" && u16::from_str_radix(hex_port, 16).ok() == Some(port) {
                found.push(addr.to_string());
            }
        }
    }
    found
}

/// How many tunnel relays run in `container` (their command line has `-I -S -c`).
fn relays_in(container: &str) -> usize {
    let count = harness::docker(&[
        "exec",
        container,
        "python3",
        "-c",
        "import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n        if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'python3\\0-I\\0-S\\0-c'):\n            n += 1\n    except OSError:\n        pass\nprint(n)",
    ]);
    count.trim().parse().unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_carries_http_into_a_container_that_has_no_network() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    tls();
    let container = start_servers(&mut ctx, None, "none", None);
    let files = open_when_ready(&container, 8000).await;
    let echo = open_when_ready(&container, 8001).await;
    let raw = open_when_ready(&container, 8002).await;
    let http = reqwest::Client::new();

    // The exact bytes of a 3 MB random file, from `python3 -m http.server`.
    let blob = std::fs::read(ctx.path("srv/blob")).expect("blob");
    let got = http
        .get(format!("{}/blob", files.url()))
        .send()
        .await
        .expect("GET blob")
        .bytes()
        .await
        .expect("blob body");
    assert_eq!(got.len(), blob.len());
    assert_eq!(sha256(&got), sha256(&blob));

    // 20 requests at once, each on its own connection and relay.
    let small = std::fs::read(ctx.path("srv/small")).expect("small");
    let before = files.relays_started();
    let requests = (0..20).map(|_| {
        let http = reqwest::Client::new();
        let url = format!("{}/small", files.url());
        async move { http.get(url).send().await?.bytes().await }
    });
    let bodies = futures_util::future::join_all(requests).await;
    for body in bodies {
        assert_eq!(sha256(&body.expect("concurrent GET")), sha256(&small));
    }
    assert_eq!(files.relays_started() - before, 20);

    // A 1 MB POST body comes back whole; keep-alive reuses one relay.
    let body = random_bytes(1 << 20);
    let before = echo.relays_started();
    for _ in 0..3 {
        let back = http
            .post(format!("{}/echo", echo.url()))
            .body(body.clone())
            .send()
            .await
            .expect("POST")
            .bytes()
            .await
            .expect("POST body");
        assert_eq!(sha256(&back), sha256(&body));
    }
    // Keep-alive through the tunnel: fewer relays than requests (a loaded machine may see
    // the client open a second connection before the first is back in its pool).
    let relays = echo.relays_started() - before;
    assert!(relays < 3, "keep-alive: {relays} relays for 3 requests");

    // A half-close reaches the server: it answers only once it has read EOF.
    let mut stream = tokio::net::TcpStream::connect(raw.local_addr())
        .await
        .expect("connect");
    let sent = random_bytes(200 << 10);
    stream.write_all(&sent).await.expect("write");
    stream.shutdown().await.expect("half-close");
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut back))
        .await
        .expect("the server saw EOF and answered")
        .expect("read");
    assert_eq!(sha256(&back), sha256(&sent));

    // Listening on loopback only.
    for tunnel in [&files, &echo, &raw] {
        assert_eq!(tunnel.local_addr().ip().to_string(), "127.0.0.1");
        assert!(tunnel.url().starts_with("http://127.0.0.1:"));
        assert_eq!(
            listening_addresses(tunnel.local_addr().port()),
            ["0100007F"],
            "only 127.0.0.1 listens"
        );
    }

    // Errors before anything is forwarded: a refused port, a missing or stopped container.
    let connect = || async { docker::connect(None).await.expect("docker") };
    let refused = Tunnel::open(connect().await, &container, 8009).await;
    assert!(
        matches!(&refused, Err(TunnelError::Refused { port: 8009, detail, .. }) if detail.contains("refused")),
        "{refused:?}"
    );
    let missing = ctx.container("absent");
    let absent = Tunnel::open(connect().await, &missing, 8000).await;
    assert!(
        matches!(&absent, Err(TunnelError::NoContainer(name)) if *name == missing),
        "{absent:?}"
    );
    let stopped = ctx.container("stopped");
    harness::docker(&["create", "--name", &stopped, IMAGE, "true"]);
    let not_running = Tunnel::open(connect().await, &stopped, 8000).await;
    assert!(
        matches!(&not_running, Err(TunnelError::NotRunning(name)) if *name == stopped),
        "{not_running:?}"
    );
    assert!(absent.unwrap_err().to_string().contains("does not exist"));

    // After drop: the local ports refuse and every relay in the container ends (the
    // pooled keep-alive connection to the echo server still holds one now).
    assert!(relays_in(&container) >= 1, "relays are counted");
    let ports: Vec<_> = [&files, &echo, &raw].map(|t| t.local_addr()).to_vec();
    drop((files, echo, raw));
    drop(http);
    for addr in ports {
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            assert!(Instant::now() < deadline, "{addr} still accepts after drop");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(u64::from(RELAY_GRACE_S) + 20);
    loop {
        let relays = relays_in(&container);
        if relays == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{relays} relays still run in the container"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Ray head on a bridge network with no published port and its dashboard on the
/// container's own loopback: RayClient reaches it through a tunnel it keeps alive, REST and
/// the websocket log tail alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_client_reaches_a_head_with_no_published_port_through_a_tunnel() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    tls();
    let head = ctx.container("head");
    let run = std::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--init",
            "--name",
            &head,
            "--shm-size",
            "256m",
            IMAGE,
            "ray",
            "start",
            "--head",
            "--block",
            "--dashboard-host=127.0.0.1",
            "--dashboard-port=8265",
            "--num-cpus=1",
            "--object-store-memory=128000000",
            "--disable-usage-stats",
        ])
        .output()
        .expect("docker run");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ports = &inspect(&head)["NetworkSettings"]["Ports"];
    assert!(
        ports.as_object().is_none_or(|p| p.is_empty()),
        "no published port: {ports}"
    );

    let tunnel = open_when_ready(&head, 8265).await;
    let url = tunnel.url();
    let addr = tunnel.local_addr();
    let ray = RayClient::new(&url, None).with_keepalive(Arc::new(tunnel));
    let deadline = Instant::now() + Duration::from_secs(120);
    let nodes = loop {
        match ray.nodes().await {
            Ok(nodes) if nodes.iter().any(|n| n.alive() && n.is_head_node) => break nodes,
            other => {
                assert!(Instant::now() < deadline, "no ALIVE head: {other:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(nodes.len(), 1);
    assert_eq!(ray.ray_version().await.expect("version"), "2.51.1");

    // The websocket log tail goes through the same tunnel.
    let jobs = JobsApi { ray: &ray };
    let id = jobs
        .submit(&serde_json::json!({
            "entrypoint": "echo through-the-tunnel-$((6*7))",
            "submission_id": format!("{}-job", ctx.prefix),
        }))
        .await
        .expect("submit");
    let mut text = String::new();
    tokio::time::timeout(
        Duration::from_secs(120),
        jobs.tail(&id, |frame| text.push_str(frame)),
    )
    .await
    .expect("the tail ends with the job")
    .expect("tail");
    assert!(text.contains("through-the-tunnel-42"), "{text}");

    // A clone keeps the tunnel alive; the last one to go closes it.
    let clone = ray.clone();
    drop(ray);
    assert_eq!(clone.ray_version().await.expect("version"), "2.51.1");
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "the tunnel outlived its client");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Latency and throughput through the tunnel against a published port on loopback
/// (`cargo nextest run --run-ignored only -E 'test(tunnel_measure)' --no-capture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it on demand"]
async fn tunnel_measure() {
    ensure_image();
    tls();
    let mut ctx = TestContext::new("tunnelmeasure");
    let port = harness::free_port();
    let container = start_servers(&mut ctx, None, "bridge", Some(port));
    let tunnel = open_when_ready(&container, 8001).await;
    let direct = format!("http://127.0.0.1:{port}");
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client")
    };
    let pooled = reqwest::Client::new();
    async fn per_request(http: &reqwest::Client, url: &str, n: u32) -> Duration {
        let started = Instant::now();
        for _ in 0..n {
            let body = http.get(url).send().await.expect("GET").bytes().await;
            assert_eq!(body.expect("body").len(), 4 << 10);
        }
        started.elapsed() / n
    }
    async fn throughput(http: &reqwest::Client, url: &str, n: u32) -> f64 {
        let started = Instant::now();
        for _ in 0..n {
            let body = http.get(url).send().await.expect("GET").bytes().await;
            assert_eq!(body.expect("body").len(), 3 << 20);
        }
        f64::from(n * 3) / started.elapsed().as_secs_f64()
    }
    // Warm both paths up.
    per_request(&pooled, &format!("{direct}/small"), 3).await;
    per_request(&pooled, &format!("{}/small", tunnel.url()), 3).await;
    let fresh_client = fresh();
    let report = [
        (
            "small GET, fresh connection, direct",
            per_request(&fresh_client, &format!("{direct}/small"), 30).await,
        ),
        (
            "small GET, fresh connection, tunnel",
            per_request(&fresh_client, &format!("{}/small", tunnel.url()), 30).await,
        ),
        (
            "small GET, keep-alive, direct",
            per_request(&pooled, &format!("{direct}/small"), 200).await,
        ),
        (
            "small GET, keep-alive, tunnel",
            per_request(&pooled, &format!("{}/small", tunnel.url()), 200).await,
        ),
    ];
    for (what, took) in report {
        eprintln!("{what}: {:.2} ms", took.as_secs_f64() * 1000.0);
    }
    let direct_mbs = throughput(&pooled, &format!("{direct}/blob"), 10).await;
    let tunnel_mbs = throughput(&pooled, &format!("{}/blob", tunnel.url()), 10).await;
    eprintln!("3 MB GET throughput: direct {direct_mbs:.0} MB/s, tunnel {tunnel_mbs:.0} MB/s");
    assert!(Path::new(&ctx.path("srv/blob")).exists());
}

/// GET, POST and a half-close through `tunnel` to the servers (8001 HTTP, 8002 raw echo
/// through `echo`); returns (fresh-connection, keep-alive) latency of a small GET.
async fn exercise(ctx: &TestContext, http: &Tunnel, echo: &Tunnel) -> (Duration, Duration) {
    let small = std::fs::read(ctx.path("srv/small")).expect("small");
    let pooled = reqwest::Client::new();
    let started = Instant::now();
    let got = pooled
        .get(format!("{}/small", http.url()))
        .send()
        .await
        .expect("GET")
        .bytes()
        .await
        .expect("body");
    let fresh = started.elapsed();
    assert_eq!(sha256(&got), sha256(&small));
    let started = Instant::now();
    for _ in 0..20 {
        let got = pooled
            .get(format!("{}/small", http.url()))
            .send()
            .await
            .expect("GET")
            .bytes()
            .await
            .expect("body");
        assert_eq!(sha256(&got), sha256(&small));
    }
    let kept = started.elapsed() / 20;
    let body = random_bytes(1 << 20);
    let back = pooled
        .post(format!("{}/echo", http.url()))
        .body(body.clone())
        .send()
        .await
        .expect("POST")
        .bytes()
        .await
        .expect("POST body");
    assert_eq!(sha256(&back), sha256(&body));
    let mut stream = tokio::net::TcpStream::connect(echo.local_addr())
        .await
        .expect("connect");
    let sent = random_bytes(100 << 10);
    stream.write_all(&sent).await.expect("write");
    stream.shutdown().await.expect("half-close");
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut back))
        .await
        .expect("the half-close reached the server")
        .expect("read");
    assert_eq!(sha256(&back), sha256(&sent));
    (fresh, kept)
}

/// The same tunnel into a container on another host (an emulated host with its own
/// engine, `tests/fixtures/multihost.sh`), through each kind of endpoint: its unix socket,
/// its plain `tcp://`, and `ssh://` (the exec stream rides the SSH connection).
#[test]
fn tunnel_reaches_a_container_on_another_host_over_unix_tcp_and_ssh() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    tls();
    let hosts = Hosts::up(
        &ctx,
        &["a"],
        Options {
            ssh: true,
            ..Options::default()
        },
    );
    // argus reaches ssh:// endpoints with the system `ssh`: the fixture's shim (its key and
    // known hosts) goes first on PATH.
    let (key, path) = hosts.ssh_path_env();
    // SAFETY: set before this test starts any thread (its runtime is built below); nextest
    // runs every test in a process of its own.
    unsafe { std::env::set_var(key, path) };
    hosts.load_image("a", IMAGE);
    let host = hosts.host("a");
    let container = start_servers(&mut ctx, Some(&host.unix), "none", None);
    let ssh = host.ssh.clone().expect("ssh endpoint");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for endpoint in [host.unix.as_str(), host.tcp.as_str(), ssh.as_str()] {
            let http = open_on_when_ready(Some(endpoint), &container, 8001).await;
            let echo = open_on_when_ready(Some(endpoint), &container, 8002).await;
            let (fresh, kept) = exercise(&ctx, &http, &echo).await;
            eprintln!(
                "{endpoint}: small GET {:.1} ms on a fresh connection, {:.2} ms kept alive",
                fresh.as_secs_f64() * 1000.0,
                kept.as_secs_f64() * 1000.0
            );
            let refused = Tunnel::open(
                docker::connect(Some(endpoint)).await.expect("docker"),
                &container,
                8009,
            )
            .await;
            assert!(
                matches!(refused, Err(TunnelError::Refused { port: 8009, .. })),
                "{endpoint}: {refused:?}"
            );
        }
    });
    // The container is on host a only: this machine's engine has no such container.
    assert!(
        harness::docker(&["ps", "-aq", "--filter", &format!("name={container}")])
            .trim()
            .is_empty()
    );
    drop(runtime);
}
