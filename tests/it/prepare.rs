//! `argus prepare` against a real HF-protocol server (olah on loopback), checked by the
//! Python libraries verl uses: huggingface_hub and transformers offline, pyarrow, datasets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Profile, TestContext, poll};
use crate::hub::{
    self, Olah, bytes, gsm8k_rows, head_commit, run_python, sha256_hex, tiny_model, write_raw_gsm8k,
};

fn profile(ctx: &TestContext, endpoint: &str) -> (PathBuf, PathBuf) {
    let shared = ctx.path("shared");
    let profile = Profile::new("prep")
        .image("i")
        .shared(&shared)
        .env("HF_ENDPOINT", endpoint)
        .write(ctx, "p.yaml");
    (profile, shared)
}

#[test]
fn a_model_lands_in_the_hf_cache_readable_offline_and_is_fetched_once() {
    let ctx = TestContext::new("prepmodel");
    let olah = Olah::start(&ctx.path("olah"));
    let repo = tiny_model(&olah.mirrors, "acme/tiny", 300_000);
    let commit = head_commit(&repo);
    let (profile, shared) = profile(&ctx, &olah.endpoint);

    let report = ctx
        .argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/tiny", "--json"])
        .run()
        .code(0)
        .json();
    let model = &report[0];
    assert_eq!(model["commit"], commit.as_str());
    assert_eq!(
        model["path"],
        format!("/mnt/shared/common/hf/hub/models--acme--tiny/snapshots/{commit}")
    );
    assert_eq!(model["files_downloaded"], 6);

    // huggingface_hub and transformers find everything offline, byte for byte.
    let hf_home = shared.join("common/hf");
    let check = format!(
        "import os, sys\nfrom huggingface_hub import snapshot_download\np = snapshot_download('acme/tiny', local_files_only=True)\nrepo = {repo:?}\nfor f in ['config.json', 'tokenizer_config.json', 'vocab.json', 'small.safetensors', 'extra/nested/generation_config.json']:\n    assert open(os.path.join(p, f), 'rb').read() == open(os.path.join(repo, f), 'rb').read(), f\nimport hashlib\nassert hashlib.sha256(open(os.path.join(p, 'model.safetensors'), 'rb').read()).hexdigest() == {lfs:?}\nfrom transformers import AutoConfig\nprint(AutoConfig.from_pretrained('acme/tiny').model_type)\n",
        repo = repo.display().to_string(),
        lfs = sha256_hex(&bytes(300_000, 2)),
    );
    let out = run_python(
        &check,
        &[
            ("HF_HOME", hf_home.to_str().expect("utf8")),
            ("HF_HUB_OFFLINE", "1"),
            ("TRANSFORMERS_OFFLINE", "1"),
        ],
    );
    assert_eq!(out.trim().lines().last(), Some("gpt2"));
    let refs = std::fs::read(hf_home.join("hub/models--acme--tiny/refs/main")).expect("ref");
    assert_eq!(
        refs,
        commit.as_bytes(),
        "refs/main holds the commit with no trailing newline"
    );

    // A second prepare transfers nothing.
    let again = ctx
        .argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/tiny", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(again[0]["files_downloaded"], 0);
    assert_eq!(again[0]["bytes_downloaded"], 0);

    // --include narrows the files.
    let only = ctx
        .argus()
        .profile(&profile)
        .args([
            "prepare",
            "--model",
            "acme/tiny@main",
            "--include",
            "*.json",
            "--json",
        ])
        .run()
        .code(0)
        .json();
    assert_eq!(only[0]["files"].as_array().map(Vec::len), Some(4));
}

#[test]
fn missing_repos_and_files_are_not_found() {
    let ctx = TestContext::new("prepmissing");
    let olah = Olah::start(&ctx.path("olah"));
    tiny_model(&olah.mirrors, "acme/tiny", 1000);
    let (profile, shared) = profile(&ctx, &olah.endpoint);
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/nope"])
        .run()
        .code(2)
        .stderr_has("model acme/nope@main not found")
        .stderr_has("answered 401");
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/tiny@no-such-branch"])
        .run()
        .code(2)
        .stderr_has("not found");
    assert!(!shared.join("common/hf/hub/models--acme--nope").exists());
}

