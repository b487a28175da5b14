//! The cluster profile: one YAML file describes one cluster.
//!
//! Parsing is strict (unknown keys and wrong types are errors with file:line:column) and
//! validation runs before anything touches Docker, so a bad profile never leaves
//! half-created state behind. See `profiles/local.yaml` for a commented example.
//!
//! `types` holds what the YAML spells (with defaults), `storage` the shared storage (a
//! host path or an NFS volume), `expand` what a path may abbreviate, `validate` the rules
//! that span fields, `resources` the Ray resources a node advertises and the names argus
//! and Ray keep for themselves, `sbatch` the sbatch options argus writes itself; this file loads a profile and answers questions about it.

mod expand;
pub mod resources;
pub mod sbatch;
mod storage;
mod types;
mod validate;

use std::path::{Path, PathBuf};

pub use expand::expand_path;
pub use storage::{
    HostPath, NfsExport, NfsOptions, NfsServer, NfsVolume, SharedSection, SharedStorage,
};
pub use types::{
    AuthMode, DockerSection, GpuMode, HostCounts, HostSpec, LOCAL_HOST, NetworkMode,
    NetworkSection, NodeAddress, NodeSpec, PrepareSection, Profile, RaySection, RuntimeEnvSection,
    SlurmSection, SubmitSection, TlsFiles, WorkerGroup,
};
pub use validate::{
    HOST_MODE_PORT_BASE, HOST_MODE_PORT_BLOCK, MAX_CPUS, MAX_GPUS_PER_WORKER, MAX_GROUPS,
    MAX_HOST_MODE_NODES, MAX_HOSTS, MAX_READY_TIMEOUT_S, MAX_WORKERS, TOKEN_AUTH_SINCE,
    check_entrypoint_resources, check_job_env, token_auth_supported,
};

use super::docker::DockerEndpoint;
use super::yaml::{self, ConfigError, Source};

/// The built-in default profile, used when no `-p` is given.
pub const BUILTIN_LOCAL: &str = include_str!("../../../profiles/local.yaml");
pub const BUILTIN_ORIGIN: &str = "<built-in profiles/local.yaml>";

/// The built-in profile in words, read from it (so `--help` cannot say other than what
/// it holds): "one CPU head and two workers with one simulated GPU each".
pub fn builtin_summary() -> String {
    match yaml::parse::<Profile>(&Source::new(BUILTIN_ORIGIN, BUILTIN_LOCAL)) {
        Ok(profile) => summary(&profile),
        // The built-in profile is checked by the tests; never expected.
        Err(_) => "a small CPU-only cluster".into(),
    }
}

/// The head and every worker group, in words.
fn summary(profile: &Profile) -> String {
    fn number(n: u32, thing: &str) -> String {
        const WORDS: [&str; 11] = [
            "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        ];
        let word = WORDS
            .get(n as usize)
            .map_or(n.to_string(), |w| w.to_string());
        format!("{word} {thing}{}", if n == 1 { "" } else { "s" })
    }
    let groups: Vec<String> = profile
        .workers
        .iter()
        .map(|group| {
            let gpu = match group.gpu_mode {
                GpuMode::Simulated => "simulated GPU",
                GpuMode::Nvidia => "NVIDIA GPU",
                GpuMode::Amd => "AMD GPU",
            };
            let each = if group.count() > 1 { " each" } else { "" };
            format!(
                "{} with {}{each}",
                number(group.count(), "worker"),
                number(group.gpus, gpu)
            )
        })
        .collect();
    format!("one CPU head and {}", groups.join(" and "))
}

/// A profile together with the document it came from (for located errors later on).
#[derive(Debug, Clone)]
pub struct LoadedProfile {
    pub profile: Profile,
    pub source: Source,
}

/// One host of the cluster with its Docker endpoint resolved (for a single-host profile,
/// the one host `local`: `docker.host`, else `DOCKER_HOST`, else the local socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterHost {
    pub name: String,
    pub endpoint: DockerEndpoint,
    /// The address its Ray nodes advertise (profiles with `hosts:`).
    pub address: Option<NodeAddress>,
    /// Client certificates, when the endpoint is `tcp://` with TLS.
    pub tls: Option<TlsPaths>,
}

