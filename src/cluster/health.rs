//! Cluster health while a job runs: a watcher the supervisor polls every couple of seconds
//! to notice a lost node fast.
//!
//! [`Watcher::new`] dials every host's engine once and records what the plan expects on
//! each host and, for each planned container it finds, the container's id and the time it
//! started. [`Watcher::check`] then asks every engine at once (each under its own deadline,
//! so a hung or vanished engine costs one bounded wait, never a hang) and reports each
//! planned container that is gone, not running, replaced by another of its name, or was
//! restarted by Docker (its Ray node died with it), and each engine that stopped answering.
//!
//! A check reports every loss since `new()`, not only the new ones: the supervisor makes a
//! new watcher once it has repaired the cluster. The plan, not the labels, says what must
//! be there, so a container that vanished is noticed. A container first seen after `new()`
//! (its host's engine did not answer then, or it was missing) is taken as the baseline.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use bollard::query_parameters::{EventsOptionsBuilder, InspectContainerOptions};
use futures_util::StreamExt;
use futures_util::future::join_all;

use super::Error;
use super::docker::{self, is_not_found};
use super::hosts;
use super::plan::{self, LABEL_CLUSTER, PlanInputs};
use crate::config::LoadedProfile;
use crate::config::profile::ClusterHost;

/// How long one host may take to answer a whole check (list and inspect its containers,
/// or be dialled again): hosts are checked at once, so this bounds a round.
pub const CHECK_TIMEOUT: Duration = Duration::from_millis(2500);

/// How long the engine's event log may take to say how a restarted container exited.
const EVENTS_TIMEOUT: Duration = Duration::from_millis(1000);

/// A node the cluster lost: a planned container, or a whole host's engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub host: String,
    /// The container's name; `None` when the host's engine itself is lost.
    pub container: Option<String>,
    pub why: LostWhy,
    /// The Ray head is lost with it (its container, or its host's engine): the cluster's
    /// Ray state is gone, and with it any way to stop a job through Ray.
    pub head: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostWhy {
    /// Present but not running (or restarted by Docker since `new()`, with the exit that
    /// restarted it); `code` is -1 when the engine no longer says.
    Exited { code: i64, oom_killed: bool },
    /// A planned container is not there.
    Missing,
    /// The container with the planned name is another container than at `new()`.
    Replaced,
    /// The engine's answer errored or did not come in time.
    EngineDown { error: String },
}

impl Lost {
    /// True when the container was killed for running out of memory.
    pub fn is_oom(&self) -> bool {
        matches!(
            self.why,
            LostWhy::Exited {
                oom_killed: true,
                ..
            }
        )
    }
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = &self.host;
        let name = self.container.as_deref().unwrap_or("?");
        match &self.why {
            LostWhy::EngineDown { error } => {
                write!(f, "host {host}'s Docker engine stopped answering: {error}")
            }
            LostWhy::Exited {
                code,
                oom_killed: true,
            } if *code >= 0 => {
                write!(
                    f,
                    "container {name} on host {host} was OOM-killed (exit {code})"
                )
            }
            LostWhy::Exited {
                oom_killed: true, ..
            } => write!(f, "container {name} on host {host} was OOM-killed"),
            LostWhy::Exited { code, .. } if *code >= 0 => {
                write!(f, "container {name} on host {host} exited with code {code}")
            }
            LostWhy::Exited { .. } => write!(
                f,
                "container {name} on host {host} exited (its exit code is unknown)"
            ),
            LostWhy::Missing => write!(f, "container {name} on host {host} is gone"),
            LostWhy::Replaced => write!(
                f,
                "container {name} on host {host} was replaced (another container now has its name)"
            ),
        }
    }
}

/// Watches a running cluster's containers on every host.
pub struct Watcher {
    cluster: String,
    hosts: Vec<Host>,
    expected: Vec<Expected>,
    /// When the watcher was made (unix seconds): a restart's exit is looked up from here.
    since: u64,
}

struct Host {
    spec: ClusterHost,
    /// `None` until the engine answers (it did not at `new()`).
    docker: Option<Docker>,
    /// Why it did not answer at `new()`.
    down: Option<String>,
}

