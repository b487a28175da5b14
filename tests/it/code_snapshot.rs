//! `argus snapshot`: what is copied, ids, atomicity, verify, rm, and bad input. No Docker
//! needed: snapshots are written from this host onto the shared storage.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::TestContext;

/// A context whose profile puts the shared storage in its temp dir.
fn context(test: &str) -> (TestContext, PathBuf, PathBuf) {
    let ctx = TestContext::new(test);
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &format!("name: snap\nimage: argus/ray:2.51.1\nshared: {{host_path: {}}}\nworkers: [{{name: gpu, count: 1}}]\n", shared.display()),
    );
    (ctx, shared, profile)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A tree with nested dirs, a symlink, an executable, ignored files, .git and __pycache__.
fn sample_tree(root: &Path) {
    write(&root.join("pkg/__init__.py"), "");
    write(&root.join("pkg/core/model.py"), "W = 1\n");
    write(&root.join("scripts/run.sh"), "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(
        root.join("scripts/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    write(&root.join(".gitignore"), "*.log\nbuild/\n");
    write(&root.join("train.log"), "ignored");
    write(&root.join("build/out.bin"), "ignored");
    write(&root.join(".git/HEAD"), "ref: refs/heads/main\n");
    write(
        &root.join("pkg/__pycache__/model.cpython-311.pyc"),
        "bytecode",
    );
    write(&root.join("pkg/stray.pyc"), "bytecode");
    std::os::unix::fs::symlink("core/model.py", root.join("pkg/alias.py")).expect("symlink");
}

fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).expect("rel").display().to_string();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_snapshot_holds_exactly_the_tree_minus_what_is_ignored() {
    let (ctx, shared, profile) = context("snapexact");
    let src = ctx.path("src");
    sample_tree(&src);
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    let code_id = report["code_id"].as_str().expect("code_id").to_string();
    let dir = shared.join("common/code/verl").join(&code_id);
    assert_eq!(report["path"], dir.display().to_string());
    assert_eq!(
        files_under(&dir),
        [
            ".argus/manifest.json",
            ".gitignore",
            "pkg/__init__.py",
            "pkg/alias.py",
            "pkg/core/model.py",
            "scripts/run.sh"
        ]
    );
    assert_eq!(report["files"], 4, "{report:#}");
    assert_eq!(
        std::fs::read_link(dir.join("pkg/alias.py")).expect("link"),
        PathBuf::from("core/model.py")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("pkg/alias.py")).expect("through link"),
        "W = 1\n"
    );
    let mode = |rel: &str| {
        std::fs::metadata(dir.join(rel))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        mode("scripts/run.sh"),
        0o555,
        "executable kept, write bits removed"
    );
    assert_eq!(mode("pkg/core/model.py"), 0o444);
    assert_eq!(
        std::fs::read_to_string(dir.join("scripts/run.sh")).expect("bytes"),
        "#!/bin/sh\necho hi\n"
    );

    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(".argus/manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["code_id"], code_id.as_str());
    assert_eq!(
        manifest["source"],
        std::fs::canonicalize(&src)
            .expect("canon")
            .display()
            .to_string()
    );
    let paths: Vec<&str> = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        paths,
        [
            ".gitignore",
            "pkg/__init__.py",
            "pkg/alias.py",
            "pkg/core/model.py",
            "scripts/run.sh"
        ]
    );
    let run_sh = &manifest["files"][4];
    assert_eq!(run_sh["executable"], true);
    assert_eq!(run_sh["size"], 18);
    assert_eq!(run_sh["sha256"].as_str().map(str::len), Some(64));

    // The same tree again: the same id, one directory, nothing copied.
    let again = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    assert_eq!(again["code_id"], code_id.as_str());
    assert_eq!(again["created"], false);
    assert_eq!(
        std::fs::read_dir(shared.join("common/code/verl"))
            .expect("dir")
            .count(),
        1
    );

    // One changed byte: another id.
    write(&src.join("pkg/core/model.py"), "W = 2\n");
    let changed = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    assert_ne!(changed["code_id"], code_id.as_str());

    // Listed, both.
    let list = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "list", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(list.as_array().map(Vec::len), Some(2));
}

