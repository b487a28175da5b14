//! A second `argus run` of a run another `argus run` supervises: it does not start a
//! second supervisor (the run lock is held); it follows the first one's state instead
//! (the report's attempts as they come, the current attempt's log) until the run ends,
//! and ends with its outcome. Ctrl-C stops only the following.

use std::path::Path;
use std::time::Duration;

use super::record::RunReport;
use super::resume::{self, RunKey};
use super::{Error, Outcome};
use crate::ray::jobs::JobsApi;
use crate::submit::Target;
use crate::ui::Reporter;

/// How often the report is read.
const POLL: Duration = Duration::from_secs(1);

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

/// Follows the run of `key` under `runs` until its report says it is done.
pub async fn follow(
    target: &Target,
    runs: &Path,
    key: &RunKey,
    follow_log: bool,
    reporter: &dyn Reporter,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, Error> {
    let api = JobsApi { ray: &target.ray };
    let mut said = Said::default();
    let mut tailed: Option<String> = None;
    loop {
        let Some(report) = resume::newest(runs, key) else {
            return Err(Error::SupervisorGone {
                run_id: "(unknown)".into(),
            });
        };
        said.tell(&report, reporter);
        if report.is_done() {
            return Ok(Outcome::Ran(report));
        }
        let current = report.attempts.last().map(|a| a.submission_id.clone());
        let changed = changed(runs, key, &report);
        match current.filter(|id| follow_log && tailed.as_ref() != Some(id)) {
            Some(id) => {
                tailed = Some(id.clone());
                tokio::select! {
                    _ = api.tail(&id, &mut *on_log) => {}
                    _ = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

/// Returns once the run's report differs from `seen` (polled).
async fn changed(runs: &Path, key: &RunKey, seen: &RunReport) {
    let fingerprint = |r: &RunReport| serde_json::to_string(&(&r.stage, &r.attempts)).ok();
    let before = fingerprint(seen);
    loop {
        tokio::time::sleep(POLL).await;
        match resume::newest(runs, key) {
            Some(now) if fingerprint(&now) == before => {}
            _ => return,
        }
    }
}
