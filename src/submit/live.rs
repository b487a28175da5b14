//! The training readers that need a live cluster: a job's log as a metrics table (the
//! saved log once the job has ended, else Ray's Jobs API), the chain of jobs a resumed job
//! continues, a job's progress, and where a job can be resumed from. What they read is
//! parsed by the pure `crate::training`.

use std::time::Duration;

use super::{Target, watch};
use crate::exit::{Classify, Exit};
use crate::ray::jobs::{JobInfo, JobsApi};
use crate::records::{JobRecord, now_ms};
use crate::training::metrics::Table;
use crate::training::progress::{self, Progress};
use crate::training::{
    CONFIG_CAP, Error as TrainingError, ResumePoint, chain_ids, load, read_saved, resume, saved_log,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Submit(#[from] super::Error),
    #[error(transparent)]
    Training(#[from] TrainingError),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Submit(e) => e.exit(),
            Error::Training(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Submit(e) => e.hint(),
            Error::Training(e) => e.hint(),
        }
    }
}

/// One job's own log as a table, with what is known of the job. An ended job with a
/// saved log is read from disk without asking Ray (so this works with the cluster gone);
/// otherwise Ray's status decides (and an end it reports is recorded, log included).
pub async fn job_table(
    target: &Target,
    id: &str,
) -> Result<(Table, JobInfo, Option<JobRecord>), Error> {
    let records = target.records();
    if let Some(record) = load(records.as_ref(), id)?
        && record.is_final()
        && let Some(saved) = saved_log(records.as_ref(), id)?
    {
        let table = read_saved(id, saved)?;
        return Ok((table, watch::from_record(&record), Some(record)));
    }
    let (info, record, from_cluster) = watch::status(target, id).await?;
    if (info.status.is_finished() || !from_cluster)
        && let Some(saved) = saved_log(records.as_ref(), id)?
    {
        return Ok((read_saved(id, saved)?, info, record));
    }
    if !from_cluster {
        return Ok((Table::new(id), info, record));
    }
    let api = JobsApi { ray: &target.ray };
    let text = api.logs(id).await.map_err(super::Error::from)?;
    Ok((Table::from_text(id, &text), info, record))
}

/// The table of a job and of the jobs it continues, joined (see [`Table::chain`]).
pub async fn chain_table(
    target: &Target,
    id: &str,
) -> Result<(Table, JobInfo, Option<JobRecord>), Error> {
    let records = target.records();
    let ids = chain_ids(records.as_ref(), id)?;
    let mut tables = Vec::with_capacity(ids.len());
    for earlier in &ids[..ids.len() - 1] {
        match job_table(target, earlier).await {
            Ok((table, _, _)) => tables.push(table),
            Err(e) => {
                tracing::warn!("the log of {earlier} (which {id} continues) is unavailable: {e}")
            }
        }
    }
    let (table, info, record) = job_table(target, id).await?;
    tables.push(table);
    Ok((Table::chain(tables), info, record))
}

/// The progress of a job from its own log (best effort: None when there is no verl line
/// or no log to read).
pub async fn progress(
    target: &Target,
    id: &str,
    info: &JobInfo,
    record: Option<&JobRecord>,
) -> Option<Progress> {
    let (table, _, _) = match job_table(target, id).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!("no progress for {id}: {e}");
            return None;
        }
    };
    let elapsed = info.start_time.map(|start| {
        let end = info
            .end_time
            .filter(|_| info.status.is_finished())
            .unwrap_or_else(now_ms);
        Duration::from_millis(end.saturating_sub(start))
    });
    let entrypoint = info
        .entrypoint
        .as_deref()
        .or(record.map(|r| r.entrypoint.as_str()))
        .unwrap_or_default();
    progress::summarize(
        &table,
        progress::total_from_entrypoint(entrypoint),
        elapsed,
        !info.status.is_finished(),
    )
}

