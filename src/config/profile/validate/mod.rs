//! What serde cannot check: rules that span several fields, upper bounds, and the ports,
//! devices and names that must not collide. Runs before anything touches Docker, so a
//! bad profile never leaves half-created state behind; every error is located.

use std::collections::{BTreeMap, HashMap};

use super::types::{AuthMode, GpuMode, NetworkMode, NodeAddress, NodeSpec, Profile};
use super::{resources, sbatch};
use crate::config::docker::EndpointKind;
use crate::config::env;
use crate::config::yaml::{ConfigError, Seg, Source};
use crate::yaml_path;

/// Workers in one group, and in the whole cluster: more is a typo on a Docker host.
pub const MAX_WORKERS: u32 = 256;
/// Worker groups in one profile.
pub const MAX_GROUPS: usize = 64;
/// Hosts in one profile.
pub const MAX_HOSTS: usize = 256;
/// GPUs of one worker (real or simulated).
pub const MAX_GPUS_PER_WORKER: u32 = 64;
/// CPUs of one container.
pub const MAX_CPUS: f64 = 4096.0;
/// How long `up` may wait for Ray (one day).
pub const MAX_READY_TIMEOUT_S: u64 = 86_400;
/// A custom resource's amount.
pub const MAX_RESOURCE: f64 = 1e9;
/// Host networking: each Ray process on a host gets its own block of ports,
/// `HOST_MODE_PORT_BASE + HOST_MODE_PORT_BLOCK * n`, n = 0 for the head.
pub const HOST_MODE_PORT_BASE: u32 = 20000;
pub const HOST_MODE_PORT_BLOCK: u32 = 1000;
/// The most Ray nodes whose port blocks fit below 65536 in host mode.
pub const MAX_HOST_MODE_NODES: u32 = (65536 - HOST_MODE_PORT_BASE) / HOST_MODE_PORT_BLOCK;
/// The first Ray version with token auth.
pub const TOKEN_AUTH_SINCE: (u32, u32) = (2, 52);

const NAME_RULE: &str = "1-40 characters from [a-z0-9_.-], starting with a letter or digit";

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

/// The Ray version an image reference names, when it is argus's own `argus/ray:<x.y.z>`.
pub fn ray_version_of_image(image: &str) -> Option<(u32, u32)> {
    let version = image.strip_prefix("argus/ray:")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether Ray `version` (`2.51.1`) has token auth; None when the version is unreadable.
pub fn token_auth_supported(version: &str) -> Option<bool> {
    let (major, minor) = ray_version_of_image(&format!("argus/ray:{version}"))?;
    Some((major, minor) >= TOKEN_AUTH_SINCE)
}

/// Checks what serde cannot.
pub fn validate(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    if !valid_name(&p.name) {
        return Err(src
            .error_at(
                &yaml_path!["name"],
                format!("invalid cluster name {:?}", p.name),
            )
            .with_hint(NAME_RULE));
    }
    if p.image.trim().is_empty() {
        return Err(src
            .error_at(&yaml_path!["image"], "image must not be empty")
            .with_hint("an image reference such as argus/ray:2.51.1"));
    }
    // An image reference is `[registry[:port]/]path[:tag][@sha256:hex]`: lowercase path
    // components, no blanks or shell characters (it reaches Docker's API and the logs).
    let valid_image = p.image.len() <= 255
        && !p.image.starts_with(['/', ':', '@', '.', '-'])
        && p.image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@'));
    if !valid_image {
        return Err(src
            .error_at(
                &yaml_path!["image"],
                format!("image {:?} is not an image reference", p.image),
            )
            .with_hint("[registry/]name[:tag][@sha256:digest], e.g. argus/ray:2.51.1"));
    }
    check_container_env(src, &yaml_path!["env"], &p.env)?;
    validate_hosts(p, src)?;
    // Workers first: in host mode their number decides which ports are taken.
    validate_workers(p, src)?;
    validate_ray(p, src)?;
    validate_node(&p.head, src, &yaml_path!["head"])?;
    validate_submit(p, src)?;
    validate_slurm(p, src)
}

/// `slurm.sbatch_args`: none may set an option argus writes into the batch script.
fn validate_slurm(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let Some(slurm) = &p.slurm else {
        return Ok(());
    };
    for (i, arg) in slurm.sbatch_args.iter().enumerate() {
        if let Some((option, why)) = sbatch::owned_option(arg) {
            return Err(src
                .error_at(
                    &yaml_path!["slurm", "sbatch_args", i],
                    format!("{arg:?} sets {option}, which argus writes into the batch script itself: sbatch would silently take the last one"),
                )
                .with_hint(format!("remove it: {why}")));
        }
    }
    Ok(())
}

fn validate_ray(p: &Profile, src: &Source) -> Result<(), ConfigError> {
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
        // The head's ports are on the head's host, next to the blocks of its other nodes.
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
        if !env::valid_name(&ray.token_env) {
            return Err(src.error_at(
                &yaml_path!["ray", "token_env"],
                "must name an environment variable",
            ));
        }
        if let Some((major, minor)) = ray_version_of_image(&p.image)
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
    }
    Ok(())
}