#[test]
fn a_git_checkout_prefixes_the_id_with_its_commit_and_dirty_state() {
    let (ctx, _shared, profile) = context("snapgit");
    let src = ctx.path("src");
    write(&src.join("a.py"), "A = 1\n");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .arg("-C")
            .arg(&src)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .expect("git")
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "x"]);
    let head = Command::new("git")
        .arg("-C")
        .arg(&src)
        .args(["rev-parse", "--short=10", "HEAD"])
        .output()
        .expect("git")
        .stdout;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    let clean = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    assert!(
        clean["code_id"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("{head}-")),
        "{clean:#}"
    );
    assert_eq!(clean["git_dirty"], false);
    write(&src.join("a.py"), "A = 2\n");
    let dirty = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    assert!(
        dirty["code_id"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("{head}-dirty-")),
        "{dirty:#}"
    );
}

#[test]
fn two_snapshots_coexist_and_each_imports_its_own_marker() {
    let (ctx, _shared, profile) = context("snapmarker");
    let mut paths = Vec::new();
    for (id, marker) in [("codeA", "alpha"), ("codeB", "beta")] {
        let src = ctx.path(id);
        write(&src.join("marker.py"), &format!("MARKER = {marker:?}\n"));
        let report = ctx
            .argus()
            .profile(&profile)
            .args(["snapshot", "--json", "--code-id", id])
            .arg_path(&src)
            .run()
            .code(0)
            .json();
        assert_eq!(report["code_id"], id);
        paths.push((report["path"].as_str().expect("path").to_string(), marker));
    }
    for (path, marker) in paths {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import marker; print(marker.MARKER)",
                &path,
            ])
            .output()
            .expect("python3");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            marker,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The temporary copies of `id` under a snapshot family directory.
fn temps_of(family: &Path, id: &str) -> Vec<PathBuf> {
    let prefix = format!(".tmp-{id}.");
    std::fs::read_dir(family)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Killed after its copy is complete and before the rename (a test point, not a timer):
/// nothing under the final name; the next run removes the leftover and publishes.
#[test]
fn a_snapshot_killed_before_publishing_leaves_nothing_under_a_final_name() {
    let (ctx, shared, profile) = context("snapkill");
    let src = ctx.path("src");
    sample_tree(&src);
    let family = shared.join("common/code/verl");
    let tp = ctx.path("testpoint");
    let mut child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "snapshot:before-publish")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["snapshot", "--code-id", "k1"])
        .arg_path(&src)
        .spawn();
    crate::harness::poll(
        "the copy to be complete",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(!family.join("k1").exists(), "nothing under the final name");
    assert_eq!(
        temps_of(&family, "k1").len(),
        1,
        "only its temporary copy is left"
    );
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "k1"])
        .arg_path(&src)
        .run()
        .code(0);
    assert!(temps_of(&family, "k1").is_empty(), "leftovers removed");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "k1"])
        .run()
        .code(0);
}

/// Two snapshots of one tree at once: the second waits for the first (naming it), then
/// finds the snapshot published. One directory, one id, nothing left over.
#[test]
fn two_concurrent_snapshots_of_one_tree_yield_one_snapshot() {
    let (ctx, shared, profile) = context("snaptwo");
    let src = ctx.path("src");
    sample_tree(&src);
    let family = shared.join("common/code/verl");
    let tp = ctx.path("testpoint");
    let mut first = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "snapshot:before-publish")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["snapshot"])
        .arg_path(&src)
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    crate::harness::poll(
        "the first snapshot to hold its lock",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    let mut second = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&src)
        .spawn_to(&ctx.path("2.out"), &ctx.path("2.err"));
    let holder = format!("pid {}", first.id());
    crate::harness::poll(
        "the second snapshot to wait",
        std::time::Duration::from_secs(60),
        || {
            let err = std::fs::read_to_string(ctx.path("2.err")).unwrap_or_default();
            (err.contains("waiting for snapshot verl/") && err.contains(&holder)).then_some(())
        },
    );
    std::fs::remove_file(&tp).expect("release the first");
    assert!(first.wait().expect("first").success());
    assert!(second.wait().expect("second").success());
    let id1 = std::fs::read_to_string(ctx.path("1.out")).unwrap_or_default();
    let id2 = std::fs::read_to_string(ctx.path("2.out")).unwrap_or_default();
    assert_eq!(id1.trim(), id2.trim());
    let entries: Vec<String> = std::fs::read_dir(&family)
        .expect("family dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        entries,
        vec![id1.trim().to_string()],
        "one snapshot and nothing else"
    );
}

