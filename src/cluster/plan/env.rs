//! Every container's environment: what argus sets, then the profile's `env`, then the
//! node's own `env` over it.

use std::collections::BTreeMap;

use super::PlanInputs;
use crate::config::profile::{NodeSpec, Profile};

/// The environment every node of the cluster shares.
pub(super) fn cluster_env(p: &Profile, inputs: &PlanInputs) -> BTreeMap<String, String> {
    let in_container = p.container_layout();
    let mut env: BTreeMap<String, String> = BTreeMap::from([
        ("RAY_AUTH_MODE".to_string(), p.ray.auth.as_str().to_string()),
        (
            "HF_HOME".to_string(),
            in_container.hf_home().display().to_string(),
        ),
        ("ARGUS_CLUSTER".to_string(), p.name.clone()),
        (
            "ARGUS_SHARED".to_string(),
            in_container.mount().into_owned(),
        ),
        ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
        // Ray's dashboard gives each of its modules 30 s to start and then dies for good
        // (the head keeps running without a Jobs API). A busy host, such as a GPU node
        // loading data, can be that slow: give it five minutes.
        (
            "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT".to_string(),
            "300".to_string(),
        ),
    ]);
    if let Some(token) = &inputs.token {
        env.insert("RAY_AUTH_TOKEN".to_string(), token.clone());
    }
    env.extend(p.env.clone());
    env
}

/// The profile's environment with a node's own `env` over it; on a host whose interface to
/// the head `up` learned (`iface`), the collectives' interface variables the profile and the
/// node leave unset.
pub(super) fn with_node_env(
    env: &BTreeMap<String, String>,
    node: &NodeSpec,
    iface: Option<&String>,
) -> BTreeMap<String, String> {
    let mut env = env.clone();
    env.extend(node.env.clone());
    if let Some(iface) = iface {
        for var in ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"] {
            env.entry(var.to_string()).or_insert_with(|| iface.clone());
        }
    }
    env
}
