//! Watching one attempt of a supervised run until it ends by itself or argus sees it lost:
//! the job's own wait (its log followed, its time limit enforced) raced against a
//! detector that polls the cluster's containers and engines and the job's progress.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::super::{Error, job};
use crate::cluster::health::{Lost, LostWhy, Watcher};
use crate::config::jobspec::{Restart, RestartOn};
use crate::ray::jobs::{JobInfo, JobStatus, JobsApi};
use crate::records::Records;
use crate::restart::Steps;
use crate::submit::Target;
use crate::submit::watch::WaitOptions;

/// How often the detector looks.
pub const POLL: Duration = Duration::from_secs(2);

/// How an attempt ended.
pub enum End {
    /// The job ended by itself (SUCCEEDED, FAILED, STOPPED by someone or its time limit).
    Ended(JobInfo),
    /// argus saw it lost: the job may still run.
    Lost(Loss),
    /// Ctrl-C.
    Interrupted,
    /// Decided before (recorded in the report), not watched again.
    Decided,
}

/// What argus saw.
#[derive(Debug, Clone)]
pub struct Loss {
    pub cause: RestartOn,
    pub detail: String,
    pub detected_at: SystemTime,
    /// From the last sign of life to the detection (an upper bound for a lost node: the
    /// last healthy look; for a hang: since the last step).
    pub detect_s: f64,
    /// The Ray head was lost (or the cluster no longer knows the job): nothing of the job
    /// can be stopped through Ray; what is left of it goes with the cluster.
    pub head: bool,
}

/// What one watch needs.
pub struct Watch<'a> {
    pub target: &'a Target,
    pub records: &'a Records,
    pub policy: &'a Restart,
    pub wait: &'a WaitOptions,
    pub interrupt: super::Interrupt,
}

impl Watch<'_> {
    /// Follows job `id` until it ends or is lost; `on_log` gets its log as it comes.
    pub async fn attempt(
        &self,
        id: &str,
        health: &mut Option<Watcher>,
        steps: &Arc<Mutex<Steps>>,
        on_log: &mut (dyn FnMut(&str) + Send),
    ) -> Result<End, Error> {
        let shared = steps.clone();
        let mut forward = |text: &str| {
            if let Ok(mut s) = shared.lock() {
                s.feed(text);
            }
            on_log(text);
        };
        let waiting = job::wait(self.target, self.records, id, self.wait, &mut forward);
        let detecting = self.detect(id, health, steps);
        let ended = tokio::select! {
            ended = waiting => ended,
            loss = detecting => return Ok(End::Lost(loss)),
            _ = self.interrupt.clone().wait() => return Ok(End::Interrupted),
        };
        // A job that failed because a node died is a lost node, not verl's failure: look
        // once more before saying which. So is a wait that lost the cluster's head.
        let lost = match health {
            Some(w) => self.lost_now(w).await,
            None => Vec::new(),
        };
        match ended {
            // Either cause restarts the run when the policy names it.
            Ok(info)
                if info.status == JobStatus::Failed
                    && !lost.is_empty()
                    && self.policy.restarts_on(RestartOn::NodeLost) =>
            {
                Ok(End::Lost(node_lost(&lost, 0.0)))
            }
            Ok(info) => Ok(End::Ended(info)),
            Err(_) if !lost.is_empty() => Ok(End::Lost(node_lost(&lost, 0.0))),
            // The cluster no longer knows the job (its head was made again).
            Err(Error::JobLost { .. }) => Ok(End::Lost(Loss {
                cause: RestartOn::NodeLost,
                detail: format!("the cluster no longer knows job {id} (its head was made again?)"),
                head: true,
                detected_at: SystemTime::now(),
                detect_s: 0.0,
            })),
            Err(e) => Err(e),
        }
    }

    /// Losses that count: any dead container at once; an engine that does not answer
    /// only when it did not answer the round before either (one slow answer is not a host
    /// gone).
    async fn lost_now(&self, watcher: &mut Watcher) -> Vec<Lost> {
        let first = watcher.check().await;
        if first.is_empty() || first.iter().any(|l| !engine_down(l)) {
            return first;
        }
        tokio::time::sleep(POLL).await;
        watcher.check().await
    }

    /// Polls until the attempt is lost in a way the policy restarts on; never returns
    /// otherwise (the wait ends the race).
    async fn detect(
        &self,
        id: &str,
        health: &mut Option<Watcher>,
        steps: &Arc<Mutex<Steps>>,
    ) -> Loss {
        let api = JobsApi {
            ray: &self.target.ray,
        };
        let mut running_since: Option<Instant> = None;
        let mut healthy_at = Instant::now();
        let mut ticks = tokio::time::interval(POLL);
        loop {
            ticks.tick().await;
            if self.policy.restarts_on(RestartOn::NodeLost)
                && let Some(watcher) = health.as_mut()
            {
                let lost = self.lost_now(watcher).await;
                if !lost.is_empty() {
                    return node_lost(&lost, healthy_at.elapsed().as_secs_f64());
                }
                healthy_at = Instant::now();
            }
            if !self.policy.restarts_on(RestartOn::Hang) {
                continue;
            }
            match api.get(id).await {
                Ok(info) if info.status == JobStatus::Running => {
                    running_since.get_or_insert_with(Instant::now);
                }
                _ => continue,
            }
            let (quiet, last) = match steps.lock() {
                Ok(s) => (s.changed.elapsed(), s.last_step),
                Err(_) => continue,
            };
            let quiet = quiet.min(running_since.map_or(Duration::ZERO, |t| t.elapsed()));
            if quiet >= self.policy.hang_after
                && !self.newer_step_in_log(&api, id, last, steps).await
            {
                let since = match last {
                    Some(step) => format!("step {step}"),
                    None => "the job started running".to_string(),
                };
                return Loss {
                    cause: RestartOn::Hang,
                    detail: format!(
                        "no new training step for {} since {since} while the job said RUNNING",
                        humantime::format_duration(Duration::from_secs(quiet.as_secs()))
                    ),
                    detected_at: SystemTime::now(),
                    detect_s: quiet.as_secs_f64(),
                    head: false,
                };
            }
        }
    }
}

impl Watch<'_> {
    /// Before a hang is called: the whole log as Ray has it, read once, in case the
    /// stream missed steps (a tail that closed early). True when it shows a step newer
    /// than `last` (then noted).
    async fn newer_step_in_log(
        &self,
        api: &JobsApi<'_>,
        id: &str,
        last: Option<u64>,
        steps: &Arc<Mutex<Steps>>,
    ) -> bool {
        let Ok(log) = api.logs(id).await else {
            return false;
        };
        match crate::restart::steps::newest_step(&log) {
            Some(step) if Some(step) > last => {
                if let Ok(mut s) = steps.lock() {
                    s.saw(step);
                }
                true
            }
            _ => false,
        }
    }
}

fn engine_down(lost: &Lost) -> bool {
    matches!(lost.why, LostWhy::EngineDown { .. })
}

fn node_lost(lost: &[Lost], detect_s: f64) -> Loss {
    Loss {
        cause: RestartOn::NodeLost,
        detail: lost
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
        detected_at: SystemTime::now(),
        detect_s,
        head: lost.iter().any(|l| l.head),
    }
}
