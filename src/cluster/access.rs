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
use super::tunnel::Tunnel;
use crate::config::LoadedProfile;
use crate::ray::RayClient;

/// How argus reaches the head's dashboard for this profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A URL this machine can dial (single host, `submit.address`, or a dashboard bound to
    /// the head host's network address behind token auth).
    Direct(String),
    /// Through the head container of `host`, to its loopback port.
    Tunnel { host: String, port: u16 },
}

/// Where the Jobs API is, for this profile. Pure.
pub fn route(loaded: &LoadedProfile) -> Route {
    let p = &loaded.profile;
    if p.submit.address.is_some() || p.hosts.is_empty() {
        return Route::Direct(loaded.dashboard_url());
    }
    let head_host = p.head_host();
    let bind: Option<std::net::IpAddr> = p.ray.dashboard_bind.parse().ok();
    match bind {
        Some(ip) if !ip.is_loopback() => {
            let address = if ip.is_unspecified() {
                p.hosts
                    .iter()
                    .find(|h| h.name == head_host)
                    .map_or_else(|| ip.to_string(), |h| h.address.to_string())
            } else {
                ip.to_string()
            };
            Route::Direct(format!("http://{address}:{}", p.ray.dashboard_port))
        }
        _ => Route::Tunnel {
            host: head_host.to_string(),
            port: p.ray.dashboard_port,
        },
    }
}

/// How a tunnelled dashboard is named: `127.0.0.1:8265 on host a (via its Docker endpoint)`.
pub fn tunnel_label(loaded: &LoadedProfile, port: u16) -> String {
    format!(
        "127.0.0.1:{port} on host {} (through its Docker endpoint)",
        loaded.profile.head_host()
    )
}

/// What `status` and `up` print as the dashboard's place.
pub fn dashboard_label(loaded: &LoadedProfile) -> String {
    match route(loaded) {
        Route::Direct(url) => url,
        Route::Tunnel { port, .. } => tunnel_label(loaded, port),
    }
}

/// A Ray client for the profile's Jobs API, with its token; dials the head's host when
/// the route is a tunnel.
pub async fn ray_client(loaded: &LoadedProfile) -> Result<RayClient, Error> {
    let token = super::reconcile::token(loaded)?;
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
