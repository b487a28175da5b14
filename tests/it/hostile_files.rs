//! Hostile files and values (issue 26): special files given as a profile or JobSpec, a
//! byte order mark, a NUL in an override, secrets that shell quoting changes, control
//! characters from YAML keys and records. No Docker, no Ray.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Run, TestContext, free_port, test_profile};

fn world(test: &str) -> (TestContext, PathBuf) {
    let mut ctx = TestContext::new(test);
    let name = ctx.cluster("c");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &ctx.path("shared"), free_port(), 1, ""),
    );
    (ctx, profile)
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
}

/// Runs argus with a deadline: a special file must never make it wait or read forever.
fn run_within(ctx: &TestContext, args: &[&Path], deadline: Duration) -> Run {
    let (out, err) = (ctx.path("out.txt"), ctx.path("err.txt"));
    let mut argus = ctx.argus();
    for a in args {
        argus = argus.arg_path(a);
    }
    let mut child = argus.spawn_to(&out, &err);
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().unwrap_or(-1);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "argus {args:?} still running after {deadline:?}: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code,
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    }
}

const JOB: &str = "workload: ppo\ncode_path: /mnt/shared/common/code/verl/x\n";

#[test]
fn a_fifo_or_a_device_as_profile_or_jobspec_is_refused_at_once() {
    let (ctx, profile) = world("specialfiles");
    let fifo = ctx.path("fifo.yaml");
    mkfifo(&fifo);
    let job = ctx.write("job.yaml", JOB);
    let p = Path::new("-p");
    let dry: [&Path; 3] = [
        Path::new("submit"),
        Path::new("--dry-run"),
        Path::new("--no-check"),
    ];
    for (args, says) in [
        (vec![p, Path::new("/dev/zero")], "character device"),
        (vec![p, fifo.as_path()], "FIFO"),
        (vec![p, profile.as_path()], "FIFO"),
    ] {
        let mut args = args;
        args.extend(dry);
        args.push(if args[1] == profile.as_path() {
            fifo.as_path()
        } else {
            job.as_path()
        });
        let run = run_within(&ctx, &args, Duration::from_secs(10));
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("a regular UTF-8 file of at most 1 MiB"),
            "{}",
            run.stderr
        );
        assert_eq!(run.stderr.matches("error:").count(), 1, "{}", run.stderr);
    }
}

#[test]
fn a_jobspec_with_a_byte_order_mark_is_read() {
    let (ctx, profile) = world("bom");
    let job = ctx.write("job.yaml", &format!("\u{feff}{JOB}"));
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&job)
        .run()
        .code(0);
}

#[test]
fn a_nul_in_an_override_is_refused_where_it_is_written() {
    let (ctx, profile) = world("nul");
    let job = ctx.write("job.yaml", &format!("{JOB}overrides: {{x.y: \"a\\0b\"}}\n"));
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&job)
        .run()
        .code(2)
        .stderr_has("job.yaml:3:18: overrides.x.y: contains a NUL byte");
}

#[test]
fn secret_overrides_that_quoting_changes_are_never_shown() {
    let (ctx, profile) = world("quotedsecret");
    // The value is a$b'c\d; a second one holds every character Hydra or the shell escapes.
    let job = ctx.write(
        "job.yaml",
        &format!(
            "{JOB}overrides:\n  x.api_key: \"a$b'c\\\\d\"\n  y.password: \"p w$`\\\"\\\\'!*?;&|<>(){{}}[]~#%,=:Q\"\n"
        ),
    );
    for json in [false, true] {
        let mut args = vec!["submit", "--dry-run", "--no-check"];
        if json {
            args.push("--json");
        }
        let run = ctx
            .argus()
            .profile(&profile)
            .args(&args)
            .arg_path(&job)
            .run()
            .code(0);
        let payload = if json {
            run.json()["payload"].clone()
        } else {
            serde_json::from_str(&run.stdout).expect("payload")
        };
        let entrypoint = payload["entrypoint"].as_str().expect("entrypoint");
        for text in [&run.stdout, &run.stderr, &entrypoint.to_string()] {
            for clear in ["a$b", "c\\d", "c\\\\d", "b\\'c", "p w", "~#%", "=:Q"] {
                assert!(!text.contains(clear), "{clear:?} in {text}");
            }
        }
        assert!(entrypoint.contains("x.api_key=<redacted>"), "{entrypoint}");
        assert!(entrypoint.contains("y.password=<redacted>"), "{entrypoint}");
    }
}

#[test]
fn control_characters_from_yaml_keys_never_reach_the_terminal_raw() {
    let (ctx, profile) = world("ctrlkeys");
    let job = ctx.write("job.yaml", &format!("{JOB}\"bad\\e[2Jkey\\u202e\": 1\n"));
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&job)
        .run()
        .code(2);
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
    assert!(!run.stderr.contains('\u{202e}'), "{:?}", run.stderr);
    assert!(run.stderr.contains("bad\\u{1b}[2Jkey"), "{}", run.stderr);
}

