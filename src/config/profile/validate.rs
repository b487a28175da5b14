//! What serde cannot check: rules that span several fields, upper bounds, and the ports,
//! devices and names that must not collide. Runs before anything touches Docker, so a
//! bad profile never leaves half-created state behind; every error is located.

use std::collections::{BTreeMap, HashMap};

use super::types::{AuthMode, GpuMode, NetworkMode, NodeSpec, Profile};
use crate::config::env;
use crate::config::yaml::{ConfigError, Seg, Source};
use crate::yaml_path;

/// Workers in one group, and in the whole cluster: more is a typo on a Docker host.
pub const MAX_WORKERS: u32 = 256;
/// Worker groups in one profile.
pub const MAX_GROUPS: usize = 64;
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
    for (key, value) in &p.env {
        let at = yaml_path!["env", key.as_str()];
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
    // Workers first: in host mode their number decides which ports are taken.
    validate_workers(p, src)?;
    validate_ray(p, src)?;
    validate_node(&p.head, src, &yaml_path!["head"])?;
    validate_submit(p, src)
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
        let nodes = 1 + p.workers.iter().map(|g| g.count).sum::<u32>();
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
    let mut device_owner: HashMap<u32, String> = HashMap::new();
    let mut total: u32 = 0;
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
        if group.count < 1 || group.count > MAX_WORKERS {
            return Err(src
                .error_at(
                    &at("count"),
                    if group.count < 1 {
                        format!("count is {}, must be at least 1", group.count)
                    } else {
                        format!("count is {}, more than {MAX_WORKERS}", group.count)
                    },
                )
                .with_hint(format!(
                    "a whole number from 1 to {MAX_WORKERS} (remove the group to have none)"
                )));
        }
        total += group.count;
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
        if p.network.mode == NetworkMode::Host && total + 1 > MAX_HOST_MODE_NODES {
            return Err(src
                .error_at(
                    &at("count"),
                    format!(
                        "{} Ray nodes in host mode: their port blocks ({HOST_MODE_PORT_BLOCK} ports each from {HOST_MODE_PORT_BASE}) would pass 65535",
                        total + 1
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
        if let Some(host) = &group.docker_host
            && Some(host) != p.docker.host.as_ref()
        {
            return Err(src
                    .error_at(&at("docker_host"), "worker groups on another Docker endpoint (multi-host) are not yet supported")
                    .with_hint("run `argus up` on each host with its own profile, in `network: {mode: host}`, or remove docker_host"));
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
            (_, None) => {
                return Err(src
                    .error_at(
                        &at("gpu_mode"),
                        "real GPUs need explicit device_ids, one list per worker",
                    )
                    .with_hint(format!(
                        "device_ids: a list of {} lists of {} GPU ids",
                        group.count, group.gpus
                    )));
            }
            (_, Some(lists)) => {
                if lists.len() != group.count as usize {
                    return Err(src
                        .error_at(
                            &at("device_ids"),
                            format!("{} lists for {} workers", lists.len(), group.count),
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
                    for (i, id) in ids.iter().enumerate() {
                        let here = format!("workers[{g}].device_ids[{w}][{i}]");
                        if let Some(owner) = device_owner.insert(*id, here) {
                            return Err(src
                                .error_at(
                                    &yaml_path!["workers", g, "device_ids", w, i],
                                    format!("GPU {id} is already used by {owner}"),
                                )
                                .with_hint("each host GPU id at most once across all workers"));
                        }
                    }
                }
            }
        }
    }
    Ok(())
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
    check_job_env(
        src,
        &yaml_path!["submit", "runtime_env", "env_vars"],
        submit.runtime_env.env_vars.keys(),
    )
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

fn validate_node(node: &NodeSpec, src: &Source, at: &[Seg]) -> Result<(), ConfigError> {
    let field = |key: &str| {
        let mut path = at.to_vec();
        path.push(Seg::Key(key.to_string()));
        path
    };
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
        if name.is_empty() || name == "CPU" || name == "GPU" || name == "memory" {
            return Err(src.error_at(&field("resources"), format!("{name:?} cannot be a custom resource")).with_hint("custom names such as worker_node or accelerator_h20; CPUs and GPUs have their own fields"));
        }
        if !value.is_finite() || *value < 0.0 || *value > MAX_RESOURCE {
            return Err(src.error_at(
                &field("resources"),
                format!("resource {name} is {value}, must be from 0 to {MAX_RESOURCE}"),
            ));
        }
    }
    if let (Some(store), Some(shm)) = (node.object_store_memory, node.shm_size)
        && store > shm
    {
        return Err(src
            .error_at(
                &field("object_store_memory"),
                format!("object_store_memory ({store}) exceeds shm_size ({shm})"),
            )
            .with_hint("at most shm_size: the object store lives in /dev/shm"));
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
