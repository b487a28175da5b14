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
use bollard::container::LogOutput;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptions, LogsOptionsBuilder,
};
use futures_util::StreamExt;
use futures_util::future::join_all;
use serde::Serialize;

use super::Error;
use super::hosts;
use super::plan::{self, GpuAttach, PlanInputs, Role};
use crate::config::LoadedProfile;

/// Where Ray writes its logs in the containers argus starts (Ray's default temp dir).
pub const RAY_LOGS: &str = "/tmp/ray/session_latest/logs";

/// The lines of a container's own output kept (`docker logs --tail`).
const OUTPUT_LINES: &str = "400";

/// The most one exec's output is read (a listing, `nvidia-smi`).
const SMALL_OUTPUT: usize = 1 << 20;

/// Lists the logs directory: a JSON list of [name, size, mtime] of its regular files.
const LIST_PY: &str = r#"
import json, os, stat, sys
d = sys.argv[1]
out = []
for name in sorted(os.listdir(d)):
    try:
        st = os.stat(os.path.join(d, name), follow_symlinks=False)
    except OSError:
        continue
    if stat.S_ISREG(st.st_mode):
        out.append([name, st.st_size, st.st_mtime])
sys.stdout.write(json.dumps(out))
"#;

/// Writes the last `keep` bytes of each named file (argv: dir, then name keep pairs), each
/// after a JSON header line {"name", "size", "kept"} (or {"name", "error"}).
const TAIL_PY: &str = r#"
import json, os, sys
d = sys.argv[1]
args = sys.argv[2:]
out = sys.stdout.buffer
for i in range(0, len(args) - 1, 2):
    name, keep = args[i], int(args[i + 1])
    try:
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - keep)
            os.lseek(fd, start, 0)
            data = b""
            while len(data) < size - start:
                chunk = os.read(fd, size - start - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        out.write(json.dumps({"name": name, "size": size, "kept": len(data)}).encode() + b"\n")
        out.write(data)
    except OSError as e:
        out.write(json.dumps({"name": name, "error": str(e)}).encode() + b"\n")
out.flush()
"#;

/// A file of a container's logs directory.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone)]
pub struct Tail {
    pub name: String,
    /// The file's whole size.
    pub size: u64,
    pub bytes: Vec<u8>,
}

/// An engine event of a container.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// `die` or `oom`.
    pub action: String,
    /// Milliseconds since the epoch (the engine's clock).
    pub time_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// A container's state as Docker reports it.
#[derive(Debug, Clone, Default, Serialize)]
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

/// What was gathered from one planned container.
#[derive(Debug, Clone, Default)]
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
#[derive(Debug, Default)]
pub struct Collected {
    pub containers: Vec<Container>,
    pub unreachable: Vec<hosts::Unreachable>,
}

/// Gathers what [`Request`] asks of every planned container of `loaded` on every host.
/// A host that does not answer is named in `unreachable`; nothing here fails the call
/// except a profile whose hosts cannot be resolved.
pub async fn collect(loaded: &LoadedProfile, request: &Request<'_>) -> Result<Collected, Error> {
    let specs = hosts::cluster_hosts(loaded)?;
    let left = request.deadline.saturating_duration_since(Instant::now());
    let (engines, unreachable) = hosts::connect_all(&specs, left.min(hosts::CONNECT_TIMEOUT)).await;
    let planned = plan::plan(loaded, &PlanInputs::default());
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
        read_archive(docker, &id, request, out).await;
        return;
    }
    if nvidia {
        match exec(docker, &id, &["nvidia-smi"], SMALL_OUTPUT).await {
            Ok((text, _, Some(0))) => out.nvidia_smi = Some(String::from_utf8_lossy(&text).into()),
            Ok((text, err, code)) => out.missed.push((
                "nvidia-smi".into(),
                format!(
                    "exit {}: {}{}",
                    code.map_or("?".into(), |c| c.to_string()),
                    String::from_utf8_lossy(&text).trim(),
                    err.trim()
                ),
            )),
            Err(e) => out.missed.push(("nvidia-smi".into(), e)),
        }
    }
    let listing = match exec(
        docker,
        &id,
        &["python3", "-c", LIST_PY, RAY_LOGS],
        SMALL_OUTPUT,
    )
    .await
    {
        Ok((text, err, Some(0))) => {
            match serde_json::from_slice::<Vec<(String, u64, f64)>>(&text) {
                Ok(files) => files,
                Err(e) => {
                    out.missed.push((
                        RAY_LOGS.into(),
                        format!("cannot read its listing ({e}): {}", err.trim()),
                    ));
                    return;
                }
            }
        }
        Ok((_, err, _)) => {
            out.missed.push((
                RAY_LOGS.into(),
                format!("cannot list it: {}", last_line(&err)),
            ));
            return;
        }
        Err(e) => {
            out.missed.push((RAY_LOGS.into(), e));
            return;
        }
    };
    out.listing = listing
        .into_iter()
        .map(|(name, size, mtime)| LogFile { name, size, mtime })
        .collect();
    let wanted: Vec<Wanted> = (request.choose)(out.head, &out.listing)
        .into_iter()
        .filter(|w| plain_name(&w.name) && w.keep > 0)
        .collect();
    if wanted.is_empty() {
        return;
    }
    let total: u64 = wanted.iter().map(|w| w.keep).sum();
    let mut argv: Vec<String> = vec![
        "python3".into(),
        "-c".into(),
        TAIL_PY.into(),
        RAY_LOGS.into(),
    ];
    for w in &wanted {
        argv.push(w.name.clone());
        argv.push(w.keep.to_string());
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    // Headers on top of the bytes kept.
    let cap = usize::try_from(total)
        .unwrap_or(usize::MAX)
        .saturating_add(wanted.len() * 512);
    match exec(docker, &id, &argv, cap).await {
        Ok((bytes, err, _)) => {
            let (tails, problems) = split_tails(&bytes);
            out.files = tails;
            out.missed.extend(problems);
            if !err.trim().is_empty() && out.files.len() < wanted.len() {
                out.missed
                    .push(("Ray's logs".into(), last_line(&err).to_string()));
            }
        }
        Err(e) => out.missed.push(("Ray's logs".into(), e)),
    }
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

/// The logs of a container that is not running (exec needs it running): the logs
/// directory as one archive, streamed, each file's tail kept as [`Request::pick`] says
/// (in the archive's order, within [`Request::node_cap`]).
async fn read_archive(docker: &Docker, id: &str, request: &Request<'_>, out: &mut Container) {
    use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(RAY_LOGS)
        .build();
    let mut stream = docker.download_from_container(id, Some(options));
    let mut tar = Tails::default();
    let mut left = request.node_cap;
    let head = out.head;
    let mut pick = |file: &LogFile| {
        let keep = (request.pick)(head, file).min(file.size).min(left);
        left -= keep;
        keep
    };
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => tar.feed(&bytes, &mut pick),
            Err(e) => {
                out.missed.push((
                    RAY_LOGS.into(),
                    format!("cannot copy it out of the stopped container: {e}"),
                ));
                break;
            }
        }
        // Kept so far, should the deadline come.
        out.listing.append(&mut tar.listing);
        out.files.append(&mut tar.tails);
    }
}

