//! Host network mode's ports: each Ray node on a host takes its own block of 1,000 ports
//! (from 20000), and clusters sharing a host take disjoint blocks.

use std::collections::{BTreeMap, BTreeSet};

use super::HOST_MODE_PORT_BASE;
use crate::config::profile::{HOST_MODE_PORT_BLOCK, NetworkMode, Profile};

/// The next block of each host, from the cluster's first block there.
pub(super) struct Blocks(BTreeMap<String, u32>);

impl Blocks {
    pub(super) fn new(first: &BTreeMap<String, u32>) -> Self {
        Blocks(first.clone())
    }

    /// Host mode: node N of a host gets the N-th block of ports there.
    pub(super) fn next(&mut self, host: &str) -> u32 {
        let n = self.0.entry(host.to_string()).or_default();
        let block = *n;
        *n += 1;
        block
    }
}

/// Within the head's block (host mode): the Ray client server's port. Offsets 0-5 are the
/// node's own ports, 100-999 its workers'; 6-99 are free for the head's.
pub const HEAD_CLIENT_PORT_OFFSET: u32 = 6;

/// The first port of host-mode block `n`.
pub fn block_base(n: u32) -> u32 {
    HOST_MODE_PORT_BASE + HOST_MODE_PORT_BLOCK * n
}

/// What another cluster holds on one host: its containers' host-mode port blocks and the
/// host ports its heads listen on or publish (read from the engine: see `reconcile`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldPorts {
    pub host: String,
    pub cluster: String,
    pub container: String,
    pub blocks: BTreeSet<u32>,
    pub ports: BTreeSet<u16>,
}

/// A host's ports another cluster already holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortClash {
    #[error(
        "{key} {port} of cluster {cluster} is already taken on host {host} by cluster {holder} (container {container})"
    )]
    Taken {
        cluster: String,
        key: &'static str,
        port: u16,
        host: String,
        holder: String,
        container: String,
    },
    #[error(
        "no {nodes} free host-mode port blocks left on host {host} for cluster {cluster}: clusters {holders} hold the others"
    )]
    NoBlocks {
        cluster: String,
        nodes: u32,
        host: String,
        holders: String,
    },
}

/// The port block a container's command puts it in (`--node-manager-port`), and the host
/// ports its head listens on (`--port`, `--dashboard-port`, `--ray-client-server-port`).
pub fn ports_of_command<'a>(
    words: impl IntoIterator<Item = &'a str>,
) -> (Option<u32>, BTreeSet<u16>) {
    let mut block = None;
    let mut ports = BTreeSet::new();
    for word in words {
        let Some((flag, value)) = word.split_once('=') else {
            continue;
        };
        let Ok(port) = value.parse::<u16>() else {
            continue;
        };
        match flag {
            "--node-manager-port" if u32::from(port) >= HOST_MODE_PORT_BASE => {
                block = Some((u32::from(port) - HOST_MODE_PORT_BASE) / HOST_MODE_PORT_BLOCK);
            }
            "--port" | "--dashboard-port" | "--ray-client-server-port" => {
                ports.insert(port);
            }
            _ => {}
        }
    }
    (block, ports)
}

/// Host mode: the first port block of this cluster on each of its hosts, so that no block
/// is one another cluster's on the same host (several users share GPU hosts). A host keeps
/// the block its running containers already use (`own`) while that stays free; otherwise the
/// lowest run of free blocks is taken: the same engine state gives the same blocks. The
/// head's own ports (`gcs_port`, `dashboard_port`, or the published dashboard in bridge
/// mode) are refused when another cluster holds them, naming it. Pure.
pub fn choose_first_blocks(
    p: &Profile,
    held: &[HeldPorts],
    own: &BTreeMap<String, u32>,
) -> Result<BTreeMap<String, u32>, PortClash> {
    let head_host = p.head_host();
    fn on<'a>(held: &'a [HeldPorts], host: &'a str) -> impl Iterator<Item = &'a HeldPorts> {
        held.iter().filter(move |h| h.host == host)
    }
    let mut head_ports = vec![("dashboard_port", p.ray.dashboard_port)];
    if p.network.mode == NetworkMode::Host {
        head_ports.push(("gcs_port", p.ray.gcs_port));
    }
    for (key, port) in head_ports {
        let holder = on(held, head_host).find(|h| {
            h.ports.contains(&port)
                || h.blocks
                    .iter()
                    .any(|b| (block_base(*b)..block_base(*b + 1)).contains(&u32::from(port)))
        });
        if let Some(holder) = holder {
            return Err(PortClash::Taken {
                cluster: p.name.clone(),
                key,
                port,
                host: head_host.to_string(),
                holder: holder.cluster.clone(),
                container: holder.container.clone(),
            });
        }
    }
    let mut first = BTreeMap::new();
    if p.network.mode != NetworkMode::Host {
        return Ok(first);
    }
    let mut nodes: BTreeMap<&str, u32> = BTreeMap::from([(head_host, 1)]);
    for group in &p.workers {
        for host in group.placement(head_host) {
            *nodes.entry(host).or_default() += 1;
        }
    }
    for (host, n) in nodes {
        let taken: BTreeSet<u32> = on(held, host)
            .flat_map(|h| h.blocks.iter().copied())
            .collect();
        let taken_ports: BTreeSet<u32> = on(held, host)
            .flat_map(|h| h.ports.iter().map(|p| u32::from(*p)))
            .chain(
                (host == head_host)
                    .then_some([p.ray.gcs_port, p.ray.dashboard_port].map(u32::from))
                    .into_iter()
                    .flatten(),
            )
            .collect();
        let free = |start: u32| {
            start + n <= crate::config::profile::MAX_HOST_MODE_NODES
                && (start..start + n).all(|b| {
                    !taken.contains(&b)
                        && !taken_ports
                            .iter()
                            .any(|port| (block_base(b)..block_base(b + 1)).contains(port))
                })
        };
        let start = own
            .get(host)
            .copied()
            .filter(|s| free(*s))
            .or_else(|| (0..crate::config::profile::MAX_HOST_MODE_NODES).find(|s| free(*s)));
        let Some(start) = start else {
            let holders: BTreeSet<&str> = on(held, host).map(|h| h.cluster.as_str()).collect();
            return Err(PortClash::NoBlocks {
                cluster: p.name.clone(),
                nodes: n,
                host: host.to_string(),
                holders: holders.into_iter().collect::<Vec<_>>().join(", "),
            });
        };
        first.insert(host.to_string(), start);
    }
    Ok(first)
}

/// In host network mode every Ray process on a host needs its own ports (the dashboard
/// agent's 52365 is fixed by default and collides): node N gets the block 20000 + 1000·N.
pub(super) fn host_mode_ports(node_number: u32) -> Vec<String> {
    let base = block_base(node_number);
    vec![
        format!("--node-manager-port={base}"),
        format!("--object-manager-port={}", base + 1),
        format!("--dashboard-agent-listen-port={}", base + 2),
        format!("--dashboard-agent-grpc-port={}", base + 3),
        format!("--metrics-export-port={}", base + 4),
        format!("--runtime-env-agent-port={}", base + 5),
        format!("--min-worker-port={}", base + 100),
        format!("--max-worker-port={}", base + 999),
    ]
}
