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
    /// Several hosts, each with its own Docker Engine: the head and each worker group
    /// name theirs. Empty: one host, the endpoint of `docker:`.
    #[serde(default)]
    pub hosts: Vec<HostSpec>,
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
    /// Defaults for `argus slurm submit` (its flags win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmSection>,
}

/// The Slurm allocation a run asks for by default, and how a node's engine is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Slurm's time limit (`--time`), e.g. `2:00:00`.
    pub time: Option<String>,
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    /// More `#SBATCH` arguments, each one word (e.g. `--exclusive`).
    #[serde(default)]
    pub sbatch_args: Vec<String>,
    /// The container engine's socket on every node (Docker, or Podman's Docker API socket).
    pub engine_socket: Option<DockerEndpoint>,
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
    /// `unix:///var/run/docker.sock`, `tcp://host:2375`, `ssh://user@host`; default:
    /// `DOCKER_HOST`, then the local socket.
    pub host: Option<DockerEndpoint>,
    /// TLS for a `tcp://` endpoint (default: `DOCKER_TLS_VERIFY` / `DOCKER_CERT_PATH`).
    pub tls: Option<TlsFiles>,
}

/// One host of a multi-host cluster: its Docker Engine and the address Ray advertises.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// What the head and worker groups call it (`head: {host: a}`).
    pub name: String,
    /// Its Docker Engine: `unix://`, `tcp://` (TLS optional), `ssh://user@host`.
    pub docker: DockerEndpoint,
    /// The IPv4 address its Ray nodes advertise and others reach them at.
    pub address: NodeAddress,
    /// TLS for a `tcp://` endpoint (default: `DOCKER_TLS_VERIFY` / `DOCKER_CERT_PATH`).
    pub tls: Option<TlsFiles>,
}

/// Client certificates for a Docker Engine on `tcp://` with TLS. A file left out is taken
/// from `DOCKER_CERT_PATH` (default `~/.docker`): `ca.pem`, `cert.pem`, `key.pem`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
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
    /// Host mode on one host: the IPv4 address workers use to reach the head (default
    /// 127.0.0.1). With `hosts:`, the head host's `address` is used.
    pub head_address: Option<NodeAddress>,
}

/// A host's address in host mode: an IPv4 address other hosts can dial (workers join the
/// head at `address:port`), never a name, a list or `0.0.0.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeAddress(pub Ipv4Addr);

