//! Watching a job to its end: status polling, log following (the websocket tail, or
//! polling `/logs` when the tail cannot be opened), the time limit (argus stops the job
//! and records why), the final record (status + driver.log), and the driver log's last
//! lines of a failed job (where it says why it failed).

use std::time::{Duration, Instant};

use super::{Error, Target};
use crate::http::poll_fallible;
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
        // What the tail delivered, so that following /logs after it goes on from there.
        let mut delivered = 0usize;
        let tail = api.tail(id, |text: &str| {
            delivered += text.len();
            on_log(text)
        });
        let guard = async {
            let mut stopped = None;
            let mut ended_at: Option<Instant> = None;
            let mut infeasible = InfeasibleWatch::default();
            poll_fallible(Duration::from_millis(500), async || {
                let info = api.get(id).await?;
                infeasible.check(&target.ray, &info).await;
                enforce_limit(&api, &info, options.time_limit, &mut stopped).await?;
                if let Some(e) = timed_out(&info.status) {
                    return Err(e);
                }
                match ended_at {
                    // Give the stream a moment to deliver its last lines, then stop waiting.
                    Some(t) if t.elapsed() > Duration::from_secs(5) => {
                        return Ok::<_, Error>(Some(stopped.take()));
                    }
                    None if info.status.is_finished() => ended_at = Some(Instant::now()),
                    _ => {}
                }
                Ok(None)
            })
            .await
        };
        tokio::pin!(guard);
        tokio::select! {
            result = tail => {
                // The tail ends with the job, or early (it could not be opened, its node's
                // agent closed it): /logs, from where the tail stopped, follows the rest
                // (at the job's end: the lines the tail had not delivered yet).
                match result {
                    Err(reason) => tracing::info!("log tail unavailable ({reason}); polling /logs instead"),
                    Ok(()) => tracing::debug!("log tail closed; polling /logs for the rest"),
                }
                stopped_by_argus =
                    poll_logs(&api, id, options, &mut on_log, started, delivered).await?;
            }
            result = &mut guard => stopped_by_argus = result?,
        }
    }
    let mut infeasible = InfeasibleWatch::default();
    info = poll_fallible(Duration::from_millis(500), async || {
        let info = api.get(id).await?;
        infeasible.check(&target.ray, &info).await;
        enforce_limit(&api, &info, options.time_limit, &mut stopped_by_argus).await?;
        if info.status.is_finished() {
            return Ok(Some(info));
        }
        match timed_out(&info.status) {
            Some(e) => Err(e),
            None => Ok(None),
        }
    })
    .await?;
    record_end(target, id, &info, stopped_by_argus).await;
    Ok(info)
}

/// Says once, on stderr, when a running job waits for a placement group the cluster can
/// never give (Ray judges it INFEASIBLE: verl's workers ask for more CPUs, GPUs or custom
/// resources than any node has), instead of leaving the job to wait silently until its
/// time limit. Asks Ray at most every 10 s.
#[derive(Default)]
struct InfeasibleWatch {
    last: Option<Instant>,
    said: bool,
}