/// A planned container and what it was when first seen.
struct Expected {
    host: String,
    name: String,
    head: bool,
    baseline: Option<Baseline>,
    /// How it exited before Docker restarted it: (its new start time, the cause).
    restart: Option<(Option<String>, LostWhy)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Baseline {
    id: String,
    started_at: Option<String>,
}

/// A container as one inspect shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    id: String,
    running: bool,
    exit_code: i64,
    oom_killed: bool,
    started_at: Option<String>,
}

/// What one look at a planned container means.
#[derive(Debug, PartialEq, Eq)]
enum Judged {
    Healthy,
    /// First seen running: remember it as it is.
    Adopt(Baseline),
    /// Running again with the same id since the baseline: Docker restarted it.
    Restarted,
    Lost(LostWhy),
}

/// What one host's check found for one planned container (by index).
struct Update {
    index: usize,
    adopt: Option<Baseline>,
    restart: Option<(Option<String>, LostWhy)>,
    lost: Option<LostWhy>,
}

struct HostOutcome {
    reconnected: Option<Docker>,
    result: Result<Vec<Update>, String>,
}

impl Watcher {
    /// Dials every host's engine once and records the containers the plan expects and,
    /// for each that exists, its id and start time. An engine that does not answer is no
    /// error here: the first check reports it (and dials it again).
    pub async fn new(loaded: &LoadedProfile) -> Result<Watcher, Error> {
        let specs = hosts::cluster_hosts(loaded)?;
        let (engines, unreachable) = hosts::connect_all(&specs, hosts::CONNECT_TIMEOUT).await;
        let hosts: Vec<Host> = specs
            .into_iter()
            .map(|spec| Host {
                docker: hosts::engine(&engines, &spec.name).map(|e| e.docker.clone()),
                down: unreachable
                    .iter()
                    .find(|u| u.host == spec.name)
                    .map(|u| u.reason.clone()),
                spec,
            })
            .collect();
        // Names and hosts do not depend on the image or the ports: the plan of the profile.
        let plan = plan::plan(loaded, &PlanInputs::default());
        let expected = plan
            .containers
            .iter()
            .map(|c| Expected {
                host: c.host.clone(),
                name: c.name.clone(),
                head: c.role == plan::Role::Head,
                baseline: None,
                restart: None,
            })
            .collect();
        let mut watcher = Watcher {
            cluster: plan.cluster,
            hosts,
            expected,
            since: unix_now().saturating_sub(1),
        };
        let found = join_all(watcher.hosts.iter().map(|h| async {
            match &h.docker {
                Some(docker) => {
                    let names = watcher.names_on(&h.spec.name);
                    tokio::time::timeout(
                        hosts::CONNECT_TIMEOUT,
                        look(docker, &watcher.cluster, &names),
                    )
                    .await
                    .unwrap_or_else(|_| Ok(HashMap::new()))
                    .unwrap_or_default()
                }
                None => HashMap::new(),
            }
        }))
        .await;
        let found: Vec<(String, HashMap<String, Option<Seen>>)> = watcher
            .hosts
            .iter()
            .map(|h| h.spec.name.clone())
            .zip(found)
            .collect();
        for e in &mut watcher.expected {
            let seen = found
                .iter()
                .find(|(host, _)| *host == e.host)
                .and_then(|(_, seen)| seen.get(&e.name))
                .and_then(Option::as_ref);
            e.baseline = seen.map(|s| Baseline {
                id: s.id.clone(),
                started_at: s.started_at.clone(),
            });
        }
        Ok(watcher)
    }

