//! One failure bundle: gathered (the job's record and driver log, the cluster's containers
//! through [`crate::cluster::collect`]), redacted, triaged, and written into the job's
//! directory under a temporary name, then renamed to `diagnostics/<attempt>`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::triage::{self, ContainerEnd, EndKind, Log, Triage, Window};
use super::{DIR, Error, TRIAGE};
use crate::cluster::collect as gather;
use crate::config::LoadedProfile;
use crate::ray::jobs::{JobInfo, JobsApi};
use crate::records::{JobRecord, Records};
use crate::secrets::Secrets;
use crate::submit::Target;

mod nodes;
mod pick;
mod redact;
mod write;

pub use nodes::{NodeParams, Nodes, gather_on};

pub use pick::{choose, pick_one};
use redact::{env_text, recorded_env, redactor};

/// The job a bundle is made for.
pub struct Job<'a> {
    pub loaded: &'a LoadedProfile,
    pub target: &'a Target,
    pub id: &'a str,
    /// 1 for a plain job; the supervisor's attempt number otherwise.
    pub attempt: u32,
    /// How the nodes' part is gathered when the profile's engines cannot be dialled from
    /// here (a Slurm run's: each node through its own step); None: dialled from here.
    pub nodes: Option<&'a dyn Nodes>,
}

/// How much a bundle may hold and take.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// The tail kept of each of Ray's log files.
    pub file_bytes: u64,
    /// All of one node's Ray logs.
    pub node_bytes: u64,
    /// The whole bundle.
    pub total_bytes: u64,
    /// The tail of the driver's log.
    pub driver_bytes: u64,
    /// For the containers' part (the rest is local and quick).
    #[serde(with = "secs")]
    pub time: Duration,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file_bytes: 1 << 20,
            node_bytes: 14 << 20,
            total_bytes: 48 << 20,
            driver_bytes: 4 << 20,
            time: Duration::from_secs(25),
        }
    }
}

/// One file of the bundle, as the manifest lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub bytes: u64,
    /// Where it came from.
    pub source: String,
    /// The size of what it is the tail of, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_bytes: Option<u64>,
    #[serde(default)]
    pub truncated: bool,
}

/// Something that could not be collected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Missed {
    pub what: String,
    pub why: String,
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub job: String,
    pub attempt: u32,
    pub collected_at: String,
    /// How long the collection took.
    pub seconds: f64,
    /// The bundle's size (every file but this manifest).
    pub bytes: u64,
    pub limits: serde_json::Value,
    #[serde(default)]
    pub ray_job_id: Option<String>,
    /// The job's window the triage and the events were read in (RFC 3339).
    #[serde(default)]
    pub window: (Option<String>, Option<String>),
    pub files: Vec<Entry>,
    pub not_collected: Vec<Missed>,
}

/// A bundle as written.
#[derive(Debug)]
pub struct Bundle {
    /// `jobs/<id>/diagnostics/<attempt>`, for messages.
    pub path: PathBuf,
    pub manifest: Manifest,
    pub triage: Option<Triage>,
}

/// The files of a bundle being made, in the triage's file order.
#[derive(Default)]
struct Files {
    files: Vec<(String, Vec<u8>, Entry)>,
    missed: Vec<Missed>,
    /// Log files the triage reads (indices into `files`).
    logs: Vec<usize>,
}

impl Files {
    fn add(&mut self, path: String, bytes: Vec<u8>, source: String, of: Option<u64>, log: bool) {
        // A tail starts inside a line: that piece goes (a secret cut there would no longer
        // match its value when the file is redacted).
        let bytes = match of.filter(|&size| size > bytes.len() as u64) {
            Some(_) => match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => bytes[end + 1..].to_vec(),
                None => Vec::new(),
            },
            None => bytes,
        };
        let entry = Entry {
            path: path.clone(),
            bytes: bytes.len() as u64,
            source,
            source_bytes: of,
            truncated: of.is_some_and(|size| size > bytes.len() as u64),
        };
        if log {
            self.logs.push(self.files.len());
        }
        self.files.push((path, bytes, entry));
    }

    fn miss(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.missed.push(Missed {
            what: what.into(),
            why: why.into(),
        });
    }
}

