//! KubeRay's objects (ray.io/v1), as much of them as argus writes: deserializing refuses
//! unknown fields, so a test reading an export back sees every field argus set.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

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
