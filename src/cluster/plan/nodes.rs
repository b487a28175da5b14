//! The head's and the workers' containers: each one's `ray start` command, resources, GPUs
//! and environment.

use std::collections::BTreeMap;

use super::env::with_node_env;
use super::ports::{Blocks, HEAD_CLIENT_PORT_OFFSET, block_base, host_mode_ports};
use super::{
    ContainerPlan, ExpectedNode, GpuAttach, HostPlan, NetworkAttach, PlanInputs, Role, SharedMount,
    head_name, worker_name,
};
use crate::config::profile::{GpuMode, NodeSpec, Profile, resources};

/// What every node's container plan shares.
pub(super) struct Context<'a> {
    pub(super) p: &'a Profile,
    pub(super) cluster: &'a str,
    pub(super) host_mode: bool,
    pub(super) attach: NetworkAttach,
    pub(super) mount: SharedMount,
    pub(super) env: BTreeMap<String, String>,
    pub(super) inputs: &'a PlanInputs,
    pub(super) hosts: &'a [HostPlan],
}

impl Context<'_> {
    fn address_of(&self, host: &str) -> Option<String> {
        self.hosts
            .iter()
            .find(|h| h.name == host)
            .and_then(|h| h.address.clone())
    }

    /// Where nodes advertise themselves: only where the profile names each host's
    /// address. (On a bridge network a node's address is its container's, never its host's.)
    fn advertised(&self, host: &str) -> Option<String> {
        (self.host_mode && !self.p.hosts.is_empty())
            .then(|| self.address_of(host))
            .flatten()
    }

    /// Where the workers find the GCS.
    fn head_address(&self) -> String {
        if self.host_mode {
            self.address_of(self.p.head_host())
                .unwrap_or_else(|| "127.0.0.1".to_string())
        } else {
            head_name(self.cluster)
        }
    }
}

/// The head: the GCS and the dashboard, no GPU, never a driver.
pub(super) fn head(cx: &Context, blocks: &mut Blocks) -> ContainerPlan {
    let p = cx.p;
    let head_host = p.head_host().to_string();
    let head = head_name(cx.cluster);
    let head_resources = resources::node_resources(true, &p.head.resources);
    let mut command = vec![
        "ray".to_string(),
        "start".to_string(),
        "--head".to_string(),
        "--block".to_string(),
        format!("--node-name={head}"),
        format!("--port={}", p.ray.gcs_port),
        // Inside its own network namespace (bridge) the dashboard listens on every
        // interface of the container and Docker publishes it on `dashboard_bind` only; with
        // host networking the container's interfaces are the host's, so Ray itself must bind
        // to `dashboard_bind` (the Jobs API runs code for whoever reaches it).
        format!(
            "--dashboard-host={}",
            if cx.host_mode {
                p.ray.dashboard_bind.as_str()
            } else {
                "0.0.0.0"
            }
        ),
        format!("--dashboard-port={}", p.ray.dashboard_port),
        "--num-gpus=0".to_string(),
    ];
    let head_ip = cx.advertised(&head_host);
    if let Some(ip) = &head_ip {
        command.push(format!("--node-ip-address={ip}"));
    }
    command.extend(node_flags(&p.head, &head_resources));
    let block = blocks.next(&head_host);
    if cx.host_mode {
        command.extend(host_mode_ports(block));
        // The Ray client server (10001 by default) listens on every interface of the
        // head's host: inside the head's own block, so two heads on a host never collide.
        command.push(format!(
            "--ray-client-server-port={}",
            block_base(block) + HEAD_CLIENT_PORT_OFFSET
        ));
    }
    command.push("--disable-usage-stats".to_string());
    let ports = if cx.host_mode {
        Vec::new()
    } else {
        vec![(
            p.ray.dashboard_port,
            p.ray.dashboard_bind.clone(),
            p.ray.dashboard_port,
        )]
    };
    let env = with_node_env(&cx.env, &p.head, cx.inputs.collective_iface.get(&head_host));
    ContainerPlan {
        name: head.clone(),
        host: head_host,
        role: Role::Head,
        group: None,
        index: 0,
        image: p.image.clone(),
        image_id: cx.inputs.image_id.clone(),
        command,
        env,
        cpus: p.head.cpus,
        memory: p.head.memory.map(|s| s.0),
        shm_size: p.head.shm_size.map(|s| s.0),
        gpu: GpuAttach::None,
        mount: cx.mount.clone(),
        ports,
        network: cx.attach.clone(),
        expect: ExpectedNode {
            node_name: head,
            node_ip: head_ip,
            gpus: 0,
            resources: head_resources,
        },
        extra_labels: cx.inputs.labels.clone(),
    }
}

