//! The RayJob's job is the job `argus submit` sends: for every shipped profile and JobSpec
//! the exported `entrypoint` is the payload's, byte for byte, and the quickstart's runs
//! through a real shell in the real image, on the shared storage laid out as the job
//! expects, and does its work.

use std::path::{Path, PathBuf};
use std::process::Command;

use argus::export::kuberay::RayJob;
use serde_json::Value;

use crate::export::{IMAGE, PVC, shipped, stem};
use crate::harness::TestContext;

/// A shipped profile with its shared storage at `shared` (everything else as shipped).
fn on_shared(ctx: &TestContext, profile: &Path, shared: &Path) -> PathBuf {
    let text = std::fs::read_to_string(profile).expect("profile");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("host_path:"))
        .expect("a host_path line");
    let indent = &line[..line.len() - line.trim_start().len()];
    ctx.write(
        &format!("profiles/{}.yaml", stem(profile)),
        &text.replace(line, &format!("{indent}host_path: {}", shared.display())),
    )
}

/// The shared storage the shipped JobSpecs name: the verl snapshot `verl-snapshot-id`, the
/// quickstart's code (its code id returned), the cached model, the quickstart's datasets.
fn lay_out_shared(ctx: &TestContext, profile: &Path, shared: &Path) -> String {
    let verl = ctx.path("verl-src");
    std::fs::create_dir_all(verl.join("verl")).expect("mkdir");
    std::fs::write(verl.join("verl/__init__.py"), "").expect("write");
    ctx.argus()
        .profile(profile)
        .args([
            "snapshot",
            "--name",
            "verl",
            "--code-id",
            "verl-snapshot-id",
        ])
        .arg_path(&verl)
        .run()
        .code(0);
    let quickstart = ctx
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
    let model = shared.join("common/hf/hub/models--Qwen--Qwen2.5-0.5B-Instruct");
    let commit = "0123abcd0123abcd0123abcd0123abcd0123abcd";
    std::fs::create_dir_all(model.join("snapshots").join(commit)).expect("mkdir");
    std::fs::create_dir_all(model.join("refs")).expect("mkdir");
    std::fs::write(model.join("refs/main"), commit).expect("write");
    ctx.argus()
        .profile(profile)
        .args([
            "prepare",
            "--dataset",
            "gsm8k",
            "--from",
            "profiles/jobs/quickstart/gsm8k-sample",
        ])
        .run()
        .code(0);
    quickstart["code_id"].as_str().expect("code_id").to_string()
}

/// A shipped JobSpec as `argus submit` takes it: a submission id (the export would derive
/// one, submit would generate another) and, for a `code.source`, the snapshot `argus run`
/// would make of it (`argus submit` refuses a source); `data_from` and `model_from` are
/// `argus run`'s.
fn submittable(ctx: &TestContext, job: &Path, id: &str, quickstart_code: &str) -> PathBuf {
    let text = std::fs::read_to_string(job).expect("jobspec");
    let mut out = format!("submission_id: {id}\n");
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("code:") {
            in_code = true;
            continue;
        }
        if in_code && line.starts_with("  ") {
            if let Some(name) = line.trim().strip_prefix("name:") {
                let name = name.split('#').next().unwrap_or_default().trim();
                let code_id = match name {
                    "quickstart" => quickstart_code,
                    _ => "verl-snapshot-id",
                };
                out.push_str(&format!("code_id: {name}/{code_id}\n"));
            }
            continue;
        }
        in_code = false;
        if line.starts_with("data_from:") || line.starts_with("model_from:") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    ctx.write(&format!("jobs/{}.yaml", stem(job)), &out)
}

fn try_export(ctx: &TestContext, profile: &Path, job: &Path) -> Result<RayJob, String> {
    let run = ctx
        .argus()
        .profile(profile)
        .args(["export", "kuberay"])
        .arg_path(job)
        .args(["--pvc", PVC, "--image", IMAGE])
        .run();
    match run.code {
        0 => Ok(serde_yaml::from_str(&run.stdout).expect("a RayJob")),
        _ => Err(run.stderr),
    }
}

#[track_caller]
fn export(ctx: &TestContext, profile: &Path, job: &Path) -> RayJob {
    try_export(ctx, profile, job).unwrap_or_else(|stderr| panic!("export refused:\n{stderr}"))
}

fn dry_run(ctx: &TestContext, profile: &Path, job: &Path) -> Value {
    ctx.argus()
        .profile(profile)
        .args(["submit", "--dry-run", "--json"])
        .arg_path(job)
        .run()
        .code(0)
        .json()
}

