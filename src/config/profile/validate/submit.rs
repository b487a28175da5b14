//! `submit:`: the Jobs API address, the paths jobs see, and a driver that some node can
//! run; the checks of a driver's resources and a job's environment that JobSpecs share.

use std::collections::BTreeMap;

use super::{MAX_CPUS, MAX_GPUS_PER_WORKER, MAX_RESOURCE};
use crate::config::env;
use crate::config::profile::resources;
use crate::config::profile::types::Profile;
use crate::config::yaml::{ConfigError, Seg, Source};
use crate::yaml_path;

pub(super) fn validate_submit(p: &Profile, src: &Source) -> Result<(), ConfigError> {
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
    check_shared_root(p, src)?;
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

/// `submit.shared_root` is the shared storage as the job sees it (the old RayConfig's
/// field). The profile's containers mount the storage at `shared.mount` and nowhere else,
/// so any other root would hand the job paths that do not exist in its container: it may
/// only name `shared.mount` (see [`Profile::container_layout`], the one rule).
fn check_shared_root(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    let Some(root) = &p.submit.shared_root else {
        return Ok(());
    };
    // Lexically clean by now (checked above); `/mnt/shared/` names `/mnt/shared`.
    let same = crate::ids::ContainerPath::parse_as("path", root)
        .is_ok_and(|clean| clean.as_str() == p.shared.mount);
    if same {
        return Ok(());
    }
    Err(src
        .error_at(
            &yaml_path!["submit", "shared_root"],
            format!(
                "{root:?} is not shared.mount ({:?}): the containers mount the shared storage at shared.mount only, so a job would find nothing at {root:?}",
                p.shared.mount
            ),
        )
        .with_hint(format!(
            "remove submit.shared_root (the job sees the storage at shared.mount), or set shared.mount: {root} to mount it there"
        )))
}

/// What each node of the profile offers a driver: (who, resources).
type Offers = Vec<(String, BTreeMap<String, f64>)>;

/// The driver runs on one node that has every resource it asks for: with
/// `entrypoint_resources` naming a resource no node of the profile has (or more of it than
/// any node has), Ray would keep the job PENDING forever. Names Ray gives nodes at run time
/// (`node:<address>`) are left to the check against the live cluster at submit.
fn check_driver_has_a_node(p: &Profile, src: &Source) -> Result<(), ConfigError> {
    // Without entrypoint_resources, the driver asks for {worker_node: 1} (see `submit`).
    let default = BTreeMap::from([(resources::WORKER_NODE.to_string(), 1.0)]);
    let asked = p.submit.entrypoint_resources.as_ref().unwrap_or(&default);
    let nodes = node_offers(p);
    let mut wanted: BTreeMap<String, f64> = asked
        .iter()
        .filter(|(name, _)| !resources::ray_defined_per_node(name))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let at_resources = yaml_path!["submit", "entrypoint_resources"].to_vec();
    check_each_offered(src, &nodes, &wanted, &at_resources)?;
    for (key, amount) in [
        ("GPU", p.submit.entrypoint_num_gpus),
        ("CPU", p.submit.entrypoint_num_cpus),
    ] {
        if let Some(amount) = amount
            && amount > 0.0
        {
            wanted.insert(key.to_string(), amount);
        }
    }
    // A node whose CPUs Ray counts itself (no cpus/ray_cpus) may have any number.
    let fits = |wanted: &BTreeMap<String, f64>| {
        nodes.iter().any(|(_, have)| {
            wanted.iter().all(|(k, v)| match have.get(k) {
                Some(h) => h >= v,
                None => k == "CPU",
            })
        })
    };
    if fits(&wanted) {
        return Ok(());
    }
    // Each resource is somewhere, but not all on one node: name the field that tips it.
    let without = |key: &str| -> BTreeMap<String, f64> {
        wanted
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let at = if wanted.contains_key("CPU") && fits(&without("CPU")) {
        yaml_path!["submit", "entrypoint_num_cpus"].to_vec()
    } else if wanted.contains_key("GPU") && fits(&without("GPU")) {
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
            offered(&nodes)
        )))
}

/// The head and each worker group, with the resources a node of it advertises.
fn node_offers(p: &Profile) -> Offers {
    let offer = |head: bool, node: &crate::config::profile::types::NodeSpec| {
        let mut have = resources::node_resources(head, &node.resources);
        if let Some(cpus) = node.ray_num_cpus() {
            have.insert("CPU".to_string(), cpus as f64);
        }
        have
    };
    let mut nodes: Offers = vec![("head".to_string(), offer(true, &p.head))];
    for group in &p.workers {
        let mut have = offer(false, &group.node());
        if group.gpus > 0 {
            have.insert("GPU".to_string(), f64::from(group.gpus));
        }
        nodes.push((format!("workers {}", group.name), have));
    }
    nodes
}

fn offered(nodes: &Offers) -> String {
    nodes
        .iter()
        .map(|(who, have)| format!("{who}: {}", resources::text(have)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each resource the driver asks for is a custom one (not Ray's own), and some node has
/// enough of it.
fn check_each_offered(
    src: &Source,
    nodes: &Offers,
    wanted: &BTreeMap<String, f64>,
    at_resources: &[Seg],
) -> Result<(), ConfigError> {
    for (name, amount) in wanted {
        let most = nodes
            .iter()
            .filter_map(|(_, have)| have.get(name).copied())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let mut at = at_resources.to_vec();
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
                offered(nodes)
            ),
            Some(most) if most < *amount => {
                format!("at most {most} (the nodes have {})", offered(nodes))
            }
            Some(_) => continue,
        };
        return Err(src
            .error_at(
                at_resources,
                format!("no node offers {name}: {amount}, so the driver would wait forever"),
            )
            .with_hint(hint));
    }
    Ok(())
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
        if let Some(problem) = resources::name_problem(name) {
            return Err(src
                .error_at(&path, format!("{name:?}: {problem}"))
                .with_hint("a resource name a node of the profile has, such as worker_node"));
        }
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