/// Collects, triages and writes the bundle of `job` (see the module's doc). Errors only
/// when the job is unknown or the bundle cannot be written; what cannot be collected is
/// named in the manifest.
pub async fn collect(job: &Job<'_>, limits: &Limits) -> Result<Bundle, Error> {
    let started = Instant::now();
    let id = job.id;
    let records = job
        .target
        .records()
        .ok_or_else(|| Error::NoRecords(id.to_string()))?;
    let record = records
        .load(id)?
        .ok_or_else(|| Error::UnknownJob(id.to_string()))?;
    let api = JobsApi {
        ray: &job.target.ray,
    };
    let info = tokio::time::timeout(Duration::from_secs(5), api.get(id))
        .await
        .ok()
        .and_then(Result::ok);
    let jobspec = records.read_file(id, JOBSPEC, 4 << 20);
    let recorded = jobspec
        .as_ref()
        .ok()
        .and_then(Option::as_deref)
        .and_then(recorded_env);
    let mut files = Files::default();
    let (mut redact, by_name) = redactor(info.as_ref(), recorded.as_deref(), &job.loaded.profile);
    files.missed.extend(by_name);
    let window = window_of(info.as_ref(), &record);

    // The driver's log: the one argus saved, else Ray's, else the head's file (below).
    let driver = driver_log(&records, &api, id, limits.driver_bytes, &mut files).await;
    let want_driver_file = driver.is_none();

    let job_hex = info.as_ref().and_then(|i| i.job_id.clone());
    let collected = gather_nodes(
        job,
        limits,
        started + limits.time,
        job_hex.as_deref(),
        window,
        want_driver_file,
    )
    .await?;
    let ends = add_nodes(&mut files, &mut redact, &collected, window);
    add_driver(&mut files, driver, id);
    add_config(&mut files, &records, job.loaded, id, jobspec);
    let found = triage_of(&files, &ends, window, &redact);

    let mut manifest = Manifest {
        job: id.to_string(),
        attempt: job.attempt,
        collected_at: crate::records::now_rfc3339(),
        seconds: 0.0,
        bytes: 0,
        limits: serde_json::to_value(limits).unwrap_or_default(),
        ray_job_id: job_hex.clone(),
        window: (window.from_ms.map(ms_text), window.to_ms.map(ms_text)),
        files: Vec::new(),
        not_collected: std::mem::take(&mut files.missed),
    };
    let triage_json = serde_json::to_vec_pretty(&found).unwrap_or_default();
    files.add(
        TRIAGE.into(),
        triage_json,
        "argus's triage".into(),
        None,
        false,
    );
    let kept = write::seal(files.files, &redact, limits.total_bytes, &mut manifest);
    let path = write::write(
        &records,
        id,
        job.attempt,
        &kept,
        &mut manifest,
        started,
        &redact,
    )?;
    Ok(Bundle {
        path,
        manifest,
        triage: found,
    })
}

/// Where a job's record keeps its JobSpec (redacted: [`crate::inputs::recorded`]).
use crate::records::JOBSPEC;

/// The containers' part: what [`gather::collect`] takes from every planned container, the
/// Ray logs chosen by [`choose`] (or [`pick_one`] for a stopped one) within the caps.
async fn gather_nodes(
    job: &Job<'_>,
    limits: &Limits,
    deadline: Instant,
    job_hex: Option<&str>,
    window: Window,
    want_driver_file: bool,
) -> Result<gather::Collected, Error> {
    let since_s = window.from_ms.map_or(0, |ms| ms / 1000);
    let nodes = crate::cluster::plan::plan(job.loaded, &Default::default())
        .containers
        .len()
        .max(1) as u64;
    let params = NodeParams {
        since_s,
        until_s: unix_now(),
        job_hex: job_hex.map(str::to_string),
        // The driver's own log from whichever node ran it (a worker, with the built-in
        // profile's entrypoint_resources): the dead node's copy is the end the stream
        // missed.
        driver_of: want_driver_file.then(|| job.id.to_string()),
        file_cap: limits.file_bytes,
        node_cap: limits.node_bytes.min(
            limits
                .total_bytes
                .saturating_sub(limits.driver_bytes + (1 << 20))
                / nodes,
        ),
        seconds: deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64(),
    };
    match job.nodes {
        Some(nodes) => Ok(nodes.gather(&params).await),
        None => Ok(gather_on(job.loaded, None, &params).await?),
    }
}

