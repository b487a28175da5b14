//! Profiles: every shipped file is valid; bad input gets one located error, exit code 2
//! (or 4 when Docker or the image cannot be reached), and nothing is created.

use std::path::Path;

use argus::config::LoadedProfile;

use crate::harness::{TestContext, free_port, test_profile};

#[test]
fn every_shipped_profile_parses() {
    let mut count = 0;
    for entry in std::fs::read_dir("profiles").expect("profiles/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            LoadedProfile::load(Some(&path)).unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
    }
    assert!(
        count >= 3,
        "expected local, h20-8gpu and multi-host profiles"
    );
}

#[test]
fn the_builtin_profile_is_profiles_local_yaml() {
    let builtin = LoadedProfile::load(None).expect("built-in");
    let file = LoadedProfile::load(Some(Path::new("profiles/local.yaml"))).expect("file");
    assert_eq!(
        format!("{:?}", builtin.profile),
        format!("{:?}", file.profile)
    );
}

fn bad_profile(test: &str, text: &str) -> (TestContext, std::path::PathBuf) {
    let ctx = TestContext::new(test);
    let path = ctx.write("bad.yaml", text);
    (ctx, path)
}

#[test]
fn malformed_yaml_is_a_located_usage_error() {
    let (ctx, path) = bad_profile("malformed", "name: x\nimage: [unclosed\nworkers: []\n");
    let run = ctx
        .argus()
        .profile(&path)
        .args(["up", "--dry-run"])
        .run()
        .code(2);
    assert!(
        run.stderr.contains(&format!("{}:", path.display())),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("error: "), "{}", run.stderr);
}

#[test]
fn unknown_key_names_file_line_column_and_valid_keys() {
    let text = "name: x\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\nworkers:\n  - name: gpu\n    count: 1\n    gpuz: 2\n";
    let (ctx, path) = bad_profile("unknown", text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(&format!(
            "{}:7:5: workers[0]: unknown field `gpuz`",
            path.display()
        ))
        .stderr_has("expected one of `name`, `count`, `host`, `hosts`, `gpus`");
}

#[test]
fn wrong_type_is_located() {
    let text = "name: x\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\nworkers:\n  - name: gpu\n    count: two\n";
    let (ctx, path) = bad_profile("wrongtype", text);
    ctx.argus()
        .profile(&path)
        .args(["status"])
        .run()
        .code(2)
        .stderr_has(&format!(
            "{}:6:12: workers[0].count: invalid type",
            path.display()
        ));
}

#[test]
fn overlapping_device_ids_point_at_the_second_use() {
    let text = "name: x\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\nworkers:\n  - name: a\n    count: 2\n    gpus: 2\n    gpu_mode: nvidia\n    device_ids: [[0, 1], [2, 1]]\n";
    let (ctx, path) = bad_profile("overlap", text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(&format!("{}:9:30: workers[0].device_ids[1][1]: GPU 1 is already used by workers[0].device_ids[0][1]", path.display()))
        .stderr_has("valid: each GPU id of a host at most once");
}

#[test]
fn count_below_one_and_missing_image_are_usage_errors() {
    let text =
        "name: x\nimage: ''\nshared: {host_path: /tmp/x}\nworkers:\n  - name: a\n    count: 1\n";
    let (ctx, path) = bad_profile("noimage", text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(":2:8: image: image must not be empty");
    let text =
        "name: x\nimage: i\nshared: {host_path: /tmp/x}\nworkers:\n  - name: a\n    count: 0\n";
    let path = ctx.write("zero.yaml", text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(":6:12: workers[0].count: count is 0, must be at least 1");
}

#[test]
fn unreachable_docker_is_exit_4_with_a_hint() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let name = ctx.cluster("c");
    let mut text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "");
    text.push_str("docker:\n  host: tcp://127.0.0.1:9\n");
    let path = ctx.write("p.yaml", &text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(4)
        .stderr_has("cannot reach the Docker Engine at tcp://127.0.0.1:9")
        .stderr_has("hint: is the Docker daemon running?");
    ctx.argus().profile(&path).args(["down"]).run().code(4);
    assert!(
        !ctx.path("shared").exists(),
        "nothing may be created before Docker answers"
    );
}

#[test]
fn absent_image_that_cannot_be_pulled_creates_nothing() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let name = ctx.cluster("c");
    let text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "")
        .replace("argus/ray:2.51.1", "argus-test-absent/none:0");
    let path = ctx.write("p.yaml", &text);
    ctx.argus()
        .profile(&path)
        .args(["up"])
        .run()
        .code(4)
        .stderr_has("image argus-test-absent/none:0 is not present and could not be pulled")
        .stderr_has("hint: build it here without a registry: argus image build --tag argus-test-absent/none:0");
    assert!(ctx.cluster_containers(&name).is_empty());
    assert!(
        crate::harness::docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("name={name}-net")
        ])
        .trim()
        .is_empty()
    );
}

