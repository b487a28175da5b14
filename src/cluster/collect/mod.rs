//! What a failure bundle takes from a cluster's containers, on every host of a profile:
//! each planned container's state (exit code, OOM-killed, restarts, and its `die` / `oom`
//! events in a time window), its environment as Docker holds it, the tail of its own
//! output, `nvidia-smi` where it has NVIDIA GPUs, and the tails of the Ray log files the
//! caller chooses from its logs directory.
//!
//! Bounded: hosts are dialled at once, every container is worked on at once, and each
//! container's work runs under the caller's deadline (what is not done by then is named
//! as not collected). Files of a running container are read by a fixed script run in it
//! through the exec API, file names and sizes passed as its arguments (never put into a
//! shell string), each as its last bytes, up to the caller's caps; those of a container
//! that is not running (exec needs it running) come from its logs directory copied out as
//! an archive, streamed, only the tails asked for kept.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptions, LogsOptionsBuilder,
};
use futures_util::StreamExt;
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};

use super::Error;
use super::hosts;
use super::plan::{self, GpuAttach, PlanInputs, Role};
use crate::config::LoadedProfile;

mod running;
mod stopped;

/// Where Ray writes its logs in the containers argus starts (Ray's default temp dir).
pub const RAY_LOGS: &str = "/tmp/ray/session_latest/logs";

/// The lines of a container's own output kept (`docker logs --tail`).
const OUTPUT_LINES: &str = "400";

/// A file of a container's logs directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogFile {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch (the container's clock).
    pub mtime: f64,
}

/// A file chosen to be read, and how many of its last bytes to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub name: String,
    pub keep: u64,
}

/// The last bytes of one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tail {
    pub name: String,
    /// The file's whole size.
    pub size: u64,
    /// As JSON (a Slurm node's part): text, a byte that is not UTF-8 replaced (logs are
    /// text, and an array of numbers would be four times the size).
    #[serde(with = "as_text")]
    pub bytes: Vec<u8>,
}

mod as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(String::deserialize(d)?.into_bytes())
    }
}

/// An engine event of a container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// `die` or `oom`.
    pub action: String,
    /// Milliseconds since the epoch (the engine's clock).
    pub time_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// A container's state as Docker reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub status: String,
    pub running: bool,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub restart_count: i64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Memory limit in bytes (0: none).
    pub memory_limit: i64,
    /// Its `die` and `oom` events in the window asked for.
    pub events: Vec<Event>,
}

/// What was gathered from one planned container (and, as JSON, what a Slurm node step
/// sends of its own node's containers).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Container {
    pub host: String,
    pub name: String,
    pub head: bool,
    /// None when the container is not there.
    pub state: Option<State>,
    /// Its environment as Docker holds it (`NAME=value`): the caller redacts it.
    pub env: Vec<String>,
    /// The tail of its own output (stdout and stderr, with Docker's timestamps).
    pub output: Option<String>,
    pub nvidia_smi: Option<String>,
    /// The logs directory as listed.
    pub listing: Vec<LogFile>,
    pub files: Vec<Tail>,
    /// What could not be collected, and why.
    pub missed: Vec<(String, String)>,
}

/// What one collection asks for.
pub struct Request<'a> {
    /// The window of engine events (seconds since the epoch).
    pub since_s: u64,
    pub until_s: u64,
    /// Chooses the files to read from a container's listing (head or not).
    pub choose: &'a (dyn Fn(bool, &[LogFile]) -> Vec<Wanted> + Sync),
    /// For a container that is not running (its logs come as one archive, file after
    /// file): how many of a file's last bytes to keep (0: none), head or not.
    pub pick: &'a (dyn Fn(bool, &LogFile) -> u64 + Sync),
    /// The most kept of one container's logs from an archive.
    pub node_cap: u64,
    /// When the containers' work must be done.
    pub deadline: Instant,
}

/// What one collection found.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Collected {
    pub containers: Vec<Container>,
    pub unreachable: Vec<hosts::Unreachable>,
}

/// Gathers what [`Request`] asks of every planned container of `loaded` on every host.
/// A host that does not answer is named in `unreachable`; nothing here fails the call
/// except a profile whose hosts cannot be resolved.
pub async fn collect(loaded: &LoadedProfile, request: &Request<'_>) -> Result<Collected, Error> {
    collect_on(loaded, None, request).await
}

/// [`collect`] of the containers planned on one host only (`host`'s engine alone is
/// dialled): a Slurm node step's part, its engine being the node's own.
pub async fn collect_host(
    loaded: &LoadedProfile,
    host: &str,
    request: &Request<'_>,
) -> Result<Collected, Error> {
    collect_on(loaded, Some(host), request).await
}