/// The hosts that did not answer and every container's files (workers first: an error
/// raised on a worker is named there, not on the head); how the containers ended.
fn add_nodes(
    files: &mut Files,
    redact: &mut Secrets,
    collected: &gather::Collected,
    window: Window,
) -> Vec<ContainerEnd> {
    for host in &collected.unreachable {
        files.miss(format!("host {}", host.host), host.to_string());
    }
    // Every secret-named or credential-shaped value of every container's env is redacted
    // everywhere.
    for c in &collected.containers {
        for (name, value) in c.env.iter().filter_map(|kv| kv.split_once('=')) {
            redact.add_vars([(name, value)]);
            redact.add_shaped(value);
        }
    }
    let mut ends = Vec::new();
    // Workers first: an error raised on a worker is named there, not on the head.
    let mut order: Vec<&gather::Container> = collected.containers.iter().collect();
    order.sort_by_key(|c| c.head);
    for (i, c) in order.iter().enumerate() {
        let dir = if gather::plain_name(&c.name) {
            format!("nodes/{}", c.name)
        } else {
            format!("nodes/node-{i}")
        };
        add_container(files, &mut ends, c, &dir, window);
    }
    ends
}

/// The driver's log as read, or what was missed when no node had it either.
fn add_driver(files: &mut Files, driver: Option<(Vec<u8>, u64, String)>, id: &str) {
    match driver {
        Some((text, of, source)) => files.add("driver.log".into(), text, source, Some(of), true),
        None => {
            if !files
                .files
                .iter()
                .any(|(p, _, _)| p.ends_with(&format!("job-driver-{id}.log")))
            {
                let refused = files.missed.iter().any(|m| m.what.ends_with("driver.log"));
                files.miss(
                    "driver.log",
                    if refused {
                        "argus's saved driver log was refused (see above) and neither Ray nor the head has it"
                    } else {
                        "argus saved no driver log and neither Ray nor the head has it"
                    },
                );
            }
        }
    }
}

/// The triage of the bundle's logs, read before redaction (a secret in a line must not
/// hide the line), its summary shown after it. The triage's file order: by kind of log
/// across the nodes (workers' own first, the driver's last), then the nodes' order.
fn triage_of(
    files: &Files,
    ends: &[ContainerEnd],
    window: Window,
    redact: &Secrets,
) -> Option<Triage> {
    let mut logs_order = files.logs.clone();
    logs_order.sort_by_key(|&i| triage_rank(&files.files[i].0));
    let texts: Vec<(String, String)> = logs_order
        .iter()
        .map(|&i| {
            let (path, bytes, _) = &files.files[i];
            (path.clone(), String::from_utf8_lossy(bytes).into_owned())
        })
        .collect();
    let logs: Vec<Log<'_>> = texts
        .iter()
        .map(|(path, text)| Log { path, text })
        .collect();
    triage::triage(ends, &logs, window).map(|mut t| {
        t.summary = redact.redact_str(&t.summary).into_owned();
        t
    })
}

