//! `submit.shared_root` (the old RayConfig's shared root as the job sees it) through every
//! command that reads a profile's shared storage: `submit`, `prepare`, `slurm submit` and
//! `run` follow the one rule (`Profile::container_layout`). A root other than
//! `shared.mount`, where the containers mount the storage, is refused where it is written
//! before anything is written; one that names the mount (however spelled) is the mount.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Profile, TestContext, free_port, poll};

/// The tiny model `prepare --model-from` puts into the shared HF cache.
const MODEL: &str = "argus/tiny-qwen2";
const MODEL_DIR: &str = "assets/verl/tiny-qwen2";

/// A profile on `shared` with `shared.mount` (when given) and `submit.shared_root`: the
/// least profile (10 lines, plus one for a mount), the submit section its last line.
fn profile(ctx: &mut TestContext, shared: &Path, mount: Option<&str>, root: &str) -> PathBuf {
    let name = ctx.cluster("c");
    let mut text = Profile::new(&name)
        .shared(shared)
        .port(free_port())
        .worker("gpus", "2")
        .yaml(&format!("submit: {{shared_root: '{root}'}}\n"))
        .build();
    if let Some(mount) = mount {
        let host = format!("  host_path: {}\n", shared.display());
        text = text.replace(&host, &format!("{host}  mount: {mount}\n"));
    }
    ctx.write("p.yaml", &text)
}

/// A custom job whose code is a path on the shared storage as the containers see it.
fn jobspec(ctx: &TestContext, code_path: &str) -> PathBuf {
    ctx.write(
        "job.yaml",
        &format!("workload: custom\ncode_path: {code_path}\nentrypoint: python3 -c 1\n"),
    )
}

/// `argus run` of the job, stopped at its first record (`run:up`) or ended before it: the
/// exit code (None when it paused there) and what it said.
fn run_to_its_first_record(ctx: &TestContext, profile: &Path, job: &Path) -> (Option<i32>, String) {
    let tp = ctx.path("tp-run-up");
    let said = ctx.path("run.stderr");
    let mut child = ctx
        .argus()
        .profile(profile)
        .env("ARGUS_TESTPOINT", "run:up")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["run"])
        .arg_path(job)
        .spawn_to(&ctx.path("run.stdout"), &said);
    let ended = poll(
        "argus run to end or reach run:up",
        Duration::from_secs(120),
        || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status.code());
            }
            tp.exists().then_some(None)
        },
    );
    if ended.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    (ended, std::fs::read_to_string(&said).unwrap_or_default())
}

/// Every file and directory under `dir`, relative (empty when it does not exist).
fn tree(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn a_shared_root_other_than_the_mount_is_refused_by_every_command_before_anything_is_written() {
    let mut ctx = TestContext::new("sroot-other");
    let shared = ctx.path("shared");
    let profile = profile(&mut ctx, &shared, None, "/mnt/elsewhere");
    // A job the old rule (submit.shared_root for submit, run and Slurm) would take.
    let job = jobspec(&ctx, "/mnt/elsewhere/common/code/x");
    let before = tree(&shared);
    let where_ = "p.yaml:11:23: submit.shared_root: \"/mnt/elsewhere\" is not shared.mount (\"/mnt/shared\")";
    let commands: [(&str, Vec<&str>); 3] = [
        ("submit", vec!["submit", "--dry-run"]),
        ("slurm submit", vec!["slurm", "submit", "--dry-run"]),
        (
            "prepare",
            vec!["prepare", "--model", MODEL, "--model-from", MODEL_DIR],
        ),
    ];
    for (what, args) in commands {
        let mut argus = ctx.argus().profile(&profile).args(&args);
        if what != "prepare" {
            argus = argus.arg_path(&job);
        }
        let run = argus.run();
        assert_eq!(
            run.code, 2,
            "{what}: exit code\n--- stdout\n{}\n--- stderr\n{}",
            run.stdout, run.stderr
        );
        assert!(run.stderr.contains(where_), "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains("set shared.mount: /mnt/elsewhere"),
            "{what}: {}",
            run.stderr
        );
    }
    let (ended, said) = run_to_its_first_record(&ctx, &profile, &job);
    assert_eq!(ended, Some(2), "run: {said}");
    assert!(said.contains(where_), "run: {said}");
    assert_eq!(
        tree(&shared),
        before,
        "nothing is written on the shared storage"
    );
}

#[test]
fn a_shared_root_that_names_the_mount_is_the_mount_for_every_command() {
    let mut ctx = TestContext::new("sroot-mount");
    let shared = ctx.path("shared");
    // The mount, spelled otherwise: every command must see /data/argus, as the containers do.
    let profile = profile(&mut ctx, &shared, Some("/data/argus"), "/data//argus/");
    std::fs::create_dir_all(shared.join("common/code/x")).expect("mkdir");
    let job = jobspec(&ctx, "/data/argus/common/code/x");

    let out = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--json"])
        .arg_path(&job)
        .run()
        .code(0)
        .json();
    let payload = out["payload"].to_string();
    assert!(
        payload.contains("/data/argus/jobs/") && !payload.contains("//argus"),
        "the job is told the mount: {payload}"
    );

    ctx.argus()
        .profile(&profile)
        .args(["slurm", "submit", "--dry-run"])
        .arg_path(&job)
        .run()
        .code(0);

    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--model", MODEL, "--model-from", MODEL_DIR])
        .run()
        .code(0)
        .stdout_has("/data/argus/common/hf/hub/models--argus--tiny-qwen2/snapshots/");

    let (ended, said) = run_to_its_first_record(&ctx, &profile, &job);
    assert_eq!(ended, None, "run stopped before its first record: {said}");
    let runs = tree(&shared.join("runs"));
    assert!(
        runs.iter().any(|p| p.ends_with("report.json")),
        "run wrote its report: {runs:?}"
    );
}
