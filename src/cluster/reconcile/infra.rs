//! Acting: the shared storage, the cluster's network and volume, and the start and removal
//! of its containers.

use std::collections::HashMap;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use futures_util::future::try_join_all;

use crate::cluster::Error;
use crate::cluster::docker::{self, docker_err, is_conflict, is_not_found};
use crate::cluster::hosts::Engine;
use crate::cluster::observe::cluster_networks;
use crate::cluster::plan::{ClusterPlan, ContainerPlan, LABEL_CLUSTER, Role};
use crate::config::layout;
use crate::ui::Reporter;

/// The shared layout (host path: from this machine, which sees the same storage) and, for
/// an NFS export, the Docker volume on every host.
pub(super) async fn prepare_storage(engines: &[Engine], plan: &ClusterPlan) -> Result<(), Error> {
    if let Some(host) = &plan.shared_host_path {
        host.create().map_err(|source| Error::SharedStorage {
            path: host.root().display().to_string(),
            source,
        })?;
    }
    try_join_all(engines.iter().map(|e| ensure_volume(&e.docker, plan))).await?;
    Ok(())
}

async fn ensure_volume(docker: &Docker, plan: &ClusterPlan) -> Result<(), Error> {
    if let Some(volume) = &plan.volume {
        match docker.inspect_volume(&volume.name).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {
                let mut device_options = format!("addr={}", volume.server);
                if let Some(options) = &volume.options {
                    device_options.push(',');
                    device_options.push_str(options);
                }
                let request = VolumeCreateRequest {
                    name: Some(volume.name.clone()),
                    driver: Some("local".to_string()),
                    driver_opts: Some(HashMap::from([
                        ("type".to_string(), "nfs".to_string()),
                        ("o".to_string(), device_options),
                        ("device".to_string(), format!(":{}", volume.export)),
                    ])),
                    labels: Some(HashMap::from([(
                        LABEL_CLUSTER.to_string(),
                        plan.cluster.clone(),
                    )])),
                    ..Default::default()
                };
                docker
                    .create_volume(request)
                    .await
                    .map_err(docker_err(format!("create volume {}", volume.name)))?;
            }
            Err(e) => return Err(docker_err(format!("inspect volume {}", volume.name))(e)),
        }
    }
    Ok(())
}

/// Makes sure the cluster has exactly one network of its name and returns its id. Extra
/// networks of that name (left by two `up`s racing, before argus locked) are removed when
/// nothing is attached to them; containers always address the network by id.
pub(super) async fn ensure_network(
    docker: &Docker,
    plan: &ClusterPlan,
) -> Result<Option<String>, Error> {
    let Some(network) = &plan.network else {
        return Ok(None);
    };
    let mut ours: Vec<(String, String, usize)> = cluster_networks(docker, &plan.cluster)
        .await?
        .into_iter()
        .filter(|(_, name, _)| name == network)
        .collect();
    // Keep the one with the most containers attached (the one in use).
    ours.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    if let Some(((keep, _, _), extras)) = ours.split_first() {
        for (id, _, attached) in extras {
            if *attached == 0 {
                tracing::info!("removing a duplicate network {network} ({id})");
                let _ = docker.remove_network(id).await;
            }
        }
        return Ok(Some(keep.clone()));
    }
    let request = NetworkCreateRequest {
        name: network.clone(),
        driver: Some("bridge".to_string()),
        labels: Some(HashMap::from([(
            LABEL_CLUSTER.to_string(),
            plan.cluster.clone(),
        )])),
        ..Default::default()
    };
    match docker.create_network(request).await {
        Ok(created) => Ok(Some(created.id)),
        Err(e) if is_conflict(&e) => Err(Error::NameTaken {
            name: network.clone(),
            cluster: plan.cluster.clone(),
        }),
        Err(e) => Err(docker_err(format!("create network {network}"))(e)),
    }
}

pub(crate) async fn remove(docker: &Docker, name: &str) -> Result<(), Error> {
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(docker_err(format!("remove container {name}"))(e)),
    }
}

/// Removes what stands under the name (if it is ours), creates and starts the container.
pub(crate) async fn start(
    docker: &Docker,
    cluster: &str,
    c: &ContainerPlan,
    network_id: Option<&str>,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let task = reporter.task(&c.name);
    task.update("creating");
    match docker
        .inspect_container(&c.name, None::<InspectContainerOptions>)
        .await
    {
        Ok(existing) => {
            let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
            if labels.get(LABEL_CLUSTER).map(String::as_str) != Some(cluster) {
                task.fail("name taken by another container");
                return Err(Error::NameTaken {
                    name: c.name.clone(),
                    cluster: cluster.to_string(),
                });
            }
            remove(docker, &c.name).await?;
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(docker_err(format!("inspect container {}", c.name))(e)),
    }
    let options = CreateContainerOptionsBuilder::new().name(&c.name).build();
    let cpu_shares = match c.role {
        Role::Head => docker::head_cpu_shares(docker).await,
        Role::Worker => None,
    };
    let body = docker::create_body(c, cluster, network_id, cpu_shares);
    docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| {
            task.fail("create failed");
            docker_err(format!("create container {}", c.name))(e)
        })?;
    task.update("starting");
    docker
        .start_container(
            &c.name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| {
            task.fail("start failed");
            docker_err(format!("start container {}", c.name))(e)
        })?;
    task.done("started");
    Ok(())
}

/// `mkdir -p` of the shared layout, run in `container` through the exec API.
pub(super) async fn create_layout_inside(
    docker: &Docker,
    container: &str,
    mount: &str,
) -> Result<(), Error> {
    let mut cmd = vec!["mkdir".to_string(), "-p".to_string()];
    cmd.extend(
        layout::DIRECTORIES
            .iter()
            .map(|dir| format!("{mount}/{dir}")),
    );
    let failed = |source| Error::Docker {
        action: format!("create the shared layout in {container}"),
        source,
    };
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(cmd),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(failed)?;
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.map_err(failed)?
    {
        while output.next().await.is_some() {}
    }
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(failed)?
        .exit_code;
    if code != Some(0) {
        return Err(Error::SharedStorage {
            path: mount.to_string(),
            source: std::io::Error::other(format!("mkdir -p in {container} exited with {code:?}")),
        });
    }
    Ok(())
}