/// Cleanup judges a temporary copy by its writer: a dead writer on this host is cleaned
/// up; a writer on another host (whose pid means nothing here) is left alone.
#[test]
fn cleanup_never_removes_another_hosts_copy_in_progress() {
    let (ctx, shared, profile) = context("snapfar");
    let src = ctx.path("src");
    sample_tree(&src);
    let family = shared.join("common/code/verl");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    // pid 1's start time is not 999999, so this writer is dead; the other host's is unknowable.
    let dead_here = family.join(format!(".tmp-other.{host}.1.999999.0"));
    let far = family.join(".tmp-other.some-other-host.1.999999.0");
    for dir in [&dead_here, &far] {
        std::fs::create_dir_all(dir.join("pkg")).expect("mkdir");
        std::fs::write(dir.join("pkg/x.py"), "x").expect("write");
    }
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "mine"])
        .arg_path(&src)
        .run()
        .code(0);
    assert!(
        !dead_here.exists(),
        "a dead writer's copy on this host is removed"
    );
    assert!(far.exists(), "another host's copy in progress must survive");
    let listed = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "list", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");
}

#[test]
fn verify_reports_modified_deleted_and_added_files() {
    let (ctx, shared, profile) = context("snapverify");
    let src = ctx.path("src");
    sample_tree(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "v1"])
        .arg_path(&src)
        .run()
        .code(0);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "v1"])
        .run()
        .code(0)
        .stderr_has("intact");
    let dir = shared.join("common/code/verl/v1");
    let model = dir.join("pkg/core/model.py");
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(&model, "W = 3\n").expect("modify");
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    std::fs::remove_file(dir.join("pkg/__init__.py")).expect("delete");
    std::fs::write(dir.join("pkg/new.py"), "").expect("add");
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "verify", "v1", "--json"])
        .run()
        .code(1)
        .json();
    assert_eq!(report["changed"], serde_json::json!(["pkg/core/model.py"]));
    assert_eq!(report["missing"], serde_json::json!(["pkg/__init__.py"]));
    assert_eq!(report["added"], serde_json::json!(["pkg/new.py"]));
}

