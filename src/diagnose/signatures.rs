//! The known signatures of a failed job: what a log line says about why it failed. Pure.
//!
//! Each cause is recognised by words its messages carry on every version seen (Python's
//! exception names, PyTorch's, NCCL's and Gloo's, Hydra's and OmegaConf's, the kernel's,
//! Ray's raylet and GCS). A line matches at most one cause, the first in [`Cause`]'s order
//! of checks below (a CUDA out-of-memory is not taken for Ray's memory monitor).

use serde::{Deserialize, Serialize};

/// Why a job failed, as far as its logs and its containers' states say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A container's process killed by the kernel for memory (or by Ray's memory monitor).
    OomKilled,
    /// PyTorch / CUDA / HIP out of device memory.
    CudaOom,
    /// NCCL or Gloo (torch.distributed) could not connect, timed out or aborted.
    Collective,
    /// ImportError / ModuleNotFoundError.
    Import,
    /// Hydra or OmegaConf refused the configuration.
    HydraConfig,
    /// No space left on a device.
    DiskFull,
    /// Ray cannot place an actor or a task: no live node has what it asks for (verl 0.9's
    /// TransferQueue storage pinned to a node with no CPU for it, a resource no node offers).
    Unschedulable,
    /// A Ray node died (raylet or GCS said so, or its container exited).
    NodeDied,
    /// An error no signature names: the first Python exception line.
    Unknown,
}

