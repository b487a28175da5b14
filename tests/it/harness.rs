//! The test context: a unique resource prefix per test, temp dirs, the argus binary, and
//! cleanup of every container and network the test's clusters made, even on panic.
//!
//! A Docker test opens with `let Some(mut ctx) = TestContext::docker() else { return };`:
//! that skips it (saying so, under the test's own name) when `ARGUS_TEST_SKIP_DOCKER` is set,
//! checks once that everything the suite needs is installed ([`precheck`]), builds the runtime
//! image once, and names the context's resources after the test. Profiles are written with one
//! builder, [`Profile`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Set to skip the tests that need a Docker Engine (they print what they skip). CI never sets it.
pub const SKIP_DOCKER: &str = "ARGUS_TEST_SKIP_DOCKER";

pub struct TestContext {
    pub prefix: String,
    pub dir: tempfile::TempDir,
    clusters: Vec<String>,
    containers: Vec<String>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestContext {
    /// The context of a Docker test: `None` (after printing `SKIPPED <test>`) when the user
    /// switched Docker tests off; otherwise the prerequisites are checked (once), the runtime
    /// image is built (once), and the prefix is named after the running test.
    pub fn docker() -> Option<Self> {
        let ctx = Self::docker_engine()?;
        ensure_image();
        Some(ctx)
    }

    /// [`TestContext::docker`] without the runtime image: for tests that need only engines
    /// (the fixtures' own tests) or bring their own images.
    pub fn docker_engine() -> Option<Self> {
        if Self::skips_docker() {
            return None;
        }
        precheck();
        Some(Self::new(&short_name(&test_name())))
    }

    /// True (and says so, under this test's name) when Docker tests are switched off: for a
    /// test whose Docker part is a last check after parts that need none.
    pub fn skips_docker() -> bool {
        Self::skip_docker(&test_name())
    }

    /// A context whose prefix carries `test` (a short word); tests that need no Docker.
    pub fn new(test: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let short: String = test
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(8)
            .collect::<String>()
            .to_lowercase();
        let prefix = format!(
            "argt{:x}{n}-{short}",
            (std::process::id() ^ nanos) & 0xffffff
        );
        Self {
            prefix,
            dir: tempfile::tempdir().expect("temp dir"),
            clusters: Vec::new(),
            containers: Vec::new(),
        }
    }

    /// True (and says so) when Docker tests are switched off by the user. Prefer
    /// [`TestContext::docker`], which takes the name from the test itself.
    fn skip_docker(test: &str) -> bool {
        if std::env::var_os(SKIP_DOCKER).is_some() {
            eprintln!("SKIPPED {test}: {SKIP_DOCKER} is set (needs a Docker Engine)");
            return true;
        }
        false
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A cluster name owned (and cleaned up) by this context.
    pub fn cluster(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.prefix);
        self.clusters.push(name.clone());
        name
    }

    /// A container name owned (and cleaned up) by this context.
    pub fn container(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.prefix);
        self.containers.push(name.clone());
        name
    }

    /// Writes a file under the temp dir and returns its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, text).expect("write");
        path
    }

    pub fn argus(&self) -> Argus {
        Argus {
            command: argus_command(),
        }
    }

    /// Containers of a cluster as `docker ps -a` lists them (names).
    pub fn cluster_containers(&self, cluster: &str) -> Vec<String> {
        let out = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=argus.cluster={cluster}"),
            "--format",
            "{{.Names}}",
        ]);
        let mut names: Vec<String> = out.lines().map(str::to_string).collect();
        names.sort();
        names
    }
}

impl Drop for TestContext {
    fn drop(&mut self) {
        for cluster in &self.clusters {
            let ids = docker(&[
                "ps",
                "-aq",
                "--filter",
                &format!("label=argus.cluster={cluster}"),
            ]);
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids);
                docker(&args);
            }
            let _ = Command::new("docker")
                .args(["network", "rm", &format!("{cluster}-net")])
                .output();
            let _ = Command::new("docker")
                .args(["volume", "rm", &format!("{cluster}-shared")])
                .output();
        }
        for container in &self.containers {
            let _ = Command::new("docker")
                .args(["rm", "-f", container])
                .output();
        }
    }
}

