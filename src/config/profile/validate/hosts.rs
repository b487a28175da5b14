//! `hosts:`: unique names, endpoints and addresses, TLS files, host networking across
//! hosts, no single-host settings that would contradict them, and a Jobs API that is
//! reachable from the network only behind a token.

use std::collections::HashMap;

use super::{MAX_HOSTS, NAME_RULE, valid_name};
use crate::config::docker::EndpointKind;
use crate::config::profile::expand_path;
use crate::config::profile::types::{AuthMode, HostSpec, NetworkMode, NodeAddress, Profile};
use crate::config::yaml::{ConfigError, Seg, Source};
use crate::yaml_path;

/// Every host, then what the list rules out; a profile without `hosts:` names no host.
pub(super) fn validate_hosts(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    if p.hosts.is_empty() {
        if p.head.host.is_some() {
            return Err(src
                .error_at(&yaml_path!["head", "host"], "names a host, but the profile has no hosts: list")
                .with_hint("add hosts: [{name: a, docker: ssh://root@10.0.0.11, address: 10.0.0.11}, ...], or remove head.host"));
        }
        return Ok(());
    }
    if p.hosts.len() > MAX_HOSTS {
        return Err(src
            .error_at(
                &yaml_path!["hosts", MAX_HOSTS],
                format!("{} hosts", p.hosts.len()),
            )
            .with_hint(format!("at most {MAX_HOSTS} hosts")));
    }
    let mut seen = Seen::default();
    for (i, host) in p.hosts.iter().enumerate() {
        seen.check(p, src, i, host)?;
        check_tls(src, i, host)?;
    }
    check_no_single_host_settings(p, src, &seen.names)?;
    check_dashboard_bind(p, src)
}

/// The names, endpoints and addresses of the hosts so far, each with its index.
#[derive(Default)]
struct Seen<'p> {
    names: HashMap<&'p str, usize>,
    endpoints: HashMap<&'p str, usize>,
    addresses: HashMap<NodeAddress, usize>,
}

impl<'p> Seen<'p> {
    /// `hosts[i]`: a valid name, and a name, endpoint and address no host before has.
    fn check(
        &mut self,
        p: &Profile,
        src: &Source,
        i: usize,
        host: &'p HostSpec,
    ) -> Result<(), ConfigError> {
        let at = |key: &str| yaml_path!["hosts", i, key];
        if !valid_name(&host.name) {
            return Err(src
                .error_at(&at("name"), format!("invalid host name {:?}", host.name))
                .with_hint(NAME_RULE));
        }
        if let Some(first) = self.names.insert(&host.name, i) {
            return Err(src.error_at(
                &at("name"),
                format!(
                    "host name {:?} is already used by hosts[{first}]",
                    host.name
                ),
            ));
        }
        if let Some(first) = self.endpoints.insert(host.docker.as_str(), i) {
            return Err(src
                .error_at(
                    &at("docker"),
                    format!(
                        "endpoint {} is already hosts[{first}]'s: one engine is one host",
                        host.docker
                    ),
                )
                .with_hint("each host its own Docker endpoint"));
        }
        if p.hosts.len() > 1 && host.address.0.is_loopback() {
            return Err(src
                .error_at(
                    &at("address"),
                    format!(
                        "{} is a loopback address: other hosts cannot reach it",
                        host.address
                    ),
                )
                .with_hint("the host's address on the network the hosts share, e.g. 10.0.0.12"));
        }
        if let Some(first) = self.addresses.insert(host.address, i) {
            return Err(src
                .error_at(
                    &at("address"),
                    format!("address {} is already hosts[{first}]'s", host.address),
                )
                .with_hint(
                    "each host the address its Ray nodes advertise; two hosts cannot share one",
                ));
        }
        Ok(())
    }
}

