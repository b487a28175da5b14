//! The `ray:` section: the head's ports (clear of Ray's own and, in host mode, of the
//! nodes' port blocks), the ready timeout, and token auth.

use super::{
    HOST_MODE_PORT_BASE, HOST_MODE_PORT_BLOCK, MAX_HOST_MODE_NODES, MAX_READY_TIMEOUT_S,
    TOKEN_AUTH_SINCE,
};
use crate::config::env;
use crate::config::profile::types::{AuthMode, NetworkMode, Profile};
use crate::config::yaml::{ConfigError, Source};
use crate::ids::RayVersion;
use crate::yaml_path;

pub(super) fn validate_ray(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let ray = &p.ray;
    if ray.dashboard_bind.parse::<std::net::IpAddr>().is_err() {
        return Err(src
            .error_at(
                &yaml_path!["ray", "dashboard_bind"],
                format!("{:?} is not an IP address", ray.dashboard_bind),
            )
            .with_hint("127.0.0.1 (this host only) or 0.0.0.0 (every interface)"));
    }
    let ports = [
        ("gcs_port", ray.gcs_port),
        ("dashboard_port", ray.dashboard_port),
    ];
    for (key, port) in ports {
        if port == 0 {
            return Err(src.error_at(&yaml_path!["ray", key], "port must be between 1 and 65535"));
        }
        if let Some(owner) = ray_reserved_port(port) {
            return Err(src
                .error_at(&yaml_path!["ray", key], format!("port {port} is {owner}"))
                .with_hint("a port outside 10001-19999 and other than 52365, e.g. 6379 / 8265"));
        }
    }
    if p.network.mode == NetworkMode::Host {
        check_host_mode_ports(p, src, ports)?;
    }
    if ray.gcs_port == ray.dashboard_port {
        return Err(src.error_at(
            &yaml_path!["ray", "dashboard_port"],
            "dashboard_port and gcs_port must differ",
        ));
    }
    if ray.ready_timeout_s == 0 || ray.ready_timeout_s > MAX_READY_TIMEOUT_S {
        return Err(src
            .error_at(
                &yaml_path!["ray", "ready_timeout_s"],
                format!("{} seconds is out of range", ray.ready_timeout_s),
            )
            .with_hint(format!("1 to {MAX_READY_TIMEOUT_S} seconds (one day)")));
    }
    if ray.auth == AuthMode::Token {
        check_token_auth(p, src)?;
    }
    Ok(())
}

/// In host mode the head's ports are on the head's host, next to the blocks of its other
/// nodes: neither may fall in one.
fn check_host_mode_ports(
    p: &Profile,
    src: &Source,
    ports: [(&str, u16); 2],
) -> Result<(), ConfigError> {
    let head_host = p.head_host();
    let nodes = 1 + p
        .workers
        .iter()
        .flat_map(|g| g.placement(head_host))
        .filter(|h| *h == head_host)
        .count() as u32;
    let end = HOST_MODE_PORT_BASE + HOST_MODE_PORT_BLOCK * nodes.min(MAX_HOST_MODE_NODES);
    for (key, port) in ports {
        if (HOST_MODE_PORT_BASE..end).contains(&u32::from(port)) {
            let node = (u32::from(port) - HOST_MODE_PORT_BASE) / HOST_MODE_PORT_BLOCK;
            return Err(src
                .error_at(
                    &yaml_path!["ray", key],
                    format!(
                        "port {port} is in the host-mode port block of Ray node {node} ({}-{})",
                        HOST_MODE_PORT_BASE + HOST_MODE_PORT_BLOCK * node,
                        HOST_MODE_PORT_BASE + HOST_MODE_PORT_BLOCK * node + HOST_MODE_PORT_BLOCK - 1
                    ),
                )
                .with_hint(format!(
                    "in host mode, ports {HOST_MODE_PORT_BASE}-{} belong to this cluster's {nodes} Ray nodes; e.g. 6379 / 8265",
                    end - 1
                )));
        }
    }
    Ok(())
}

/// `ray.auth: token`: a token variable by a valid name, and (for argus's own images, whose
/// tag names their Ray) a Ray that has token auth.
fn check_token_auth(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let ray = &p.ray;
    if !env::valid_name(&ray.token_env) {
        return Err(src.error_at(
            &yaml_path!["ray", "token_env"],
            "must name an environment variable",
        ));
    }
    // Only argus's own tags are read here; `argus up` reads the label argus's images
    // carry, whatever their name.
    if let Some(RayVersion(major, minor, _)) =
        RayVersion::of_image(&p.image).filter(|_| p.image.starts_with("argus/ray:"))
        && (major, minor) < TOKEN_AUTH_SINCE
    {
        return Err(src
            .error_at(
                &yaml_path!["ray", "auth"],
                format!(
                    "image {} has Ray {major}.{minor}, which has no token auth (it came with Ray {}.{}): the cluster would start unauthenticated",
                    p.image, TOKEN_AUTH_SINCE.0, TOKEN_AUTH_SINCE.1
                ),
            )
            .with_hint(format!(
                "an image with Ray >= {}.{} (argus image build --ray-version 2.52.0, then image: argus/ray:2.52.0), or ray.auth: disabled with dashboard_bind: 127.0.0.1",
                TOKEN_AUTH_SINCE.0, TOKEN_AUTH_SINCE.1
            )));
    }
    Ok(())
}

/// Ports Ray itself takes by default on every node, and what takes them.
fn ray_reserved_port(port: u16) -> Option<&'static str> {
    match port {
        10001 => Some("Ray's client server port"),
        10002..=19999 => Some("in Ray's default worker port range 10002-19999"),
        52365 => Some("Ray's dashboard agent port"),
        _ => None,
    }
}
