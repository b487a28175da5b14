//! The head and worker groups: each node's pod template, `rayStartParams` and Ray
//! resources, from the Docker plan of the same profile (the containers `argus up` makes).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, NFSVolumeSource,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Options;
use super::names::dns1123_subdomain;
use super::types::*;
use crate::cluster::plan::{ContainerPlan, GpuAttach};
use crate::config::LoadedProfile;
use crate::config::profile::GpuMode;
use crate::config::size::ByteSize;
use crate::config::yaml::Seg;
use crate::export::{Findings, quantity};
use crate::secrets::is_secret_name;
use crate::yaml_path;

/// The shared storage as a pod volume: `--pvc`, else the profile's NFS export.
pub(super) fn shared_volume(
    loaded: &LoadedProfile,
    options: &Options,
    f: &mut Findings,
) -> Option<Volume> {
    let shared = &loaded.profile.shared;
    let src = &loaded.source;
    if let Some(claim) = &options.pvc {
        return Some(Volume {
            name: SHARED_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    if let Some(nfs) = shared.nfs() {
        if let Some(opts) = &nfs.options {
            f.warn(src, &yaml_path!["shared", "nfs", "options"], format!("not carried: an inline nfs volume takes no mount options ({opts}); the node mounts it with its defaults"))
                .set_hint("a PersistentVolume with these mountOptions, bound to a claim: --pvc CLAIM");
        }
        return Some(Volume {
            name: SHARED_VOLUME.into(),
            nfs: Some(NFSVolumeSource {
                server: nfs.server.to_string(),
                path: nfs.export.to_string(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    f.refuse(src, &yaml_path!["shared", "host_path"], "a path on this host has no portable form: pods run on other machines, which would each see their own directory")
        .set_hint("--pvc CLAIM (a PersistentVolumeClaim bound to the storage this path mounts, e.g. its NFS export), or shared.nfs in the profile");
    None
}

/// The containers' environment, from the Docker plan (one name, one entry, sorted), with
/// `HF_TOKEN` taken from a Secret. Secret-named values never get here (they are refused);
/// they are left out all the same.
fn env_list(env: &BTreeMap<String, String>, hf_secret: Option<&str>) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = env
        .iter()
        .filter(|(name, _)| !is_secret_name(name))
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            value_from: None,
        })
        .collect();
    if let Some(secret) = hf_secret {
        out.push(EnvVar {
            name: HF_TOKEN_KEY.into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_string(),
                    key: HF_TOKEN_KEY.into(),
                    optional: None,
                }),
                ..Default::default()
            }),
        });
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

pub(super) struct GroupContext<'a> {
    pub(super) image: &'a str,
    /// The Secret holding HF_TOKEN, if any; each node's env is its own plan's (the
    /// profile's `env` with the head's or its group's `env` over it).
    pub(super) hf_secret: Option<&'a str>,
    pub(super) shared: Option<&'a Volume>,
    pub(super) mount: &'a str,
    pub(super) labels: &'a BTreeMap<String, String>,
}

/// One node kind's resources, and where the profile writes them.
struct Node<'a> {
    container: &'a str,
    plan: &'a ContainerPlan,
    gpus: u32,
    object_store: Option<ByteSize>,
    at: Vec<Seg>,
}

pub(super) fn head_group(
    loaded: &LoadedProfile,
    head: &ContainerPlan,
    cx: &GroupContext,
    f: &mut Findings,
) -> HeadGroupSpec {
    let node = Node {
        container: "ray-head",
        plan: head,
        gpus: 0,
        object_store: loaded.profile.head.object_store_memory,
        at: yaml_path!["head"].to_vec(),
    };
    let (template, ray_start_params, resources) = node_spec(loaded, &node, cx, f);
    HeadGroupSpec {
        ray_start_params,
        resources,
        template,
    }
}

pub(super) fn worker_groups(
    loaded: &LoadedProfile,
    containers: &[ContainerPlan],
    cx: &GroupContext,
    pod_prefix: &str,
    f: &mut Findings,
) -> Vec<WorkerGroupSpec> {
    let src = &loaded.source;
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (g, group) in loaded.profile.workers.iter().enumerate() {
        let Some(first) = containers
            .iter()
            .find(|c| c.group.as_deref() == Some(group.name.as_str()))
        else {
            continue;
        };
        let at = |key: &str| yaml_path!["workers", g, key].to_vec();
        let group_name = group.name.replace('_', "-");
        if group_name != group.name {
            f.warn(
                src,
                &at("name"),
                format!("named {group_name} in Kubernetes: pod names cannot hold '_'"),
            );
        }
        if let Some(other) = names.insert(group_name.clone(), g) {
            f.refuse(
                src,
                &at("name"),
                format!("{group_name} is also the Kubernetes name of workers[{other}]"),
            )
            .set_hint("group names that differ in more than '_' and '-'");
        }
        let pod = format!("{pod_prefix}-{group_name}")
            .chars()
            .take(50)
            .collect::<String>()
            + "-worker-abcde";
        if !dns1123_subdomain(&pod) {
            f.refuse(
                src,
                &at("name"),
                format!(
                    "KubeRay would name this group's pods like {pod}, which Kubernetes refuses"
                ),
            )
            .set_hint("a group name of lower-case letters, digits and '-'");
        }
        match group.gpu_mode {
            GpuMode::Simulated if group.gpus > 0 => {
                f.warn(src, &at("gpu_mode"), format!("simulated: no GPU is requested from Kubernetes; Ray advertises {} logical GPU(s) per worker", group.gpus));
            }
            _ => {}
        }
        if group.device_ids.is_some() {
            f.warn(
                src,
                &at("device_ids"),
                "not carried: the device plugin chooses which GPUs a pod gets",
            );
        }
        for key in ["host", "hosts"] {
            let given = match key {
                "host" => group.host.is_some(),
                _ => group.hosts.is_some(),
            };
            if given {
                f.warn(
                    src,
                    &at(key),
                    "not carried: Kubernetes decides where the pods run",
                );
            }
        }
        let node = Node {
            container: "ray-worker",
            plan: first,
            gpus: group.gpus,
            object_store: group.object_store_memory,
            at: yaml_path!["workers", g].to_vec(),
        };
        let (template, ray_start_params, resources) = node_spec(loaded, &node, cx, f);
        let count = i32::try_from(group.count()).unwrap_or(i32::MAX);
        out.push(WorkerGroupSpec {
            group_name,
            replicas: count,
            min_replicas: count,
            max_replicas: count,
            ray_start_params,
            resources,
            template,
        });
    }
    out
}

/// A node's pod template, `rayStartParams` and Ray resources.
fn node_spec(
    loaded: &LoadedProfile,
    node: &Node,
    cx: &GroupContext,
    f: &mut Findings,
) -> (
    PodTemplateSpec,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
) {
    let limits = limits(loaded, node, f);
    let (volumes, mounts) = volumes(node.plan, cx);
    let (ray_start_params, resources) = ray_resources(loaded, node, f);
    let env = env_list(&node.plan.env, cx.hf_secret);
    let requirements = (!limits.is_empty()).then(|| ResourceRequirements {
        limits: Some(limits.clone()),
        requests: Some(limits),
        ..Default::default()
    });
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(cx.labels.clone()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: node.container.into(),
                image: Some(cx.image.to_string()),
                env: (!env.is_empty()).then_some(env),
                resources: requirements,
                volume_mounts: (!mounts.is_empty()).then_some(mounts),
                ..Default::default()
            }],
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..Default::default()
        }),
    };
    (template, ray_start_params, resources)
}

