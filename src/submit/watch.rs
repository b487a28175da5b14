//! Watching a job to its end: status polling, log following (the websocket tail, or
//! polling `/logs` when the tail cannot be opened), the time limit (argus stops the job
//! and records why), and the final record (status + driver.log).

use std::time::{Duration, Instant};

use super::{Error, Target};
use crate::ray::RayError;
use crate::ray::jobs::{JobInfo, JobStatus, JobsApi, JobsError};
use crate::records::{JobRecord, now_ms};

pub struct WaitOptions {
    /// Give up waiting (the job keeps running) after this long.
    pub timeout: Option<Duration>,
    /// Stop the job once it has run this long.
    pub time_limit: Option<Duration>,
    /// Stream the driver's log to `on_log` while waiting.
    pub follow: bool,
}

/// Stops the job when it has run longer than `limit`; returns the reason once it did.
async fn enforce_limit(
    api: &JobsApi<'_>,
    info: &JobInfo,
    limit: Option<Duration>,
    stopped: &mut Option<String>,
) -> Result<(), Error> {
    let (Some(limit), Some(start), None) = (limit, info.start_time, stopped.as_ref()) else {
        return Ok(());
    };
    if info.status.is_finished() || now_ms().saturating_sub(start) < limit.as_millis() as u64 {
        return Ok(());
    }
    api.stop(info.submission_id.as_deref().unwrap_or_default())
        .await?;
    *stopped = Some(format!(
        "time_limit {} exceeded",
        humantime::format_duration(limit)
    ));
    Ok(())
}

/// Waits until the job ends; records its end under `jobs/<id>/` when argus has a record.
pub async fn wait(
    target: &Target,
    id: &str,
    options: &WaitOptions,
    mut on_log: impl FnMut(&str) + Send,
) -> Result<JobInfo, Error> {
    let api = JobsApi { ray: &target.ray };
    let started = Instant::now();
    let mut stopped_by_argus = None;
    let timed_out = |status: &JobStatus| -> Option<Error> {
        let timeout = options.timeout?;
        (started.elapsed() >= timeout).then(|| Error::WaitTimeout {
            id: id.to_string(),
            status: status.clone(),
            seconds: timeout.as_secs(),
        })
    };

    let mut info = api.get(id).await?;
    if options.follow && !info.status.is_finished() {
        // The websocket tail streams until the job ends; a guard polls the status meanwhile
        // (for the time limit and in case the stream stalls).
        let tail = api.tail(id, &mut on_log);
        let guard = async {
            let mut stopped = None;
            let mut ended_at: Option<Instant> = None;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let info = api.get(id).await?;
                enforce_limit(&api, &info, options.time_limit, &mut stopped).await?;
                if let Some(e) = timed_out(&info.status) {
                    return Err(e);
                }
                match ended_at {
                    // Give the stream a moment to deliver its last lines, then stop waiting.
                    Some(t) if t.elapsed() > Duration::from_secs(5) => {
                        return Ok::<_, Error>(stopped);
                    }
                    None if info.status.is_finished() => ended_at = Some(Instant::now()),
                    _ => {}
                }
            }
        };
        tokio::pin!(guard);
        tokio::select! {
            result = tail => {
                if let Err(reason) = result {
                    tracing::info!("log tail unavailable ({reason}); polling /logs instead");
                    stopped_by_argus = poll_logs(&api, id, options, &mut on_log, started).await?;
                }
            }
            result = &mut guard => stopped_by_argus = result?,
        }
    }
    loop {
        info = api.get(id).await?;
        enforce_limit(&api, &info, options.time_limit, &mut stopped_by_argus).await?;
        if info.status.is_finished() {
            break;
        }
        if let Some(e) = timed_out(&info.status) {
            return Err(e);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    record_end(target, id, &info, stopped_by_argus).await;
    Ok(info)
}

/// Fallback for `--follow`: print what `/logs` adds, once a second, until the job ends.
async fn poll_logs(
    api: &JobsApi<'_>,
    id: &str,
    options: &WaitOptions,
    on_log: &mut (impl FnMut(&str) + Send),
    started: Instant,
) -> Result<Option<String>, Error> {
    let mut shown = 0usize;
    let mut stopped = None;
    loop {
        let info = api.get(id).await?;
        let logs = api.logs(id).await?;
        if logs.len() > shown {
            on_log(&logs[shown..]);
            shown = logs.len();
        }
        if info.status.is_finished() {
            return Ok(stopped);
        }
        enforce_limit(api, &info, options.time_limit, &mut stopped).await?;
        if let Some(timeout) = options.timeout
            && started.elapsed() >= timeout
        {
            return Err(Error::WaitTimeout {
                id: id.to_string(),
                status: info.status,
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Writes the final status and driver log into the job's record (if argus has one).
pub async fn record_end(
    target: &Target,
    id: &str,
    info: &JobInfo,
    stopped_by_argus: Option<String>,
) {
    let Some(records) = target.records() else {
        return;
    };
    let Some(mut record) = records.read(id) else {
        return;
    };
    if stopped_by_argus.is_some() {
        record.stopped_by_argus = stopped_by_argus;
    }
    let api = JobsApi { ray: &target.ray };
    // A job may print a secret it was given (a token in its env): the saved log carries
    // none of the values this process knows.
    let mut secrets = crate::config::secrets::known();
    if let Some(env) = info
        .runtime_env
        .as_ref()
        .and_then(|r| r["env_vars"].as_object())
    {
        secrets.add_vars(
            env.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))),
        );
    }
    let logs = api
        .logs(id)
        .await
        .ok()
        .map(|text| secrets.redact_str(&text).into_owned());
    if let Err(e) = records.finish(&mut record, info, logs.as_deref()) {
        tracing::warn!("cannot record the end of job {id}: {e}");
    }
    // The table of its metrics beside the log (jobs/<id>/metrics.csv).
    if let Err(e) = crate::training::save_metrics(&records, id) {
        tracing::warn!("cannot save the metrics of job {id}: {e}");
    }
}

/// What argus knows of a job: Ray's view when the cluster knows it (recorded when final),
/// else the record under `jobs/<id>/`.
pub async fn status(
    target: &Target,
    id: &str,
) -> Result<(JobInfo, Option<JobRecord>, bool), Error> {
    let records = target.records();
    let record = records.as_ref().and_then(|r| r.read(id));
    let api = JobsApi { ray: &target.ray };
    match api.get(id).await {
        Ok(info) => {
            if info.status.is_finished() && record.as_ref().is_some_and(|r| !r.is_final()) {
                record_end(target, id, &info, None).await;
            }
            let record = records.as_ref().and_then(|r| r.read(id));
            Ok((info, record, true))
        }
        // Only a cluster that is gone (nothing answers) hands over to the record: a cluster
        // that answers and refuses (a wrong token) or fails is an error, never a stale status.
        Err(JobsError::NotFound(_)) | Err(JobsError::Ray(RayError::Unreachable { .. }))
            if record.is_some() =>
        {
            let record = record.unwrap_or_default();
            Ok((from_record(&record), Some(record), false))
        }
        Err(JobsError::NotFound(_)) => Err(Error::UnknownJob(id.to_string())),
        Err(e) => Err(e.into()),
    }
}

pub fn from_record(record: &JobRecord) -> JobInfo {
    JobInfo {
        submission_id: Some(record.submission_id.clone()),
        status: record.status.clone(),
        entrypoint: Some(record.entrypoint.clone()),
        message: record.message.clone(),
        start_time: record.start_time,
        end_time: record.end_time,
        driver_node_id: record.driver_node_id.clone(),
        ..Default::default()
    }
}
