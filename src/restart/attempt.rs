//! The attempts of a supervised run (`restart:` in the JobSpec): each is one Ray job;
//! attempt N >= 2 continues the previous one from its newest complete checkpoint.

use serde::{Deserialize, Serialize};

use crate::config::jobspec::RestartOn;
use crate::ray::jobs::JobStatus;

/// One attempt, as the run's report records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first.
    pub n: u32,
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::SubmissionId>")]
    pub submission_id: String,
    /// When it was submitted (RFC 3339).
    pub started_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    /// Ray's last word on the job.
    #[serde(default)]
    pub status: Option<JobStatus>,
    /// What ended it, when it did not succeed.
    #[serde(default)]
    pub cause: Option<RestartOn>,
    /// What was seen: verl's error, the container OOM-killed, the host's engine gone.
    #[serde(default)]
    pub detail: Option<String>,
    /// When argus saw it (RFC 3339).
    #[serde(default)]
    pub detected_at: Option<String>,
    /// The checkpoint this attempt resumed from (none: from the start).
    #[serde(default)]
    pub resumed_from: Option<ResumedFrom>,
    /// The last training step its log showed.
    #[serde(default)]
    pub last_step: Option<u64>,
    /// Steps it ran past the checkpoint the next attempt resumes from.
    #[serde(default)]
    pub steps_lost: Option<u64>,
    /// Steps it trained and checkpointed whose log lines never came (it died between its
    /// checkpoint and the step's line): the run's metrics have no row for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlogged_steps: Vec<u64>,
    /// From the detection of the previous attempt's end to this attempt's first step.
    #[serde(default)]
    pub downtime_s: Option<f64>,
    /// When its log showed its first training step (RFC 3339).
    #[serde(default)]
    pub first_step_at: Option<String>,
    /// How long each part of the recovery that started this attempt took.
    #[serde(default)]
    pub recovery: Option<RecoveryTimes>,
    /// The triage of its failure bundle (`jobs/<id>/diagnostics/<n>/`): the first error
    /// across the nodes and the file that holds it, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<String>,
}

/// A checkpoint an attempt resumed from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumedFrom {
    pub step: u64,
    /// As the containers see it.
    pub path: String,
    /// Newer checkpoints passed over, with why (a rank's shard missing, ...).
    #[serde(default)]
    pub skipped: Vec<(u64, String)>,
}

/// The parts of one recovery, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryTimes {
    /// From the last sign of life (the container's death, the last step) to argus seeing
    /// it; for a failed job, from its end.
    pub detect_s: f64,
    /// Stopping what was left of the job.
    pub stop_s: f64,
    /// The backoff, then bringing the cluster back to the profile.
    pub repair_s: f64,
    /// Choosing the checkpoint and submitting the next attempt.
    pub resubmit_s: f64,
}

impl Attempt {
    /// What this attempt lost to the next one, resuming from `resumed` (none: from the
    /// start): the steps past it, and the steps up to it whose lines never came.
    pub fn note_resumed(&mut self, resumed: Option<u64>) {
        let resumed = resumed.unwrap_or(0);
        self.steps_lost = self.last_step.map(|last| last.saturating_sub(resumed));
        let logged = self.last_step.unwrap_or(0);
        let first = self
            .resumed_from
            .as_ref()
            .map_or(1, |r| r.step + 1)
            .max(logged + 1);
        self.unlogged_steps = (first..=resumed).collect();
    }
}

/// The Ray submission id of attempt `n` of a run whose first job is `first`.
pub fn submission_id(first: &str, n: u32) -> String {
    if n <= 1 {
        first.to_string()
    } else {
        format!("{first}-attempt-{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_attempt_lost_to_the_next() {
        let mut a = Attempt {
            last_step: Some(5),
            ..Default::default()
        };
        a.note_resumed(Some(4));
        assert_eq!((a.steps_lost, a.unlogged_steps.clone()), (Some(1), vec![]));
        // Killed between the checkpoint of step 2 and its line: step 2 was trained, unlogged.
        a.last_step = Some(1);
        a.note_resumed(Some(2));
        assert_eq!((a.steps_lost, a.unlogged_steps.clone()), (Some(0), vec![2]));
        // An attempt that resumed from step 4 and died before logging any step.
        a.last_step = None;
        a.resumed_from = Some(ResumedFrom {
            step: 4,
            ..Default::default()
        });
        a.note_resumed(Some(6));
        assert_eq!(a.unlogged_steps, vec![5, 6]);
        a.note_resumed(None);
        assert_eq!((a.steps_lost, a.unlogged_steps.clone()), (None, vec![]));
    }
}
