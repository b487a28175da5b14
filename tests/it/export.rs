//! `argus export kuberay`: the shipped profiles and JobSpecs as KubeRay objects, read back
//! with unknown fields refused and checked field by field, against `argus submit
//! --dry-run`, and by `kuberay-validate --strict` (the KubeRay v1.7.0 CRD schemas and the
//! operator's rules); the edge cases; every refusal (exit 2, nothing written). No Docker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use argus::export::kuberay::{RayCluster, RayJob};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, Volume};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::harness::{Profile, Run, TestContext};

/// The image a cluster would pull the shipped profiles' locally built image from.
pub(crate) const IMAGE: &str = "registry.example/argus/ray:2.51.1";
pub(crate) const PVC: &str = "argus-shared";

/// `argus export kuberay` with the default profile's shared path under the test's temp dir
/// (so what this machine holds under ~/.local/share never changes the result).
fn export(ctx: &TestContext, profile: &Path, jobspec: Option<&Path>, flags: &[&str]) -> Run {
    let mut argus = ctx
        .argus()
        .env("XDG_DATA_HOME", ctx.path("xdg"))
        .profile(profile)
        .args(["export", "kuberay"]);
    if let Some(jobspec) = jobspec {
        argus = argus.arg_path(jobspec);
    }
    argus.args(flags).run()
}

/// [`export`] of the usual objects (`--pvc PVC --image IMAGE`) into the file `out`.
fn export_to(ctx: &TestContext, profile: &Path, jobspec: Option<&Path>, out: &Path) -> Run {
    let out = out.to_str().expect("utf-8");
    export(
        ctx,
        profile,
        jobspec,
        &["--pvc", PVC, "--image", IMAGE, "-o", out],
    )
}

/// Reads a manifest back into the typed objects; any field they do not know (at any depth,
/// k8s-openapi's types included) fails the test.
#[track_caller]
fn parse<T: DeserializeOwned>(yaml: &str) -> T {
    let mut unknown = Vec::new();
    let value = serde_ignored::deserialize(serde_yaml::Deserializer::from_str(yaml), |path| {
        unknown.push(path.to_string())
    })
    .unwrap_or_else(|e| panic!("the manifest does not parse: {e}\n{yaml}"));
    assert!(unknown.is_empty(), "unknown fields {unknown:?} in\n{yaml}");
    value
}

/// `kuberay-validate --strict` over files: the check `kubectl apply --dry-run=server` does
/// on a cluster with the KubeRay v1.7.0 CRDs and operator.
#[track_caller]
fn kuberay_validate(files: &[PathBuf]) {
    let tool = std::env::var_os("KUBERAY_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/kuberay-validate")
        });
    let out = Command::new(&tool)
        .arg("--strict")
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kuberay-validate refused:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.matches(": valid (0 errors, 0 warnings)").count(),
        files.len(),
        "{text}"
    );
}

pub(crate) fn shipped(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("shipped files")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    files
}

