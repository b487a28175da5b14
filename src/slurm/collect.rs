//! A failure bundle's nodes' part for a Slurm run. Each node's engine is reached only on
//! that node, so each node gathers its own containers' part: one srun step per node, all
//! at once (`argus slurm collect-node RUN_ID --params JSON`), which reads its node's
//! engine exactly as a bundle reads a Docker host's (`diagnose::bundle::gather_on`, the
//! same files, tails and caps) and prints it as one JSON line. Used by
//! `argus --slurm-run RUN_ID job diagnose ID` on the login node, and by the batch step when
//! an attempt fails, hangs or loses a node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};

use super::Error;
use super::attach::{StepOf, node_step, step_failure};
use crate::cluster::collect::{Collected, Container, plain_name};
use crate::cluster::hosts::Unreachable;
use crate::config::LoadedProfile;
use crate::diagnose::bundle::{NodeParams, Nodes};

/// What a node step prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct NodePart {
    pub node: String,
    pub collected: Collected,
}

/// The nodes of a run's Slurm job, each gathered by its own step.
pub struct SlurmNodes {
    run_id: String,
    job_id: u64,
    profile: PathBuf,
    argus: PathBuf,
    /// Each node and the containers the job's plan puts there (a part naming another is
    /// not that node's to report).
    planned: BTreeMap<String, Vec<String>>,
}

impl SlurmNodes {
    /// The nodes of `cluster` (the run's, as planned from its allocation), their steps
    /// started with `argus -p <profile>`.
    pub fn new(
        run_id: &str,
        job_id: u64,
        profile: PathBuf,
        argus: PathBuf,
        cluster: &LoadedProfile,
    ) -> SlurmNodes {
        let mut planned: BTreeMap<String, Vec<String>> = cluster
            .profile
            .hosts
            .iter()
            .map(|h| (h.name.clone(), Vec::new()))
            .collect();
        for c in crate::cluster::plan::plan(cluster, &Default::default()).containers {
            planned.entry(c.host.clone()).or_default().push(c.name);
        }
        SlurmNodes {
            run_id: run_id.to_string(),
            job_id,
            profile,
            argus,
            planned,
        }
    }
}

/// The most of a node's answer read (its part is capped well below).
const ANSWER_CAP: usize = 96 << 20;

impl Nodes for SlurmNodes {
    fn gather<'a>(&'a self, params: &'a NodeParams) -> BoxFuture<'a, Collected> {
        Box::pin(async move {
            let of = StepOf {
                job_id: self.job_id,
                profile: self.profile.clone(),
                argus: &self.argus,
            };
            let json = serde_json::to_string(params).unwrap_or_default();
            // srun's start and the node's own dial on top of the part's deadline.
            let bound = Duration::from_secs_f64(params.seconds.clamp(0.0, 600.0) + 10.0);
            let parts = join_all(self.planned.iter().map(|(node, names)| {
                let args = ["slurm", "collect-node", &self.run_id, "--params", &json];
                let output = node_step(&of, node, "argus-diagnose", &args).output();
                async move {
                    let why = match tokio::time::timeout(bound, output).await {
                        Err(_) => format!("its step did not end within {}s", bound.as_secs()),
                        Ok(Err(e)) => format!("cannot run srun: {e}"),
                        Ok(Ok(out)) if out.stdout.len() > ANSWER_CAP => {
                            format!("its answer is over {} MiB", ANSWER_CAP >> 20)
                        }
                        Ok(Ok(out)) => {
                            let part = String::from_utf8_lossy(&out.stdout)
                                .lines()
                                .find_map(|l| serde_json::from_str::<NodePart>(l).ok())
                                .filter(|p| p.node == *node);
                            match part {
                                Some(part) => return Ok(mine(part, node, names)),
                                None => step_failure(&out.stderr, "its step printed nothing"),
                            }
                        }
                    };
                    Err(Unreachable {
                        host: node.clone(),
                        endpoint: format!("srun -w {node}"),
                        reason: why,
                    })
                }
            }))
            .await;
            let mut all = Collected::default();
            for part in parts {
                match part {
                    Ok(part) => {
                        all.containers.extend(part.containers);
                        all.unreachable.extend(part.unreachable);
                    }
                    Err(u) => all.unreachable.push(u),
                }
            }
            all
        })
    }
}

/// A node's part: the containers the plan puts on that node, each once (another name, or a
/// second copy, is not the node's to report: its files would clash in the bundle), and
/// each file once, by a plain name (they name the bundle's files).
fn mine(part: NodePart, node: &str, planned: &[String]) -> Collected {
    let mut seen = std::collections::BTreeSet::new();
    let containers: Vec<Container> = part
        .collected
        .containers
        .into_iter()
        .filter(|c| c.host == node && planned.contains(&c.name) && seen.insert(c.name.clone()))
        .map(|mut c| {
            let mut names = std::collections::BTreeSet::new();
            c.files
                .retain(|t| plain_name(&t.name) && names.insert(t.name.clone()));
            c.listing.retain(|f| plain_name(&f.name));
            c
        })
        .collect();
    let unreachable = part
        .collected
        .unreachable
        .into_iter()
        .filter(|u| u.host == node)
        .collect();
    Collected {
        containers,
        unreachable,
    }
}

/// The node step: this node's containers of the run's job, as `params` ask.
pub async fn node_part(
    loaded: &LoadedProfile,
    run_id: &str,
    params: &NodeParams,
) -> Result<NodePart, Error> {
    let me = super::node::node_name()?;
    let cluster = super::run_view(loaded, run_id)?.cluster;
    let collected = crate::diagnose::bundle::gather_on(&cluster, Some(&me), params).await?;
    Ok(NodePart {
        node: me,
        collected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::collect::Tail;

    #[test]
    fn a_part_keeps_only_its_nodes_containers_with_plain_names() {
        let tail = |name: &str| Tail {
            name: name.into(),
            size: 1,
            bytes: b"x".to_vec(),
        };
        let container = |host: &str, name: &str| Container {
            host: host.into(),
            name: name.into(),
            files: vec![
                tail("raylet.out"),
                tail("../../etc/passwd"),
                tail("raylet.out"),
            ],
            ..Default::default()
        };
        let part = NodePart {
            node: "b".into(),
            collected: Collected {
                containers: vec![
                    container("b", "c-node1-0"),
                    container("a", "c-head"),
                    container("b", "../escape"),
                    container("b", "c-node1-0"),
                    container("b", "c-node2-0"),
                ],
                unreachable: Vec::new(),
            },
        };
        let kept = mine(part, "b", &["c-node1-0".to_string(), "c-head".to_string()]);
        assert_eq!(kept.containers.len(), 1);
        assert_eq!(kept.containers[0].name, "c-node1-0");
        let names: Vec<&str> = kept.containers[0]
            .files
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["raylet.out"]);
    }
}
