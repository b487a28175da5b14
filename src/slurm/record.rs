//! The records of a Slurm run: what `submit` did (`slurm.json`, updated with how the
//! Slurm job ended) and what the batch step did (`slurm/batch.json`).

use serde::{Deserialize, Serialize};

use super::script::Allocation;

/// `runs/<run_id>/slurm.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SlurmRecord {
    pub run_id: String,
    /// The Slurm job id (None in a dry run, or before sbatch answered).
    pub slurm_job_id: Option<u64>,
    pub submitted_at: String,
    pub allocation: Allocation,
    pub script: String,
    /// The batch step's output, `%j` replaced.
    pub output: String,
    /// The Ray job's submission id.
    pub submission_id: String,
    pub image_id: String,
    /// The argus binary the nodes run (checked visible on them at submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argus: Option<String>,
    /// How the Slurm job ended: COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_state: Option<String>,
}

/// `runs/<run_id>/slurm/batch.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BatchReport {
    pub slurm_job_id: u64,
    pub cluster: String,
    pub nodes: Vec<super::alloc::Node>,
    pub slot: u32,
    /// The stage the batch step is in or ended in: nodes, ready, submit, wait, done;
    /// `requeued` when it handed the run to its next allocation.
    pub stage: String,
    #[serde(default)]
    pub seconds_to_ready: Option<f64>,
    #[serde(default)]
    pub job_status: Option<String>,
    #[serde(default)]
    pub job_message: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub error: Option<String>,
    pub driver_log: Option<String>,
    /// The run's restart policy (none: not supervised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::config::jobspec::Restart>,
    /// The run's jobs, oldest first, across the allocations of a requeued batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::restart::Attempt>,
    /// How many times Slurm started the batch again (`SLURM_RESTART_COUNT`).
    #[serde(default)]
    pub requeues: u32,
}