/// A container's files: its state (and its end on the timeline), env, output, GPUs, logs.
fn add_container(
    files: &mut Files,
    ends: &mut Vec<ContainerEnd>,
    c: &gather::Container,
    dir: &str,
    window: Window,
) {
    let source = |what: &str| format!("container {} on host {}: {what}", c.name, c.host);
    for (what, why) in &c.missed {
        files.miss(format!("{dir} ({what})"), why.clone());
    }
    let Some(state) = &c.state else {
        return;
    };
    let state_path = format!("{dir}/state.json");
    ends.extend(ends_of(c, state, &state_path, window));
    files.add(
        state_path,
        serde_json::to_vec_pretty(&serde_json::json!({
            "container": c.name, "host": c.host, "head": c.head, "state": state,
        }))
        .unwrap_or_default(),
        source("docker inspect, events"),
        None,
        false,
    );
    files.add(
        format!("{dir}/env.txt"),
        env_text(&c.env).into_bytes(),
        source("env"),
        None,
        false,
    );
    if let Some(smi) = &c.nvidia_smi {
        files.add(
            format!("{dir}/nvidia-smi.txt"),
            smi.clone().into_bytes(),
            source("nvidia-smi"),
            None,
            false,
        );
    }
    // A name is the file's own in the bundle: only a plain one (a Slurm node's part
    // arrives as JSON, from another machine).
    for tail in c.files.iter().filter(|t| gather::plain_name(&t.name)) {
        files.add(
            format!("{dir}/ray/{}", tail.name),
            tail.bytes.clone(),
            source(&format!("{}/{}", gather::RAY_LOGS, tail.name)),
            Some(tail.size),
            true,
        );
    }
    if let Some(output) = &c.output {
        files.add(
            format!("{dir}/output.log"),
            output.clone().into_bytes(),
            source("docker logs"),
            None,
            true,
        );
    }
}

/// Where a log comes in the triage's file order (lines without a time are named in this
/// order): a worker's own `.err` and `.out` (where an actor's or a task's error is
/// raised), its core-worker log, runtime-env setup, raylet, GCS, the container's output,
/// then the driver's logs (where a worker's error arrives re-raised).
fn triage_rank(path: &str) -> u8 {
    let name = path.rsplit('/').next().unwrap_or(path);
    let worker = name.starts_with("worker-");
    if worker && name.ends_with(".err") {
        0
    } else if worker {
        1
    } else if name.starts_with("python-core-worker-") {
        2
    } else if name.starts_with("runtime_env_setup-") {
        3
    } else if name.starts_with("raylet.") {
        4
    } else if name.starts_with("gcs_server.") {
        5
    } else if name == "output.log" {
        6
    } else if name.starts_with("python-core-driver-") {
        7
    } else if name.starts_with("job-driver-") {
        8
    } else {
        9
    }
}

/// How a container ended in the window: its `oom` events, its `die` events (those right
/// after an `oom` are the same end), or its state when it is not running.
fn ends_of(
    c: &gather::Container,
    state: &gather::State,
    path: &str,
    window: Window,
) -> Vec<ContainerEnd> {
    let limit = u64::try_from(state.memory_limit).ok().filter(|l| *l > 0);
    let end = |what, at_ms| ContainerEnd {
        container: c.name.clone(),
        host: c.host.clone(),
        path: path.to_string(),
        what,
        at_ms,
    };
    let mut out = Vec::new();
    let mut last_oom: Option<u64> = None;
    for e in &state.events {
        match e.action.as_str() {
            "oom" => {
                last_oom = Some(e.time_ms);
                out.push(end(EndKind::OomKilled { limit }, Some(e.time_ms)));
            }
            "die" => {
                let code = e.exit_code.unwrap_or(-1);
                let after_oom = last_oom.is_some_and(|t| e.time_ms.saturating_sub(t) < 10_000);
                if code != 0 && !after_oom {
                    out.push(end(EndKind::Exited { code }, Some(e.time_ms)));
                }
            }
            _ => {}
        }
    }
    let finished = state.finished_at.as_deref().and_then(rfc3339_ms);
    let in_window = finished.is_some_and(|t| {
        window.from_ms.is_none_or(|f| t >= f) && window.to_ms.is_none_or(|to| t <= to)
    });
    if out.is_empty() && (!state.running || in_window) {
        if state.oom_killed && (in_window || !state.running) {
            out.push(end(EndKind::OomKilled { limit }, finished));
        } else if !state.running
            // A container that never started (left `created`) or ended cleanly is no
            // node that died.
            && finished.is_some()
            && state.exit_code.is_some_and(|code| code != 0)
        {
            out.push(end(
                EndKind::Exited {
                    code: state.exit_code.unwrap_or(-1),
                },
                finished,
            ));
        }
    }
    out
}

