//! The Ray resources a node of the profile advertises, and the names no profile may give
//! a node's `resources` because argus or Ray set them. One list: validation refuses what
//! it holds, and the plan adds argus's own markers from it.

use std::collections::BTreeMap;

/// Every head has it (`head_node: 1`).
pub const HEAD_NODE: &str = "head_node";
/// Every worker has it (`worker_node: 1`): `entrypoint_resources: {worker_node: 1}` puts
/// the driver on a worker.
pub const WORKER_NODE: &str = "worker_node";

/// Names a node's `resources` cannot use, with who sets them and what to write instead.
pub const RESERVED: &[(&str, &str)] = &[
    (
        HEAD_NODE,
        "argus marks the head with it; the driver is kept off the head by it",
    ),
    (
        WORKER_NODE,
        "argus marks every worker with worker_node: 1, and the driver is sent to a worker by it",
    ),
    ("CPU", "Ray's own resource: set cpus or ray_cpus"),
    ("GPU", "Ray's own resource: set gpus"),
    ("memory", "Ray's own resource: set memory"),
    (
        "object_store_memory",
        "Ray's own resource: set object_store_memory",
    ),
];

/// Prefixes of names Ray gives each node itself (`node:10.0.0.11`,
/// `node:__internal_head__`, `accelerator_type:H20`).
pub const RESERVED_PREFIXES: &[(&str, &str)] = &[
    ("node:", "Ray names every node node:<address> itself"),
    (
        "accelerator_type:",
        "Ray sets accelerator_type:<model> itself on nodes with GPUs",
    ),
];

/// Why `name` cannot be a node's own resource; None when it can.
pub fn reserved(name: &str) -> Option<&'static str> {
    RESERVED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
        .or_else(|| {
            RESERVED_PREFIXES
                .iter()
                .find(|(p, _)| name.starts_with(p))
                .map(|(_, why)| *why)
        })
}

/// What is wrong with `name` as a resource name, if anything: Ray takes any string, but a
/// name with spaces, control characters or look-alike Unicode is one nobody can type back
/// (and `ray status` shows it differently), so names are plain ASCII.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("a resource needs a name")
    } else if name.len() > 128 {
        Some("a resource name is at most 128 characters")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.:/".contains(c))
    {
        Some(
            "a resource name is ASCII letters, digits and _ - . : / (no spaces, control characters or other Unicode)",
        )
    } else {
        None
    }
}

/// True for names Ray gives nodes at run time, which a profile cannot know in advance.
pub fn ray_defined_per_node(name: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|(p, _)| name.starts_with(p))
}

/// The custom resources of a node: argus's marker (`head_node` or `worker_node`, 1) and
/// the node's own `resources` (validated not to name the marker).
pub fn node_resources(head: bool, own: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let marker = if head { HEAD_NODE } else { WORKER_NODE };
    let mut resources = own.clone();
    resources.insert(marker.to_string(), 1.0);
    resources
}

/// A valid list of the reserved names, for hints.
pub fn reserved_names() -> String {
    let mut names: Vec<String> = RESERVED.iter().map(|(n, _)| n.to_string()).collect();
    names.extend(RESERVED_PREFIXES.iter().map(|(p, _)| format!("{p}*")));
    names.join(", ")
}

/// `worker_node: 1, accelerator_h20: 4`: resources as a person reads them.
pub fn text(resources: &BTreeMap<String, f64>) -> String {
    resources
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argus_markers_are_reserved_and_win_over_a_nodes_own() {
        assert!(reserved("worker_node").is_some());
        assert!(reserved("head_node").is_some());
        assert!(reserved("node:10.0.0.1").is_some());
        assert!(reserved("cpu").is_none());
        assert!(reserved("accelerator_h20").is_none());
        let own = BTreeMap::from([("accelerator_h20".to_string(), 4.0)]);
        let r = node_resources(false, &own);
        assert_eq!(r["worker_node"], 1.0);
        assert_eq!(r["accelerator_h20"], 4.0);
        assert!(!node_resources(true, &own).contains_key("worker_node"));
    }
}
