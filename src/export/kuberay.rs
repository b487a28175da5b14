//! KubeRay objects from a profile and a resolved job. Pure: values in, objects (and YAML)
//! out, with what could not be carried (refusals) or is carried differently (warnings).
//!
//! With a job: a `RayJob` whose `rayClusterSpec` is the profile's cluster and whose
//! entrypoint, runtime env, resources and metadata are the submission `argus submit` sends
//! (the same strings: the operator sends them to the Jobs API itself, [`SUBMISSION_MODE`]).
//! Without one: a `RayCluster` for one long-lived cluster. The node resources, the
//! environment and the shared-storage mount come from the Docker plan of the same profile
//! ([`crate::cluster::plan`]), so the pods are the containers `argus up` would create.
//! KubeRay v1.7.0's API; `--kuberay-version` 1.5 and 1.6 leave out what they lack.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, NFSVolumeSource,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Finding, Findings, Severity, looks_secret_name, quantity};
use crate::cluster::plan::{self, ContainerPlan, GpuAttach, PlanInputs};
use crate::config::LoadedProfile;
use crate::config::jobspec::JobSpec;
use crate::config::profile::{AuthMode, GpuMode, NetworkMode};
use crate::config::size::ByteSize;
use crate::config::yaml::{Seg, Source};
use crate::submit::Prepared;
use crate::yaml_path;

