//! The allocation a batch step runs in: the Slurm job id, its nodes (in Slurm's order,
//! the first is where the batch step runs), each node's address, and the GPUs Slurm gave
//! the job on each node, as absolute indexes on that node.
//!
//! The GPUs come from `scontrol show job -d`, whose per-node lines say
//! `GRES=gpu:1(IDX:1)`: absolute indexes on the node, whatever the step's environment
//! renumbers (with cgroup device confinement `CUDA_VISIBLE_DEVICES` counts from 0; with
//! `task/none` `SLURM_STEP_GPUS`, `SLURM_JOB_GPUS` and `CUDA_VISIBLE_DEVICES` carry the
//! absolute indexes too). The parsers are pure; `read` runs the Slurm commands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Error, slurm_command};
use crate::config::profile::NodeAddress;

/// One allocated node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub address: NodeAddress,
    /// The job's GPUs on this node: absolute indexes.
    pub gpus: Vec<u32>,
}

/// The allocation as the batch step read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alloc {
    pub job_id: u64,
    /// In Slurm's order: the first runs the batch step and the head.
    pub nodes: Vec<Node>,
    /// The job's port slot on its nodes (see `ports`).
    pub slot: u32,
}

/// `scontrol show hostnames` output: one name a line.
pub fn parse_hostnames(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The value of `key=` in `scontrol show` output (words separated by blanks).
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// `0,2-3` as indexes; None when malformed.
pub fn parse_indexes(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1024 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The GPU indexes of `GRES=gpu:2(IDX:0-1)` or `GRES=gpu:tesla:1(IDX:3),...`.
fn gpu_indexes_of(gres: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    let mut rest = gres;
    while let Some(start) = rest.find("gpu") {
        rest = &rest[start..];
        let idx_at = rest.find("(IDX:")?;
        let after = &rest[idx_at + 5..];
        let end = after.find(')')?;
        out.extend(parse_indexes(&after[..end])?);
        rest = &after[end..];
    }
    Some(out)
}

/// `scontrol show job -d <id>`: for each `Nodes=<expr> ... GRES=...` line, the node
/// expression and the GPU indexes. Expressions (`n[1-3]`) are expanded by the caller.
pub fn parse_job_gres(text: &str) -> Vec<(String, Vec<u32>)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with("Nodes=") {
            continue;
        }
        let Some(nodes) = field(line, "Nodes") else {
            continue;
        };
        let gpus = field(line, "GRES")
            .and_then(gpu_indexes_of)
            .unwrap_or_default();
        out.push((nodes.to_string(), gpus));
    }
    out
}

/// The job's state from `scontrol show job -o <id>` (`JobState=RUNNING`).
pub fn parse_job_state(text: &str) -> Option<String> {
    field(text, "JobState").map(str::to_string)
}

/// States in which a job may still use its containers.
pub fn is_alive(state: &str) -> bool {
    matches!(
        state,
        "PENDING" | "RUNNING" | "SUSPENDED" | "CONFIGURING" | "RESIZING" | "REQUEUED"
    )
}

/// Expands a node expression through `scontrol show hostnames` (plain names as they are).
fn expand(expr: &str) -> Result<Vec<String>, Error> {
    if !expr.contains('[') && !expr.contains(',') {
        return Ok(vec![expr.to_string()]);
    }
    Ok(parse_hostnames(&slurm_command(
        "scontrol",
        &["show", "hostnames", expr],
    )?))
}

/// A node's address: `NodeAddr` of `scontrol show node`, resolved when it is a name.
fn address_of(node: &str) -> Result<NodeAddress, Error> {
    let text = slurm_command("scontrol", &["show", "node", node])?;
    let addr = field(&text, "NodeAddr").unwrap_or(node).to_string();
    if let Ok(a) = NodeAddress::parse(&addr) {
        return Ok(a);
    }
    use std::net::ToSocketAddrs;
    (addr.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .find_map(|s| match s.ip() {
            std::net::IpAddr::V4(v4) if !v4.is_loopback() => Some(NodeAddress(v4)),
            _ => None,
        })
        .ok_or_else(|| Error::Allocation(format!("node {node}: no IPv4 address for {addr:?}")))
}

/// The job id from the environment.
pub fn job_id_from_env() -> Result<u64, Error> {
    std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Error::Allocation("SLURM_JOB_ID is not set: not inside a Slurm job".into()))
}

