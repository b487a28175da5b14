//! Hostile inputs found by a tester who did not write argus: each once broke a promise
//! (a path escaped its place, a special file hung argus, a record was skipped). No Docker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::TestContext;

fn context(test: &str) -> (TestContext, PathBuf, PathBuf) {
    let ctx = TestContext::new(test);
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &format!(
            "name: {}\nimage: argus/ray:2.51.1\nshared: {{host_path: {}}}\nray: {{dashboard_port: 9}}\nworkers: [{{name: gpu, count: 1}}]\n",
            ctx.prefix,
            shared.display()
        ),
    );
    (ctx, shared, profile)
}

/// Job ids become paths under jobs/ and segments of Ray's URLs: a traversal is exit 2
/// before any file is read or any request sent.
#[test]
fn job_ids_that_escape_jobs_are_refused_before_any_read() {
    let (ctx, shared, profile) = context("jobids");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(outside.join("logs")).expect("mkdir");
    std::fs::write(outside.join("logs/driver.log"), "OUTSIDE-SECRET").expect("write");
    std::fs::write(outside.join("job.json"), r#"{"status": "SUCCEEDED"}"#).expect("write");
    std::fs::create_dir_all(shared.join("jobs")).expect("mkdir");
    for args in [
        vec!["job", "logs", "../../outside"],
        vec!["job", "status", "../../outside"],
        vec!["job", "stop", "../../api/jobs/victim"],
        vec!["job", "wait", "a?b"],
    ] {
        let run = ctx.argus().profile(&profile).args(&args).run();
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(!run.stdout.contains("OUTSIDE-SECRET"), "{args:?}");
        assert!(run.stderr.contains("error:"), "{args:?}: {}", run.stderr);
    }
}

/// A FIFO, a socket or a device in a snapshot source is refused by name (exit 2), at once,
/// and nothing is written.
#[test]
fn special_files_in_a_snapshot_source_are_refused_without_hanging() {
    let (ctx, shared, profile) = context("snapfifo");
    for (name, make) in [
        ("fifo", &["mkfifo"][..]),
        ("dev", &["mknod", "-m", "600"][..]),
    ] {
        let src = ctx.path(&format!("src-{name}"));
        std::fs::create_dir_all(src.join("pkg")).expect("mkdir");
        std::fs::write(src.join("pkg/a.py"), "A = 1\n").expect("write");
        let special = src.join("pkg/special");
        let mut cmd = std::process::Command::new(make[0]);
        cmd.args(&make[1..]).arg(&special);
        if name == "dev" {
            cmd.args(["c", "1", "3"]);
        }
        assert!(cmd.status().expect("make special file").success());
        let mut child = ctx
            .argus()
            .profile(&profile)
            .args(["snapshot", "--code-id", name])
            .arg_path(&src)
            .spawn_to(
                &ctx.path(&format!("{name}.out")),
                &ctx.path(&format!("{name}.err")),
            );
        let status = crate::harness::poll("snapshot to end", Duration::from_secs(30), || {
            child.try_wait().ok().flatten()
        });
        let err = std::fs::read_to_string(ctx.path(&format!("{name}.err"))).unwrap_or_default();
        assert_eq!(status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("pkg/special is a"), "{name}: {err}");
        assert!(!shared.join("common/code/verl").join(name).exists());
    }
}

/// A source that contains the shared storage (a link to `/`, a parent directory) would
/// copy the snapshots into themselves: exit 2, nothing written.
#[test]
fn a_source_containing_the_shared_storage_is_refused() {
    let (ctx, shared, profile) = context("snaproot");
    std::fs::create_dir_all(shared.join("common/code")).expect("mkdir");
    let link = ctx.path("root-link");
    std::os::unix::fs::symlink("/", &link).expect("symlink");
    for src in [link.as_path(), ctx.dir.path()] {
        ctx.argus()
            .profile(&profile)
            .args(["snapshot"])
            .arg_path(src)
            .run()
            .code(2)
            .stderr_has("contains the shared storage");
    }
    assert_eq!(
        std::fs::read_dir(shared.join("common/code"))
            .expect("dir")
            .count(),
        0
    );
}

/// A job record that cannot be read may name the snapshot: `snapshot rm` refuses.
#[test]
fn snapshot_rm_refuses_while_a_record_is_unreadable() {
    let (ctx, shared, profile) = context("rmcorrupt");
    let src = ctx.path("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("a.py"), "").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "kept"])
        .arg_path(&src)
        .run()
        .code(0);
    let record = shared.join("jobs/job-x/job.json");
    std::fs::create_dir_all(record.parent().expect("parent")).expect("mkdir");
    std::fs::write(&record, "garbage{").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "rm", "kept"])
        .run()
        .code(2)
        .stderr_has("job-x (unreadable record)");
    assert!(shared.join("common/code/verl/kept").is_dir());
}

/// An image reference with blanks or shell characters is exit 2 at its line.
#[test]
fn a_malformed_image_reference_is_refused_at_its_line() {
    let (ctx, _shared, _profile) = context("image");
    let bad = ctx.write(
        "bad.yaml",
        "name: x\nimage: \"argus/ray:2.51.1; rm -rf /\"\nshared: {host_path: /tmp/x}\nworkers: [{name: gpu, count: 1}]\n",
    );
    ctx.argus()
        .profile(Path::new(&bad))
        .args(["up", "--dry-run"])
        .run()
        .code(2)
        .stderr_has("bad.yaml:2:8: image:");
}