/// The job's profile (resolved, redacted) and its recorded JobSpec (as read).
fn add_config(
    files: &mut Files,
    records: &Records,
    loaded: &LoadedProfile,
    id: &str,
    jobspec: std::io::Result<Option<Vec<u8>>>,
) {
    let profile = crate::inputs::recorded::redacted_value(&loaded.profile);
    files.add(
        "profile.yaml".into(),
        crate::config::yaml::to_string(&profile).into_bytes(),
        format!("profile {}", loaded.source.origin.display()),
        None,
        false,
    );
    match jobspec {
        Ok(Some(bytes)) => files.add(
            "jobspec.yaml".into(),
            bytes,
            format!("{}", records.dir(id).join(JOBSPEC).display()),
            None,
            false,
        ),
        Ok(None) => files.miss(
            "jobspec.yaml",
            "the job's record has no config/jobspec.yaml",
        ),
        Err(e) => files.miss("jobspec.yaml", e.to_string()),
    }
}

/// The driver's log (its last `cap` bytes): (text, its whole size, where from). The one
/// argus saved first; one that is there but refused (a link, a FIFO, a hard link: not a
/// regular file of its own) or unreadable is named in the manifest with why, and Ray's
/// copy is asked for instead.
async fn driver_log(
    records: &Records,
    api: &JobsApi<'_>,
    id: &str,
    cap: u64,
    files: &mut Files,
) -> Option<(Vec<u8>, u64, String)> {
    let saved = crate::text::shown(&records.dir(id).join(crate::records::DRIVER_LOG));
    match records.open_file(id, crate::records::DRIVER_LOG) {
        Ok(Some(mut file)) => {
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            let mut bytes = Vec::new();
            let read = file
                .seek(SeekFrom::Start(size.saturating_sub(cap)))
                .and_then(|_| file.take(cap).read_to_end(&mut bytes));
            match read {
                Ok(_) => return Some((bytes, size, saved)),
                Err(e) => files.miss(saved, format!("argus's saved driver log: {e}")),
            }
        }
        Ok(None) => {}
        Err(e) => files.miss(
            saved,
            format!("argus's saved driver log is refused, not read: {e}"),
        ),
    }
    let log = tokio::time::timeout(Duration::from_secs(10), api.logs(id))
        .await
        .ok()?
        .ok()?;
    let size = log.len() as u64;
    let mut cut = log
        .len()
        .saturating_sub(usize::try_from(cap).unwrap_or(usize::MAX));
    while !log.is_char_boundary(cut) {
        cut += 1;
    }
    Some((
        log.as_bytes()[cut..].to_vec(),
        size,
        "Ray's job logs API".into(),
    ))
}

/// The job's window: from a second before it started (clocks of one host agree; an
/// earlier job's end, seconds before, must not count) to a minute after it ended.
fn window_of(info: Option<&JobInfo>, record: &JobRecord) -> Window {
    let start = info
        .and_then(|i| i.start_time)
        .or(record.start_time)
        .or_else(|| rfc3339_ms(&record.submitted_at));
    let end = info.and_then(|i| i.end_time).or(record.end_time);
    Window {
        from_ms: start.map(|s| s.saturating_sub(1_000)),
        to_ms: end.map(|e| e + 60_000),
    }
}