impl InfeasibleWatch {
    async fn check(&mut self, ray: &crate::ray::RayClient, info: &JobInfo) {
        if self.said || info.status != JobStatus::Running {
            return;
        }
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        self.last = Some(Instant::now());
        let Some(job_id) = info.job_id.as_deref() else {
            return;
        };
        let Ok(groups) = ray.placement_groups().await else {
            return;
        };
        let pending: Vec<_> = groups
            .iter()
            .filter(|g| g.creator_job_id == job_id && g.state == "PENDING")
            .collect();
        if pending.is_empty() {
            return;
        }
        // A bundle no live node could hold even empty never fits; Ray itself says
        // INFEASIBLE for some of these and NO_RESOURCES for others.
        let nodes = ray.nodes().await.unwrap_or_default();
        let fits_somewhere = |bundle: &std::collections::BTreeMap<String, f64>| {
            nodes.iter().filter(|n| n.alive()).any(|n| {
                bundle
                    .iter()
                    .all(|(k, v)| n.resources_total.get(k).copied().unwrap_or(0.0) >= *v)
            })
        };
        if let Some(pg) = pending.into_iter().find(|g| {
            g.infeasible()
                || (!nodes.is_empty()
                    && g.bundles.iter().any(|b| !fits_somewhere(&b.unit_resources)))
        }) {
            self.said = true;
            let bundles: Vec<String> = pg
                .bundles
                .iter()
                .map(|b| serde_json::to_string(&b.unit_resources).unwrap_or_default())
                .collect();
            tracing::warn!(
                "job {}: its placement group {} asks for more than any node of this cluster has (infeasible: bundles {}); it will wait until it is stopped. Give the nodes what it asks (profile: ray_cpus, gpus, resources; then `argus up`) or ask for less, and `argus job stop {}`",
                info.submission_id.as_deref().unwrap_or(""),
                pg.placement_group_id,
                bundles.join(", "),
                info.submission_id.as_deref().unwrap_or("")
            );
        }
    }
}

/// Fallback for `--follow`: print what `/logs` adds after its first `shown` bytes (what
/// the tail already delivered), once a second, until the job ends.
async fn poll_logs(
    api: &JobsApi<'_>,
    id: &str,
    options: &WaitOptions,
    on_log: &mut (impl FnMut(&str) + Send),
    started: Instant,
    mut shown: usize,
) -> Result<Option<String>, Error> {
    let mut stopped = None;
    poll_fallible(Duration::from_secs(1), async || {
        let info = api.get(id).await?;
        // A log Ray cannot give now (its node gone) does not end the wait.
        let logs = match api.logs(id).await {
            Ok(logs) => logs,
            Err(e) => {
                tracing::debug!("the log of job {id} is not readable now: {e}");
                String::new()
            }
        };
        if logs.len() > shown {
            // A count from the tail can fall inside a character: go on from the next one.
            while !logs.is_char_boundary(shown) {
                shown += 1;
            }
            on_log(&logs[shown..]);
            shown = logs.len();
        }
        if info.status.is_finished() {
            return Ok(Some(stopped.take()));
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
        Ok(None)
    })
    .await
}

/// Writes the final status and driver log into the job's record (if argus has one).
pub async fn record_end(
    target: &Target,
    id: &str,
    info: &JobInfo,
    stopped_by_argus: Option<String>,
) {
    record_end_with(target, id, info, stopped_by_argus, None).await;
}

/// [`record_end`], with the log as it was streamed to argus for when Ray no longer has it
/// (the node its driver ran on is gone).
pub async fn record_end_with(
    target: &Target,
    id: &str,
    info: &JobInfo,
    stopped_by_argus: Option<String>,
    streamed: Option<&str>,
) {
    let Some(records) = target.records() else {
        return;
    };
    let mut record = match records.load(id) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(
                "cannot record the end of job {id}: {}",
                crate::exit::one_line(&e)
            );
            return;
        }
    };
    if stopped_by_argus.is_some() {
        record.stopped_by_argus = stopped_by_argus;
    }
    let api = JobsApi { ray: &target.ray };
    let logs = match api.logs(id).await {
        // A log only grows: Ray's copy shorter than what streamed (its node gone mid-way)
        // is not the whole of it.
        Ok(text) if streamed.is_some_and(|s| s.len() > text.len()) => streamed.map(str::to_string),
        Ok(text) => Some(text),
        Err(e) => {
            tracing::info!(
                "the log of job {id} is not on the cluster ({e}): saving what was streamed"
            );
            streamed.map(str::to_string)
        }
    }
    .map(|text| redacted(info, &text));
    if let Err(e) = records.finish(&mut record, info, logs.as_deref()) {
        tracing::warn!("cannot record the end of job {id}: {e}");
    }
    // The table of its metrics beside the log (jobs/<id>/metrics.csv).
    if let Err(e) = crate::training::save_metrics(&records, id) {
        tracing::warn!("cannot save the metrics of job {id}: {e}");
    }
}

