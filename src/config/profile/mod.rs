//! The cluster profile: one YAML file describes one cluster.
//!
//! Parsing is strict (unknown keys and wrong types are errors with file:line:column) and
//! validation runs before anything touches Docker, so a bad profile never leaves
//! half-created state behind. See `profiles/local.yaml` for a commented example.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::size::ByteSize;
use super::yaml::{self, ConfigError, Seg, Source};
use crate::yaml_path;

/// The built-in default profile, used when no `-p` is given.
pub const BUILTIN_LOCAL: &str = include_str!("../../profiles/local.yaml");
pub const BUILTIN_ORIGIN: &str = "<built-in profiles/local.yaml>";

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
    pub shared: SharedStorage,
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
    pub host: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// A private Docker network for the cluster, on one host.
    #[default]
    Bridge,
    /// The host's network stack (across hosts); each container gets its own Ray ports.
    Host,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    #[serde(default)]
    pub mode: NetworkMode,
    /// Host mode: the address workers use to reach the head (default 127.0.0.1).
    pub head_address: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedStorage {
    /// A directory already mounted on the host (e.g. an NFS mount), bind-mounted into every
    /// container. `~` and `${VAR}` / `${VAR:-default}` are expanded.
    pub host_path: Option<String>,
    /// An NFS export mounted by Docker as a volume.
    pub nfs: Option<NfsVolume>,
    /// Where the shared storage appears inside the containers.
    #[serde(default = "default_mount")]
    pub mount: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfsVolume {
    pub server: String,
    pub export: String,
    /// Mount options, e.g. `nfsvers=4.1,rw`.
    #[serde(default)]
    pub options: Option<String>,
}

fn default_mount() -> String {
    "/mnt/shared".to_string()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No authentication (Ray < 2.52, or token auth turned off explicitly).
    #[default]
    Disabled,
    /// Ray token auth (2.52+): `Authorization: Bearer <token>`.
    Token,
}

impl AuthMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::Disabled => "disabled",
            AuthMode::Token => "token",
        }
    }
}

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
        yaml::parse(&Source::new("<defaults>", "{}")).unwrap_or_else(|_| unreachable!())
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// NVIDIA device request with explicit device ids.
    Nvidia,
    /// AMD device nodes (`/dev/kfd`, `/dev/dri/renderD*`) and the video/render groups.
    Amd,
    /// Logical GPUs only (`ray start --num-gpus N`), for CPU-only hosts and tests.
    #[default]
    Simulated,
}

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
    pub docker_host: Option<String>,
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

/// A profile together with the document it came from (for located errors later on).
#[derive(Debug, Clone)]
pub struct LoadedProfile {
    pub profile: Profile,
    pub source: Source,
    /// `shared.host_path` after expansion (None for NFS volumes).
    pub shared_host_path: Option<PathBuf>,
}

/// Work that writes the shared storage from this host needs it mounted here.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the profile's shared storage is an NFS volume, not a path on this host")]
pub struct NoHostPath;

impl LoadedProfile {
    /// The shared storage as this host sees it (prepare, snapshot and run write there).
    pub fn host_layout(&self) -> Result<super::Layout, NoHostPath> {
        self.shared_host_path
            .as_ref()
            .map(super::Layout::new)
            .ok_or(NoHostPath)
    }