    /// Every loss since `new()`: empty while the cluster is healthy. Hosts are asked at
    /// once, each under [`CHECK_TIMEOUT`], so a round takes at most about that long.
    pub async fn check(&mut self) -> Vec<Lost> {
        let outcomes = join_all(self.hosts.iter().map(|h| self.check_host(h))).await;
        let mut lost = Vec::new();
        for (i, outcome) in outcomes.into_iter().enumerate() {
            if let Some(docker) = outcome.reconnected {
                self.hosts[i].docker = Some(docker);
                self.hosts[i].down = None;
            }
            let updates = match outcome.result {
                Ok(updates) => updates,
                Err(error) => {
                    let host = self.hosts[i].spec.name.clone();
                    let head = self.expected.iter().any(|e| e.head && e.host == host);
                    lost.push(Lost {
                        host,
                        container: None,
                        why: LostWhy::EngineDown { error },
                        head,
                    });
                    continue;
                }
            };
            for u in updates {
                let Some(e) = self.expected.get_mut(u.index) else {
                    continue;
                };
                if let Some(baseline) = u.adopt {
                    e.baseline = Some(baseline);
                }
                if u.restart.is_some() {
                    e.restart = u.restart;
                }
                if let Some(why) = u.lost {
                    lost.push(Lost {
                        host: e.host.clone(),
                        container: Some(e.name.clone()),
                        why,
                        head: e.head,
                    });
                }
            }
        }
        lost
    }

    /// The planned containers of `host`, by name.
    fn names_on(&self, host: &str) -> Vec<String> {
        self.expected
            .iter()
            .filter(|e| e.host == host)
            .map(|e| e.name.clone())
            .collect()
    }

    /// One host's part of a round, bounded by [`CHECK_TIMEOUT`] whatever the engine does.
    async fn check_host(&self, host: &Host) -> HostOutcome {
        let work = async {
            let (docker, reconnected) = match &host.docker {
                Some(docker) => (docker.clone(), None),
                None => match docker::connect_host(&host.spec).await {
                    Ok(docker) => (docker.clone(), Some(docker)),
                    Err(e) => {
                        let error = crate::exit::one_line(&e);
                        return (None, Err(error));
                    }
                },
            };
            let result = self.judge_host(&docker, &host.spec.name).await;
            (reconnected, result)
        };
        match tokio::time::timeout(CHECK_TIMEOUT, work).await {
            Ok((reconnected, result)) => HostOutcome {
                reconnected,
                result,
            },
            Err(_) => HostOutcome {
                reconnected: None,
                result: Err(match &host.down {
                    Some(first) => format!(
                        "no answer within {}ms (and at the start: {first})",
                        CHECK_TIMEOUT.as_millis()
                    ),
                    None => format!("no answer within {}ms", CHECK_TIMEOUT.as_millis()),
                }),
            },
        }
    }

    /// Looks at the planned containers of one host and judges each.
    async fn judge_host(&self, docker: &Docker, host: &str) -> Result<Vec<Update>, String> {
        let names = self.names_on(host);
        let seen = look(docker, &self.cluster, &names)
            .await
            .map_err(|e| crate::exit::one_line(&e))?;
        let mut updates = Vec::new();
        for (index, e) in self.expected.iter().enumerate() {
            if e.host != host {
                continue;
            }
            let now = seen.get(&e.name).and_then(Option::as_ref);
            let mut update = Update {
                index,
                adopt: None,
                restart: None,
                lost: None,
            };
            match judge(e.baseline.as_ref(), now) {
                Judged::Healthy => {}
                Judged::Adopt(baseline) => update.adopt = Some(baseline),
                Judged::Lost(why) => update.lost = Some(why),
                Judged::Restarted => {
                    let Some(now) = now else { continue };
                    let why = match &e.restart {
                        Some((started_at, why)) if *started_at == now.started_at => why.clone(),
                        _ => {
                            let why = restart_cause(docker, now, self.since).await;
                            update.restart = Some((now.started_at.clone(), why.clone()));
                            why
                        }
                    };
                    update.lost = Some(why);
                }
            }
            updates.push(update);
        }
        Ok(updates)
    }
}