/// The running test's name as libtest and nextest give it (`module::test_fn`): each runs a
/// test on a thread named after it. Falls back to the name nextest passes on the command line
/// (`--exact <name>`), then to "unnamed test".
pub fn test_name() -> String {
    if let Some(name) = std::thread::current().name()
        && name != "main"
    {
        return name.to_string();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_else(|| "unnamed test".to_string())
}

/// A short word for resource names from a test's name: its function's words without leading
/// articles, letters and digits only, at most 8 (`hosts::two_hosts_have_...` -> `twohosts`).
fn short_name(test: &str) -> String {
    let function = test.rsplit("::").next().unwrap_or(test);
    let words = function
        .split('_')
        .skip_while(|w| matches!(*w, "a" | "an" | "the"));
    let short: String = words
        .flat_map(str::chars)
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    if short.is_empty() {
        "test".to_string()
    } else {
        short.to_lowercase()
    }
}

/// One thing the suite needs on this machine: what it is for, whether it is there, and the
/// Debian package that brings it.
struct Prerequisite {
    what: &'static str,
    present: bool,
    package: &'static str,
}

/// True when `tool` is an executable on PATH, or at one of `paths`.
fn have(tool: &str, paths: &[&str]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| executable(&dir.join(tool)))
        || paths.iter().any(|p| executable(Path::new(p)))
}

/// Every prerequisite of the suite (the list tests/setup.sh installs), checked at once.
fn prerequisites() -> Vec<Prerequisite> {
    let all = |tools: &[&str]| tools.iter().all(|t| have(t, &[]));
    let docker_answers = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    // The venvs tests/venvs.sh made (it makes them on demand), else what it makes them with.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venvs_ready = ["olah", "py"]
        .iter()
        .all(|n| root.join(format!("target/venv-{n}/.argus-ready")).exists());
    let python_venv = venvs_ready
        || Command::new("python3")
            .args(["-c", "import venv, ensurepip"])
            .output()
            .is_ok_and(|o| o.status.success());
    vec![
        Prerequisite {
            what: "a Docker Engine answering `docker version` (every Docker test)",
            present: docker_answers,
            package: "docker.io; not installed by tests/setup.sh",
        },
        Prerequisite {
            what: "debootstrap (builds the runtime image)",
            present: have("debootstrap", &["/usr/sbin/debootstrap"]),
            package: "debootstrap",
        },
        Prerequisite {
            what: "python3 with venv (the olah mirror and the Python readers, tests/venvs.sh)",
            present: python_venv,
            package: "python3-venv; not installed by tests/setup.sh",
        },
        Prerequisite {
            what: "ip (tests/fixtures/multihost.sh)",
            present: have("ip", &[]),
            package: "iproute2",
        },
        Prerequisite {
            what: "unshare, nsenter, flock, mountpoint (tests/fixtures/multihost.sh)",
            present: all(&["unshare", "nsenter", "flock", "mountpoint"]),
            package: "util-linux",
        },
        Prerequisite {
            what: "docker-registry (tests/fixtures/multihost.sh --registry)",
            present: have("docker-registry", &[]),
            package: "docker-registry",
        },
        Prerequisite {
            what: "sshd (tests/fixtures/multihost.sh --ssh)",
            present: have("sshd", &["/usr/sbin/sshd"]),
            package: "openssh-server",
        },
        Prerequisite {
            what: "ssh, ssh-keygen (tests/fixtures/multihost.sh --ssh)",
            present: have("ssh-keygen", &[]) && have("ssh", &["/usr/bin/ssh"]),
            package: "openssh-client",
        },
        Prerequisite {
            what: "openssl (tests/fixtures/multihost.sh --tls)",
            present: have("openssl", &[]),
            package: "openssl",
        },
        Prerequisite {
            what: "slurmctld, slurmd, sbatch (tests/fixtures/slurm.sh)",
            present: all(&["slurmctld", "slurmd", "sbatch"]),
            package: "slurm-wlm",
        },
        Prerequisite {
            what: "munged, mungekey (tests/fixtures/slurm.sh)",
            present: all(&["munged", "mungekey"]),
            package: "munge",
        },
        Prerequisite {
            what: "podman (a Slurm node whose engine is Podman, tests/it/podman.rs)",
            present: have("podman", &[]),
            package: "podman",
        },
        Prerequisite {
            what: "catatonit (podman's init, tests/it/podman.rs)",
            present: have("catatonit", &["/usr/libexec/podman/catatonit"]),
            package: "catatonit",
        },
    ]
}

/// The one check of everything the suite needs (once per test process): panics with the
/// full list of what is missing and the command that installs it all.
pub fn precheck() {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let result = CHECKED.get_or_init(|| {
        let missing: Vec<String> = prerequisites()
            .into_iter()
            .filter(|p| !p.present)
            .map(|p| format!("  - {} (Debian package {})", p.what, p.package))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "this machine lacks what the test suite needs:\n{}\ninstall it all with (as root): tests/setup.sh\n(or skip the Docker tests: {SKIP_DOCKER}=1)",
            missing.join("\n")
        ))
    });
    if let Err(message) = result {
        panic!("{message}");
    }
}

fn argus_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_argus"));
    command.env_remove("ARGUS_PROFILE").env("NO_COLOR", "1");
    command
}

