//! `argus doctor`'s network checks and `--collective`, by injection on real engines and real
//! Ray: a port of a node's block taken by another process (named with its pid), a host whose
//! firewall drops the head's GCS (named, with the fix), the collectives' interface argus sets
//! for host networking across hosts (and a second `up` that changes nothing), zero findings on
//! a healthy cluster; an all-reduce between two workers of the verl image with its numbers,
//! and a paused worker named.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Profile, TestContext, free_port, poll};
use crate::hosts::{Hosts, Options};

/// The image with torch (`argus image build --verl`).
const VERL_IMAGE: &str = "argus/verl:0.9.1-cpu";

/// The checks of one section (`host`) of a doctor report: (name, status, seen, fix).
fn checks(report: &serde_json::Value, host: &str) -> Vec<(String, String, String, String)> {
    report["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["host"] == host)
        .flat_map(|h| h["checks"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("name"), text("status"), text("seen"), text("fix"))
        })
        .collect()
}

/// Every check that is not ok or warn, as `host name status: seen`.
fn findings(report: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for h in report["hosts"].as_array().into_iter().flatten() {
        for c in h["checks"].as_array().into_iter().flatten() {
            if c["status"] != "ok" && c["status"] != "warn" {
                out.push(format!(
                    "{} {} {}: {}",
                    h["host"], c["name"], c["status"], c["seen"]
                ));
            }
        }
    }
    out
}

/// What the failed checks of one section saw.
fn failed_seen(report: &serde_json::Value, host: &str) -> Vec<String> {
    checks(report, host)
        .into_iter()
        .filter(|c| c.1 == "fail")
        .map(|c| c.2)
        .collect()
}

/// The one check `name` of `host`.
#[track_caller]
fn one(report: &serde_json::Value, host: &str, name: &str) -> (String, String, String) {
    let found: Vec<_> = checks(report, host)
        .into_iter()
        .filter(|c| c.0 == name)
        .collect();
    assert_eq!(found.len(), 1, "one {name} check on {host}: {report:#}");
    let (_, status, seen, fix) = found.into_iter().next().unwrap_or_default();
    (status, seen, fix)
}

/// A TCP listener "on" a host (in its namespaces, or here with `host` None), ended by drop.
struct Listener {
    pid_file: PathBuf,
    /// What was spawned (the fixture's `exec`, or python itself).
    child: std::process::Child,
}