#[test]
fn an_interrupted_download_resumes_or_restarts_cleanly() {
    let ctx = TestContext::new("prepkill");
    let mut olah = Olah::start(&ctx.path("olah"));
    let size = 120 << 20;
    tiny_model(&olah.mirrors, "acme/big", size);
    let (profile, shared) = profile(&ctx, &olah.endpoint);
    let blobs = shared.join("common/hf/hub/models--acme--big/blobs");
    let mut child = ctx
        .argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/big"])
        .spawn();
    // Stop the server while the big file is in flight.
    poll(
        "the download to be under way",
        Duration::from_secs(60),
        || {
            std::fs::read_dir(&blobs)
                .ok()?
                .flatten()
                .find(|e| {
                    e.file_name().to_string_lossy().ends_with(".incomplete")
                        && e.metadata().map(|m| m.len() > 0).unwrap_or(false)
                })
                .map(|_| ())
        },
    );
    olah.stop();
    let first = child.wait().expect("wait");
    olah.restart();
    if !first.success() {
        // Gave up while the server was away: the next run finishes the job.
        ctx.argus()
            .profile(&profile)
            .args(["prepare", "--model", "acme/big"])
            .run()
            .code(0);
    }
    let expected = sha256_hex(&bytes(size, 2));
    let blob = blobs.join(&expected);
    assert!(blob.is_file(), "the verified blob is in place");
    assert_eq!(
        hub::sha256_hex(&std::fs::read(&blob).expect("blob")),
        expected
    );
    let leftovers: Vec<_> = std::fs::read_dir(&blobs)
        .expect("blobs")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".incomplete"))
        .collect();
    assert!(leftovers.is_empty(), "no .incomplete left");
}

/// Bytes that do not match their etag cannot be produced by olah (it hashes what it
/// serves), so this failure shape uses a fake server: a HEAD with one sha256, a GET with
/// other bytes of the same length.
#[test]
fn a_corrupted_blob_is_rejected_and_never_published() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let good = bytes(4096, 7);
    let bad = bytes(4096, 8);
    let etag = sha256_hex(&good);
    let served_etag = etag.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20).flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..n]).to_string();
            let response = if head.starts_with("GET /api/models/acme/bad/revision/main") {
                let body = r#"{"sha": "c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff", "siblings": [{"rfilename": "model.safetensors"}]}"#;
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            } else if head.starts_with("HEAD") {
                format!("HTTP/1.1 200 OK\r\ncontent-length: 4096\r\nx-repo-commit: c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff\r\netag: \"{served_etag}\"\r\nconnection: close\r\n\r\n").into_bytes()
            } else {
                let mut r = b"HTTP/1.1 200 OK\r\ncontent-length: 4096\r\nconnection: close\r\n\r\n"
                    .to_vec();
                r.extend_from_slice(&bad);
                r
            };
            let _ = stream.write_all(&response);
        }
    });
    let ctx = TestContext::new("prepcorrupt");
    let (profile, shared) = profile(&ctx, &format!("http://127.0.0.1:{port}"));
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/bad"])
        .run()
        .code(1)
        .stderr_has("downloaded bytes do not match");
    let repo = shared.join("common/hf/hub/models--acme--bad");
    assert!(
        !repo.join("blobs").join(&etag).exists(),
        "never published under its etag"
    );
    assert!(
        !repo.join(format!("blobs/{etag}.incomplete")).exists(),
        "the bad bytes are discarded"
    );
    assert!(
        !repo
            .join("snapshots/c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff/model.safetensors")
            .exists()
    );
}