fn validate_workers(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    if p.workers.is_empty() {
        return Err(src.error_at(&yaml_path!["workers"], "at least one worker group is needed: the training driver runs on a worker, never on the head").with_hint("workers: [{name: gpu, count: 2, gpus: 2}]"));
    }
    if p.workers.len() > MAX_GROUPS {
        return Err(src
            .error_at(
                &yaml_path!["workers", MAX_GROUPS],
                format!("{} worker groups", p.workers.len()),
            )
            .with_hint(format!("at most {MAX_GROUPS} groups")));
    }
    let mut group_names: HashMap<&str, usize> = HashMap::new();
    // A GPU is a device of one host: (host, id) is used at most once.
    let mut device_owner: HashMap<(&str, u32), String> = HashMap::new();
    let mut total: u32 = 0;
    let mut per_host: HashMap<&str, u32> = HashMap::from([(p.head_host(), 1)]);
    for (g, group) in p.workers.iter().enumerate() {
        let at = |key: &str| yaml_path!["workers", g, key];
        if !valid_name(&group.name) {
            return Err(src
                .error_at(&at("name"), format!("invalid group name {:?}", group.name))
                .with_hint(NAME_RULE));
        }
        if let Some(first) = group_names.insert(&group.name, g) {
            return Err(src.error_at(
                &at("name"),
                format!(
                    "group name {:?} is already used by workers[{first}]",
                    group.name
                ),
            ));
        }
        validate_placement(p, src, g)?;
        let count = group.count();
        if !(1..=MAX_WORKERS).contains(&count) {
            let key = if group.count.is_some() {
                "count"
            } else {
                "hosts"
            };
            return Err(src
                .error_at(
                    &at(key),
                    if count < 1 {
                        format!("count is {count}, must be at least 1")
                    } else {
                        format!("count is {count}, more than {MAX_WORKERS}")
                    },
                )
                .with_hint(format!(
                    "a whole number from 1 to {MAX_WORKERS} (remove the group to have none)"
                )));
        }
        total += count;
        if total > MAX_WORKERS {
            return Err(src
                .error_at(
                    &at("count"),
                    format!("the profile now has {total} workers, more than {MAX_WORKERS}"),
                )
                .with_hint(format!(
                    "at most {MAX_WORKERS} workers in all groups together"
                )));
        }
        let placement = group.placement(p.head_host());
        for host in &placement {
            *per_host.entry(host).or_default() += 1;
        }
        if p.network.mode == NetworkMode::Host
            && let Some((host, nodes)) = per_host
                .iter()
                .find(|(_, nodes)| **nodes > MAX_HOST_MODE_NODES)
        {
            let key = if group.count.is_some() {
                "count"
            } else {
                "hosts"
            };
            let on = if p.hosts.is_empty() {
                String::new()
            } else {
                format!(" on host {host}")
            };
            return Err(src
                .error_at(
                    &at(key),
                    format!(
                        "{nodes} Ray nodes{on} in host mode: their port blocks ({HOST_MODE_PORT_BLOCK} ports each from {HOST_MODE_PORT_BASE}) would pass 65535"
                    ),
                )
                .with_hint(format!(
                    "at most {} workers per host in host mode",
                    MAX_HOST_MODE_NODES - 1
                )));
        }
        if group.gpus > MAX_GPUS_PER_WORKER {
            return Err(src
                .error_at(&at("gpus"), format!("gpus is {}", group.gpus))
                .with_hint(format!("0 to {MAX_GPUS_PER_WORKER} GPUs per worker")));
        }
        validate_node(&group.node(), src, &yaml_path!["workers", g])?;
        match (group.gpu_mode, &group.device_ids) {
            (GpuMode::Simulated, Some(_)) => {
                return Err(src
                    .error_at(
                        &at("device_ids"),
                        "device_ids are for real GPUs; simulated GPUs are logical only",
                    )
                    .with_hint("gpu_mode: nvidia | amd, or remove device_ids"));
            }
            (GpuMode::Simulated, None) => {}
            (mode, _) if group.gpus == 0 => {
                return Err(src
                    .error_at(&at("gpus"), format!("gpu_mode {mode} needs gpus ≥ 1"))
                    .with_hint("gpus: 1 or more, or gpu_mode: simulated"));
            }
            // Which GPUs a worker gets: Slurm's allocation, Kubernetes' device plugin, or
            // device_ids, which `argus up` on Docker hosts requires (see
            // `cluster::reconcile::up`); so a profile for Slurm or KubeRay loads without them.
            (_, None) => {}
            (_, Some(lists)) => {
                if lists.len() != count as usize {
                    return Err(src
                        .error_at(
                            &at("device_ids"),
                            format!("{} lists for {count} workers", lists.len()),
                        )
                        .with_hint(format!("one list of {} GPU ids per worker", group.gpus)));
                }
                for (w, ids) in lists.iter().enumerate() {
                    if ids.len() != group.gpus as usize {
                        return Err(src
                            .error_at(
                                &yaml_path!["workers", g, "device_ids", w],
                                format!(
                                    "{} GPU ids for a worker with gpus: {}",
                                    ids.len(),
                                    group.gpus
                                ),
                            )
                            .with_hint(format!("exactly {} ids", group.gpus)));
                    }
                    let host = placement.get(w).copied().unwrap_or_default();
                    for (i, id) in ids.iter().enumerate() {
                        let here = format!("workers[{g}].device_ids[{w}][{i}]");
                        if let Some(owner) = device_owner.insert((host, *id), here) {
                            let on = if p.hosts.is_empty() {
                                String::new()
                            } else {
                                format!(" of host {host}")
                            };
                            return Err(src
                                .error_at(
                                    &yaml_path!["workers", g, "device_ids", w, i],
                                    format!("GPU {id}{on} is already used by {owner}"),
                                )
                                .with_hint("each GPU id of a host at most once across all workers on that host"));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// `hosts:`: unique names, endpoints and addresses; host networking across hosts; no
/// single-host settings that would contradict them.
fn validate_hosts(p: &Profile, src: &Source) -> Result<(), ConfigError> {
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
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut endpoints: HashMap<&str, usize> = HashMap::new();
    let mut addresses: HashMap<NodeAddress, usize> = HashMap::new();
    for (i, host) in p.hosts.iter().enumerate() {
        let at = |key: &str| yaml_path!["hosts", i, key];
        if !valid_name(&host.name) {
            return Err(src
                .error_at(&at("name"), format!("invalid host name {:?}", host.name))
                .with_hint(NAME_RULE));
        }
        if let Some(first) = names.insert(&host.name, i) {
            return Err(src.error_at(
                &at("name"),
                format!(
                    "host name {:?} is already used by hosts[{first}]",
                    host.name
                ),
            ));
        }
        if let Some(first) = endpoints.insert(host.docker.as_str(), i) {
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
        if let Some(first) = addresses.insert(host.address, i) {
            return Err(src
                .error_at(
                    &at("address"),
                    format!("address {} is already hosts[{first}]'s", host.address),
                )
                .with_hint(
                    "each host the address its Ray nodes advertise; two hosts cannot share one",
                ));
        }
        for (key, file) in host
            .tls
            .iter()
            .flat_map(|t| [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)])
        {
            if let Some(file) = file {
                match super::expand_path(file) {
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
                    &at("tls"),
                    format!("TLS is for tcp:// endpoints, not {}", host.docker),
                )
                .with_hint("remove tls, or use tcp://HOST:2376"));
        }
    }
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
    // The Jobs API runs code for whoever reaches it: on the network only behind a token.
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

/// A worker group's `count`, `host` and `hosts`: they agree and name known hosts.
fn validate_placement(p: &Profile, src: &Source, g: usize) -> Result<(), ConfigError> {
    let group = &p.workers[g];
    let at = |key: &str| yaml_path!["workers", g, key];
    if p.hosts.is_empty() {
        for (key, given) in [
            ("host", group.host.is_some()),
            ("hosts", group.hosts.is_some()),
        ] {
            if given {
                return Err(src
                    .error_at(&at(key), "names hosts, but the profile has no hosts: list")
                    .with_hint("add a hosts: list, or remove it (the group runs on the one Docker endpoint)"));
            }
        }
        if group.count.is_none() {
            return Err(src
                .error_at(&yaml_path!["workers", g], "count is missing")
                .with_hint("count: the number of workers in the group"));
        }
        return Ok(());
    }
    match (&group.host, &group.hosts) {
        (Some(_), Some(_)) => {
            return Err(src
                .error_at(
                    &at("hosts"),
                    "give host (all workers on one host) or hosts (workers per host), not both",
                )
                .with_hint("hosts: {b: 1, c: 1}"));
        }
        (Some(host), None) => {
            if !p.hosts.iter().any(|h| &h.name == host) {
                return Err(unknown_host(src, &at("host"), host, p));
            }
            if group.count.is_none() {
                return Err(src.error_at(&at("host"), "count is missing").with_hint(
                    "count: the number of workers on that host, or hosts: {NAME: COUNT, ...}",
                ));
            }
        }
        (None, Some(hosts)) => {
            if hosts.0.is_empty() {
                return Err(src
                    .error_at(&at("hosts"), "no hosts")
                    .with_hint("hosts: {b: 1, c: 1}"));
            }
            for (host, n) in &hosts.0 {
                let here = yaml_path!["workers", g, "hosts", host.as_str()];
                if !p.hosts.iter().any(|h| &h.name == host) {
                    return Err(unknown_host(src, &here, host, p));
                }
                if *n < 1 {
                    return Err(src
                        .error_at(&here, format!("{n} workers on host {host}"))
                        .with_hint("at least 1, or leave the host out"));
                }
            }
            if let Some(count) = group.count
                && count != hosts.total()
            {
                return Err(src
                    .error_at(
                        &at("count"),
                        format!("count is {count}, but hosts adds up to {}", hosts.total()),
                    )
                    .with_hint("leave count out: it is the sum over hosts"));
            }
        }
        (None, None) if p.hosts.len() > 1 => {
            return Err(src
                .error_at(
                    &yaml_path!["workers", g],
                    "which hosts its workers run on is missing",
                )
                .with_hint(format!(
                    "hosts: {{{}: 1}} (workers per host) or host: {} with count",
                    p.hosts[p.hosts.len() - 1].name,
                    p.hosts[p.hosts.len() - 1].name
                )));
        }
        (None, None) => {
            if group.count.is_none() {
                return Err(src
                    .error_at(&yaml_path!["workers", g], "count is missing")
                    .with_hint("count: the number of workers in the group"));
            }
        }
    }
    Ok(())
}

fn unknown_host(src: &Source, at: &[Seg], host: &str, p: &Profile) -> ConfigError {
    let known: Vec<&str> = p.hosts.iter().map(|h| h.name.as_str()).collect();
    src.error_at(at, format!("unknown host {host:?}"))
        .with_hint(format!("one of the hosts: {}", known.join(", ")))
}

fn validate_submit(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let submit = &p.submit;
    if let Some(address) = &submit.address
        && !(address.starts_with("http://") || address.starts_with("https://"))
    {
        return Err(src
            .error_at(
                &yaml_path!["submit", "address"],
                format!("{address:?} is not an http(s) URL"),
            )
            .with_hint("http://127.0.0.1:8265"));
    }
    for (key, value) in [
        ("shared_root", &submit.shared_root),
        ("user_code_path", &submit.user_code_path),
    ] {
        if let Some(path) = value
            && let Err(e) = crate::ids::ContainerPath::parse_as("path", path)
        {
            return Err(src
                .error_at(
                    &yaml_path!["submit", key],
                    format!("{path:?}: {}", e.reason),
                )
                .with_hint(e.rule));
        }
    }
    check_entrypoint_resources(
        src,
        &yaml_path!["submit"],
        submit.entrypoint_num_cpus,
        submit.entrypoint_num_gpus,
        submit.entrypoint_resources.as_ref(),
    )?;
    check_driver_has_a_node(p, src)?;
    check_job_env(
        src,
        &yaml_path!["submit", "runtime_env", "env_vars"],
        submit.runtime_env.env_vars.keys(),
    )
}

/// The driver runs on one node that has every resource it asks for: with
/// `entrypoint_resources` naming a resource no node of the profile has (or more of it than
/// any node has), Ray would keep the job PENDING forever. Names Ray gives nodes at run time
/// (`node:<address>`) are left to the check against the live cluster at submit.
fn check_driver_has_a_node(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    // Without entrypoint_resources, the driver asks for {worker_node: 1} (see `submit`).
    let default = BTreeMap::from([(resources::WORKER_NODE.to_string(), 1.0)]);
    let asked = p.submit.entrypoint_resources.as_ref().unwrap_or(&default);
    let mut nodes: Vec<(String, BTreeMap<String, f64>)> = vec![(
        "head".to_string(),
        resources::node_resources(true, &p.head.resources),
    )];
    for group in &p.workers {
        let mut have = resources::node_resources(false, &group.resources);
        if group.gpus > 0 {
            have.insert("GPU".to_string(), f64::from(group.gpus));
        }
        nodes.push((format!("workers {}", group.name), have));
    }
    let mut wanted: BTreeMap<String, f64> = asked
        .iter()
        .filter(|(name, _)| !resources::ray_defined_per_node(name))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let at_resources = yaml_path!["submit", "entrypoint_resources"].to_vec();
    let offered = || {
        nodes
            .iter()
            .map(|(who, have)| format!("{who}: {}", resources::text(have)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (name, amount) in &wanted {
        let most = nodes
            .iter()
            .filter_map(|(_, have)| have.get(name).copied())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let mut at = at_resources.clone();
        at.push(Seg::Key(name.clone()));
        if matches!(
            name.as_str(),
            "CPU" | "GPU" | "memory" | "object_store_memory"
        ) {
            return Err(src
                .error_at(
                    &at,
                    format!("{name} is Ray's own resource, not a custom one"),
                )
                .with_hint(
                    "entrypoint_num_cpus / entrypoint_num_gpus ask for the driver's CPUs and GPUs",
                ));
        }
        // Worded and located as `argus export kuberay` says it of the same profile.
        let hint = match most {
            None => format!(
                "a resource the nodes have ({}), or give a worker group resources: {{{name}: {amount}}}",
                offered()
            ),
            Some(most) if most < *amount => {
                format!("at most {most} (the nodes have {})", offered())
            }
            Some(_) => continue,
        };
        return Err(src
            .error_at(
                &at_resources,
                format!("no node offers {name}: {amount}, so the driver would wait forever"),
            )
            .with_hint(hint));
    }
    if let Some(gpus) = p.submit.entrypoint_num_gpus
        && gpus > 0.0
    {
        wanted.insert("GPU".to_string(), gpus);
    }
    let fits = |wanted: &BTreeMap<String, f64>| {
        nodes.iter().any(|(_, have)| {
            wanted
                .iter()
                .all(|(k, v)| have.get(k).is_some_and(|h| h >= v))
        })
    };
    if fits(&wanted) {
        return Ok(());
    }
    // Each resource is somewhere, but not all on one node: name the field that tips it.
    let only_resources: BTreeMap<String, f64> = wanted
        .iter()
        .filter(|(k, _)| *k != "GPU")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let at = if wanted.contains_key("GPU") && fits(&only_resources) {
        yaml_path!["submit", "entrypoint_num_gpus"].to_vec()
    } else {
        at_resources
    };
    Err(src
        .error_at(
            &at,
            format!(
                "no single node has all the driver asks for ({}): it would wait forever",
                resources::text(&wanted)
            ),
        )
        .with_hint(format!(
            "ask for what one node has (the nodes have {})",
            offered()
        )))
}

/// `entrypoint_num_cpus` / `_gpus` and `entrypoint_resources` (profile `submit:` and the
/// old RayConfig share them): a driver that can never be scheduled is refused here.
pub fn check_entrypoint_resources(
    src: &Source,
    at: &[Seg],
    cpus: Option<f64>,
    gpus: Option<f64>,
    resources: Option<&BTreeMap<String, f64>>,
) -> Result<(), ConfigError> {
    let field = |key: &str| {
        let mut path = at.to_vec();
        path.push(Seg::Key(key.to_string()));
        path
    };
    for (key, value, max) in [
        ("entrypoint_num_cpus", cpus, MAX_CPUS),
        ("entrypoint_num_gpus", gpus, f64::from(MAX_GPUS_PER_WORKER)),
    ] {
        if let Some(n) = value
            && (!n.is_finite() || !(0.0..=max).contains(&n))
        {
            return Err(src
                .error_at(&field(key), format!("{key} is {n}"))
                .with_hint(format!("a number from 0 to {max}")));
        }
    }
    for (name, value) in resources.into_iter().flatten() {
        let mut path = field("entrypoint_resources");
        path.push(Seg::Key(name.clone()));
        if !value.is_finite() || *value <= 0.0 || *value > MAX_RESOURCE {
            return Err(src
                .error_at(
                    &path,
                    format!("{name} is {value}: a driver asking for it could never be scheduled, or asks for nothing"),
                )
                .with_hint(format!("an amount above 0 and at most {MAX_RESOURCE}, or leave the resource out")));
        }
        if name == "worker_node" && *value > 1.0 {
            return Err(src
                .error_at(
                    &path,
                    format!("worker_node is {value}, but each worker has worker_node: 1: the driver could never be scheduled"),
                )
                .with_hint("worker_node: 1"));
        }
        if name == "head_node" {
            return Err(src
                .error_at(&path, "the driver never runs on the head")
                .with_hint("worker_node: 1"));
        }
    }
    Ok(())
}

/// Names in a job's environment: valid, and not one argus sets itself.
pub fn check_job_env<'a>(
    src: &Source,
    at: &[Seg],
    keys: impl IntoIterator<Item = &'a String>,
) -> Result<(), ConfigError> {
    for key in keys {
        let mut path = at.to_vec();
        path.push(Seg::Key(key.clone()));
        if !env::valid_name(key) {
            return Err(src
                .error_at(
                    &path,
                    format!("{key:?} is not an environment variable name"),
                )
                .with_hint(env::NAME_RULE));
        }
        if let Some(why) = env::owned_in_jobs(key) {
            return Err(src.error_at(&path, format!("{key} cannot be set here: {why}")));
        }
    }
    Ok(())
}

/// Names and values of an `env:` mapping that goes into containers.
fn check_container_env(
    src: &Source,
    at: &[Seg],
    vars: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (key, value) in vars {
        let mut at = at.to_vec();
        at.push(Seg::Key(key.clone()));
        if !env::valid_name(key) {
            return Err(src
                .error_at(&at, format!("{key:?} is not an environment variable name"))
                .with_hint(env::NAME_RULE));
        }
        if let Some(why) = env::owned_in_containers(key) {
            return Err(src.error_at(&at, format!("{key} cannot be set here: {why}")));
        }
        if value.contains('\0') {
            return Err(src.error_at(&at, "the value contains a NUL byte"));
        }
    }
    Ok(())
}

fn validate_node(node: &NodeSpec, src: &Source, at: &[Seg]) -> Result<(), ConfigError> {
    let field = |key: &str| {
        let mut path = at.to_vec();
        path.push(Seg::Key(key.to_string()));
        path
    };
    check_container_env(src, &field("env"), &node.env)?;
    if let Some(cpus) = node.ray_cpus
        && f64::from(cpus) > MAX_CPUS
    {
        return Err(src
            .error_at(
                &field("ray_cpus"),
                format!("ray_cpus is {cpus}, must be at most {MAX_CPUS}"),
            )
            .with_hint("the number of CPUs the node advertises to Ray, e.g. 4 (0: Ray schedules no task there)"));
    }
    if let Some(cpus) = node.cpus
        && (!cpus.is_finite() || cpus <= 0.0 || cpus > MAX_CPUS)
    {
        return Err(src
            .error_at(
                &field("cpus"),
                format!("cpus is {cpus}, must be > 0 and at most {MAX_CPUS}"),
            )
            .with_hint("a number of CPUs such as 2 or 0.5"));
    }
    for (name, value) in &node.resources {
        let mut at = field("resources");
        at.push(Seg::Key(name.clone()));
        if name.is_empty() {
            return Err(src.error_at(&at, "a resource needs a name"));
        }
        if let Some(why) = resources::reserved(name) {
            return Err(src
                .error_at(
                    &at,
                    format!("{name} cannot be a node's own resource: {why}"),
                )
                .with_hint(format!(
                    "a name of your own, such as accelerator_h20 (argus and Ray set {})",
                    resources::reserved_names()
                )));
        }
        if !value.is_finite() || *value < 0.0 || *value > MAX_RESOURCE {
            return Err(src.error_at(
                &at,
                format!("resource {name} is {value}, must be from 0 to {MAX_RESOURCE}"),
            ));
        }
    }
    check_object_store(node, src, &field("object_store_memory"))
}

/// Docker's `/dev/shm` when `shm_size` is not given.
pub const DOCKER_DEFAULT_SHM: u64 = 64 << 20;

/// Ray puts the object store in `/dev/shm`, a tmpfs whose pages count against the
/// container's memory limit: the store must fit in both, `shm_size` (Docker's 64 MiB when
/// not given) and `memory`. Ray would otherwise fall back to disk, or the node be killed
/// for memory once the store fills.
fn check_object_store(node: &NodeSpec, src: &Source, at: &[Seg]) -> Result<(), ConfigError> {
    let Some(store) = node.object_store_memory else {
        return Ok(());
    };
    if let Some(memory) = node.memory
        && store.0 > memory.0
    {
        return Err(src
            .error_at(
                at,
                format!("object_store_memory ({store}) exceeds memory ({memory}): the store lives in /dev/shm, whose pages count against the container's memory"),
            )
            .with_hint(format!("object_store_memory at most memory ({memory}), with shm_size at least as large as the store")));
    }
    match node.shm_size {
        Some(shm) if store.0 > shm.0 => Err(src
            .error_at(
                at,
                format!("object_store_memory ({store}) exceeds shm_size ({shm})"),
            )
            .with_hint(format!("shm_size: {store} or more, or a smaller object_store_memory: the object store lives in /dev/shm"))),
        None if store.0 > DOCKER_DEFAULT_SHM => Err(src
            .error_at(
                at,
                format!("object_store_memory ({store}) without shm_size: Docker's /dev/shm is 64 MiB, and Ray puts the object store there"),
            )
            .with_hint(format!("shm_size: {store} or more, next to object_store_memory"))),
        _ => Ok(()),
    }
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
