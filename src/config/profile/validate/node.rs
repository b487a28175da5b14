//! What one container asks for, the head's or a worker's: its environment, CPUs, custom
//! resources, and an object store that fits in its `/dev/shm` and memory.

use std::collections::BTreeMap;

use super::{MAX_CPUS, MAX_RESOURCE};
use crate::config::env;
use crate::config::profile::resources;
use crate::config::profile::types::NodeSpec;
use crate::config::yaml::{ConfigError, Seg, Source};

/// Names and values of an `env:` mapping that goes into containers.
pub(super) fn check_container_env(
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

pub(super) fn validate_node(node: &NodeSpec, src: &Source, at: &[Seg]) -> Result<(), ConfigError> {
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
        if let Some(problem) = resources::name_problem(name) {
            return Err(src
                .error_at(&at, format!("{name:?}: {problem}"))
                .with_hint("a name such as accelerator_h20"));
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