/// The triage of a job's newest bundle (the highest attempt that has one): (attempt,
/// what it found). None when the job has no bundle or it cannot be read.
pub fn latest(records: &Records, id: &str) -> Option<(u32, Option<Triage>)> {
    let job = records.job(id).ok()??;
    let dir = job.open_dir(DIR).ok()?;
    let newest = dir
        .entries()
        .ok()?
        .into_iter()
        .filter_map(|(name, _)| name.to_str()?.parse::<u32>().ok())
        .max()?;
    let bytes = dir
        .read(Path::new(&newest.to_string()).join(TRIAGE), 1 << 20)
        .ok()?;
    let found: Option<Triage> = serde_json::from_slice(&bytes).ok()?;
    Some((newest, found))
}

fn unix_now() -> u64 {
    crate::records::now_ms() / 1000
}

fn rfc3339_ms(text: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(text.trim_end_matches('Z')).ok()?;
    let ms = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    u64::try_from(ms).ok().filter(|ms| *ms > 0)
}

fn ms_text(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::profile::Profile;
    use crate::secrets;

    #[test]
    fn the_workers_own_logs_come_first_and_the_drivers_last() {
        let mut paths = vec![
            "driver.log",
            "nodes/w0/ray/python-core-driver-02000000ff_1.log",
            "nodes/w0/ray/raylet.out",
            "nodes/w0/output.log",
            "nodes/w1/ray/python-core-worker-ab_2.log",
            "nodes/w1/ray/worker-ab-02000000-2.out",
            "nodes/w1/ray/worker-ab-02000000-2.err",
            "nodes/h/ray/gcs_server.out",
        ];
        paths.sort_by_key(|p| triage_rank(p));
        assert_eq!(
            paths,
            [
                "nodes/w1/ray/worker-ab-02000000-2.err",
                "nodes/w1/ray/worker-ab-02000000-2.out",
                "nodes/w1/ray/python-core-worker-ab_2.log",
                "nodes/w0/ray/raylet.out",
                "nodes/h/ray/gcs_server.out",
                "nodes/w0/output.log",
                "nodes/w0/ray/python-core-driver-02000000ff_1.log",
                "driver.log",
            ]
        );
    }

    #[test]
    fn an_oom_and_the_die_that_follows_are_one_end() {
        let state = gather::State {
            status: "running".into(),
            running: true,
            memory_limit: 1 << 30,
            events: vec![
                gather::Event {
                    action: "oom".into(),
                    time_ms: 1_000,
                    exit_code: None,
                },
                gather::Event {
                    action: "die".into(),
                    time_ms: 1_500,
                    exit_code: Some(137),
                },
                gather::Event {
                    action: "die".into(),
                    time_ms: 90_000,
                    exit_code: Some(1),
                },
            ],
            ..Default::default()
        };
        let c = gather::Container {
            name: "c-w-1".into(),
            host: "h".into(),
            ..Default::default()
        };
        let ends = ends_of(&c, &state, "nodes/c-w-1/state.json", Window::default());
        assert_eq!(ends.len(), 2);
        assert_eq!(
            ends[0].what,
            EndKind::OomKilled {
                limit: Some(1 << 30)
            }
        );
        assert_eq!(ends[1].what, EndKind::Exited { code: 1 });
        // Exited now, no events: its state says how.
        let state = gather::State {
            status: "exited".into(),
            exit_code: Some(137),
            oom_killed: true,
            finished_at: Some("2026-11-26T06:00:00.123456789Z".into()),
            ..Default::default()
        };
        let ends = ends_of(&c, &state, "p", Window::default());
        assert_eq!(ends[0].what, EndKind::OomKilled { limit: None });
        assert_eq!(ends[0].at_ms, rfc3339_ms("2026-11-26T06:00:00.123Z"));
        assert!(ends[0].at_ms.is_some());
    }

    fn profile() -> Profile {
        crate::config::yaml::parse(&crate::config::yaml::Source::new(
            "p.yaml",
            "name: t\nimage: i\nshared: {host_path: /tmp/x}\nenv: {PROFILE_TOKEN: tok-of-the-profile, NCCL_DEBUG: WARN}\nworkers: [{name: g, count: 1, env: {W_PASS: worker-pass-1}}]\nsubmit: {runtime_env: {env_vars: {SUB_KEY: sub-key-value}}}\n",
        ))
        .unwrap()
    }

    const RECORDED: &str = "workload: ppo\ncode_id: a\nenv_vars:\n  DB_PASS: '<redacted>'\n  RENAMED_VALUE: '<redacted>'\n  NCCL_DEBUG: INFO\n  HF_ENDPOINT: 'https://user:pw-in-url-1@mirror.example'\n";

    #[test]
    fn without_rays_jobinfo_the_secrets_are_hidden_by_name() {
        let recorded = recorded_env(RECORDED.as_bytes()).unwrap();
        assert_eq!(recorded[0], ("DB_PASS".into(), secrets::REDACTED.into()));
        let (redact, missed) = redactor(None, Some(&recorded), &profile());
        let names: Vec<&str> = redact.names().collect();
        for name in [
            "DB_PASS",
            "RENAMED_VALUE",
            "PROFILE_TOKEN",
            "W_PASS",
            "SUB_KEY",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        assert!(!names.contains(&"NCCL_DEBUG") && !names.contains(&"HF_ENDPOINT"));
        let log = "env DB_PASS=db-secret-not-known-here\n{\"RENAMED_VALUE\": \"abcdef-1\"}\nNCCL_DEBUG=INFO\nGET https://user:pw-in-url-1@mirror.example/f\nconnecting as pw-in-url-1\n";
        assert_eq!(
            redact.redact_str(log),
            "env DB_PASS=<redacted>\n{\"RENAMED_VALUE\": \"<redacted>\"}\nNCCL_DEBUG=INFO\nGET <redacted>/f\nconnecting as <redacted>\n"
        );
        let missed = missed.expect("the manifest says redaction was by name");
        assert_eq!(missed.what, "redaction by value");
        assert!(missed.why.contains("Ray did not answer"), "{}", missed.why);
        assert!(missed.why.contains("DB_PASS"), "{}", missed.why);
        // The note survives its own redaction (names are listed, never assigned).
        assert_eq!(redact.redact_str(&missed.why), missed.why);
    }

    #[test]
    fn with_rays_jobinfo_the_secrets_are_hidden_by_value() {
        let recorded = recorded_env(RECORDED.as_bytes()).unwrap();
        let info = JobInfo {
            runtime_env: Some(serde_json::json!({"env_vars": {
                "DB_PASS": "db-secret-from-ray",
                "HF_HUB_URL": "https://u:ray-url-pw-2@hub.example",
            }})),
            ..Default::default()
        };
        let (redact, missed) = redactor(Some(&info), Some(&recorded), &profile());
        assert!(missed.is_none());
        assert_eq!(redact.names().count(), 0);
        assert_eq!(
            redact.redact_str("a db-secret-from-ray b ray-url-pw-2 DB_PASS=short"),
            "a <redacted> b <redacted> DB_PASS=short"
        );
    }

    #[test]
    fn env_txt_hides_secret_names_and_secret_shapes() {
        let hf = format!("hf_{}", "x".repeat(34));
        let env: Vec<String> = [
            "HF_TOKEN=abc".to_string(),
            "HF_ENDPOINT=https://user:pw@mirror.example".into(),
            "AWS_ACCESS_KEY_ID=AKIAABCDEFGHIJKLMNOP".into(),
            format!("HUB_AUTH=Bearer {hf}"),
            "GH=ghp_0123456789012345678901234567890123".into(),
            "HF_HOME=/mnt/shared/common/hf".into(),
            "PATH=/usr/bin:/bin".into(),
        ]
        .into();
        assert_eq!(
            env_text(&env),
            "HF_TOKEN=<redacted>\nHF_ENDPOINT=<redacted>\nAWS_ACCESS_KEY_ID=<redacted>\nHUB_AUTH=<redacted>\nGH=<redacted>\nHF_HOME=/mnt/shared/common/hf\nPATH=/usr/bin:/bin\n"
        );
    }
}
