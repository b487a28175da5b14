//! Ending an attempt and starting the next: the cause recorded, what is left of the job
//! stopped (and seen stopped), the backoff, the cluster brought back to the profile, and
//! the next attempt's job resuming from the newest complete checkpoint.

use std::time::{Duration, Instant, SystemTime};

use super::super::job::{self, Seen};
use super::super::record::Recorder;
use super::super::{Ctx, Error, Submitted, now_rfc3339, up};
use super::Interrupt;
use super::watch::{End, Loss};
use crate::cluster::health::Watcher;
use crate::config::jobspec::{LoadedJobSpec, Restart, RestartOn};
use crate::exit::{Classify, Exit};
use crate::ray::jobs::{JobInfo, JobStatus, JobsApi};
use crate::restart::{self, Attempt, INTERRUPTED, RecoveryTimes};
use crate::submit::watch as job_watch;

/// How long what is left of a job may take to be seen stopped. Ray answers at once when
/// the job's driver lives; when the node the driver ran on died, Ray says RUNNING until
/// its health checks give the node up (half a minute and more here), and the job's
/// actors on other nodes live until then: the next attempt waits for that, never trains
/// beside them.
const STOP_DEADLINE: Duration = Duration::from_secs(180);

/// How an attempt's end was seen: for the recovery times of the next one.
#[derive(Debug, Default)]
pub struct Settled {
    pub interrupted: bool,
    pub detect_s: f64,
    pub stop_s: f64,
}

pub struct Supervisor<'a> {
    pub ctx: &'a Ctx<'a>,
    pub job_of: &'a Submitted<'a>,
    pub job: &'a LoadedJobSpec,
    pub policy: &'a Restart,
    pub interrupt: Interrupt,
}

