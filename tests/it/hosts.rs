//! Several emulated hosts on this machine, each with its own real Docker Engine, network
//! namespace and address (`tests/fixtures/multihost.sh`), and the tests that prove the fixture.
//!
//! `Hosts::up(&ctx, &["a", "b"], Options::default())` brings the hosts up under an instance
//! named for the test; dropping it takes everything down (also when the test panics), and every
//! `up` first takes down the instances of test processes that died without dropping theirs.
//! An engine is reached at `host.unix` / `host.tcp` / `host.ssh` (the last with
//! `ssh_path_env()` on argus's environment); argus itself runs in the root namespace and reaches
//! the hosts' addresses through the fixture's uplink.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::harness::{TestContext, poll};

/// One emulated host.
pub struct Host {
    pub name: String,
    pub ip: Ipv4Addr,
    /// `unix:///run/argus-multihost/<instance>/<host>/docker.sock`
    pub unix: String,
    /// `tcp://<ip>:2375` (plain, no TLS)
    pub tcp: String,
    /// `ssh://root@<ip>` when the instance runs an sshd per host.
    pub ssh: Option<String>,
    /// The host's network namespace (`ip netns`), e.g. for `ip netns pids`.
    pub netns: String,
}

/// What an instance runs besides the engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// An sshd per host (root login by the fixture's key) and the `ssh` shim.
    pub ssh: bool,
    /// A registry (Debian's docker-registry) every engine trusts over plain HTTP.
    pub registry: bool,
    /// TCP endpoints with TLS and client certificates (`tcp://<ip>:2376`) instead of plain.
    pub tls: bool,
    /// A stand-in `nvidia-container-runtime-hook` on every engine's PATH: the engines accept
    /// NVIDIA device requests, and the container sees `NVIDIA_VISIBLE_DEVICES=<the ids>`.
    pub nvidia: bool,
    /// The host whose engine is [`NEWER_DOCKERD`] (Docker 26, whose `docker save` writes the
    /// OCI layout) instead of the system's Docker 20.10.
    pub newer_engine: Option<&'static str>,
}

/// The dockerd of Debian 13's docker.io (26.1), unpacked by tests/setup.sh.
pub const NEWER_DOCKERD: &str = "/var/cache/argus-test/docker.io-trixie/usr/sbin/dockerd";

/// An instance of the fixture, owned by one test.
pub struct Hosts {
    instance: String,
    state: PathBuf,
    data: PathBuf,
    hosts: Vec<Host>,
    registry: Option<String>,
    uplink: Ipv4Addr,
    ssh_path: Option<PathBuf>,
    tls_certs: Option<PathBuf>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multihost.sh")
}

/// Runs the fixture script; panics with its output when it fails.
#[track_caller]
fn fixture(args: &[&str]) -> Output {
    run_script(&script(), args)
}