impl Listener {
    fn start(hosts: Option<&Hosts>, host: &str, bind: &str, port: u16, dir: &Path) -> Listener {
        let pid_file = dir.join(format!("listener-{host}-{port}.pid"));
        // Ends by itself after 10 minutes whatever happens to the test.
        let script = "import os, socket, sys, time\ns = socket.socket()\ns.bind((sys.argv[1], int(sys.argv[2])))\ns.listen()\nopen(sys.argv[3], 'w').write(str(os.getpid()))\ntime.sleep(600)\n";
        let args = [
            "python3",
            "-c",
            script,
            bind,
            &port.to_string(),
            &pid_file.to_string_lossy(),
        ];
        let mut command = match hosts {
            Some(hosts) => {
                let mut c = Command::new(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multihost.sh"),
                );
                c.args(["exec", hosts.instance(), host, "--"]);
                c.args(args);
                c
            }
            None => {
                let mut c = Command::new(args[0]);
                c.args(&args[1..]);
                c
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a listener");
        let listener = Listener { pid_file, child };
        poll("the listener to listen", Duration::from_secs(20), || {
            listener.pid()
        });
        listener
    }

    fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The iptables rule dropping new connections from `host` to the head's GCS, removed by drop.
struct Firewall<'a> {
    hosts: &'a Hosts,
    host: String,
    rule: Vec<String>,
}

impl<'a> Firewall<'a> {
    fn drop_syn_to(hosts: &'a Hosts, host: &str, address: &str, port: u16) -> Firewall<'a> {
        let rule: Vec<String> = [
            "OUTPUT",
            "-d",
            address,
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "--syn",
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut args = vec!["iptables", "-A"];
        args.extend(rule.iter().map(String::as_str));
        let out = hosts.exec(host, &args);
        assert!(
            out.status.success(),
            "iptables on {host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Firewall {
            hosts,
            host: host.to_string(),
            rule,
        }
    }
}

impl Drop for Firewall<'_> {
    fn drop(&mut self) {
        let mut args = vec!["iptables", "-D"];
        args.extend(self.rule.iter().map(String::as_str));
        let _ = self.hosts.exec(&self.host, &args);
    }
}

/// The container's environment variable `key`, on that host's engine.
fn container_env(hosts: &Hosts, host: &str, container: &str, key: &str) -> Option<String> {
    let out = hosts.docker_ok(
        host,
        &["inspect", "--format", "{{json .Config.Env}}", container],
    );
    let env: Vec<String> = serde_json::from_str(out.trim()).unwrap_or_default();
    env.iter()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// Three emulated hosts (head on a, a worker on each of b and c), host networking, set up
/// once: the scenarios run in sequence on the state the one before left.
#[test]
fn doctor_names_a_held_port_and_a_host_cut_from_the_head_on_three_hosts() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b", "c"], Options::default());
    let cluster = ctx.cluster("dn");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let mut hosts_yaml = String::from("hosts:\n");
    for name in ["a", "b", "c"] {
        let host = hosts.host(name);
        hosts_yaml.push_str(&format!(
            "  - {{name: {name}, docker: '{}', address: {}}}\n",
            host.unix, host.ip
        ));
    }
    let text = Profile::small(&cluster)
        .shared(&shared)
        .head("host", "a")
        .workers_on_hosts(&["b", "c"])
        .yaml(&hosts_yaml)
        .yaml("network: {mode: host}\n")
        .build();
    let profile = ctx.write("profile.yaml", &text);
    let argus = || {
        ctx.argus()
            .env("XDG_STATE_HOME", ctx.path("xdg-state"))
            .profile(&profile)
    };
    let (w0, w1) = (format!("{cluster}-gpu-0"), format!("{cluster}-gpu-1"));
    let head_ip = hosts.host("a").ip.to_string();

    // up sets the collectives' interface on every node from its host's route to the head.
    argus().args(["--json", "up"]).run().code(0);
    for (host, container) in [
        ("a", format!("{cluster}-head")),
        ("b", w0.clone()),
        ("c", w1),
    ] {
        for var in ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"] {
            assert_eq!(
                container_env(&hosts, host, &container, var).as_deref(),
                Some("eth0"),
                "{var} of {container} on {host}"
            );
        }
    }

    // Healthy and running: no finding, and fast.
    let started = Instant::now();
    let healthy = argus().args(["--json", "doctor"]).run();
    let took = started.elapsed();
    let report = healthy.json();
    assert_eq!(findings(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(healthy.code, 0, "{}", healthy.stderr);
    eprintln!("doctor on 3 hosts, cluster up: {took:?}");
    assert!(took < Duration::from_secs(10), "doctor took {took:?}");
    for host in ["a", "b", "c"] {
        let (status, seen, _) = one(&report, host, "head_route");
        assert_eq!(status, "ok", "{seen}");
        assert!(
            seen.contains("through eth0") && seen.contains("answered"),
            "{seen}"
        );
        let (status, seen, _) = one(&report, host, "collective_iface");
        assert_eq!(status, "ok", "{seen}");
        assert_eq!(one(&report, host, "ports").0, "ok");
    }

    // The image has no torch: the collective cannot be made (exit 4), and says what to use.
    let run = argus().args(["--json", "doctor", "--collective"]).run();
    let report = run.json();
    let (status, seen, fix) = one(&report, "collective", "collective");
    assert_eq!(status, "unknown", "{seen}");
    assert!(
        seen.contains("no torch") && fix.contains("--verl"),
        "{seen} / {fix}"
    );
    assert_eq!(run.code, 4, "{report:#}");

    // A process on host b holds a port of its worker's block (offset 50: no Ray port).
    let held = Listener::start(Some(&hosts), "b", "0.0.0.0", 20050, ctx.dir.path());
    let pid = held.pid().expect("listener pid");
    let run = argus().args(["--json", "doctor"]).run();
    let report = run.json();
    let (status, seen, fix) = one(&report, "b", "ports");
    assert_eq!(status, "fail", "{report:#}");
    assert!(
        seen.contains("port 20050") && seen.contains(&format!("python3 (pid {pid}")),
        "{seen}"
    );
    assert!(seen.contains(&w0), "names the node: {seen}");
    assert!(fix.contains("on host b, stop python3"), "{fix}");
    assert_eq!(one(&report, "c", "ports").0, "ok", "only b: {report:#}");
    assert_eq!(run.code, 1, "{report:#}");
    drop(held);

    // A second up changes nothing: the interface probe gives the same env.
    let again = argus().args(["--json", "up"]).run().code(0).json();
    assert_eq!(again["changed"], false, "{again}");

    // Host c's firewall drops new connections to the head's GCS: c is named, with the fix.
    let firewall = Firewall::drop_syn_to(&hosts, "c", &head_ip, 6379);
    let started = Instant::now();
    let run = argus().args(["--json", "doctor"]).run();
    let took = started.elapsed();
    let report = run.json();
    let (status, seen, fix) = one(&report, "c", "head_route");
    assert_eq!(status, "fail", "{report:#}");
    assert!(
        seen.contains(&format!("{head_ip}:6379")) && seen.contains("from host c"),
        "{seen}"
    );
    assert!(fix.contains("firewall") && fix.contains("host c"), "{fix}");
    assert_eq!(
        one(&report, "b", "head_route").0,
        "ok",
        "only c: {report:#}"
    );
    assert_eq!(run.code, 1);
    eprintln!("doctor on 3 hosts, one cut from the head: {took:?}");
    assert!(took < Duration::from_secs(10), "doctor took {took:?}");
    drop(firewall);

    argus().args(["down"]).run().code(0);
}

/// One host, the verl image (torch), two workers on a bridge network: a port the head
/// publishes held by another process before `up` is named; after `up`, the all-reduce between
/// the workers reports its numbers; a paused worker is named.
#[test]
fn doctor_collective_measures_the_workers_and_names_a_paused_one() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    // The verl image (torch for the all-reduce), built once by whichever test comes first.
    crate::verl::ensure_verl_image();
    let cluster = ctx.cluster("col");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let port = free_port();
    let profile = Profile::small(&cluster)
        .image(VERL_IMAGE)
        .shared(&shared)
        .port(port)
        .workers(2)
        .worker("memory", "3g")
        .write(&ctx, "profile.yaml");
    let argus = || ctx.argus().profile(&profile);

    // Before up: the dashboard port the head would publish is taken here.
    let held = Listener::start(None, "local", "127.0.0.1", port, ctx.dir.path());
    let pid = held.pid().expect("listener pid");
    let run = argus().args(["--json", "doctor"]).run();
    let report = run.json();
    let (status, seen, _) = one(&report, "local", "ports");
    assert_eq!(status, "fail", "{report:#}");
    assert!(
        seen.contains(&format!("port {port}")) && seen.contains(&format!("(pid {pid}")),
        "{seen}"
    );
    assert_eq!(run.code, 1);
    drop(held);

    argus().args(["up"]).run().code(0);
    let started = Instant::now();
    let run = argus().args(["--json", "doctor", "--collective"]).run();
    let took = started.elapsed();
    let report = run.json();
    assert_eq!(findings(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = checks(&report, "collective");
    eprintln!("doctor --collective ({took:?}): {lines:#?}");
    let pair = lines
        .iter()
        .find(|c| c.2.starts_with("pair "))
        .unwrap_or_else(|| panic!("a pair line: {report:#}"));
    assert!(
        pair.2.contains(&format!("{cluster}-gpu-0"))
            && pair.2.contains(&format!("{cluster}-gpu-1"))
            && pair.2.contains("latency")
            && pair.2.contains("GB/s"),
        "{}",
        pair.2
    );

    // A worker frozen (paused): named, the others not.
    let w1 = format!("{cluster}-gpu-1");
    let paused = Command::new("docker")
        .args(["pause", &w1])
        .status()
        .expect("docker pause");
    assert!(paused.success());
    let run = argus().args(["--json", "doctor", "--collective"]).run();
    let _ = Command::new("docker").args(["unpause", &w1]).status();
    let report = run.json();
    let failed = failed_seen(&report, "collective");
    assert!(
        failed
            .iter()
            .any(|seen| seen.contains(&w1) && seen.contains("paused")),
        "{report:#}"
    );
    assert!(
        !failed
            .iter()
            .any(|seen| seen.contains(&format!("{cluster}-gpu-0 "))),
        "{report:#}"
    );
    assert_eq!(run.code, 1);

    // The rank's process on worker 1 frozen (SIGSTOP) or killed while the collective runs:
    // that worker is named, within the bound.
    for (signal, named) in [
        ("STOP", "does not answer"),
        ("KILL", "ended without a word"),
    ] {
        let (out, err) = (
            ctx.path(&format!("col-{signal}.json")),
            ctx.path(&format!("col-{signal}.err")),
        );
        let started = Instant::now();
        let mut doctor = argus()
            .args(["--json", "doctor", "--collective"])
            .spawn_to(&out, &err);
        let pid = poll(
            "the collective's rank on worker 1",
            Duration::from_secs(60),
            || rank_pid(&w1),
        );
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        let code = poll("doctor to end", Duration::from_secs(120), || {
            doctor.try_wait().expect("wait").map(|s| s.code())
        });
        let took = started.elapsed();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let report: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{e}: {text}\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            )
        });
        eprintln!("rank on worker 1 {signal}: doctor ended in {took:?}");
        let failed = failed_seen(&report, "collective");
        assert!(
            failed
                .iter()
                .any(|seen| seen.contains(&format!("worker {w1} ")) && seen.contains(named)),
            "{signal}: {report:#}"
        );
        assert!(
            !failed
                .iter()
                .any(|seen| seen.contains(&format!("worker {cluster}-gpu-0 "))),
            "{signal}: {report:#}"
        );
        assert_eq!(code, Some(1), "{report:#}");
        assert!(took < Duration::from_secs(60), "{signal}: {took:?}");
        // Nothing of the collective is left in the workers.
        poll("the ranks to be gone", Duration::from_secs(20), || {
            (rank_pid(&w1).is_none() && rank_pid(&format!("{cluster}-gpu-0")).is_none())
                .then_some(())
        });
    }
    argus().args(["down"]).run().code(0);
}

/// The pid (on this machine) of the collective's rank in `container`, if one runs.
fn rank_pid(container: &str) -> Option<u32> {
    let out = Command::new("docker")
        .args(["top", container, "-eo", "pid"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|kv| kv.starts_with(b"ARGUS_RANK="))
            })
        })
}