/// Runs `docker` and returns stdout (empty on failure).
pub fn docker(args: &[&str]) -> String {
    Command::new("docker")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `docker inspect` of one object as JSON.
pub fn inspect(name: &str) -> serde_json::Value {
    let out = docker(&["inspect", name]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap_or(serde_json::Value::Null);
    list.get(0).cloned().unwrap_or(serde_json::Value::Null)
}

/// One argus invocation, built up like a sentence.
pub struct Argus {
    command: Command,
}

impl Argus {
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(mut self, args: I) -> Self {
        self.command.args(args);
        self
    }
    pub fn arg_path(mut self, path: &Path) -> Self {
        self.command.arg(path);
        self
    }
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env(key, value);
        self
    }
    /// Starts it without waiting, its stdout and stderr going to files (read them with
    /// `std::fs::read_to_string` while it runs).
    pub fn spawn_to(mut self, stdout: &Path, stderr: &Path) -> std::process::Child {
        let out = std::fs::File::create(stdout).expect("stdout file");
        let err = std::fs::File::create(stderr).expect("stderr file");
        self.command
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn argus")
    }
    /// Starts it without waiting (to interrupt it).
    pub fn spawn(mut self) -> std::process::Child {
        self.command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn argus")
    }
    /// Runs it with this working directory.
    pub fn in_dir(mut self, dir: &Path) -> Self {
        self.command.current_dir(dir);
        self
    }
    pub fn profile(mut self, path: &Path) -> Self {
        self.command.arg("-p").arg(path);
        self
    }
    pub fn run(mut self) -> Run {
        let output = self.command.output().expect("run argus");
        Run::from(output)
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    pub fn code(self, want: i32) -> Self {
        assert_eq!(
            self.code, want,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }
    #[track_caller]
    pub fn stderr_has(self, text: &str) -> Self {
        assert!(
            self.stderr.contains(text),
            "stderr lacks {text:?}\n--- stderr\n{}",
            self.stderr
        );
        self
    }
    #[track_caller]
    pub fn stdout_has(self, text: &str) -> Self {
        assert!(
            self.stdout.contains(text),
            "stdout lacks {text:?}\n--- stdout\n{}",
            self.stdout
        );
        self
    }
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\n--- stderr\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Builds the runtime image once (argus reuses it when its inputs are unchanged).
pub fn ensure_image() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let run = Run::from(
            argus_command()
                .args(["image", "build", "--no-progress"])
                .output()
                .expect("run argus"),
        );
        assert_eq!(
            run.code, 0,
            "argus image build failed\n{}\n{}",
            run.stdout, run.stderr
        );
    });
}

/// A local TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `check` until it returns Some or the deadline passes.
#[track_caller]
pub fn poll<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A JSON file's value; `Null` when it is absent or not JSON.
pub fn read_json(path: &Path) -> serde_json::Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The names of a directory's entries, sorted; empty when it is absent.
pub fn entry_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The runtime image the test profiles name.
pub const IMAGE: &str = "argus/ray:2.51.1";

/// A profile for a test, built up like a sentence and written as block YAML:
/// `Profile::small(&name).shared(&shared).port(port).workers(2).build()`. Keys appear in
/// the order name, image, shared, env, ray, head, workers (one group `gpu`), then the raw
/// YAML added with [`Profile::yaml`].
#[derive(Clone, Debug)]
pub struct Profile {
    name: String,
    image: String,
    shared: Option<PathBuf>,
    env: Vec<(String, String)>,
    ray: Vec<(String, String)>,
    head: Vec<(String, String)>,
    worker: Vec<(String, String)>,
    yaml: String,
}

/// Sets `key` in a list of keys and values (in place, or at the end).
fn set(entries: &mut Vec<(String, String)>, key: &str, value: String) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => entries.push((key.to_string(), value)),
    }
}

impl Profile {
    /// The least profile: a name, the runtime image, one worker group `gpu` of one node.
    pub fn new(name: &str) -> Self {
        Profile {
            name: name.to_string(),
            image: IMAGE.to_string(),
            shared: None,
            env: Vec::new(),
            ray: Vec::new(),
            head: Vec::new(),
            worker: vec![("count".to_string(), "1".to_string())],
            yaml: String::new(),
        }
    }

