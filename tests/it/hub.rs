//! Test support for the Hugging Face side: the venvs (olah; pyarrow, datasets,
//! huggingface_hub, transformers), a real olah mirror on loopback serving generated git
//! repositories, and generated fixtures (tiny model repos, GSM8K-shaped dataset repos).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{free_port, poll};

/// `target/venv-<name>`, made or topped up by tests/venvs.sh (idempotent, and quick when
/// the venv already holds its requirements), once per test process, under a lock.
fn venv(name: &str) -> PathBuf {
    static READY: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target").join(format!("venv-{name}"));
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    if ready.iter().any(|n| n == name) {
        return dir;
    }
    std::fs::create_dir_all(root.join("target")).expect("target dir");
    let lock =
        std::fs::File::create(root.join(format!("target/venv-{name}.lock"))).expect("lock file");
    lock.lock().expect("lock");
    let ok = Command::new(root.join("tests/venvs.sh"))
        .arg(name)
        .status()
        .expect("tests/venvs.sh")
        .success();
    assert!(ok, "tests/venvs.sh {name} failed");
    ready.push(name.to_string());
    dir
}

pub fn python() -> PathBuf {
    venv("py").join("bin/python")
}

fn olah_cli() -> PathBuf {
    venv("olah").join("bin/olah-cli")
}

/// Runs a Python snippet in the test venv; panics with its output on failure.
#[track_caller]
pub fn run_python(script: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .envs(env.iter().copied())
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A real olah mirror (offline mode) serving git repositories under `mirrors`.
pub struct Olah {
    pub endpoint: String,
    pub mirrors: PathBuf,
    port: u16,
    config: PathBuf,
    child: Option<Child>,
}

impl Olah {
    pub fn start(dir: &Path) -> Self {
        let mirrors = dir.join("mirrors");
        std::fs::create_dir_all(&mirrors).expect("mirrors");
        let port = free_port();
        let config = dir.join("olah.toml");
        std::fs::write(
            &config,
            format!(
                "[basic]\nhost = \"127.0.0.1\"\nport = {port}\nmirrors-path = [\"{}\"]\nrepos-path = \"{}\"\n[accessibility]\noffline = true\n",
                mirrors.display(),
                dir.join("olah-repos").display()
            ),
        )
        .expect("olah.toml");
        let mut olah = Olah {
            endpoint: format!("http://127.0.0.1:{port}"),
            mirrors,
            port,
            config,
            child: None,
        };
        olah.restart();
        olah
    }

    /// (Re)starts the server and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::File::create(self.config.with_extension("log")).expect("log");
        let child = Command::new(olah_cli())
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("olah-cli");
        self.child = Some(child);
        let port = self.port;
        poll("olah to listen", Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ())
        });
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Olah {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A relay in front of a loopback server, listening on `ip` (an address the project's own
/// containers reach, e.g. their network's gateway), that counts the connections made to
/// it. It runs until the test process ends.
pub struct CountingRelay {
    pub endpoint: String,
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingRelay {
    pub fn start(ip: &str, to_port: u16) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind((ip, 0)).expect("bind the relay");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = count.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to_port)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        CountingRelay { endpoint, count }
    }

    /// The connections made so far.
    pub fn connections(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .expect("git")
        .status
        .success();
    assert!(ok, "git {args:?} in {}", dir.display());
}

/// A git repository at `<mirrors>/<kind>/<org>/<name>` (branch main) with `files`, and
/// `lfs` files stored as LFS pointers with their objects where olah finds them.
pub fn git_repo(
    mirrors: &Path,
    kind: &str,
    repo: &str,
    files: &[(&str, Vec<u8>)],
    lfs: &[(&str, Vec<u8>)],
) -> PathBuf {
    let dir = mirrors.join(kind).join(repo);
    std::fs::create_dir_all(&dir).expect("repo dir");
    git(&dir, &["init", "-q", "-b", "main"]);
    for (path, bytes) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, bytes).expect("write");
    }
    for (path, bytes) in lfs {
        let oid = sha256_hex(bytes);
        let object = dir
            .join(".git/lfs/objects")
            .join(&oid[..2])
            .join(&oid[2..4])
            .join(&oid);
        std::fs::create_dir_all(object.parent().expect("parent")).expect("mkdir");
        std::fs::write(&object, bytes).expect("lfs object");
        let pointer = format!(
            "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {}\n",
            bytes.len()
        );
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, pointer).expect("pointer");
    }
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "fixture"]);
    dir
}

pub fn head_commit(repo: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "HEAD"])
        .output()
        .expect("git");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic pseudo-random bytes (a fixture must not compress to nothing).
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// A tiny model repo: config and tokenizer files, a plain and an LFS safetensors, a nested path.
pub fn tiny_model(mirrors: &Path, repo: &str, lfs_size: usize) -> PathBuf {
    let config = br#"{"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 16, "n_positions": 32}"#.to_vec();
    git_repo(
        mirrors,
        "models",
        repo,
        &[
            ("config.json", config),
            (
                "tokenizer_config.json",
                br#"{"model_max_length": 32}"#.to_vec(),
            ),
            ("vocab.json", br#"{"a": 0, "b": 1}"#.to_vec()),
            ("small.safetensors", bytes(2000, 1)),
            (
                "extra/nested/generation_config.json",
                br#"{"max_new_tokens": 4}"#.to_vec(),
            ),
        ],
        &[("model.safetensors", bytes(lfs_size, 2))],
    )
}

/// GSM8K-shaped raw rows covering the answer shapes verl's rule has to handle.
pub fn gsm8k_rows(split: &str, n: usize) -> Vec<(String, String)> {
    let shapes = [
        "#### 1,234",
        "#### -7",
        "#### 3.5",
        "#### 42.",
        "#### 8\n#### 9",
        "so ✓ ünïcode #### 12",
    ];
    (0..n)
        .map(|i| {
            (
                format!("{split} question {i}: how many apples? ☕"),
                format!("Step one.\nStep two {i}.\n{}", shapes[i % shapes.len()]),
            )
        })
        .collect()
}

/// The hub repo's card: its `configs` front matter is what makes `load_dataset(dir, "main")` work.
pub const GSM8K_README: &str = "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n---\n# gsm8k (generated, GSM8K-shaped)\n";

/// Writes raw split files in the hub repo's layout (`main/<split>-00000-of-00001.parquet`).
pub fn write_raw_gsm8k(dir: &Path, train: &[(String, String)], test: &[(String, String)]) {
    std::fs::create_dir_all(dir.join("main")).expect("main dir");
    let rows = serde_json::json!({"train": train, "test": test});
    let spec = dir.join("rows.json");
    std::fs::write(&spec, rows.to_string()).expect("rows");
    run_python(
        "import json, sys, pyarrow as pa, pyarrow.parquet as pq\nrows = json.load(open(sys.argv[1]))\nfor split, items in rows.items():\n    t = pa.table({'question': [q for q, a in items], 'answer': [a for q, a in items]})\n    pq.write_table(t, sys.argv[2] + f'/main/{split}-00000-of-00001.parquet')\n"
            .replace("sys.argv[1]", &format!("{:?}", spec.display().to_string()))
            .replace("sys.argv[2]", &format!("{:?}", dir.display().to_string()))
            .as_str(),
        &[],
    );
    std::fs::remove_file(spec).expect("rm rows");
    std::fs::write(dir.join("README.md"), GSM8K_README).expect("readme");
}
