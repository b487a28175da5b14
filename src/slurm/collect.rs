//! A failure bundle's nodes' part for a Slurm run. Each node's engine is reached only on
//! that node, so each node gathers its own containers' part: one srun step per node, all
//! at once (`argus slurm collect-node RUN_ID --params JSON`), which reads its node's
//! engine exactly as a bundle reads a Docker host's (`diagnose::bundle::gather_on`, the
//! same files, tails and caps) and prints it as one JSON line. Used by
//! `argus --slurm-run RUN_ID job diagnose ID` on the login node, and by the batch step when
//! an attempt fails, hangs or loses a node.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};

use super::attach::{StepOf, node_step, step_failure};
use super::{Error, RunFiles, cluster_profile};
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
    pub run_id: String,
    pub job_id: u64,
    pub profile: PathBuf,
    pub argus: PathBuf,
    pub nodes: Vec<String>,
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
            let parts = join_all(self.nodes.iter().map(|node| {
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
                                Some(part) => return Ok(mine(part, node)),
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

/// A node's part, its containers and hosts all of that node (another name is not its to
/// report), each container's name and files' names plain (they name the bundle's files).
fn mine(part: NodePart, node: &str) -> Collected {
    let containers: Vec<Container> = part
        .collected
        .containers
        .into_iter()
        .filter(|c| c.host == node && plain_name(&c.name))
        .map(|mut c| {
            c.files.retain(|t| plain_name(&t.name));
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
    let layout = loaded.host_layout()?;
    let files = RunFiles::open(&layout, run_id).map_err(|source| Error::Io {
        path: RunFiles::new(&layout, run_id).path(),
        source,
    })?;
    files.check_profile(loaded)?;
    let alloc: super::alloc::Alloc = super::read_json(&files.alloc())?;
    let cluster = cluster_profile(loaded, &alloc)?;
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
            files: vec![tail("raylet.out"), tail("../../etc/passwd")],
            ..Default::default()
        };
        let part = NodePart {
            node: "b".into(),
            collected: Collected {
                containers: vec![
                    container("b", "c-node1-0"),
                    container("a", "c-head"),
                    container("b", "../escape"),
                ],
                unreachable: Vec::new(),
            },
        };
        let kept = mine(part, "b");
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