/// The three files of a TLS client, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsPaths {
    /// `given` files, the rest from `DOCKER_CERT_PATH` (default `~/.docker`); None when
    /// the endpoint is not `tcp://` or TLS is neither configured nor asked for by
    /// `DOCKER_TLS_VERIFY`.
    pub fn resolve(endpoint: &DockerEndpoint, given: Option<&TlsFiles>) -> Option<Self> {
        if !matches!(endpoint.kind(), super::docker::EndpointKind::Tcp { .. }) {
            return None;
        }
        let from_env = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
        if given.is_none() && !from_env {
            return None;
        }
        let dir = std::env::var_os("DOCKER_CERT_PATH")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| dirs::home_dir().map(|h| h.join(".docker")))
            .unwrap_or_else(|| PathBuf::from(".docker"));
        let pick = |file: Option<&String>, default: &str| {
            // Checked to expand when the profile loaded.
            file.map(|f| expand_path(f).unwrap_or_else(|_| PathBuf::from(f)))
                .unwrap_or_else(|| dir.join(default))
        };
        let given = given.cloned().unwrap_or_default();
        Some(TlsPaths {
            ca: pick(given.ca.as_ref(), "ca.pem"),
            cert: pick(given.cert.as_ref(), "cert.pem"),
            key: pick(given.key.as_ref(), "key.pem"),
        })
    }
}

/// Work that writes the shared storage from this host needs it mounted here.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the profile's shared storage is an NFS volume, not a path on this host")]
pub struct NoHostPath;

impl LoadedProfile {
    /// The shared storage as this host sees it (prepare, snapshot and run write there):
    /// `shared.host_path` after expansion; `NoHostPath` for an NFS volume. Its side as
    /// the jobs see it is [`Profile::container_layout`].
    pub fn host_layout(&self) -> Result<super::Layout, NoHostPath> {
        self.profile
            .shared
            .host_path()
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
        validate::validate(&profile, &source)?;
        remember_secrets(&profile);
        Ok(Self { profile, source })
    }

    /// The Docker endpoint argus dials for this profile: `docker.host`, else
    /// `DOCKER_HOST`, else the local socket. A malformed `DOCKER_HOST` is bad input.
    pub fn docker_endpoint(&self) -> Result<DockerEndpoint, ConfigError> {
        DockerEndpoint::resolve(self.profile.docker.host.as_ref()).map_err(|message| ConfigError {
            origin: PathBuf::from("environment"),
            line: 0,
            column: 0,
            message,
            hint: Some(super::docker::VALID_ENDPOINTS.into()),
        })
    }

    /// True when the profile lists several hosts (`hosts:`), even just one.
    pub fn has_hosts(&self) -> bool {
        !self.profile.hosts.is_empty()
    }

    /// Every host of the cluster, the head's first, with its endpoint resolved.
    pub fn cluster_hosts(&self) -> Result<Vec<ClusterHost>, ConfigError> {
        let p = &self.profile;
        if p.hosts.is_empty() {
            let endpoint = self.docker_endpoint()?;
            let tls = TlsPaths::resolve(&endpoint, p.docker.tls.as_ref());
            return Ok(vec![ClusterHost {
                name: LOCAL_HOST.to_string(),
                endpoint,
                address: p.network.head_address,
                tls,
            }]);
        }
        Ok(p.hosts_head_first()
            .into_iter()
            .map(|h| ClusterHost {
                name: h.name.clone(),
                endpoint: h.docker.clone(),
                address: Some(h.address),
                tls: TlsPaths::resolve(&h.docker, h.tls.as_ref()),
            })
            .collect())
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
        self.profile.workers.iter().map(|g| g.count()).sum()
    }

    pub fn total_gpus(&self) -> u32 {
        self.profile
            .workers
            .iter()
            .map(|g| g.count() * g.gpus)
            .sum()
    }
}