async fn collect_on(
    loaded: &LoadedProfile,
    only: Option<&str>,
    request: &Request<'_>,
) -> Result<Collected, Error> {
    let mut specs = hosts::cluster_hosts(loaded)?;
    specs.retain(|h| only.is_none_or(|only| h.name == only));
    let left = request.deadline.saturating_duration_since(Instant::now());
    let (engines, unreachable) = hosts::connect_all(&specs, left.min(hosts::CONNECT_TIMEOUT)).await;
    let mut planned = plan::plan(loaded, &PlanInputs::default());
    planned
        .containers
        .retain(|c| only.is_none_or(|only| c.host == only));
    let containers = join_all(planned.containers.iter().map(|c| {
        let engine = hosts::engine(&engines, &c.host);
        let nvidia = matches!(c.gpu, GpuAttach::Nvidia { .. });
        async move {
            let mut out = Container {
                host: c.host.clone(),
                name: c.name.clone(),
                head: c.role == Role::Head,
                ..Default::default()
            };
            let Some(engine) = engine else {
                out.missed.push((
                    "everything".into(),
                    "its host's engine did not answer".into(),
                ));
                return out;
            };
            let left = request.deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, gather(&engine.docker, nvidia, request, &mut out))
                .await
                .is_err()
            {
                out.missed.push((
                    "the rest".into(),
                    "the bundle's time limit was reached".into(),
                ));
            }
            out
        }
    }))
    .await;
    Ok(Collected {
        containers,
        unreachable,
    })
}

/// One container's part (`out` filled as it goes, so a deadline keeps what was read).
async fn gather(docker: &Docker, nvidia: bool, request: &Request<'_>, out: &mut Container) {
    let name = out.name.clone();
    let info = match docker
        .inspect_container(&name, None::<InspectContainerOptions>)
        .await
    {
        Ok(info) => info,
        Err(e) if super::docker::is_not_found(&e) => {
            out.missed
                .push(("everything".into(), "the container is not there".into()));
            return;
        }
        Err(e) => {
            out.missed
                .push(("everything".into(), format!("cannot inspect it: {e}")));
            return;
        }
    };
    let id = info.id.clone().unwrap_or_else(|| name.clone());
    let mut state = state_of(&info);
    state.events = events(docker, &id, request.since_s, request.until_s).await;
    out.env = info
        .config
        .as_ref()
        .and_then(|c| c.env.clone())
        .unwrap_or_default();
    out.state = Some(state.clone());
    out.output = Some(own_output(docker, &id).await);
    if !state.running {
        stopped::read_archive(docker, &id, request, out).await;
        return;
    }
    running::read_running(docker, &id, nvidia, request, out).await;
}

/// A file name the logs directory may hold, and nothing else (no `/`, no `..`): what a
/// bundle names its copy after.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

fn last_line(text: &str) -> &str {
    text.trim().lines().last().unwrap_or("no output")
}

/// The state part of an inspect.
fn state_of(info: &ContainerInspectResponse) -> State {
    let s = info.state.clone().unwrap_or_default();
    State {
        status: s.status.map_or_else(|| "unknown".into(), |s| s.to_string()),
        running: s.running.unwrap_or(false),
        exit_code: s.exit_code,
        oom_killed: s.oom_killed.unwrap_or(false),
        restart_count: info.restart_count.unwrap_or(0),
        started_at: s.started_at,
        finished_at: s.finished_at,
        error: s.error.filter(|e| !e.is_empty()),
        memory_limit: info
            .host_config
            .as_ref()
            .and_then(|h| h.memory)
            .unwrap_or(0),
        events: Vec::new(),
    }
}

/// The container's `die` and `oom` events between `since` and `until` (bounded: the
/// engine ends the stream at `until`, and it is read for at most two seconds).
async fn events(docker: &Docker, id: &str, since: u64, until: u64) -> Vec<Event> {
    let filters = HashMap::from([
        ("type", vec!["container".to_string()]),
        ("container", vec![id.to_string()]),
        ("event", vec!["die".to_string(), "oom".to_string()]),
    ]);
    let options = EventsOptionsBuilder::new()
        .since(&since.to_string())
        .until(&until.to_string())
        .filters(&filters)
        .build();
    let mut seen = Vec::new();
    let read = async {
        let mut stream = docker.events(Some(options));
        while let Some(Ok(event)) = stream.next().await {
            let Some(action) = event.action.clone() else {
                continue;
            };
            let time_ms = event
                .time_nano
                .map(|n| n / 1_000_000)
                .or(event.time.map(|s| s * 1000))
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0);
            let exit_code = event
                .actor
                .and_then(|a| a.attributes)
                .and_then(|a| a.get("exitCode").and_then(|c| c.parse::<i64>().ok()));
            seen.push(Event {
                action,
                time_ms,
                exit_code,
            });
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    seen
}

/// The last lines the container printed, with Docker's timestamps.
async fn own_output(docker: &Docker, id: &str) -> String {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .tail(OUTPUT_LINES)
        .build();
    let mut stream = docker.logs(id, Some(options));
    let mut bytes = Vec::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            bytes.extend_from_slice(&chunk.into_bytes());
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&bytes).into_owned()
}