/// Every worker of every group, on the hosts the group places them.
pub(super) fn workers(cx: &Context, blocks: &mut Blocks) -> Vec<ContainerPlan> {
    let p = cx.p;
    let head_host = p.head_host();
    let head_address = cx.head_address();
    let mut containers = Vec::new();
    for group in &p.workers {
        let node = group.node();
        let resources = resources::node_resources(false, &node.resources);
        for (index, host) in (0..).zip(group.placement(head_host)) {
            let name = worker_name(cx.cluster, &group.name, index);
            let node_ip = cx.advertised(host);
            let device_ids = group
                .device_ids
                .as_ref()
                .and_then(|lists| lists.get(index as usize))
                .cloned()
                .unwrap_or_default();
            let gpu = match group.gpu_mode {
                _ if group.gpus == 0 => GpuAttach::None,
                GpuMode::Simulated => GpuAttach::Simulated { count: group.gpus },
                GpuMode::Nvidia => GpuAttach::Nvidia { device_ids },
                GpuMode::Amd => GpuAttach::Amd { device_ids },
            };
            let mut command = vec![
                "ray".to_string(),
                "start".to_string(),
                "--block".to_string(),
                format!("--node-name={name}"),
                format!("--address={head_address}:{}", p.ray.gcs_port),
                format!("--num-gpus={}", group.gpus),
            ];
            if let Some(ip) = &node_ip {
                command.push(format!("--node-ip-address={ip}"));
            }
            command.extend(node_flags(&node, &resources));
            let block = blocks.next(host);
            if cx.host_mode {
                command.extend(host_mode_ports(block));
            }
            command.push("--disable-usage-stats".to_string());
            containers.push(ContainerPlan {
                name: name.clone(),
                host: host.to_string(),
                role: Role::Worker,
                group: Some(group.name.clone()),
                index,
                image: p.image.clone(),
                image_id: cx.inputs.image_id.clone(),
                command,
                env: with_node_env(&cx.env, &node, cx.inputs.collective_iface.get(host)),
                cpus: node.cpus,
                memory: node.memory.map(|s| s.0),
                shm_size: node.shm_size.map(|s| s.0),
                gpu,
                mount: cx.mount.clone(),
                ports: Vec::new(),
                network: cx.attach.clone(),
                expect: ExpectedNode {
                    node_name: name,
                    node_ip,
                    gpus: group.gpus,
                    resources: resources.clone(),
                },
                extra_labels: cx.inputs.labels.clone(),
            });
        }
    }
    containers
}

/// `--num-cpus`, `--object-store-memory`, `--resources` for one node.
fn node_flags(node: &NodeSpec, resources: &BTreeMap<String, f64>) -> Vec<String> {
    let mut flags = Vec::new();
    // Ray counts whole CPUs; the container limit stays fractional.
    if let Some(cpus) = node.ray_num_cpus() {
        flags.push(format!("--num-cpus={cpus}"));
    }
    if let Some(store) = node.object_store_memory {
        flags.push(format!("--object-store-memory={}", store.0));
    }
    flags.push(format!("--resources={}", resources_json(resources)));
    flags
}

/// `{"head_node": 1}`: whole numbers without a trailing `.0` (as Ray's `--resources` and
/// KubeRay's `entrypointResources` take them).
pub fn resources_json(resources: &BTreeMap<String, f64>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = resources
        .iter()
        .map(|(k, v)| {
            let value = if v.fract() == 0.0 && v.abs() < 1e15 {
                serde_json::json!(*v as i64)
            } else {
                serde_json::json!(v)
            };
            (k.clone(), value)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}