    /// Loads `path`, or the built-in local profile when `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let source = match path {
            Some(path) => Source::read(path)?,
            None => Source::new(BUILTIN_ORIGIN, BUILTIN_LOCAL),
        };
        Self::from_source(source)
    }

    pub fn from_source(source: Source) -> Result<Self, ConfigError> {
        let profile: Profile = yaml::parse(&source)?;
        let shared_host_path = validate(&profile, &source)?;
        Ok(Self {
            profile,
            source,
            shared_host_path,
        })
    }

    /// The Jobs API / dashboard URL as seen from this host.
    pub fn dashboard_url(&self) -> String {
        if let Some(address) = &self.profile.submit.address {
            return address.trim_end_matches('/').to_string();
        }
        let ray = &self.profile.ray;
        let host = match ray.dashboard_bind.as_str() {
            "0.0.0.0" | "::" => "127.0.0.1",
            other => other,
        };
        if host.contains(':') {
            format!("http://[{host}]:{}", ray.dashboard_port)
        } else {
            format!("http://{host}:{}", ray.dashboard_port)
        }
    }

    /// Every worker container the profile asks for, in order: (group index, index in group).
    pub fn worker_count(&self) -> u32 {
        self.profile.workers.iter().map(|g| g.count).sum()
    }

    pub fn total_gpus(&self) -> u32 {
        self.profile.workers.iter().map(|g| g.count * g.gpus).sum()
    }
}

