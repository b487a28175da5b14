//! Readiness: the cluster is ready when the GCS answers and exactly the expected nodes
//! are ALIVE with their GPUs and custom resources. Polled under a deadline the caller owns.

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
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }
}

/// Compares Ray's node list with the plan. Pure.
pub fn assess(expected: &[&ExpectedNode], nodes: &[RayNode]) -> Readiness {
    let mut readiness = Readiness::default();
    for want in expected {
        let alive: Vec<&RayNode> = nodes
            .iter()
            .filter(|n| n.alive() && n.node_name == want.node_name)
            .collect();
        let problem = match alive.as_slice() {
            [] => Some("not registered with Ray yet".to_string()),
            [node] => node_problem(want, node),
            several => Some(format!(
                "{} ALIVE nodes with this name (an old one is still being retired)",
                several.len()
            )),
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
    }
    readiness
}

fn node_problem(want: &ExpectedNode, node: &RayNode) -> Option<String> {
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
    let mut last_error;
    let mut delay = Duration::from_millis(100);
    loop {
        match observe(ray, &expected).await {
            Ok(readiness) => {
                on_progress(&readiness);
                if readiness.is_ready() {
                    return Ok(readiness);
                }
                last = readiness;
                last_error = None;
            }
            Err(e) => last_error = Some(e),
        }
        if Instant::now() + delay > deadline {
            return Err((last, last_error));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

async fn observe(ray: &RayClient, expected: &[&ExpectedNode]) -> Result<Readiness, RayError> {
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
    Ok(assess(expected, &nodes))
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
        }
    }

    fn want(name: &str, gpus: u32, resource: &str) -> ExpectedNode {
        ExpectedNode {
            node_name: name.into(),
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
        assert!(assess(&expected, &nodes).is_ready());

        let wrong_gpus = vec![
            node("h", "ALIVE", 0.0, &[("head_node", 1.0)]),
            node("w", "ALIVE", 1.0, &[("worker_node", 1.0)]),
        ];
        let r = assess(&expected, &wrong_gpus);
        assert_eq!(
            r.missing,
            vec![("w".to_string(), "reports 1 GPUs, expected 2".to_string())]
        );

        let dead_and_stranger = vec![
            node("h", "ALIVE", 0.0, &[("head_node", 1.0)]),
            node("w", "DEAD", 2.0, &[("worker_node", 1.0)]),
            node("x", "ALIVE", 0.0, &[]),
        ];
        let r = assess(&expected, &dead_and_stranger);
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.unexpected.len(), 1);
    }
}