    /// A small cluster that starts on this machine: a head and one worker with 2 simulated
    /// GPUs, 1 CPU and 2g each, Ray given 240 s to come up.
    pub fn small(name: &str) -> Self {
        let node = [
            ("cpus", "1"),
            ("memory", "2g"),
            ("shm_size", "256m"),
            ("object_store_memory", "128m"),
        ];
        let mut profile = Profile::new(name).ray("ready_timeout_s", "240");
        for (key, value) in node {
            profile = profile.head(key, value);
        }
        profile = profile.worker("gpus", "2");
        for (key, value) in node {
            profile = profile.worker(key, value);
        }
        profile
    }

    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_string();
        self
    }
    /// The shared storage: a host path.
    pub fn shared(mut self, path: &Path) -> Self {
        self.shared = Some(path.to_path_buf());
        self
    }
    /// An environment variable of the cluster's containers (its value in double quotes, as
    /// given).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        set(&mut self.env, key, format!("\"{value}\""));
        self
    }
    /// Ray's dashboard port (the first key under `ray`).
    pub fn port(mut self, port: u16) -> Self {
        self.ray.retain(|(k, _)| k != "dashboard_port");
        self.ray
            .insert(0, ("dashboard_port".to_string(), port.to_string()));
        self
    }
    /// A key under `ray`, its value as YAML.
    pub fn ray(mut self, key: &str, value: &str) -> Self {
        set(&mut self.ray, key, value.to_string());
        self
    }
    /// A key of the head node, its value as YAML.
    pub fn head(mut self, key: &str, value: &str) -> Self {
        set(&mut self.head, key, value.to_string());
        self
    }
    /// How many workers the group has.
    pub fn workers(self, count: u32) -> Self {
        self.worker("count", &count.to_string())
    }
    /// One worker on each of these hosts (`hosts: {a: 1, b: 1}` in place of a count).
    pub fn workers_on_hosts(mut self, hosts: &[&str]) -> Self {
        let per_host: Vec<String> = hosts.iter().map(|h| format!("{h}: 1")).collect();
        self.worker.retain(|(k, _)| k != "count");
        self.worker.insert(
            0,
            ("hosts".to_string(), format!("{{{}}}", per_host.join(", "))),
        );
        self
    }
    /// A key of the worker group, its value as YAML.
    pub fn worker(mut self, key: &str, value: &str) -> Self {
        set(&mut self.worker, key, value.to_string());
        self
    }
    /// Raw YAML after everything else (top-level keys such as `hosts:` or `submit:`).
    pub fn yaml(mut self, text: &str) -> Self {
        self.yaml.push_str(text);
        self
    }

    pub fn build(&self) -> String {
        let mut text = format!("name: {}\nimage: {}\n", self.name, self.image);
        if let Some(shared) = &self.shared {
            text.push_str(&format!("shared:\n  host_path: {}\n", shared.display()));
        }
        for (section, entries) in [("env", &self.env), ("ray", &self.ray), ("head", &self.head)] {
            if !entries.is_empty() {
                text.push_str(&format!("{section}:\n"));
                for (key, value) in entries {
                    text.push_str(&format!("  {key}: {value}\n"));
                }
            }
        }
        text.push_str("workers:\n  - name: gpu\n");
        for (key, value) in &self.worker {
            text.push_str(&format!("    {key}: {value}\n"));
        }
        text.push_str(&self.yaml);
        text
    }

    /// Writes it under the context's temp dir and returns its path.
    pub fn write(&self, ctx: &TestContext, rel: &str) -> PathBuf {
        ctx.write(rel, &self.build())
    }
}

/// A small cluster profile for tests: 1 head + `workers` workers with 2 simulated GPUs
/// ([`Profile::small`] as text).
pub fn test_profile(
    name: &str,
    shared: &Path,
    port: u16,
    workers: u32,
    extra_worker_yaml: &str,
) -> String {
    Profile::small(name)
        .shared(shared)
        .port(port)
        .workers(workers)
        .yaml(extra_worker_yaml)
        .build()
}

/// The builder writes the small profile exactly as the tests' `.replace(..)` edits expect it.
#[test]
fn the_small_profile_is_the_text_tests_edit() {
    let text = test_profile("c", Path::new("/s"), 8265, 2, "x: 1\n");
    assert_eq!(
        text,
        "name: c\nimage: argus/ray:2.51.1\nshared:\n  host_path: /s\nray:\n  dashboard_port: 8265\n  ready_timeout_s: 240\nhead:\n  cpus: 1\n  memory: 2g\n  shm_size: 256m\n  object_store_memory: 128m\nworkers:\n  - name: gpu\n    count: 2\n    gpus: 2\n    cpus: 1\n    memory: 2g\n    shm_size: 256m\n    object_store_memory: 128m\nx: 1\n"
    );
    // The least profile with a port: the 10 lines bad_input.rs appends keys after.
    assert_eq!(
        Profile::new("c")
            .shared(Path::new("/s"))
            .port(8265)
            .worker("gpus", "2")
            .build(),
        "name: c\nimage: argus/ray:2.51.1\nshared:\n  host_path: /s\nray:\n  dashboard_port: 8265\nworkers:\n  - name: gpu\n    count: 1\n    gpus: 2\n"
    );
    assert_eq!(short_name("hosts::two_hosts_have_their_own"), "twohosts");
    assert_eq!(short_name("multihost::a_cluster_spans"), "clusters");
    assert_eq!(short_name("x::a_b"), "b");
}