/// A tar stream read as it comes: the listing of the files directly under its top
/// directory, and the tails asked for (nothing else is kept).
#[derive(Default)]
struct Tails {
    header: Vec<u8>,
    body: Option<Body>,
    long_name: Option<String>,
    listing: Vec<LogFile>,
    tails: Vec<Tail>,
}

struct Body {
    /// The file (None: a long name's data, or an entry skipped).
    file: Option<LogFile>,
    long_name: bool,
    /// Data bytes left, then data and padding left.
    data_left: u64,
    left: u64,
    keep: u64,
    tail: Vec<u8>,
}

impl Tails {
    fn feed(&mut self, mut input: &[u8], pick: &mut dyn FnMut(&LogFile) -> u64) {
        while !input.is_empty() {
            if let Some(body) = &mut self.body {
                let n = input
                    .len()
                    .min(usize::try_from(body.left).unwrap_or(usize::MAX));
                let data = n.min(usize::try_from(body.data_left).unwrap_or(usize::MAX));
                if body.long_name && body.tail.len() < 4096 {
                    body.tail.extend_from_slice(&input[..data]);
                } else if body.keep > 0 {
                    body.tail.extend_from_slice(&input[..data]);
                    let keep = usize::try_from(body.keep).unwrap_or(usize::MAX);
                    if body.tail.len() > 2 * keep + (64 << 10) {
                        body.tail.drain(..body.tail.len() - keep);
                    }
                }
                body.data_left -= data as u64;
                body.left -= n as u64;
                input = &input[n..];
                if body.left == 0 {
                    let mut body = self.body.take().expect("a body");
                    if body.long_name {
                        let end = body
                            .tail
                            .iter()
                            .position(|b| *b == 0)
                            .unwrap_or(body.tail.len());
                        self.long_name = Some(String::from_utf8_lossy(&body.tail[..end]).into());
                    } else if let Some(file) = body.file.take().filter(|_| body.keep > 0) {
                        let keep = usize::try_from(body.keep).unwrap_or(usize::MAX);
                        if body.tail.len() > keep {
                            body.tail.drain(..body.tail.len() - keep);
                        }
                        self.tails.push(Tail {
                            name: file.name,
                            size: file.size,
                            bytes: body.tail,
                        });
                    }
                }
                continue;
            }
            let need = 512 - self.header.len();
            let n = need.min(input.len());
            self.header.extend_from_slice(&input[..n]);
            input = &input[n..];
            if self.header.len() < 512 {
                return;
            }
            let header = std::mem::take(&mut self.header);
            if header.iter().all(|b| *b == 0) {
                continue;
            }
            self.start(&header, pick);
        }
    }