/// Reads the allocation of job `job_id` (its slot still to be claimed: 0).
pub fn read(job_id: u64) -> Result<Alloc, Error> {
    let id = job_id.to_string();
    let job = slurm_command("scontrol", &["show", "job", "-d", &id])?;
    let list = field(&job, "NodeList")
        .map(str::to_string)
        .or_else(|| std::env::var("SLURM_JOB_NODELIST").ok())
        .ok_or_else(|| Error::Allocation(format!("job {id} has no NodeList")))?;
    let names = expand(&list)?;
    let mut gpus: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (expr, indexes) in parse_job_gres(&job) {
        for name in expand(&expr)? {
            gpus.insert(name, indexes.clone());
        }
    }
    let nodes = names
        .into_iter()
        .map(|name| {
            Ok(Node {
                address: address_of(&name)?,
                gpus: gpus.get(&name).cloned().unwrap_or_default(),
                name,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    if nodes.is_empty() {
        return Err(Error::Allocation(format!("job {id} has no nodes")));
    }
    Ok(Alloc {
        job_id,
        nodes,
        slot: 0,
    })
}

/// The state of a job; None when Slurm no longer knows it.
pub fn job_state(job_id: u64) -> Result<Option<String>, Error> {
    match slurm_command("scontrol", &["show", "job", "-o", &job_id.to_string()]) {
        Ok(text) => Ok(parse_job_state(&text)),
        Err(Error::Command { stderr, .. }) if stderr.contains("Invalid job id") => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "JobId=7 JobName=argus-run\n   JobState=RUNNING Reason=None Dependency=(null)\n   NodeList=a,b,c BatchHost=a\n   JobState=RUNNING\n     Nodes=a CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:1)\n     Nodes=b-[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0,3)\n     Nodes=c CPU_IDs=0 Mem=0 GRES=gpu:tesla:1(IDX:0-1),gpu:a100:1(IDX:4)\n   MinCPUsNode=1\n";

    #[test]
    fn gres_lines_give_absolute_indexes_per_node() {
        assert_eq!(
            parse_job_gres(JOB),
            vec![
                ("a".to_string(), vec![1]),
                ("b-[1-2]".to_string(), vec![0, 3]),
                ("c".to_string(), vec![0, 1, 4]),
            ]
        );
        assert_eq!(
            parse_job_gres("     Nodes=a CPU_IDs=0 Mem=0 GRES=\n"),
            vec![("a".to_string(), vec![])]
        );
    }

    #[test]
    fn fields_and_states() {
        assert_eq!(field(JOB, "NodeList"), Some("a,b,c"));
        assert_eq!(field(JOB, "BatchHost"), Some("a"));
        assert_eq!(field(JOB, "Nope"), None);
        assert_eq!(parse_job_state(JOB).as_deref(), Some("RUNNING"));
        assert!(is_alive("RUNNING"));
        assert!(!is_alive("COMPLETING"));
        assert!(!is_alive("CANCELLED"));
        assert_eq!(
            field(
                "NodeName=b Arch=x86_64 NodeAddr=10.251.3.2 NodeHostName=b",
                "NodeAddr"
            ),
            Some("10.251.3.2")
        );
    }

    #[test]
    fn index_lists() {
        assert_eq!(parse_indexes("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_indexes(""), Some(vec![]));
        assert_eq!(parse_indexes("3-1"), None);
        assert_eq!(parse_indexes("a"), None);
        assert_eq!(parse_hostnames("a\n b \n\n"), ["a", "b"]);
    }
}