/// Only `up` makes a token; any other command without one (no variable, no token file on
/// this machine) is a usage error that says where the token lives.
#[test]
fn token_auth_without_a_token_is_a_usage_error() {
    let ctx = TestContext::new("token");
    let text = "name: x\nimage: i\nshared: {host_path: /tmp/x}\nray: {auth: token, token_env: ARGUS_TEST_NO_SUCH_TOKEN}\nworkers:\n  - name: a\n    count: 1\n";
    let path = ctx.write("p.yaml", text);
    ctx.argus()
        .env("XDG_CONFIG_HOME", ctx.path("config"))
        .profile(&path)
        .args(["job", "list"])
        .run()
        .code(2)
        .stderr_has("ARGUS_TEST_NO_SUCH_TOKEN is not set and there is no token file")
        .stderr_has("argus/tokens/x.token")
        .stderr_has("run `argus up` on the machine that made the cluster");
    assert!(!ctx.path("config/argus/tokens/x.token").exists());
}

#[test]
fn secrets_never_appear_in_clear_in_a_printed_payload_or_an_error() {
    let mut ctx = TestContext::new("secrets");
    let name = ctx.cluster("c");
    let profile = ctx.write(
        "p.yaml",
        &test_profile(&name, &ctx.path("shared"), free_port(), 1, ""),
    );
    // A DB_PASS in env_vars, the same password copied into an override, and a secret
    // passed as an override value under a secret-named key.
    let job = ctx.write(
        "job.yaml",
        "workload: ppo\ncode_path: /mnt/shared/common/code/verl/x\nenv_vars: {DB_PASS: hunter2-db-pass}\noverrides:\n  data.url: 'postgres://u:hunter2-db-pass@db/x'\n  trainer.wandb_api_key: wandb-secret-0123\n",
    );
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run", "--no-check"])
        .arg_path(&job)
        .run()
        .code(0);
    for secret in ["hunter2-db-pass", "wandb-secret-0123"] {
        assert!(
            !run.stdout.contains(secret),
            "{secret} in clear:\n{}",
            run.stdout
        );
        assert!(
            !run.stderr.contains(secret),
            "{secret} in clear:\n{}",
            run.stderr
        );
    }
    assert!(
        run.stdout.contains("trainer.wandb_api_key=<redacted>"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("postgres://u:<redacted>@db/x"),
        "{}",
        run.stdout
    );
    assert!(nothing_under(&ctx.path("shared").join("jobs")));

    // An error that echoes a value: the environment's token is hidden there too.
    let bad = ctx.write(
        "bad.yaml",
        "workload: ppo\ncode_id: abc\nsubmission_id: 'tok-0123456789/x'\n",
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_argus"));
    command
        .arg("-p")
        .arg(&profile)
        .arg("submit")
        .arg(&bad)
        .env("ARGUS_TEST_API_TOKEN", "tok-0123456789")
        .env("NO_COLOR", "1");
    let out = command.output().expect("argus");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid submission id \"<redacted>/x\""),
        "{stderr}"
    );
}

/// Every regular file below `dir` (links not followed), with its text.
fn texts_under(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(texts_under(&path)),
            Ok(t) if t.is_file() => {
                let bytes = std::fs::read(&path).unwrap_or_default();
                out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
            }
            _ => {}
        }
    }
    out
}