/// Runs a fixture script (tests/fixtures/*.sh); panics with its output when it fails.
#[track_caller]
pub fn run_script(script: &Path, args: &[&str]) -> Output {
    let name = script.file_name().unwrap_or_default().to_string_lossy();
    let output = Command::new(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{name} {} failed\n--- stdout\n{}\n--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs a fixture script where a failure is reported but not fatal (gc, down in a Drop).
pub fn run_script_reporting(script: &Path, args: &[&str]) {
    let name = script.file_name().unwrap_or_default().to_string_lossy();
    match Command::new(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "{name} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("{name} {}: {e}", args.join(" ")),
    }
}

/// The `KEY=VALUE` lines a fixture script's `up` prints.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|v| !v.is_empty()).cloned()
}

impl Hosts {
    /// `up` with the fixture's registry (and nothing else): the hosts and the registry's
    /// `ip:5000`.
    pub fn up_with_registry(ctx: &TestContext, names: &[&str]) -> (Hosts, String) {
        let hosts = Hosts::up(
            ctx,
            names,
            Options {
                registry: true,
                ..Options::default()
            },
        );
        let registry = hosts.registry().expect("the fixture's registry");
        (hosts, registry)
    }

    /// Brings up one engine per name (an sshd each and a registry as `options` asks), under an
    /// instance named for the test. Panics with the fixture's output when that fails.
    pub fn up(ctx: &TestContext, names: &[&str], options: Options) -> Hosts {
        // Instances whose test process died without dropping them (a failure there is theirs:
        // this test goes on).
        run_script_reporting(&script(), &["gc"]);
        let owner = std::process::id().to_string();
        let mut args = vec!["up", ctx.prefix.as_str()];
        args.extend_from_slice(names);
        if options.ssh {
            args.push("--ssh");
        }
        if options.registry {
            args.push("--registry");
        }
        if options.tls {
            args.push("--tls");
        }
        if options.nvidia {
            args.push("--nvidia");
        }
        let newer = options.newer_engine.map(|h| format!("{h}={NEWER_DOCKERD}"));
        if let Some(newer) = &newer {
            args.extend(["--dockerd", newer.as_str()]);
        }
        args.extend(["--owner", owner.as_str()]);
        let output = fixture(&args);
        let env = parse_env(&String::from_utf8_lossy(&output.stdout));
        let get = |key: &str| -> String {
            env.get(key)
                .cloned()
                .unwrap_or_else(|| panic!("multihost.sh up printed no {key}: {env:?}"))
        };
        let ip = |key: &str| -> Ipv4Addr {
            get(key)
                .parse()
                .unwrap_or_else(|e| panic!("{key} is not an IPv4 address: {e}"))
        };
        let hosts = names
            .iter()
            .map(|name| Host {
                name: name.to_string(),
                ip: ip(&format!("MH_HOST_{name}_IP")),
                unix: get(&format!("MH_HOST_{name}_UNIX")),
                tcp: get(&format!("MH_HOST_{name}_TCP")),
                ssh: non_empty(env.get(&format!("MH_HOST_{name}_SSH"))),
                netns: get(&format!("MH_HOST_{name}_NETNS")),
            })
            .collect();
        Hosts {
            instance: get("MH_INSTANCE"),
            state: PathBuf::from(get("MH_STATE")),
            data: PathBuf::from(get("MH_DATA")),
            hosts,
            registry: non_empty(env.get("MH_REGISTRY")),
            uplink: ip("MH_UPLINK"),
            ssh_path: non_empty(env.get("MH_SSH_PATH")).map(PathBuf::from),
            tls_certs: non_empty(env.get("MH_TLS_CERTS")).map(PathBuf::from),
        }
    }

    #[track_caller]
    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name} in instance {}", self.instance))
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The instance's state dir (sockets, pid files, namespace files, logs).
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// The instance's data dir (engine data roots, registry storage).
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// `docker -H <host's unix socket> args...`
    pub fn docker(&self, host: &str, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.host(host).unix)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    /// Like `docker`, but panics with the output unless it succeeds; returns stdout.
    #[track_caller]
    pub fn docker_ok(&self, host: &str, args: &[&str]) -> String {
        let out = self.docker(host, args);
        assert!(
            out.status.success(),
            "docker -H <{host}> {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a command "on" the host: in its network, mount and UTS namespaces.
    pub fn exec(&self, host: &str, args: &[&str]) -> Output {
        self.host(host);
        Command::new(script())
            .args(["exec", &self.instance, host, "--"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run multihost.sh exec")
    }

    /// Copies an image from the machine's engine into the host's (`docker save | docker load`).
    #[track_caller]
    #[allow(dead_code)] // for the multi-host end-to-end tests; too slow for the fixture's own
    pub fn load_image(&self, host: &str, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run docker save");
        let load = Command::new("docker")
            .arg("-H")
            .arg(&self.host(host).unix)
            .args(["load", "-q"])
            .stdin(save.stdout.take().expect("docker save's stdout"))
            .output()
            .expect("run docker load");
        let saved = save.wait_with_output().expect("wait for docker save");
        assert!(
            saved.status.success() && load.status.success(),
            "loading {image} into {host} failed\n--- save\n{}\n--- load\n{}",
            String::from_utf8_lossy(&saved.stderr),
            String::from_utf8_lossy(&load.stderr)
        );
    }

    /// The image's id on that host's engine, if it has the image.
    pub fn image_id(&self, host: &str, image: &str) -> Option<String> {
        let out = self.docker(host, &["image", "inspect", "--format", "{{.Id}}", image]);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !id.is_empty()).then_some(id)
    }

    /// Imports a tiny image with bash (and nothing else: bash builtins, /dev/tcp) into the host,
    /// for containers that must run something. Returns its name.
    #[track_caller]
    pub fn import_shell_image(&self, host: &str) -> String {
        let name = "argus-mh-shell:1".to_string();
        let root = tempfile::tempdir().expect("temp dir");
        let mut files = vec![PathBuf::from("/bin/bash")];
        let ldd = Command::new("ldd")
            .arg("/bin/bash")
            .output()
            .expect("run ldd");
        files.extend(
            String::from_utf8_lossy(&ldd.stdout)
                .split_whitespace()
                .filter(|word| word.starts_with('/'))
                .map(PathBuf::from),
        );
        for file in &files {
            let dest = root.path().join(file.strip_prefix("/").expect("absolute"));
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
        }
        for dir in ["proc", "sys", "dev", "etc", "tmp"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("mkdir");
        }
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .args(["-cf", "-", "."])
            .stdout(Stdio::piped())
            .spawn()
            .expect("run tar");
        let import = Command::new("docker")
            .arg("-H")
            .arg(&self.host(host).unix)
            .args(["import", "-", &name])
            .stdin(tar.stdout.take().expect("tar's stdout"))
            .output()
            .expect("run docker import");
        let tarred = tar.wait().expect("wait for tar");
        assert!(
            tarred.success() && import.status.success(),
            "importing the shell image into {host} failed: {}",
            String::from_utf8_lossy(&import.stderr)
        );
        name
    }

    /// Stops the host's engine: its endpoints refuse connections until `start_engine`.
    #[track_caller]
    pub fn stop_engine(&self, host: &str) {
        self.host(host);
        fixture(&["stop-engine", &self.instance, host]);
    }

    /// Starts the host's engine again on the same data root; returns once it answers.
    #[track_caller]
    pub fn start_engine(&self, host: &str) {
        self.host(host);
        fixture(&["start-engine", &self.instance, host]);
        poll(
            &format!("the engine of {host} to answer"),
            Duration::from_secs(60),
            || {
                self.docker(host, &["version"])
                    .status
                    .success()
                    .then_some(())
            },
        );
    }

    /// In the host's mount namespace (its engine, its containers' bind mounts, its ssh sessions),
    /// `path` shows what is at `with`: a host whose view of a shared path differs.
    #[track_caller]
    pub fn bind_over(&self, host: &str, path: &Path, with: &Path) {
        self.host(host);
        let (path, with) = (path.to_string_lossy(), with.to_string_lossy());
        fixture(&["bind", &self.instance, host, &path, &with]);
    }

    /// `("PATH", "<state>/bin:$PATH")`: argus's `ssh` then is the fixture's shim (its key, its
    /// known hosts), so `ssh://root@<ip>` endpoints work. Panics without `Options::ssh`.
    #[track_caller]
    /// With `ssh`: the directory of the `ssh` shim.
    pub fn ssh_path(&self) -> Option<&Path> {
        self.ssh_path.as_deref()
    }

    /// With `tls`: the client's `ca.pem`, `cert.pem` and `key.pem` (a DOCKER_CERT_PATH).
    pub fn tls_certs(&self) -> Option<&Path> {
        self.tls_certs.as_deref()
    }

    pub fn ssh_path_env(&self) -> (String, String) {
        let bin = self
            .ssh_path
            .as_ref()
            .unwrap_or_else(|| panic!("instance {} runs no sshd", self.instance));
        let path = std::env::var("PATH").unwrap_or_default();
        ("PATH".to_string(), format!("{}:{path}", bin.display()))
    }

    /// The registry's `ip:5000`, with `Options::registry`.
    pub fn registry(&self) -> Option<String> {
        self.registry.clone()
    }

    /// The root namespace's address on the fixture's subnet (where argus's connections come from).
    pub fn uplink(&self) -> Ipv4Addr {
        self.uplink
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        run_script_reporting(&script(), &["down", &self.instance]);
    }
}

// --- the fixture's own tests --------------------------------------------------------------

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `docker info` ID and Name through an endpoint (with the given PATH, for ssh://).
fn engine_id(endpoint: &str, path: Option<&(String, String)>) -> String {
    let mut command = Command::new("docker");
    command.args(["-H", endpoint, "info", "--format", "{{.ID}} {{.Name}}"]);
    if let Some((key, value)) = path {
        command.env(key, value);
    }
    let out = command.output().expect("run docker info");
    assert!(
        out.status.success(),
        "docker -H {endpoint} info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// What the instance left behind: namespaces, processes, dirs, the uplink, cgroups.
fn leftovers(instance: &str, uplink: Ipv4Addr, state: &Path, data: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let prefix = format!("amh-{instance}-");
    left.extend(
        stdout(&netns)
            .lines()
            .filter(|line| line.starts_with(&prefix))
            .map(|line| format!("netns {line}")),
    );
    let state_text = state.to_string_lossy().to_string();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for entry in procs.flatten() {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(&state_text) {
                left.push(format!("process {cmdline}"));
            }
        }
    }
    for dir in [state, data] {
        if dir.exists() {
            left.push(format!("dir {}", dir.display()));
        }
    }
    let uplink = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "to", &format!("{uplink}/32")])
        .output()
        .expect("ip addr");
    left.extend(stdout(&uplink).lines().map(|l| format!("uplink {l}")));
    let cgroup = format!("argus-mh-{instance}-");
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for entry in std::fs::read_dir(hierarchy.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.file_name().to_string_lossy().starts_with(&cgroup) {
                left.push(format!("cgroup {}", entry.path().display()));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains(&state_text))
            .map(|l| format!("mount {l}")),
    );
    left
}

#[test]
fn two_hosts_have_their_own_engines_names_and_addresses_and_leave_nothing() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let (a, b) = (hosts.host("a"), hosts.host("b"));
    assert_ne!(a.ip, b.ip);

    let machine = stdout(
        &Command::new("docker")
            .args(["info", "--format", "{{.ID}}"])
            .output()
            .expect("docker info"),
    );
    let id_a = engine_id(&a.unix, None);
    let id_b = engine_id(&b.unix, None);
    assert_eq!(engine_id(&a.tcp, None), id_a, "a's unix and tcp endpoints");
    assert_eq!(engine_id(&b.tcp, None), id_b, "b's unix and tcp endpoints");
    assert!(
        id_a.ends_with(" a") && id_b.ends_with(" b"),
        "{id_a} / {id_b}"
    );
    let (id_a, id_b) = (id_a.split(' ').next(), id_b.split(' ').next());
    assert_ne!(id_a, id_b, "two hosts, one engine ID");
    assert_ne!(
        id_a,
        Some(machine.as_str()),
        "host a has the machine's engine ID"
    );

    let shell = hosts.import_shell_image("a");
    let script = format!(
        "echo \"host=$HOSTNAME\"; f=\"$(</proc/net/fib_trie)\"; \
         [[ $f == *\"-- {a}\"$'\\n'* ]] && echo has-a; [[ $f == *\"-- {b}\"$'\\n'* ]] && echo has-b; \
         exec 3<>/dev/tcp/{b}/2375 && echo reached-b",
        a = a.ip,
        b = b.ip
    );
    let out = hosts.docker_ok(
        "a",
        &[
            "run",
            "--rm",
            "--network",
            "host",
            &shell,
            "/bin/bash",
            "-c",
            &script,
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["host=a", "has-a", "reached-b"], "{out}");

    // Whatever runs "on" b (an ssh session, a slurmd) has b's name and reaches b's engine at
    // the standard socket path.
    let out = hosts.exec(
        "b",
        &["sh", "-c", "hostname; docker info --format '{{.ID}}'"],
    );
    assert_eq!(
        stdout(&out),
        format!("b\n{}", id_b.unwrap_or_default()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    assert!(
        stdout(&netns)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(a.netns.as_str())),
        "no netns {}",
        a.netns
    );

    let (instance, uplink, state, data) = (
        hosts.instance().to_string(),
        hosts.uplink(),
        hosts.state().to_path_buf(),
        hosts.data().to_path_buf(),
    );
    assert!(
        leftovers(&instance, uplink, &state, &data).len() > 2,
        "the check sees a live instance"
    );
    drop(hosts);
    assert_eq!(
        leftovers(&instance, uplink, &state, &data),
        Vec::<String>::new()
    );
}

#[test]
fn an_ssh_endpoint_reaches_that_hosts_engine_through_the_shim() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let home_ssh = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ssh"));
    let had_home_ssh = home_ssh.as_ref().is_some_and(|p| p.exists());
    let hosts = Hosts::up(
        &ctx,
        &["a", "b"],
        Options {
            ssh: true,
            ..Options::default()
        },
    );
    let path = hosts.ssh_path_env();
    for name in ["a", "b"] {
        let host = hosts.host(name);
        let ssh = host.ssh.as_deref().expect("ssh endpoint");
        assert_eq!(ssh, format!("ssh://root@{}", host.ip));
        assert_eq!(
            engine_id(ssh, Some(&path)),
            engine_id(&host.unix, None),
            "{ssh} reaches another engine than {name}'s socket"
        );
    }
    if !had_home_ssh {
        assert!(
            !home_ssh.is_some_and(|p| p.exists()),
            "the shim wrote into ~/.ssh"
        );
    }
}

#[test]
fn an_image_pushed_from_one_host_is_pulled_by_another_through_the_registry() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let (hosts, registry) = Hosts::up_with_registry(&ctx, &["a", "b"]);
    let ip: Ipv4Addr = registry
        .trim_end_matches(":5000")
        .parse()
        .expect("registry ip");
    assert_ne!(ip, hosts.host("a").ip);

    // A one-file image made here: there is nothing to pull it from.
    let file = ctx.write("rootfs/token", &ctx.prefix);
    let tar = ctx.path("tiny.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(file.parent().expect("dir"))
        .arg("-cf")
        .arg(&tar)
        .arg("token")
        .status()
        .expect("tar");
    assert!(status.success());
    let image = format!("{registry}/{}/tiny:1", ctx.prefix);
    hosts.docker_ok("a", &["import", &tar.to_string_lossy(), &image]);
    assert_eq!(hosts.image_id("b", &image), None);
    hosts.docker_ok("a", &["push", &image]);
    hosts.docker_ok("b", &["pull", &image]);
    let id = hosts.image_id("b", &image).expect("b pulled the image");
    assert_eq!(Some(id), hosts.image_id("a", &image));
}

#[test]
fn a_stopped_engine_refuses_and_comes_back_with_its_containers_and_images() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a"], Options::default());
    let a = hosts.host("a");
    let shell = hosts.import_shell_image("a");
    let image = hosts.image_id("a", &shell).expect("imported");
    let name = format!("{}-kept", ctx.prefix);
    hosts.docker_ok(
        "a",
        &[
            "create",
            "--name",
            &name,
            &shell,
            "/bin/bash",
            "-c",
            "exit 0",
        ],
    );
    let id = engine_id(&a.unix, None);

    hosts.stop_engine("a");
    let refused = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from((a.ip, 2375)),
        Duration::from_secs(5),
    );
    let kind = refused.as_ref().map_err(std::io::Error::kind).err();
    assert_eq!(
        kind,
        Some(std::io::ErrorKind::ConnectionRefused),
        "{refused:?}"
    );
    assert!(!hosts.docker("a", &["version"]).status.success());

    hosts.start_engine("a");
    assert_eq!(engine_id(&a.tcp, None), id);
    assert_eq!(hosts.image_id("a", &shell), Some(image));
    let names = hosts.docker_ok("a", &["ps", "-a", "--format", "{{.Names}}"]);
    assert_eq!(names.trim(), name);
}

#[test]
fn bind_over_gives_one_host_a_different_view_of_a_path() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let shared = ctx.write("shared/token", "shared");
    let other = ctx.write("other/token", "other");
    let (shared, other) = (
        shared.parent().expect("dir").to_path_buf(),
        other.parent().expect("dir").to_path_buf(),
    );
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    hosts.bind_over("b", &shared, &other);
    let volume = format!("{}:/mnt/shared", shared.display());
    for (host, want) in [("a", "shared"), ("b", "other")] {
        let shell = hosts.import_shell_image(host);
        let out = hosts.docker_ok(
            host,
            &[
                "run",
                "--rm",
                "-v",
                &volume,
                &shell,
                "/bin/bash",
                "-c",
                "echo \"$(</mnt/shared/token)\"",
            ],
        );
        assert_eq!(out.trim(), want, "host {host}");
    }
    // The machine itself still sees its own file there.
    assert_eq!(
        std::fs::read_to_string(shared.join("token")).expect("read"),
        "shared"
    );
}