    /// An entry's header: what its body is.
    fn start(&mut self, h: &[u8], pick: &mut dyn FnMut(&LogFile) -> u64) {
        let text = |range: std::ops::Range<usize>| {
            let field = &h[range];
            let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
            String::from_utf8_lossy(&field[..end]).into_owned()
        };
        let octal = |range: std::ops::Range<usize>| {
            u64::from_str_radix(text(range).trim().trim_matches(' '), 8).unwrap_or(0)
        };
        let size = octal(124..136);
        let padded = size.div_ceil(512) * 512;
        let mut body = Body {
            file: None,
            long_name: false,
            data_left: size,
            left: padded,
            keep: 0,
            tail: Vec::new(),
        };
        match h[156] {
            b'L' => body.long_name = true,
            b'0' | 0 => {
                let name = match self.long_name.take() {
                    Some(long) => long,
                    None if &h[257..262] == b"ustar" && h[345] != 0 => {
                        format!("{}/{}", text(345..500), text(0..100))
                    }
                    None => text(0..100),
                };
                // Directly under the archive's top directory (`logs/`).
                let mut parts = name.trim_end_matches('/').splitn(2, '/');
                let (_, rest) = (parts.next(), parts.next());
                if let Some(name) = rest.filter(|n| plain_name(n)) {
                    let file = LogFile {
                        name: name.to_string(),
                        size,
                        mtime: octal(136..148) as f64,
                    };
                    body.keep = pick(&file);
                    self.listing.push(file.clone());
                    body.file = Some(file);
                }
            }
            _ => self.long_name = None,
        }
        if body.left > 0 {
            self.body = Some(body);
        } else if let Some(file) = body.file.filter(|_| body.keep > 0) {
            self.tails.push(Tail {
                name: file.name,
                size: 0,
                bytes: Vec::new(),
            });
        }
    }
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

/// Runs `cmd` in the container: (stdout up to `cap` bytes, stderr up to 64 KiB, the exit
/// code when the engine says). An error when it cannot be run.
async fn exec(
    docker: &Docker,
    id: &str,
    cmd: &[&str],
    cap: usize,
) -> Result<(Vec<u8>, String, Option<i64>), String> {
    use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions {
                cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("cannot run {} in it: {e}", cmd[0]))?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(1 << 20),
    };
    let started = docker
        .start_exec(&exec.id, Some(options))
        .await
        .map_err(|e| format!("cannot run {} in it: {e}", cmd[0]))?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(chunk) = output.next().await {
            match chunk {
                Ok(LogOutput::StdOut { message }) => {
                    let room = cap.saturating_sub(stdout.len());
                    stdout.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(LogOutput::StdErr { message }) => {
                    let room = (64usize << 10).saturating_sub(stderr.len());
                    stderr.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(_) => {}
                Err(e) => return Err(format!("{} stopped answering: {e}", cmd[0])),
            }
        }
    }
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .ok()
        .and_then(|i| i.exit_code);
    Ok((stdout, String::from_utf8_lossy(&stderr).into_owned(), code))
}

/// Splits [`TAIL_PY`]'s output into the tails it holds and the files it could not read.
fn split_tails(mut bytes: &[u8]) -> (Vec<Tail>, Vec<(String, String)>) {
    #[derive(serde::Deserialize)]
    struct Header {
        name: String,
        #[serde(default)]
        size: u64,
        #[serde(default)]
        kept: usize,
        #[serde(default)]
        error: Option<String>,
    }
    let mut tails = Vec::new();
    let mut problems = Vec::new();
    while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
        let Ok(header) = serde_json::from_slice::<Header>(&bytes[..end]) else {
            problems.push(("Ray's logs".into(), "the reader's output was cut".into()));
            break;
        };
        bytes = &bytes[end + 1..];
        if let Some(error) = header.error {
            problems.push((header.name, error));
            continue;
        }
        let kept = header.kept.min(bytes.len());
        tails.push(Tail {
            name: header.name,
            size: header.size,
            bytes: bytes[..kept].to_vec(),
        });
        bytes = &bytes[kept..];
    }
    (tails, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar entry's header (ustar, name in the name field).
    fn header(name: &str, size: usize, kind: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let size = format!("{size:011o}");
        h[124..135].copy_from_slice(size.as_bytes());
        h[136..147].copy_from_slice(b"00000000012");
        h[156] = kind;
        h[257..262].copy_from_slice(b"ustar");
        h
    }

    fn entry(name: &str, data: &[u8]) -> Vec<u8> {
        let mut out = header(name, data.len(), b'0');
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }

    #[test]
    fn an_archive_is_read_as_it_streams_keeping_only_the_tails_asked_for() {
        let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let long = format!("logs/{}", "w".repeat(120));
        let mut tar = header("logs/", 0, b'5');
        tar.extend(entry("logs/raylet.out", &big));
        tar.extend(entry("logs/skip.log", b"not asked"));
        tar.extend(entry("logs/sub/nested.log", b"not directly under"));
        let mut name = long.clone().into_bytes();
        name.push(0);
        let mut l = header("././@LongLink", name.len(), b'L');
        l.extend_from_slice(&name);
        l.resize(1024, 0);
        tar.extend(l);
        tar.extend(entry("logs/wwwwwwww", b"long one"));
        tar.extend(entry("logs/empty.err", b""));
        tar.extend(vec![0u8; 1024]);
        for piece in [1usize, 7, 512, 100_000] {
            let mut t = Tails::default();
            let mut asked = Vec::new();
            let mut pick = |f: &LogFile| {
                asked.push(f.name.clone());
                if f.name == "skip.log" { 0 } else { 1000 }
            };
            for chunk in tar.chunks(piece) {
                t.feed(chunk, &mut pick);
            }
            assert_eq!(
                asked,
                [
                    "raylet.out",
                    "skip.log",
                    "w".repeat(120).as_str(),
                    "empty.err"
                ],
                "{piece}"
            );
            assert_eq!(t.listing[0].mtime, 10.0);
            let tails: Vec<(&str, usize)> = t
                .tails
                .iter()
                .map(|t| (t.name.as_str(), t.bytes.len()))
                .collect();
            assert_eq!(
                tails,
                [
                    ("raylet.out", 1000),
                    ("w".repeat(120).as_str(), 8),
                    ("empty.err", 0)
                ]
            );
            assert_eq!(t.tails[0].bytes, &big[4000..]);
            assert_eq!(t.tails[0].size, 5000);
        }
    }

    #[test]
    fn the_readers_output_is_split_into_its_files() {
        let mut out = b"{\"name\": \"a.out\", \"size\": 10, \"kept\": 3}\nxyz".to_vec();
        out.extend_from_slice(b"{\"name\": \"b.err\", \"error\": \"[Errno 2] gone\"}\n");
        out.extend_from_slice(b"{\"name\": \"c.log\", \"size\": 2, \"kept\": 2}\n\n\n");
        let (tails, problems) = split_tails(&out);
        assert_eq!(tails.len(), 2);
        assert_eq!((tails[0].name.as_str(), tails[0].size), ("a.out", 10));
        assert_eq!(tails[0].bytes, b"xyz");
        assert_eq!(tails[1].bytes, b"\n\n");
        assert_eq!(
            problems,
            [("b.err".to_string(), "[Errno 2] gone".to_string())]
        );
        // Cut short: what is there is kept.
        let (tails, _) = split_tails(b"{\"name\": \"a\", \"size\": 9, \"kept\": 9}\nabc");
        assert_eq!(tails[0].bytes, b"abc");
    }
}
