//! The profile's types, as the YAML spells them: strict (unknown keys are errors), with
//! their defaults. Values that have a shape of their own (sizes, endpoints, addresses,
//! the shared storage) are parsed into types here, so serde reports them where they are
//! written; what spans several fields is checked in `validate`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::storage::SharedSection;
use crate::config::docker::DockerEndpoint;
use crate::config::size::ByteSize;
use crate::string_enum;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Cluster name: prefixes every container and names the network.
    pub name: String,
    #[serde(default)]
    pub docker: DockerSection,
    /// Runtime image (see `argus image build`).
    pub image: String,
    #[serde(default)]
    pub network: NetworkSection,
    pub shared: SharedSection,
    /// Environment injected into every container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub ray: RaySection,
    #[serde(default)]
    pub head: NodeSpec,
    pub workers: Vec<WorkerGroup>,
    #[serde(default)]
    pub submit: SubmitSection,
    /// What `argus prepare` without flags prepares.
    #[serde(default)]
    pub prepare: PrepareSection,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareSection {
    /// `gsm8k`, `gsm8k-sft`.
    #[serde(default)]
    pub datasets: Vec<String>,
    /// `org/name` or `org/name@revision`.
    #[serde(default)]
    pub models: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSection {
    /// `unix:///var/run/docker.sock`, `tcp://host:2375`; default: `DOCKER_HOST`, then the local socket.
    pub host: Option<DockerEndpoint>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NetworkMode {
    /// A private Docker network for the cluster, on one host.
    #[default]
    Bridge,
    /// The host's network stack (across hosts); each container gets its own Ray ports.
    Host,
}
string_enum!(NetworkMode {
    Bridge = "bridge",
    Host = "host"
});

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    #[serde(default)]
    pub mode: NetworkMode,
    /// Host mode: the IPv4 address workers use to reach the head (default 127.0.0.1).
    pub head_address: Option<HeadAddress>,
}

/// The head host's address in host mode: an IPv4 address a worker can dial (workers join
/// at `address:port`), never a name, a list or `0.0.0.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadAddress(pub Ipv4Addr);

impl HeadAddress {
    pub fn parse(text: &str) -> Result<Self, String> {
        const VALID: &str = "the head host's IPv4 address, e.g. 10.0.0.11";
        match text.parse::<IpAddr>() {
            Ok(IpAddr::V4(v4)) if !v4.is_unspecified() && !v4.is_broadcast() => Ok(HeadAddress(v4)),
            Ok(IpAddr::V4(v4)) => Err(format!(
                "{v4} is not an address workers can reach (valid: {VALID})"
            )),
            Ok(IpAddr::V6(v6)) => Err(format!(
                "{v6} is IPv6: workers join the head at IPv4 address:port (valid: {VALID})"
            )),
            Err(_) => Err(format!("{text:?} is not an IP address (valid: {VALID})")),
        }
    }
}

impl fmt::Display for HeadAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for HeadAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HeadAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::deserialize_checked(d, "an IPv4 address", HeadAddress::parse)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication (Ray < 2.52, or token auth turned off explicitly).
    #[default]
    Disabled,
    /// Ray token auth (2.52+): `Authorization: Bearer <token>`.
    Token,
}
string_enum!(AuthMode {
    Disabled = "disabled",
    Token = "token"
});

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaySection {
    #[serde(default = "default_gcs_port")]
    pub gcs_port: u16,
    #[serde(default = "default_dashboard_port")]
    pub dashboard_port: u16,
    /// Host address the dashboard (and Jobs API) is published on. It runs arbitrary code
    /// for whoever reaches it: keep 127.0.0.1 unless the network is trusted.
    #[serde(default = "default_dashboard_bind")]
    pub dashboard_bind: String,
    #[serde(default)]
    pub auth: AuthMode,
    /// With `auth: token`, the host environment variable that holds the token.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// How long `up` waits for every node to be ALIVE.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout_s: u64,
}

fn default_gcs_port() -> u16 {
    6379
}
fn default_dashboard_port() -> u16 {
    8265
}
fn default_dashboard_bind() -> String {
    "127.0.0.1".to_string()
}
fn default_token_env() -> String {
    "RAY_AUTH_TOKEN".to_string()
}
fn default_ready_timeout() -> u64 {
    300
}

impl Default for RaySection {
    fn default() -> Self {
        RaySection {
            gcs_port: default_gcs_port(),
            dashboard_port: default_dashboard_port(),
            dashboard_bind: default_dashboard_bind(),
            auth: AuthMode::default(),
            token_env: default_token_env(),
            ready_timeout_s: default_ready_timeout(),
        }
    }
}

/// Resources of one container (the head, or each worker of a group).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// CPU limit of the container, also advertised to Ray as `--num-cpus`.
    pub cpus: Option<f64>,
    pub memory: Option<ByteSize>,
    /// `/dev/shm` size: Ray's object store lives there (Docker's default is 64 MiB).
    pub shm_size: Option<ByteSize>,
    /// Ray object store size (default: Ray's own choice, capped by shm).
    pub object_store_memory: Option<ByteSize>,
    /// Custom Ray resources, added to `head_node` / `worker_node`.
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuMode {
    /// NVIDIA device request with explicit device ids.
    Nvidia,
    /// AMD device nodes (`/dev/kfd`, `/dev/dri/renderD*`) and the video/render groups.
    Amd,
    /// Logical GPUs only (`ray start --num-gpus N`), for CPU-only hosts and tests.
    #[default]
    Simulated,
}
string_enum!(GpuMode {
    Nvidia = "nvidia",
    Amd = "amd",
    Simulated = "simulated"
});

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerGroup {
    pub name: String,
    pub count: u32,
    #[serde(default)]
    pub gpus: u32,
    #[serde(default)]
    pub gpu_mode: GpuMode,
    /// One list of host GPU ids per worker (nvidia / amd), e.g. `[[0,1,2,3],[4,5,6,7]]`.
    pub device_ids: Option<Vec<Vec<u32>>>,
    /// Another Docker endpoint for this group (multi-host; not yet supported).
    pub docker_host: Option<DockerEndpoint>,
    // The fields of NodeSpec, spelled out: serde's `flatten` would disable
    // `deny_unknown_fields` and lose error locations.
    pub cpus: Option<f64>,
    pub memory: Option<ByteSize>,
    pub shm_size: Option<ByteSize>,
    pub object_store_memory: Option<ByteSize>,
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
}

impl WorkerGroup {
    /// The per-container resources of this group's workers.
    pub fn node(&self) -> NodeSpec {
        NodeSpec {
            cpus: self.cpus,
            memory: self.memory,
            shm_size: self.shm_size,
            object_store_memory: self.object_store_memory,
            resources: self.resources.clone(),
        }
    }
}

/// The submitter's settings; the field names are those of the old RayConfig YAML.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitSection {
    /// Jobs API address; default: the published dashboard.
    pub address: Option<String>,
    /// The shared storage as the containers see it; default: `shared.mount`.
    pub shared_root: Option<String>,
    pub entrypoint_num_cpus: Option<f64>,
    pub entrypoint_num_gpus: Option<f64>,
    /// Default `{worker_node: 1}`: the driver runs on a worker, never on the head.
    pub entrypoint_resources: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    pub runtime_env: RuntimeEnvSection,
    pub user_code_path: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeEnvSection {
    #[serde(default)]
    pub env_vars: BTreeMap<String, String>,
}