/// verl's rule, written from the design brief, applied with `datasets` as verl does.
const REFERENCE: &str = r#####"
import re, sys, datasets
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
raw, out, kind = sys.argv[1], sys.argv[2], sys.argv[3]
for split in ['train', 'test']:
    ds = datasets.load_dataset('parquet', data_files={split: f'{raw}/main/{split}-00000-of-00001.parquet'})[split]
    def rl(example, idx):
        q, a = example.pop('question'), example.pop('answer')
        m = re.search(r'#### (\-?[0-9\.\,]+)', a)
        gt = m.group(0).split('#### ')[1].replace(',', '')
        return {'data_source': 'openai/gsm8k', 'prompt': [{'role': 'user', 'content': q + ' ' + INSTRUCTION}], 'ability': 'math',
                'reward_model': {'style': 'rule', 'ground_truth': gt},
                'extra_info': {'split': split, 'index': idx, 'answer': a, 'question': q}}
    def sft(example, idx):
        q, a = example['question'], example['answer']
        return {'messages': [{'role': 'user', 'content': q + ' ' + INSTRUCTION}, {'role': 'assistant', 'content': a}]}
    if kind == 'rl':
        ds = ds.map(rl, with_indices=True)
    else:
        ds = ds.map(sft, with_indices=True, remove_columns=['question', 'answer'])
    ds.to_parquet(f'{out}/{split}.parquet')
"#####;

const COMPARE: &str = r#"
import sys, pyarrow.parquet as pq, datasets
ours, ref = sys.argv[1], sys.argv[2]
for split in ['train', 'test']:
    a, b = pq.read_table(f'{ours}/{split}.parquet'), pq.read_table(f'{ref}/{split}.parquet')
    assert a.schema.remove_metadata() == b.schema.remove_metadata(), (a.schema, b.schema)
    assert a.column_names == b.column_names
    assert a.to_pylist() == b.to_pylist(), split
    loaded = datasets.load_dataset('parquet', data_files={split: f'{ours}/{split}.parquet'})[split]
    assert loaded.num_rows == a.num_rows
    print(split, a.num_rows, a.schema.field(0).name)
"#;

fn reference(ctx: &TestContext, raw: &Path, kind: &str) -> PathBuf {
    let out = ctx.path(&format!("reference-{kind}"));
    std::fs::create_dir_all(&out).expect("mkdir");
    let script = ctx.write(&format!("reference-{kind}.py"), REFERENCE);
    let ok = std::process::Command::new(hub::python())
        .arg(&script)
        .arg(raw)
        .arg(&out)
        .arg(kind)
        .output()
        .expect("python");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    out
}

fn compare(ctx: &TestContext, ours: &Path, reference: &Path) -> String {
    let script = ctx.write("compare.py", COMPARE);
    let out = std::process::Command::new(hub::python())
        .arg(&script)
        .arg(ours)
        .arg(reference)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn gsm8k_through_the_mirror_matches_verls_preprocessing_exactly() {
    let ctx = TestContext::new("prepgsm8k");
    let olah = Olah::start(&ctx.path("olah"));
    let raw = ctx.path("raw");
    write_raw_gsm8k(&raw, &gsm8k_rows("train", 40), &gsm8k_rows("test", 13));
    let files: Vec<(&str, Vec<u8>)> = [
        "main/train-00000-of-00001.parquet",
        "main/test-00000-of-00001.parquet",
        "README.md",
    ]
    .iter()
    .map(|f| (*f, std::fs::read(raw.join(f)).expect("raw")))
    .collect();
    let repo = hub::git_repo(&olah.mirrors, "datasets", "openai/gsm8k", &files, &[]);
    let (profile, shared) = profile(&ctx, &olah.endpoint);

    let report = ctx
        .argus()
        .profile(&profile)
        .args([
            "prepare",
            "--dataset",
            "gsm8k",
            "--dataset",
            "gsm8k-sft",
            "--json",
        ])
        .run()
        .code(0)
        .json();
    assert_eq!(report[0]["path"], "/mnt/shared/common/datasets/gsm8k");
    assert_eq!(report[0]["written"], true);
    let rl = shared.join("common/datasets/gsm8k");
    let out = compare(&ctx, &rl, &reference(&ctx, &raw, "rl"));
    assert!(
        out.contains("train 40 data_source") && out.contains("test 13"),
        "{out}"
    );
    compare(
        &ctx,
        &shared.join("common/datasets/gsm8k_sft"),
        &reference(&ctx, &raw, "sft"),
    );

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rl.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(manifest["source_commit"], head_commit(&repo).as_str());
    assert_eq!(manifest["outputs"][0]["rows"], 40);
    assert_eq!(
        manifest["outputs"][0]["sha256"],
        sha256_hex(&std::fs::read(rl.join("train.parquet")).expect("train")).as_str()
    );

    // Idempotent: nothing rewritten, nothing downloaded.
    let before = std::fs::metadata(rl.join("train.parquet"))
        .expect("meta")
        .modified()
        .expect("mtime");
    let again = ctx
        .argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(again[0]["written"], false);
    assert_eq!(
        std::fs::metadata(rl.join("train.parquet"))
            .expect("meta")
            .modified()
            .expect("mtime"),
        before
    );
}

#[test]
fn a_raw_row_without_a_solution_names_its_split_and_row_and_writes_nothing() {
    let ctx = TestContext::new("prepbad");
    let raw = ctx.path("raw");
    let mut test = gsm8k_rows("test", 5);
    test[3].1 = "no final answer here".to_string();
    write_raw_gsm8k(&raw, &gsm8k_rows("train", 5), &test);
    let (profile, shared) = profile(&ctx, "http://127.0.0.1:9");
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&raw)
        .run()
        .code(2)
        .stderr_has("test row 3: the answer has no `#### <number>` line");
    assert!(
        !shared.join("common/datasets/gsm8k/train.parquet").exists(),
        "nothing written, not even the good split"
    );
    // --from a good copy works without any endpoint.
    let good = ctx.path("good");
    write_raw_gsm8k(&good, &gsm8k_rows("train", 5), &gsm8k_rows("test", 2));
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&good)
        .run()
        .code(0)
        .stdout_has("/mnt/shared/common/datasets/gsm8k");
}