#[test]
fn rm_refuses_a_snapshot_an_unfinished_job_uses() {
    let (ctx, shared, profile) = context("snaprm");
    let src = ctx.path("src");
    write(&src.join("a.py"), "");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "inuse"])
        .arg_path(&src)
        .run()
        .code(0);
    write(
        &shared.join("jobs/job-1/job.json"),
        r#"{"code_id": "inuse", "status": "RUNNING"}"#,
    );
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "rm", "inuse"])
        .run()
        .code(2)
        .stderr_has("used by unfinished job(s): job-1");
    assert!(shared.join("common/code/verl/inuse").is_dir());
    write(
        &shared.join("jobs/job-1/job.json"),
        r#"{"code_id": "inuse", "status": "SUCCEEDED"}"#,
    );
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "rm", "inuse"])
        .run()
        .code(0);
    assert!(!shared.join("common/code/verl/inuse").exists());
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "rm", "inuse"])
        .run()
        .code(2)
        .stderr_has("no snapshot inuse");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let (ctx, shared, profile) = context("snapbad");
    let src = ctx.path("src");
    write(&src.join("a.py"), "A = 1\n");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&ctx.path("nope"))
        .run()
        .code(2)
        .stderr_has("does not exist");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&src.join("a.py"))
        .run()
        .code(2)
        .stderr_has("is not a directory");
    for bad in ["../escape", "a/b", "..", "."] {
        ctx.argus()
            .profile(&profile)
            .args(["snapshot", "--code-id", bad])
            .arg_path(&src)
            .run()
            .code(2)
            .stderr_has("invalid code id");
    }
    assert!(
        !shared.join("common/code/verl").exists()
            || std::fs::read_dir(shared.join("common/code/verl"))
                .expect("dir")
                .count()
                == 0
    );

    // An existing id with other content is an error, never an overwrite.
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "fixed"])
        .arg_path(&src)
        .run()
        .code(0);
    write(&src.join("a.py"), "A = 2\n");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "fixed"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("already exists with different content");
    assert_eq!(
        std::fs::read_to_string(shared.join("common/code/verl/fixed/a.py")).expect("kept"),
        "A = 1\n"
    );

    // A symlink out of the tree is refused unless followed.
    std::os::unix::fs::symlink(ctx.path("outside.txt"), src.join("out.txt")).expect("symlink");
    write(&ctx.path("outside.txt"), "outside");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("points outside the source tree")
        .stderr_has("--follow-links");
    let followed = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json", "--follow-links"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    let copied = Path::new(followed["path"].as_str().expect("path")).join("out.txt");
    assert!(
        !std::fs::symlink_metadata(&copied)
            .expect("meta")
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(copied).expect("copied"), "outside");

    // Shared storage that cannot be written: a clear I/O error, exit 1.
    let blocked = ctx.write("blocked", "a file where a directory should be");
    let profile2 = ctx.write("p2.yaml", &format!("name: snap\nimage: i\nshared: {{host_path: {}/shared}}\nworkers: [{{name: gpu, count: 1}}]\n", blocked.display()));
    ctx.argus()
        .profile(&profile2)
        .args(["snapshot", "--exclude", "out.txt"])
        .arg_path(&src)
        .run()
        .code(1)
        .stderr_has("cannot create");
}

/// Every entry under `dir`, recursively, links not followed (for "nothing was written").
fn everything_under(dir: &Path) -> Vec<String> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Vec::new();
    }
    files_under(dir)
}

/// A file written to between the hash and the copy (held there by a test point, not a
/// timer): the snapshot fails, naming the file, and nothing is published or left behind;
/// the next run, with the tree at rest, publishes what the manifest says.
#[test]
fn a_file_changed_while_it_is_snapshotted_fails_it_and_publishes_nothing() {
    let (ctx, shared, profile) = context("snapchanged");
    let src = ctx.path("src");
    sample_tree(&src);
    let family = shared.join("common/code/verl");
    let tp = ctx.path("testpoint");
    let child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "snapshot:before-copy")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["snapshot", "--code-id", "c1"])
        .arg_path(&src)
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    crate::harness::poll(
        "the snapshot to be hashed",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    // Same size, other bytes: only the bytes themselves tell.
    write(&src.join("pkg/core/model.py"), "W = 9\n");
    std::fs::remove_file(&tp).expect("let it go on");
    let status = child.wait_with_output().expect("wait").status;
    let stderr = std::fs::read_to_string(ctx.path("1.err")).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pkg/core/model.py") && stderr.contains("changed while"),
        "{stderr}"
    );
    assert!(
        everything_under(&family).is_empty(),
        "no snapshot, no temporary copy: {:?}",
        everything_under(&family)
    );

    let report = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--json", "--code-id", "c1"])
        .arg_path(&src)
        .run()
        .code(0)
        .json();
    assert_eq!(report["created"], true);
    assert_eq!(
        std::fs::read_to_string(family.join("c1/pkg/core/model.py")).expect("copied"),
        "W = 9\n"
    );
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "c1"])
        .run()
        .code(0);
}

