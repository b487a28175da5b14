//! Images argus did not build (issue 40): Ray in the system Python as verl's own images have
//! it (`ray` in /usr/local/bin, no /opt/ray, no venv, no argus label), built once by
//! `tests/fixtures/system-python-image.sh` and reused; and images that lack what argus runs in
//! them, which `doctor` names and `up` refuses before it makes anything.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use crate::harness::{Profile, TestContext, docker, free_port};
use crate::hosts::run_script;

/// The tag of one of the fixture's images (`python`: no Ray; `ray`; `verl`), built at most
/// once per test binary (and reused across binaries: the fixture keeps an image whose recipe
/// did not change).
pub(crate) fn system_image(which: &str) -> String {
    static BUILT: OnceLock<Mutex<Vec<(String, String)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tag)) = built.iter().find(|(w, _)| w == which) {
        return tag.clone();
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/system-python-image.sh");
    let out = run_script(&script, &[which]);
    let tag = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    assert!(tag.starts_with("argus-test/system-"), "{tag:?}");
    built.push((which.to_string(), tag.clone()));
    tag
}

/// An image with no shell at all: one file, imported once (a few bytes) and then reused.
fn image_without_a_shell(ctx: &TestContext) -> String {
    let tag = "argus-test/no-shell:1".to_string();
    if !docker(&["image", "inspect", "--format", "{{.Id}}", &tag])
        .trim()
        .is_empty()
    {
        return tag;
    }
    let root = ctx.path("no-shell");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("README"), "an image with no /bin/sh\n").expect("write");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("tar --mtime=@0 --owner=0 --group=0 -C \"$1\" -cf - README | docker import - \"$2\" >/dev/null")
        .arg("sh")
        .arg(&root)
        .arg(&tag)
        .status()
        .expect("docker import");
    assert!(status.success(), "docker import of {tag}");
    tag
}

/// doctor's check of that name on the one host.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["hosts"][0]["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} check in {report:#}"))
}

/// Everything of this test's prefix on the engine: containers (probes too), networks, volumes.
fn made_by(prefix: &str) -> String {
    let filter = format!("name={prefix}");
    let label = "label=argus.cluster".to_string();
    [
        docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]),
        docker(&[
            "ps",
            "-a",
            "--filter",
            &label,
            "--format",
            "{{.Label \"argus.cluster\"}}",
        ])
        .lines()
        .filter(|l| l.starts_with(prefix))
        .collect::<Vec<_>>()
        .join("\n"),
        docker(&[
            "network",
            "ls",
            "--filter",
            &filter,
            "--format",
            "{{.Name}}",
        ]),
        docker(&["volume", "ls", "--filter", &filter, "--format", "{{.Name}}"]),
    ]
    .join("")
}

#[test]
fn an_image_without_ray_or_a_shell_or_token_auth_is_named_by_doctor_and_refused_by_up_before_anything_is_made()
 {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let shared = ctx.path("shared");
    for (image, missing) in [
        (system_image("python"), "no `ray` on its PATH"),
        (image_without_a_shell(&ctx), "no /bin/sh"),
    ] {
        let name = ctx.cluster("c");
        let profile = Profile::small(&name)
            .image(&image)
            .shared(&shared)
            .port(free_port())
            .write(&ctx, "p.yaml");

        let doctor = ctx
            .argus()
            .profile(&profile)
            .args(["--json", "doctor"])
            .run();
        assert_eq!(doctor.code, 1, "{}", doctor.stderr);
        let report = doctor.json();
        let tools = check(&report, "image_tools");
        assert_eq!(tools["status"], "fail", "{tools:#}");
        let seen = tools["seen"].as_str().unwrap_or_default();
        assert!(
            seen.starts_with(&format!("{image} has {missing}")),
            "{seen}"
        );
        assert!(!seen.contains("python3"), "only what is missing: {seen}");

        for _ in 0..2 {
            // The second time from the cache: the same answer.
            ctx.argus()
                .profile(&profile)
                .args(["up", "--timeout", "60"])
                .run()
                .code(2)
                .stderr_has(&format!(
                    "image {image} lacks what argus runs in it: {missing}"
                ))
                .stderr_has("nothing was created");
        }
        assert_eq!(made_by(&ctx.prefix), "", "up made something");
        assert!(!shared.exists(), "up wrote to the shared storage");
    }

    // Token auth on an image without argus's label: the Ray version read in the image
    // (2.51.1, before token auth) refuses it as argus's own tag would.
    let image = system_image("ray");
    let name = ctx.cluster("t");
    let profile = Profile::small(&name)
        .image(&image)
        .shared(&shared)
        .port(free_port())
        .ray("auth", "token")
        .write(&ctx, "token.yaml");
    ctx.argus()
        .env("XDG_CONFIG_HOME", ctx.path("config"))
        .profile(&profile)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(&format!(
            "image {image} has Ray 2.51.1, which has no token auth"
        ));
    assert_eq!(made_by(&ctx.prefix), "", "up made something");
}

/// A JobSpec for `argus submit`: the quickstart's code (snapshotted here) or a module that
/// does not exist.
fn jobspec(ctx: &TestContext, profile: &Path, module: &str) -> PathBuf {
    let code = ctx
        .argus()
        .profile(profile)
        .args([
            "--json",
            "snapshot",
            "profiles/jobs/quickstart/code",
            "--name",
            "quickstart",
        ])
        .run()
        .code(0)
        .json();
    let code_id = code["code_id"].as_str().expect("code_id");
    ctx.write(
        &format!("{module}.yaml"),
        &format!(
            "workload: custom\ncode_id: {code_id}\ntrain_file: gsm8k\nval_file: gsm8k\nentrypoint: python3 -m {module}\n"
        ),
    )
}