/// Where the profile writes `key` of this node.
fn field(node: &Node, key: &str) -> Vec<Seg> {
    let mut at = node.at.clone();
    at.push(Seg::Key(key.into()));
    at
}

/// The container's CPU, memory and GPU limits (requested as much as limited).
fn limits(loaded: &LoadedProfile, node: &Node, f: &mut Findings) -> BTreeMap<String, Quantity> {
    let src = &loaded.source;
    let plan = node.plan;
    let mut limits = BTreeMap::new();
    match plan.cpus {
        Some(cpus) => match quantity::cpus(cpus) {
            Some(q) => {
                limits.insert("cpu".to_string(), Quantity(q));
            }
            None => {
                f.refuse(
                    src,
                    &field(node, "cpus"),
                    format!("{cpus} CPUs is finer than Kubernetes' millicore"),
                );
            }
        },
        None => {
            f.warn(
                src,
                &node.at,
                "no cpus: the pods request no CPU and Ray counts every CPU of the node",
            );
        }
    }
    match plan.memory {
        Some(bytes) => {
            limits.insert(
                "memory".to_string(),
                Quantity(quantity::bytes(ByteSize(bytes))),
            );
        }
        None => {
            f.warn(
                src,
                &node.at,
                "no memory: the pods request no memory and have no limit",
            );
        }
    }
    match &plan.gpu {
        GpuAttach::Nvidia { .. } => {
            limits.insert(
                "nvidia.com/gpu".to_string(),
                Quantity(node.gpus.to_string()),
            );
        }
        GpuAttach::Amd { .. } => {
            limits.insert("amd.com/gpu".to_string(), Quantity(node.gpus.to_string()));
        }
        GpuAttach::None | GpuAttach::Simulated { .. } => {}
    }
    limits
}

