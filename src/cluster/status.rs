//! What is running: each host's engine (reachable, version, image), the cluster's
//! containers on each host as Docker sees them, and its nodes as Ray sees them.

use bollard::query_parameters::InspectContainerOptions;
use futures_util::future::join_all;
use serde::Serialize;

use super::Error;
use super::access;
use super::hosts::{self, Engine};
use super::reconcile::observe_all;
use crate::config::LoadedProfile;
use crate::ray::RayNode;

#[derive(Debug, Clone, Serialize)]
pub struct HostStatus {
    pub name: String,
    pub endpoint: String,
    pub reachable: bool,
    /// Why the engine did not answer.
    pub error: Option<String>,
    pub engine_version: Option<String>,
    /// The profile's image on this host: its id, or None when absent.
    pub image_id: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContainerStatus {
    pub host: String,
    pub name: String,
    pub state: String,
    pub restarts: i64,
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub cluster: String,
    pub dashboard_url: String,
    pub image: String,
    pub hosts: Vec<HostStatus>,
    pub containers: Vec<ContainerStatus>,
    /// Ray's nodes, or why they could not be listed.
    pub nodes: Vec<RayNode>,
    pub ray_error: Option<String>,
    pub ray_version: Option<String>,
}

impl StatusReport {
    /// Hosts whose engine did not answer.
    pub fn unreachable(&self) -> impl Iterator<Item = &HostStatus> {
        self.hosts.iter().filter(|h| !h.reachable)
    }
}

pub async fn status(loaded: &LoadedProfile) -> Result<StatusReport, Error> {
    let cluster = loaded.profile.name.clone();
    let image = loaded.profile.image.clone();
    let all_hosts = hosts::cluster_hosts(loaded)?;
    // One host that does not answer is an error, as it always was; of several, each is
    // reported for what it is.
    let (engines, unreachable) = if loaded.has_hosts() {
        hosts::connect_all(&all_hosts, hosts::CONNECT_TIMEOUT).await
    } else {
        (hosts::connect_every(loaded).await?, Vec::new())
    };
    let host_statuses = join_all(all_hosts.iter().map(|h| {
        let engine = hosts::engine(&engines, &h.name);
        let why = unreachable
            .iter()
            .find(|u| u.host == h.name)
            .map(|u| u.reason.clone());
        let image = image.as_str();
        async move {
            let (engine_version, image_id) = match engine {
                Some(e) => engine_facts(e, image).await,
                None => (None, None),
            };
            HostStatus {
                name: h.name.clone(),
                endpoint: h.endpoint.to_string(),
                reachable: engine.is_some(),
                error: why,
                engine_version,
                image_id,
            }
        }
    }))
    .await;
    let mut observed = observe_all(&engines, &cluster).await?;
    observed.sort_by(|a, b| (&a.host, &a.name).cmp(&(&b.host, &b.name)));
    let containers = join_all(observed.iter().map(|o| async {
        let info = match hosts::engine(&engines, &o.host) {
            Some(e) => e
                .docker
                .inspect_container(&o.id, None::<InspectContainerOptions>)
                .await
                .ok(),
            None => None,
        };
        ContainerStatus {
            host: o.host.clone(),
            name: o.name.clone(),
            state: o.state.clone(),
            restarts: info.as_ref().and_then(|i| i.restart_count).unwrap_or(0),
            started_at: info.and_then(|i| i.state).and_then(|s| s.started_at),
        }
    }))
    .await;
    let head_host = loaded.profile.head_host();
    let head_unreachable = hosts::engine(&engines, head_host).is_none();
    let (nodes, ray_error, ray_version) = if containers.is_empty() && !head_unreachable {
        (
            Vec::new(),
            Some("no containers: the cluster is down".to_string()),
            None,
        )
    } else {
        let ray = match hosts::engine(&engines, head_host) {
            Some(head) => {
                let token = super::auth::cluster_token(loaded, false)?;
                access::ray_client_on(loaded, &head.docker, token).await
            }
            None => Err(Error::HostsUnreachable(
                unreachable
                    .iter()
                    .filter(|u| u.host == head_host)
                    .cloned()
                    .collect(),
            )),
        };
        match ray {
            Err(e) => (Vec::new(), Some(e.to_string()), None),
            Ok(ray) => match ray.nodes().await {
                Ok(mut nodes) => {
                    nodes.sort_by(|a, b| {
                        (b.alive(), b.is_head_node, &a.node_name).cmp(&(
                            a.alive(),
                            a.is_head_node,
                            &b.node_name,
                        ))
                    });
                    (nodes, None, ray.ray_version().await.ok())
                }
                Err(e) => (Vec::new(), Some(e.to_string()), None),
            },
        }
    };
    Ok(StatusReport {
        cluster,
        dashboard_url: super::route::dashboard_label(loaded),
        image,
        hosts: host_statuses,
        containers,
        nodes,
        ray_error,
        ray_version,
    })
}

/// An engine's version and the id of `image` there (None when absent).
async fn engine_facts(engine: &Engine, image: &str) -> (Option<String>, Option<String>) {
    let (version, inspected) =
        tokio::join!(engine.docker.version(), engine.docker.inspect_image(image));
    (
        version.ok().and_then(|v| v.version),
        inspected.ok().and_then(|i| i.id),
    )
}
