//! How argus reaches the cluster's Jobs API (the Ray dashboard).
//!
//! The Jobs API runs code for whoever reaches it. On one host it is published on
//! `ray.dashboard_bind` of that host (127.0.0.1 by default). With `hosts:` the head runs
//! with host networking on another machine: there the dashboard listens on that host's
//! loopback, and argus reaches it through a tunnel over the head host's own Docker
//! endpoint (an exec stream into the head container, carried by SSH for `ssh://`). Only
//! when the profile binds it to a network address, which validation allows with token
//! auth alone, does argus dial it directly.

use std::sync::Arc;

use bollard::Docker;

use super::Error;
use super::hosts;
use super::plan::head_name;
use super::route::{Route, route, tunnel_label};
use super::tunnel::Tunnel;
use crate::config::LoadedProfile;
use crate::ray::RayClient;

/// A Ray client for the profile's Jobs API, with its token; dials the head's host when
/// the route is a tunnel.
pub async fn ray_client(loaded: &LoadedProfile) -> Result<RayClient, Error> {
    let token = super::auth::cluster_token(loaded, false)?;
    match route(loaded) {
        Route::Direct(url) => Ok(RayClient::new(&url, token)),
        Route::Tunnel { host, .. } => {
            let hosts = hosts::cluster_hosts(loaded)?;
            let Some(head_host) = hosts.iter().find(|h| h.name == host) else {
                return Err(Error::BadEndpoint(format!("no host {host} in the profile")));
            };
            let (engines, unreachable) =
                hosts::connect_all(std::slice::from_ref(head_host), hosts::CONNECT_TIMEOUT).await;
            let Some(engine) = engines.into_iter().next() else {
                return Err(Error::HostsUnreachable(unreachable));
            };
            ray_client_on(loaded, &engine.docker, token).await
        }
    }
}

/// A Ray client for the profile's Jobs API when the head host's engine is already
/// connected (`up`).
pub async fn ray_client_on(
    loaded: &LoadedProfile,
    head_docker: &Docker,
    token: Option<String>,
) -> Result<RayClient, Error> {
    match route(loaded) {
        Route::Direct(url) => Ok(RayClient::new(&url, token)),
        Route::Tunnel { port, .. } => {
            // Not probed: `up` opens it before the dashboard listens, and `run` before `up`.
            let container = head_name(&loaded.profile.name);
            let tunnel = Tunnel::listen(head_docker.clone(), &container, port).await?;
            let url = tunnel.url();
            Ok(RayClient::new(&url, token)
                .with_via(tunnel_label(loaded, port))
                .with_keepalive(Arc::new(tunnel)))
        }
    }
}
