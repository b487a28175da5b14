//! `gpu_runtime` and `gpus`: for the nodes of a host that get real GPUs, whether the engine
//! can give them and whether the host has the GPUs the profile names.
//!
//! NVIDIA: the probe asks Docker for every GPU (`--gpus all`). It starts only when the
//! engine has its `nvidia` device driver (dockerd registers it when the NVIDIA Container
//! Toolkit's `nvidia-container-runtime-hook` is on its PATH) and the hook succeeds; the
//! GPUs are the `/dev/nvidiaN` nodes of the host (and those the hook put in the probe).
//! AMD: no runtime is involved, Docker passes `/dev/kfd` and `/dev/dri/renderD<128+id>`,
//! so both must exist on the host.

use std::collections::BTreeSet;

use bollard::models::SystemInfo;

use super::probe::{Facts, Outcome};
use super::{Check, Status};
use crate::cluster::plan::{ContainerPlan, GpuAttach};

const TOOLKIT: &str = "install the NVIDIA Container Toolkit on that host (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html) so that nvidia-container-runtime-hook is on dockerd's PATH, then restart dockerd; `docker run --rm --gpus all IMAGE nvidia-smi -L` there must list the GPUs";

/// The device ids one kind of GPU is asked for by this host's nodes, with who asks.
fn wanted(nodes: &[&ContainerPlan], amd: bool) -> (BTreeSet<u32>, Vec<String>) {
    let mut ids = BTreeSet::new();
    let mut names = Vec::new();
    for node in nodes {
        match (&node.gpu, amd) {
            (GpuAttach::Nvidia { device_ids }, false) | (GpuAttach::Amd { device_ids }, true) => {
                ids.extend(device_ids.iter().copied());
                names.push(node.name.clone());
            }
            _ => {}
        }
    }
    (ids, names)
}

/// Does this host's part of the plan use real GPUs (so the probe must look)?
pub fn needs(nodes: &[&ContainerPlan]) -> (bool, bool) {
    let nvidia = nodes
        .iter()
        .any(|n| matches!(n.gpu, GpuAttach::Nvidia { .. }));
    let amd = nodes.iter().any(|n| matches!(n.gpu, GpuAttach::Amd { .. }));
    (nvidia, amd)
}

fn list(ids: &BTreeSet<u32>) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checks of one host (none when it runs no real GPU).
pub fn checks(
    nodes: &[&ContainerPlan],
    outcome: &Outcome,
    info: Option<&SystemInfo>,
) -> Vec<Check> {
    let (nvidia, amd) = needs(nodes);
    let facts = match outcome {
        Outcome::Ran(f) => Some(f),
        Outcome::NvidiaRefused { facts, .. } => facts.as_ref(),
        Outcome::Failed(_) => None,
    };
    let mut out = Vec::new();
    if nvidia {
        out.push(nvidia_runtime(outcome, info));
        out.push(nvidia_gpus(nodes, outcome, facts));
    }
    if amd {
        out.extend(amd_checks(nodes, facts));
    }
    out
}

fn nvidia_runtime(outcome: &Outcome, info: Option<&SystemInfo>) -> Check {
    let runtimes = info
        .and_then(|i| i.runtimes.as_ref())
        .map(|r| {
            let mut names: Vec<&str> = r.keys().map(String::as_str).collect();
            names.sort();
            names.join(", ")
        })
        .unwrap_or_else(|| "unknown".into());
    match outcome {
        Outcome::Ran(_) => Check::ok(
            "gpu_runtime",
            format!("the engine's nvidia device driver gave a container every GPU (runtimes: {runtimes})"),
        ),
        Outcome::NvidiaRefused { error, .. } => Check {
            name: "gpu_runtime",
            status: Status::Fail,
            seen: format!("a container asking for NVIDIA GPUs did not start: {error} (runtimes: {runtimes})"),
            why: "the NVIDIA workers of this host ask Docker for their GPUs exactly this way: they would not start either".into(),
            fix: TOOLKIT.into(),
        },
        Outcome::Failed(e) => Check {
            name: "gpu_runtime",
            status: Status::Unknown,
            seen: e.clone(),
            why: "the probe could not run, so the NVIDIA runtime was not tried".into(),
            fix: String::new(),
        },
    }
}

