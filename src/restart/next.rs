//! The JobSpec of the attempt after another: the previous job's own (its code snapshot,
//! datasets and model), resuming verl from the newest complete checkpoint of its
//! checkpoint directory (`submit --resume`'s choice: every rank's shard there, the same
//! world size); the run's JobSpec when there is no checkpoint yet.

use super::{Error, ResumedFrom};
use crate::config::jobspec::LoadedJobSpec;
use crate::submit::Target;
use crate::submit::live::{Error as LiveError, checkpoint_point};
use crate::training::Error as TrainingError;

/// Attempt `id`'s JobSpec after job `previous` (seen stopped by the caller: not asked
/// again), and the checkpoint it resumes from; `fresh` (the run's JobSpec) when there is
/// none.
pub fn next_job(
    target: &Target,
    previous: &str,
    fresh: &LoadedJobSpec,
    id: &str,
) -> Result<(LoadedJobSpec, Option<ResumedFrom>), Error> {
    let (mut job, from) = match checkpoint_point(target, previous) {
        Ok(point) => {
            let job = crate::training::resumed_jobspec(&point, None, &[])?;
            let path = point.from_step.clone().unwrap_or_else(|| {
                format!(
                    "{}/global_step_{}",
                    point.checkpoint_dir.trim_end_matches('/'),
                    point.step
                )
            });
            let from = ResumedFrom {
                step: point.step,
                path,
                skipped: point.skipped.clone(),
            };
            (job, Some(from))
        }
        Err(LiveError::Training(TrainingError::NoCheckpoint { .. })) => (fresh.clone(), None),
        Err(e) => return Err(e.into()),
    };
    job.spec.submission_id = Some(id.parse()?);
    Ok((job, from))
}
