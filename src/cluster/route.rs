//! Where the cluster's Jobs API (the Ray dashboard) is, for a profile: a URL this machine
//! dials, or a tunnel through the head host's Docker endpoint. Pure: `plan` and `status`
//! name the place, `access` opens it. See `access` for why the routes are what they are.

use crate::config::LoadedProfile;

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
