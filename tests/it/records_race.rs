//! `jobs/<id>/` on a storage others write into, raced (issue: argus checked paths one
//! component at a time and then used them by name). argus holds each directory open and
//! works below the handle, so a directory swapped for a link while it is paused at a test
//! point leads nowhere: a submission lands in the job directory it staged, `job logs`
//! reads the job it opened. And `job logs` shows a log's control sequences as escapes,
//! never acts them out on the terminal. Only the submission needs Docker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Run, TestContext, free_port, poll, test_profile};

/// A profile whose cluster is not running and whose shared storage is `<tmp>/shared`, and
/// a directory outside it.
fn world(test: &str) -> (TestContext, PathBuf, PathBuf, PathBuf) {
    let mut ctx = TestContext::new(test);
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&shared).expect("shared");
    std::fs::create_dir_all(&outside).expect("outside");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    (ctx, profile, shared, outside)
}

/// A finished job's record under `root/jobs/<id>/` with this driver log.
fn saved_job(root: &Path, id: &str, log: &[u8]) {
    let dir = root.join("jobs").join(id);
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    std::fs::write(dir.join("logs/driver.log"), log).expect("log");
    let record = serde_json::json!({
        "submission_id": id, "workload": "custom", "code_path": "/mnt/shared/user/code",
        "entrypoint": "python3 t.py", "cluster": "gone", "dashboard": "",
        "submitted_at": "2026-01-01T00:00:00Z", "status": "SUCCEEDED",
    });
    std::fs::write(dir.join("job.json"), record.to_string()).expect("record");
}

/// Every path below `dir` (links not followed), sorted.
fn names_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            if entry.file_type().expect("type").is_dir() {
                todo.push(entry.path());
            }
            out.push(entry.path().strip_prefix(dir).expect("below").to_path_buf());
        }
    }
    out.sort();
    out
}

fn job_logs(ctx: &TestContext, profile: &Path, id: &str) -> Run {
    ctx.argus().profile(profile).args(["job", "logs", id]).run()
}

#[test]
fn job_logs_drops_colours_and_shows_other_control_sequences_as_escapes() {
    let (ctx, profile, shared, _outside) = world("logsesc");
    let log = "\x1b[36m(TaskRunner pid=1)\x1b[0m step:1\r\nbar 50%\rbar 100%\n\x1b[2Jcleared\n\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\nc1 \u{9b}31mred\nname \u{202e}txt.exe\n";
    saved_job(&shared, "j-esc", log.as_bytes());
    let run = job_logs(&ctx, &profile, "j-esc").code(0);
    assert_eq!(
        run.stdout,
        "(TaskRunner pid=1) step:1\nbar 50%\nbar 100%\n\\u{1b}[2Jcleared\n\\u{1b}]8;;http://evil.example\\u{1b}\\click\\u{1b}]8;;\\u{1b}\\\nc1 \\u{9b}31mred\nname \\u{202e}txt.exe\n"
    );
    assert!(
        !run.stdout.contains(['\x1b', '\u{9b}', '\u{202e}']),
        "{:?}",
        run.stdout
    );
}