/// `--json` is JSON: a bidi override, a C1 control or a NEL in a string of a record or a
/// JobSpec reads back as itself through a JSON parser (serde_json, and Python's), and the
/// terminal still never gets it raw (JSON's own `\uXXXX` escapes, not `\u{..}`).
#[test]
fn json_output_with_bidi_and_c1_characters_is_valid_json() {
    let (ctx, profile) = world("jsonbidi");
    let odd = "evil\u{202e}txt.exe \u{85}nel \u{9b}31m c1 \u{2066}iso";
    let dir = ctx.path("shared/jobs/j-1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let record = serde_json::json!({"submission_id": "j-1", "workload": "ppo", "code_id": "c",
        "code_path": "/x", "entrypoint": "e", "cluster": "x", "dashboard": "http://127.0.0.1:9",
        "submitted_at": "t", "status": "FAILED", "message": odd});
    std::fs::write(dir.join("job.json"), record.to_string()).expect("write");
    let job = ctx.write(
        "job.yaml",
        // YAML's own escapes (a raw C1 control is not allowed in a YAML file).
        &format!(
            "{JOB}env_vars: {{NOTE: \"{}\"}}\n",
            odd.chars()
                .map(|c| if c.is_ascii() {
                    c.to_string()
                } else {
                    format!("\\u{:04x}", c as u32)
                })
                .collect::<String>()
        ),
    );
    let status = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "j-1", "--json"])
        .run();
    let dry = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check", "--json"])
        .arg_path(&job)
        .run()
        .code(0);
    for (what, out, want) in [
        ("job status", &status.stdout, "/record/message"),
        (
            "submit --dry-run",
            &dry.stdout,
            "/payload/runtime_env/env_vars/NOTE",
        ),
    ] {
        assert!(!out.contains("\\u{"), "{what}: text escapes in JSON: {out}");
        assert!(
            !out.chars()
                .any(|c| c != '\n' && argus::ui::acts_on_terminal(c)),
            "{what}: a raw control or bidi character: {out:?}"
        );
        let value: serde_json::Value =
            serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {out}"));
        assert_eq!(
            value.pointer(want).and_then(|v| v.as_str()),
            Some(odd),
            "{what}: {value:#}"
        );
        let python = std::process::Command::new("python3")
            .args([
                "-c",
                "import json,sys; v=json.load(sys.stdin); print(ascii(v))",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(out.as_bytes())?;
                child.wait_with_output()
            })
            .expect("python3");
        assert!(
            python.status.success(),
            "{what}: Python's json refused it: {out}"
        );
        assert!(
            String::from_utf8_lossy(&python.stdout).contains("\\u202etxt.exe"),
            "{what}: {}",
            String::from_utf8_lossy(&python.stdout)
        );
    }
}

/// A line break in text from outside that argus shows on one line (a record's message in
/// `job status`, a YAML key in an error, a file name in an error) cannot add a line: no
/// forged `status  SUCCEEDED` row, no made-up line of an error.
#[test]
fn line_breaks_in_others_text_add_no_line() {
    let (ctx, profile) = world("linebreaks");
    let forged = |text: &str| {
        text.lines()
            .filter(|l| l.trim_start().starts_with("status") && l.contains("SUCCEEDED"))
            .count()
    };
    let dir = ctx.path("shared/jobs/j-1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for brk in ["\n", "\r", "\u{2028}"] {
        let record = serde_json::json!({"submission_id": "j-1", "workload": "ppo", "code_id": "c",
            "code_path": "/x", "entrypoint": "e", "cluster": "x", "dashboard": "http://127.0.0.1:9",
            "submitted_at": "t", "status": "FAILED",
            "message": format!("boom{brk}status      SUCCEEDED")});
        std::fs::write(dir.join("job.json"), record.to_string()).expect("write");
        let run = ctx
            .argus()
            .profile(&profile)
            .args(["job", "status", "j-1"])
            .run();
        assert_eq!(forged(&run.stdout), 0, "{brk:?}: {}", run.stdout);
        assert!(
            run.stdout.contains("status") && run.stdout.contains("FAILED"),
            "{}",
            run.stdout
        );
    }

    // A YAML key (a profile's env) in an error.
    let text = std::fs::read_to_string(&profile).expect("profile");
    let bad = ctx.write(
        "bad.yaml",
        &format!("{text}env: {{\"A\\nstatus  SUCCEEDED\": x}}\n"),
    );
    let run = ctx
        .argus()
        .profile(&bad)
        .args(["up", "--dry-run"])
        .run()
        .code(2);
    assert_eq!(forged(&run.stderr), 0, "{}", run.stderr);
    assert!(run.stderr.contains("env.A\\u{a}status"), "{}", run.stderr);

    // A file name in an error: a FIFO in a tree to snapshot is refused by its name.
    let tree = ctx.path("tree");
    std::fs::create_dir_all(&tree).expect("mkdir");
    std::fs::write(tree.join("ok.py"), "x = 1\n").expect("write");
    mkfifo(&tree.join("f\nstatus  SUCCEEDED"));
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["snapshot"])
        .arg_path(&tree)
        .run();
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert_eq!(forged(&run.stderr), 0, "{}", run.stderr);
    assert!(run.stderr.contains("f\\u{a}status"), "{}", run.stderr);
}