pub const API_VERSION: &str = "ray.io/v1";
/// The pod volume of the shared storage, and of `/dev/shm` when the profile sizes it.
pub const SHARED_VOLUME: &str = "argus-shared";
pub const SHM_VOLUME: &str = "argus-shm";
/// How long a finished RayJob keeps its cluster (to read its dashboard) before KubeRay
/// deletes it.
pub const TTL_AFTER_FINISHED_S: i32 = 600;
/// The key of `--hf-token-secret`'s Secret that holds the token.
pub const HF_TOKEN_KEY: &str = "HF_TOKEN";
/// The key KubeRay reads the Ray token from, in the Secret `authOptions.secretName` names.
pub const AUTH_TOKEN_KEY: &str = "auth_token";
/// The longest RayJob name: KubeRay appends `-xxxxx` for its cluster (53 at most).
pub const MAX_RAYJOB_NAME: usize = 47;
pub const MAX_RAYCLUSTER_NAME: usize = 53;
/// How KubeRay submits the job: the operator POSTs the RayJob's entrypoint, runtime env,
/// metadata and entrypoint resources to the head's Jobs API, the request `argus submit`
/// sends, so the driver's shell runs the entrypoint string as it is. (`K8sJobMode` pastes
/// the entrypoint into a submitter pod's bash line and `ray job submit` joins the words
/// again: a shell reads it twice, so the `&&` of the working-directory prefix would run in
/// the submitter pod, and quoting them for it breaks every engine that reads it once.)
pub const SUBMISSION_MODE: &str = "HTTPMode";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RayJob {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: RayJobSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RayJobSpec {
    pub entrypoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_num_cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_num_gpus: Option<f64>,
    /// JSON, as `ray job submit --entrypoint-resources` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_resources: Option<String>,
    #[serde(rename = "runtimeEnvYAML")]
    pub runtime_env_yaml: String,
    pub job_id: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    pub submission_mode: String,
    pub shutdown_after_job_finishes: bool,
    pub ttl_seconds_after_finished: i32,
    pub backoff_limit: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_running_deadline_seconds: Option<i32>,
    pub ray_cluster_spec: RayClusterSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RayCluster {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: RayClusterSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RayClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_options: Option<AuthOptions>,
    pub head_group_spec: HeadGroupSpec,
    pub worker_group_specs: Vec<WorkerGroupSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthOptions {
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeadGroupSpec {
    pub ray_start_params: BTreeMap<String, String>,
    /// Ray resources of the node (KubeRay ≥ 1.5 turns them into `ray start` flags).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
    pub template: PodTemplateSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerGroupSpec {
    pub group_name: String,
    pub replicas: i32,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub ray_start_params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
    pub template: PodTemplateSpec,
}

/// The exported object.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    RayJob(Box<RayJob>),
    RayCluster(Box<RayCluster>),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::RayJob(_) => "RayJob",
            Object::RayCluster(_) => "RayCluster",
        }
    }
    pub fn name(&self) -> &str {
        let meta = match self {
            Object::RayJob(job) => &job.metadata,
            Object::RayCluster(cluster) => &cluster.metadata,
        };
        meta.name.as_deref().unwrap_or_default()
    }
    pub fn to_value(&self) -> serde_json::Value {
        // Plain data (strings, numbers, maps): serializing it cannot fail.
        match self {
            Object::RayJob(job) => serde_json::to_value(job),
            Object::RayCluster(cluster) => serde_json::to_value(cluster),
        }
        .unwrap_or_default()
    }
}

/// The KubeRay operator the objects are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V1_5,
    V1_6,
    V1_7,
}

impl Version {
    pub const NAMES: [&'static str; 3] = ["1.5", "1.6", "1.7"];

    /// `1.7`, `v1.7`, `1.7.0`.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let (major, minor) = (parts.next()?, parts.next()?);
        if parts.next().is_some_and(|p| p.parse::<u32>().is_err()) || parts.next().is_some() {
            return None;
        }
        match (major, minor) {
            ("1", "5") => Some(Version::V1_5),
            ("1", "6") => Some(Version::V1_6),
            ("1", "7") => Some(Version::V1_7),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_5 => "1.5",
            Version::V1_6 => "1.6",
            Version::V1_7 => "1.7",
        }
    }
}

/// What the flags say.
#[derive(Debug, Clone)]
pub struct Options {
    /// The image the cluster pulls (the profile's when None).
    pub image: Option<String>,
    /// A PersistentVolumeClaim for the shared storage, instead of the profile's.
    pub pvc: Option<String>,
    pub namespace: Option<String>,
    /// A Secret whose key `HF_TOKEN` becomes every container's `HF_TOKEN`.
    pub hf_token_secret: Option<String>,
    /// A Secret whose key `auth_token` holds the Ray token (`ray.auth: token`).
    pub auth_secret: Option<String>,
    /// A Kueue LocalQueue.
    pub queue: Option<String>,
    pub version: Version,
    pub backoff_limit: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: None,
            pvc: None,
            namespace: None,
            hf_token_secret: None,
            auth_secret: None,
            queue: None,
            version: Version::V1_7,
            backoff_limit: 0,
        }
    }
}

/// A JobSpec as written (for locations) and as resolved by `submit::prepare`.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub source: &'a Source,
    pub spec: &'a JobSpec,
    pub prepared: &'a Prepared,
}

/// The object (None when anything was refused) and every finding.
#[derive(Debug, Clone)]
pub struct Built {
    pub object: Option<Object>,
    pub findings: Vec<Finding>,
}

/// The comment line at the top of the YAML.
pub fn header(profile: &LoadedProfile, jobspec: Option<&Path>, options: &Options) -> String {
    let job = jobspec
        .and_then(Path::file_name)
        .map(|n| format!(", JobSpec {}", n.to_string_lossy()))
        .unwrap_or_default();
    format!(
        "# {} export kuberay (KubeRay {}): profile {}{job}\n",
        crate::http::USER_AGENT,
        options.version.as_str(),
        profile.profile.name
    )
}