fn nvidia_gpus(nodes: &[&ContainerPlan], outcome: &Outcome, facts: Option<&Facts>) -> Check {
    let (ids, names) = wanted(nodes, false);
    let Some(facts) = facts else {
        return Check {
            name: "gpus",
            status: Status::Unknown,
            seen: "the probe could not run".into(),
            why: "the host's GPUs could not be counted".into(),
            fix: String::new(),
        };
    };
    let found: BTreeSet<u32> = facts
        .host_dev
        .iter()
        .chain(&facts.dev)
        .filter_map(|n| n.strip_prefix("nvidia")?.parse().ok())
        .collect();
    let asked = format!("{} ask for GPUs [{}]", names.join(", "), list(&ids));
    if found.is_empty() && matches!(outcome, Outcome::Ran(_)) {
        return Check {
            name: "gpus",
            status: Status::Unknown,
            seen: format!(
                "{asked}; the nvidia hook accepted a request for every GPU, yet no /dev/nvidiaN is on the host or in the container"
            ),
            why: "the GPUs cannot be counted (a stand-in hook, or device nodes made elsewhere)"
                .into(),
            fix: "`nvidia-smi -L` on that host lists its GPUs".into(),
        };
    }
    let missing: BTreeSet<u32> = ids.difference(&found).copied().collect();
    let has = if found.is_empty() {
        "no NVIDIA GPU (no /dev/nvidiaN)".to_string()
    } else {
        format!("GPUs [{}]", list(&found))
    };
    if missing.is_empty() {
        return Check::ok("gpus", format!("the host has {has}; {asked}"));
    }
    Check {
        name: "gpus",
        status: Status::Fail,
        seen: format!("the host has {has}; {asked}"),
        why: format!("GPU(s) [{}] are not on this host: their workers would not start (or would get another GPU)", list(&missing)),
        fix: "correct device_ids in the profile to GPUs the host has (`nvidia-smi -L` there), or place those workers on a host that has them".into(),
    }
}

fn amd_checks(nodes: &[&ContainerPlan], facts: Option<&Facts>) -> Vec<Check> {
    let (ids, names) = wanted(nodes, true);
    let Some(facts) = facts else {
        let unknown = |name| Check {
            name,
            status: Status::Unknown,
            seen: "the probe could not run".into(),
            why: "the host's AMD devices could not be listed".into(),
            fix: String::new(),
        };
        return vec![unknown("gpu_runtime"), unknown("gpus")];
    };
    let has = |n: &str| facts.host_dev.iter().any(|d| d == n);
    let runtime = if has("kfd") {
        Check::ok(
            "gpu_runtime",
            "/dev/kfd present (amdgpu's compute interface)",
        )
    } else {
        Check {
            name: "gpu_runtime",
            status: Status::Fail,
            seen: "no /dev/kfd on the host".into(),
            why: format!("{} get /dev/kfd and their /dev/dri/renderD nodes from Docker: without the amdgpu driver's /dev/kfd they do not start", names.join(", ")),
            fix: "load the amdgpu kernel driver (ROCm's amdgpu-dkms) on that host; `ls /dev/kfd /dev/dri` there must show them".into(),
        }
    };
    let missing: BTreeSet<u32> = ids
        .iter()
        .copied()
        .filter(|id| !has(&format!("renderD{}", 128 + id)))
        .collect();
    let seen = format!(
        "{} ask for GPUs [{}] (/dev/dri/renderD128 + id)",
        names.join(", "),
        list(&ids)
    );
    let gpus = if missing.is_empty() {
        Check::ok("gpus", seen)
    } else {
        Check {
            name: "gpus",
            status: Status::Fail,
            seen,
            why: format!("GPU(s) [{}] have no render node on this host: their workers would not start", list(&missing)),
            fix: "correct device_ids in the profile to GPUs the host has (`ls /dev/dri` there: renderD128 is GPU 0)".into(),
        }
    };
    vec![runtime, gpus]
}
