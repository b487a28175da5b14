//! Observing: what Docker runs for a cluster on every host (its containers and networks):
//! what reconcile diffs with the plan, and what doctor reads (below both).
//! The host ports other argus clusters' containers hold there: `cluster::held`.

use std::collections::HashMap;

use bollard::Docker;
use futures_util::future::try_join_all;

use crate::cluster::Error;
use crate::cluster::docker::{self, docker_err};
use crate::cluster::hosts::Engine;
use crate::cluster::plan::{LABEL_CLUSTER, LABEL_SPEC};

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