/// A job may print a secret it was given (a token in its env): what argus saves or shows
/// of its log carries none of the values this process knows.
fn redacted(info: &JobInfo, log: &str) -> String {
    let mut secrets = crate::secrets::known();
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
    secrets.redact_str(log).into_owned()
}

/// How many of the driver's last lines a failed job shows.
pub const TAIL_LINES: usize = 10;

/// The last [`TAIL_LINES`] non-empty lines of a driver log, colour codes removed: where a
/// driver that failed says why (`python3: can't open file ...`, a traceback's end), which
/// Ray's own message for the job often does not.
pub fn driver_tail(log: &str) -> Vec<String> {
    let mut lines: Vec<String> = log
        .lines()
        .rev()
        .map(|line| strip_ansi(line.rsplit('\r').next().unwrap_or(line)))
        .filter(|line| !line.trim().is_empty())
        .take(TAIL_LINES)
        .collect();
    lines.reverse();
    lines
}

/// `line` without ANSI escape codes (`ESC [ params letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find(|c: char| c.is_ascii_alphabetic()) {
            Some(end) => rest = &after[end + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim_end().to_string()
}

/// For a FAILED job, the driver log's last lines ([`driver_tail`]): from the cluster, else
/// from the log argus saved under `jobs/<id>/logs/`. None for any other status, or when
/// no log can be read.
pub async fn failure_tail(target: &Target, id: &str, info: &JobInfo) -> Option<Vec<String>> {
    if info.status != JobStatus::Failed {
        return None;
    }
    let api = JobsApi { ray: &target.ray };
    let log = match api.logs(id).await {
        Ok(log) => redacted(info, &log),
        Err(_) => {
            let file = target
                .records()?
                .open_file(id, crate::records::DRIVER_LOG)
                .ok()??;
            crate::training::log_tail(file).ok()?
        }
    };
    Some(driver_tail(&log)).filter(|tail| !tail.is_empty())
}

/// What argus knows of a job: Ray's view when the cluster knows it (recorded when final),
/// else the record under `jobs/<id>/`.
pub async fn status(
    target: &Target,
    id: &str,
) -> Result<(JobInfo, Option<JobRecord>, bool), Error> {
    let records = target.records();
    // A record that cannot be used (cut short, a planted link) is an error that names it:
    // never taken for a missing one (which would blame the cluster, or hide the job).
    let load = || -> Result<Option<JobRecord>, Error> {
        Ok(match &records {
            Some(records) => records.load(id)?,
            None => None,
        })
    };
    let record = load()?;
    let api = JobsApi { ray: &target.ray };
    match api.get(id).await {
        Ok(info) => {
            if info.status.is_finished() && record.as_ref().is_some_and(|r| !r.is_final()) {
                record_end(target, id, &info, None).await;
            }
            let record = load()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_non_empty_lines_without_colour() {
        let log = "line 1\n\n\x1b[36m(TaskRunner pid=7)\x1b[0m hello\n".to_string()
            + &(2..=12).map(|n| format!("line {n}\n")).collect::<String>()
            + "progress 10%\rprogress 100%\n"
            + "python3: can't open file '/w/x.py': [Errno 2] No such file or directory\n\n";
        let tail = driver_tail(&log);
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[TAIL_LINES - 2], "progress 100%");
        assert_eq!(
            tail[TAIL_LINES - 1],
            "python3: can't open file '/w/x.py': [Errno 2] No such file or directory"
        );
        assert_eq!(tail[0], "line 5");
        assert_eq!(driver_tail("\x1b[31mboom\x1b[0m\n"), ["boom"]);
        assert!(driver_tail("\n \n").is_empty());
    }
}
