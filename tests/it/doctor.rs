//! `argus doctor`, on the real engine and on emulated hosts (`crate::hosts`): nothing found
//! on healthy profiles, within its time bound; each injected fault named by its check with
//! its cause; an engine that does not answer is exit 4; and `up`'s preflight refusing in
//! its first seconds what would fail later.
//!
//! A skewed clock is faked where doctor reads it, the engine's `/info` (`skewed_clock`): no
//! emulated host can have a clock of its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{IMAGE, Profile, TestContext, free_port};
use crate::hosts::{Hosts, Options};

/// The whole doctor must answer within this.
const BOUND: Duration = Duration::from_secs(10);

/// `argus --json doctor [args]`: the report, the exit code, how long it took. A probe past
/// its bound on a machine the rest of the suite loads is reported unknown ("did not end
/// within", "no answer within"): doctor's contract on a slow host, which no test here is
/// about. Only then is doctor run again (3 times at most).
fn doctor(
    argus: impl Fn() -> crate::harness::Argus,
    args: &[&str],
) -> (serde_json::Value, i32, Duration) {
    let past_bound = |c: &serde_json::Value| {
        c["status"] == "unknown"
            && c["seen"]
                .as_str()
                .is_some_and(|s| s.contains("did not end within") || s.contains("no answer within"))
    };
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        let run = argus().args(["--json", "doctor"]).args(args).run();
        let took = started.elapsed();
        let report = run.json();
        assert!(
            took < BOUND,
            "doctor took {took:?}\n{report:#}\n{}",
            run.stderr
        );
        let slow = report["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|h| h["checks"].as_array().into_iter().flatten())
            .any(past_bound);
        if !slow || attempt == 3 {
            return (report, run.code, took);
        }
        eprintln!("doctor, attempt {attempt}: a probe past its bound (a loaded machine)");
        attempt += 1;
    }
}