/// The shared storage and a sized `/dev/shm`, as volumes and the container's mounts.
fn volumes(plan: &ContainerPlan, cx: &GroupContext) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(shared) = cx.shared {
        volumes.push(shared.clone());
        mounts.push(VolumeMount {
            name: SHARED_VOLUME.into(),
            mount_path: cx.mount.to_string(),
            ..Default::default()
        });
    }
    if let Some(shm) = plan.shm_size {
        volumes.push(Volume {
            name: SHM_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity(quantity::bytes(ByteSize(shm)))),
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: SHM_VOLUME.into(),
            mount_path: "/dev/shm".into(),
            ..Default::default()
        });
    }
    (volumes, mounts)
}

/// `rayStartParams` and the group's Ray resources (GPUs, advertised CPUs, the profile's own).
fn ray_resources(
    loaded: &LoadedProfile,
    node: &Node,
    f: &mut Findings,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let src = &loaded.source;
    let plan = node.plan;
    let mut ray_start_params =
        BTreeMap::from([("disable-usage-stats".to_string(), "true".to_string())]);
    if let Some(store) = node.object_store {
        ray_start_params.insert("object-store-memory".into(), store.0.to_string());
    }
    // `ray_cpus`: the CPUs the node advertises, when they are not its container's limit
    // (KubeRay would take the pod's CPU limit, as `argus up` takes `cpus`). Like the GPUs,
    // they go into the group's resources: KubeRay refuses num-cpus beside them.
    let advertised = plan
        .command
        .iter()
        .find_map(|w| w.strip_prefix("--num-cpus="))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| plan.cpus.is_none_or(|c| c.ceil().max(1.0) as u64 != *n));
    // KubeRay refuses num-gpus in rayStartParams next to group resources, so the GPU
    // count (0 on the head and on CPU workers, as `argus up` passes --num-gpus) goes here.
    let mut resources = BTreeMap::from([("GPU".to_string(), node.gpus.to_string())]);
    if let Some(n) = advertised {
        resources.insert("CPU".to_string(), n.to_string());
    }
    for (name, amount) in &plan.expect.resources {
        match quantity::decimal(*amount) {
            Some(q) => {
                resources.insert(name.clone(), q);
            }
            None => {
                f.refuse(
                    src,
                    &field(node, "resources"),
                    format!("resource {name} = {amount} is not a quantity"),
                );
            }
        }
    }
    (ray_start_params, resources)
}