const NAME_RULE: &str = "1-40 characters from [a-z0-9_.-], starting with a letter or digit";

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks what serde cannot; returns the expanded shared host path.
fn validate(p: &Profile, src: &Source) -> Result<Option<PathBuf>, ConfigError> {
    if !valid_name(&p.name) {
        return Err(src
            .error_at(
                &yaml_path!["name"],
                format!("invalid cluster name {:?}", p.name),
            )
            .with_hint(NAME_RULE));
    }
    if p.image.trim().is_empty() {
        return Err(src
            .error_at(&yaml_path!["image"], "image must not be empty")
            .with_hint("an image reference such as argus/ray:2.51.1"));
    }
    if let Some(host) = &p.docker.host {
        check_docker_host(host).map_err(|m| {
            src.error_at(&yaml_path!["docker", "host"], m)
                .with_hint(DOCKER_HOSTS)
        })?;
    }

    let shared_host_path = match (&p.shared.host_path, &p.shared.nfs) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(src
                .error_at(&yaml_path!["shared"], "give exactly one of `host_path` and `nfs`")
                .with_hint("shared: {host_path: /mnt/nfs/argus} or shared: {nfs: {server: 10.0.0.5, export: /export/argus}}"));
        }
        (Some(raw), None) => {
            let path = expand_path(raw)
                .map_err(|m| src.error_at(&yaml_path!["shared", "host_path"], m))?;
            if !path.is_absolute() {
                return Err(src
                    .error_at(
                        &yaml_path!["shared", "host_path"],
                        format!("{} is not an absolute path", path.display()),
                    )
                    .with_hint(
                        "an absolute path on the host, e.g. /mnt/nfs/argus or ~/argus-shared",
                    ));
            }
            Some(path)
        }
        (None, Some(nfs)) => {
            if nfs.server.trim().is_empty() {
                return Err(src.error_at(
                    &yaml_path!["shared", "nfs", "server"],
                    "server must not be empty",
                ));
            }
            if !nfs.export.starts_with('/') {
                return Err(src.error_at(
                    &yaml_path!["shared", "nfs", "export"],
                    "export must be an absolute path such as /export/argus",
                ));
            }
            None
        }
    };
    if !p.shared.mount.starts_with('/') || p.shared.mount == "/" {
        return Err(src
            .error_at(
                &yaml_path!["shared", "mount"],
                "mount must be an absolute path other than /",
            )
            .with_hint("/mnt/shared"));
    }

    for key in p.env.keys() {
        if !valid_env_name(key) {
            return Err(src
                .error_at(
                    &yaml_path!["env", key.as_str()],
                    format!("{key:?} is not an environment variable name"),
                )
                .with_hint("letters, digits and _"));
        }
    }

    let ray = &p.ray;
    if ray.dashboard_bind.parse::<IpAddr>().is_err() {
        return Err(src
            .error_at(
                &yaml_path!["ray", "dashboard_bind"],
                format!("{:?} is not an IP address", ray.dashboard_bind),
            )
            .with_hint("127.0.0.1 (this host only) or 0.0.0.0 (every interface)"));
    }
    for (key, port) in [
        ("gcs_port", ray.gcs_port),
        ("dashboard_port", ray.dashboard_port),
    ] {
        if port == 0 {
            return Err(src.error_at(&yaml_path!["ray", key], "port must be between 1 and 65535"));
        }
    }
    for (key, port) in [
        ("gcs_port", ray.gcs_port),
        ("dashboard_port", ray.dashboard_port),
    ] {
        if let Some(owner) = ray_reserved_port(port) {
            return Err(src
                .error_at(&yaml_path!["ray", key], format!("port {port} is {owner}"))
                .with_hint("a port outside 10001-19999 and other than 52365, e.g. 6379 / 8265"));
        }
    }
    if ray.gcs_port == ray.dashboard_port {
        return Err(src.error_at(
            &yaml_path!["ray", "dashboard_port"],
            "dashboard_port and gcs_port must differ",
        ));
    }
    if ray.ready_timeout_s == 0 {
        return Err(src.error_at(
            &yaml_path!["ray", "ready_timeout_s"],
            "must be at least 1 second",
        ));
    }
    if ray.auth == AuthMode::Token && !valid_env_name(&ray.token_env) {
        return Err(src.error_at(
            &yaml_path!["ray", "token_env"],
            "must name an environment variable",
        ));
    }

    validate_node(&p.head, src, &yaml_path!["head"])?;

    if p.workers.is_empty() {
        return Err(src.error_at(&yaml_path!["workers"], "at least one worker group is needed: the training driver runs on a worker, never on the head").with_hint("workers: [{name: gpu, count: 2, gpus: 2}]"));
    }
    let mut group_names: HashMap<&str, usize> = HashMap::new();
    let mut device_owner: HashMap<u32, String> = HashMap::new();
    for (g, group) in p.workers.iter().enumerate() {
        let at = |key: &str| yaml_path!["workers", g, key];
        if !valid_name(&group.name) {
            return Err(src
                .error_at(&at("name"), format!("invalid group name {:?}", group.name))
                .with_hint(NAME_RULE));
        }
        if let Some(first) = group_names.insert(&group.name, g) {
            return Err(src.error_at(
                &at("name"),
                format!(
                    "group name {:?} is already used by workers[{first}]",
                    group.name
                ),
            ));
        }
        if group.count < 1 {
            return Err(src
                .error_at(
                    &at("count"),
                    format!("count is {}, must be at least 1", group.count),
                )
                .with_hint("a whole number ≥ 1 (remove the group to have none)"));
        }
        if let Some(host) = &group.docker_host
            && Some(host) != p.docker.host.as_ref()
        {
            return Err(src
                    .error_at(&at("docker_host"), "worker groups on another Docker endpoint (multi-host) are not yet supported")
                    .with_hint("run `argus up` on each host with its own profile, in `network: {mode: host}`, or remove docker_host"));
        }
        validate_node(&group.node(), src, &yaml_path!["workers", g])?;
        match (group.gpu_mode, &group.device_ids) {
            (GpuMode::Simulated, Some(_)) => {
                return Err(src
                    .error_at(
                        &at("device_ids"),
                        "device_ids are for real GPUs; simulated GPUs are logical only",
                    )
                    .with_hint("gpu_mode: nvidia | amd, or remove device_ids"));
            }
            (GpuMode::Simulated, None) => {}
            (mode, _) if group.gpus == 0 => {
                return Err(src
                    .error_at(&at("gpus"), format!("gpu_mode {mode:?} needs gpus ≥ 1"))
                    .with_hint("gpus: 1 or more, or gpu_mode: simulated"));
            }
            (_, None) => {
                return Err(src
                    .error_at(
                        &at("gpu_mode"),
                        "real GPUs need explicit device_ids, one list per worker",
                    )
                    .with_hint(format!(
                        "device_ids: a list of {} lists of {} GPU ids",
                        group.count, group.gpus
                    )));
            }
            (_, Some(lists)) => {
                if lists.len() != group.count as usize {
                    return Err(src
                        .error_at(
                            &at("device_ids"),
                            format!("{} lists for {} workers", lists.len(), group.count),
                        )
                        .with_hint(format!("one list of {} GPU ids per worker", group.gpus)));
                }
                for (w, ids) in lists.iter().enumerate() {
                    if ids.len() != group.gpus as usize {
                        return Err(src
                            .error_at(
                                &yaml_path!["workers", g, "device_ids", w],
                                format!(
                                    "{} GPU ids for a worker with gpus: {}",
                                    ids.len(),
                                    group.gpus
                                ),
                            )
                            .with_hint(format!("exactly {} ids", group.gpus)));
                    }
                    for (i, id) in ids.iter().enumerate() {
                        let here = format!("workers[{g}].device_ids[{w}][{i}]");
                        if let Some(owner) = device_owner.insert(*id, here) {
                            return Err(src
                                .error_at(
                                    &yaml_path!["workers", g, "device_ids", w, i],
                                    format!("GPU {id} is already used by {owner}"),
                                )
                                .with_hint("each host GPU id at most once across all workers"));
                        }
                    }
                }
            }
        }
    }

    let submit = &p.submit;
    if let Some(n) = submit.entrypoint_num_cpus
        && (!n.is_finite() || n < 0.0)
    {
        return Err(src.error_at(&yaml_path!["submit", "entrypoint_num_cpus"], "must be ≥ 0"));
    }
    for key in submit.runtime_env.env_vars.keys() {
        if !valid_env_name(key) {
            return Err(src.error_at(
                &yaml_path!["submit", "runtime_env", "env_vars", key.as_str()],
                format!("{key:?} is not an environment variable name"),
            ));
        }
    }
    Ok(shared_host_path)
}

