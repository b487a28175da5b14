//! What a hostile try of the verl inputs found: a module planted where argus runs Python,
//! release names that could share a cache entry, model paths and revisions that would
//! have been passed on unchecked. Offline: nothing here reaches a cluster or a registry.

use std::path::Path;

use crate::harness::{TestContext, test_profile};

fn profile(ctx: &mut TestContext) -> std::path::PathBuf {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    ctx.write("p.yaml", &test_profile(&name, &shared, 8265, 1, ""))
}

#[test]
fn a_pip_module_in_the_working_directory_is_never_run() {
    let mut ctx = TestContext::new("plantpip");
    let profile = profile(&mut ctx);
    let checkout = ctx.path("checkout");
    std::fs::create_dir_all(checkout.join("pip")).expect("pip dir");
    let marker = ctx.path("planted-ran");
    std::fs::write(checkout.join("pip/__init__.py"), "").expect("write");
    std::fs::write(
        checkout.join("pip/__main__.py"),
        format!(
            "open({:?}, 'w').write('ran')\n",
            marker.display().to_string()
        ),
    )
    .expect("write");
    let spec = ctx.write(
        "checkout/job.yaml",
        "workload: grpo\ncode: {source: 'pypi:nosuch-argus-test==1.0'}\n",
    );
    let run = ctx
        .argus()
        .profile(&profile)
        .env("XDG_CACHE_HOME", ctx.path("cache"))
        // pip fails on its own, without asking any index.
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", ctx.path("no-wheels"))
        .args(["export", "kuberay"])
        .arg_path(&spec)
        .args(["--pvc", "x", "--image", "y"])
        .in_dir(&checkout)
        .run();
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("nosuch-argus-test==1.0"),
        "{}",
        run.stderr
    );
    assert!(!marker.exists(), "the planted pip module ran");
}

#[test]
fn a_planted_link_in_the_release_cache_is_not_taken_for_the_release() {
    let mut ctx = TestContext::new("pypilink");
    let profile = profile(&mut ctx);
    let cache = ctx.path("cache/argus/pypi/linked==1.0");
    std::fs::create_dir_all(&cache).expect("cache");
    std::os::unix::fs::symlink("/etc", cache.join("src")).expect("link");
    let spec = ctx.write(
        "job.yaml",
        "workload: grpo\ncode: {source: 'pypi:linked==1.0'}\n",
    );
    let run = ctx
        .argus()
        .profile(&profile)
        .env("XDG_CACHE_HOME", ctx.path("cache"))
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", ctx.path("no-wheels"))
        .args(["export", "kuberay"])
        .arg_path(&spec)
        .args(["--pvc", "x", "--image", "y"])
        .run();
    // Not served from the planted link: pip is asked (and has nothing).
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("pip could not download linked==1.0"),
        "{}",
        run.stderr
    );
}

#[test]
fn model_paths_and_revisions_that_would_be_passed_on_wrong_are_refused() {
    let mut ctx = TestContext::new("modelrefs");
    let profile = profile(&mut ctx);
    for (model, says) in [
        (
            "/mnt/shared/common/../nothere",
            ".. would leave its directory",
        ),
        ("acme/tiny@v1", "verl would load acme/tiny at main"),
    ] {
        let spec = ctx.write(
            "j.yaml",
            &format!("workload: grpo\ncode_path: /mnt/shared/user/code\nmodel_id: {model:?}\n"),
        );
        ctx.argus()
            .profile(&profile)
            .args(["submit", "--dry-run", "--no-check"])
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has(says);
    }
    // A directory has no revisions: @REV with --model-from is refused, nothing written.
    ctx.argus()
        .profile(&profile)
        .args([
            "prepare",
            "--model",
            "acme/tiny@0123456789012345678901234567890123456789",
        ])
        .args(["--model-from"])
        .arg_path(Path::new("assets/verl/tiny-qwen2"))
        .run()
        .code(2)
        .stderr_has("leave out @");
    assert!(!ctx.path("shared/common/hf/hub/models--acme--tiny").exists());
}

