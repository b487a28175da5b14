//! What serde cannot check: rules that span several fields, upper bounds, and the ports,
//! devices and names that must not collide. Runs before anything touches Docker, so a
//! bad profile never leaves half-created state behind; every error is located.
//!
//! `hosts` checks the `hosts:` list and what it rules out, `workers` the worker groups
//! (names, counts, placement, GPUs), `ray` the `ray:` section (ports, timeout, auth),
//! `node` what a head or worker container asks for, `submit` the driver's resources and
//! a job's environment; this file holds the bounds and runs the checks in order.

mod hosts;
mod node;
mod ray;
mod submit;
mod workers;

use super::sbatch;
use super::types::Profile;
use crate::config::yaml::{ConfigError, Source};
use crate::ids::RayVersion;
use crate::yaml_path;

pub use submit::{check_entrypoint_resources, check_job_env};

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

/// Whether Ray `version` (`2.51.1`) has token auth; None when the version is unreadable.
pub fn token_auth_supported(version: &str) -> Option<bool> {
    let v = RayVersion::from_tag(version)?;
    Some((v.0, v.1) >= TOKEN_AUTH_SINCE)
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
    node::check_container_env(src, &yaml_path!["env"], &p.env)?;
    hosts::validate_hosts(p, src)?;
    // Workers first: in host mode their number decides which ports are taken.
    workers::validate_workers(p, src)?;
    ray::validate_ray(p, src)?;
    node::validate_node(&p.head, src, &yaml_path!["head"])?;
    submit::validate_submit(p, src)?;
    validate_slurm(p, src)
}

/// `slurm.sbatch_args`: none may set an option argus writes into the batch script, or
/// one argus cannot run under.
fn validate_slurm(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let Some(slurm) = &p.slurm else {
        return Ok(());
    };
    for (i, arg) in slurm.sbatch_args.iter().enumerate() {
        if let Some((option, why)) = sbatch::owned_option(arg) {
            return Err(src
                .error_at(
                    &yaml_path!["slurm", "sbatch_args", i],
                    format!("{arg:?} sets {option}: {why}"),
                )
                .with_hint("remove it from slurm.sbatch_args"));
        }
    }
    Ok(())
}
