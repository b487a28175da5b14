//! The worker groups: names, counts and placement on the hosts, the Ray nodes a host can
//! hold in host mode, and real GPUs each used once per host.

use std::collections::HashMap;

use super::hosts::unknown_host;
use super::node::validate_node;
use super::{
    HOST_MODE_PORT_BASE, HOST_MODE_PORT_BLOCK, MAX_GPUS_PER_WORKER, MAX_GROUPS,
    MAX_HOST_MODE_NODES, MAX_WORKERS, NAME_RULE, valid_name,
};
use crate::config::profile::types::{GpuMode, NetworkMode, Profile, WorkerGroup};
use crate::config::yaml::{ConfigError, Source};
use crate::yaml_path;

/// A GPU is a device of one host: (host, id) is used at most once, here by whom.
type DeviceOwners<'p> = HashMap<(&'p str, u32), String>;

pub(super) fn validate_workers(p: &Profile, src: &Source) -> Result<(), ConfigError> {
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
    let mut device_owner = DeviceOwners::new();
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
        let count = check_count(src, g, group, &mut total)?;
        let placement = group.placement(p.head_host());
        for host in &placement {
            *per_host.entry(host).or_default() += 1;
        }
        check_host_mode_nodes(p, src, g, &per_host)?;
        if group.gpus > MAX_GPUS_PER_WORKER {
            return Err(src
                .error_at(&at("gpus"), format!("gpus is {}", group.gpus))
                .with_hint(format!("0 to {MAX_GPUS_PER_WORKER} GPUs per worker")));
        }
        validate_node(&group.node(), src, &yaml_path!["workers", g])?;
        check_devices(p, src, g, count, &placement, &mut device_owner)?;
    }
    Ok(())
}

/// `workers[g]`'s count: 1 to MAX_WORKERS, and the cluster's total so far within it too.
fn check_count(
    src: &Source,
    g: usize,
    group: &WorkerGroup,
    total: &mut u32,
) -> Result<u32, ConfigError> {
    let at = |key: &str| yaml_path!["workers", g, key];
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
    *total += count;
    if *total > MAX_WORKERS {
        return Err(src
            .error_at(
                &at("count"),
                format!("the profile now has {total} workers, more than {MAX_WORKERS}"),
            )
            .with_hint(format!(
                "at most {MAX_WORKERS} workers in all groups together"
            )));
    }
    Ok(count)
}

/// Host mode: each Ray node of a host takes a block of ports, and the blocks must end
/// below 65536.
fn check_host_mode_nodes(
    p: &Profile,
    src: &Source,
    g: usize,
    per_host: &HashMap<&str, u32>,
) -> Result<(), ConfigError> {
    let group = &p.workers[g];
    let at = |key: &str| yaml_path!["workers", g, key];
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
    Ok(())
}

/// `gpu_mode` and `device_ids`: simulated GPUs have no devices, real ones need a GPU, and
/// each listed device is one of the worker's GPUs, used by no other worker on its host.
fn check_devices<'p>(
    p: &'p Profile,
    src: &Source,
    g: usize,
    count: u32,
    placement: &[&'p str],
    device_owner: &mut DeviceOwners<'p>,
) -> Result<(), ConfigError> {
    let group = &p.workers[g];
    let at = |key: &str| yaml_path!["workers", g, key];
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