#[test]
fn every_shipped_jobspec_exports_the_entrypoint_submit_sends() {
    let ctx = TestContext::new("exportentry");
    let shared = ctx.path("shared");
    let profiles: Vec<PathBuf> = shipped("profiles")
        .iter()
        .map(|p| on_shared(&ctx, p, &shared))
        .collect();
    let quickstart_code = lay_out_shared(&ctx, &profiles[0], &shared);
    let mut compared = 0;
    for profile in &profiles {
        for job in shipped("profiles/jobs") {
            let id = format!("cmp-{}-{}", stem(profile), stem(&job));
            let spec = submittable(&ctx, &job, &id, &quickstart_code);
            let submitted = dry_run(&ctx, profile, &spec);
            let payload = &submitted["payload"];
            let exported = export(&ctx, profile, &spec);
            let what = format!("{} x {}", stem(profile), stem(&job));
            assert_eq!(
                exported.spec.entrypoint,
                payload["entrypoint"].as_str().expect("entrypoint"),
                "{what}: the RayJob runs the string submit sends"
            );
            assert_eq!(exported.spec.job_id, id, "{what}");
            let runtime_env: Value =
                serde_json::from_str(&exported.spec.runtime_env_yaml).expect("JSON is YAML");
            assert_eq!(runtime_env, payload["runtime_env"], "{what}");
            assert_eq!(exported.spec.submission_mode, "HTTPMode", "{what}");

            // The JobSpec as shipped (a code.source hashed, no submission id): the same
            // entrypoint but for the id the export derives. (A source the export cannot
            // hash here, such as a PyPI release, is refused naming it: not compared.)
            match try_export(&ctx, profile, &job) {
                Ok(as_shipped) => assert_eq!(
                    as_shipped
                        .spec
                        .entrypoint
                        .replace(&as_shipped.spec.job_id, "ID"),
                    exported.spec.entrypoint.replace(&id, "ID"),
                    "{what}: as shipped"
                ),
                Err(stderr) => assert!(stderr.contains("code.source: "), "{what}: {stderr}"),
            }
            compared += 1;
        }
    }
    assert_eq!(
        compared,
        profiles.len() * shipped("profiles/jobs").len(),
        "every shipped profile x every shipped JobSpec"
    );
    assert!(compared >= 3 * 4, "{compared}");
}

/// Values the shell reads as written, and the command as a whole: what the submitter of
/// the old export refused or re-quoted is carried as it is.
#[test]
fn shell_syntax_and_dollars_are_carried_as_submit_sends_them() {
    let ctx = TestContext::new("exportshell");
    let profile = ctx.write(
        "p.yaml",
        "name: r\nimage: reg.example/ray:2.51.1\nshared: {nfs: {server: n, export: /e}}\nworkers: [{name: w, count: 1, cpus: 1, memory: 1g}]\n",
    );
    let job = ctx.write(
        "j.yaml",
        "workload: custom\nsubmission_id: sh1\ncode_id: x\nentrypoint: cd /tmp && echo \"$HOME\" | tr a-z A-Z\nenv_vars: {DATA: '$HOME/x'}\n",
    );
    let exported = export(&ctx, &profile, &job);
    assert!(
        exported
            .spec
            .entrypoint
            .ends_with(" && cd /tmp && echo \"$HOME\" | tr a-z A-Z"),
        "{}",
        exported.spec.entrypoint
    );
    let runtime_env: Value = serde_json::from_str(&exported.spec.runtime_env_yaml).expect("JSON");
    assert_eq!(runtime_env["env_vars"]["DATA"], "$HOME/x");
}

/// The quickstart's exported entrypoint, run as Ray's job supervisor runs one (`sh -c`),
/// in the real image with a real Ray node, the shared storage mounted where the pods mount
/// it and the RayJob's runtime env: it makes its working directory and does its work.
#[test]
fn the_quickstart_entrypoint_runs_through_a_shell_in_the_image() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let shared = ctx.path("shared");
    let profile = on_shared(&ctx, Path::new("profiles/local.yaml"), &shared);
    let code_id = lay_out_shared(&ctx, &profile, &shared);
    let job = export(&ctx, &profile, Path::new("profiles/jobs/quickstart.yaml"));
    let entrypoint = &job.spec.entrypoint;
    assert!(
        entrypoint.ends_with(" && python3 -m quickstart"),
        "{entrypoint}"
    );
    let runtime_env: Value = serde_json::from_str(&job.spec.runtime_env_yaml).expect("JSON");
    assert_eq!(
        runtime_env["env_vars"]["ARGUS_CODE_PATH"],
        format!("/mnt/shared/common/code/quickstart/{code_id}").as_str()
    );

    let name = ctx.container("qs");
    let mut docker = Command::new("docker");
    docker.args([
        "run",
        "--rm",
        "--name",
        &name,
        "--shm-size",
        "512m",
        "-v",
        &format!("{}:/mnt/shared", shared.display()),
    ]);
    for (key, value) in runtime_env["env_vars"].as_object().expect("env_vars") {
        // Ray expands `${VAR}` from the node's environment; the image sets no PYTHONPATH.
        let value = value
            .as_str()
            .expect("string")
            .replace(":${PYTHONPATH}", "");
        assert!(!value.contains('$'), "{key}={value}");
        docker.args(["-e", &format!("{key}={value}")]);
    }
    docker.args([
        "-e",
        &format!("ENTRYPOINT={entrypoint}"),
        "-e",
        "RAY_ADDRESS=auto",
        "argus/ray:2.51.1",
        "sh",
        "-c",
        // A one-node Ray with the simulated GPUs the quickstart's task asks for; then the
        // entrypoint through a shell, as Ray's job supervisor runs it.
        "ray start --head --num-cpus=2 --num-gpus=2 --object-store-memory=100000000 \
         --disable-usage-stats >/tmp/ray-start.log 2>&1 || { cat /tmp/ray-start.log; exit 90; }; \
         cd / && sh -c \"$ENTRYPOINT\"",
    ]);
    let out = docker.output().expect("docker run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for line in [
        "code marker: argus-quickstart-v1",
        "train rows: 64, test rows: 16",
        "first prompt: ",
        "cluster GPUs: 2; GPU task on ",
        "16/16 answers well-formed",
        "quickstart OK",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}\n{stderr}");
    }
    assert!(
        shared
            .join(format!("jobs/{}/work", job.spec.job_id))
            .is_dir(),
        "the job made its working directory on the shared storage"
    );
}
