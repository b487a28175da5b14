//! Waiting for Ray: polled in slices under the caller's deadline, the containers looked at
//! in between, so a crash loop or a dead dashboard fails fast, with its log, instead of
//! running out the clock.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::InspectContainerOptions;
use futures_util::future::join_all;

use super::host_engine;
use crate::cluster::Error;
use crate::cluster::docker;
use crate::cluster::hosts::Engine;
use crate::cluster::plan::ClusterPlan;
use crate::cluster::ready::{self, Readiness};
use crate::ray::{RayClient, RayError, RayNode};
use crate::ui::{Reporter, Task};

/// Waits for Ray. Fails fast, with its log, when a container whose node is missing has
/// stopped or restarted since the wait began (a crash loop never becomes ready).
pub(super) async fn wait(
    engines: &[Engine],
    ray: &RayClient,
    plan: &ClusterPlan,
    timeout: Duration,
    reporter: &dyn Reporter,
) -> Result<Vec<RayNode>, Error> {
    let mut watch = Watch::new(engines, plan)?;
    let task = reporter.task("ray");
    let total = plan.containers.len();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut incarnations = watch.count_restarts().await;
    loop {
        // Poll Ray in slices, looking at the containers in between: when each last
        // started (a node older than its container is a previous life's) and whether a
        // missing node's container has died.
        let slice_end = deadline.min(tokio::time::Instant::now() + Duration::from_secs(2));
        let outcome = ready::wait_ready(
            ray,
            &plan.containers,
            &incarnations,
            slice_end,
            |r: &Readiness| {
                task.update(&format!("{}/{total} nodes ready", r.ready.len()));
            },
        )
        .await;
        let (readiness, error) = match outcome {
            Ok(ready) => return Ok(alive_nodes(ready.alive, &*task, total)),
            Err(failed) => failed,
        };
        if error.is_some()
            && let Some(died) = watch.dead_dashboard(&*task).await
        {
            return Err(died);
        }
        if let Some(stopped) = watch.stopped(&readiness, &*task).await {
            return Err(stopped);
        }
        if tokio::time::Instant::now() < deadline {
            incarnations = watch.incarnations().await;
            continue;
        }
        task.fail("not ready");
        return Err(watch.not_ready(&readiness, error, timeout).await);
    }
}

/// Ray's ALIVE nodes once the cluster is ready (as the last look saw them), said on the task.
fn alive_nodes(nodes: Vec<RayNode>, task: &dyn Task, total: usize) -> Vec<RayNode> {
    let gpus: f64 = nodes.iter().map(RayNode::gpus).sum();
    task.done(&format!("{total}/{total} nodes alive, {gpus} GPUs"));
    nodes
}

/// The plan's containers under watch while Ray comes up: each looked at through its own
/// host's engine, with the restarts it had when the wait began.
struct Watch<'a> {
    plan: &'a ClusterPlan,
    docker_of: HashMap<&'a str, &'a Docker>,
    restarts_before: HashMap<String, i64>,
}

impl<'a> Watch<'a> {
    fn new(engines: &'a [Engine], plan: &'a ClusterPlan) -> Result<Self, Error> {
        let mut docker_of: HashMap<&str, &Docker> = HashMap::new();
        for c in &plan.containers {
            docker_of.insert(&c.name, &host_engine(engines, &c.host)?.docker);
        }
        Ok(Self {
            plan,
            docker_of,
            restarts_before: HashMap::new(),
        })
    }