#[test]
fn job_logs_refuses_a_driver_log_with_a_second_hard_link() {
    let (ctx, profile, shared, outside) = world("logslink");
    saved_job(&shared, "j-hl", b"mine\n");
    // Someone's file, hard-linked in where argus reads the driver log.
    let theirs = outside.join("theirs.log");
    std::fs::write(&theirs, "SECRET-OUTSIDE\n").expect("theirs");
    let log = shared.join("jobs/j-hl/logs/driver.log");
    std::fs::remove_file(&log).expect("rm");
    std::fs::hard_link(&theirs, &log).expect("hard link");
    let run = job_logs(&ctx, &profile, "j-hl").code(2);
    assert!(
        run.stderr.contains(&log.display().to_string())
            && run.stderr.contains("has a second hard link"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("SECRET"), "{}", run.stdout);
}

/// `job logs` paused once it holds `jobs/<id>/`: `jobs/` swapped for a link to a look-alike
/// outside, then (second run) the job's `logs/` swapped. The first still reads the job it
/// opened; the second is refused. Nothing outside is ever shown.
#[test]
fn job_logs_reads_the_job_it_opened_whatever_is_swapped_meanwhile() {
    let (ctx, profile, shared, outside) = world("logsrace");
    saved_job(&shared, "j-1", b"the real log\n");
    saved_job(&outside, "j-1", b"SECRET-OUTSIDE\n");
    let paused = |name: &str| {
        let tp = ctx.path(&format!("{name}.tp"));
        let (out, err) = (
            ctx.path(&format!("{name}.out")),
            ctx.path(&format!("{name}.err")),
        );
        let child = ctx
            .argus()
            .profile(&profile)
            .env("ARGUS_TESTPOINT", "saved-log:job-opened")
            .env("ARGUS_TESTPOINT_FILE", &tp)
            .args(["job", "logs", "j-1"])
            .spawn_to(&out, &err);
        poll(
            "job logs to hold the job's directory",
            Duration::from_secs(60),
            || tp.exists().then_some(()),
        );
        (child, tp, out, err)
    };
    let finish = |(mut child, tp, out, err): (std::process::Child, PathBuf, PathBuf, PathBuf)| {
        std::fs::remove_file(&tp).expect("release");
        let status = child.wait().expect("wait");
        Run {
            code: status.code().unwrap_or(-1),
            stdout: std::fs::read_to_string(out).expect("stdout"),
            stderr: std::fs::read_to_string(err).expect("stderr"),
        }
    };

    let held = paused("jobs");
    let moved = ctx.path("moved-jobs");
    std::fs::rename(shared.join("jobs"), &moved).expect("move jobs");
    std::os::unix::fs::symlink(outside.join("jobs"), shared.join("jobs")).expect("link");
    let run = finish(held).code(0);
    assert_eq!(run.stdout, "the real log\n", "{}", run.stderr);
    std::fs::remove_file(shared.join("jobs")).expect("unlink");
    std::fs::rename(&moved, shared.join("jobs")).expect("restore");

    let held = paused("logs");
    let logs = shared.join("jobs/j-1/logs");
    std::fs::rename(&logs, ctx.path("moved-logs")).expect("move logs");
    std::os::unix::fs::symlink(outside.join("jobs/j-1/logs"), &logs).expect("link");
    let run = finish(held).code(2);
    assert!(
        run.stderr.contains(&logs.display().to_string())
            && run.stderr.contains("is a symbolic link"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("SECRET"), "{}", run.stdout);
}

/// A submission paused after Ray took the job and before its records are published:
/// `jobs/` swapped for a link to a directory outside that mirrors the staged layout. The
/// job is published, and its record and logs written, in the `jobs/` it was staged in
/// (now moved); nothing is written or renamed outside.
#[test]
fn a_submission_lands_in_the_jobs_directory_it_staged_whatever_is_swapped_meanwhile() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    ctx.argus().profile(&profile).args(["up"]).run().code(0);
    let src = ctx.path("code");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("marker.py"), "MARKER = 'race'\n").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "codeR"])
        .arg_path(&src)
        .run()
        .code(0);
    let spec = ctx.write(
        "race.yaml",
        "workload: custom\nsubmission_id: job-race\ncode_id: codeR\nentrypoint: echo raced\n",
    );
    let tp = ctx.path("submit.tp");
    let (out, err) = (ctx.path("submit.out"), ctx.path("submit.err"));
    let mut child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "submit:posted")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["submit"])
        .arg_path(&spec)
        .spawn_to(&out, &err);
    poll("the job to be posted", Duration::from_secs(120), || {
        tp.exists().then_some(())
    });
    let staged: Vec<String> = crate::harness::entry_names(&shared.join("jobs"))
        .into_iter()
        .filter(|n| n.starts_with(".tmp-job-race"))
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    let moved = ctx.path("moved-jobs");
    std::fs::rename(shared.join("jobs"), &moved).expect("move jobs");
    for dir in [&staged[0], "job-race"] {
        for sub in ["config", "logs", "debug"] {
            std::fs::create_dir_all(outside.join(dir).join(sub)).expect("mirror");
        }
    }
    let mirrored = names_below(&outside);
    std::os::unix::fs::symlink(&outside, shared.join("jobs")).expect("link");
    std::fs::remove_file(&tp).expect("release");
    let code = child.wait().expect("wait").code();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(names_below(&outside), mirrored, "nothing written outside");
    for file in [
        "job.json",
        "config/jobspec.yaml",
        "config/submit_payload.json",
        "logs/submit.out",
    ] {
        assert!(moved.join("job-race").join(file).is_file(), "{file}");
    }
    assert!(
        !crate::harness::entry_names(&moved)
            .iter()
            .any(|n| n.starts_with(".tmp-")),
        "published under its id"
    );
    std::fs::remove_file(shared.join("jobs")).expect("unlink");
    std::fs::rename(&moved, shared.join("jobs")).expect("restore");
    ctx.argus()
        .profile(&profile)
        .args(["job", "wait", "job-race"])
        .run()
        .code(0);
}