pub(crate) fn stem(path: &Path) -> String {
    path.file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn container(template: &PodTemplateSpec) -> &Container {
    &template.spec.as_ref().expect("pod spec").containers[0]
}

fn volumes(template: &PodTemplateSpec) -> &[Volume] {
    template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

fn env(container: &Container) -> BTreeMap<String, String> {
    let list = container.env.as_deref().unwrap_or_default();
    let map: BTreeMap<String, String> = list
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(map.len(), list.len(), "env names are unique: {list:?}");
    map
}

/// `limits` as text, after checking `requests` equals it.
fn limits(container: &Container) -> BTreeMap<String, String> {
    let resources = container.resources.as_ref().expect("resources");
    assert_eq!(
        resources.limits, resources.requests,
        "requests equal limits"
    );
    resources
        .limits
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn shm_size(template: &PodTemplateSpec) -> Option<String> {
    let mounted = container(template)
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|m| m.mount_path == "/dev/shm")?;
    let volume = volumes(template).iter().find(|v| v.name == mounted.name)?;
    let dir = volume.empty_dir.as_ref()?;
    assert_eq!(dir.medium.as_deref(), Some("Memory"));
    dir.size_limit.as_ref().map(|q| q.0.clone())
}

#[test]
fn every_shipped_profile_and_jobspec_exports_a_valid_object() {
    let ctx = TestContext::new("exportall");
    let mut files = Vec::new();
    for profile in shipped("profiles") {
        let mut jobs: Vec<Option<PathBuf>> = vec![None];
        jobs.extend(shipped("profiles/jobs").into_iter().map(Some));
        for job in jobs {
            let name = format!(
                "{}-{}.yaml",
                stem(&profile),
                job.as_deref().map(stem).unwrap_or_else(|| "cluster".into())
            );
            let out = ctx.path(&name);
            let run = export_to(&ctx, &profile, job.as_deref(), &out).code(0);
            assert!(run.stdout.is_empty(), "with -o, nothing on stdout");
            let yaml = std::fs::read_to_string(&out).expect("written");
            if job.is_some() {
                let parsed: RayJob = parse(&yaml);
                assert_eq!(parsed.kind, "RayJob");
            } else {
                let parsed: RayCluster = parse(&yaml);
                assert_eq!(parsed.kind, "RayCluster");
            }
            files.push(out);
        }
    }
    assert_eq!(
        files.len(),
        3 * 8,
        "3 profiles x (a RayCluster + 7 JobSpecs)"
    );
    kuberay_validate(&files);
}

#[test]
fn exported_yaml_of_the_shipped_profiles() {
    let ctx = TestContext::new("exportsnap");
    for (profile, job) in [
        ("local", None),
        ("h20-8gpu", None),
        ("multi-host", None),
        ("h20-8gpu", Some("ppo")),
        ("h20-8gpu", Some("grpo")),
        ("h20-8gpu", Some("sft")),
    ] {
        let job_path = job.map(|j| PathBuf::from(format!("profiles/jobs/{j}.yaml")));
        let run = export(
            &ctx,
            Path::new(&format!("profiles/{profile}.yaml")),
            job_path.as_deref(),
            &["--pvc", PVC, "--image", IMAGE],
        )
        .code(0);
        insta::assert_snapshot!(
            format!("kuberay-{profile}-{}", job.unwrap_or("cluster")),
            run.stdout
        );
    }
}

#[test]
fn h20_ppo_maps_field_by_field() {
    let ctx = TestContext::new("exportppo");
    let run = export(
        &ctx,
        Path::new("profiles/h20-8gpu.yaml"),
        Some(Path::new("profiles/jobs/ppo.yaml")),
        &[
            "--pvc",
            PVC,
            "--image",
            IMAGE,
            "--namespace",
            "rl",
            "--queue",
            "team-a",
        ],
    )
    .code(0);
    let job: RayJob = parse(&run.stdout);
    assert_eq!(job.api_version, "ray.io/v1");
    let meta = &job.metadata;
    let name = meta.name.clone().expect("name");
    assert!(name.starts_with("ppo-") && name.len() <= 47, "{name}");
    assert_eq!(meta.namespace.as_deref(), Some("rl"));
    let labels = meta.labels.clone().expect("labels");
    // code.source (verl 0.9.1 from PyPI) is hashed into the code id `argus run` would make.
    let code_id = job.spec.metadata["code_id"].clone();
    assert!(
        code_id.len() == 12 && code_id.chars().all(|c| c.is_ascii_hexdigit()),
        "{code_id}"
    );
    for (k, v) in [
        ("app.kubernetes.io/managed-by", "argus"),
        ("argus/profile", "h20"),
        ("argus/jobspec", "ppo"),
        ("argus/code-id", code_id.as_str()),
        ("argus/workload", "ppo"),
        ("kueue.x-k8s.io/queue-name", "team-a"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }

    let spec = &job.spec;
    assert_eq!(spec.job_id, name, "a derived id is already a DNS-1035 name");
    assert!(
        spec.entrypoint
            .contains(" && python3 -m verl.trainer.main_ppo ")
    );
    assert!(spec.entrypoint.contains(&format!(
        " trainer.default_local_dir=/mnt/shared/jobs/{}/checkpoints ",
        spec.job_id
    )));
    assert!(
        spec.entrypoint
            .ends_with(r#" "trainer.experiment_name='qwen2.5-0.5b ppo'""#)
    );
    assert_eq!(spec.entrypoint_num_cpus, Some(1.0));
    assert_eq!(spec.entrypoint_num_gpus, None);
    assert_eq!(
        spec.entrypoint_resources.as_deref(),
        Some(r#"{"worker_node":1}"#)
    );
    let runtime_env: Value = serde_json::from_str(&spec.runtime_env_yaml).expect("JSON is YAML");
    let vars = &runtime_env["env_vars"];
    assert_eq!(
        vars["TOKENIZERS_PARALLELISM"], "false",
        "not a secret: a word of its name must be one"
    );
    assert_eq!(
        vars["PYTHONPATH"],
        format!("/mnt/shared/common/code/verl/{code_id}:/mnt/shared/user/code:${{PYTHONPATH}}")
            .as_str()
    );
    assert_eq!(
        vars["ARGUS_JOB_DIR"],
        format!("/mnt/shared/jobs/{}", spec.job_id).as_str()
    );
    assert_eq!(spec.metadata["workload"], "ppo");
    assert_eq!(spec.submission_mode, "HTTPMode");
    assert!(spec.shutdown_after_job_finishes);
    assert!(spec.ttl_seconds_after_finished > 0);
    assert_eq!(spec.backoff_limit, 0);
    assert_eq!(spec.active_deadline_seconds, Some(6 * 3600));
    assert_eq!(spec.pre_running_deadline_seconds, Some(300));

    let cluster = &spec.ray_cluster_spec;
    assert_eq!(cluster.ray_version.as_deref(), Some("2.51.1"));
    assert_eq!(cluster.auth_options, None);
    let head = &cluster.head_group_spec;
    assert_eq!(head.resources, map(&[("GPU", "0"), ("head_node", "1")]));
    assert_eq!(
        head.ray_start_params.get("num-gpus"),
        None,
        "never both rayStartParams and resources"
    );
    let head_c = container(&head.template);
    assert_eq!(head_c.image.as_deref(), Some(IMAGE));
    assert_eq!(limits(head_c), map(&[("cpu", "8"), ("memory", "32Gi")]));
    assert_eq!(shm_size(&head.template).as_deref(), Some("8Gi"));
    let head_env = env(head_c);
    for (k, v) in [
        ("HF_ENDPOINT", "https://hf-mirror.example.internal"),
        ("NCCL_DEBUG", "WARN"),
        ("HF_HOME", "/mnt/shared/common/hf"),
        ("RAY_AUTH_MODE", "disabled"),
        ("ARGUS_CLUSTER", "h20"),
    ] {
        assert_eq!(head_env.get(k).map(String::as_str), Some(v), "env {k}");
    }
    let pod_labels = head
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .expect("pod labels");
    assert_eq!(pod_labels["argus/profile"], "h20");
    assert!(
        !pod_labels.contains_key("kueue.x-k8s.io/queue-name"),
        "the queue is the object's"
    );

    assert_eq!(cluster.worker_group_specs.len(), 1);
    let gpu = &cluster.worker_group_specs[0];
    assert_eq!(gpu.group_name, "gpu");
    assert_eq!(
        (gpu.replicas, gpu.min_replicas, gpu.max_replicas),
        (2, 2, 2)
    );
    assert_eq!(
        gpu.resources,
        map(&[("GPU", "4"), ("accelerator_h20", "4"), ("worker_node", "1")])
    );
    let gpu_c = container(&gpu.template);
    assert_eq!(
        limits(gpu_c),
        map(&[("cpu", "48"), ("memory", "512Gi"), ("nvidia.com/gpu", "4")])
    );
    assert_eq!(shm_size(&gpu.template).as_deref(), Some("64Gi"));
    assert_eq!(env(gpu_c), head_env, "one environment everywhere");
    for template in [&head.template, &gpu.template] {
        let shared = volumes(template)
            .iter()
            .find(|v| v.name == "argus-shared")
            .expect("shared volume");
        assert_eq!(
            shared
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some(PVC)
        );
        let mount = container(template)
            .volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|m| m.name == "argus-shared")
            .map(|m| m.mount_path.clone());
        assert_eq!(mount.as_deref(), Some("/mnt/shared"));
    }

    // What Kubernetes does differently is said, where the profile says it.
    assert!(
        run.stderr
            .contains("profiles/h20-8gpu.yaml:39:17: workers[0].device_ids: not carried"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("ray.dashboard_bind: not carried"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("time_limit: → activeDeadlineSeconds 21600"),
        "{}",
        run.stderr
    );
}

/// A snapshot and a cached model on a shared root in the temp dir, and a profile using it.
fn mounted_profile(ctx: &TestContext) -> PathBuf {
    let shared = ctx.path("shared");
    let profile = Profile::new("mounted")
        .shared(&shared)
        .head("cpus", "2")
        .head("memory", "4g")
        .worker("gpus", "2")
        .worker("cpus", "4")
        .worker("memory", "8g")
        .yaml("submit:\n  runtime_env: {env_vars: {EXTRA: x}}\n")
        .write(ctx, "mounted.yaml");
    let src = ctx.path("verl-src");
    std::fs::create_dir_all(src.join("verl")).expect("mkdir");
    std::fs::write(src.join("verl/__init__.py"), "").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "verl-snapshot-id"])
        .arg_path(&src)
        .run()
        .code(0);
    let model = shared.join("common/hf/hub/models--Qwen--Qwen2.5-0.5B-Instruct");
    std::fs::create_dir_all(model.join("snapshots/0123abcd0123abcd0123abcd0123abcd0123abcd"))
        .expect("mkdir");
    std::fs::create_dir_all(model.join("refs")).expect("mkdir");
    std::fs::write(
        model.join("refs/main"),
        "0123abcd0123abcd0123abcd0123abcd0123abcd",
    )
    .expect("write");
    profile
}

/// Every file under `dir` with its size and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, meta.len(), meta.modified().expect("mtime")));
        }
    }
    out.sort();
    out
}

#[test]
fn the_job_is_what_submit_dry_run_shows_and_nothing_is_written() {
    let ctx = TestContext::new("exportsubmit");
    let profile = mounted_profile(&ctx);
    let before = listing(&ctx.path("shared"));
    for job in ["ppo", "grpo", "sft"] {
        // Its code.source is `argus run`'s to snapshot: submit and export get the snapshot.
        let text = std::fs::read_to_string(format!("profiles/jobs/{job}.yaml"))
            .expect("jobspec")
            .lines()
            .filter(|l| {
                !["code:", "  source:", "  name:"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .collect::<Vec<_>>()
            .join("\n");
        let spec = ctx.write(
            &format!("{job}.yaml"),
            &format!("submission_id: Cmp_{job}.1\ncode_id: verl-snapshot-id\n{text}\n"),
        );
        let submitted = ctx
            .argus()
            .profile(&profile)
            .args(["submit", "--dry-run", "--json"])
            .arg_path(&spec)
            .run()
            .code(0)
            .json();
        let payload = &submitted["payload"];
        let run = export(
            &ctx,
            &profile,
            Some(&spec),
            &["--pvc", PVC, "--image", IMAGE],
        )
        .code(0);
        let exported: RayJob = parse(&run.stdout);
        let spec = &exported.spec;
        assert_eq!(
            spec.entrypoint,
            payload["entrypoint"].as_str().expect("entrypoint"),
            "{job}: the same string"
        );
        assert!(
            spec.entrypoint.contains(
                "/mnt/shared/common/hf/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/0123abcd0123abcd0123abcd0123abcd0123abcd"
            ),
            "the model resolves through the mounted HF cache, as for submit: {}",
            spec.entrypoint
        );
        assert_eq!(spec.job_id, payload["submission_id"].as_str().expect("id"));
        assert_eq!(spec.job_id, format!("Cmp_{job}.1"));
        let runtime_env: Value = serde_json::from_str(&spec.runtime_env_yaml).expect("JSON");
        assert_eq!(runtime_env, payload["runtime_env"], "{job}");
        assert_eq!(
            serde_json::to_value(&spec.metadata).expect("json"),
            payload["metadata"]
        );
        assert_eq!(
            spec.entrypoint_num_cpus,
            payload["entrypoint_num_cpus"].as_f64()
        );
        let resources: BTreeMap<String, f64> =
            serde_json::from_str(spec.entrypoint_resources.as_deref().expect("resources"))
                .expect("JSON");
        let submitted_resources: BTreeMap<String, f64> =
            serde_json::from_value(payload["entrypoint_resources"].clone()).expect("map");
        assert_eq!(resources, submitted_resources);
        assert!(
            !run.stderr.contains("is not mounted on this host"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(
        listing(&ctx.path("shared")),
        before,
        "an export writes nothing to the shared storage"
    );
}

#[test]
fn units_groups_gpus_and_yaml_1_1_strings() {
    let ctx = TestContext::new("exportunits");
    let profile = ctx.write(
        "p.yaml",
        "name: units\nimage: reg.example/ray:2.51.1\nshared: {nfs: {server: nfs.example, export: /export/argus}, mount: /data}\nenv: {FLAG: 'on', ANSWER: 'y', TIME: '1:30', NUM: '012'}\nhead: {cpus: 0.5, memory: 1.5g, shm_size: 100m, object_store_memory: 64m}\nworkers:\n  - {name: big, count: 2, gpus: 8, gpu_mode: nvidia, device_ids: [[0,1,2,3,4,5,6,7],[8,9,10,11,12,13,14,15]], cpus: 96, memory: 1024g, shm_size: 128g, resources: {accelerator_h100: 8, fraction: 0.25}}\n  - {name: amd, count: 1, gpus: 2, gpu_mode: amd, device_ids: [[16,17]], cpus: 16, memory: 64GiB}\n  - {name: sim, count: 3, gpus: 2, cpus: 1, memory: 512m}\n  - {name: cpu_only, count: 1, cpus: 4, memory: 8589934592}\n",
    );
    let out = ctx.path("units.yaml");
    let run = export(&ctx, &profile, None, &["-o", out.to_str().expect("utf-8")]).code(0);
    let yaml = std::fs::read_to_string(&out).expect("written");
    let cluster: RayCluster = parse(&yaml);
    assert_eq!(cluster.metadata.name.as_deref(), Some("units"));
    let spec = &cluster.spec;
    let head = &spec.head_group_spec;
    assert_eq!(
        limits(container(&head.template)),
        map(&[("cpu", "500m"), ("memory", "1536Mi")])
    );
    assert_eq!(shm_size(&head.template).as_deref(), Some("100Mi"));
    assert_eq!(
        head.ray_start_params["object-store-memory"],
        (64u64 << 20).to_string()
    );
    let head_env = env(container(&head.template));
    assert_eq!(
        head_env["FLAG"], "on",
        "a YAML 1.1 boolean word stays a string"
    );
    assert_eq!(head_env["TIME"], "1:30");
    assert_eq!(head_env["HF_HOME"], "/data/common/hf");

    let groups: BTreeMap<&str, _> = spec
        .worker_group_specs
        .iter()
        .map(|g| (g.group_name.as_str(), g))
        .collect();
    assert_eq!(
        groups.keys().copied().collect::<Vec<_>>(),
        ["amd", "big", "cpu-only", "sim"]
    );
    let big = groups["big"];
    assert_eq!(
        (big.replicas, big.min_replicas, big.max_replicas),
        (2, 2, 2)
    );
    assert_eq!(
        limits(container(&big.template)),
        map(&[("cpu", "96"), ("memory", "1Ti"), ("nvidia.com/gpu", "8")])
    );
    assert_eq!(shm_size(&big.template).as_deref(), Some("128Gi"));
    assert_eq!(
        big.resources,
        map(&[
            ("GPU", "8"),
            ("accelerator_h100", "8"),
            ("fraction", "0.25"),
            ("worker_node", "1")
        ])
    );
    assert_eq!(
        limits(container(&groups["amd"].template)),
        map(&[("amd.com/gpu", "2"), ("cpu", "16"), ("memory", "64Gi")])
    );
    let sim = groups["sim"];
    assert_eq!(
        limits(container(&sim.template)),
        map(&[("cpu", "1"), ("memory", "512Mi")])
    );
    assert_eq!(sim.resources["GPU"], "2", "simulated GPUs are Ray's only");
    assert_eq!(
        shm_size(&sim.template),
        None,
        "no shm_size: KubeRay sizes /dev/shm itself"
    );
    let cpu = groups["cpu-only"];
    assert_eq!(cpu.resources["GPU"], "0");
    assert_eq!(limits(container(&cpu.template))["memory"], "8Gi");
    for group in [&groups["big"], &groups["amd"], &sim, &cpu] {
        let shared = volumes(&group.template)
            .iter()
            .find(|v| v.name == "argus-shared")
            .expect("shared");
        let nfs = shared.nfs.as_ref().expect("nfs volume");
        assert_eq!(
            (nfs.server.as_str(), nfs.path.as_str()),
            ("nfs.example", "/export/argus")
        );
    }
    for warning in [
        "p.yaml:9:5: workers[2].gpu_mode: simulated: no GPU is requested from Kubernetes",
        "p.yaml:10:12: workers[3].name: named cpu-only in Kubernetes",
        "workers[0].device_ids: not carried",
        "workers[1].device_ids: not carried",
    ] {
        assert!(run.stderr.contains(warning), "{warning}\n{}", run.stderr);
    }
    kuberay_validate(&[out]);
}

#[test]
fn nfs_exports_are_volumes_and_a_claim_replaces_them() {
    let ctx = TestContext::new("exportnfs");
    // The shipped multi-host profile, with Docker mounting the NFS export on each host.
    let shipped = std::fs::read_to_string("profiles/multi-host.yaml").expect("profile");
    let host_path = shipped
        .lines()
        .find(|l| l.trim_start().starts_with("host_path:"))
        .expect("host_path line");
    let with_nfs = shipped.replace(
        host_path,
        "  nfs: {server: 10.0.0.5, export: /export/argus, options: nfsvers=4.1}",
    );
    let nfs_line = with_nfs
        .lines()
        .position(|l| l.starts_with("  nfs:"))
        .expect("nfs line")
        + 1;
    let multi = &ctx.write("multi-nfs.yaml", &with_nfs);
    let run = export(&ctx, multi, None, &["--image", IMAGE]).code(0);
    let cluster: RayCluster = parse(&run.stdout);
    let template = &cluster.spec.head_group_spec.template;
    let shared = volumes(template)
        .iter()
        .find(|v| v.name == "argus-shared")
        .expect("shared");
    let nfs = shared.nfs.as_ref().expect("nfs");
    assert_eq!(
        (nfs.server.as_str(), nfs.path.as_str()),
        ("10.0.0.5", "/export/argus")
    );
    let at = format!("multi-nfs.yaml:{nfs_line}:");
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains(&at) && l.contains("shared.nfs.options: not carried")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("network.mode: host networking is not carried"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hosts: not carried"), "{}", run.stderr);
    assert!(
        run.stderr.contains("workers[0].hosts: not carried"),
        "{}",
        run.stderr
    );

    let run = export(&ctx, multi, None, &["--image", IMAGE, "--pvc", "nfs-claim"]).code(0);
    let cluster: RayCluster = parse(&run.stdout);
    let template = &cluster.spec.worker_group_specs[0].template;
    let shared = volumes(template)
        .iter()
        .find(|v| v.name == "argus-shared")
        .expect("shared");
    assert!(shared.nfs.is_none());
    assert_eq!(
        shared
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("nfs-claim")
    );
    assert!(
        !run.stderr.contains("shared.nfs.options"),
        "a claim carries the mount options: {}",
        run.stderr
    );
}

#[test]
fn a_raycluster_for_argus_submit_through_port_forward() {
    let ctx = TestContext::new("exportrc");
    let run = export(
        &ctx,
        Path::new("profiles/local.yaml"),
        None,
        &["--pvc", PVC, "--image", IMAGE],
    )
    .code(0);
    let cluster: RayCluster = parse(&run.stdout);
    assert_eq!(cluster.metadata.name.as_deref(), Some("argus-local"));
    assert!(
        !cluster
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("argus/jobspec")
    );
    assert!(
        run.stderr
            .contains("port-forward svc/argus-local-head-svc 8265:8265"),
        "{}",
        run.stderr
    );
}

#[test]
fn awkward_submission_ids_keep_their_job_id_and_get_a_valid_name() {
    let ctx = TestContext::new("exportid");
    let profile = Path::new("profiles/h20-8gpu.yaml");
    let mut files = Vec::new();
    for id in ["My_Run.v2_Final", "2024.Q3_sweep", &"Long_ID.".repeat(12)] {
        let spec = ctx.write(
            "id.yaml",
            &format!(
                "workload: custom\nsubmission_id: '{id}'\ncode_id: abc\nentrypoint: python3 -m x\n"
            ),
        );
        let out = ctx.path(&format!("{}.yaml", files.len()));
        export_to(&ctx, profile, Some(&spec), &out).code(0);
        let job: RayJob = parse(&std::fs::read_to_string(&out).expect("written"));
        assert_eq!(job.spec.job_id, id, "the submission id verbatim");
        let name = job.metadata.name.clone().expect("name");
        assert!(name.len() <= 47, "{name}");
        assert!(name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        files.push(out);
    }
    kuberay_validate(&files);
}

#[test]
fn secrets_are_refused_or_taken_from_a_secret() {
    let ctx = TestContext::new("exportsecret");
    let token = format!("hf_{}", "Ab1".repeat(12));
    let profile = ctx.write(
        "p.yaml",
        &format!("name: s\nimage: reg.example/ray:2.51.1\nshared: {{nfs: {{server: n, export: /e}}}}\nenv:\n  HF_TOKEN: {token}\nworkers: [{{name: w, count: 1, cpus: 1, memory: 1g}}]\n"),
    );
    let out = ctx.path("out.yaml");
    for json in [false, true] {
        let mut flags = vec![
            "--hf-token-secret",
            "hf",
            "-o",
            out.to_str().expect("utf-8"),
        ];
        if json {
            flags.insert(0, "--json");
        }
        let run = export(&ctx, &profile, None, &flags).code(2);
        assert!(
            run.stderr
                .contains("p.yaml:5:13: env.HF_TOKEN: `HF_TOKEN` is a secret"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stdout.contains(&token) && !run.stderr.contains(&token),
            "the secret is never printed"
        );
        assert!(!out.exists(), "nothing written");
        if json {
            let report = run.json();
            assert_eq!(report["exported"], false);
            assert_eq!(report["refusals"][0]["field"], "env.HF_TOKEN");
            assert_eq!(report["refusals"][0]["line"], 5);
        }
    }

    // The token from a Secret instead: one HF_TOKEN per container, by reference only.
    let clean = ctx.write(
        "clean.yaml",
        "name: s\nimage: reg.example/ray:2.51.1\nshared: {nfs: {server: n, export: /e}}\nworkers: [{name: w, count: 1, cpus: 1, memory: 1g}]\n",
    );
    let run = export(&ctx, &clean, None, &["--hf-token-secret", "hf-token"]).code(0);
    let cluster: RayCluster = parse(&run.stdout);
    for template in [
        &cluster.spec.head_group_spec.template,
        &cluster.spec.worker_group_specs[0].template,
    ] {
        let hf: Vec<_> = container(template)
            .env
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|e| e.name == "HF_TOKEN")
            .collect();
        assert_eq!(hf.len(), 1);
        assert_eq!(hf[0].value, None);
        let secret = hf[0]
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .expect("secretKeyRef");
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("hf-token", "HF_TOKEN")
        );
    }
}

#[test]
fn token_auth_needs_ray_2_52_a_secret_and_kuberay_1_6() {
    let ctx = TestContext::new("exportauth");
    let profile = |image: &str| {
        ctx.write(
            &format!("{}.yaml", image.replace(['/', ':', '.'], "-")),
            &format!("name: tok\nimage: {image}\nshared: {{nfs: {{server: n, export: /e}}}}\nray: {{auth: token}}\nworkers: [{{name: w, count: 1, cpus: 1, memory: 1g}}]\n"),
        )
    };
    let old = profile("reg.example/ray:2.51.1");
    let run = export(&ctx, &old, None, &["--auth-secret", "ray-token"]).code(2);
    assert!(
        run.stderr.contains(
            ":4:13: ray.auth: token auth needs Ray 2.52 or later; the image has Ray 2.51.1"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());

    let new = profile("reg.example/ray:2.60.0");
    let out = ctx.path("auth.yaml");
    export(
        &ctx,
        &new,
        None,
        &[
            "--auth-secret",
            "ray-token",
            "-o",
            out.to_str().expect("utf-8"),
        ],
    )
    .code(0);
    let cluster: RayCluster = parse(&std::fs::read_to_string(&out).expect("written"));
    let auth = cluster.spec.auth_options.clone().expect("authOptions");
    assert_eq!(
        (auth.mode.as_str(), auth.secret_name.as_deref()),
        ("token", Some("ray-token"))
    );
    assert_eq!(cluster.spec.ray_version.as_deref(), Some("2.60.0"));
    let head_env = env(container(&cluster.spec.head_group_spec.template));
    assert_eq!(head_env["RAY_AUTH_MODE"], "token");
    assert!(
        !head_env.contains_key("RAY_AUTH_TOKEN"),
        "KubeRay adds it from the Secret"
    );
    kuberay_validate(&[out]);

    let run = export(&ctx, &new, None, &[]).code(2);
    assert!(
        run.stderr.contains("token auth needs --auth-secret NAME"),
        "{}",
        run.stderr
    );
    let run = export(
        &ctx,
        &new,
        None,
        &["--auth-secret", "ray-token", "--kuberay-version", "1.5"],
    )
    .code(2);
    assert!(
        run.stderr
            .contains("KubeRay 1.5 cannot take the token from a Secret"),
        "{}",
        run.stderr
    );
}

#[test]
fn older_operators_lose_only_what_they_lack() {
    let ctx = TestContext::new("exportver");
    let h20 = Path::new("profiles/h20-8gpu.yaml");
    let ppo = Path::new("profiles/jobs/ppo.yaml");
    for (version, deadline) in [("1.5", None), ("1.6", Some(300)), ("1.7", Some(300))] {
        let run = export(
            &ctx,
            h20,
            Some(ppo),
            &["--pvc", PVC, "--image", IMAGE, "--kuberay-version", version],
        )
        .code(0);
        let job: RayJob = parse(&run.stdout);
        assert_eq!(job.spec.pre_running_deadline_seconds, deadline, "{version}");
        assert_eq!(
            run.stderr.contains(
                "ray.ready_timeout_s: not carried: KubeRay 1.5 has no preRunningDeadlineSeconds"
            ),
            deadline.is_none(),
            "{}",
            run.stderr
        );
        assert!(
            run.stdout
                .starts_with(&format!("# argus/0.1.0 export kuberay (KubeRay {version})"))
        );
    }
    export(
        &ctx,
        h20,
        None,
        &["--pvc", PVC, "--image", IMAGE, "--kuberay-version", "1.4"],
    )
    .code(2);
}

#[test]
fn the_same_inputs_give_the_same_bytes() {
    let ctx = TestContext::new("exportbytes");
    let h20 = Path::new("profiles/h20-8gpu.yaml");
    let quickstart = Path::new("profiles/jobs/quickstart.yaml");
    let flags = ["--pvc", PVC, "--image", IMAGE];
    let first = export(&ctx, h20, Some(quickstart), &flags).code(0).stdout;
    let second = export(&ctx, h20, Some(quickstart), &flags).code(0).stdout;
    assert_eq!(first, second);
    let out = ctx.path("again.yaml");
    let mut with_file = flags.to_vec();
    with_file.extend(["-o", out.to_str().expect("utf-8")]);
    export(&ctx, h20, Some(quickstart), &with_file).code(0);
    assert_eq!(std::fs::read_to_string(&out).expect("written"), first);
    // code.source is hashed into the code id the pods run, as `argus run` would snapshot it.
    let job: RayJob = parse(&first);
    assert!(
        job.spec.entrypoint.ends_with(" && python3 -m quickstart"),
        "{}",
        job.spec.entrypoint
    );
    assert!(job.spec.metadata["code_path"].starts_with("/mnt/shared/common/code/quickstart/"));
}

#[test]
fn json_lists_the_manifest_and_the_warnings() {
    let ctx = TestContext::new("exportjson");
    let run = export(
        &ctx,
        Path::new("profiles/h20-8gpu.yaml"),
        Some(Path::new("profiles/jobs/grpo.yaml")),
        &["--json", "--pvc", PVC, "--image", IMAGE],
    )
    .code(0);
    let report = run.json();
    assert_eq!(report["exported"], true);
    assert_eq!(report["kind"], "RayJob");
    assert_eq!(report["refusals"], serde_json::json!([]));
    let job: RayJob = parse(report["manifest"].as_str().expect("manifest"));
    assert_eq!(job.metadata.name.as_deref(), report["name"].as_str());
    let warnings = report["warnings"].as_array().expect("warnings");
    let device_ids = warnings
        .iter()
        .find(|w| w["field"] == "workers[0].device_ids")
        .expect("device_ids warning");
    assert_eq!(device_ids["severity"], "warning");
    assert_eq!(
        (device_ids["line"].as_u64(), device_ids["column"].as_u64()),
        (Some(39), Some(17))
    );
}

/// A restart policy is argus's: the export says it is not carried, at its line.
#[test]
fn a_restart_policy_is_said_not_to_be_carried() {
    let ctx = TestContext::new("exportrestart");
    let grpo = std::fs::read_to_string("profiles/jobs/grpo.yaml").expect("grpo.yaml");
    let job = ctx.write("grpo.yaml", &format!("{grpo}restart: {{max: 2}}\n"));
    let restart_line = grpo.lines().count() + 1;
    let report = export(
        &ctx,
        Path::new("profiles/h20-8gpu.yaml"),
        Some(&job),
        &["--json", "--pvc", PVC, "--image", IMAGE],
    )
    .code(0)
    .json();
    let warning = report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .find(|w| w["field"] == "restart")
        .cloned()
        .expect("a restart warning");
    assert_eq!(warning["line"].as_u64(), Some(restart_line as u64));
    assert!(
        warning["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not carried"),
        "{warning}"
    );
}

/// One refusal: the files, the flags, and what stderr must say.
struct Refusal {
    what: &'static str,
    profile: String,
    jobspec: Option<String>,
    flags: Vec<&'static str>,
    says: &'static str,
}

#[test]
fn every_refusal_is_exit_2_names_its_line_and_writes_nothing() {
    let ctx = TestContext::new("exportrefuse");
    let nfs = "name: r\nimage: reg.example/ray:2.51.1\nshared: {nfs: {server: n, export: /e}}\nworkers: [{name: w, count: 1, cpus: 1, memory: 1g}]\n";
    let job = "workload: ppo\nsubmission_id: r1\ncode_path: /mnt/shared/common/code/verl/x\n";
    let cases = vec![
        Refusal {
            what: "host path",
            profile: std::fs::read_to_string("profiles/local.yaml").unwrap(),
            jobspec: None,
            flags: vec!["--image", IMAGE],
            says: "p.yaml:20:14: shared.host_path: a path on this host has no portable form",
        },
        Refusal {
            what: "local image",
            profile: nfs.replace("reg.example/ray:2.51.1", "argus/ray:2.51.1"),
            jobspec: None,
            flags: vec![],
            says: "p.yaml:2:8: image: argus/ray:2.51.1 is built on this host",
        },
        Refusal {
            what: "secret in the profile",
            profile: format!(
                "{nfs}submit: {{runtime_env: {{env_vars: {{WANDB_API_KEY: abc}}}}}}\n"
            ),
            jobspec: None,
            flags: vec![],
            says: "p.yaml:5:50: submit.runtime_env.env_vars.WANDB_API_KEY: `WANDB_API_KEY` is a secret",
        },
        Refusal {
            what: "token-shaped override",
            profile: nfs.into(),
            jobspec: Some(format!(
                "{job}overrides: {{trainer.key: hf_{}}}\n",
                "x".repeat(34)
            )),
            flags: vec![],
            says: "j.yaml:4:26: overrides.trainer.key: the value is a Hugging Face token",
        },
        Refusal {
            what: "password in a URL",
            profile: nfs.into(),
            jobspec: Some(format!(
                "{job}metadata: {{mirror: 'https://u:pw@m.example'}}\n"
            )),
            flags: vec![],
            says: "j.yaml:4:20: metadata.mirror: the value is a URL with a password",
        },
        Refusal {
            what: "a resource no node offers",
            profile: format!("{nfs}submit: {{entrypoint_resources: {{accelerator_h20: 1}}}}\n"),
            jobspec: Some(job.into()),
            flags: vec![],
            says: "p.yaml:5:32: submit.entrypoint_resources: no node offers accelerator_h20: 1",
        },
        Refusal {
            what: "group names that collide",
            profile: nfs.replace(
                "workers: [{name: w,",
                "workers: [{name: a_b, count: 1}, {name: a-b,",
            ),
            jobspec: None,
            flags: vec![],
            says: "p.yaml:4:41: workers[1].name: a-b is also the Kubernetes name of workers[0]",
        },
        Refusal {
            what: "an unknown snapshot",
            profile: "MOUNTED".into(),
            jobspec: Some("workload: ppo\ncode_id: nope\n".into()),
            flags: vec!["--image", IMAGE, "--pvc", PVC],
            says: "j.yaml:2:10: code_id: no snapshot nope",
        },
        Refusal {
            what: "a bad namespace",
            profile: nfs.into(),
            jobspec: None,
            flags: vec!["--namespace", "Team_A"],
            says: "--namespace: \"Team_A\" is not a valid name",
        },
        Refusal {
            what: "a bad claim",
            profile: nfs.into(),
            jobspec: None,
            flags: vec!["--pvc", "my claim"],
            says: "--pvc: \"my claim\" is not a valid name",
        },
        Refusal {
            what: "a RayConfig",
            profile: nfs.into(),
            jobspec: None,
            flags: vec!["--config", "x.yaml"],
            says: "--config does not apply to `argus export kuberay`",
        },
    ];
    let mounted = mounted_profile(&ctx);
    for case in cases {
        let profile = if case.profile == "MOUNTED" {
            mounted.clone()
        } else {
            ctx.write("p.yaml", &case.profile)
        };
        let jobspec = case.jobspec.as_ref().map(|text| ctx.write("j.yaml", text));
        let out = ctx.path("refused.yaml");
        let mut flags = case.flags.clone();
        let out_arg = out.to_str().expect("utf-8").to_string();
        flags.extend(["-o", out_arg.as_str()]);
        let mut argus = ctx.argus().env("XDG_DATA_HOME", ctx.path("xdg"));
        if !flags.contains(&"--config") {
            argus = argus.profile(&profile);
        }
        let mut argus = argus.args(["export", "kuberay"]);
        if let Some(j) = &jobspec {
            argus = argus.arg_path(j);
        }
        let run = argus.args(&flags).run();
        assert_eq!(run.code, 2, "{}: exit code\n{}", case.what, run.stderr);
        assert!(
            run.stderr.contains("error: "),
            "{}: {}",
            case.what,
            run.stderr
        );
        assert!(
            run.stderr.contains(case.says),
            "{}: stderr lacks {:?}\n{}",
            case.what,
            case.says,
            run.stderr
        );
        assert!(
            run.stdout.is_empty(),
            "{}: stdout {}",
            case.what,
            run.stdout
        );
        assert!(!out.exists(), "{}: nothing is written", case.what);
    }
}

/// Every character a YAML 1.1 or 1.2 reader takes for a line break or refuses as
/// non-printable (NUL aside: argus refuses it in any value), and a neighbour of each range.
fn awkward_chars() -> Vec<char> {
    let ranges = [
        0x01..=0x1F,
        0x7E..=0xA0,
        0x2027..=0x202A,
        0xD7FF..=0xD7FF,
        0xE000..=0xE000,
        0xFEFF..=0xFEFF,
        0xFFFD..=0xFFFF,
        0x10000..=0x10000,
    ];
    ranges
        .into_iter()
        .flatten()
        .filter_map(char::from_u32)
        .collect()
}

/// Values whose line breaks would make the rest keys of the RayJob or of a pod, each in
/// a one-line string and in a multi-line one (a block literal when it could be one).
fn injections(prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in awkward_chars() {
        let n = u32::from(c);
        out.push((format!("{prefix}_{n:X}_Q"), format!("x{c}suspend: true")));
        out.push((format!("{prefix}_{n:X}_N"), format!("x{c}  hostPID: true")));
        out.push((
            format!("{prefix}_{n:X}_L"),
            format!("echo a\n{c}suspend: true\n{c}- name: LD_PRELOAD\n"),
        ));
    }
    out
}

/// A YAML double-quoted scalar for the input files, every non-ASCII character escaped.
fn input_quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => out.extend(['\\', c]),
            ' '..='~' => out.push(c),
            c if u32::from(c) > 0xFFFF => out.push_str(&format!("\\U{:08X}", u32::from(c))),
            c => out.push_str(&format!("\\u{:04X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// What PyYAML's pure loader, its libyaml C loader and serde_yaml read from `file`, and
/// kubectl's reader (sigs.k8s.io/yaml) when kubectl is on PATH.
fn read_back(file: &Path) -> Vec<(&'static str, Value)> {
    const PYYAML: &str = r#"
import json, sys, yaml
assert yaml.__with_libyaml__, "PyYAML without libyaml: yaml.CSafeLoader is missing"
from yaml import CSafeLoader, SafeLoader
text = open(sys.argv[1], encoding="utf-8").read()
print(json.dumps({"pure": yaml.load(text, Loader=SafeLoader), "libyaml": yaml.load(text, Loader=CSafeLoader)}))
"#;
    let out = Command::new(crate::hydra::hydra_python())
        .args(["-c", PYYAML])
        .arg(file)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "PyYAML does not read {}:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut py: Value = serde_json::from_slice(&out.stdout).expect("JSON from python");
    let text = std::fs::read_to_string(file).expect("written");
    let mut readers = vec![
        ("PyYAML SafeLoader", py["pure"].take()),
        ("PyYAML CSafeLoader (libyaml)", py["libyaml"].take()),
        (
            "serde_yaml",
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("serde_yaml: {e}")),
        ),
    ];
    // kubectl reads the file offline with --local; the annotation it is given to set is
    // taken out again.
    match Command::new("kubectl")
        .args(["annotate", "--local", "-o", "json", "-f"])
        .arg(file)
        .arg("argus-readback=1")
        .env_remove("KUBECONFIG")
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "kubectl does not read {}:\n{}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let mut value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let annotations = value["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("annotations");
            assert_eq!(
                annotations,
                Some(serde_json::json!({"argus-readback": "1"}))
            );
            readers.push(("kubectl (sigs.k8s.io/yaml)", value));
        }
        Err(e) => eprintln!("kubectl not run ({e}): its YAML reader was not tried"),
    }
    readers
}

/// The first place two values differ, for a message that can be read.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(&format!("{path}.{k}"), p, q),
                (p, q) => Some(format!("{path}.{k}: {p:?} vs {q:?}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(&format!("{path}[{i}]"), p, q)),
        _ => (a != b).then(|| format!("{path}: {a:?} vs {b:?}")),
    }
}

/// A line break in an env value (the profile's `env`, a JobSpec's `env_vars`) stays in
/// that value for every reader of the export: the object read back is the one argus
/// meant, with no extra key and every value byte for byte, under PyYAML (pure and
/// libyaml), serde_yaml and kubectl. What argus meant is the same export with a plain
/// placeholder in each value, the placeholder replaced in what was read.
#[test]
fn env_values_with_line_breaks_read_back_as_written_by_every_reader() {
    let ctx = TestContext::new("exportbreaks");
    let profile_env = injections("P");
    let job_env = injections("J");
    let write = |tag: &str, value: &dyn Fn(&str, &str) -> String| {
        let env: Vec<String> = profile_env
            .iter()
            .map(|(k, v)| format!("  {k}: {}\n", value(k, v)))
            .collect();
        let vars: Vec<String> = job_env
            .iter()
            .map(|(k, v)| format!("  {k}: {}\n", value(k, v)))
            .collect();
        // The same file names (the JobSpec's is a label) in a directory of each own.
        ctx.write(&format!("{tag}/code/m.py"), "print(1)\n");
        let profile = ctx.write(
            &format!("{tag}/p.yaml"),
            &format!(
                "name: breaks\nimage: reg.example/ray:2.51.1\nshared: {{nfs: {{server: nfs.example, export: /export/argus}}}}\nworkers: [{{name: w, count: 1, cpus: 1, memory: 1g}}]\nenv:\n{}",
                env.concat()
            ),
        );
        let job = ctx.write(
            &format!("{tag}/j.yaml"),
            &format!(
                "workload: custom\nsubmission_id: breaks-1\ncode: {{source: code, name: m}}\nentrypoint: python3 -m m\nenv_vars:\n{}",
                vars.concat()
            ),
        );
        let out = ctx.path(&format!("{tag}/out.yaml"));
        export_to(&ctx, &profile, Some(&job), &out).code(0);
        out
    };
    let placeholder = |k: &str| format!("PLACEHOLDER_{k}");
    let plain = write("plain", &|k, _| placeholder(k));
    let written = write("breaks", &|_, v| input_quoted(v));

    let values: BTreeMap<String, &String> = profile_env
        .iter()
        .chain(&job_env)
        .map(|(k, v)| (placeholder(k), v))
        .collect();
    fn substitute(v: &mut Value, values: &BTreeMap<String, &String>) {
        match v {
            Value::String(s) => {
                if let Some(value) = values.get(s.as_str()) {
                    *s = value.to_string();
                } else {
                    // Inside runtimeEnvYAML, a JSON document: each as serde_json writes it.
                    for (p, value) in values {
                        let quoted = format!("\"{p}\"");
                        if s.contains(&quoted) {
                            *s = s.replace(&quoted, &serde_json::to_string(value).expect("json"));
                        }
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| substitute(i, values)),
            Value::Object(map) => map.values_mut().for_each(|i| substitute(i, values)),
            _ => {}
        }
    }
    let mut meant: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&plain).expect("written")).expect("yaml");
    substitute(&mut meant, &values);
    // The placeholders were all there to replace: every env value is in what argus meant.
    let meant_text = meant.to_string();
    assert!(!meant_text.contains("PLACEHOLDER_"), "{meant_text}");

    let readers = read_back(&written);
    assert!(readers.len() >= 3);
    for (reader, value) in readers {
        if let Some(diff) = first_difference("", &meant, &value) {
            panic!("{reader} reads something else than argus meant: {diff}");
        }
    }
}