/// The profile's secret values, remembered for redaction (see `crate::secrets`).
fn remember_secrets(p: &Profile) {
    let mut s = crate::secrets::Secrets::new();
    // The profile's env, the head's and every worker group's (over it).
    let groups = std::iter::once(&p.head.env).chain(p.workers.iter().map(|g| &g.env));
    for env in std::iter::once(&p.env).chain(groups) {
        s.add_vars(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    s.add_vars(
        p.submit
            .runtime_env
            .env_vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if let Ok(token) = std::env::var(&p.ray.token_env) {
        s.add(&token);
    }
    crate::secrets::remember(&s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<LoadedProfile, ConfigError> {
        LoadedProfile::from_source(Source::new("p.yaml", text))
    }

    const BASE: &str = "name: t\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\n";

    #[test]
    fn the_builtin_profile_is_described_by_what_it_holds() {
        assert_eq!(
            builtin_summary(),
            "one CPU head and two workers with one simulated GPU each"
        );
        let text =
            BUILTIN_LOCAL.replace("    count: 2\n    gpus: 1\n", "    count: 1\n    gpus: 2\n");
        let profile: Profile = yaml::parse(&Source::new("t.yaml", text)).unwrap();
        assert_eq!(
            summary(&profile),
            "one CPU head and one worker with two simulated GPUs"
        );
    }

    #[test]
    fn builtin_profile_is_valid() {
        let p = LoadedProfile::load(None).unwrap();
        assert_eq!(p.profile.workers.len(), 1);
        assert_eq!(p.worker_count(), 2);
        assert_eq!(p.total_gpus(), 2);
        assert_eq!(p.dashboard_url(), "http://127.0.0.1:8265");
        assert!(p.host_layout().unwrap().root().is_absolute());
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
            "{BASE}ray:\n  dashboard_port: 18265\nworkers: [{{name: g, count: 1}}]\n"
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

    /// A two-host profile: the head on a, one worker on b and one on c.
    const HOSTS: &str = "name: t
image: argus/ray:2.51.1
network: {mode: host}
shared: {host_path: /tmp/x}
hosts:
  - {name: a, docker: 'ssh://root@10.0.0.1', address: 10.0.0.1}
  - {name: b, docker: 'tcp://10.0.0.2:2375', address: 10.0.0.2}
  - {name: c, docker: 'unix:///run/c.sock', address: 10.0.0.3}
head: {host: a}
workers:
  - {name: g, hosts: {b: 1, c: 1}, gpus: 2, gpu_mode: nvidia, device_ids: [[0, 1], [0, 1]]}
";

    #[test]
    fn hosts_place_the_head_and_each_worker() {
        let p = load(HOSTS).unwrap();
        let hosts = p.cluster_hosts().unwrap();
        let names: Vec<_> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(hosts[1].address.unwrap().to_string(), "10.0.0.2");
        assert_eq!(p.profile.workers[0].count(), 2);
        assert_eq!(p.profile.workers[0].placement("a"), ["b", "c"]);
        // The head's host comes first whatever the list's order.
        let p = load(&HOSTS.replace("head: {host: a}", "head: {host: c}")).unwrap();
        let names: Vec<_> = p
            .cluster_hosts()
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect();
        assert_eq!(names, ["c", "a", "b"]);
        // `host:` with count; the same GPU ids on two hosts are two GPUs.
        let one = HOSTS.replace("hosts: {b: 1, c: 1}", "host: b, count: 2");
        let err = load(&one).unwrap_err();
        assert!(
            err.message
                .contains("GPU 0 of host b is already used by workers[0].device_ids[0][0]"),
            "{err}"
        );
    }

    /// (what to replace in HOSTS, with what, line of the error, text it must contain)
    const BAD_HOSTS: &[(&str, &str, usize, &str)] = &[
        (
            "{name: b, docker",
            "{name: a, docker",
            7,
            "host name \"a\" is already used by hosts[0]",
        ),
        (
            "'tcp://10.0.0.2:2375'",
            "'ssh://root@10.0.0.1'",
            7,
            "endpoint ssh://root@10.0.0.1 is already hosts[0]'s",
        ),
        (
            "address: 10.0.0.3",
            "address: 10.0.0.2",
            8,
            "address 10.0.0.2 is already hosts[1]'s",
        ),
        (
            "address: 10.0.0.3",
            "address: c.example",
            8,
            "is not an IP address",
        ),
        (
            "address: 10.0.0.3",
            "address: 0.0.0.0",
            8,
            "not an address workers can reach",
        ),
        (
            "'unix:///run/c.sock'",
            "'ssh://root@c:2222'",
            8,
            "a port in ssh:// is not supported",
        ),
        (
            "'unix:///run/c.sock'",
            "'ssh://-oProxyCommand=sh@c'",
            8,
            "the user must be",
        ),
        (
            "head: {host: a}",
            "head: {host: z}",
            9,
            "unknown host \"z\"",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "hosts: {b: 1, z: 1}",
            11,
            "unknown host \"z\"",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "hosts: {b: 1, c: 0}",
            11,
            "0 workers on host c",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "hosts: {b: 1, c: 1}, count: 3",
            11,
            "count is 3, but hosts adds up to 2",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "host: b, hosts: {c: 1}",
            11,
            "give host (all workers on one host) or hosts",
        ),
        ("hosts: {b: 1, c: 1}", "host: b", 11, "count is missing"),
        (
            "hosts: {b: 1, c: 1}, ",
            "count: 2, ",
            11,
            "which hosts its workers run on is missing",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "hosts: {b: 1, b: 1}",
            11,
            "given twice",
        ),
        (
            "hosts: {b: 1, c: 1}",
            "hosts: [b, c]",
            11,
            "a map of host name to number of workers",
        ),
        ("[[0, 1], [0, 1]]", "[[0, 1]]", 11, "1 lists for 2 workers"),
        (
            "network: {mode: host}",
            "network: {mode: bridge}",
            3,
            "3 hosts need host networking",
        ),
        (
            "network: {mode: host}",
            "network: {mode: host, head_address: 10.0.0.1}",
            3,
            "workers join the head at its host's address",
        ),
        (
            "shared:",
            "docker: {host: 'unix:///x.sock'}\nshared:",
            4,
            "each host names its own Docker endpoint",
        ),
        (
            "address: 10.0.0.1}",
            "address: 10.0.0.1, tls: {ca: /ca.pem}}",
            6,
            "TLS is for tcp:// endpoints",
        ),
        (
            "address: 10.0.0.2}",
            "address: 10.0.0.2, tls: {ca: ca.pem}}",
            7,
            "is not an absolute path",
        ),
        (
            "address: 10.0.0.2}",
            "address: 10.0.0.2, sshkey: x}",
            7,
            "unknown field `sshkey`",
        ),
        (
            "head: {host: a}",
            "head: {host: a}\nray: {dashboard_bind: 0.0.0.0}",
            10,
            "without a token",
        ),
        (
            "head: {host: a}",
            "head: {host: a}\nray: {dashboard_bind: 10.0.0.2, auth: token}",
            10,
            "not an address of the head's host a",
        ),
    ];

    #[test]
    fn bad_hosts_are_refused_where_they_are_written() {
        for (from, to, line, text) in BAD_HOSTS {
            assert!(HOSTS.contains(from), "{from}");
            let doc = HOSTS.replacen(from, to, 1);
            let doc = if to.contains("auth: token") {
                doc.replace("argus/ray:2.51.1", "argus/ray:2.60.0")
            } else {
                doc
            };
            let err = load(&doc).expect_err(&doc);
            assert!(
                err.message.contains(text),
                "{doc}\nwant {text:?}\ngot  {err}"
            );
            assert_eq!(err.line, *line, "{doc}\n{err}");
        }
        // A single-host profile cannot name hosts.
        for (doc, text) in [
            (
                "name: t\nimage: i\nshared: {host_path: /tmp/x}\nhead: {host: a}\nworkers: [{name: g, count: 1}]\n",
                "the profile has no hosts: list",
            ),
            (
                "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, host: a}]\n",
                "the profile has no hosts: list",
            ),
            (
                "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g}]\n",
                "count is missing",
            ),
        ] {
            let err = load(doc).expect_err(doc);
            assert!(err.message.contains(text), "{doc}\n{err}");
        }
    }

    /// (document, line, column, text the message must contain)
    const BAD: &[(&str, usize, usize, &str)] = &[
        // class 5: accepted nonsense
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv:\n  A: 1\n  A: 2\nworkers: [{name: g, count: 1}]\n",
            6,
            3,
            "env.A: key \"A\" is given twice",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {runtime_env: {env_vars: {A: 1, A: 2}}}\nworkers: [{name: g, count: 1}]\n",
            4,
            41,
            "key \"A\" is given twice",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 100000}]\n",
            4,
            28,
            "count is 100000, more than 256",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 200}, {name: h, count: 100}]\n",
            4,
            51,
            "300 workers, more than 256",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, memory: 10000000t}]\n",
            4,
            39,
            "1024t (1 PiB)",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, gpus: 1000}]\n",
            4,
            37,
            "0 to 64 GPUs",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: host, head_address: head.example}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            37,
            "\"head.example\" is not an IP address (valid: the host's IPv4 address",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: host, head_address: 0.0.0.0}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            37,
            "0.0.0.0 is not an address workers can reach",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: host, head_address: '::1'}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            37,
            "is IPv6",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: host}\nshared: {host_path: /tmp/x}\nray: {dashboard_port: 21005}\nworkers: [{name: g, count: 2}]\n",
            5,
            23,
            "port 21005 is in the host-mode port block of Ray node 1 (21000-21999)",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: host}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 50}]\n",
            5,
            28,
            "51 Ray nodes in host mode",
        ),
        (
            "name: t\nimage: i\nshared: {nfs: {server: '10.0.0.5,nolock', export: /e}}\nworkers: [{name: g, count: 1}]\n",
            3,
            24,
            "is not an NFS server",
        ),
        (
            "name: t\nimage: i\nshared: {nfs: {server: 10.0.0.5, export: '/e,x'}}\nworkers: [{name: g, count: 1}]\n",
            3,
            42,
            "is not an NFS export",
        ),
        (
            "name: t\nimage: i\nshared: {nfs: {server: 10.0.0.5, export: /e, options: 'rw,addr=6.6.6.6'}}\nworkers: [{name: g, count: 1}]\n",
            3,
            55,
            "addr is set from shared.nfs.server",
        ),
        (
            "name: t\nimage: i\nshared: {nfs: {server: 10.0.0.5, export: /e, options: 'rw hard'}}\nworkers: [{name: g, count: 1}]\n",
            3,
            55,
            "NFS option \"rw hard\"",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {worker_node: 0}}\nworkers: [{name: g, count: 1}]\n",
            4,
            46,
            "worker_node is 0: a driver asking for it could never be scheduled",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {worker_node: -1}}\nworkers: [{name: g, count: 1}]\n",
            4,
            46,
            "worker_node is -1",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {worker_node: .nan}}\nworkers: [{name: g, count: 1}]\n",
            4,
            46,
            "worker_node is NaN",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {worker_node: 2}}\nworkers: [{name: g, count: 1}]\n",
            4,
            46,
            "each worker has worker_node: 1",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {head_node: 1}}\nworkers: [{name: g, count: 1}]\n",
            4,
            44,
            "never runs on the head",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_num_cpus: .inf}\nworkers: [{name: g, count: 1}]\n",
            4,
            31,
            "entrypoint_num_cpus is inf",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv: {RAY_AUTH_MODE: disabled}\nworkers: [{name: g, count: 1}]\n",
            4,
            22,
            "RAY_AUTH_MODE cannot be set here: argus sets RAY_AUTH_MODE",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv: {HF_HOME: /root/.cache}\nworkers: [{name: g, count: 1}]\n",
            4,
            16,
            "HF_HOME cannot be set here",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv: {RAY_AUTH_TOKEN: abc}\nworkers: [{name: g, count: 1}]\n",
            4,
            23,
            "RAY_AUTH_TOKEN cannot be set here",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {runtime_env: {env_vars: {PYTHONPATH: /x}}}\nworkers: [{name: g, count: 1}]\n",
            4,
            47,
            "PYTHONPATH cannot be set here",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, gpu_mode: [nvidia]}]\n",
            4,
            41,
            "expected one of nvidia|amd|simulated",
        ),
        (
            "name: t\nimage: i\nnetwork: {mode: [host]}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            17,
            "expected one of bridge|host",
        ),
        (
            "name: t\nimage: i\ndocker: {host: 'tcp://h:99999'}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            16,
            "malformed Docker endpoint",
        ),
        (
            "name: t\nimage: i\ndocker: {host: garbage}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            16,
            "malformed Docker endpoint \"garbage\": no scheme",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nray: {ready_timeout_s: 10000000}\nworkers: [{name: g, count: 1}]\n",
            4,
            24,
            "1 to 86400 seconds",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x, mount: /mnt/../etc}\nworkers: [{name: g, count: 1}]\n",
            3,
            9,
            "shared: invalid shared.mount \"/mnt/../etc\"",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x, nfs: {server: a, export: /e}}\nworkers: [{name: g, count: 1}]\n",
            3,
            9,
            "give exactly one of `host_path` and `nfs`",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: relative/x}\nworkers: [{name: g, count: 1}]\n",
            3,
            21,
            "is not an absolute path",
        ),
        // issue 26 item 12: argus's own resources, the object store, the driver's node
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nhead: {resources: {worker_node: 1}}\nworkers: [{name: g, count: 1}]\n",
            4,
            33,
            "head.resources.worker_node: worker_node cannot be a node's own resource: argus marks every worker",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, resources: {head_node: 1}}]\n",
            4,
            54,
            "workers[0].resources.head_node: head_node cannot be a node's own resource",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, resources: {object_store_memory: 1}}]\n",
            4,
            64,
            "object_store_memory cannot be a node's own resource: Ray's own resource",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, resources: {'node:10.0.0.1': 1}}]\n",
            4,
            60,
            "Ray names every node node:<address> itself",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, memory: 8g, object_store_memory: 1g}]\n",
            4,
            64,
            "object_store_memory (1g) without shm_size: Docker's /dev/shm is 64 MiB",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, memory: 1g, shm_size: 2g, object_store_memory: 1500m}]\n",
            4,
            78,
            "exceeds memory (1g)",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {accelerator_h20: 1}}\nworkers: [{name: g, count: 1}]\n",
            4,
            32,
            "submit.entrypoint_resources: no node offers accelerator_h20: 1, so the driver would wait forever",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {accelerator_h20: 8}}\nworkers: [{name: g, count: 1, resources: {accelerator_h20: 4}}]\n",
            4,
            32,
            "no node offers accelerator_h20: 8",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_resources: {CPU: 1}}\nworkers: [{name: g, count: 1}]\n",
            4,
            38,
            "CPU is Ray's own resource, not a custom one",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_num_gpus: 2}\nworkers: [{name: g, count: 1, gpus: 1}]\n",
            4,
            31,
            "no single node has all the driver asks for (GPU: 2, worker_node: 1)",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nslurm: {sbatch_args: [--exclusive, -N4]}\nworkers: [{name: g, count: 1}]\n",
            4,
            36,
            "slurm.sbatch_args[1]: \"-N4\" sets --nodes (-N): argus writes it into the batch script itself",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nslurm: {sbatch_args: [-wnode1]}\nworkers: [{name: g, count: 1}]\n",
            4,
            23,
            "\"-wnode1\" sets --nodelist (-w): a node list longer than --nodes raises the node count",
        ),
        // the driver's CPUs, a node's address and resource names nobody can type back
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nsubmit: {entrypoint_num_cpus: 8}\nworkers: [{name: g, count: 1, cpus: 4}]\n",
            4,
            31,
            "no single node has all the driver asks for (CPU: 8, worker_node: 1)",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, resources: {\"gpu h20\": 1}}]\n",
            4,
            54,
            "\"gpu h20\": a resource name is ASCII letters",
        ),
        (
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1, resources: {\"w\u{043E}rker\": 1}}]\n",
            4,
            53,
            "a resource name is ASCII letters",
        ),
        // class 6: auth that is not there
        (
            "name: t\nimage: argus/ray:2.51.1\nshared: {host_path: /tmp/x}\nray: {auth: token}\nworkers: [{name: g, count: 1}]\n",
            4,
            13,
            "image argus/ray:2.51.1 has Ray 2.51, which has no token auth",
        ),
    ];

    #[test]
    fn bad_profiles_get_one_located_error_each() {
        let mut wrong = Vec::new();
        for (text, line, column, want) in BAD {
            let err = load(text).unwrap_err();
            if !err.to_string().contains(want) || (err.line, err.column) != (*line, *column) {
                wrong.push(format!(
                    "{text:?}\n  want {line}:{column} {want:?}\n  got  {err}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// What the item-12 rules must still let through: a node's own resources, the driver
    /// on the one node that has them, an object store inside shm and memory.
    #[test]
    fn resources_and_object_stores_that_fit_are_accepted() {
        let text = format!(
            "{BASE}submit: {{entrypoint_resources: {{worker_node: 1, accelerator_h20: 4, 'node:10.0.0.2': 0.01}}, entrypoint_num_gpus: 1}}\nhead: {{memory: 2g, shm_size: 512m, object_store_memory: 256m}}\nworkers:\n  - {{name: cpu, count: 1}}\n  - {{name: gpu, count: 1, gpus: 4, resources: {{accelerator_h20: 4, cpu: 8}}, object_store_memory: 64m}}\n"
        );
        load(&text).unwrap();
    }

    #[test]
    fn token_auth_is_accepted_with_a_ray_that_has_it() {
        let text = "name: t\nimage: argus/ray:2.52.0\nshared: {host_path: /tmp/x}\nray: {auth: token}\nworkers: [{name: g, count: 1}]\n";
        load(text).unwrap();
        assert_eq!(token_auth_supported("2.51.1"), Some(false));
        assert_eq!(token_auth_supported("2.52.0"), Some(true));
        assert_eq!(token_auth_supported("3.0"), Some(true));
        assert_eq!(token_auth_supported("nightly"), None);
    }

    #[test]
    fn the_shared_storage_is_a_host_path_or_an_nfs_volume() {
        let p = load("name: t\nimage: i\nshared: {nfs: {server: nas.example, export: /e, options: 'nfsvers=4.1,rw'}}\nworkers: [{name: g, count: 1}]\n").unwrap();
        assert!(matches!(p.profile.shared.storage, SharedStorage::Nfs(_)));
        assert!(p.host_layout().is_err());
        // The record of a profile parses back to the same storage.
        let again = load(&yaml::to_string(&p.profile)).unwrap();
        assert_eq!(
            again.profile.shared.nfs().map(|n| n.options.clone()),
            p.profile.shared.nfs().map(|n| n.options.clone())
        );
        let p = load(&format!("{BASE}workers: [{{name: g, count: 1}}]\n")).unwrap();
        assert_eq!(p.host_layout().unwrap().root(), Path::new("/tmp/x"));
    }

    /// `submit.shared_root` (the old RayConfig's root as the job sees it) may only name
    /// `shared.mount`, however spelled: the containers mount the storage there and nowhere
    /// else. The one rule then gives the mount to every reader.
    #[test]
    fn a_shared_root_may_only_name_the_mount() {
        let workers = "workers: [{name: g, count: 1}]\n";
        for (mount, root) in [
            ("/mnt/shared", "/mnt/shared"),
            ("/mnt/shared", "/mnt//shared/"),
            ("/data/argus", "/data/argus"),
        ] {
            let text = format!(
                "name: t\nimage: i\nshared: {{host_path: /tmp/x, mount: {mount}}}\nsubmit: {{shared_root: '{root}'}}\n{workers}"
            );
            let p = load(&text).unwrap();
            assert_eq!(p.profile.container_layout().mount(), mount);
        }
        let err = load(&format!(
            "{BASE}submit: {{shared_root: /mnt/elsewhere}}\n{workers}"
        ))
        .unwrap_err();
        assert_eq!((err.line, err.column), (4, 23), "{err}");
        assert!(
            err.message.contains(
                "submit.shared_root: \"/mnt/elsewhere\" is not shared.mount (\"/mnt/shared\")"
            ),
            "{err}"
        );
        let hint = err.hint.unwrap_or_default();
        assert!(hint.contains("set shared.mount: /mnt/elsewhere"), "{hint}");
    }

    #[test]
    fn a_malformed_docker_host_env_is_bad_input() {
        let p = load(&format!("{BASE}workers: [{{name: g, count: 1}}]\n")).unwrap();
        // SAFETY: nextest runs each test in its own process.
        unsafe { std::env::set_var("DOCKER_HOST", "tcp//oops") };
        let err = p.docker_endpoint().unwrap_err();
        assert!(
            err.to_string()
                .contains("DOCKER_HOST: malformed Docker endpoint"),
            "{err}"
        );
        unsafe { std::env::set_var("DOCKER_HOST", "tcp://127.0.0.1:2375") };
        assert_eq!(
            p.docker_endpoint().unwrap().as_str(),
            "tcp://127.0.0.1:2375"
        );
        unsafe { std::env::remove_var("DOCKER_HOST") };
    }
}