/// `hosts[i].tls`: absolute paths, and only for a `tcp://` endpoint.
fn check_tls(src: &Source, i: usize, host: &HostSpec) -> Result<(), ConfigError> {
    for (key, file) in host
        .tls
        .iter()
        .flat_map(|t| [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)])
    {
        if let Some(file) = file {
            match expand_path(file) {
                Ok(path) if path.is_absolute() => {}
                Ok(_) => {
                    return Err(src
                        .error_at(
                            &yaml_path!["hosts", i, "tls", key],
                            format!("{file:?} is not an absolute path"),
                        )
                        .with_hint("/etc/argus/tls/ca.pem, ~/.docker/ca.pem"));
                }
                Err(e) => return Err(src.error_at(&yaml_path!["hosts", i, "tls", key], e)),
            }
        }
    }
    if host.tls.is_some() && !matches!(host.docker.kind(), EndpointKind::Tcp { .. }) {
        return Err(src
            .error_at(
                &yaml_path!["hosts", i, "tls"],
                format!("TLS is for tcp:// endpoints, not {}", host.docker),
            )
            .with_hint("remove tls, or use tcp://HOST:2376"));
    }
    Ok(())
}

/// With `hosts:`, the single-host settings (`docker:`, `network.head_address`) are out,
/// several hosts need host networking, and `head.host` names one of the hosts.
fn check_no_single_host_settings(
    p: &Profile,
    src: &Source,
    names: &HashMap<&str, usize>,
) -> Result<(), ConfigError> {
    if p.docker.host.is_some() || p.docker.tls.is_some() {
        return Err(src
            .error_at(
                &yaml_path!["docker"],
                "with hosts:, each host names its own Docker endpoint",
            )
            .with_hint("move the endpoint into hosts[].docker and remove the docker: section"));
    }
    if p.hosts.len() > 1 && p.network.mode != NetworkMode::Host {
        return Err(src
            .error_at(
                &yaml_path!["network", "mode"],
                format!("{} hosts need host networking: Ray nodes on different hosts reach each other at their hosts' addresses", p.hosts.len()),
            )
            .with_hint("network: {mode: host}"));
    }
    if p.network.head_address.is_some() {
        return Err(src
            .error_at(
                &yaml_path!["network", "head_address"],
                "with hosts:, workers join the head at its host's address",
            )
            .with_hint("remove head_address; set hosts[].address of the head's host"));
    }
    if let Some(host) = &p.head.host
        && !names.contains_key(host.as_str())
    {
        return Err(unknown_host(src, &yaml_path!["head", "host"], host, p));
    }
    Ok(())
}

/// The Jobs API runs code for whoever reaches it: on the network only behind a token, and
/// on an address of the head's host.
fn check_dashboard_bind(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let bind = p.ray.dashboard_bind.parse::<std::net::IpAddr>().ok();
    if let Some(bind) = bind
        && bind.is_loopback()
        && bind != std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    {
        return Err(src
            .error_at(
                &yaml_path!["ray", "dashboard_bind"],
                format!("{bind}: argus reaches the head host's loopback at 127.0.0.1"),
            )
            .with_hint("127.0.0.1, or the head host's address with ray.auth: token"));
    }
    if let Some(bind) = bind
        && !bind.is_loopback()
    {
        if p.ray.auth != AuthMode::Token {
            return Err(src
                .error_at(
                    &yaml_path!["ray", "dashboard_bind"],
                    format!("the Jobs API on {bind} would run code for anyone who reaches the head host, without a token"),
                )
                .with_hint("dashboard_bind: 127.0.0.1 (argus reaches it through a tunnel over the head host's Docker endpoint), or ray.auth: token with an image of Ray >= 2.52"));
        }
        let head_address = p
            .hosts
            .iter()
            .find(|h| h.name == p.head_host())
            .map(|h| std::net::IpAddr::V4(h.address.0));
        if !bind.is_unspecified() && Some(bind) != head_address {
            return Err(src
                .error_at(
                    &yaml_path!["ray", "dashboard_bind"],
                    format!(
                        "{bind} is not an address of the head's host {}",
                        p.head_host()
                    ),
                )
                .with_hint("127.0.0.1, the head host's address, or 0.0.0.0"));
        }
    }
    Ok(())
}

/// `host` is not one of `hosts:`; the hint lists them.
pub(super) fn unknown_host(src: &Source, at: &[Seg], host: &str, p: &Profile) -> ConfigError {
    let known: Vec<&str> = p.hosts.iter().map(|h| h.name.as_str()).collect();
    src.error_at(at, format!("unknown host {host:?}"))
        .with_hint(format!("one of the hosts: {}", known.join(", ")))
}