/// Builds the RayJob (with a job) or RayCluster of a profile.
pub fn build(loaded: &LoadedProfile, job: Option<&Job>, options: &Options) -> Built {
    let mut f = Findings::default();
    let p = &loaded.profile;
    let src = &loaded.source;
    check_flags(options, &mut f);

    let image = image(loaded, options, &mut f);
    let ray_version = ray_version(&image).or_else(|| ray_version(&p.image));
    if ray_version.is_none() {
        f.warn(
            src,
            &yaml_path!["image"],
            format!("the Ray version of {image} is not in its tag: rayVersion is left out"),
        );
    }
    let auth_options = auth(loaded, options, ray_version, &mut f);
    let shared = shared_volume(loaded, options, &mut f);
    docker_only(loaded, options, job.is_some(), &mut f);

    let docker_plan = plan::plan(loaded, &PlanInputs::default());
    let Some(head_plan) = docker_plan.containers.first() else {
        f.push(Finding::general(
            Severity::Refusal,
            "head",
            "the profile plans no head",
        ));
        return Built {
            object: None,
            findings: f.into_vec(),
        };
    };

    let name = match job {
        Some(job) => dns1035(&job.prepared.submission_id, MAX_RAYJOB_NAME, "job-"),
        None => dns1035(&p.name, MAX_RAYCLUSTER_NAME, "ray-"),
    };
    let pod_labels = labels(loaded, job);
    let group_context = GroupContext {
        image: &image,
        hf_secret: options.hf_token_secret.as_deref(),
        shared: shared.as_ref(),
        mount: &p.shared.mount,
        labels: &pod_labels,
    };
    let head = head_group(loaded, head_plan, &group_context, &mut f);
    let pod_prefix = match job {
        Some(_) => format!("{name}-abcde"),
        None => name.clone(),
    };
    let workers = worker_groups(
        loaded,
        &docker_plan.containers,
        &group_context,
        &pod_prefix,
        &mut f,
    );
    let cluster_spec = RayClusterSpec {
        ray_version: ray_version.map(|v| v.to_string()),
        auth_options,
        head_group_spec: head,
        worker_group_specs: workers,
    };

    let mut object_labels = pod_labels.clone();
    if let Some(queue) = &options.queue {
        object_labels.insert("kueue.x-k8s.io/queue-name".into(), queue.clone());
    }
    let metadata = ObjectMeta {
        name: Some(name),
        namespace: options.namespace.clone(),
        labels: Some(object_labels),
        ..Default::default()
    };
    let object = match job {
        Some(job) => {
            let spec = job_spec(
                loaded,
                job,
                options,
                cluster_spec,
                &docker_plan.containers,
                &mut f,
            );
            Object::RayJob(Box::new(RayJob {
                api_version: API_VERSION.into(),
                kind: "RayJob".into(),
                metadata,
                spec,
            }))
        }
        None => Object::RayCluster(Box::new(RayCluster {
            api_version: API_VERSION.into(),
            kind: "RayCluster".into(),
            metadata,
            spec: cluster_spec,
        })),
    };
    Built {
        object: (!f.has_refusals()).then_some(object),
        findings: f.into_vec(),
    }
}

/// A flag, its value, the rule it must meet, and what would be valid.
type FlagCheck<'a> = (
    &'static str,
    Option<&'a String>,
    fn(&str) -> bool,
    &'static str,
);

fn check_flags(options: &Options, f: &mut Findings) {
    let checks: [FlagCheck; 5] = [
        (
            "--pvc",
            options.pvc.as_ref(),
            dns1123_subdomain,
            "a PersistentVolumeClaim name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--namespace",
            options.namespace.as_ref(),
            dns1123_label,
            "a namespace: lower-case letters, digits and '-', at most 63",
        ),
        (
            "--hf-token-secret",
            options.hf_token_secret.as_ref(),
            dns1123_subdomain,
            "a Secret name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--auth-secret",
            options.auth_secret.as_ref(),
            dns1123_subdomain,
            "a Secret name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--queue",
            options.queue.as_ref(),
            label_value_ok,
            "a LocalQueue name usable as a label value",
        ),
    ];
    for (flag, value, ok, valid) in checks {
        if let Some(value) = value
            && !ok(value)
        {
            f.push(
                Finding::general(
                    Severity::Refusal,
                    flag,
                    format!("{value:?} is not a valid name"),
                )
                .hint(valid),
            );
        }
    }
    if let Some(image) = &options.image
        && (image.trim().is_empty() || image.contains(char::is_whitespace))
    {
        f.push(
            Finding::general(
                Severity::Refusal,
                "--image",
                format!("{image:?} is not an image reference"),
            )
            .hint("registry.example/argus/ray:2.51.1 or registry.example/argus/ray@sha256:..."),
        );
    }
    if i32::try_from(options.backoff_limit).is_err() {
        f.push(Finding::general(
            Severity::Refusal,
            "--backoff-limit",
            "too large",
        ));
    }
}