impl Supervisor<'_> {
    /// The cluster's health, watched while an attempt runs (none, with a warning, when
    /// its engines cannot be reached now: the job's own end still decides).
    pub async fn watcher(&self) -> Option<Watcher> {
        match Watcher::new(self.ctx.loaded).await {
            Ok(w) => Some(w),
            Err(e) => {
                self.ctx.reporter.note(&format!(
                    "cannot watch the cluster's containers ({}): a lost node is seen only when the job fails",
                    crate::exit::one_line(&e)
                ));
                None
            }
        }
    }

    /// The current attempt's job, submitted unless Ray or argus already has it (an
    /// `argus run` stopped between recording the attempt and submitting it). What it
    /// resumes from is recorded before it is submitted.
    pub async fn submit_if_needed(&self, rec: &mut Recorder) -> Result<(), Error> {
        let started = Instant::now();
        let n = rec.report.attempts.len();
        if n < 2 {
            return Ok(());
        }
        let current = rec.report.attempts[n - 1].clone();
        let id = current.submission_id.as_str();
        let target = self.job_of.target;
        match job::observe(target, self.job_of.records, id).await? {
            Seen::Recorded(_) => return Ok(()),
            Seen::OnlyOnCluster(info) => {
                job::adopt(target, self.job_of.records, &info, id)?;
                return Ok(());
            }
            Seen::Nowhere => {}
        }
        let previous = rec.report.attempts[n - 2].clone();
        let (mut job, resumed_from) =
            restart::next_job(target, &previous.submission_id, self.job, id)?;
        super::label(&mut job, &rec.report.run_id, current.n);
        match &resumed_from {
            Some(from) => {
                for (step, why) in &from.skipped {
                    self.ctx
                        .reporter
                        .note(&format!("global_step_{step} is not used: {why}"));
                }
                self.ctx.reporter.note(&format!(
                    "attempt {}: resuming from {}",
                    current.n, from.path
                ));
            }
            None => self.ctx.reporter.note(&format!(
                "attempt {}: no complete checkpoint yet: starting from the beginning",
                current.n
            )),
        }
        let mut prepared = crate::submit::prepare(target, &job, true)?;
        prepared.resumes = Some(previous.submission_id.clone());
        let attempts = &mut rec.report.attempts;
        attempts[n - 2].note_resumed(resumed_from.as_ref().map(|r| r.step));
        attempts[n - 1].resumed_from = resumed_from;
        rec.save()?;
        job::submit(target, &prepared).await?;
        if let Some(recovery) = rec.report.attempts[n - 1].recovery.as_mut() {
            recovery.resubmit_s += started.elapsed().as_secs_f64();
        }
        rec.save()
    }

    /// Records how the current attempt ended (its cause first, saved), then stops what is
    /// left of its job and records the job's end.
    pub async fn settle(&self, rec: &mut Recorder, end: End, log: &str) -> Result<Settled, Error> {
        let target = self.job_of.target;
        let mut log = log;
        let fuller_log: String;
        let Some(current) = rec.report.attempts.last().cloned() else {
            return Ok(Settled::default());
        };
        let id = current.submission_id.clone();
        let mut settled = Settled::default();
        let ended = match end {
            End::Ended(info) => {
                let failed = (info.status == JobStatus::Failed).then_some(RestartOn::Failed);
                if failed.is_some() {
                    let detail = failure_detail(target, &id, &info).await;
                    self.decide(rec, failed, detail, SystemTime::now()).await?;
                }
                // From the job's end (Ray's clock) to now.
                settled.detect_s = info.end_time.map_or(0.0, |end| {
                    crate::records::now_ms().saturating_sub(end) as f64 / 1000.0
                });
                Some(info)
            }
            End::Lost(Loss {
                cause,
                detail,
                detected_at,
                detect_s,
                head,
            }) => {
                self.ctx
                    .reporter
                    .note(&format!("attempt {}: {cause}: {detail}", current.n));
                self.decide(rec, Some(cause), Some(detail), detected_at)
                    .await?;
                // The bundle just read the dead node's disk: its copy of the driver's log
                // has the end the stream had not delivered yet.
                let disk =
                    crate::diagnose::driver_log::from_bundle(self.job_of.records, &id, current.n);
                if let Some(fuller) =
                    disk.and_then(|d| crate::diagnose::driver_log::extend(log, &d))
                {
                    tracing::info!("job {id}: the end of its log read off the dead node's disk");
                    fuller_log = fuller;
                    log = &fuller_log;
                    // Steps the stream never showed are logged after all.
                    let newest = restart::steps::newest_step(log);
                    if let Some(current) = rec.report.attempts.last_mut() {
                        current.last_step = current.last_step.max(newest);
                    }
                }
                self.keep_log(&id, log);
                settled.detect_s = detect_s;
                if head {
                    let stopping = Instant::now();
                    self.end_with_the_cluster(rec, &id).await?;
                    settled.stop_s = stopping.elapsed().as_secs_f64();
                    return Ok(settled);
                }
                None
            }
            End::Interrupted => {
                self.keep_log(&id, log);
                self.ctx.reporter.note(&format!(
                    "interrupted: stopping job {id} (Ctrl-C again leaves it running)"
                ));
                self.decide(rec, None, Some(INTERRUPTED.to_string()), SystemTime::now())
                    .await?;
                settled.interrupted = true;
                None
            }
            End::Decided => None,
        };
        let info = match ended {
            Some(info) => info,
            None => {
                let stopping = Instant::now();
                let reason = rec
                    .report
                    .attempts
                    .last()
                    .map(|a| match (&a.cause, &a.detail) {
                        (Some(cause), Some(detail)) => format!("argus: {cause}: {detail}"),
                        (_, Some(detail)) => format!("argus: {detail}"),
                        _ => "argus".to_string(),
                    });
                let info = self
                    .stop_rest(&id, reason.as_deref().unwrap_or("argus"), log)
                    .await?;
                settled.stop_s = stopping.elapsed().as_secs_f64();
                info
            }
        };
        if let Some(current) = rec.report.attempts.last_mut() {
            current.ended_at = Some(now_rfc3339());
            current.status = Some(info.status);
        }
        rec.save()?;
        Ok(settled)
    }

    /// The current attempt's end as argus decided it, saved before anything acts on it;
    /// then, for a failure or a lost node, its failure bundle (bounded; one that cannot
    /// be made is a warning, never the run's outcome) and its triage on the attempt.
    async fn decide(
        &self,
        rec: &mut Recorder,
        cause: Option<RestartOn>,
        detail: Option<String>,
        at: SystemTime,
    ) -> Result<(), Error> {
        if let Some(current) = rec.report.attempts.last_mut() {
            current.cause = cause;
            current.detail = detail;
            if cause.is_some() {
                current.detected_at = Some(humantime::format_rfc3339_millis(at).to_string());
            }
        }
        rec.save()?;
        let Some(current) = rec.report.attempts.last().filter(|_| cause.is_some()) else {
            return Ok(());
        };
        let (id, n) = (current.submission_id.clone(), current.n);
        let job = crate::diagnose::Job {
            loaded: self.ctx.loaded,
            target: self.job_of.target,
            id: &id,
            attempt: n,
            nodes: None,
        };
        let line = crate::diagnose::after_failure(&job, &Default::default()).await;
        if let Some(line) = &line {
            self.ctx
                .reporter
                .note(&format!("attempt {n}: diagnosis: {line}"));
        }
        if let Some(current) = rec.report.attempts.last_mut() {
            current.diagnosis = line;
        }
        rec.save()
    }

    /// Stops what is left of job `id` and records its end with `reason` (and the log as
    /// it streamed, when Ray's copy is gone with its node): Ray's last word on it. Only
    /// Ray saying it does not know the job counts as gone; an error is asked again until
    /// the deadline, after which the run stops rather than train twice.
    async fn stop_rest(&self, id: &str, reason: &str, log: &str) -> Result<JobInfo, Error> {
        let target = self.job_of.target;
        let api = JobsApi { ray: &target.ray };
        let waiting = |status: &str| {
            self.ctx.reporter.note(&format!(
                "waiting for job {id} to end (Ray says {status}; when a node it ran on died, Ray ends it only once its health checks give the node up)"
            ))
        };
        let info = restart::stop::stop_and_wait(&api, id, STOP_DEADLINE, waiting)
            .await
            .map_err(|stuck| Error::CannotStop {
                id: id.to_string(),
                status: stuck.status,
                seconds: STOP_DEADLINE.as_secs(),
            })?;
        let ended = info.clone().unwrap_or_else(|| JobInfo {
            submission_id: Some(id.to_string()),
            status: JobStatus::Stopped,
            message: Some(format!("{reason} (the cluster no longer knows the job)")),
            end_time: Some(crate::records::now_ms()),
            ..Default::default()
        });
        let streamed = Some(log).filter(|l| !l.is_empty());
        job_watch::record_end_with(target, id, &ended, Some(reason.to_string()), streamed).await;
        Ok(ended)
    }

    /// The log of job `id` as it streamed, saved as its log at once (Ray's copy may have
    /// died with a node, and argus may be stopped before the job's end is recorded); the
    /// end of the job saves Ray's whole log over it when Ray still has it.
    fn keep_log(&self, id: &str, log: &str) {
        if log.is_empty() {
            return;
        }
        let text = crate::secrets::known().redact_str(log).into_owned();
        if let Err(e) =
            self.job_of
                .records
                .write_file(id, crate::records::DRIVER_LOG, text.as_bytes())
        {
            tracing::warn!("cannot keep the log of job {id}: {e}");
        }
    }

    /// The head is gone, and the cluster's Ray state with it: what is left of job `id`
    /// (its actors on the workers) cannot be stopped through Ray, so it goes with the
    /// cluster's containers (`down`; the repair brings them back). The job's end is
    /// recorded as argus ended it.
    async fn end_with_the_cluster(&self, rec: &mut Recorder, id: &str) -> Result<(), Error> {
        self.ctx.reporter.note(&format!(
            "the Ray head is gone: taking the cluster's containers down so nothing of job {id} keeps running"
        ));
        up::down(self.ctx).await?;
        let reason = "argus: node_lost: the Ray head was lost; the cluster's containers were taken down with what was left of the job";
        let ended = JobInfo {
            submission_id: Some(id.to_string()),
            status: JobStatus::Stopped,
            message: Some(reason.to_string()),
            end_time: Some(crate::records::now_ms()),
            ..Default::default()
        };
        job_watch::record_end_with(self.job_of.target, id, &ended, Some(reason.into()), None).await;
        if let Some(current) = rec.report.attempts.last_mut() {
            current.ended_at = Some(now_rfc3339());
            current.status = Some(JobStatus::Stopped);
        }
        rec.save()
    }

    /// After an attempt ended in a way the policy restarts on: the backoff, the cluster
    /// back to the profile (a host that is gone waited for up to `host_wait`), and the
    /// next attempt, recorded (it is submitted by [`Self::submit_if_needed`]).
    pub async fn recover(&self, rec: &mut Recorder, seen: &Settled) -> Result<Attempt, Error> {
        let previous = rec.report.attempts.last().cloned().unwrap_or_default();
        let repair_started = Instant::now();
        // After a Ctrl-C the user ran it again: no backoff.
        let interrupted = previous.cause.is_none();
        if !self.policy.backoff.is_zero() && !interrupted {
            self.ctx.reporter.note(&format!(
                "restarting in {}",
                humantime::format_duration(self.policy.backoff)
            ));
            tokio::select! {
                _ = tokio::time::sleep(self.policy.backoff) => {}
                _ = self.interrupt.clone().wait() => return Err(self.interrupted(rec)),
            }
        }
        self.repair(rec).await?;
        let n = previous.n + 1;
        let first = rec
            .report
            .attempts
            .first()
            .map(|a| a.submission_id.clone())
            .unwrap_or_default();
        Ok(Attempt {
            n,
            submission_id: restart::submission_id(&first, n),
            started_at: now_rfc3339(),
            recovery: Some(RecoveryTimes {
                detect_s: seen.detect_s,
                stop_s: seen.stop_s,
                repair_s: repair_started.elapsed().as_secs_f64(),
                resubmit_s: 0.0,
            }),
            ..Default::default()
        })
    }

    /// The cluster back to the profile: `argus up`'s reconcile (dead containers made
    /// again, Ray's nodes ready). A host whose engine does not answer is waited for, up to
    /// `host_wait`: the world size is never shrunk.
    async fn repair(&self, rec: &mut Recorder) -> Result<(), Error> {
        let deadline = Instant::now() + self.policy.host_wait;
        let mut said = false;
        loop {
            let result = tokio::select! {
                result = up::up(self.ctx) => result,
                _ = self.interrupt.clone().wait() => return Err(self.interrupted(rec)),
            };
            match result {
                Ok(_) => return Ok(()),
                Err(e) if e.exit() == Exit::Unreachable && Instant::now() < deadline => {
                    if !said {
                        self.ctx.reporter.note(&format!(
                            "the cluster cannot be brought back yet ({}): waiting up to {} for it",
                            crate::exit::one_line(&e),
                            humantime::format_duration(self.policy.host_wait)
                        ));
                        said = true;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                        _ = self.interrupt.clone().wait() => return Err(self.interrupted(rec)),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The error of a run stopped by Ctrl-C (its report saved, resumable).
    pub fn interrupted(&self, rec: &mut Recorder) -> Error {
        if let Err(e) = rec.save() {
            return e;
        }
        let last = rec.report.attempts.last();
        Error::Interrupted {
            run_id: rec.report.run_id.clone(),
            job: last.map(|a| a.submission_id.clone()).unwrap_or_default(),
            jobspec: self.job.source.origin.display().to_string(),
        }
    }
}

/// verl's own words on why a FAILED job failed ([`restart::failure::job_error`] of its
/// log's end), else the tail's last line, else Ray's message.
async fn failure_detail(
    target: &crate::submit::Target,
    id: &str,
    info: &JobInfo,
) -> Option<String> {
    let api = JobsApi { ray: &target.ray };
    let log = match api.logs(id).await {
        Ok(log) => Some(log),
        Err(_) => target
            .records()
            .and_then(|r| r.open_file(id, crate::records::DRIVER_LOG).ok().flatten())
            .and_then(|file| crate::training::log_tail(file).ok()),
    };
    // Its end: where a failure is said (a log's whole length is not read for it).
    let log = log.map(|mut text| {
        let mut cut = text.len().saturating_sub(256 << 10);
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
        text
    });
    let named = log.as_deref().and_then(restart::failure::job_error);
    let tail = || {
        log.as_deref()
            .map(job_watch::driver_tail)
            .and_then(|t| t.last().cloned())
    };
    named
        .or_else(tail)
        .or_else(|| info.message.clone())
        .map(|text| crate::secrets::known().redact_str(&text).into_owned())
}
