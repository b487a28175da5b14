//! The test context: a unique resource prefix per test, temp dirs, the argus binary, and
//! cleanup of every container and network the test's clusters made, even on panic.

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

    /// True (and says so) when Docker tests are switched off by the user.
    pub fn skip_docker(test: &str) -> bool {
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

/// A small cluster profile for tests: 1 head + `workers` workers with 2 simulated GPUs.
pub fn test_profile(
    name: &str,
    shared: &Path,
    port: u16,
    workers: u32,
    extra_worker_yaml: &str,
) -> String {
    format!(
        "name: {name}\nimage: argus/ray:2.51.1\nshared:\n  host_path: {shared}\nray:\n  dashboard_port: {port}\n  ready_timeout_s: 240\nhead:\n  cpus: 1\n  memory: 2g\n  shm_size: 256m\n  object_store_memory: 128m\nworkers:\n  - name: gpu\n    count: {workers}\n    gpus: 2\n    cpus: 1\n    memory: 2g\n    shm_size: 256m\n    object_store_memory: 128m\n{extra_worker_yaml}",
        shared = shared.display()
    )
}