/// A published snapshot whose bytes were changed afterwards is never taken for the source
/// it was made from: snapshotting that source again says so (exit 1) instead of reusing it.
#[test]
fn a_snapshot_that_no_longer_matches_its_manifest_is_never_reused() {
    let (ctx, shared, profile) = context("snapreuse");
    let src = ctx.path("src");
    sample_tree(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "r1"])
        .arg_path(&src)
        .run()
        .code(0);
    let model = shared.join("common/code/verl/r1/pkg/core/model.py");
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(&model, "W = 5\n").expect("tamper");
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "r1"])
        .arg_path(&src)
        .run()
        .code(1)
        .stderr_has("does not match its manifest")
        .stderr_has("pkg/core/model.py")
        .stderr_has("argus snapshot rm verl/r1");
    assert_eq!(
        std::fs::read_to_string(&model).expect("left as found"),
        "W = 5\n"
    );
}

/// Two names that are not UTF-8 (which a lossy rename would make one): refused, by their
/// escaped bytes, exit 2, nothing written to the storage.
#[test]
fn names_that_are_not_utf8_are_refused_never_renamed() {
    use std::os::unix::ffi::OsStrExt;
    let (ctx, shared, profile) = context("snaputf8");
    let src = ctx.path("src");
    write(&src.join("a.py"), "A = 1\n");
    for name in [b"m\xff.py".as_slice(), b"m\xfe.py"] {
        std::fs::write(src.join(std::ffi::OsStr::from_bytes(name)), "x").expect("write");
    }
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("not UTF-8")
        .stderr_has(r"\x")
        .stderr_has("--exclude");
    assert!(
        everything_under(&shared.join("common")).is_empty(),
        "nothing written: {:?}",
        everything_under(&shared.join("common"))
    );
}

/// A file only its owner may read stays so in the snapshot (0600 -> 0400); executables
/// keep their x; the manifest records the mode.
#[test]
fn a_private_file_stays_private_in_the_snapshot() {
    let (ctx, shared, profile) = context("snapmode");
    let src = ctx.path("src");
    sample_tree(&src);
    write(&src.join("pkg/secret.py"), "KEY = 1\n");
    std::fs::set_permissions(
        src.join("pkg/secret.py"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "m1"])
        .arg_path(&src)
        .run()
        .code(0);
    let dir = shared.join("common/code/verl/m1");
    let mode = |rel: &str| {
        std::fs::metadata(dir.join(rel))
            .expect("meta")
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("pkg/secret.py"), 0o400, "never wider than the source");
    assert_eq!(mode("scripts/run.sh"), 0o555);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(".argus/manifest.json")).expect("manifest"),
    )
    .expect("json");
    let secret = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["path"] == "pkg/secret.py")
        .expect("recorded");
    assert_eq!(secret["mode"], "0400");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "m1"])
        .run()
        .code(0);
}

/// The storage inside the tree being snapshotted, before it has a `common/` (not there at
/// all, then an empty directory): refused, exit 2, nothing written.
#[test]
fn a_tree_holding_a_fresh_shared_storage_is_refused() {
    let ctx = TestContext::new("snapfresh");
    let src = ctx.path("src");
    write(&src.join("a.py"), "A = 1\n");
    let shared = src.join("shared");
    let profile = ctx.write(
        "p.yaml",
        &format!("name: snap\nimage: argus/ray:2.51.1\nshared: {{host_path: {}}}\nworkers: [{{name: gpu, count: 1}}]\n", shared.display()),
    );
    for made in [false, true] {
        if made {
            std::fs::create_dir(&shared).expect("mkdir");
        }
        ctx.argus()
            .profile(&profile)
            .args(["snapshot"])
            .arg_path(&src)
            .run()
            .code(2)
            .stderr_has("contains the shared storage");
        assert_eq!(shared.exists(), made, "nothing written");
        assert!(
            everything_under(&shared).is_empty(),
            "{:?}",
            everything_under(&shared)
        );
    }
}

