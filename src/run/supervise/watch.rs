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
use crate::submit::Target;
use crate::submit::watch::WaitOptions;
use crate::training::progress::Follower;

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
}

/// What the attempt's log showed, shared with the log's reader.
#[derive(Debug)]
pub struct Steps {
    pub last_step: Option<u64>,
    /// When the step last changed (or the watch began; before the first step, when the
    /// log last said anything: verl loading a model or a checkpoint is not a hang).
    pub changed: Instant,
    pub first_step_at: Option<SystemTime>,
    /// The log as it streamed, its last [`LOG_CAP`] bytes: what is saved as the job's
    /// log when Ray's copy is gone with the node its driver ran on.
    log: String,
    /// Bytes dropped from the log's start.
    dropped: usize,
    follower: Follower,
}

/// The most of a streamed log kept in memory (its end: where the error and the last
/// steps are).
pub const LOG_CAP: usize = 32 << 20;

impl Steps {
    pub fn new() -> Arc<Mutex<Steps>> {
        Arc::new(Mutex::new(Steps {
            last_step: None,
            changed: Instant::now(),
            first_step_at: None,
            log: String::new(),
            dropped: 0,
            follower: Follower::new(),
        }))
    }

    /// The log kept, marked where its start was dropped.
    pub fn take_log(&mut self) -> String {
        let log = std::mem::take(&mut self.log);
        match self.dropped {
            0 => log,
            n => format!("[argus: the first {n} bytes of the streamed log were not kept]\n{log}"),
        }
    }

    fn keep(&mut self, text: &str) {
        self.log.push_str(text);
        if self.log.len() > LOG_CAP {
            let mut cut = self.log.len() - LOG_CAP / 2;
            while !self.log.is_char_boundary(cut) {
                cut += 1;
            }
            self.log.drain(..cut);
            self.dropped += cut;
        }
    }

    fn feed(&mut self, text: &str) {
        self.keep(text);
        if self.last_step.is_none() && !text.trim().is_empty() {
            self.changed = Instant::now();
        }
        let Some(update) = self.follower.feed(text) else {
            return;
        };
        self.saw(update.step);
    }

    /// The log showed `step`.
    fn saw(&mut self, step: u64) {
        if self.last_step != Some(step) {
            self.last_step = Some(step);
            self.changed = Instant::now();
            if step >= 1 && self.first_step_at.is_none() {
                self.first_step_at = Some(SystemTime::now());
            }
        }
    }
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
        let mut follower = Follower::new();
        let newest = follower.feed(&format!("{log}\n")).map(|u| u.step);
        match newest {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_before_the_first_step_is_a_sign_of_life_and_after_it_only_steps_are() {
        let steps = Steps::new();
        let mut s = steps.lock().unwrap();
        let start = s.changed;
        std::thread::sleep(Duration::from_millis(5));
        s.feed("Loading checkpoint shards: 50%\n");
        assert!(s.changed > start, "loading is not a hang");
        s.feed("(TaskRunner pid=1) step:3 - actor/pg_loss:0.1\n");
        assert_eq!(s.last_step, Some(3));
        assert!(s.first_step_at.is_some());
        let at = s.changed;
        std::thread::sleep(Duration::from_millis(5));
        s.feed("a warning that is not a step\n");
        assert_eq!(s.changed, at, "after the first step only a new step counts");
    }

    #[test]
    fn the_kept_log_is_its_end_and_says_what_was_dropped() {
        let steps = Steps::new();
        let mut s = steps.lock().unwrap();
        let line = format!("{}\n", "é".repeat(1000));
        for _ in 0..(LOG_CAP / line.len() + 10) {
            s.feed(&line);
        }
        let log = s.take_log();
        assert!(log.len() <= LOG_CAP + 200);
        assert!(log.starts_with("[argus: the first "));
        assert!(log.ends_with(&line));
    }
}
