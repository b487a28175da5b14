//! What is running: the cluster's containers as Docker sees them and its nodes as Ray
//! sees them.

use bollard::query_parameters::InspectContainerOptions;
use futures_util::future::join_all;
use serde::Serialize;

use super::Error;
use super::docker;
use super::reconcile::{observe, ray_client};
use crate::config::LoadedProfile;
use crate::ray::RayNode;

#[derive(Debug, Clone, Serialize)]
pub struct ContainerStatus {
    pub name: String,
    pub state: String,
    pub restarts: i64,
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub cluster: String,
    pub dashboard_url: String,
    pub containers: Vec<ContainerStatus>,
    /// Ray's nodes, or why they could not be listed.
    pub nodes: Vec<RayNode>,
    pub ray_error: Option<String>,
    pub ray_version: Option<String>,
}

pub async fn status(loaded: &LoadedProfile) -> Result<StatusReport, Error> {
    let cluster = loaded.profile.name.clone();
    let docker = docker::connect(loaded.profile.docker.host.as_deref()).await?;
    let mut observed = observe(&docker, &cluster).await?;
    observed.sort_by(|a, b| a.name.cmp(&b.name));
    let containers = join_all(observed.iter().map(|o| async {
        let info = docker
            .inspect_container(&o.id, None::<InspectContainerOptions>)
            .await
            .ok();
        ContainerStatus {
            name: o.name.clone(),
            state: o.state.clone(),
            restarts: info.as_ref().and_then(|i| i.restart_count).unwrap_or(0),
            started_at: info.and_then(|i| i.state).and_then(|s| s.started_at),
        }
    }))
    .await;
    let ray = ray_client(loaded)?;
    let (nodes, ray_error, ray_version) = if containers.is_empty() {
        (
            Vec::new(),
            Some("no containers: the cluster is down".to_string()),
            None,
        )
    } else {
        match ray.nodes().await {
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
        }
    };
    Ok(StatusReport {
        cluster,
        dashboard_url: loaded.dashboard_url(),
        containers,
        nodes,
        ray_error,
        ray_version,
    })
}
