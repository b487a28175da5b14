//! The plan: a profile turned into the containers, network and volume it asks for.
//!
//! Pure data, no Docker: `argus up --dry-run` prints it, reconcile compares it with what
//! is running, and its hash (a label on each container) tells whether a running container
//! still matches its spec.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod env;
mod nodes;
mod ports;
mod storage;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use nodes::resources_json;
pub use ports::{
    HEAD_CLIENT_PORT_OFFSET, HeldPorts, PortClash, block_base, choose_first_blocks,
    ports_of_command,
};

use crate::config::profile::{NetworkMode, Profile};
use crate::config::{Layout, LoadedProfile};

/// Labels argus puts on what it creates.
pub const LABEL_CLUSTER: &str = "argus.cluster";
pub const LABEL_ROLE: &str = "argus.role";
pub const LABEL_GROUP: &str = "argus.group";
pub const LABEL_INDEX: &str = "argus.index";
pub const LABEL_SPEC: &str = "argus.spec";

/// Where workers' Ray ports start in host network mode; each node gets a block of 1000.
pub const HOST_MODE_PORT_BASE: u32 = crate::config::profile::HOST_MODE_PORT_BASE;

#[derive(Debug, Clone, Serialize)]
pub struct ClusterPlan {
    pub cluster: String,
    /// The hosts, the head's first (one, `local`, for a profile without `hosts:`).
    pub hosts: Vec<HostPlan>,
    /// The private network (bridge mode); `None` in host mode.
    pub network: Option<String>,
    /// The Docker volume for an NFS export.
    pub volume: Option<VolumePlan>,
    /// The shared storage on this host, created before any container (host_path mode).
    pub shared_host_path: Option<Layout>,
    /// Head first, then the workers in profile order.
    pub containers: Vec<ContainerPlan>,
    pub dashboard_url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPlan {
    pub name: String,
    /// The address its Ray nodes advertise (`hosts[].address`; host mode's head_address).
    pub address: Option<String>,
    /// Its containers, by name.
    pub containers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VolumePlan {
    pub name: String,
    pub server: String,
    pub export: String,
    pub options: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Head,
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Head => "head",
            Role::Worker => "worker",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ContainerPlan {
    pub name: String,
    /// The host whose engine runs it. Not part of the spec hash: a container is observed
    /// on its host, and one found on another host is removed there.
    pub host: String,
    pub role: Role,
    pub group: Option<String>,
    pub index: u32,
    pub image: String,
    /// The image id the container is created from: a rebuilt image changes the spec.
    pub image_id: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cpus: Option<f64>,
    pub memory: Option<u64>,
    pub shm_size: Option<u64>,
    pub gpu: GpuAttach,
    pub mount: SharedMount,
    /// Published ports: (container port, host ip, host port).
    pub ports: Vec<(u16, String, u16)>,
    pub network: NetworkAttach,
    /// What Ray must report for this node before the cluster counts as ready.
    pub expect: ExpectedNode,
    /// Labels besides argus's own (a Slurm job's id), part of the spec.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum GpuAttach {
    None,
    Simulated { count: u32 },
    Nvidia { device_ids: Vec<u32> },
    Amd { device_ids: Vec<u32> },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SharedMount {
    Bind { source: PathBuf, target: String },
    Volume { name: String, target: String },
}

impl SharedMount {
    /// Where the containers see it.
    pub fn target(&self) -> &str {
        match self {
            SharedMount::Bind { target, .. } | SharedMount::Volume { target, .. } => target,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum NetworkAttach {
    Bridge { network: String },
    Host,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExpectedNode {
    /// Ray's `node_name` (set with `--node-name`): the container name.
    pub node_name: String,
    /// The address the node must register with (its host's, with `hosts:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_ip: Option<String>,
    pub gpus: u32,
    /// Custom resources that must be in the node's `resources_total`.
    pub resources: BTreeMap<String, f64>,
}

impl ContainerPlan {
    /// Hash of everything that defines the container; a change means recreate.
    pub fn spec_hash(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.remove("host");
        }
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    pub fn labels(&self, cluster: &str) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (LABEL_CLUSTER.to_string(), cluster.to_string()),
            (LABEL_ROLE.to_string(), self.role.as_str().to_string()),
            (LABEL_INDEX.to_string(), self.index.to_string()),
            (LABEL_SPEC.to_string(), self.spec_hash()),
        ]);
        if let Some(group) = &self.group {
            labels.insert(LABEL_GROUP.to_string(), group.clone());
        }
        for (key, value) in &self.extra_labels {
            labels.entry(key.clone()).or_insert_with(|| value.clone());
        }
        labels
    }
}

/// What the plan needs besides the profile.
#[derive(Debug, Clone, Default)]
pub struct PlanInputs {
    pub image_id: String,
    /// The Ray auth token (profile `auth: token`), passed into every container.
    pub token: Option<String>,
    /// Host mode: the first port block of each host named here (default 0), so that
    /// clusters sharing a host (two Slurm jobs on one node) use disjoint blocks.
    pub first_block: BTreeMap<String, u32>,
    /// Labels added to every container.
    pub labels: BTreeMap<String, String>,
    /// Host networking across hosts: the interface each host reaches the head through, set
    /// as `NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` on its nodes unless the profile or
    /// the node sets them (learned by a probe in `up`: `doctor::network::ifaces_for_up`).
    pub collective_iface: BTreeMap<String, String>,
}

pub fn network_name(cluster: &str) -> String {
    format!("{cluster}-net")
}

pub fn head_name(cluster: &str) -> String {
    format!("{cluster}-head")
}

pub fn worker_name(cluster: &str, group: &str, index: u32) -> String {
    format!("{cluster}-{group}-{index}")
}

/// The profile as containers. Pure: same inputs, same plan.
pub fn plan(loaded: &LoadedProfile, inputs: &PlanInputs) -> ClusterPlan {
    let p = &loaded.profile;
    let cluster = p.name.clone();
    let host_mode = p.network.mode == NetworkMode::Host;
    let network = (!host_mode).then(|| network_name(&cluster));
    let (volume, mount) = storage::shared(p);
    let hosts = host_plans(p);
    let cx = nodes::Context {
        p,
        cluster: &cluster,
        host_mode,
        attach: match &network {
            Some(network) => NetworkAttach::Bridge {
                network: network.clone(),
            },
            None => NetworkAttach::Host,
        },
        mount,
        env: env::cluster_env(p, inputs),
        inputs,
        hosts: &hosts,
    };
    let mut blocks = ports::Blocks::new(&inputs.first_block);
    let mut containers = vec![nodes::head(&cx, &mut blocks)];
    containers.extend(nodes::workers(&cx, &mut blocks));

    let hosts = hosts
        .into_iter()
        .map(|mut h| {
            h.containers = containers
                .iter()
                .filter(|c| c.host == h.name)
                .map(|c| c.name.clone())
                .collect();
            h
        })
        .collect();
    ClusterPlan {
        cluster,
        hosts,
        network,
        volume,
        shared_host_path: loaded.host_layout().ok(),
        containers,
        dashboard_url: super::route::dashboard_label(loaded),
    }
}

/// The profile's hosts, the head's first; `local` alone without `hosts:`.
fn host_plans(p: &Profile) -> Vec<HostPlan> {
    if p.hosts.is_empty() {
        return vec![HostPlan {
            name: crate::config::profile::LOCAL_HOST.to_string(),
            address: p.network.head_address.map(|a| a.to_string()),
            containers: Vec::new(),
        }];
    }
    p.hosts_head_first()
        .into_iter()
        .map(|h| HostPlan {
            name: h.name.clone(),
            address: Some(h.address.to_string()),
            containers: Vec::new(),
        })
        .collect()
}

impl ClusterPlan {
    /// The head's container plan.
    pub fn head(&self) -> Option<&ContainerPlan> {
        self.containers.iter().find(|c| c.role == Role::Head)
    }

    /// The head's host (the first).
    pub fn head_host(&self) -> &str {
        self.hosts.first().map_or("", |h| h.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::config::yaml::Source;

    fn load(path: &str) -> LoadedProfile {
        let text = std::fs::read_to_string(path).unwrap();
        LoadedProfile::from_source(Source::new(path, text)).unwrap()
    }

    fn inputs() -> PlanInputs {
        PlanInputs {
            image_id: "sha256:0123".to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn local_profile_plans_a_head_and_two_simulated_workers() {
        let plan = plan(&LoadedProfile::load(None).unwrap(), &inputs());
        let names: Vec<_> = plan.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["argus-local-head", "argus-local-gpu-0", "argus-local-gpu-1"]
        );
        assert_eq!(plan.network.as_deref(), Some("argus-local-net"));
        let head = &plan.containers[0];
        assert!(head.command.contains(&"--num-gpus=0".to_string()));
        assert!(
            head.command
                .contains(&r#"--resources={"head_node":1}"#.to_string())
        );
        assert_eq!(head.ports, vec![(8265, "127.0.0.1".to_string(), 8265)]);
        let worker = &plan.containers[1];
        assert!(
            worker
                .command
                .contains(&"--address=argus-local-head:6379".to_string())
        );
        assert!(
            worker
                .command
                .contains(&r#"--resources={"cpu":8,"worker_node":1}"#.to_string())
        );
        // Ray's CPUs are the profile's ray_cpus (no Docker limit), the head advertises none.
        assert!(worker.command.contains(&"--num-cpus=16".to_string()));
        assert_eq!(worker.cpus, None);
        assert!(head.command.contains(&"--num-cpus=0".to_string()));
        assert_eq!(worker.gpu, GpuAttach::Simulated { count: 1 });
        assert_eq!(worker.env["RAY_AUTH_MODE"], "disabled");
        assert_eq!(worker.env["HF_HOME"], "/mnt/shared/common/hf");
    }

    #[test]
    fn a_nodes_own_env_is_over_the_profiles_and_only_its_own() {
        let text = "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv: {A: p, B: p}\nhead: {env: {A: head}}\nworkers:\n  - {name: g, count: 1, env: {B: g}}\n  - {name: h, count: 1}\n";
        let loaded = LoadedProfile::from_source(Source::new("t.yaml", text.to_string())).unwrap();
        let plan = plan(&loaded, &inputs());
        let env = |i: usize, k: &str| plan.containers[i].env[k].clone();
        assert_eq!((env(0, "A"), env(0, "B")), ("head".into(), "p".into()));
        assert_eq!((env(1, "A"), env(1, "B")), ("p".into(), "g".into()));
        assert_eq!((env(2, "A"), env(2, "B")), ("p".into(), "p".into()));
    }

    #[test]
    fn spec_hash_changes_with_the_spec_and_the_image() {
        let loaded = LoadedProfile::load(None).unwrap();
        let a = plan(&loaded, &inputs());
        let b = plan(&loaded, &inputs());
        assert_eq!(a.containers[1].spec_hash(), b.containers[1].spec_hash());
        let c = plan(
            &loaded,
            &PlanInputs {
                image_id: "sha256:other".into(),
                ..Default::default()
            },
        );
        assert_ne!(a.containers[1].spec_hash(), c.containers[1].spec_hash());
    }

    #[test]
    fn h20_profile_pins_device_ids_per_worker() {
        let plan = plan(&load("profiles/h20-8gpu.yaml"), &inputs());
        assert_eq!(
            plan.containers[1].gpu,
            GpuAttach::Nvidia {
                device_ids: vec![0, 1, 2, 3]
            }
        );
        assert_eq!(
            plan.containers[2].gpu,
            GpuAttach::Nvidia {
                device_ids: vec![4, 5, 6, 7]
            }
        );
        assert!(
            plan.containers[2]
                .command
                .contains(&r#"--resources={"accelerator_h20":4,"worker_node":1}"#.to_string())
        );
    }

    #[test]
    fn host_mode_gives_each_node_of_a_host_its_own_ports() {
        let text = "name: m\nimage: argus/ray:2.51.1\nnetwork: {mode: host, head_address: 10.0.0.11}\nshared: {nfs: {server: 10.0.0.5, export: /e}}\nworkers: [{name: g, count: 2}]\n";
        let one = plan(
            &LoadedProfile::from_source(Source::new("p.yaml", text)).unwrap(),
            &inputs(),
        );
        assert!(one.network.is_none());
        let flag = |c: &ContainerPlan, f: &str| c.command.iter().any(|a| a == f);
        assert!(flag(
            &one.containers[0],
            "--dashboard-agent-listen-port=20002"
        ));
        assert!(flag(
            &one.containers[1],
            "--dashboard-agent-listen-port=21002"
        ));
        assert!(flag(
            &one.containers[2],
            "--dashboard-agent-listen-port=22002"
        ));
        assert!(flag(&one.containers[1], "--address=10.0.0.11:6379"));
        // One host: nodes do not name their address (Ray finds it).
        assert!(
            !one.containers[1]
                .command
                .iter()
                .any(|a| a.starts_with("--node-ip-address"))
        );
        assert!(matches!(
            one.containers[1].mount,
            SharedMount::Volume { .. }
        ));

        // Several hosts: blocks are counted per host, each node advertises its host.
        let multi = plan(&load("profiles/multi-host.yaml"), &inputs());
        let hosts: Vec<_> = multi.containers.iter().map(|c| c.host.as_str()).collect();
        assert_eq!(hosts, ["gpu-a", "gpu-b", "gpu-c"]);
        for c in &multi.containers {
            assert!(flag(c, "--dashboard-agent-listen-port=20002"), "{}", c.name);
        }
        assert!(flag(&multi.containers[0], "--node-ip-address=10.0.0.11"));
        assert!(flag(&multi.containers[2], "--node-ip-address=10.0.0.13"));
        assert!(flag(&multi.containers[2], "--address=10.0.0.11:6379"));
        assert_eq!(
            multi.containers[2].expect.node_ip.as_deref(),
            Some("10.0.0.13")
        );
        assert_eq!(multi.hosts[2].containers, ["multi-node-1"]);
    }

    fn held(cluster: &str, blocks: &[u32], ports: &[u16]) -> HeldPorts {
        HeldPorts {
            host: "local".into(),
            cluster: cluster.into(),
            container: format!("{cluster}-head"),
            blocks: blocks.iter().copied().collect(),
            ports: ports.iter().copied().collect(),
        }
    }

    /// Two host-mode clusters on one host: the second one's nodes get the blocks after the
    /// first one's, read back from the first one's commands; its own blocks are kept.
    #[test]
    fn a_second_host_mode_cluster_on_a_host_takes_the_next_free_blocks() {
        let text = "name: two\nimage: argus/ray:2.51.1\nnetwork: {mode: host}\nshared: {host_path: /tmp/x}\nray: {gcs_port: 6380, dashboard_port: 8266}\nworkers: [{name: g, count: 2}]\n";
        let loaded = LoadedProfile::from_source(Source::new("p.yaml", text)).unwrap();
        let first = plan(
            &LoadedProfile::from_source(Source::new(
                "p.yaml",
                text.replace("name: two", "name: one")
                    .replace("6380", "6379")
                    .replace("8266", "8265"),
            ))
            .unwrap(),
            &inputs(),
        );
        let mut others = Vec::new();
        for c in &first.containers {
            let (block, ports) = ports_of_command(c.command.iter().map(String::as_str));
            others.push(HeldPorts {
                host: c.host.clone(),
                cluster: "one".into(),
                container: c.name.clone(),
                blocks: block.into_iter().collect(),
                ports,
            });
        }
        assert_eq!(others[0].blocks, BTreeSet::from([0]));
        assert_eq!(others[0].ports, BTreeSet::from([6379, 8265, 20006]));
        let blocks = choose_first_blocks(&loaded.profile, &others, &BTreeMap::new()).unwrap();
        assert_eq!(blocks, BTreeMap::from([("local".to_string(), 3)]));
        let second = plan(
            &loaded,
            &PlanInputs {
                first_block: blocks,
                ..inputs()
            },
        );
        let mut all: Vec<u32> = Vec::new();
        for c in first.containers.iter().chain(&second.containers) {
            let (block, _) = ports_of_command(c.command.iter().map(String::as_str));
            all.push(block.unwrap());
        }
        assert_eq!(
            all,
            [0, 1, 2, 3, 4, 5],
            "every node of both clusters has its own block"
        );
        // A cluster already up keeps its blocks; a gap is reused; a full host is refused.
        let own = BTreeMap::from([("local".to_string(), 7)]);
        assert_eq!(
            choose_first_blocks(&loaded.profile, &others, &own).unwrap()["local"],
            7
        );
        let gap = [held("a", &[0, 1, 2], &[]), held("b", &[6], &[])];
        assert_eq!(
            choose_first_blocks(&loaded.profile, &gap, &BTreeMap::new()).unwrap()["local"],
            3
        );
        let full = [held("a", &(0..44).collect::<Vec<_>>(), &[])];
        let err = choose_first_blocks(&loaded.profile, &full, &BTreeMap::new()).unwrap_err();
        assert!(
            err.to_string().contains("clusters a hold the others"),
            "{err}"
        );
    }

    #[test]
    fn a_head_port_another_cluster_holds_is_refused_naming_it() {
        let text = "name: two\nimage: argus/ray:2.51.1\nnetwork: {mode: host}\nshared: {host_path: /tmp/x}\nworkers: [{name: g, count: 1}]\n";
        let loaded = LoadedProfile::from_source(Source::new("p.yaml", text)).unwrap();
        let err = choose_first_blocks(
            &loaded.profile,
            &[held("one", &[0], &[6379, 8265])],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dashboard_port 8265 of cluster two is already taken on host local by cluster one (container one-head)"
        );
        // Bridge mode: only the published dashboard is the host's.
        let bridge = text.replace("network: {mode: host}\n", "");
        let loaded = LoadedProfile::from_source(Source::new("p.yaml", bridge)).unwrap();
        assert!(
            choose_first_blocks(
                &loaded.profile,
                &[held("one", &[0], &[6379])],
                &BTreeMap::new()
            )
            .unwrap()
            .is_empty()
        );
        assert!(
            choose_first_blocks(
                &loaded.profile,
                &[held("one", &[], &[8265])],
                &BTreeMap::new()
            )
            .is_err()
        );
    }

    #[test]
    fn the_host_is_not_part_of_the_spec() {
        let multi = plan(&load("profiles/multi-host.yaml"), &inputs());
        let mut moved = multi.containers[1].clone();
        moved.host = "gpu-c".into();
        assert_eq!(moved.spec_hash(), multi.containers[1].spec_hash());
    }
}