/// A FIFO, socket or device node in a `--from` directory would block a reader forever:
/// each is refused by name before anything is opened, and nothing is written.
#[test]
fn special_files_in_from_are_refused_by_name_without_hanging() {
    let ctx = TestContext::new("prepspecial");
    let (profile, shared) = profile(&ctx, "http://127.0.0.1:9");
    let raw = ctx.path("raw");
    write_raw_gsm8k(&raw, &gsm8k_rows("train", 5), &gsm8k_rows("test", 2));
    let sh = |script: &str| {
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&raw)
            .status()
            .expect("sh")
            .success();
        assert!(ok, "{script}");
    };
    let mut sockets = Vec::new();
    // (what to plant, the path argus must name, what it must call it)
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "mkfifo main/train-00001-of-00002.parquet",
            "main/train-00001-of-00002.parquet",
            "is a FIFO",
        ),
        ("mkfifo main/unrelated", "main/unrelated", "is a FIFO"),
        ("mkfifo top-fifo", "top-fifo", "is a FIFO"),
        (
            "SOCKET main/test-sock.parquet",
            "main/test-sock.parquet",
            "is a socket",
        ),
        (
            "mknod main/test-dev.parquet c 1 3",
            "main/test-dev.parquet",
            "is a character device",
        ),
        (
            "ln -s /dev/zero main/train-zero.parquet",
            "main/train-zero.parquet",
            "is a character device",
        ),
    ];
    for (plant, name, kind) in cases {
        if let Some(path) = plant.strip_prefix("SOCKET ") {
            sockets.push(std::os::unix::net::UnixListener::bind(raw.join(path)).expect("socket"));
        } else {
            sh(plant);
        }
        let before = crate::hostile_hub::listing(ctx.dir.path());
        let started = std::time::Instant::now();
        ctx.argus()
            .profile(&profile)
            .args(["prepare", "--dataset", "gsm8k", "--from"])
            .arg_path(&raw)
            .run()
            .code(2)
            .stderr_has(&format!(
                "{} {kind}: refusing to read it",
                raw.join(name).display()
            ))
            .stderr_has("hint: --from reads regular files only");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{plant}: took too long"
        );
        assert_eq!(
            before,
            crate::hostile_hub::listing(ctx.dir.path()),
            "{plant}"
        );
        assert!(!shared.join("common/datasets").exists());
        std::fs::remove_file(raw.join(name)).expect("remove");
    }
    // --from itself a FIFO: not a directory, never opened.
    let fifo = ctx.path("fifo-dir");
    sh(&format!("mkfifo {}", fifo.display()));
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&fifo)
        .run()
        .code(2)
        .stderr_has("is not a directory");
    // Cleaned up, the same copy prepares.
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&raw)
        .run()
        .code(0);
}

