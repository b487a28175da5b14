//! Observing: what Docker runs for a cluster on every host (its containers and networks),
//! and the host ports other argus clusters' containers hold there.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::Docker;
use futures_util::future::try_join_all;

use crate::cluster::Error;
use crate::cluster::docker::{self, docker_err};
use crate::cluster::hosts::Engine;
use crate::cluster::plan::{self, LABEL_CLUSTER, LABEL_SPEC};

/// A container of this cluster as Docker reports it.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The host whose engine runs it.
    pub host: String,
    pub id: String,
    pub name: String,
    pub state: String,
    pub spec: Option<String>,
}

/// The containers of the cluster on every host.
pub async fn observe_all(engines: &[Engine], cluster: &str) -> Result<Vec<Observed>, Error> {
    let lists = try_join_all(engines.iter().map(|e| async move {
        let mut list = observe(&e.docker, cluster).await?;
        for o in &mut list {
            o.host = e.name.clone();
        }
        Ok::<_, Error>(list)
    }))
    .await?;
    Ok(lists.into_iter().flatten().collect())
}

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

/// The cluster's containers on one engine, running or not (`host` left empty).
pub async fn observe(docker: &Docker, cluster: &str) -> Result<Vec<Observed>, Error> {
    let list = docker::containers_labelled(docker, &format!("{LABEL_CLUSTER}={cluster}")).await?;
    Ok(list
        .into_iter()
        .map(|c| Observed {
            host: String::new(),
            id: c.id.unwrap_or_default(),
            name: c
                .names
                .unwrap_or_default()
                .first()
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_default(),
            state: c.state.map(|s| s.to_string()).unwrap_or_default(),
            spec: c.labels.unwrap_or_default().get(LABEL_SPEC).cloned(),
        })
        .collect())
}

/// The cluster's networks (by label), as (id, name, attached containers).
pub(super) async fn cluster_networks(
    docker: &Docker,
    cluster: &str,
) -> Result<Vec<(String, String, usize)>, Error> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_CLUSTER}={cluster}")])]);
    let options = bollard::query_parameters::ListNetworksOptionsBuilder::new()
        .filters(&filters)
        .build();
    let list = docker
        .list_networks(Some(options))
        .await
        .map_err(docker_err("list networks"))?;
    let mut out = Vec::new();
    for n in list {
        let id = n.id.unwrap_or_default();
        // The list does not say which containers are attached; inspect does.
        let attached = match docker
            .inspect_network(
                &id,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
        {
            Ok(info) => info.containers.map_or(0, |c| c.len()),
            Err(_) => 0,
        };
        out.push((id, n.name.unwrap_or_default(), attached));
    }
    Ok(out)
}
