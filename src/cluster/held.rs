//! The host ports other argus clusters hold on each host, as the engines say (whoever made
//! the containers: `argus up`, a Slurm job), so that a host-mode cluster's port blocks are
//! chosen clear of them. Read by `up` (reconcile) and by `doctor`.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::future::try_join_all;

use crate::cluster::Error;
use crate::cluster::docker;
use crate::cluster::hosts::Engine;
use crate::cluster::plan::{self, LABEL_CLUSTER};

/// What the engines say about host ports: the ports and port blocks other argus clusters'
/// containers hold on each host (the engine is the truth, whoever made them: `argus up`,
/// a Slurm job), and the first block this cluster's own containers already use there.
pub async fn observe_ports(
    engines: &[Engine],
    cluster: &str,
) -> Result<(Vec<plan::HeldPorts>, BTreeMap<String, u32>), Error> {
    let lists = try_join_all(engines.iter().map(|e| async move {
        let list = docker::containers_labelled(&e.docker, LABEL_CLUSTER).await?;
        Ok::<_, Error>((e.name.clone(), list))
    }))
    .await?;
    let mut held = Vec::new();
    let mut own = BTreeMap::new();
    for (host, list) in lists {
        for c in list {
            let labels = c.labels.clone().unwrap_or_default();
            let owner = labels.get(LABEL_CLUSTER).cloned().unwrap_or_default();
            let host_network = c
                .host_config
                .as_ref()
                .and_then(|h| h.network_mode.as_deref())
                == Some("host");
            let command = c.command.clone().unwrap_or_default();
            let (block, command_ports) = plan::ports_of_command(command.split_whitespace());
            let block = block.filter(|_| host_network);
            if owner == cluster {
                if let Some(block) = block {
                    let first = own.entry(host.clone()).or_insert(block);
                    *first = (*first).min(block);
                }
                continue;
            }
            // Published ports are the host's in any mode; a command's only in host mode.
            let mut ports: BTreeSet<u16> = c
                .ports
                .iter()
                .flatten()
                .filter_map(|p| p.public_port)
                .collect();
            if host_network {
                ports.extend(command_ports);
            }
            if block.is_none() && ports.is_empty() {
                continue;
            }
            held.push(plan::HeldPorts {
                host: host.clone(),
                cluster: owner,
                container: c
                    .names
                    .unwrap_or_default()
                    .first()
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                blocks: block.into_iter().collect(),
                ports,
            });
        }
    }
    Ok((held, own))
}