/// A small tmpfs of the test's own, unmounted on drop (also when the test panics).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount")
            .success();
        assert!(ok, "mount tmpfs at {} (needs root)", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Bytes still free for an unprivileged-or-root writer.
    fn free(&self) -> u64 {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(&self.0)
            .output()
            .expect("stat");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text
            .split_whitespace()
            .map(|n| n.parse::<u64>().expect("number"));
        parts.next().expect("blocks") * parts.next().expect("block size")
    }

    /// Fills the file system until about `leave` bytes are free.
    fn fill_to(&self, leave: u64) {
        let filler = self.0.join("filler");
        let _ = std::fs::remove_file(&filler);
        let free = self.free();
        std::fs::write(&filler, vec![1u8; free.saturating_sub(leave) as usize]).expect("filler");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// With a nearly full disk, at every fill level the dataset is either published whole
/// (both splits and the manifest, matching) or not at all, and no temporary file stays;
/// an existing dataset is never damaged.
#[test]
fn a_full_disk_never_leaves_half_a_dataset() {
    let ctx = TestContext::new("prepenospc");
    let raw = ctx.path("raw");
    write_raw_gsm8k(&raw, &gsm8k_rows("train", 3000), &gsm8k_rows("test", 900));
    // The sizes a whole dataset takes, measured on a roomy disk.
    let (roomy, roomy_shared) = profile(&ctx, "http://127.0.0.1:9");
    ctx.argus()
        .profile(&roomy)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&raw)
        .run()
        .code(0);
    let whole: u64 = ["train.parquet", "test.parquet", "manifest.json"]
        .iter()
        .map(|f| {
            std::fs::metadata(roomy_shared.join("common/datasets/gsm8k").join(f))
                .expect("output")
                .len()
                .div_ceil(4096)
                * 4096
        })
        .sum();

    let shared = ctx.path("tight");
    let disk = Tmpfs::mount(&shared, "8m");
    let profile = ctx.write(
        "tight.yaml",
        &format!(
            "name: tight\nimage: i\nshared: {{host_path: {}}}\nworkers: [{{name: gpu, count: 1}}]\n",
            shared.display()
        ),
    );
    let out = shared.join("common/datasets/gsm8k");
    let check_whole = |dir: &Path| {
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest"),
        )
        .expect("json");
        for (i, name) in ["train.parquet", "test.parquet"].iter().enumerate() {
            assert_eq!(manifest["outputs"][i]["file"], *name);
            assert_eq!(
                manifest["outputs"][i]["sha256"],
                sha256_hex(&std::fs::read(dir.join(name)).expect("split")).as_str()
            );
        }
        manifest
    };

    // Coarse levels, then around the last page (both splits fit, the manifest may not),
    // then a little more: prepare's lock (owner.json, heartbeat) takes a few pages while
    // it runs and none after.
    let steps = 12;
    let levels: Vec<u64> = (0..=steps)
        .map(|step| whole * step / steps)
        .chain([whole - 8192, whole - 4096, whole - 1024, whole])
        .chain([whole + 16384, whole + 65536])
        .collect();
    let (mut failed, mut succeeded) = (0, 0);
    let mut failed_at = std::collections::BTreeSet::new();
    for leave in levels {
        let _ = std::fs::remove_dir_all(shared.join("common"));
        disk.fill_to(leave);
        let before = crate::hostile_hub::listing(&shared);
        let run = ctx
            .argus()
            .profile(&profile)
            .args(["prepare", "--dataset", "gsm8k", "--from"])
            .arg_path(&raw)
            .run();
        if run.code == 0 {
            succeeded += 1;
            check_whole(&out);
        } else {
            failed += 1;
            for file in ["train.parquet", "test.parquet", "manifest.json"] {
                if run.stderr.contains(&format!("/{file}")) {
                    failed_at.insert(file);
                }
            }
            assert_eq!(run.code, 1, "{}", run.stderr);
            assert!(
                run.stderr.contains("No space left on device"),
                "{}",
                run.stderr
            );
            assert_eq!(
                before,
                crate::hostile_hub::listing(&shared),
                "with {leave} bytes free, a failed prepare left something behind\n{}",
                run.stderr
            );
        }
    }
    assert!(
        failed > 0 && succeeded > 0,
        "failed {failed}, succeeded {succeeded}"
    );

    // An existing dataset survives a failed replacement, byte for byte.
    let _ = std::fs::remove_dir_all(shared.join("common"));
    disk.fill_to(whole * 3);
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&raw)
        .run()
        .code(0);
    let old = check_whole(&out);
    let other = ctx.path("raw2");
    write_raw_gsm8k(&other, &gsm8k_rows("train", 3100), &gsm8k_rows("test", 900));
    disk.fill_to(whole / 2);
    let before = crate::hostile_hub::listing(&shared);
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--dataset", "gsm8k", "--from"])
        .arg_path(&other)
        .run()
        .code(1)
        .stderr_has("No space left on device");
    assert_eq!(before, crate::hostile_hub::listing(&shared));
    assert_eq!(check_whole(&out), old);
    drop(disk);
}