/// A model directory is checked whole before anything is written: `prepare --model-from`
/// writes no blob when any file of it is refused (here the last one, a second hard link),
/// and `argus run` refuses what prepare would refuse (a hard link, a FIFO, a link, `@rev`)
/// before it creates the run (nothing under `runs/`, no cluster).
#[test]
fn a_model_directory_is_checked_whole_before_anything_is_written() {
    let mut ctx = TestContext::new("modelfromcheck");
    let profile = profile(&mut ctx);
    let shared = ctx.path("shared");
    let model = ctx.path("model");
    std::fs::create_dir_all(&model).expect("mkdir");
    std::fs::write(model.join("config.json"), "{}\n").expect("write");
    std::fs::write(model.join("a.json"), "{\"a\": 1}\n").expect("write");
    std::fs::write(ctx.path("elsewhere.bin"), "not the model's").expect("write");
    std::fs::hard_link(ctx.path("elsewhere.bin"), model.join("zz.bin")).expect("hard link");
    ctx.argus()
        .profile(&profile)
        .args(["prepare", "--model", "acme/tiny", "--model-from"])
        .arg_path(&model)
        .run()
        .code(2)
        .stderr_has("zz.bin has a second hard link");
    assert!(
        !shared.join("common/hf/hub/models--acme--tiny").exists(),
        "no blob of the files before the refused one"
    );

    let code = ctx.path("code");
    std::fs::create_dir_all(&code).expect("mkdir");
    std::fs::write(code.join("x.py"), "x = 1\n").expect("write");
    let run = |model_id: &str, says: &str| {
        let spec = ctx.write(
            "run.yaml",
            &format!(
                "workload: grpo\ncode: {{source: {}}}\nmodel_id: {model_id}\nmodel_from: {}\n",
                code.display(),
                model.display()
            ),
        );
        ctx.argus()
            .profile(&profile)
            .args(["run"])
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has(says);
        assert!(!shared.join("runs").exists(), "{says}: no run was created");
    };
    run("acme/tiny", "zz.bin has a second hard link");
    std::fs::remove_file(model.join("zz.bin")).expect("rm");
    std::os::unix::fs::symlink("/etc/passwd", model.join("zz.bin")).expect("link");
    run("acme/tiny", "zz.bin is not a regular file");
    std::fs::remove_file(model.join("zz.bin")).expect("rm");
    let status = std::process::Command::new("mkfifo")
        .arg(model.join("zz.bin"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    run("acme/tiny", "zz.bin is not a regular file");
    std::fs::remove_file(model.join("zz.bin")).expect("rm");
    run("acme/tiny@v1", "leave out @v1");
}

/// A PEP 503 simple index on 127.0.0.1 (`python3 -m http.server` over `dir`), stopped on
/// drop: it answers 404 for a project it does not have, as PyPI does.
struct LocalIndex {
    child: std::process::Child,
    url: String,
}

impl LocalIndex {
    fn serve(dir: &Path) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        // "Serving HTTP on 127.0.0.1 port N (...)": printed once it listens.
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its first line");
        let port = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        LocalIndex {
            child,
            url: format!("http://127.0.0.1:{port}/simple"),
        }
    }
}

impl Drop for LocalIndex {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `pypi:` name that is not a PEP 508 name is refused at its line before anything is
/// looked up (a warm cache entry of another spelling included); a release or project the
/// index does not have is the user's input (exit 2, named), not an unreachable index.
#[test]
fn pypi_pins_are_checked_and_a_missing_release_is_named() {
    let mut ctx = TestContext::new("pypipins");
    let profile = profile(&mut ctx);
    // A warm cache entry for six 1.16.0, which `six-` used to be taken for.
    ctx.write("cache/argus/pypi/six==1.16.0/src/six.py", "");
    let simple = ctx.path("index");
    ctx.write(
        "index/simple/six/index.html",
        "<html><body><a href=\"../../six-1.16.0-py2.py3-none-any.whl\">six-1.16.0-py2.py3-none-any.whl</a></body></html>\n",
    );
    let index = LocalIndex::serve(&simple);
    let url = index.url.clone();
    let export = |source: &str| {
        let spec = ctx.write(
            "job.yaml",
            &format!("workload: grpo\ncode: {{source: '{source}'}}\n"),
        );
        ctx.argus()
            .profile(&profile)
            .env("XDG_CACHE_HOME", ctx.path("cache"))
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_INDEX_URL", &url)
            .env("PIP_FIND_LINKS", ctx.path("no-wheels"))
            .env("PIP_RETRIES", "0")
            .args(["export", "kuberay"])
            .arg_path(&spec)
            .args(["--pvc", "x", "--image", "y"])
            .run()
    };
    for bad in ["pypi:six-==1.16.0", "pypi:six==1.16.", "pypi:.six==1.16.0"] {
        export(bad)
            .code(2)
            .stderr_has("job.yaml:2:16: code.source:")
            .stderr_has("PEP ");
    }
    export("pypi:six==99.0")
        .code(2)
        .stderr_has("the index has no wheel of six==99.0 (versions with a wheel there: 1.16.0)");
    export("pypi:nosuch-argus-test==1.0")
        .code(2)
        .stderr_has("the index has no project named nosuch-argus-test (it answered 404 for ");
    drop(index);
    // The index gone: that is the index's, exit 4.
    export("pypi:six==99.0")
        .code(4)
        .stderr_has("check that it reaches your index");
}