/// The image every container runs: `--image`, else the profile's unless only this host
/// has it (argus builds `argus/ray:<version>` locally, without a registry).
fn image(loaded: &LoadedProfile, options: &Options, f: &mut Findings) -> String {
    let p = &loaded.profile;
    if let Some(image) = &options.image {
        return image.clone();
    }
    if p.image.starts_with("argus/") || p.image.starts_with("localhost/") {
        f.refuse(&loaded.source, &yaml_path!["image"], format!("{} is built on this host by `argus image build`: no Kubernetes node can pull it", p.image))
            .set_hint("push it to a registry the cluster pulls from and pass --image REF (a digest, repo@sha256:..., as a run lock records it, pins it)");
    }
    p.image.clone()
}

/// A Ray version in an image's tag: `argus/ray:2.51.1`, `rayproject/ray:2.51.1-py311-gpu`.
pub fn ray_version(image: &str) -> Option<RayVersion> {
    let name = image.split('@').next()?;
    let last = name.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    let end = tag
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(tag.len());
    let mut parts = tag[..end].split('.').filter(|p| !p.is_empty());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some(RayVersion(major, minor, patch))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RayVersion(pub u32, pub u32, pub u32);

impl std::fmt::Display for RayVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// `ray.auth: token` as `authOptions` with the token in a Secret of the user's.
fn auth(
    loaded: &LoadedProfile,
    options: &Options,
    ray: Option<RayVersion>,
    f: &mut Findings,
) -> Option<AuthOptions> {
    let src = &loaded.source;
    let at = yaml_path!["ray", "auth"];
    if loaded.profile.ray.auth == AuthMode::Disabled {
        if options.auth_secret.is_some() {
            f.push(Finding::general(
                Severity::Warning,
                "--auth-secret",
                "ignored: the profile's ray.auth is disabled",
            ));
        }
        return None;
    }
    if options.version < Version::V1_6 {
        f.refuse(src, &at, format!("KubeRay {} cannot take the token from a Secret (authOptions.secretName is KubeRay 1.6+)", options.version.as_str()))
            .set_hint("--kuberay-version 1.6 or later, or ray.auth: disabled");
    }
    match ray {
        Some(v) if v < RayVersion(2, 52, 0) => {
            f.refuse(src, &at, format!("token auth needs Ray 2.52 or later; the image has Ray {v}"))
                .set_hint("an image with Ray ≥ 2.52 (argus image build --ray-version 2.52.0, pushed, then --image), or ray.auth: disabled");
        }
        Some(_) => {}
        None => {
            f.refuse(
                src,
                &at,
                "token auth needs Ray 2.52 or later, and the image's Ray version is not in its tag",
            )
            .set_hint(
                "an image tag that carries the Ray version, e.g. registry.example/argus/ray:2.52.0",
            );
        }
    }
    if options.auth_secret.is_none() {
        f.refuse(src, &at, "token auth needs --auth-secret NAME: the Secret whose key auth_token holds the cluster's token")
            .set_hint(format!("kubectl create secret generic ray-token --from-literal={AUTH_TOKEN_KEY}=\"${}\"; --auth-secret ray-token", loaded.profile.ray.token_env));
    }
    Some(AuthOptions {
        mode: "token".into(),
        secret_name: options.auth_secret.clone(),
    })
}

/// The shared storage as a pod volume: `--pvc`, else the profile's NFS export.
fn shared_volume(loaded: &LoadedProfile, options: &Options, f: &mut Findings) -> Option<Volume> {
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

/// Warnings for what a Kubernetes cluster does its own way.
fn docker_only(loaded: &LoadedProfile, options: &Options, job: bool, f: &mut Findings) {
    let p = &loaded.profile;
    let src = &loaded.source;
    if p.network.mode == NetworkMode::Host {
        f.warn(src, &yaml_path!["network", "mode"], "host networking is not carried: each pod has its own network, and KubeRay connects the workers to the head through its Service");
    }
    if p.docker.host.is_some() {
        f.warn(
            src,
            &yaml_path!["docker", "host"],
            "not carried: Kubernetes decides where the pods run",
        );
    }
    if !p.hosts.is_empty() {
        f.warn(
            src,
            &yaml_path!["hosts"],
            "not carried: Kubernetes decides where the pods run (head.host and the groups' hosts too)",
        );
    }
    f.warn(src, &yaml_path!["ray", "dashboard_bind"], format!(
        "not carried: the dashboard and Jobs API (which run code for anyone who reaches them) are served by the head's Service to the whole cluster network, not on {} of one host",
        p.ray.dashboard_bind
    ))
    .set_hint("reach them with `kubectl port-forward`; keep other pods away with a NetworkPolicy");
    for (key, port, default) in [
        ("gcs_port", p.ray.gcs_port, 6379),
        ("dashboard_port", p.ray.dashboard_port, 8265),
    ] {
        if port != default {
            f.warn(
                src,
                &yaml_path!["ray", key],
                format!("not carried: KubeRay serves it on {default} behind the head's Service"),
            );
        }
    }
    let retries = match job {
        true => format!(
            ", and a RayJob whose job fails is retried {} time(s) on a new cluster (--backoff-limit)",
            options.backoff_limit
        ),
        false => String::new(),
    };
    f.push(Finding::general(Severity::Warning, "restart policy", format!(
        "Docker restarts a dead Ray container in place (unless-stopped); KubeRay replaces a failed pod with a new Ray node{retries}"
    )));
    if !p.prepare.datasets.is_empty() || !p.prepare.models.is_empty() {
        f.warn(
            src,
            &yaml_path!["prepare"],
            "not carried: the datasets and models must already be on the volume the pods mount",
        )
        .set_hint("argus prepare, from a machine that mounts the shared storage");
    }
}

/// The containers' environment, from the Docker plan (one name, one entry, sorted), with
/// `HF_TOKEN` taken from a Secret. Secret-named values never get here (they are refused);
/// they are left out all the same.
fn env_list(env: &BTreeMap<String, String>, hf_secret: Option<&str>) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = env
        .iter()
        .filter(|(name, _)| !looks_secret_name(name))
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

/// Labels on the object and on every pod: who made it, from what.
fn labels(loaded: &LoadedProfile, job: Option<&Job>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "argus".to_string(),
        ),
        (
            "argus/profile".to_string(),
            label_value(&loaded.profile.name),
        ),
    ]);
    if let Some(job) = job {
        let stem = job
            .source
            .origin
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        labels.insert("argus/jobspec".into(), label_value(&stem));
        labels.insert("argus/workload".into(), job.spec.workload.as_str().into());
        labels.insert(
            "argus/submission-id".into(),
            label_value(&job.prepared.submission_id),
        );
        if let Some(code_id) = &job.prepared.code_id {
            labels.insert("argus/code-id".into(), label_value(code_id));
        }
    }
    labels.retain(|_, v| !v.is_empty());
    labels
}

