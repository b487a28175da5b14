//! `shm` and `memlock`: what each node container of a host gets against what Ray and verl
//! need of them.
//!
//! `/dev/shm`. A node gets its `shm_size`, else the engine's default (Docker's is 64 MiB;
//! the probe reads the engine's own, as a container created without `shm_size` sees it).
//! Ray puts a node's object store in `/dev/shm` when it fits; its size is the node's
//! `object_store_memory`, else Ray's default: 30% of the node's memory, at most 200 GB and
//! at most max(10 GB, 95% of `/dev/shm`) (Ray's `resolve_object_store_memory`). When it
//! does not fit, Ray (`determine_plasma_store_config`) puts it in /tmp with "This will harm
//! performance! ... you can increase /dev/shm size by passing '--shm-size=...' to 'docker
//! run' ... Make sure to set this to more than 30% of available RAM", and for a store over
//! 10 GB (`REQUIRE_SHM_SIZE_THRESHOLD`) it refuses to start: the error of ray#14535, where
//! Ray's maintainers answer "You should set --shm-size explicitly in docker". So:
//! - Fail: the store is over 10 GB and larger than `/dev/shm` (`ray start` fails);
//! - Warn: the store is larger than `/dev/shm` (Ray runs on /tmp, slowly: verl moves its
//!   rollout batches and weights through the object store);
//! - Warn: a node with real GPUs and less than 1 GiB: NCCL's shared-memory transport between
//!   the GPUs of one container needs more than Docker's 64 MiB (NCCL's own advice for
//!   containers is `--shm-size=1g --ulimit memlock=-1`);
//! - Ok otherwise. The built-in profile gives its head 512 MiB for a 256 MiB store and its
//!   workers 1 GiB for 512 MiB.
//!
//! `memlock`: argus sets no ulimit on its containers, so each gets the engine's default
//! (read by the probe). It matters for NCCL over InfiniBand/RoCE, which pins its buffers;
//! NCCL's advice is unlimited. A warning on hosts with real GPUs; informational elsewhere.

use crate::cluster::plan::{ContainerPlan, GpuAttach};
use crate::ui::human_bytes;

use super::probe::{Facts, Memlock};
use super::{Check, Status};

/// Ray's default share of a node's memory for its object store.
const RAY_STORE_SHARE: f64 = 0.3;
/// Ray's cap on its default object store.
const RAY_STORE_MAX: u64 = 200_000_000_000;
/// Above this, Ray refuses a store that does not fit in `/dev/shm`.
pub const RAY_REQUIRE_SHM: u64 = 10_000_000_000;
/// NCCL's advice for containers with GPUs.
pub const NCCL_SHM: u64 = 1 << 30;

/// A node's object store as Ray will size it (None: its memory is unknown).
pub fn object_store(node: &ContainerPlan, shm: u64, host_memory: Option<u64>) -> Option<u64> {
    let flag = node
        .command
        .iter()
        .find_map(|a| a.strip_prefix("--object-store-memory="))
        .and_then(|v| v.parse().ok());
    if flag.is_some() {
        return flag;
    }
    let memory = node.memory.or(host_memory)?;
    let cap = RAY_STORE_MAX.min(RAY_REQUIRE_SHM.max((shm as f64 * 0.95) as u64));
    Some(((memory as f64 * RAY_STORE_SHARE) as u64).min(cap))
}

fn real_gpus(node: &ContainerPlan) -> bool {
    match &node.gpu {
        GpuAttach::Nvidia { device_ids } | GpuAttach::Amd { device_ids } => !device_ids.is_empty(),
        GpuAttach::None | GpuAttach::Simulated { .. } => false,
    }
}

/// `shm` of one host's nodes; `engine_default` is what a container without `shm_size` gets.
pub fn check(
    nodes: &[&ContainerPlan],
    engine_default: Option<u64>,
    host_memory: Option<u64>,
) -> Check {
    let mut seen = Vec::new();
    let mut worst: Option<(Status, String, String)> = None;
    for node in nodes {
        let Some(shm) = node.shm_size.or(engine_default) else {
            return Check {
                name: "shm",
                status: Status::Unknown,
                seen: format!(
                    "{} sets no shm_size and the engine's default could not be read",
                    node.name
                ),
                why: "Ray's object store and NCCL live in /dev/shm".into(),
                fix: "set shm_size on every node of the profile".into(),
            };
        };
        let store = object_store(node, shm, host_memory);
        let gpus = real_gpus(node);
        let default = !node
            .command
            .iter()
            .any(|a| a.starts_with("--object-store-memory="));
        seen.push(format!(
            "{} {}{}",
            node.name,
            human_bytes(shm),
            store
                .map(|s| format!(
                    " (object store {}{})",
                    human_bytes(s),
                    if default { ", Ray's default" } else { "" }
                ))
                .unwrap_or_default()
        ));
        let finding = grade(&node.name, shm, store, gpus);
        if let Some((status, why, fix)) = finding
            && worst.as_ref().is_none_or(|(s, _, _)| status > *s)
        {
            worst = Some((status, why, fix));
        }
    }
    let seen = format!("/dev/shm: {}", seen.join(", "));
    match worst {
        None => Check::ok("shm", seen),
        Some((status, why, fix)) => Check {
            name: "shm",
            status,
            seen,
            why,
            fix,
        },
    }
}