/// Two `prepare --model` of one repo at once: the second waits for the first (naming it),
/// then finds every blob in place and downloads nothing. One verified blob set, no
/// `.incomplete`, and huggingface_hub reads it offline.
#[test]
fn two_concurrent_prepares_of_one_model_yield_one_verified_blob_set() {
    let ctx = TestContext::new("prep2");
    let olah = Olah::start(&ctx.path("olah"));
    let repo = tiny_model(&olah.mirrors, "acme/twice", 200_000);
    let commit = head_commit(&repo);
    let (profile, shared) = profile(&ctx, &olah.endpoint);
    let tp = ctx.path("testpoint");
    let mut first = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "prepare:locked")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["prepare", "--model", "acme/twice", "--json"])
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    crate::harness::poll(
        "the first prepare to hold the lock",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    let mut second = ctx
        .argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/twice", "--json"])
        .spawn_to(&ctx.path("2.out"), &ctx.path("2.err"));
    let holder = format!("pid {}", first.id());
    crate::harness::poll(
        "the second prepare to wait",
        std::time::Duration::from_secs(60),
        || {
            let err = std::fs::read_to_string(ctx.path("2.err")).unwrap_or_default();
            (err.contains("waiting for prepare of model-models--acme--twice")
                && err.contains(&holder))
            .then_some(())
        },
    );
    std::fs::remove_file(&tp).expect("release the first");
    assert!(first.wait().expect("first").success());
    assert!(second.wait().expect("second").success());
    let report = |n: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(ctx.path(n)).unwrap_or_default())
            .expect("prepare's JSON")
    };
    assert_eq!(report("1.out")[0]["files_downloaded"], 6);
    assert_eq!(
        report("2.out")[0]["files_downloaded"],
        0,
        "the second downloaded again"
    );
    assert_eq!(report("2.out")[0]["commit"], commit.as_str());
    let cache = shared.join("common/hf/hub/models--acme--twice");
    let blobs: Vec<String> = std::fs::read_dir(cache.join("blobs"))
        .expect("blobs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(blobs.len(), 6, "{blobs:?}");
    assert!(
        blobs.iter().all(|b| !b.ends_with(".incomplete")),
        "{blobs:?}"
    );
    let out = run_python(
        "from huggingface_hub import snapshot_download\nimport os\np = snapshot_download('acme/twice', local_files_only=True)\nprint(sorted(os.listdir(p)))\n",
        &[
            ("HF_HOME", shared.join("common/hf").to_str().expect("utf8")),
            ("HF_HUB_OFFLINE", "1"),
        ],
    );
    assert!(out.contains("model.safetensors"), "{out}");
}