#[test]
fn a_cluster_on_a_system_python_image_runs_the_quickstart_and_diagnoses_a_failure() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let image = system_image("ray");
    let name = ctx.cluster("s");
    let shared = ctx.path("shared");
    let profile = Profile::small(&name)
        .image(&image)
        .shared(&shared)
        .port(free_port())
        .write(&ctx, "p.yaml");
    let argus = || ctx.argus().profile(&profile);

    let up = argus().args(["--json", "up"]).run().code(0).json();
    assert_eq!(up["image"], image.as_str());
    assert_eq!(up["nodes"].as_array().map(Vec::len), Some(2), "{up:#}");

    // What argus runs is where this image has it, not where argus's own image does.
    let doctor = argus().args(["--json", "doctor"]).run();
    let report = doctor.json();
    let tools = check(&report, "image_tools");
    assert_eq!(tools["status"], "ok", "{tools:#}");
    let seen = tools["seen"].as_str().unwrap_or_default();
    assert!(seen.starts_with("python3 /usr/bin/python3 (3.11"), "{seen}");
    assert!(
        seen.contains(
            "ray /usr/local/bin/ray (Ray 2.51.1 in /usr/local/lib/python3.11/dist-packages)"
        ),
        "{seen}"
    );
    let inside = docker(&[
        "exec",
        &format!("{name}-head"),
        "sh",
        "-c",
        "ls -d /opt/ray 2>&1; command -v ray",
    ]);
    assert!(
        inside.contains("No such file") && inside.contains("/usr/local/bin/ray"),
        "{inside}"
    );

    argus()
        .args([
            "prepare",
            "--dataset",
            "gsm8k",
            "--from",
            "profiles/jobs/quickstart/gsm8k-sample",
        ])
        .run()
        .code(0);
    let quickstart = jobspec(&ctx, &profile, "quickstart");
    let job = argus()
        .args(["--json", "submit", "--wait"])
        .arg_path(&quickstart)
        .run()
        .code(0)
        .json();
    assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
    let id = job["submission_id"].as_str().expect("submission_id");
    let log = std::fs::read_to_string(shared.join(format!("jobs/{id}/logs/driver.log")))
        .expect("driver.log");
    assert!(log.contains("quickstart OK"), "{log}");

    // A failure, diagnosed: every node's Ray logs listed and read by the image's python3.
    let broken = jobspec(&ctx, &profile, "argus_no_such_module");
    let failed = argus()
        .args(["--json", "submit", "--wait"])
        .arg_path(&broken)
        .run()
        .code(1)
        .json();
    assert_eq!(failed["status"], "FAILED", "{failed:#}");
    let id = failed["submission_id"].as_str().expect("submission_id");
    let diagnosis = argus()
        .args(["--json", "job", "diagnose", id])
        .run()
        .code(0)
        .json();
    let manifest = &diagnosis["manifest"];
    assert_eq!(
        manifest["not_collected"],
        serde_json::json!([]),
        "{manifest:#}"
    );
    let files: Vec<&str> = manifest["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for node in [format!("{name}-head"), format!("{name}-gpu-0")] {
        let raylet = format!("nodes/{node}/ray/raylet.out");
        assert!(
            files.contains(&raylet.as_str()),
            "{raylet} not in {files:?}"
        );
    }
    let bundle = PathBuf::from(diagnosis["bundle"].as_str().expect("bundle"));
    let driver = std::fs::read_to_string(bundle.join("driver.log")).expect("driver.log");
    assert!(
        driver.contains("No module named argus_no_such_module"),
        "{driver}"
    );

    argus().args(["down"]).run().code(0);
    assert!(ctx.cluster_containers(&name).is_empty());
    assert_eq!(made_by(&ctx.prefix), "", "down left something");
}

/// What a Slurm run's driver prints: the ALIVE Ray nodes, and where `ray` was imported from.
const SLURM_PROBE: &str = r#"
import ray
ray.init()
print("NODES", len([n for n in ray.nodes() if n["Alive"]]), "RAY AT", ray.__file__, flush=True)
"#;

#[test]
fn a_slurm_run_on_a_system_python_image_brings_its_nodes_up_and_runs_the_job() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let image = system_image("ray");
    let slurm = crate::slurm_hosts::Slurm::up(&ctx, &["a", "b"], 1);
    let name = ctx.cluster("sl");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("code")).expect("shared");
    std::fs::write(shared.join("code/probe.py"), SLURM_PROBE).expect("probe");
    let profile = Profile::small(&name)
        .image(&image)
        .shared(&shared)
        .worker("gpus", "1")
        .worker("gpu_mode", "simulated")
        .yaml("slurm: {nodes: 2, gpus_per_node: 1}\n")
        .write(&ctx, "slurm.yaml");
    let spec = ctx.write(
        "probe.yaml",
        "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 /mnt/shared/code/probe.py\n",
    );
    let run = crate::slurm::argus(&ctx, &slurm, &profile)
        .args(["slurm", "submit", "--follow"])
        .arg_path(&spec)
        .run()
        .code(0);
    let out = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        out.contains("NODES 3 RAY AT /usr/local/lib/python3.11/dist-packages/ray/__init__.py"),
        "{out}"
    );
    for host in ["a", "b"] {
        let left = slurm.hosts().docker_ok(
            host,
            &[
                "ps",
                "-a",
                "--filter",
                "label=argus.cluster",
                "--format",
                "{{.Names}}",
            ],
        );
        assert_eq!(left.trim(), "", "{host}: {out}");
    }
}