struct GroupContext<'a> {
    image: &'a str,
    /// The Secret holding HF_TOKEN, if any; each node's env is its own plan's (the
    /// profile's `env` with the head's or its group's `env` over it).
    hf_secret: Option<&'a str>,
    shared: Option<&'a Volume>,
    mount: &'a str,
    labels: &'a BTreeMap<String, String>,
}

/// One node kind's resources, and where the profile writes them.
struct Node<'a> {
    container: &'a str,
    plan: &'a ContainerPlan,
    gpus: u32,
    object_store: Option<ByteSize>,
    at: Vec<Seg>,
}

fn head_group(
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

fn worker_groups(
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
    let src = &loaded.source;
    let field = |key: &str| {
        let mut at = node.at.clone();
        at.push(Seg::Key(key.into()));
        at
    };
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
                    &field("cpus"),
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

    let env = env_list(&plan.env, cx.hf_secret);
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
                    &field("resources"),
                    format!("resource {name} = {amount} is not a quantity"),
                );
            }
        }
    }

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

/// The job: the submission `argus submit` would send, as KubeRay's fields.
fn job_spec(
    loaded: &LoadedProfile,
    job: &Job,
    options: &Options,
    cluster: RayClusterSpec,
    containers: &[ContainerPlan],
    f: &mut Findings,
) -> RayJobSpec {
    let prepared = job.prepared;
    let payload = &prepared.payload;
    let src = job.source;
    let profile_src = &loaded.source;

    let strings = |value: &serde_json::Value| -> BTreeMap<String, String> {
        value
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let metadata = strings(&payload["metadata"]);
    // The payload's runtime env as it is (JSON is YAML): the operator sends it back to the
    // Jobs API unchanged, and Ray expands `${VAR}` in it on the driver's node, as for submit.
    let runtime_env_yaml =
        serde_json::to_string_pretty(&payload["runtime_env"]).unwrap_or_default() + "\n";

    let entrypoint_resources: BTreeMap<String, f64> = payload["entrypoint_resources"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    let resources_at = yaml_path!["submit", "entrypoint_resources"];
    if entrypoint_resources.is_empty() {
        f.warn(profile_src, &resources_at, "empty: the driver may run on the head, which argus keeps for the GCS and the dashboard")
            .set_hint("entrypoint_resources: {worker_node: 1}");
    }
    for (name, amount) in &entrypoint_resources {
        let offered = containers.iter().any(|c| {
            c.expect
                .resources
                .get(name)
                .is_some_and(|have| have >= amount)
        });
        if !offered {
            f.refuse(profile_src, &resources_at, format!("no node offers {name}: {amount}, so the driver would wait forever"))
                .set_hint("worker_node: 1 (every worker has it), or a resource a worker group's `resources` declares");
        }
    }
    let entrypoint_resources = (!entrypoint_resources.is_empty())
        .then(|| crate::cluster::plan::resources_json(&entrypoint_resources));

    let active_deadline_seconds = prepared.time_limit_s.and_then(|s| {
        let seconds = i32::try_from(s).ok();
        match seconds {
            Some(_) => {
                f.warn(src, &yaml_path!["time_limit"], format!("→ activeDeadlineSeconds {s}: Kubernetes counts it from the RayJob's start, the cluster's start-up included"));
            }
            None => {
                f.refuse(src, &yaml_path!["time_limit"], "longer than activeDeadlineSeconds can hold (about 68 years)");
            }
        }
        seconds
    });
    let ready = loaded.profile.ray.ready_timeout_s;
    let pre_running_deadline_seconds = if options.version >= Version::V1_6 {
        i32::try_from(ready).ok()
    } else {
        f.warn(
            profile_src,
            &yaml_path!["ray", "ready_timeout_s"],
            format!(
                "not carried: KubeRay {} has no preRunningDeadlineSeconds",
                options.version.as_str()
            ),
        );
        None
    };

    RayJobSpec {
        entrypoint: prepared.entrypoint.clone(),
        entrypoint_num_cpus: payload["entrypoint_num_cpus"].as_f64(),
        entrypoint_num_gpus: payload["entrypoint_num_gpus"].as_f64(),
        entrypoint_resources,
        runtime_env_yaml,
        job_id: prepared.submission_id.clone(),
        metadata,
        submission_mode: SUBMISSION_MODE.into(),
        shutdown_after_job_finishes: true,
        ttl_seconds_after_finished: TTL_AFTER_FINISHED_S,
        backoff_limit: i32::try_from(options.backoff_limit).unwrap_or(0),
        active_deadline_seconds,
        pre_running_deadline_seconds,
        ray_cluster_spec: cluster,
    }
}

/// A DNS-1035 label of at most `max` characters for `raw`: itself when it already is one;
/// otherwise lower-cased, other characters as `-`, `prefix` in front when it does not
/// start with a letter, and a short hash of `raw` at the end, so that two ids never map to
/// one name.
pub fn dns1035(raw: &str, max: usize, prefix: &str) -> String {
    if dns1035_label(raw) && raw.len() <= max {
        return raw.to_string();
    }
    let mut name = String::new();
    for c in raw.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("{prefix}{name}");
    }
    let hash: String = Sha256::digest(raw.as_bytes())
        .iter()
        .take(3)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = max.saturating_sub(hash.len() + 1);
    let base: String = name.chars().take(keep).collect();
    format!("{}-{hash}", base.trim_end_matches('-'))
}

fn dns1035_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns1123_label)
}