/// The cluster's containers on one engine among `names`: each inspected (`None` when it is
/// not there). One list call (its error is the engine's), then the inspects at once.
async fn look(
    docker: &Docker,
    cluster: &str,
    names: &[String],
) -> Result<HashMap<String, Option<Seen>>, Error> {
    let list = docker::containers_labelled(docker, &format!("{LABEL_CLUSTER}={cluster}")).await?;
    let ids: HashMap<String, String> = list
        .into_iter()
        .filter_map(|c| {
            let name = c.names?.first()?.trim_start_matches('/').to_string();
            Some((name, c.id?))
        })
        .collect();
    let ids = &ids;
    let inspected = join_all(names.iter().map(|name| async move {
        let Some(id) = ids.get(name) else {
            return Ok((name.clone(), None));
        };
        match docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(info) => Ok((name.clone(), Some(seen_of(id, &info)))),
            // Removed between the list and the inspect.
            Err(e) if is_not_found(&e) => Ok((name.clone(), None)),
            Err(e) => Err(docker::docker_err(format!("inspect container {name}"))(e)),
        }
    }))
    .await;
    inspected.into_iter().collect()
}

/// A container as its inspect shows it. Paused counts as running (a frozen node is a hang,
/// for the hang detector); restarting does not.
fn seen_of(id: &str, info: &ContainerInspectResponse) -> Seen {
    let state = info.state.clone().unwrap_or_default();
    Seen {
        id: info.id.clone().unwrap_or_else(|| id.to_string()),
        running: matches!(
            state.status,
            Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::PAUSED)
        ),
        exit_code: state.exit_code.unwrap_or(-1),
        oom_killed: state.oom_killed.unwrap_or(false),
        started_at: state.started_at,
    }
}

/// What one look at a planned container means, given what it was first seen as. Pure.
fn judge(baseline: Option<&Baseline>, seen: Option<&Seen>) -> Judged {
    let Some(seen) = seen else {
        return Judged::Lost(LostWhy::Missing);
    };
    if baseline.is_some_and(|b| b.id != seen.id) {
        return Judged::Lost(LostWhy::Replaced);
    }
    if !seen.running {
        return Judged::Lost(LostWhy::Exited {
            code: seen.exit_code,
            oom_killed: seen.oom_killed,
        });
    }
    match baseline {
        None => Judged::Adopt(Baseline {
            id: seen.id.clone(),
            started_at: seen.started_at.clone(),
        }),
        Some(b) if b.started_at != seen.started_at => Judged::Restarted,
        Some(_) => Judged::Healthy,
    }
}