/// Pauses a spawned `argus prepare` at `point`, lets `swap` move a directory of the
/// storage away and plant a link to `outside` in its place, then lets it finish.
fn swap_while_paused(
    ctx: &TestContext,
    profile: &Path,
    args: &[&str],
    point: &str,
    swap: impl FnOnce(),
) -> std::process::ExitStatus {
    let tp = ctx.path(&format!("testpoint-{point}"));
    let mut child = ctx
        .argus()
        .profile(profile)
        .env("ARGUS_TESTPOINT", point)
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(args)
        .spawn_to(&ctx.path("swap.out"), &ctx.path("swap.err"));
    poll(
        &format!("prepare to pause at {point}"),
        Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    swap();
    std::fs::remove_file(&tp).expect("release");
    child.wait().expect("prepare")
}

fn swap_for_link(dir: &Path, moved: &Path, outside: &Path) {
    std::fs::rename(dir, moved).expect("move the real directory away");
    std::os::unix::fs::symlink(outside, dir).expect("plant the link");
}

/// `common/datasets` swapped for a link to elsewhere while prepare writes the dataset
/// (the race a hostile writer of the storage can win): the dataset still lands in the
/// real directory, held open since before the swap, and nothing appears at the link's
/// target. The next prepare refuses the link (exit 2).
#[test]
fn a_datasets_directory_swapped_for_a_link_mid_prepare_is_not_followed() {
    let ctx = TestContext::new("prepswapds");
    let raw = ctx.path("raw");
    write_raw_gsm8k(&raw, &gsm8k_rows("train", 5), &gsm8k_rows("test", 2));
    let (profile, shared) = profile(&ctx, "http://127.0.0.1:9");
    let (moved, outside) = (ctx.path("moved"), ctx.path("outside"));
    std::fs::create_dir_all(&outside).expect("outside");
    let datasets = shared.join("common/datasets");
    let raw_arg = raw.to_str().expect("utf8");
    let args = ["prepare", "--dataset", "gsm8k", "--from", raw_arg];
    let status = swap_while_paused(&ctx, &profile, &args, "prepare:staged", || {
        swap_for_link(&datasets, &moved, &outside)
    });
    let err = std::fs::read_to_string(ctx.path("swap.err")).unwrap_or_default();
    assert!(status.success(), "{err}");
    for file in ["train.parquet", "test.parquet", "manifest.json"] {
        assert!(moved.join("gsm8k").join(file).is_file(), "{file}: {err}");
    }
    assert_eq!(crate::harness::entry_names(&moved), ["gsm8k"]);
    assert!(
        crate::harness::entry_names(&outside).is_empty(),
        "written through the link"
    );
    ctx.argus()
        .profile(&profile)
        .args(args)
        .run()
        .code(2)
        .stderr_has("is a symbolic link");
    assert!(crate::harness::entry_names(&outside).is_empty());
}

/// A model repo's `blobs/` swapped for a link to elsewhere while prepare downloads into
/// it: every blob lands in the real directory (held open), none at the link's target.
#[test]
fn blobs_swapped_for_a_link_mid_download_are_not_followed() {
    let ctx = TestContext::new("prepswapblobs");
    let olah = Olah::start(&ctx.path("olah"));
    tiny_model(&olah.mirrors, "acme/swapped", 50_000);
    let (profile, shared) = profile(&ctx, &olah.endpoint);
    let (moved, outside) = (ctx.path("moved"), ctx.path("outside"));
    std::fs::create_dir_all(&outside).expect("outside");
    let blobs = shared.join("common/hf/hub/models--acme--swapped/blobs");
    let args = ["prepare", "--model", "acme/swapped"];
    let status = swap_while_paused(&ctx, &profile, &args, "prepare:blobs", || {
        swap_for_link(&blobs, &moved, &outside)
    });
    let err = std::fs::read_to_string(ctx.path("swap.err")).unwrap_or_default();
    assert!(status.success(), "{err}");
    let names = crate::harness::entry_names(&moved);
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(
        names.iter().all(|n| !n.contains(".incomplete")),
        "{names:?}"
    );
    assert!(
        crate::harness::entry_names(&outside).is_empty(),
        "written through the link"
    );
}