/// Checks that `old_id` can be resumed (argus has its record, it has ended, its
/// checkpoint directory holds a checkpoint) and says from where.
pub async fn resume_point(target: &Target, old_id: &str) -> Result<ResumePoint, Error> {
    // Only the cluster knows whether it still runs: a record left PENDING by a cluster
    // that went down does not stop a resume (a cluster that forgot the job runs nothing).
    let api = JobsApi { ray: &target.ray };
    if let Ok(info) = api.get(old_id).await
        && !info.status.is_finished()
    {
        return Err(TrainingError::StillRunning {
            id: old_id.to_string(),
            status: info.status.to_string(),
        }
        .into());
    }
    checkpoint_point(target, old_id)
}

/// Where `old_id` can be resumed from, for a caller that knows it no longer runs (a
/// supervisor that stopped it, or saw the node its driver ran on die while Ray still
/// says RUNNING).
pub fn checkpoint_point(target: &Target, old_id: &str) -> Result<ResumePoint, Error> {
    let records = target.records();
    let record = load(records.as_ref(), old_id)?
        .ok_or_else(|| TrainingError::NoRecord(old_id.to_string()))?;
    let recorded = |rest: &str| -> Result<Option<Vec<u8>>, TrainingError> {
        let Some(records) = records.as_ref() else {
            return Ok(None);
        };
        records
            .read_file(old_id, rest, CONFIG_CAP)
            .map_err(|source| TrainingError::Read {
                path: records.dir(old_id).join(rest),
                source,
            })
    };
    let payload: serde_json::Value = recorded(crate::records::SUBMIT_PAYLOAD)?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let env_dir = payload["runtime_env"]["env_vars"]["ARGUS_CHECKPOINT_DIR"].as_str();
    let default =
        crate::records::container_path(&target.mount.jobs(), old_id, crate::records::CHECKPOINTS);
    let container_dir = resume::checkpoint_dir(&record.entrypoint, env_dir, &default);
    let host_dir =
        target
            .host_path_of(&container_dir)
            .ok_or_else(|| TrainingError::CheckpointsElsewhere {
                id: old_id.to_string(),
                container_dir: container_dir.clone(),
            })?;
    // The directory comes from a record: opened below the shared root through handles
    // like every directory argus reaches on the storage (a planted link is refused, not
    // followed), and read through the handle.
    let no_checkpoint = |choice: crate::training::checkpoint::Choice| TrainingError::NoCheckpoint {
        id: old_id.to_string(),
        dir: host_dir.clone(),
        skipped: choice.skipped,
        tracker: choice.tracker,
    };
    let held = match open_below_shared(target, &host_dir) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(no_checkpoint(Default::default()).into());
        }
        Err(source) => {
            return Err(TrainingError::Read {
                path: host_dir.clone(),
                source,
            }
            .into());
        }
    };
    // The newest checkpoint every rank of which is there (verl's tracker can name one a
    // dead host never finished writing).
    let choice =
        crate::training::checkpoint::choose(&held, None).map_err(|source| TrainingError::Read {
            path: host_dir.clone(),
            source,
        })?;
    let Some(chosen) = choice.chosen.clone() else {
        return Err(no_checkpoint(choice).into());
    };
    let step = chosen.step;
    let from_step = (!choice.tracker_agrees())
        .then(|| format!("{}/global_step_{step}", container_dir.trim_end_matches('/')));
    let recorded_jobspec = recorded(crate::records::JOBSPEC)?
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| crate::inputs::recorded::read(&text, crate::records::JOBSPEC).ok());
    Ok(ResumePoint {
        old_id: old_id.to_string(),
        checkpoint_dir: container_dir,
        step,
        from_step,
        world_size: chosen.world_size,
        skipped: choice.skipped,
        recorded_jobspec,
    })
}

/// `host_dir` (a path below this host's shared storage) opened from the shared root
/// through handles, never through a link.
fn open_below_shared(
    target: &Target,
    host_dir: &std::path::Path,
) -> std::io::Result<crate::fsx::Dir> {
    let Some(shared) = target.host_shared.as_ref().map(crate::config::Layout::root) else {
        // host_path_of gives paths below the shared storage only.
        return Err(std::io::ErrorKind::NotFound.into());
    };
    let rel = host_dir
        .strip_prefix(shared)
        .map_err(|_| crate::fsx::Unsafe::Escapes {
            root: shared.to_path_buf(),
            rel: host_dir.to_path_buf(),
        })?;
    crate::fsx::Dir::root(shared)?.open_dir(rel)
}
