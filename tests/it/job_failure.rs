//! A custom job's script and its failure: a relative script path is the code snapshot's
//! (the job runs in `jobs/<id>/work/`), one the snapshot lacks is refused before anything
//! is written; a driver that fails at once is reported with its own last lines, not only
//! Ray's generic message.

use std::path::{Path, PathBuf};

use crate::harness::{TestContext, free_port, test_profile};

/// A profile on the context's shared dir and a snapshot `scripts` holding `my_script.py`.
fn with_scripts(ctx: &mut TestContext, port: u16) -> (PathBuf, PathBuf) {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, port, 1, ""));
    let src = ctx.path("scripts-src");
    std::fs::create_dir_all(src.join("tools")).expect("mkdir");
    std::fs::write(
        src.join("my_script.py"),
        "import os, sys\nprint('hello from my_script', sys.argv[1:], 'in', os.getcwd())\n",
    )
    .expect("write");
    std::fs::write(src.join("tools/other.py"), "print('other')\n").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--name", "scripts", "--code-id", "scripts-1"])
        .arg_path(&src)
        .run()
        .code(0);
    (profile, shared)
}

fn custom(ctx: &TestContext, id: &str, entrypoint: &str) -> PathBuf {
    ctx.write(
        &format!("{id}.yaml"),
        &format!(
            "workload: custom\nsubmission_id: {id}\ncode_id: scripts-1\nentrypoint: {entrypoint}\n"
        ),
    )
}

const CODE: &str = "/mnt/shared/common/code/scripts/scripts-1";

#[test]
fn a_relative_script_is_the_snapshots_and_a_missing_one_is_refused() {
    let mut ctx = TestContext::new("relscript");
    let (profile, shared) = with_scripts(&mut ctx, free_port());
    let dry = |spec: &Path| {
        ctx.argus()
            .profile(&profile)
            .args(["submit", "--dry-run", "--json"])
            .arg_path(spec)
            .run()
    };
    let spec = custom(&ctx, "rel-1", "python3 my_script.py --n 3");
    let payload = dry(&spec).code(0).json();
    let entrypoint = payload["payload"]["entrypoint"]
        .as_str()
        .expect("entrypoint");
    assert!(
        entrypoint.ends_with(&format!(" && python3 {CODE}/my_script.py --n 3")),
        "{entrypoint}"
    );
    let spec = custom(&ctx, "rel-2", "python3 ./tools/other.py");
    let payload = dry(&spec).code(0).json();
    assert!(
        payload["payload"]["entrypoint"]
            .as_str()
            .expect("entrypoint")
            .ends_with(&format!(" && python3 {CODE}/tools/other.py")),
        "{payload}"
    );

    let spec = custom(&ctx, "rel-3", "python3 my_scirpt.py");
    for args in [&["submit", "--dry-run"][..], &["submit"]] {
        let run = ctx
            .argus()
            .profile(&profile)
            .args(args)
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has(&format!(
                "the entrypoint runs `my_scirpt.py`, which is not in the code snapshot {CODE}"
            ))
            .stderr_has("hint: a job runs in jobs/<id>/work/");
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    assert!(
        !shared.join("jobs/rel-3").exists(),
        "nothing is written for a refused job"
    );
}

/// On a real cluster: `python3 my_script.py` runs the snapshot's script (in the job's work
/// directory); a driver that cannot open its script fails, and `submit --wait` and `job
/// status` show the driver's own words.
#[test]
fn a_failed_driver_is_reported_with_its_last_lines() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let (profile, _) = with_scripts(&mut ctx, free_port());
    ctx.argus().profile(&profile).args(["up"]).run().code(0);

    let spec = custom(&ctx, "script-ok", "python3 my_script.py a b");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--wait"])
        .arg_path(&spec)
        .run()
        .code(0)
        .stderr_has("job script-ok SUCCEEDED");
    ctx.argus()
        .profile(&profile)
        .args(["job", "logs", "script-ok"])
        .run()
        .code(0)
        .stdout_has("hello from my_script ['a', 'b'] in /mnt/shared/jobs/script-ok/work");

    // --no-check lets the missing script through to the driver, which fails at once.
    let spec = custom(&ctx, "script-gone", "python3 does_not_exist.py");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--wait", "--no-check"])
        .arg_path(&spec)
        .run()
        .code(1)
        .stderr_has("job script-gone FAILED")
        .stderr_has("the driver's last lines:")
        .stderr_has(&format!(
            "python3: can't open file '{CODE}/does_not_exist.py'"
        ));
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "script-gone"])
        .run()
        .code(0)
        .stdout_has("FAILED")
        .stdout_has("the driver's last lines:");
    assert!(run.stdout.contains("can't open file"), "{}", run.stdout);
    let status = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "script-gone", "--json"])
        .run()
        .code(0)
        .json();
    let tail: Vec<&str> = status["driver_tail"]
        .as_array()
        .expect("driver_tail")
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(
        tail.iter().any(|l| l.contains("can't open file")),
        "{status:#}"
    );
    let ok = ctx
        .argus()
        .profile(&profile)
        .args(["job", "status", "script-ok", "--json"])
        .run()
        .code(0)
        .json();
    assert!(ok["driver_tail"].is_null(), "only a failed job has one");
    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}
