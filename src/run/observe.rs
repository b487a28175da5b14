//! A second `argus run` of a run another `argus run` supervises: it does not start a
//! second supervisor (the run lock is held); it follows the first one's state instead
//! (the report's attempts as they come, the current attempt's log) until the run ends,
//! and ends with its outcome. Ctrl-C stops only the following.

use std::path::Path;
use std::time::Duration;

use super::record::{RunReport, open_runs};
use super::{Error, Outcome};
use crate::http::{Poll, poll_until};
use crate::ray::jobs::JobsApi;
use crate::submit::Target;
use crate::ui::Reporter;

/// How often the report is read.
const POLL: Duration = Duration::from_secs(1);

/// How often the supervisor's lock is tried (free: the supervisor is gone).
const ALIVE_EVERY: Duration = Duration::from_secs(5);

/// What one look at the run may print: each attempt's start and end, once.
#[derive(Default)]
struct Said {
    started: usize,
    ended: usize,
}

impl Said {
    fn tell(&mut self, report: &RunReport, reporter: &dyn Reporter) {
        for a in report.attempts.iter().skip(self.started) {
            let from = a
                .resumed_from
                .as_ref()
                .map(|r| format!(" from {}", r.path))
                .unwrap_or_default();
            reporter.note(&format!("attempt {}: job {}{from}", a.n, a.submission_id));
            self.started += 1;
        }
        for a in report.attempts.iter().skip(self.ended) {
            let Some(status) = &a.status else { break };
            let by = match (&a.cause, &a.detail) {
                (Some(cause), Some(detail)) => format!(" ({cause}: {detail})"),
                (Some(cause), None) => format!(" ({cause})"),
                (None, Some(detail)) => format!(" ({detail})"),
                _ => String::new(),
            };
            reporter.note(&format!("attempt {} ended {status}{by}", a.n));
            self.ended += 1;
        }
    }
}

/// The run being followed, and how to tell its supervisor still lives.
pub struct Followed<'a> {
    pub runs: &'a Path,
    pub run_id: &'a str,
    /// False once the supervisor's lock could be taken (then released again).
    pub supervised: &'a (dyn Fn() -> bool + Sync),
}

impl Followed<'_> {
    fn report(&self) -> Option<RunReport> {
        let runs = open_runs(self.runs).ok()?;
        RunReport::read_in(&runs, std::ffi::OsStr::new(self.run_id))
    }

    fn gone(&self) -> Error {
        Error::SupervisorGone {
            run_id: self.run_id.to_string(),
        }
    }

    /// Returns once the run's report differs from `seen` (polled), or its supervisor is
    /// gone (false). No deadline: the follower races it against the log it tails and
    /// Ctrl-C.
    async fn changed(&self, seen: &RunReport) -> bool {
        let fingerprint = |r: &RunReport| serde_json::to_string(&(&r.stage, &r.attempts)).ok();
        let before = fingerprint(seen);
        let mut alive_checked = std::time::Instant::now();
        // The report was just read: the first look is one interval on.
        tokio::time::sleep(POLL).await;
        let polled = poll_until(None, POLL, async || {
            match self.report() {
                Some(now) if fingerprint(&now) == before => {}
                _ => return Poll::Ready(true),
            }
            if alive_checked.elapsed() >= ALIVE_EVERY {
                if !(self.supervised)() {
                    return Poll::Ready(false);
                }
                alive_checked = std::time::Instant::now();
            }
            Poll::Pending(())
        })
        .await;
        // Without a deadline a poll only ends when it is ready.
        polled.unwrap_or(true)
    }
}

/// Follows the run until its report says it is done.
pub async fn follow(
    target: &Target,
    run: &Followed<'_>,
    follow_log: bool,
    reporter: &dyn Reporter,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, Error> {
    let api = JobsApi { ray: &target.ray };
    let mut said = Said::default();
    let mut tailed: Option<String> = None;
    loop {
        let Some(report) = run.report() else {
            return Err(run.gone());
        };
        said.tell(&report, reporter);
        if report.is_done() {
            return Ok(Outcome::Ran(report));
        }
        let current = report.attempts.last().map(|a| a.submission_id.clone());
        let changed = run.changed(&report);
        let alive = match current.filter(|id| follow_log && tailed.as_ref() != Some(id)) {
            Some(id) => {
                tailed = Some(id.clone());
                tokio::select! {
                    _ = api.tail(&id, &mut *on_log) => true,
                    alive = changed => alive,
                }
            }
            None => changed.await,
        };
        if !alive {
            // The report may have ended as the supervisor left.
            return match run.report() {
                Some(report) if report.is_done() => Ok(Outcome::Ran(report)),
                _ => Err(run.gone()),
            };
        }
    }
}
