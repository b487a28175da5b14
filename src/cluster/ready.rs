//! Readiness: the cluster is ready when the GCS answers and exactly the expected nodes
//! are ALIVE with their GPUs and custom resources. Polled under a deadline the caller owns.
//!
//! A node counts only if it belongs to the container as it runs now: a recreated or
//! restarted container keeps its name, and Ray keeps the node of its previous life ALIVE
//! until a health check expires. So a node must have started after its container did
//! (both times come from the same host's clock), and while the previous node is still
//! ALIVE the cluster is not ready: a job submitted then would see a dead node.

use crate::http::{Poll, poll_until};
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::plan::{ContainerPlan, ExpectedNode};
use crate::ray::{RayClient, RayError, RayNode};

/// How far the cluster is from ready.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    pub ready: Vec<String>,
    /// Expected node names with what is still wrong with each.
    pub missing: Vec<(String, String)>,
    /// ALIVE nodes nobody asked for (e.g. the old incarnation of a recreated worker).
    pub unexpected: Vec<String>,
    /// Every ALIVE node, as Ray reported it.
    pub alive: Vec<RayNode>,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }
}

/// When each container (by name) last started, in ms since the epoch.
pub type Incarnations = HashMap<String, u64>;

/// Compares Ray's node list with the plan. Pure.
pub fn assess(
    expected: &[&ExpectedNode],
    incarnations: &Incarnations,
    nodes: &[RayNode],
) -> Readiness {
    let mut readiness = Readiness::default();
    for want in expected {
        let started = incarnations.get(&want.node_name).copied();
        let (fresh, stale): (Vec<&RayNode>, Vec<&RayNode>) = nodes
            .iter()
            .filter(|n| n.alive() && n.node_name == want.node_name)
            .partition(|n| match (started, n.start_time_ms) {
                (Some(container), Some(node)) => node >= container,
                // Without both times nothing tells two lives apart.
                _ => true,
            });
        let problem = match (fresh.as_slice(), stale.as_slice()) {
            ([], []) => Some("not registered with Ray yet".to_string()),
            ([], [old, ..]) => Some(format!(
                "only its previous node {} is registered; waiting for the new one",
                short(&old.node_id)
            )),
            ([_, _, ..], _) => Some(format!("{} ALIVE nodes with this name", fresh.len())),
            ([_], [old, ..]) => Some(format!(
                "its previous node {} is still ALIVE; waiting for Ray to retire it",
                short(&old.node_id)
            )),
            ([node], []) => node_problem(want, node),
        };
        match problem {
            None => readiness.ready.push(want.node_name.clone()),
            Some(problem) => readiness.missing.push((want.node_name.clone(), problem)),
        }
    }
    for node in nodes.iter().filter(|n| n.alive()) {
        if !expected.iter().any(|e| e.node_name == node.node_name) {
            readiness
                .unexpected
                .push(format!("{} ({})", node.node_name, node.node_ip));
        }
        readiness.alive.push(node.clone());
    }
    readiness
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn node_problem(want: &ExpectedNode, node: &RayNode) -> Option<String> {
    // The node of this name must be the one on its host, not a namesake elsewhere.
    if let Some(ip) = &want.node_ip
        && &node.node_ip != ip
    {
        return Some(format!(
            "registered from {}, expected its host's address {ip}",
            node.node_ip
        ));
    }
    if (node.gpus() - f64::from(want.gpus)).abs() > f64::EPSILON {
        return Some(format!(
            "reports {} GPUs, expected {}",
            node.gpus(),
            want.gpus
        ));
    }
    for (name, amount) in &want.resources {
        let have = node.resources_total.get(name).copied().unwrap_or(0.0);
        if (have - amount).abs() > 1e-9 {
            return Some(format!("resource {name} is {have}, expected {amount}"));
        }
    }
    None
}

/// Polls until ready or the deadline; `on_progress` sees each observation.
pub async fn wait_ready(
    ray: &RayClient,
    containers: &[ContainerPlan],
    incarnations: &Incarnations,
    deadline: Instant,
    mut on_progress: impl FnMut(&Readiness),
) -> Result<Readiness, (Readiness, Option<RayError>)> {
    let expected: Vec<&ExpectedNode> = containers.iter().map(|c| &c.expect).collect();
    let mut last = Readiness {
        missing: expected
            .iter()
            .map(|e| {
                (
                    e.node_name.clone(),
                    "Ray dashboard not answering yet".into(),
                )
            })
            .collect(),
        ..Default::default()
    };
    let check = async || match observe(ray, &expected, incarnations).await {
        Ok(readiness) => {
            on_progress(&readiness);
            if readiness.is_ready() {
                return Poll::Ready(readiness);
            }
            last = readiness.clone();
            Poll::Pending((readiness, None))
        }
        Err(e) => Poll::Pending((last.clone(), Some(e))),
    };
    poll_until(deadline, Duration::from_millis(200), check).await
}

async fn observe(
    ray: &RayClient,
    expected: &[&ExpectedNode],
    incarnations: &Incarnations,
) -> Result<Readiness, RayError> {
    if !ray.gcs_healthy().await? {
        return Ok(Readiness {
            missing: expected
                .iter()
                .map(|e| (e.node_name.clone(), "GCS not healthy yet".into()))
                .collect(),
            ..Default::default()
        });
    }
    let nodes = ray.nodes().await?;
    Ok(assess(expected, incarnations, &nodes))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node(name: &str, state: &str, gpus: f64, extra: &[(&str, f64)]) -> RayNode {
        let mut resources_total =
            BTreeMap::from([("CPU".to_string(), 1.0), ("GPU".to_string(), gpus)]);
        resources_total.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
        RayNode {
            node_id: name.into(),
            node_ip: "10.0.0.1".into(),
            node_name: name.into(),
            state: state.into(),
            is_head_node: false,
            resources_total,
            start_time_ms: Some(1_000),
        }
    }

    fn want(name: &str, gpus: u32, resource: &str) -> ExpectedNode {
        ExpectedNode {
            node_name: name.into(),
            node_ip: None,
            gpus,
            resources: BTreeMap::from([(resource.to_string(), 1.0)]),
        }
    }

    #[test]
    fn ready_only_when_every_expected_node_is_alive_with_its_resources() {
        let head = want("h", 0, "head_node");
        let w = want("w", 2, "worker_node");
        let expected = [&head, &w];
        let nodes = vec![
            node("h", "ALIVE", 0.0, &[("head_node", 1.0)]),
            node("w", "ALIVE", 2.0, &[("worker_node", 1.0)]),
        ];
        assert!(assess(&expected, &Incarnations::new(), &nodes).is_ready());

        let wrong_gpus = vec![
            node("h", "ALIVE", 0.0, &[("head_node", 1.0)]),
            node("w", "ALIVE", 1.0, &[("worker_node", 1.0)]),
        ];
        let r = assess(&expected, &Incarnations::new(), &wrong_gpus);
        assert_eq!(
            r.missing,
            vec![("w".to_string(), "reports 1 GPUs, expected 2".to_string())]
        );

        let dead_and_stranger = vec![
            node("h", "ALIVE", 0.0, &[("head_node", 1.0)]),
            node("w", "DEAD", 2.0, &[("worker_node", 1.0)]),
            node("x", "ALIVE", 0.0, &[]),
        ];
        let r = assess(&expected, &Incarnations::new(), &dead_and_stranger);
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.unexpected.len(), 1);
    }

    #[test]
    fn a_node_counts_only_from_its_hosts_address() {
        let w = ExpectedNode {
            node_ip: Some("10.0.0.2".into()),
            ..want("w", 2, "worker_node")
        };
        let on_b = RayNode {
            node_ip: "10.0.0.2".into(),
            ..node("w", "ALIVE", 2.0, &[("worker_node", 1.0)])
        };
        assert!(assess(&[&w], &Incarnations::new(), std::slice::from_ref(&on_b)).is_ready());
        // Same name, same resources, another host: not this container's node.
        let elsewhere = node("w", "ALIVE", 2.0, &[("worker_node", 1.0)]);
        let r = assess(&[&w], &Incarnations::new(), &[elsewhere]);
        assert_eq!(
            r.missing,
            vec![(
                "w".to_string(),
                "registered from 10.0.0.1, expected its host's address 10.0.0.2".to_string()
            )]
        );
    }

    #[test]
    fn a_node_of_a_containers_previous_life_never_counts() {
        let w = want("w", 2, "worker_node");
        let expected = [&w];
        // The container was recreated at t=5000; Ray still lists the node from t=1000.
        let incarnations = Incarnations::from([("w".to_string(), 5_000)]);
        let old = RayNode {
            node_id: "old".into(),
            ..node("w", "ALIVE", 2.0, &[("worker_node", 1.0)])
        };
        let r = assess(&expected, &incarnations, std::slice::from_ref(&old));
        assert!(!r.is_ready());
        assert!(r.missing[0].1.contains("previous node old"), "{r:?}");

        // The new node registered while the old one is still ALIVE: not yet.
        let new = RayNode {
            node_id: "new".into(),
            start_time_ms: Some(5_900),
            ..old.clone()
        };
        let r = assess(&expected, &incarnations, &[old.clone(), new.clone()]);
        assert!(r.missing[0].1.contains("still ALIVE"), "{r:?}");

        // The old one is DEAD: ready, with the new one.
        let dead = RayNode {
            state: "DEAD".into(),
            ..old
        };
        assert!(assess(&expected, &incarnations, &[dead, new]).is_ready());
    }
}