fn validate_node(node: &NodeSpec, src: &Source, at: &[Seg]) -> Result<(), ConfigError> {
    let field = |key: &str| {
        let mut path = at.to_vec();
        path.push(Seg::Key(key.to_string()));
        path
    };
    if let Some(cpus) = node.cpus
        && (!cpus.is_finite() || cpus <= 0.0 || cpus > 4096.0)
    {
        return Err(src
            .error_at(&field("cpus"), format!("cpus is {cpus}, must be > 0"))
            .with_hint("a number of CPUs such as 2 or 0.5"));
    }
    for (name, value) in &node.resources {
        if name.is_empty() || name == "CPU" || name == "GPU" || name == "memory" {
            return Err(src.error_at(&field("resources"), format!("{name:?} cannot be a custom resource")).with_hint("custom names such as worker_node or accelerator_h20; CPUs and GPUs have their own fields"));
        }
        if !value.is_finite() || *value < 0.0 {
            return Err(src.error_at(
                &field("resources"),
                format!("resource {name} is {value}, must be ≥ 0"),
            ));
        }
    }
    if let (Some(store), Some(shm)) = (node.object_store_memory, node.shm_size)
        && store > shm
    {
        return Err(src
            .error_at(
                &field("object_store_memory"),
                format!("object_store_memory ({store}) exceeds shm_size ({shm})"),
            )
            .with_hint("at most shm_size: the object store lives in /dev/shm"));
    }
    Ok(())
}

/// Ports Ray itself takes by default on every node, and what takes them.
fn ray_reserved_port(port: u16) -> Option<&'static str> {
    match port {
        10001 => Some("Ray's client server port"),
        10002..=19999 => Some("in Ray's default worker port range 10002-19999"),
        52365 => Some("Ray's dashboard agent port"),
        _ => None,
    }
}

const DOCKER_HOSTS: &str = "unix:///var/run/docker.sock, tcp://HOST:2375 or http://HOST:2375";

fn check_docker_host(host: &str) -> Result<(), String> {
    if ["unix://", "tcp://", "http://"]
        .iter()
        .any(|p| host.starts_with(p))
    {
        Ok(())
    } else {
        Err(format!("unsupported Docker endpoint {host:?}"))
    }
}