    fn docker(&self, name: &str) -> Option<&'a Docker> {
        self.docker_of.get(name).copied()
    }

    async fn health(&self, name: &str) -> Health {
        container_health(self.docker(name), name).await
    }

    /// Every container's health, looked at all at once.
    async fn healths(&self) -> Vec<(&'a str, Health)> {
        let plan = self.plan;
        join_all(
            plan.containers
                .iter()
                .map(|c| async { (c.name.as_str(), self.health(&c.name).await) }),
        )
        .await
    }

    /// Counts each container's restarts so far; returns when each last started, as
    /// [`Self::incarnations`] does.
    async fn count_restarts(&mut self) -> ready::Incarnations {
        let healths = self.healths().await;
        for (name, health) in &healths {
            self.restarts_before
                .insert(name.to_string(), health.restarts);
        }
        started(healths)
    }

    /// When each container's current process started.
    async fn incarnations(&self) -> ready::Incarnations {
        started(self.healths().await)
    }

    /// The dashboard can die while its container runs on (`ray start --block` does not
    /// exit for it): nothing will answer again, so say so now, with the head's log.
    async fn dead_dashboard(&self, task: &dyn Task) -> Option<Error> {
        let head = self.plan.head()?;
        let docker = self.docker(&head.name)?;
        let logs = docker::exec_output(
            docker,
            &head.name,
            &[
                "tail",
                "-n",
                "30",
                "/tmp/ray/session_latest/logs/dashboard.log",
            ],
        )
        .await?;
        if !(logs.contains("The dashboard on node")
            && logs.contains("failed with the following error"))
        {
            return None;
        }
        task.fail("the dashboard died");
        Some(Error::NodeExited {
            name: format!("{} (its Ray dashboard)", head.name),
            exit_code: -1,
            logs,
        })
    }

    /// A missing node whose container stopped, or restarted since the wait began.
    async fn stopped(&self, readiness: &Readiness, task: &dyn Task) -> Option<Error> {
        for (name, _) in &readiness.missing {
            let Health {
                running,
                restarts,
                exit_code,
                ..
            } = self.health(name).await;
            if !running || restarts > self.restarts_before.get(name).copied().unwrap_or(0) {
                task.fail(&format!("{name} stopped"));
                let logs = tail_logs(self.docker(name), name, 20).await;
                return Some(Error::NodeExited {
                    name: name.clone(),
                    exit_code,
                    logs,
                });
            }
        }
        None
    }

    /// The deadline passed: what is missing, with the last lines of each one's log.
    async fn not_ready(
        &self,
        readiness: &Readiness,
        error: Option<RayError>,
        timeout: Duration,
    ) -> Error {
        let mut detail = String::new();
        for (name, problem) in &readiness.missing {
            let logs = tail_logs(self.docker(name), name, 15).await;
            detail.push_str(&format!(
                "\n  {name}: {problem}\n  last lines of its log:\n{logs}"
            ));
        }
        for name in &readiness.unexpected {
            detail.push_str(&format!("\n  unexpected ALIVE node {name}"));
        }
        if let Some(error) = error {
            detail.push_str(&format!("\n  last error: {error}"));
        }
        Error::NotReady {
            seconds: timeout.as_secs(),
            detail,
        }
    }
}

/// A container's state as readiness needs it.
#[derive(Debug, Clone, Copy, Default)]
struct Health {
    running: bool,
    restarts: i64,
    exit_code: i64,
    /// When its current process started (ms since the epoch, the host's clock).
    started_ms: Option<u64>,
}

/// Docker's `2026-11-23T05:12:34.123456789Z` as ms since the epoch.
fn epoch_ms(rfc3339: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as u64)
}

/// The last lines of a container's log, through its host's engine.
async fn tail_logs(docker: Option<&Docker>, name: &str, lines: usize) -> String {
    match docker {
        Some(docker) => docker::tail_logs(docker, name, lines).await,
        None => "    (its host is not connected)".to_string(),
    }
}

/// When each container last started, of those that did.
fn started(healths: Vec<(&str, Health)>) -> ready::Incarnations {
    healths
        .into_iter()
        .filter_map(|(name, h)| Some((name.to_string(), h.started_ms?)))
        .collect()
}

/// A missing container (or one on a host not connected) is not running.
async fn container_health(docker: Option<&Docker>, name: &str) -> Health {
    let Some(docker) = docker else {
        return Health {
            exit_code: -1,
            ..Health::default()
        };
    };
    match docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
    {
        Ok(info) => {
            let state = info.state.unwrap_or_default();
            Health {
                running: state.running == Some(true) && state.restarting != Some(true),
                restarts: info.restart_count.unwrap_or(0),
                exit_code: state.exit_code.unwrap_or(-1),
                started_ms: state.started_at.as_deref().and_then(epoch_ms),
            }
        }
        Err(_) => Health {
            exit_code: -1,
            ..Health::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockers_start_times_parse_to_the_millisecond() {
        assert_eq!(
            epoch_ms("2026-11-23T05:12:34.123456789Z"),
            Some(1_795_410_754_123)
        );
        assert_eq!(epoch_ms("0001-01-01T00:00:00Z"), None);
    }
}