/// How a container Docker restarted exited: its last `die` event since `since` (its exit
/// code), an `oom` event, or its state's OOMKilled (kept across the restart). Bounded.
async fn restart_cause(docker: &Docker, seen: &Seen, since: u64) -> LostWhy {
    let filters = HashMap::from([
        ("type", vec!["container".to_string()]),
        ("container", vec![seen.id.clone()]),
        ("event", vec!["die".to_string(), "oom".to_string()]),
    ]);
    // Up to now (the die event is seconds old when the restart is seen): the engine
    // ends the stream at once instead of waiting for the future.
    let options = EventsOptionsBuilder::new()
        .since(&since.to_string())
        .until(&unix_now().to_string())
        .filters(&filters)
        .build();
    // What was read is kept when the time is up.
    let (mut code, mut oom) = (None, false);
    let events = async {
        let mut stream = docker.events(Some(options));
        while let Some(Ok(event)) = stream.next().await {
            match event.action.as_deref() {
                Some("oom") => oom = true,
                Some("die") => {
                    code = event
                        .actor
                        .and_then(|a| a.attributes)
                        .and_then(|a| a.get("exitCode").and_then(|c| c.parse::<i64>().ok()))
                        .or(code);
                }
                _ => {}
            }
        }
    };
    let _ = tokio::time::timeout(EVENTS_TIMEOUT, events).await;
    LostWhy::Exited {
        code: code.unwrap_or(-1),
        oom_killed: oom || seen.oom_killed,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::ContainerState;

    fn seen(id: &str, running: bool, started_at: &str) -> Seen {
        Seen {
            id: id.into(),
            running,
            exit_code: if running { 0 } else { 137 },
            oom_killed: false,
            started_at: Some(started_at.into()),
        }
    }

    fn baseline(id: &str, started_at: &str) -> Baseline {
        Baseline {
            id: id.into(),
            started_at: Some(started_at.into()),
        }
    }

    #[test]
    fn an_oom_killed_container_is_exited_and_oom() {
        let info = ContainerInspectResponse {
            id: Some("abc".into()),
            state: Some(ContainerState {
                status: Some(ContainerStateStatusEnum::EXITED),
                running: Some(false),
                oom_killed: Some(true),
                exit_code: Some(137),
                started_at: Some("t0".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let now = seen_of("abc", &info);
        let judged = judge(Some(&baseline("abc", "t0")), Some(&now));
        let Judged::Lost(why) = judged else {
            panic!("{judged:?}")
        };
        assert_eq!(
            why,
            LostWhy::Exited {
                code: 137,
                oom_killed: true
            }
        );
        let lost = Lost {
            host: "a".into(),
            container: Some("argus-x-worker-1".into()),
            why,
            head: false,
        };
        assert!(lost.is_oom());
        assert_eq!(
            lost.to_string(),
            "container argus-x-worker-1 on host a was OOM-killed (exit 137)"
        );
    }

    #[test]
    fn restarting_is_not_running_and_paused_is() {
        let state = |status| ContainerInspectResponse {
            state: Some(ContainerState {
                status: Some(status),
                exit_code: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!seen_of("x", &state(ContainerStateStatusEnum::RESTARTING)).running);
        assert!(!seen_of("x", &state(ContainerStateStatusEnum::CREATED)).running);
        assert!(seen_of("x", &state(ContainerStateStatusEnum::PAUSED)).running);
        assert_eq!(seen_of("x", &state(ContainerStateStatusEnum::DEAD)).id, "x");
    }

    #[test]
    fn judging_against_the_baseline() {
        let b = baseline("a", "t0");
        assert_eq!(
            judge(Some(&b), Some(&seen("a", true, "t0"))),
            Judged::Healthy
        );
        assert_eq!(
            judge(Some(&b), None),
            Judged::Lost(LostWhy::Missing),
            "a planned container that vanished"
        );
        assert_eq!(
            judge(Some(&b), Some(&seen("b", true, "t1"))),
            Judged::Lost(LostWhy::Replaced)
        );
        assert_eq!(
            judge(Some(&b), Some(&seen("a", false, "t0"))),
            Judged::Lost(LostWhy::Exited {
                code: 137,
                oom_killed: false
            })
        );
        assert_eq!(
            judge(Some(&b), Some(&seen("a", true, "t1"))),
            Judged::Restarted
        );
        // Not there at new(): exited is reported, running is adopted.
        assert_eq!(
            judge(None, Some(&seen("a", false, "t0"))),
            Judged::Lost(LostWhy::Exited {
                code: 137,
                oom_killed: false
            })
        );
        assert_eq!(judge(None, Some(&seen("a", true, "t0"))), Judged::Adopt(b));
        assert_eq!(judge(None, None), Judged::Lost(LostWhy::Missing));
    }

    #[test]
    fn each_loss_reads_as_one_line() {
        let lost = |container: Option<&str>, why| Lost {
            host: "h".into(),
            container: container.map(str::to_string),
            why,
            head: false,
        };
        let cases = [
            (
                lost(
                    Some("X"),
                    LostWhy::Exited {
                        code: 137,
                        oom_killed: false,
                    },
                ),
                "container X on host h exited with code 137",
            ),
            (
                lost(
                    Some("X"),
                    LostWhy::Exited {
                        code: -1,
                        oom_killed: false,
                    },
                ),
                "container X on host h exited (its exit code is unknown)",
            ),
            (
                lost(Some("X"), LostWhy::Missing),
                "container X on host h is gone",
            ),
            (
                lost(Some("X"), LostWhy::Replaced),
                "container X on host h was replaced (another container now has its name)",
            ),
            (
                lost(
                    None,
                    LostWhy::EngineDown {
                        error: "connection refused".into(),
                    },
                ),
                "host h's Docker engine stopped answering: connection refused",
            ),
        ];
        for (lost, text) in cases {
            assert_eq!(lost.to_string(), text);
            assert!(!lost.is_oom());
        }
    }
}