/// A symbolic link planted at `common/code/<name>` (or at `common/code`) by anyone who can
/// write to the storage: argus refuses it, exit 2, and writes or reads nothing through it.
#[test]
fn a_link_planted_at_common_code_is_refused_never_followed() {
    let (ctx, shared, profile) = context("snaplink");
    let src = ctx.path("src");
    sample_tree(&src);
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let code = shared.join("common/code");
    std::fs::create_dir_all(&code).expect("mkdir");
    std::os::unix::fs::symlink(&outside, code.join("verl")).expect("plant");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "l1"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("is a symbolic link");
    assert!(
        everything_under(&outside).is_empty(),
        "nothing written through the link"
    );

    // A snapshot that exists only behind the link is not read either.
    std::fs::remove_file(code.join("verl")).expect("unplant");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "l1"])
        .arg_path(&src)
        .run()
        .code(0);
    std::fs::rename(code.join("verl"), outside.join("verl")).expect("move away");
    std::os::unix::fs::symlink(outside.join("verl"), code.join("verl")).expect("plant");
    // Listed as unreadable (exit 0, with a warning that says why), never read through.
    let listed = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "list", "--json"])
        .run()
        .code(0)
        .stderr_has("is a symbolic link");
    assert_eq!(listed.json()[0]["code_id"], "-", "{}", listed.stdout);
    for args in [
        vec!["snapshot", "verify", "l1"],
        vec!["snapshot", "verify", "verl/l1"],
        vec!["snapshot", "rm", "l1"],
    ] {
        ctx.argus()
            .profile(&profile)
            .args(&args)
            .run()
            .code(2)
            .stderr_has("is a symbolic link");
    }
    assert!(outside.join("verl/l1").is_dir(), "left as found");

    // common/code itself a link.
    std::fs::remove_file(code.join("verl")).expect("unplant");
    std::fs::remove_dir(&code).expect("rmdir");
    std::os::unix::fs::symlink(&outside, &code).expect("plant");
    for args in [vec!["snapshot", "list"], vec!["snapshot", "verify", "l1"]] {
        ctx.argus()
            .profile(&profile)
            .args(&args)
            .run()
            .code(2)
            .stderr_has("is a symbolic link");
    }
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "l2"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("is a symbolic link");
    assert!(
        !outside.join("verl/l2").exists(),
        "nothing written through the link"
    );
}

/// `common/code/verl` swapped for a link to a directory outside the storage while argus
/// holds it open (paused at a test point after it opened the directory and took the lock,
/// before the copy): nothing is written outside; the snapshot lands in the real directory,
/// now moved away, or the command fails and leaves nothing.
#[test]
fn a_family_directory_swapped_for_a_link_mid_snapshot_writes_nothing_outside() {
    let (ctx, shared, profile) = context("snapswap");
    let src = ctx.path("src");
    sample_tree(&src);
    let family = shared.join("common/code/verl");
    let moved = ctx.path("moved");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let tp = ctx.path("testpoint");
    let child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "snapshot:before-copy")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["snapshot", "--code-id", "s1"])
        .arg_path(&src)
        .spawn_to(&ctx.path("1.out"), &ctx.path("1.err"));
    crate::harness::poll(
        "the snapshot to pause before its copy",
        std::time::Duration::from_secs(60),
        || tp.exists().then_some(()),
    );
    std::fs::rename(&family, &moved).expect("move the real directory away");
    std::os::unix::fs::symlink(&outside, &family).expect("plant the link");
    std::fs::remove_file(&tp).expect("let it go on");
    let status = child.wait_with_output().expect("wait").status;
    let stderr = std::fs::read_to_string(ctx.path("1.err")).unwrap_or_default();
    assert!(
        everything_under(&outside).is_empty(),
        "written outside the storage: {:?}\n{stderr}",
        everything_under(&outside)
    );
    let temps: Vec<String> = everything_under(&moved)
        .into_iter()
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(temps.is_empty(), "leftovers: {temps:?}");
    if status.success() {
        assert_eq!(
            std::fs::read_to_string(moved.join("s1/pkg/core/model.py")).expect("published"),
            "W = 1\n"
        );
        // Put back, it verifies.
        std::fs::remove_file(&family).expect("unplant");
        std::fs::rename(&moved, &family).expect("move back");
        ctx.argus()
            .profile(&profile)
            .args(["snapshot", "verify", "s1"])
            .run()
            .code(0);
    } else {
        assert!(!moved.join("s1").exists(), "{stderr}");
        assert!(stderr.contains("error"), "{stderr}");
    }
}