/// Refused, never ignored: `submit` says where the fields it does not act on are written
/// (`restart:`, `model_from:`, `data_from:`), and a planted saved driver log (a link, a
/// FIFO, a hard link) is named in a failure bundle as refused, with why, not taken for a
/// log argus never saved.
#[test]
fn what_submit_and_diagnose_do_not_use_is_said() {
    let (ctx, profile) = world("notignored");
    let job = ctx.write(
        "job.yaml",
        &format!("{JOB}restart: {{max: 2}}\nmodel_id: acme/tiny\nmodel_from: /tmp\n"),
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&job)
        .run()
        .code(0)
        .stderr_has("job.yaml:3:10: restart: not applied by `argus submit`")
        .stderr_has("job.yaml:5:13: model_from: not used by `argus submit`");

    let dir = ctx.path("shared/jobs/j-1");
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    std::fs::write(ctx.path("shared/elsewhere.log"), "not the job's\n").expect("write");
    let record = serde_json::json!({"submission_id": "j-1", "workload": "ppo", "code_id": "c",
        "code_path": "/x", "entrypoint": "e", "cluster": "x", "dashboard": "http://127.0.0.1:9",
        "submitted_at": "2026-11-29T06:00:00Z", "status": "FAILED", "message": "m"});
    std::fs::write(dir.join("job.json"), record.to_string()).expect("write");
    let log = dir.join("logs/driver.log");
    let plants: [(&str, &dyn Fn()); 3] = [
        ("symbolic link", &|| {
            std::os::unix::fs::symlink("/etc/passwd", &log).expect("link")
        }),
        ("FIFO", &|| mkfifo(&log)),
        ("hard link", &|| {
            std::fs::hard_link(ctx.path("shared/elsewhere.log"), &log).expect("hard link")
        }),
    ];
    for (what, plant) in plants {
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_dir_all(dir.join("diagnostics"));
        plant();
        let report = ctx
            .argus()
            .profile(&profile)
            .args(["job", "diagnose", "j-1", "--json"])
            .run()
            .json();
        let missed = report.to_string();
        assert!(
            missed.contains("argus's saved driver log is refused, not read")
                && missed.contains("logs/driver.log"),
            "{what}: {missed}"
        );
        assert!(
            !missed.contains("argus saved no driver log"),
            "{what}: {missed}"
        );
    }
}

#[test]
fn control_characters_from_job_records_never_reach_the_terminal_raw() {
    let (ctx, profile) = world("ctrlrecords");
    let dir = ctx.path("shared/jobs/j-1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("job.json"),
        r#"{"submission_id": "j-1", "workload": "ppo\u001b[2J", "code_id": "c\u001b]0;title\u0007",
            "code_path": "/x", "entrypoint": "e", "cluster": "x", "dashboard": "http://127.0.0.1:9",
            "submitted_at": "t", "status": "FAILED", "message": "boom\u001b[31mred\r"}"#,
    )
    .expect("write");
    for args in [&["job", "status", "j-1"][..], &["job", "list"]] {
        let run = ctx.argus().profile(&profile).args(args).run();
        assert!(
            run.stdout.contains("ppo\\u{1b}[2J"),
            "{args:?}: {}",
            run.stdout
        );
        for text in [&run.stdout, &run.stderr] {
            assert!(!text.contains(['\x1b', '\x07', '\r']), "{args:?}: {text:?}");
        }
    }
}

#[test]
fn no_colour_when_stderr_is_not_a_terminal() {
    let (ctx, profile) = world("nocolour");
    let src = ctx.write("src/a.txt", "a\n");
    // NO_COLOR empty counts as unset (no-color.org): only the terminal test decides here.
    let run = ctx
        .argus()
        .env("NO_COLOR", "")
        .profile(&profile)
        .args(["-v", "snapshot"])
        .arg_path(src.parent().expect("dir"))
        .run()
        .code(0);
    assert!(run.stderr.contains("DEBUG"), "{}", run.stderr);
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
}