/// Every check of the report: (host, name, status).
fn checks(report: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for host in report["hosts"].as_array().into_iter().flatten() {
        for c in host["checks"].as_array().into_iter().flatten() {
            out.push((
                host["host"].as_str().unwrap_or_default().to_string(),
                c["name"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The check `name` of `host`.
#[track_caller]
fn check<'a>(report: &'a serde_json::Value, host: &str, name: &str) -> &'a serde_json::Value {
    report["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["host"] == host)
        .flat_map(|h| h["checks"].as_array().into_iter().flatten())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} on {host}: {report:#}"))
}

/// Checks that are not ok.
fn findings(report: &serde_json::Value) -> Vec<(String, String, String)> {
    checks(report)
        .into_iter()
        .filter(|(_, _, status)| status != "ok")
        .collect()
}

/// A model in the HF cache layout under `shared`: `files` linked to blobs (a missing blob
/// for each name in `dangling`).
fn cache_model(shared: &Path, repo: &str, files: &[&str], dangling: &[&str]) {
    let dir = shared.join(format!("common/hf/hub/models--{}", repo.replace('/', "--")));
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snapshot = dir.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).expect("snapshot dir");
    std::fs::create_dir_all(dir.join("blobs")).expect("blobs");
    std::fs::create_dir_all(dir.join("refs")).expect("refs");
    std::fs::write(dir.join("refs/main"), commit).expect("ref");
    for (i, file) in files.iter().enumerate() {
        let etag = format!("{:064x}", i + 1);
        if !dangling.contains(file) {
            std::fs::write(dir.join("blobs").join(&etag), file.as_bytes()).expect("blob");
        }
        std::os::unix::fs::symlink(format!("../../blobs/{etag}"), snapshot.join(file))
            .expect("link");
    }
}

/// On this machine's engine: the built-in profile is found healthy (every check ok) within
/// the bound; a small `/dev/shm`, a JobSpec's model missing or incomplete in the cache, its
/// dataset not prepared, and an engine that does not answer are each named; `up` refuses NVIDIA workers on an engine
/// without NVIDIA's runtime in its first seconds, creating nothing.
#[test]
fn doctor_finds_nothing_on_the_builtin_profile_and_names_each_fault() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    // The built-in profile as shipped (its image built), with this test's name, storage
    // (made, as `up` or `prepare` would) and dashboard port.
    crate::verl::ensure_verl_image();
    let (local, shared) = crate::verl::builtin_profile(&mut ctx, "");
    std::fs::create_dir_all(&shared).expect("shared");
    let builtin = || ctx.argus().profile(&local);
    let (report, code, took) = doctor(builtin, &[]);
    eprintln!("doctor on the built-in profile: {took:?}");
    assert_eq!(findings(&report), [], "{report:#}");
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["status"], "ok");
    let names: Vec<String> = checks(&report).into_iter().map(|c| c.1).collect();
    for name in [
        "engine",
        "clock",
        "image",
        "image_tools",
        "shm",
        "memlock",
        "disk_shared",
        "disk_engine",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} checked: {names:?}");
    }

    // /dev/shm too small: 64 MiB for a worker whose object store is Ray's default (30% of
    // its 2 GiB): Ray would put it in /tmp.
    let small = Profile::new(&ctx.cluster("shm"))
        .shared(&shared)
        .port(free_port())
        .head("shm_size", "1g")
        .head("object_store_memory", "256m")
        .worker("memory", "2g")
        .worker("shm_size", "64m")
        .write(&ctx, "small-shm.yaml");
    let (report, code, _) = doctor(|| ctx.argus().profile(&small), &[]);
    let shm = check(&report, "local", "shm");
    assert_eq!(shm["status"], "warn", "{report:#}");
    assert!(
        shm["why"].as_str().unwrap_or_default().contains(
            "-gpu-0's object store (614.40 MiB) does not fit in its /dev/shm (64.00 MiB)"
        ),
        "{shm:#}"
    );
    assert!(
        shm["fix"].as_str().unwrap_or_default().contains("shm_size"),
        "{shm:#}"
    );
    assert_eq!(code, 0, "a warning is not a failure: {report:#}");

    // A JobSpec's model: complete, incomplete (a blob missing), absent.
    cache_model(
        &shared,
        "acme/whole",
        &["config.json", "model.safetensors"],
        &[],
    );
    cache_model(
        &shared,
        "acme/torn",
        &["config.json", "model.safetensors"],
        &["model.safetensors"],
    );
    let profile = Profile::small(&ctx.cluster("job"))
        .shared(&shared)
        .port(free_port())
        .write(&ctx, "job-profile.yaml");
    let job = |model: &str| {
        ctx.write(
            &format!("{}.yaml", model.replace('/', "-")),
            &format!("workload: custom\ncode_path: /mnt/shared/code\nmodel_id: {model}\nentrypoint: python3 -c pass\n"),
        )
    };
    let model_check = |model: &str| {
        let spec = job(model);
        let (report, code, _) = doctor(
            || ctx.argus().profile(&profile),
            &[spec.to_str().expect("utf-8 path")],
        );
        (check(&report, "cluster", "model_cache").clone(), code)
    };
    let (whole, code) = model_check("acme/whole");
    assert_eq!(whole["status"], "ok", "{whole:#}");
    assert!(
        whole["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("complete (2 files)"),
        "{whole:#}"
    );
    assert_eq!(code, 0);
    let (torn, code) = model_check("acme/torn");
    assert_eq!(torn["status"], "fail", "{torn:#}");
    assert!(
        torn["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("incomplete: model.safetensors without its blob"),
        "{torn:#}"
    );
    assert_eq!(code, 1);
    let (absent, code) = model_check("acme/absent");
    assert_eq!(absent["status"], "fail", "{absent:#}");
    assert!(
        absent["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("acme/absent is not in the shared HF cache"),
        "{absent:#}"
    );
    assert!(
        absent["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("argus prepare --model acme/absent")
    );
    assert_eq!(code, 1);

    // A dataset: named until `prepare` has made it (from the shipped sample), then complete.
    let with_data = ctx.write(
        "data.yaml",
        "workload: custom\ncode_path: /mnt/shared/code\ntrain_file: gsm8k\nentrypoint: python3 -c pass\n",
    );
    let data_check = || {
        let (report, code, _) = doctor(
            || ctx.argus().profile(&profile),
            &[with_data.to_str().expect("utf-8 path")],
        );
        (check(&report, "cluster", "dataset_cache").clone(), code)
    };
    let (data, code) = data_check();
    assert_eq!(data["status"], "fail", "{data:#}");
    assert!(
        data["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("gsm8k is not prepared"),
        "{data:#}"
    );
    assert_eq!(code, 1);
    ctx.argus()
        .profile(&profile)
        .args([
            "prepare",
            "--dataset",
            "gsm8k",
            "--from",
            "profiles/jobs/quickstart/gsm8k-sample",
        ])
        .run()
        .code(0);
    let (data, code) = data_check();
    assert_eq!(data["status"], "ok", "{data:#}");
    assert!(
        data["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("gsm8k complete (train.parquet, test.parquet"),
        "{data:#}"
    );
    assert_eq!(code, 0);

    // An engine that does not answer: could not check, exit 4.
    let closed = free_port();
    let gone_name = ctx.cluster("gone");
    let gone = ctx.write(
        "gone.yaml",
        &format!(
            "name: {}\nimage: {IMAGE}\ndocker: {{host: 'tcp://127.0.0.1:{closed}'}}\nshared: {{host_path: {}}}\nworkers: [{{name: g, count: 1}}]\n",
            gone_name,
            shared.display()
        ),
    );
    let (report, code, _) = doctor(|| ctx.argus().profile(&gone), &[]);
    assert_eq!(code, 4, "{report:#}");
    assert_eq!(report["status"], "unknown");
    assert_eq!(check(&report, "local", "engine")["status"], "unknown");

    // up's preflight: NVIDIA workers on an engine without NVIDIA's runtime are refused in
    // the first seconds (not after the readiness timeout), and nothing is created.
    let name = ctx.cluster("gpu");
    let nvidia = Profile::small(&name)
        .shared(&shared)
        .port(free_port())
        .worker("gpu_mode", "nvidia")
        .worker("device_ids", "[[0, 1]]")
        .write(&ctx, "nvidia.yaml");
    let started = Instant::now();
    let up = ctx
        .argus()
        .profile(&nvidia)
        .args(["up", "--timeout", "120"])
        .run()
        .code(1)
        .stderr_has("gpu_runtime");
    assert!(
        started.elapsed() < BOUND,
        "refused after {:?}: {}",
        started.elapsed(),
        up.stderr
    );
    assert!(
        up.stderr.contains("NVIDIA Container Toolkit"),
        "{}",
        up.stderr
    );
    assert_eq!(ctx.cluster_containers(&name), Vec::<String>::new());
}

/// A profile across `hosts` (unix sockets), the head on a, a worker on each of b and c,
/// host networking.
fn spanning(ctx: &mut TestContext, hosts: &Hosts, shared: &Path, nvidia: bool) -> PathBuf {
    let mut yaml = String::from("hosts:\n");
    for h in ["a", "b", "c"] {
        let host = hosts.host(h);
        yaml.push_str(&format!(
            "  - {{name: {h}, docker: '{}', address: {}}}\n",
            host.unix, host.ip
        ));
    }
    let mut profile = Profile::small(&ctx.cluster("mh"))
        .shared(shared)
        .head("host", "a")
        .workers_on_hosts(&["b", "c"])
        .yaml(&yaml)
        .yaml("network: {mode: host}\n");
    if nvidia {
        profile = profile
            .worker("gpu_mode", "nvidia")
            .worker("device_ids", "[[0, 1], [0, 1]]");
    }
    ctx.write(
        if nvidia {
            "nvidia.yaml"
        } else {
            "profile.yaml"
        },
        &profile.build(),
    )
}

/// Three emulated hosts with the image: nothing found, within the bound; NVIDIA workers see
/// the engines' NVIDIA runtime (the fixture's stand-in hook) and say their GPUs cannot be
/// counted; then a different image id under the profile's image name on host c, and host
/// b's shared storage another directory, each named on its host with its cause.
#[test]
fn doctor_across_three_hosts_names_a_foreign_image_and_a_foreign_shared_directory() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    // The stand-in NVIDIA hook on every engine: its `nvidia` device driver is registered.
    let hosts = Hosts::up(
        &ctx,
        &["a", "b", "c"],
        Options {
            nvidia: true,
            ..Options::default()
        },
    );
    for h in ["a", "b", "c"] {
        hosts.load_image(h, IMAGE);
    }
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let profile = spanning(&mut ctx, &hosts, &shared, false);

    let (report, code, took) = doctor(|| ctx.argus().profile(&profile), &[]);
    eprintln!("doctor on 3 emulated hosts: {took:?}");
    assert_eq!(findings(&report), [], "{report:#}");
    assert_eq!(code, 0);
    for h in ["a", "b", "c"] {
        for name in [
            "engine",
            "clock",
            "image",
            "image_tools",
            "shm",
            "disk_shared",
            "disk_engine",
            "shared_storage",
        ] {
            assert_eq!(check(&report, h, name)["status"], "ok");
        }
    }
    assert!(
        check(&report, "c", "image")["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("(as on this machine)"),
        "{report:#}"
    );

    // NVIDIA workers on b and c: the engines' nvidia driver gives a container every GPU
    // (the stand-in hook), but no GPU can be counted on a machine that has none.
    let nvidia = spanning(&mut ctx, &hosts, &shared, true);
    let (report, code, _) = doctor(|| ctx.argus().profile(&nvidia), &[]);
    for h in ["b", "c"] {
        assert_eq!(
            check(&report, h, "gpu_runtime")["status"],
            "ok",
            "{report:#}"
        );
        let gpus = check(&report, h, "gpus");
        assert_eq!(gpus["status"], "unknown", "{report:#}");
        assert!(
            gpus["why"]
                .as_str()
                .unwrap_or_default()
                .contains("cannot be counted"),
            "{gpus:#}"
        );
    }
    assert_eq!(code, 4, "{report:#}");

    // Host c: another image under the profile's image name (the original still there, by id).
    let original = hosts.image_id("c", IMAGE).expect("image on c");
    let scratch = format!("{}-other", ctx.prefix);
    hosts.docker_ok("c", &["create", "--name", &scratch, IMAGE, "true"]);
    hosts.docker_ok(
        "c",
        &[
            "commit",
            "--change",
            "LABEL argus.test=other",
            &scratch,
            IMAGE,
        ],
    );
    hosts.docker_ok("c", &["rm", &scratch]);
    let other = hosts.image_id("c", IMAGE).expect("retagged");
    assert_ne!(other, original);
    let (report, code, _) = doctor(|| ctx.argus().profile(&profile), &[]);
    assert_eq!(code, 1, "{report:#}");
    let image = check(&report, "c", "image");
    assert_eq!(image["status"], "fail", "{report:#}");
    let short = |id: &str| id.trim_start_matches("sha256:")[..12].to_string();
    let seen = image["seen"].as_str().unwrap_or_default();
    assert!(
        seen.contains(&short(&other)) && seen.contains(&short(&original)),
        "{seen}"
    );
    assert_eq!(
        findings(&report),
        [("c".to_string(), "image".to_string(), "fail".to_string())],
        "only c's image: {report:#}"
    );
    hosts.docker_ok("c", &["tag", &original, IMAGE]);

    // Host c's clock a year ahead, as its engine reports it (see `skewed_clock`): named on
    // c alone, failed (past munge's and TLS's bounds), the other checks there unchanged.
    let socket = hosts
        .host("c")
        .unix
        .trim_start_matches("unix://")
        .to_string();
    let skewed =
        crate::skewed_clock::SkewedEngine::start(&ctx.path("skewed-c.sock"), Path::new(&socket));
    let text = std::fs::read_to_string(&profile).expect("profile");
    let skewed_profile = ctx.write(
        "skewed.yaml",
        &text.replace(&hosts.host("c").unix, &skewed.endpoint()),
    );
    let (report, code, _) = doctor(|| ctx.argus().profile(&skewed_profile), &[]);
    drop(skewed);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        findings(&report),
        [("c".to_string(), "clock".to_string(), "fail".to_string())],
        "only c's clock: {report:#}"
    );
    let clock = check(&report, "c", "clock");
    let seen = clock["seen"].as_str().unwrap_or_default();
    let offset: f64 = seen
        .split('s')
        .next()
        .and_then(|n| n.trim_start_matches('+').parse().ok())
        .unwrap_or_else(|| panic!("{seen}"));
    assert!((offset - 365.0 * 86400.0).abs() < 86400.0 + 60.0, "{seen}");

    // Host b: an empty directory where the shared storage should be.
    let elsewhere = ctx.path("not-the-export");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    hosts.bind_over("b", &shared, &elsewhere);
    let (report, code, _) = doctor(|| ctx.argus().profile(&profile), &[]);
    assert_eq!(code, 1, "{report:#}");
    let storage = check(&report, "b", "shared_storage");
    assert_eq!(storage["status"], "fail", "{report:#}");
    assert!(
        storage["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("is not there on host b"),
        "{storage:#}"
    );
    assert!(
        storage["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("mount the same storage")
    );
    assert_eq!(check(&report, "c", "shared_storage")["status"], "ok");
    // Every probe is gone, on every host.
    for h in ["a", "b", "c"] {
        let left = hosts.docker_ok(h, &["ps", "-aq", "--filter", "label=argus.role=probe"]);
        assert_eq!(left.trim(), "", "probes left on {h}");
    }
}

/// What NVIDIA's hook would put in a GPU container, standing in for an R570 driver (CUDA 12.8):
/// the head of `nvidia-smi -q`, only in a container given the GPUs with the `utility`
/// capability (the variables dockerd's nvidia device driver sets), as the hook would.
const NVIDIA_SMI_570: &str = "#!/bin/sh\ncase \"$NVIDIA_VISIBLE_DEVICES/$NVIDIA_DRIVER_CAPABILITIES\" in all/*utility*) ;; *) echo 'NVIDIA-SMI has failed' >&2; exit 9 ;; esac\necho '==============NVSMI LOG=============='\necho 'Driver Version                            : 570.133.20'\necho 'CUDA Version                              : 12.8'\n";

/// `cuda_driver` on an emulated host whose engine has the stand-in NVIDIA hook: the probe asks
/// for the GPUs and reads `nvidia-smi -q` (here an image's stand-in for an R570 driver), the
/// image's CUDA comes from its label. CUDA 13.0 on it fails with the driver it needs, 12.4
/// passes, a simulated-GPU profile has no such check, and an image without nvidia-smi (no
/// driver: this machine) is unknown, saying so.
#[test]
fn cuda_driver_compares_the_images_cuda_with_the_hosts_driver() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let hosts = Hosts::up(
        &ctx,
        &["a"],
        Options {
            nvidia: true,
            ..Options::default()
        },
    );
    hosts.load_image("a", IMAGE);
    let smi = ctx.write("nvidia-smi", NVIDIA_SMI_570);
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let scratch = format!("{}-cuda", ctx.prefix);
    hosts.docker_ok("a", &["create", "--name", &scratch, IMAGE, "true"]);
    let to = format!("{scratch}:/usr/local/bin/nvidia-smi");
    hosts.docker_ok("a", &["cp", &smi.display().to_string(), &to]);
    for cuda in ["13.0", "12.4"] {
        let label = format!("LABEL argus.cuda={cuda}");
        let tag = format!("argus-test/cuda:{cuda}");
        hosts.docker_ok("a", &["commit", "--change", &label, &scratch, &tag]);
    }
    hosts.docker_ok("a", &["rm", &scratch]);
    let shared = ctx.path("shared");
    std::fs::create_dir_all(&shared).expect("shared");
    let host = hosts.host("a");
    let cluster = ctx.cluster("cuda");
    let profile = |image: &str, gpu_mode: &str, file: &str| {
        let mut p = Profile::small(&cluster)
            .image(image)
            .shared(&shared)
            .worker("gpu_mode", gpu_mode)
            .yaml(&format!(
                "hosts: [{{name: a, docker: '{}', address: {}}}]\n",
                host.unix, host.ip
            ));
        if gpu_mode == "nvidia" {
            p = p.worker("device_ids", "[[0, 1]]");
        }
        p.write(&ctx, file)
    };

    let old_driver = profile("argus-test/cuda:13.0", "nvidia", "cuda13.yaml");
    let (report, code, _) = doctor(|| ctx.argus().profile(&old_driver), &[]);
    let c = check(&report, "a", "cuda_driver");
    assert_eq!(c["status"], "fail", "{report:#}");
    let seen = c["seen"].as_str().unwrap_or_default();
    assert!(
        seen.contains("driver 570.133.20 supports CUDA up to 12.8 (nvidia-smi)")
            && seen.contains("CUDA 13.0 (label argus.cuda)"),
        "{seen}"
    );
    assert!(
        c["fix"].as_str().unwrap_or_default().contains("580.65.06"),
        "{c:#}"
    );
    assert_eq!(code, 1, "{report:#}");

    let fits = profile("argus-test/cuda:12.4", "nvidia", "cuda12.yaml");
    let (report, _, _) = doctor(|| ctx.argus().profile(&fits), &[]);
    assert_eq!(
        check(&report, "a", "cuda_driver")["status"],
        "ok",
        "{report:#}"
    );

    let simulated = profile("argus-test/cuda:13.0", "simulated", "sim.yaml");
    let (report, _, _) = doctor(|| ctx.argus().profile(&simulated), &[]);
    assert!(
        checks(&report)
            .iter()
            .all(|(_, name, _)| name != "cuda_driver"),
        "{report:#}"
    );

    let no_driver = profile(IMAGE, "nvidia", "ray.yaml");
    let (report, _, _) = doctor(|| ctx.argus().profile(&no_driver), &[]);
    let c = check(&report, "a", "cuda_driver");
    assert_eq!(c["status"], "unknown", "{report:#}");
    assert!(
        c["seen"]
            .as_str()
            .unwrap_or_default()
            .starts_with("no NVIDIA driver on this host"),
        "{c:#}"
    );
    assert!(
        hosts
            .docker_ok("a", &["ps", "-aq", "--filter", "label=argus.role=probe"])
            .trim()
            .is_empty(),
        "the probes are removed"
    );
}