impl NodeAddress {
    pub fn parse(text: &str) -> Result<Self, String> {
        const VALID: &str = "the host's IPv4 address, e.g. 10.0.0.11";
        match text.parse::<IpAddr>() {
            Ok(IpAddr::V4(v4))
                if !v4.is_unspecified() && !v4.is_broadcast() && !v4.is_multicast() =>
            {
                Ok(NodeAddress(v4))
            }
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

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for NodeAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NodeAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::deserialize_checked(d, "an IPv4 address", NodeAddress::parse)
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
    /// With `hosts:`, the host it runs on (the head's; default the first host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// CPU limit of the container (Docker's `--cpus`); advertised to Ray as `--num-cpus`
    /// (rounded up) unless `ray_cpus` says otherwise.
    pub cpus: Option<f64>,
    /// CPUs the node advertises to Ray (`--num-cpus`). Ray's CPU is a scheduling unit, not
    /// a core: a node may advertise more than its container may use (verl's placement asks
    /// for CPUs per GPU that a small host does not have). Default: `cpus`, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cpus: Option<u32>,
    pub memory: Option<ByteSize>,
    /// `/dev/shm` size: Ray's object store lives there (Docker's default is 64 MiB).
    pub shm_size: Option<ByteSize>,
    /// Ray object store size (default: Ray's own choice, capped by shm).
    pub object_store_memory: Option<ByteSize>,
    /// Custom Ray resources, added to `head_node` / `worker_node`.
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
    /// Environment of these containers only, over the profile's `env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl NodeSpec {
    /// The CPUs the node advertises to Ray (`--num-cpus`): `ray_cpus`, else `cpus` rounded
    /// up (at least 1); None when Ray counts the host's CPUs itself.
    pub fn ray_num_cpus(&self) -> Option<u64> {
        self.ray_cpus
            .map(u64::from)
            .or_else(|| self.cpus.map(|cpus| cpus.ceil().max(1.0) as u64))
    }
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
    /// Workers in the group; with `hosts:` it may be left out (their sum).
    pub count: Option<u32>,
    /// With `hosts:` in the profile: the one host of all this group's workers.
    pub host: Option<String>,
    /// With `hosts:` in the profile: workers per host, in order (`{b: 1, c: 2}`).
    pub hosts: Option<HostCounts>,
    #[serde(default)]
    pub gpus: u32,
    #[serde(default)]
    pub gpu_mode: GpuMode,
    /// One list of host GPU ids per worker (nvidia / amd), e.g. `[[0,1,2,3],[4,5,6,7]]`.
    pub device_ids: Option<Vec<Vec<u32>>>,
    // The fields of NodeSpec, spelled out: serde's `flatten` would disable
    // `deny_unknown_fields` and lose error locations.
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cpus: Option<u32>,
    pub memory: Option<ByteSize>,
    pub shm_size: Option<ByteSize>,
    pub object_store_memory: Option<ByteSize>,
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl Profile {
    /// The host the head runs on: `head.host`, else the first of `hosts`; `local` for a
    /// single-host profile (no `hosts:`).
    pub fn head_host(&self) -> &str {
        match (&self.head.host, self.hosts.first()) {
            (Some(host), _) => host,
            (None, Some(first)) => &first.name,
            (None, None) => LOCAL_HOST,
        }
    }
}

impl Profile {
    /// `hosts:` with the head's host first, the others in the order written.
    pub fn hosts_head_first(&self) -> Vec<&HostSpec> {
        let head = self.head_host();
        let mut hosts: Vec<&HostSpec> = self.hosts.iter().collect();
        hosts.sort_by_key(|h| h.name != head);
        hosts
    }
}

/// The one host of a profile without `hosts:`: the engine of `docker:`.
pub const LOCAL_HOST: &str = "local";

impl WorkerGroup {
    /// How many workers the group has: `count`, else the sum over `hosts`.
    pub fn count(&self) -> u32 {
        match (self.count, &self.hosts) {
            (Some(count), _) => count,
            (None, Some(hosts)) => hosts.total(),
            (None, None) => 0,
        }
    }

    /// Which host each worker runs on, in worker order (`default` when the group names
    /// none: the single host, or the head's).
    pub fn placement<'a>(&'a self, default: &'a str) -> Vec<&'a str> {
        match (&self.hosts, &self.host) {
            (Some(hosts), _) => hosts
                .0
                .iter()
                .flat_map(|(host, n)| std::iter::repeat_n(host.as_str(), *n as usize))
                .collect(),
            (None, Some(host)) => vec![host.as_str(); self.count() as usize],
            (None, None) => vec![default; self.count() as usize],
        }
    }

    /// The per-container resources of this group's workers.
    pub fn node(&self) -> NodeSpec {
        NodeSpec {
            host: None,
            cpus: self.cpus,
            ray_cpus: self.ray_cpus,
            memory: self.memory,
            shm_size: self.shm_size,
            object_store_memory: self.object_store_memory,
            resources: self.resources.clone(),
            env: self.env.clone(),
        }
    }
}

/// Workers per host, in the order written: `{b: 1, c: 2}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCounts(pub Vec<(String, u32)>);

impl HostCounts {
    pub fn total(&self) -> u32 {
        self.0
            .iter()
            .map(|(_, n)| *n)
            .fold(0u32, u32::saturating_add)
    }
}

impl Serialize for HostCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (host, n) in &self.0 {
            map.serialize_entry(host, n)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for HostCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = HostCounts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of host name to number of workers, e.g. {b: 1, c: 2}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<HostCounts, A::Error> {
                let mut out = Vec::new();
                while let Some((host, n)) = map.next_entry::<String, u32>()? {
                    out.push((host, n));
                }
                Ok(HostCounts(out))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// The submitter's settings; the field names are those of the old RayConfig YAML.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitSection {
    /// Jobs API address; default: the published dashboard.
    pub address: Option<String>,
    /// The shared storage as the job sees it (the old RayConfig's field): kept so an old
    /// section loads, and refused unless it names `shared.mount`, where the containers
    /// mount it. Read through [`Profile::container_layout`], never directly.
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
    /// Ray's `worker_process_setup_hook`: `module.function` run in every worker process
    /// before it does anything else (the CPU stand-in for a GPU in `profiles/jobs/*-cpu.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_process_setup_hook: Option<crate::ids::PythonName>,
}