/// Expands a leading `~` and `${VAR}` / `${VAR:-default}` references.
pub fn expand_path(raw: &str) -> Result<PathBuf, String> {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {raw:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (std::env::var(name).ok().filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "environment variable {name} is not set (write ${{{name}:-default}} for a fallback)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if out == "~" || out.starts_with("~/") {
        let home = dirs::home_dir().ok_or("cannot expand ~: no home directory")?;
        return Ok(home.join(out.trim_start_matches('~').trim_start_matches('/')));
    }
    Ok(PathBuf::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<LoadedProfile, ConfigError> {
        LoadedProfile::from_source(Source::new("p.yaml", text))
    }

    const BASE: &str = "name: t\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\n";

    #[test]
    fn builtin_profile_is_valid() {
        let p = LoadedProfile::load(None).unwrap();
        assert_eq!(p.profile.workers.len(), 1);
        assert_eq!(p.worker_count(), 2);
        assert_eq!(p.total_gpus(), 4);
        assert_eq!(p.dashboard_url(), "http://127.0.0.1:8265");
        assert!(p.shared_host_path.unwrap().is_absolute());
    }

    #[test]
    fn count_below_one_points_at_the_count() {
        let err = load(&format!("{BASE}workers:\n  - name: gpu\n    count: 0\n")).unwrap_err();
        assert_eq!((err.line, err.column), (6, 12), "{err}");
        assert!(err.message.contains("workers[0].count"), "{err}");
    }

    #[test]
    fn gpu_used_twice_points_at_the_second_use() {
        let text = format!(
            "{BASE}workers:\n  - name: a\n    count: 1\n    gpus: 2\n    gpu_mode: nvidia\n    device_ids: [[0, 1]]\n  - name: b\n    count: 1\n    gpus: 2\n    gpu_mode: nvidia\n    device_ids: [[2, 1]]\n"
        );
        let err = load(&text).unwrap_err();
        assert_eq!((err.line, err.column), (14, 22), "{err}");
        assert!(
            err.message
                .contains("GPU 1 is already used by workers[0].device_ids[0][1]"),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_and_unknown_key_are_located_by_serde() {
        let err = load(&format!("{BASE}workers:\n  - name: a\n    count: two\n")).unwrap_err();
        assert_eq!((err.line, err.column), (6, 12));
        let err = load(&format!("{BASE}workers: []\nhead: {{cpu: 1}}\n")).unwrap_err();
        assert!(err.message.contains("unknown field `cpu`"), "{err}");
        assert_eq!(err.line, 5);
    }

    #[test]
    fn ports_ray_uses_itself_are_refused_where_they_are_written() {
        let err = load(&format!(
            "{BASE}ray:\n  dashboard_port: 18265\nworkers: []\n"
        ))
        .unwrap_err();
        assert_eq!((err.line, err.column), (5, 19), "{err}");
        assert!(err.message.contains("worker port range"), "{err}");
    }

    #[test]
    fn bad_size_is_located() {
        let err = load(&format!(
            "{BASE}workers:\n  - name: a\n    count: 1\n    shm_size: 2x\n"
        ))
        .unwrap_err();
        assert_eq!(err.line, 7, "{err}");
        assert!(err.message.contains("512m"), "{err}");
    }

    #[test]
    fn expands_env_and_home() {
        // SAFETY: single-threaded use of a variable no other test reads.
        unsafe { std::env::set_var("ARGUS_TEST_EXPAND", "/data") };
        assert_eq!(
            expand_path("${ARGUS_TEST_EXPAND}/a").unwrap(),
            PathBuf::from("/data/a")
        );
        assert_eq!(
            expand_path("${ARGUS_TEST_UNSET_X:-/d}/a").unwrap(),
            PathBuf::from("/d/a")
        );
        assert!(expand_path("${ARGUS_TEST_UNSET_X}/a").is_err());
        assert!(expand_path("~/a").unwrap().is_absolute());
    }
}
