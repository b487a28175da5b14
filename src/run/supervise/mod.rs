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
//! written before each act: an attempt's end (its cause) is recorded before its job is
//! stopped, the next attempt (and the checkpoint it resumes from) before it is submitted.
//! So an `argus run` stopped anywhere and run again goes on from where it was: an ended
//! attempt whose job was not yet seen stopped is stopped, an attempt recorded but never
//! submitted is submitted, one submitted is attached to. Ctrl-C stops the job and leaves
//! the run resumable.

mod recover;
mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::record::Recorder;
use super::{Ctx, Error, Submitted, now_rfc3339};
use crate::cluster::health::Watcher;
use crate::config::jobspec::{LoadedJobSpec, Restart};
use crate::exit::{Classify, Exit};
use crate::ray::jobs::JobStatus;
use crate::restart::Attempt;
use crate::restart::Steps;
use crate::restart::rule::{Verdict, check_attempts, decided, verdict};
use crate::submit::watch::WaitOptions;
use watch::{End, Watch};

/// Ctrl-C, listened for once for the whole supervision (a second one leaves at once);
/// the listener goes with the last clone.
#[derive(Clone)]
pub struct Interrupt {
    rx: tokio::sync::watch::Receiver<bool>,
    _listener: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Interrupt {
    fn listen() -> Interrupt {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let listener = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            let _ = tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted again: leaving now (the job may still run)");
                std::process::exit(Exit::Stopped as i32);
            }
        });
        Interrupt {
            rx,
            _listener: Arc::new(AbortOnDrop(listener)),
        }
    }

    /// Returns once Ctrl-C was pressed.
    pub async fn wait(mut self) {
        if self.rx.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    fn is_set(&self) -> bool {
        *self.rx.borrow()
    }
}

/// How long the cluster may stay unreachable while an attempt is watched before the
/// supervision gives up (at least this; `host_wait` when longer).
const UNREACHABLE_GRACE: Duration = Duration::from_secs(60);

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
    check_attempts(&rec.report.attempts, job_of.id, policy).map_err(Error::BadReport)?;
    rec.save()?;
    let wait = WaitOptions {
        timeout: None,
        time_limit: job.spec.time_limit.map(|t| t.0),
        follow: true,
    };
    let supervisor = recover::Supervisor {
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
    let mut shown = |text: &str| {
        if ctx.options.follow {
            on_log(text);
        }
    };
    // How the last attempt's end was seen and stopped, for the next one's recovery times.
    let mut seen = recover::Settled::default();
    loop {
        let current = rec.report.attempts.last().cloned().unwrap_or_default();
        rec.report.submission_id = Some(current.submission_id.clone());
        if !current.status.as_ref().is_some_and(JobStatus::is_finished) {
            let (end, log) = if decided(&current) {
                // Its end was recorded, then argus stopped before the job was.
                (End::Decided, String::new())
            } else {
                supervisor.submit_if_needed(rec).await?;
                watch_through_outages(&supervisor, &watch, rec, &mut health, &mut shown).await?
            };
            seen = supervisor.settle(rec, end, &log).await?;
            if seen.interrupted {
                return Err(supervisor.interrupted(rec));
            }
        }
        match verdict(&rec.report.attempts, policy) {
            Verdict::Done => break,
            Verdict::GiveUp(why) => {
                ctx.reporter.note(&why);
                rec.report.gave_up = Some(why);
                break;
            }
            Verdict::Restart => {
                if supervisor.interrupt.is_set() {
                    return Err(supervisor.interrupted(rec));
                }
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

/// Watches the current attempt; the cluster unreachable for a while (a dashboard
/// restarting, a network blip) is waited out and the attempt watched again, up to
/// [`UNREACHABLE_GRACE`] or `host_wait`.
async fn watch_through_outages(
    supervisor: &recover::Supervisor<'_>,
    watch: &Watch<'_>,
    rec: &mut Recorder,
    health: &mut Option<Watcher>,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<(End, String), Error> {
    let id = rec
        .report
        .attempts
        .last()
        .map(|a| a.submission_id.clone())
        .unwrap_or_default();
    let grace = UNREACHABLE_GRACE.max(supervisor.policy.host_wait);
    let mut unreachable_since: Option<Instant> = None;
    // The longest log streamed: a watch attached again streams the log from its start,
    // and one that could not attach streams nothing.
    let mut kept = String::new();
    loop {
        let steps = Steps::new();
        let end = watch.attempt(&id, health, &steps, on_log).await;
        if let Ok(mut s) = steps.lock() {
            note_steps(rec, s.last_step, s.first_step_at);
            let log = s.take_log();
            if log.len() >= kept.len() {
                kept = log;
            }
        }
        let log = std::mem::take(&mut kept);
        match end {
            Err(e) if e.exit() == Exit::Unreachable => {
                kept = log;
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= grace {
                    return Err(e);
                }
                supervisor.ctx.reporter.note(&format!(
                    "cannot follow job {id} ({}): trying again",
                    crate::exit::one_line(&e)
                ));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = supervisor.interrupt.clone().wait() => return Ok((End::Interrupted, kept)),
                }
            }
            other => return other.map(|end| (end, log)),
        }
    }
}

/// Puts what the attempt's log showed on the current attempt, and the downtime before
/// its first step on it when it continued another (kept from the first look: a watch
/// attached again replays the log).
fn note_steps(rec: &mut Recorder, last_step: Option<u64>, first: Option<SystemTime>) {
    let attempts = &mut rec.report.attempts;
    let n = attempts.len();
    let detected = (n >= 2)
        .then(|| attempts[n - 2].detected_at.clone())
        .flatten();
    let current = &mut attempts[n - 1];
    if last_step > current.last_step {
        current.last_step = last_step;
    }
    if let (Some(first), None) = (first, &current.first_step_at) {
        current.first_step_at = Some(humantime::format_rfc3339_millis(first).to_string());
        if let Some(detected) = detected.and_then(|d| humantime::parse_rfc3339(&d).ok()) {
            current.downtime_s = first.duration_since(detected).ok().map(|d| d.as_secs_f64());
        }
    }
}

/// Marks a job as attempt `n` of run `run_id` (its Ray metadata: `job status` says so).
pub(super) fn label(job: &mut LoadedJobSpec, run_id: &str, n: u32) {
    use crate::config::jobspec::ScalarString;
    job.spec
        .metadata
        .insert("argus_run".into(), ScalarString(run_id.to_string()));
    job.spec
        .metadata
        .insert("argus_attempt".into(), ScalarString(n.to_string()));
}