/// One node's finding: status, why, fix (None: fine).
fn grade(name: &str, shm: u64, store: Option<u64>, gpus: bool) -> Option<(Status, String, String)> {
    let fix_store = |store: u64| {
        format!(
            "give {name} shm_size of at least {} in the profile (or a smaller object_store_memory); Ray's advice is more than 30% of the node's memory",
            human_bytes(store + store / 10)
        )
    };
    if let Some(store) = store
        && store > shm
    {
        if store > RAY_REQUIRE_SHM {
            return Some((
                Status::Fail,
                format!(
                    "{name}'s object store ({}) does not fit in its /dev/shm ({}): Ray refuses to start a store over 10 GB outside /dev/shm (ray#14535)",
                    human_bytes(store),
                    human_bytes(shm)
                ),
                fix_store(store),
            ));
        }
        return Some((
            Status::Warn,
            format!(
                "{name}'s object store ({}) does not fit in its /dev/shm ({}): Ray puts it in /tmp instead, which \"will harm performance\" (Ray's warning); verl moves batches and weights through it",
                human_bytes(store),
                human_bytes(shm)
            ),
            fix_store(store),
        ));
    }
    if gpus && shm < NCCL_SHM {
        return Some((
            Status::Warn,
            format!(
                "{name} has real GPUs and {} of /dev/shm: NCCL's shared-memory transport between the GPUs of one container fails to create its segments in Docker's default size",
                human_bytes(shm)
            ),
            format!(
                "give {name} shm_size: 1g or more (NCCL's advice for containers: --shm-size=1g --ulimit memlock=-1)"
            ),
        ));
    }
    None
}

/// `memlock` of one host (the engine's default: argus sets no ulimit).
pub fn memlock(nodes: &[&ContainerPlan], facts: Option<&Facts>) -> Check {
    let Some(limit) = facts.and_then(|f| f.memlock) else {
        return Check {
            name: "memlock",
            status: Status::Unknown,
            seen: "the probe could not read it".into(),
            why: "NCCL over InfiniBand pins its buffers within this limit".into(),
            fix: String::new(),
        };
    };
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), human_bytes);
    let seen = format!(
        "{} (hard {}), the engine's default for every node",
        show(limit.soft),
        show(limit.hard)
    );
    let gpu_nodes: Vec<&str> = nodes
        .iter()
        .filter(|n| real_gpus(n))
        .map(|n| n.name.as_str())
        .collect();
    if gpu_nodes.is_empty()
        || limit
            == (Memlock {
                soft: None,
                hard: None,
            })
    {
        return Check::ok("memlock", seen);
    }
    Check {
        name: "memlock",
        status: Status::Warn,
        seen,
        why: format!(
            "{} run NCCL, which pins (locks) its buffers for InfiniBand/RoCE: a limited memlock makes it fail to register memory (NCCL's advice for containers: --ulimit memlock=-1)",
            gpu_nodes.join(", ")
        ),
        fix: r#"make it unlimited in the engine's defaults, /etc/docker/daemon.json: "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}, then restart dockerd (argus's profile sets no per-container ulimits)"#.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::{PlanInputs, plan};
    use crate::config::LoadedProfile;
    use crate::config::yaml::Source;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_builtin_profile_is_fine_and_a_small_shm_is_named() {
        let loaded = LoadedProfile::load(None).unwrap();
        let p = plan(&loaded, &PlanInputs::default());
        let nodes: Vec<_> = p.containers.iter().collect();
        let c = check(&nodes, Some(64 << 20), Some(16 * GIB));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.seen
                .contains("argus-local-gpu-0 1.00 GiB (object store 512.00 MiB)"),
            "{}",
            c.seen
        );

        // The profile refuses a store over shm_size when both are set: a small shm_size
        // and Ray's default store (30% of the node's memory), or no shm_size at all.
        let text = "name: t\nimage: i\nshared: {host_path: /tmp/x}\nworkers:\n  - {name: g, count: 1, shm_size: 64m, memory: 2g}\n";
        let loaded = LoadedProfile::from_source(Source::new("t.yaml", text)).unwrap();
        let p = plan(&loaded, &PlanInputs::default());
        let nodes: Vec<_> = p.containers.iter().collect();
        let c = check(&nodes, Some(64 << 20), Some(16 * GIB));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.why.contains(
                "t-head's object store (4.80 GiB) does not fit in its /dev/shm (64.00 MiB)"
            ),
            "{}",
            c.why
        );
        assert!(
            c.seen
                .contains("t-g-0 64.00 MiB (object store 614.40 MiB, Ray's default)"),
            "{}",
            c.seen
        );
        // (A store over 10 GB with the engine's default /dev/shm, which Ray refuses, the
        // profile refuses already: `grade` below.)
    }

    #[test]
    fn a_store_over_ten_gigabytes_outside_shm_fails() {
        assert_eq!(
            grade("n", 8 * GIB, Some(11 * GIB), false).map(|g| g.0),
            Some(Status::Fail)
        );
        assert_eq!(grade("n", 16 * GIB, Some(11 * GIB), false), None);
        assert_eq!(
            grade("n", 512 << 20, Some(256 << 20), true).map(|g| g.0),
            Some(Status::Warn)
        );
        assert_eq!(grade("n", GIB, Some(256 << 20), true), None);
    }
}