/// A label value: at most 63 of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
fn label_value(raw: &str) -> String {
    let kept: String = raw
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

fn label_value_ok(s: &str) -> bool {
    !s.is_empty() && label_value(s) == s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_1035_and_distinct() {
        assert_eq!(dns1035("ppo-1a2b3c", 47, "job-"), "ppo-1a2b3c");
        let a = dns1035("My_Run.1", 47, "job-");
        let b = dns1035("my-run-1x", 47, "job-");
        assert!(
            a.starts_with("my-run-1-") && a.len() == "my-run-1-".len() + 6,
            "{a}"
        );
        assert_ne!(a, dns1035("my_run.1", 47, "job-"));
        assert!(dns1035_label(&a) && dns1035_label(&b));
        let digits = dns1035("2024.run", 47, "job-");
        assert!(digits.starts_with("job-2024-run-"), "{digits}");
        let long = dns1035(&"a".repeat(100), 47, "job-");
        assert_eq!(long.len(), 47);
        assert!(dns1035_label(&long));
    }

    #[test]
    fn ray_versions_come_from_tags() {
        assert_eq!(ray_version("argus/ray:2.51.1"), Some(RayVersion(2, 51, 1)));
        assert_eq!(
            ray_version("reg.example:5000/ray:2.60.0-py311-gpu"),
            Some(RayVersion(2, 60, 0))
        );
        assert_eq!(
            ray_version("rayproject/ray:2.52"),
            Some(RayVersion(2, 52, 0))
        );
        assert_eq!(ray_version("reg.example:5000/ray@sha256:abc"), None);
        assert_eq!(ray_version("reg.example/ray:latest"), None);
    }

    #[test]
    fn kuberay_versions() {
        assert_eq!(Version::parse("1.7"), Some(Version::V1_7));
        assert_eq!(Version::parse("v1.5.2"), Some(Version::V1_5));
        assert_eq!(Version::parse("1.4"), None);
        assert_eq!(Version::parse("1.7.x"), None);
        assert!(Version::V1_5 < Version::V1_6);
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("h20"), "h20");
        assert_eq!(label_value("a-"), "a");
        assert_eq!(label_value(&"x".repeat(70)).len(), 63);
        assert!(label_value_ok("team-a.q1") && !label_value_ok("-a") && !label_value_ok("a b"));
    }
}
