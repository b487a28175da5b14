//! Supervised runs (`restart:` in the JobSpec, `argus run --restart N`): argus stays
//! attached to the run's job and, when it fails, a node of the cluster is lost or it
//! hangs, stops what is left of it, brings the cluster back to the profile, and submits
//! the next attempt from the newest COMPLETE checkpoint (every rank's shard there, the
//! same world size), up to `max` restarts. Each attempt is its own Ray job
//! (`<first id>-attempt-<n>`), continuing the one before as `submit --resume` does
//! (its record names it: `job metrics` and `job plot` read the attempts as one run, each
//! step once).
//!
//! The report (`runs/<run_id>/report.json`) holds every attempt ([`Attempt`]) and is
//! written before each act: an attempt is recorded before it is submitted, so an
//! `argus run` stopped anywhere and run again goes on from where it was (an attempt
//! recorded but never submitted is submitted then; one submitted is attached to).
//! Ctrl-C stops the job and leaves the run resumable.

mod watch;

use std::time::{Duration, Instant, SystemTime};

use super::attempt::{self, Attempt, RecoveryTimes, ResumedFrom};
use super::job::{self, Seen};
use super::record::Recorder;
use super::{Ctx, Error, Submitted, now_rfc3339, up};
use crate::cluster::health::Watcher;
use crate::config::jobspec::{LoadedJobSpec, Restart, RestartOn};
use crate::exit::{Classify, Exit};
use crate::ray::jobs::{JobInfo, JobStatus, JobsApi};
use crate::submit::watch::{self as job_watch, WaitOptions};
use watch::{End, Loss, Steps, Watch};

/// How long stopping what is left of a job may take before argus goes on without it. Ray
/// answers at once when the job's driver lives; when the node the driver ran on died,
/// Ray says RUNNING until its health checks give the node up (half a minute and more),
/// and there is nothing left to stop.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Ctrl-C, listened for once for the whole supervision (a second one leaves at once).
#[derive(Clone)]
pub struct Interrupt(tokio::sync::watch::Receiver<bool>);

impl Interrupt {
    fn listen() -> Interrupt {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            let _ = tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted again: leaving now (the job may still run)");
                std::process::exit(Exit::Stopped as i32);
            }
        });
        Interrupt(rx)
    }

    /// Returns once Ctrl-C was pressed.
    pub async fn wait(mut self) {
        if self.0.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The wait stage of a supervised run: every attempt to the last.
pub(super) async fn stage(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    job_of: &Submitted<'_>,
    job: &LoadedJobSpec,
    policy: &Restart,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), Error> {
    rec.begin("wait")?;
    rec.report.restart = Some(policy.clone());
    if rec.report.attempts.is_empty() {
        rec.report.attempts.push(Attempt {
            n: 1,
            submission_id: job_of.id.to_string(),
            started_at: now_rfc3339(),
            ..Default::default()
        });
    }
    rec.save()?;
    let wait = WaitOptions {
        timeout: None,
        time_limit: job.spec.time_limit.map(|t| t.0),
        follow: true,
    };
    let supervisor = Supervisor {
        ctx,
        job_of,
        job,
        policy,
        interrupt: Interrupt::listen(),
    };
    let watch = Watch {
        target: job_of.target,
        records: job_of.records,
        policy,
        wait: &wait,
        interrupt: supervisor.interrupt.clone(),
    };
    let mut health = supervisor.watcher().await;
    let mut quiet = |text: &str| {
        if ctx.options.follow {
            on_log(text);
        }
    };
    // How the last attempt's end was seen and stopped, for the next one's recovery times.
    let mut seen = Settled::default();
    loop {
        let current = rec.report.attempts.last().cloned().unwrap_or_default();
        rec.report.submission_id = Some(current.submission_id.clone());
        if !current.status.as_ref().is_some_and(JobStatus::is_finished) {
            supervisor.submit_if_needed(rec).await?;
            let steps = Steps::new();
            let end = watch
                .attempt(&current.submission_id, &mut health, &steps, &mut quiet)
                .await?;
            let log = match steps.lock() {
                Ok(mut s) => {
                    note_steps(rec, s.last_step, s.first_step_at);
                    std::mem::take(&mut s.log)
                }
                Err(_) => String::new(),
            };
            seen = supervisor.settle(rec, end, &log).await?;
            rec.save()?;
            if seen.interrupted {
                return Err(supervisor.interrupted(rec));
            }
        }
        match verdict(&rec.report.attempts, policy) {
            Verdict::Done => break,
            Verdict::GiveUp(why) => {
                ctx.reporter.note(&why);
                break;
            }
            Verdict::Restart => {
                let next = supervisor.recover(rec, &std::mem::take(&mut seen)).await?;
                rec.report.attempts.push(next);
                rec.save()?;
                health = supervisor.watcher().await;
            }
        }
    }
    let last = rec.report.attempts.last().cloned().unwrap_or_default();
    let status = last.status.clone().unwrap_or(JobStatus::Failed);
    let attempts = rec.report.attempts.len();
    rec.end(format!(
        "{status} after {attempts} attempt{}",
        if attempts == 1 { "" } else { "s" }
    ))?;
    let message = job_of
        .records
        .read(&last.submission_id)
        .and_then(|r| r.message);
    super::collect(ctx, rec, &last.submission_id, status, message)
}

/// How an attempt's end was seen: for the recovery times of the next one.
#[derive(Debug, Default)]
struct Settled {
    interrupted: bool,
    detect_s: f64,
    stop_s: f64,
}

/// What the attempts so far call for.
#[derive(Debug, PartialEq)]
enum Verdict {
    Done,
    Restart,
    GiveUp(String),
}

/// The rule, on the recorded attempts (the last one has ended). Pure.
fn verdict(attempts: &[Attempt], policy: &Restart) -> Verdict {
    let Some(last) = attempts.last() else {
        return Verdict::Done;
    };
    if last.status == Some(JobStatus::Succeeded) {
        return Verdict::Done;
    }
    let Some(cause) = last.cause else {
        // Interrupted (Ctrl-C): the run goes on when it is run again, uncounted.
        return match last.detail.as_deref() {
            Some(d) if d.starts_with(INTERRUPTED) => Verdict::Restart,
            _ => Verdict::Done,
        };
    };
    if !policy.restarts_on(cause) {
        return Verdict::Done;
    }
    let counted = attempts.iter().filter(|a| a.cause.is_some()).count();
    if counted > policy.max as usize {
        return Verdict::GiveUp(format!(
            "giving up: attempt {} ended by {cause} and the policy allows {} restart{}",
            last.n,
            policy.max,
            if policy.max == 1 { "" } else { "s" }
        ));
    }
    Verdict::Restart
}

/// The detail of an attempt stopped by Ctrl-C.
const INTERRUPTED: &str = "interrupted (Ctrl-C)";

/// Puts what the attempt's log showed on the current attempt, and the downtime before
/// its first step on it when it continued another.
fn note_steps(rec: &mut Recorder, last_step: Option<u64>, first: Option<SystemTime>) {
    let attempts = &mut rec.report.attempts;
    let n = attempts.len();
    let detected = (n >= 2)
        .then(|| attempts[n - 2].detected_at.clone())
        .flatten();
    let current = &mut attempts[n - 1];
    if last_step.is_some() {
        current.last_step = last_step;
    }
    if let Some(first) = first {
        current.first_step_at = Some(humantime::format_rfc3339_millis(first).to_string());
        if let Some(detected) = detected.and_then(|d| humantime::parse_rfc3339(&d).ok()) {
            current.downtime_s = first.duration_since(detected).ok().map(|d| d.as_secs_f64());
        }
    }
}

struct Supervisor<'a> {
    ctx: &'a Ctx<'a>,
    job_of: &'a Submitted<'a>,
    job: &'a LoadedJobSpec,
    policy: &'a Restart,
    interrupt: Interrupt,
}