/// With --follow-links, a link in the tree that resolves to the shared storage, to a
/// directory holding it, or to a directory inside it is refused: exit 2, one error naming
/// the link and where it leads, nothing written.
#[test]
fn a_followed_link_to_the_shared_storage_is_refused() {
    let (ctx, shared, profile) = context("snapfollowroot");
    let src = ctx.path("src");
    sample_tree(&src);
    std::fs::create_dir_all(shared.join("user/code")).expect("mkdir");
    for target in [
        shared.clone(),
        shared.join("user/code"),
        ctx.dir.path().to_path_buf(),
    ] {
        let link = src.join("pkg/data");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let resolved = std::fs::canonicalize(&target).expect("canonical");
        let run = ctx
            .argus()
            .profile(&profile)
            .args(["snapshot", "--follow-links"])
            .arg_path(&src)
            .run()
            .code(2)
            .stderr_has("symlink pkg/data resolves to")
            .stderr_has(&resolved.display().to_string())
            .stderr_has("the shared storage");
        assert!(
            !run.stderr.contains("pass --follow-links"),
            "{}",
            run.stderr
        );
        assert!(
            everything_under(&shared.join("common")).is_empty(),
            "nothing written: {:?}",
            everything_under(&shared.join("common"))
        );
    }
}

/// A link that leads nowhere, with --follow-links given: the error says so, and does not
/// suggest the flag that was passed.
#[test]
fn a_dangling_link_with_follow_links_does_not_suggest_follow_links() {
    let (ctx, _shared, profile) = context("snapdangling");
    let src = ctx.path("src");
    write(&src.join("a.py"), "A = 1\n");
    std::os::unix::fs::symlink(ctx.path("nowhere"), src.join("gone")).expect("symlink");
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "--follow-links"])
        .arg_path(&src)
        .run()
        .code(2)
        .stderr_has("does not exist")
        .stderr_has("--exclude");
    assert!(
        !run.stderr.contains("pass --follow-links"),
        "{}",
        run.stderr
    );
}

/// `snapshot list` with one snapshot's manifest corrupt and a link planted beside it: the
/// readable one is listed, the others are listed as UNREADABLE with a warning each.
#[test]
fn list_shows_unreadable_entries_beside_the_others() {
    let (ctx, shared, profile) = context("snaplistbad");
    let src = ctx.path("src");
    sample_tree(&src);
    for id in ["good", "bad"] {
        ctx.argus()
            .profile(&profile)
            .args(["snapshot", "--code-id", id])
            .arg_path(&src)
            .run()
            .code(0);
    }
    let family = shared.join("common/code/verl");
    let manifest = family.join("bad/.argus/manifest.json");
    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(&manifest, "{").expect("corrupt");
    std::os::unix::fs::symlink(ctx.path("outside"), family.join("planted")).expect("plant");
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "list"])
        .run()
        .code(0)
        .stderr_has("verl/bad is unreadable")
        .stderr_has("corrupt manifest")
        .stderr_has("verl/planted is unreadable")
        .stderr_has("is a symbolic link");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("good") && !l.contains("UNREADABLE"))
    );
    for id in ["bad", "planted"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(id) && l.contains("UNREADABLE")),
            "{}",
            run.stdout
        );
    }
}

/// A bind mount made for a test, unmounted when dropped (the test failing too).
struct Mounted(PathBuf);