/// A secret-named key inside a mapping-valued override (in the file, and through `--set`)
/// is a secret wherever argus shows or writes the override: `submit --dry-run`, its
/// `--json`, `export kuberay` and the run lock's `owner.json` on the shared storage.
#[test]
fn a_secret_inside_an_override_value_is_never_shown_recorded_or_exported() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    // A worker group's own env holds a secret too.
    let grouped = std::fs::read_to_string(&profile).expect("profile").replace(
        "  - name: gpu\n",
        "  - name: gpu\n    env: {GROUP_API_KEY: group-secret-99}\n",
    );
    assert!(grouped.contains("GROUP_API_KEY"), "{grouped}");
    let profile = ctx.write("p.yaml", &grouped);
    let job = ctx.write(
        "job.yaml",
        "workload: ppo\ncode_path: /mnt/shared/common/code/verl/x\noverrides:\n  +ray_kwargs.ray_init.runtime_env: {env_vars: {WANDB_API_KEY: wandb-deep-secret-1, PLAIN: plain-value-1}}\n",
    );
    let set = "overrides.+x.y={creds: {db_password: pw-raw-4567}}";
    let secrets = ["wandb-deep-secret-1", "pw-raw-4567", "group-secret-99"];
    let clear = |what: &str, text: &str| {
        for secret in secrets {
            assert!(!text.contains(secret), "{what}: {secret} in clear:\n{text}");
        }
    };
    for json in [false, true] {
        let mut args = vec!["submit", "--dry-run", "--no-check", "--set", set];
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
        clear("submit --dry-run", &run.stdout);
        clear("submit --dry-run", &run.stderr);
        // What is not secret is shown as it is.
        assert!(run.stdout.contains("plain-value-1"), "{}", run.stdout);
    }

    let out = ctx.path("rayjob.yaml");
    let export = ctx
        .argus()
        .profile(&profile)
        .args(["export", "kuberay"])
        .arg_path(&job)
        .args(["-o"])
        .arg_path(&out)
        .args([
            "--pvc",
            "argus-shared",
            "--image",
            "registry.example/argus/ray:2.51.1",
        ])
        .run()
        .code(2)
        .stderr_has("`WANDB_API_KEY` is a secret: it would be exported in clear")
        .stderr_has("`GROUP_API_KEY` is a secret: it would be exported in clear");
    assert!(!out.exists(), "nothing is written");
    clear("export", &export.stdout);
    clear("export", &export.stderr);
    clear("export", &std::fs::read_to_string(&out).unwrap_or_default());

    // `argus run` paused once it holds the run's lock: nothing on the shared storage holds
    // the secrets (the lock's owner.json records the command line, --set included).
    let tp = ctx.path("tp");
    let mut child = ctx
        .argus()
        .profile(&profile)
        .env("ARGUS_TESTPOINT", "run:up")
        .env("ARGUS_TESTPOINT_FILE", &tp)
        .args(["run", "--set", set])
        .arg_path(&job)
        .spawn_to(&ctx.path("run.out"), &ctx.path("run.err"));
    crate::harness::poll(
        "argus run to reach run:up",
        std::time::Duration::from_secs(120),
        || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "argus run ended ({status}) before run:up:\n{}",
                    std::fs::read_to_string(ctx.path("run.err")).unwrap_or_default()
                );
            }
            tp.exists().then_some(())
        },
    );
    let files = texts_under(&shared);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        files.iter().any(|(p, _)| p.ends_with("owner.json")),
        "the run holds its lock: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (path, text) in &files {
        clear(&path.display().to_string(), text);
    }
}

fn nothing_under(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

/// Which GPUs a worker gets is Slurm's or the device plugin's to say in their engines, so a
/// profile without device_ids loads and exports; on Docker hosts `up` must be told them,
/// and refuses before anything is dialled or created.
#[test]
fn real_gpus_without_device_ids_export_but_up_on_docker_hosts_refuses_them() {
    let ctx = TestContext::new("nodevids");
    let shared = ctx.path("shared");
    let path = ctx.write(
        "p.yaml",
        &format!(
            "name: nodevids\nimage: reg.example/argus/ray:2.51.1\nshared: {{host_path: {}}}\nworkers:\n  - {{name: gpu, count: 2, gpus: 4, gpu_mode: nvidia, cpus: 8, memory: 64g}}\n",
            shared.display()
        ),
    );
    let out = ctx.path("cluster.yaml");
    ctx.argus()
        .profile(&path)
        .args(["export", "kuberay", "--pvc", "argus-shared", "-o"])
        .arg_path(&out)
        .run()
        .code(0);
    let yaml = std::fs::read_to_string(&out).expect("exported");
    assert!(yaml.contains("nvidia.com/gpu: \"4\""), "{yaml}");
    ctx.argus()
        .profile(&path)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["up"])
        .run()
        .code(2)
        .stderr_has(
            "worker group gpu asks for 4 real GPU(s) a worker (nvidia) but names no device_ids",
        )
        .stderr_has("device_ids: a list of 2 lists of 4 GPU ids");
}