impl Supervisor<'_> {
    /// The cluster's health, watched while an attempt runs (none, with a warning, when
    /// its engines cannot be reached now: the job's own end still decides).
    async fn watcher(&self) -> Option<Watcher> {
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
    /// `argus run` stopped between recording the attempt and submitting it). Returns
    /// nothing of note but the seconds this took, for the attempt's recovery times.
    async fn submit_if_needed(&self, rec: &mut Recorder) -> Result<(), Error> {
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
        let (job, resumed_from) = self.next_jobspec(&previous, id).await?;
        let resumed_step = resumed_from.as_ref().map(|r| r.step);
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
        job::submit(target, &prepared).await?;
        let attempts = &mut rec.report.attempts;
        attempts[n - 2].steps_lost = attempts[n - 2]
            .last_step
            .map(|last| last.saturating_sub(resumed_step.unwrap_or(0)));
        let current = &mut attempts[n - 1];
        current.resumed_from = resumed_from;
        if let Some(recovery) = current.recovery.as_mut() {
            recovery.resubmit_s += started.elapsed().as_secs_f64();
        }
        rec.save()
    }

    /// The JobSpec of the attempt after `previous`: the previous job's own, resuming from
    /// its newest complete checkpoint; the run's JobSpec when there is none yet.
    async fn next_jobspec(
        &self,
        previous: &Attempt,
        id: &str,
    ) -> Result<(LoadedJobSpec, Option<ResumedFrom>), Error> {
        use crate::submit::live::{Error as LiveError, checkpoint_point};
        use crate::training::Error as TrainingError;
        // The previous job was stopped (or its driver died with its node): not asked again.
        let (mut job, from) = match checkpoint_point(self.job_of.target, &previous.submission_id) {
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
            Err(LiveError::Training(TrainingError::NoCheckpoint { .. })) => {
                (self.job.clone(), None)
            }
            Err(e) => return Err(e.into()),
        };
        job.spec.submission_id = Some(id.parse()?);
        Ok((job, from))
    }

    /// Records how the current attempt ended; stops what is left of a job argus saw lost
    /// or the user interrupted.
    async fn settle(&self, rec: &mut Recorder, end: End, log: &str) -> Result<Settled, Error> {
        let stopping = Instant::now();
        let target = self.job_of.target;
        let id = rec
            .report
            .attempts
            .last()
            .map(|a| a.submission_id.clone())
            .unwrap_or_default();
        let mut settled = Settled::default();
        let (info, cause, detail, detected_at) = match end {
            End::Ended(info) => {
                let failed = (info.status == JobStatus::Failed).then_some(RestartOn::Failed);
                let detail = match failed {
                    Some(_) => failure_detail(target, &id, &info).await,
                    None => None,
                };
                // From the job's end (Ray's clock) to now.
                settled.detect_s = info.end_time.map_or(0.0, |end| {
                    crate::records::now_ms().saturating_sub(end) as f64 / 1000.0
                });
                (Some(info), failed, detail, SystemTime::now())
            }
            End::Lost(Loss {
                cause,
                detail,
                detected_at,
                detect_s,
            }) => {
                settled.detect_s = detect_s;
                self.ctx.reporter.note(&format!(
                    "attempt {}: {cause}: {detail}",
                    rec.report.attempts.len()
                ));
                let reason = format!("argus: {cause}: {detail}");
                let info = self.stop_rest(&id, &reason, log).await;
                (info, Some(cause), Some(detail), detected_at)
            }
            End::Interrupted => {
                self.ctx.reporter.note(&format!(
                    "interrupted: stopping job {id} (Ctrl-C again leaves it running)"
                ));
                let info = self.stop_rest(&id, INTERRUPTED, log).await;
                settled.interrupted = true;
                (info, None, Some(INTERRUPTED.to_string()), SystemTime::now())
            }
        };
        settled.stop_s = stopping.elapsed().as_secs_f64();
        let current = rec
            .report
            .attempts
            .last_mut()
            .ok_or(Error::JobLost { id: id.to_string() })?;
        current.ended_at = Some(now_rfc3339());
        current.status = Some(
            info.as_ref()
                .map(|i| i.status.clone())
                .unwrap_or(JobStatus::Stopped),
        );
        current.cause = cause;
        current.detail = detail;
        if cause.is_some() {
            current.detected_at = Some(humantime::format_rfc3339_millis(detected_at).to_string());
        }
        Ok(settled)
    }

    /// Stops what is left of job `id` and records its end with `reason`; Ray's last word
    /// on it, or none when the cluster no longer knows it.
    async fn stop_rest(&self, id: &str, reason: &str, log: &str) -> Option<JobInfo> {
        let target = self.job_of.target;
        let api = JobsApi { ray: &target.ray };
        let deadline = Instant::now() + STOP_DEADLINE;
        let mut asked = false;
        let info = loop {
            let info = match api.get(id).await {
                Ok(info) => info,
                Err(e) => {
                    tracing::info!("job {id} cannot be asked about ({e}): taken as gone");
                    break None;
                }
            };
            if info.status.is_finished() {
                break Some(info);
            }
            if !asked {
                let sent = api.stop(id).await;
                tracing::info!("job {id} ({}): stop asked: {sent:?}", info.status);
                asked = sent.is_ok();
            }
            if Instant::now() >= deadline {
                self.ctx.reporter.note(&format!(
                    "job {id} still says {} {}s after it was told to stop (the node its driver ran on is gone?): going on without it",
                    info.status,
                    STOP_DEADLINE.as_secs()
                ));
                break None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let ended = info.clone().unwrap_or_else(|| JobInfo {
            submission_id: Some(id.to_string()),
            status: JobStatus::Stopped,
            message: Some(format!(
                "{reason} (the job could not be stopped: its driver is gone with its node, or the cluster no longer knows it)"
            )),
            end_time: Some(crate::records::now_ms()),
            ..Default::default()
        });
        job_watch::record_end_with(target, id, &ended, Some(reason.to_string()), Some(log)).await;
        info.or(Some(ended))
    }

    /// After an attempt ended in a way the policy restarts on: the backoff, the cluster
    /// back to the profile (a host that is gone waited for up to `host_wait`), and the
    /// next attempt, recorded (it is submitted by [`Self::submit_if_needed`]).
    async fn recover(&self, rec: &mut Recorder, seen: &Settled) -> Result<Attempt, Error> {
        let previous = rec.report.attempts.last().cloned().unwrap_or_default();
        let repair_started = Instant::now();
        if !self.policy.backoff.is_zero() {
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
            submission_id: attempt::submission_id(&first, n),
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
            match up::up(self.ctx).await {
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
    fn interrupted(&self, rec: &mut Recorder) -> Error {
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

/// verl's own words on why a FAILED job failed: the last line of its log's tail that
/// names an error, else the tail's last line, else Ray's message.
async fn failure_detail(
    target: &crate::submit::Target,
    id: &str,
    info: &JobInfo,
) -> Option<String> {
    let tail = job_watch::failure_tail(target, id, info)
        .await
        .unwrap_or_default();
    let named = tail
        .iter()
        .rev()
        .find(|l| l.contains("Error") || l.contains("Exception"))
        .or(tail.last())
        .cloned();
    named.or_else(|| info.message.clone())
}

#[cfg(test)]
mod tests;