/// `docker ARGS` on this machine's engine, which must succeed: its stdout.
#[track_caller]
fn docker_ok(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An image derived for one test, removed by drop.
struct DerivedImage(String);

impl Drop for DerivedImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// The runtime image with what a hostile pip package could ship: a `.pth` file in the venv's
/// site-packages and in the system python's, and an ENTRYPOINT that wraps every command.
/// Each tries to write `marker-pth` / `marker-entrypoint` into `host_dir` on the host through
/// every `/proc/<pid>/root` it can see, and the `.pth` also writes `/tmp/argus-pth-ran` in the
/// container itself.
fn hostile_image(ctx: &mut TestContext, host_dir: &Path) -> DerivedImage {
    let dir = host_dir.display().to_string();
    let payload = format!(
        "import os\ntry:\n    open('/tmp/argus-pth-ran', 'w').write('x')\nexcept OSError:\n    pass\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n        try:\n            open('/proc/' + pid + '/root{dir}/marker-pth', 'w').write(pid)\n        except OSError:\n            pass\n"
    );
    let wrap = format!(
        "#!/bin/sh\nfor p in /proc/[0-9]*; do echo \"$p\" > \"$p/root{dir}/marker-entrypoint\" 2>/dev/null; done\nexec \"$@\"\n"
    );
    let pth = "import os; exec(open('/usr/local/lib/argus-hostile.py').read())\n";
    let setup = format!(
        "set -e\ncat > /usr/local/lib/argus-hostile.py <<'PY'\n{payload}PY\ncat > /usr/local/bin/argus-wrap <<'SH'\n{wrap}SH\nchmod 755 /usr/local/bin/argus-wrap\nfor d in /opt/ray/lib/python3.*/site-packages /usr/lib/python3/dist-packages; do mkdir -p \"$d\"; printf %s \"$PTH\" > \"$d/argus-hostile.pth\"; done\n"
    );
    let builder = ctx.container("pth-build");
    let tag = format!("{}-pth:latest", ctx.prefix);
    docker_ok(&[
        "run",
        "--name",
        &builder,
        "--env",
        &format!("PTH={pth}"),
        "--entrypoint",
        "sh",
        crate::harness::IMAGE,
        "-c",
        &setup,
    ]);
    docker_ok(&[
        "commit",
        "--change",
        "ENTRYPOINT [\"/usr/local/bin/argus-wrap\"]",
        "--change",
        "ENV PTH=",
        &builder,
        &tag,
    ]);
    let _ = Command::new("docker").args(["rm", "-f", &builder]).output();
    DerivedImage(tag)
}

/// A `.pth` file in the image (venv and system site-packages) and a wrapping ENTRYPOINT: a
/// plain `argus doctor` on a host-network cluster of that image still reports the route to
/// the head and names who holds a port of the cluster (the holder scan ran), and neither
/// wrote onto the host. `up`'s interface probe is the same route probe (`probe_route`).
#[test]
fn doctor_probes_run_none_of_a_hostile_images_python_packages() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let host_dir = ctx.path("host-side");
    std::fs::create_dir_all(&host_dir).expect("host dir");
    let image = hostile_image(&mut ctx, &host_dir);
    let (pth_marker, entry_marker) = (
        host_dir.join("marker-pth"),
        host_dir.join("marker-entrypoint"),
    );

    // The image is hostile: both pythons run its .pth, and a container as the old probe was
    // (the host's PID namespace, CAP_SYS_PTRACE) writes onto the host through it.
    for python in ["python3", "/usr/bin/python3"] {
        let out = docker_ok(&[
            "run",
            "--rm",
            "--entrypoint",
            python,
            &image.0,
            "-c",
            "import os; print(os.path.exists('/tmp/argus-pth-ran'))",
        ]);
        assert_eq!(out.trim(), "True", "{python} runs the .pth");
    }
    docker_ok(&[
        "run",
        "--rm",
        "--pid",
        "host",
        "--cap-add",
        "SYS_PTRACE",
        "--entrypoint",
        "python3",
        &image.0,
        "-c",
        "pass",
    ]);
    assert!(
        pth_marker.exists(),
        "the .pth reaches the host as the old probe ran"
    );
    std::fs::remove_file(&pth_marker).expect("remove the control's marker");

    // A host-network cluster of that image, a port of it held by another process.
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let port = free_port();
    let profile = Profile::small(&ctx.cluster("pth"))
        .image(&image.0)
        .shared(&shared)
        .port(port)
        .yaml("network: {mode: host}\n")
        .write(&ctx, "profile.yaml");
    let held = Listener::start(None, "local", "0.0.0.0", port, ctx.dir.path());
    let pid = held.pid().expect("listener pid");
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["--json", "doctor"])
        .run();
    let report = run.json();
    let (status, seen, _) = one(&report, "local", "head_route");
    assert_eq!(status, "ok", "{report:#}\n{}", run.stderr);
    assert!(seen.contains("reaches the head"), "{seen}");
    let (status, seen, _) = one(&report, "local", "ports");
    assert_eq!(status, "fail", "{report:#}");
    assert!(
        seen.contains(&format!("port {port}")) && seen.contains(&format!("(pid {pid}")),
        "the holder is named: {seen}"
    );
    drop(held);
    assert!(
        !pth_marker.exists(),
        "a .pth of the image wrote onto the host"
    );
    assert!(
        !entry_marker.exists(),
        "the image's ENTRYPOINT wrapped a probe and wrote onto the host"
    );
    let left = docker_ok(&[
        "ps",
        "-aq",
        "--filter",
        "label=argus.role=probe",
        "--filter",
        &format!("ancestor={}", image.0),
    ]);
    assert_eq!(left.trim(), "", "probes left behind");
}