impl Mounted {
    /// `what` mounted again at `at`; None (with a note) where this process cannot mount.
    fn bind(what: &Path, at: &Path) -> Option<Mounted> {
        std::fs::create_dir_all(at).expect("mkdir");
        let status = Command::new("mount")
            .arg("--bind")
            .arg(what)
            .arg(at)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("note: cannot bind-mount here ({status:?}): that check is skipped");
            return None;
        }
        Some(Mounted(at.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The storage mounted a second time (a bind mount; the same export mounted twice): a
/// followed link to it, into it or to a directory holding it is refused, by identity.
#[test]
fn a_followed_link_to_another_mount_of_the_storage_is_refused() {
    let (ctx, shared, profile) = context("snapfollowbind");
    let src = ctx.path("src");
    sample_tree(&src);
    std::fs::create_dir_all(shared.join("user/code")).expect("mkdir");
    let bind = ctx.path("bind");
    let Some(_mounted) = Mounted::bind(ctx.dir.path(), &bind) else {
        return;
    };
    for (target, relation) in [
        (bind.join("shared"), "which is the shared storage"),
        (
            bind.join("shared/user/code"),
            "which is inside the shared storage",
        ),
        (bind.clone(), "which holds the shared storage"),
    ] {
        let link = src.join("pkg/data");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        ctx.argus()
            .profile(&profile)
            .args(["snapshot", "--follow-links"])
            .arg_path(&src)
            .run()
            .code(2)
            .stderr_has("symlink pkg/data resolves to")
            .stderr_has(relation);
        assert!(
            everything_under(&shared.join("common")).is_empty(),
            "nothing written: {:?}",
            everything_under(&shared.join("common"))
        );
    }
}

/// A link or a file planted at `common/code/<another name>` does not stop `verify` or
/// `rm` of a snapshot: it is passed over with a warning naming it.
#[test]
fn a_link_planted_beside_the_snapshots_does_not_stop_verify_or_rm() {
    let (ctx, shared, profile) = context("snapsibling");
    let src = ctx.path("src");
    sample_tree(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "s1"])
        .arg_path(&src)
        .run()
        .code(0);
    let code = shared.join("common/code");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::os::unix::fs::symlink(&outside, code.join("zz")).expect("plant");
    std::fs::write(code.join("stray"), "x").expect("plant");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "s1"])
        .run()
        .code(0)
        .stderr_has("intact")
        .stderr_has("zz");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "rm", "s1"])
        .run()
        .code(0)
        .stderr_has("zz");
    assert!(!code.join("verl/s1").exists());
}

/// Directories added to a snapshot, entries given to another owner, and a copy of a
/// snapshot under another id are all caught; Python's caches are not differences.
#[test]
fn verify_reports_added_directories_other_owners_and_copies() {
    let (ctx, shared, profile) = context("snapverifydirs");
    let src = ctx.path("src");
    sample_tree(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "d1"])
        .arg_path(&src)
        .run()
        .code(0);
    let dir = shared.join("common/code/verl/d1");
    write(&dir.join("pkg/__pycache__/x.cpython-311.pyc"), "bytecode");
    std::fs::create_dir_all(dir.join("empty")).expect("mkdir");
    std::fs::set_permissions(dir.join("empty"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    std::fs::create_dir(dir.join(".argus/d")).expect("mkdir");
    std::fs::set_permissions(
        dir.join(".argus/d"),
        std::fs::Permissions::from_mode(0o1777),
    )
    .expect("chmod");
    std::os::unix::fs::chown(dir.join("pkg/core/model.py"), Some(4321), None).expect("chown");
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot", "verify", "d1", "--json"])
        .run()
        .code(1)
        .json();
    assert_eq!(report["added"], serde_json::json!([".argus/d/", "empty/"]));
    assert_eq!(report["changed"], serde_json::json!(["pkg/core/model.py"]));

    // A copy under another id.
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&dir)
        .arg(shared.join("common/code/verl/evil"))
        .status()
        .expect("cp");
    assert!(copied.success());
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "list"])
        .run()
        .code(0)
        .stderr_has("its manifest names d1");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "verify", "evil"])
        .run()
        .code(2)
        .stderr_has("its manifest names d1");
}

/// A source inside the storage is refused, saying it is inside.
#[test]
fn a_source_inside_the_storage_is_refused_as_inside_it() {
    let (ctx, shared, profile) = context("snapinside");
    let src = ctx.path("src");
    sample_tree(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&src)
        .run()
        .code(0);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&shared.join("common"))
        .run()
        .code(2)
        .stderr_has("is inside the shared storage");
}