impl Cause {
    /// The short text a diagnosis line starts with.
    pub fn label(self) -> &'static str {
        match self {
            Cause::OomKilled => "OOM-killed",
            Cause::CudaOom => "CUDA out of memory",
            Cause::Collective => "collective (NCCL/Gloo) error",
            Cause::Import => "ModuleNotFound/ImportError",
            Cause::HydraConfig => "Hydra config error",
            Cause::DiskFull => "disk full",
            Cause::Unschedulable => "unschedulable",
            Cause::NodeDied => "node died",
            Cause::Unknown => "error",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

const CUDA_OOM: &[&str] = &[
    "CUDA out of memory",
    "torch.cuda.OutOfMemoryError",
    "OutOfMemoryError: CUDA",
    "CUDA error: out of memory",
    "HIP out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
];

/// Ray's memory monitor killing a worker (not "OOM killer" alone: Ray names it among the
/// possible causes of any worker that died).
const RAY_OOM: &[&str] = &[
    "ray.exceptions.OutOfMemoryError",
    "running low on memory",
    "Node memory usage above threshold",
    "killed to reclaim memory",
    "Out of memory: Killed process",
    "oom-kill:",
];

const COLLECTIVE_WHO: &[&str] = &[
    "NCCL",
    "nccl",
    "Gloo",
    "gloo",
    "DistNetworkError",
    "DistBackendError",
    "c10d",
];
const COLLECTIVE_WHAT: &[&str] = &[
    "rror",
    "imeout",
    "timed out",
    "failed",
    "Failed",
    "refused",
    "unreachable",
    "abort",
    "Abort",
];

const IMPORT: &[&str] = &["ModuleNotFoundError", "ImportError", "No module named"];

const HYDRA: &[&str] = &[
    "Could not override '",
    "is not in struct",
    "hydra.errors.",
    "omegaconf.errors.",
    "ConfigAttributeError",
    "ConfigKeyError",
    "ConfigCompositionException",
    "MissingMandatoryValue",
    "OverrideParseException",
    "Could not append to config",
    "Error merging override",
    "Cannot find primary config",
];

const DISK_FULL: &[&str] = &[
    "No space left on device",
    "ENOSPC",
    "[Errno 28]",
    "Disk quota exceeded",
];

const UNSCHEDULABLE: &[&str] = &[
    "ActorUnschedulableError",
    "TaskUnschedulableError",
    "is not schedulable",
];

const NODE_DIED: &[&str] = &[
    "NodeDiedError",
    "node has died",
    "has been marked dead",
    "health check failed",
    "failed the health check",
    "Raylet is terminated",
    "is dead because",
    "marked as dead",
];

fn any(line: &str, words: &[&str]) -> bool {
    words.iter().any(|w| line.contains(w))
}

/// Words of a line that only passes a cause on: a Python warning (verl 0.9 warns that each
/// engine it has no package for "is not available: ModuleNotFoundError(...)", in every
/// job), and an actor that died because its owner did (the owner's end is the cause).
const NOT_A_CAUSE: &[&str] = &[
    "Warning: ",
    "warnings.warn(",
    "actor is dead because its owner",
];

/// The cause a log line names, if any (never [`Cause::Unknown`]: see [`is_exception`]).
pub fn classify(line: &str) -> Option<Cause> {
    if any(line, NOT_A_CAUSE) {
        None
    } else if any(line, CUDA_OOM) {
        Some(Cause::CudaOom)
    } else if any(line, RAY_OOM) {
        Some(Cause::OomKilled)
    } else if any(line, COLLECTIVE_WHO) && any(line, COLLECTIVE_WHAT) {
        Some(Cause::Collective)
    } else if any(line, IMPORT) {
        Some(Cause::Import)
    } else if any(line, HYDRA) {
        Some(Cause::HydraConfig)
    } else if any(line, DISK_FULL) {
        Some(Cause::DiskFull)
    } else if any(line, UNSCHEDULABLE) {
        Some(Cause::Unschedulable)
    } else if any(line, NODE_DIED) {
        Some(Cause::NodeDied)
    } else {
        None
    }
}

/// A Python exception line (`ValueError: ...`, `ray.exceptions.RayTaskError(...)`): what
/// the triage names when no signature matches.
pub fn is_exception(line: &str) -> bool {
    let line = line.trim_start();
    let name: String = line
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    (name.ends_with("Error") || name.ends_with("Exception"))
        && name != "Error"
        && name != "Exception"
        && line[name.len()..].starts_with([':', '('])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_named_by_its_messages() {
        let cases = [
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                Cause::CudaOom,
            ),
            (
                "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                Cause::OomKilled,
            ),
            (
                "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
                Cause::Collective,
            ),
            (
                "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:144] Connection refused",
                Cause::Collective,
            ),
            (
                "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out.",
                Cause::Collective,
            ),
            (
                "ModuleNotFoundError: No module named 'flash_attn'",
                Cause::Import,
            ),
            (
                "ImportError: cannot import name 'x' from 'y'",
                Cause::Import,
            ),
            ("Could not override 'trainer.nope'.", Cause::HydraConfig),
            ("Key 'nope' is not in struct", Cause::HydraConfig),
            (
                "OSError: [Errno 28] No space left on device: '/mnt/shared/x'",
                Cause::DiskFull,
            ),
            (
                "ray.exceptions.NodeDiedError: The node has died",
                Cause::NodeDied,
            ),
            (
                "[2026-01-01 00:00:00,000 W 1 1] gcs_health_check_manager.cc:100: Node abc is dead because the health check failed.",
                Cause::NodeDied,
            ),
            (
                "ray.exceptions.ActorUnschedulableError: The actor is not schedulable: The node specified via NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible, and soft=False was specified.",
                Cause::Unschedulable,
            ),
        ];
        for (line, cause) in cases {
            assert_eq!(classify(line), Some(cause), "{line}");
        }
        // What verl 0.9.1 and Ray printed in a job that failed for another reason (seen in
        // a real run's bundle): a warning about an engine, an actor ended with its owner.
        for passing_on in [
            "\u{1b}[36m(pid=202, ip=172.27.0.3)\u{1b}[0m /mnt/shared/common/code/verl/f88d/verl/workers/engine/__init__.py:41: UserWarning: veomni engine is not available: ModuleNotFoundError(\"No module named 'veomni'\")",
            "  warnings.warn(f\"megatron engine is not available: {e!r}\", stacklevel=1)",
            "[2026-11-29 11:01:00,513 I 289 350] core_worker.cc:4048: Force kill actor request has received. exiting immediately... The actor is dead because its owner has died. Owner Id: 0200",
        ] {
            assert_eq!(classify(passing_on), None, "{passing_on}");
        }
        for quiet in [
            "step:1 - actor/pg_loss:0.1",
            "NCCL_DEBUG=WARN",
            "(raylet) A worker died or was killed while executing a task. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.",
            "[2026-01-01 00:00:00,000 E 1 1] Failed to establish connection to the metrics exporter agent.",
        ] {
            assert_eq!(classify(quiet), None, "{quiet}");
        }
    }

    #[test]
    fn exception_lines_are_told_from_prose() {
        assert!(is_exception("ValueError: FAKE_FAIL_AT"));
        assert!(is_exception(
            "  ray.exceptions.RayTaskError(ValueError): ray::f()"
        ));
        assert!(!is_exception("Error: something"));
        assert!(!is_exception("an Error: in prose"));
        assert!(!is_exception("Traceback (most recent call last):"));
    }
}
