//! The stages of the run's one job: `submit` (or attach to the job the run already
//! submitted), `wait` (follow it to its end) and what `collect` reads back.
//!
//! The job is observed before anything is sent: argus's record under `jobs/<id>/` and
//! Ray's view. A job either of them knows is never submitted a second time.

use super::Error;
use crate::ray::jobs::{JobInfo, JobsApi, JobsError};
use crate::records::{JobRecord, Records};
use crate::submit::watch::{self, WaitOptions};
use crate::submit::{self, Prepared, Target};

/// What is known of the run's job before the submit stage acts.
#[derive(Debug)]
pub enum Seen {
    /// Neither argus nor the cluster knows it: it was never submitted.
    Nowhere,
    /// argus recorded it (Ray may or may not still know it).
    Recorded(JobRecord),
    /// Ray has it but argus has no record: the submission was cut short after Ray took it.
    OnlyOnCluster(JobInfo),
}

impl Seen {
    pub fn exists(&self) -> bool {
        !matches!(self, Seen::Nowhere)
    }
}

/// Looks for the job. The record is enough when it says the job ended, so a finished
/// job needs no cluster; otherwise Ray is asked.
pub async fn observe(target: &Target, records: &Records, id: &str) -> Result<Seen, Error> {
    if let Some(record) = records.read(id) {
        return Ok(Seen::Recorded(record));
    }
    match (JobsApi { ray: &target.ray }).get(id).await {
        Ok(info) => Ok(Seen::OnlyOnCluster(info)),
        Err(JobsError::NotFound(_)) => Ok(Seen::Nowhere),
        Err(e) => Err(submit::Error::from(e).into()),
    }
}

/// Submits the prepared job; a note for the report.
pub async fn submit(target: &Target, prepared: &Prepared) -> Result<String, Error> {
    submit::submit(target, prepared).await?;
    Ok(prepared.submission_id.clone())
}

/// Writes argus's record of a job Ray took but argus never recorded (the submitting
/// process died between the two), from what Ray says about it.
pub fn adopt(target: &Target, records: &Records, info: &JobInfo, id: &str) -> Result<(), Error> {
    let io = |source| {
        Error::Submit(submit::Error::Records {
            path: records.dir(id),
            source,
        })
    };
    let staged = records.stage(id).map_err(io)?;
    records.publish(staged).map_err(io)?;
    let metadata = info.metadata.clone().unwrap_or_default();
    let submitted_at = info
        .start_time
        .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .unwrap_or_else(std::time::SystemTime::now);
    let mut record = JobRecord {
        submission_id: id.to_string(),
        workload: metadata.get("workload").cloned().unwrap_or_default(),
        code_id: metadata.get("code_id").cloned(),
        code_path: metadata.get("code_path").cloned().unwrap_or_default(),
        entrypoint: info.entrypoint.clone().unwrap_or_default(),
        cluster: target.cluster.clone(),
        dashboard: target.ray.endpoint().to_string(),
        submitted_at: humantime::format_rfc3339_millis(submitted_at).to_string(),
        ..Default::default()
    };
    record.update_from(info);
    records.write(&record).map_err(io)
}

/// Follows the job to its end (the time limit enforced) and records its end. A job
/// whose end argus recorded is read from the record, without the cluster.
pub async fn wait(
    target: &Target,
    records: &Records,
    id: &str,
    options: &WaitOptions,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<JobInfo, Error> {
    if let Some(record) = records.read(id).filter(JobRecord::is_final) {
        return Ok(watch::from_record(&record));
    }
    match (JobsApi { ray: &target.ray }).get(id).await {
        Ok(_) => {}
        Err(JobsError::NotFound(_)) => return Err(Error::JobLost { id: id.to_string() }),
        Err(e) => return Err(submit::Error::from(e).into()),
    }
    Ok(watch::wait(target, id, options, on_log).await?)
}
