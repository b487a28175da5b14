//! Reaching a Slurm run's cluster from outside its allocation (the login node): the Jobs
//! API for `argus job ... --slurm-run RUN_ID`, and the containers on every node for
//! `argus slurm status`.
//!
//! The head's dashboard stays bound to the loopback of the allocation's first node. argus
//! reaches it the way `kubectl port-forward` would, with Slurm as the transport: a Unix
//! socket in a directory of this process's own (mode 0700: a login node's other users
//! cannot connect, as they could to a port on 127.0.0.1) turns each accepted connection
//! into one
//! `srun --jobid J --overlap --unbuffered -w <first node> argus slurm relay <port>` whose
//! stdin and stdout carry the bytes (`relay`). Only the job's owner (or root) can start a
//! step in the job, so Slurm's authentication guards the way in; nothing is opened on the
//! node's network. Once the Slurm job has ended there is nothing to reach: connections are
//! closed at once and `argus job` falls back to argus's records, as it does for any cluster
//! that is gone.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

use super::alloc;
use super::alloc::Alloc;
use super::record::{BatchReport, SlurmRecord};
use super::{Error, RunFiles, cluster_profile, ports, submit};
use crate::config::Layout;
use crate::config::LoadedProfile;
use crate::ray::RayClient;
use crate::ray::jobs::JobStatus;
use crate::records::Records;

/// A Slurm run's cluster, as seen from the login node.
pub struct Attached {
    pub files: RunFiles,
    pub record: SlurmRecord,
    /// The cluster as the batch step planned it (names, ports, nodes).
    pub cluster: LoadedProfile,
    pub alloc: Alloc,
    /// Slurm's state of the job (None: Slurm no longer knows it).
    pub state: Option<String>,
    /// The Jobs API through the srun relay (refusing once the job has ended).
    pub ray: RayClient,
}

impl Attached {
    /// True while the allocation lives, so the cluster can be reached.
    pub fn live(&self) -> bool {
        live_state(self.state.as_deref())
    }
}

/// The Slurm states in which the run's nodes (and so its cluster) can be reached.
pub fn live_state(state: Option<&str>) -> bool {
    state == Some("RUNNING")
}

/// Once the allocation has ended, the jobs of its cluster that argus's records still show
/// unfinished ended with it: they are recorded STOPPED with the Slurm state as the reason
/// (the driver log the batch step streamed stays). The ids settled.
pub fn settle_records(layout: &Layout, cluster: &str, job_id: u64, state: &str) -> Vec<String> {
    let records = Records::new(layout.jobs());
    let now_ms = crate::records::now_ms();
    let mut settled = Vec::new();
    for mut record in records.list() {
        if record.cluster != cluster || record.is_final() {
            continue;
        }
        record.status = JobStatus::Stopped;
        record.message = Some(format!(
            "Slurm job {job_id} ended ({state}) before the job did: its nodes removed the cluster"
        ));
        record.end_time.get_or_insert(now_ms);
        match records.write(&record) {
            Ok(()) => settled.push(record.submission_id),
            Err(e) => tracing::warn!("cannot record the end of job {}: {e}", record.submission_id),
        }
    }
    settled
}

/// The run's cluster: its records, Slurm's state, a Ray client that reaches its head.
pub async fn attach(loaded: &LoadedProfile, run_id: &str) -> Result<Attached, Error> {
    attach_with(loaded, run_id, true).await
}

/// [`attach`] without requiring the head to answer: for what looks at the nodes themselves
/// (`doctor`, a failure bundle), which matters most when Ray did not start or died.
pub async fn attach_nodes(loaded: &LoadedProfile, run_id: &str) -> Result<Attached, Error> {
    attach_with(loaded, run_id, false).await
}

async fn attach_with(
    loaded: &LoadedProfile,
    run_id: &str,
    need_head: bool,
) -> Result<Attached, Error> {
    let (files, record) = submit::read_run(loaded, run_id)?;
    let Some(job_id) = record.slurm_job_id else {
        return Err(Error::NoCluster {
            run_id: run_id.into(),
            why: "it was never submitted to Slurm (a dry run?)".into(),
        });
    };
    let state = submit::slurm_state(job_id).await?.state;
    let alloc: Alloc = match super::read_json(&files.alloc()) {
        Ok(alloc) => alloc,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            let why = match state.as_deref() {
                Some(s) if alloc::is_alive(s) => format!(
                    "its batch step has not started yet (Slurm job {job_id} is {s}); `argus slurm status {run_id}` follows it"
                ),
                Some(s) => format!(
                    "Slurm job {job_id} ended ({s}) before its batch step started: it never had one"
                ),
                None => format!(
                    "Slurm job {job_id} is gone and its batch step never started: it never had one"
                ),
            };
            return Err(Error::NoCluster {
                run_id: run_id.into(),
                why,
            });
        }
        Err(e) => return Err(e),
    };
    if alloc.job_id != job_id {
        return Err(Error::Invalid(format!(
            "{} is for Slurm job {}, not the run's {job_id}",
            files.alloc().display(),
            alloc.job_id
        )));
    }
    if alloc.slot >= ports::SLOTS {
        return Err(Error::Invalid(format!(
            "{} names port slot {}, beyond the last ({})",
            files.alloc().display(),
            alloc.slot,
            ports::SLOTS - 1
        )));
    }
    let cluster = cluster_profile(loaded, &alloc)?;
    // The run belongs to the profile it was submitted with: another profile on the same
    // storage would name (and record jobs under) a cluster that is not this one.
    if let Some(batch) = super::read_json::<BatchReport>(&files.batch()).ok()
        && batch.cluster != cluster.profile.name
    {
        return Err(Error::Invalid(format!(
            "run {run_id} is cluster {}, not {} of profile {}: give the profile it was submitted with",
            batch.cluster, cluster.profile.name, loaded.profile.name
        )));
    }
    let live = live_state(state.as_deref());
    if !live {
        settle_ended(loaded, &cluster, job_id, state.as_deref())?;
    }
    let head =
        alloc.nodes.first().map(|n| n.name.clone()).ok_or_else(|| {
            Error::Allocation(format!("{} lists no node", files.alloc().display()))
        })?;
    let (_, port) = ports::head_ports(alloc.slot);
    let relay = Relay {
        job_id,
        node: head.clone(),
        port,
        argus: node_binary(&record)?,
        profile: files.profile_path(),
    };
    let tunnel = SrunTunnel::listen(live.then_some(relay)).await?;
    let via = if live {
        format!("127.0.0.1:{port} on node {head} (Slurm job {job_id}, through srun)")
    } else {
        format!(
            "the head of Slurm job {job_id}, which is {}",
            state.as_deref().map_or("gone".into(), |s| s.to_lowercase())
        )
    };
    // `ray.auth: token`: this machine's token of the profile (the one `submit` sent).
    let token = crate::cluster::auth::cluster_token(loaded, false)?;
    let ray = RayClient::over_socket(tunnel.socket(), token)
        .with_via(via)
        .with_keepalive(Arc::new(tunnel));
    // While Slurm holds the nodes the head must answer: a relay that fails (a node name or
    // slot that leads nowhere) is an error here, never a stale status from the records.
    if live
        && need_head
        && let Err(e) = ray.gcs_healthy().await
    {
        return Err(Error::NoCluster {
            run_id: run_id.into(),
            why: format!(
                "Slurm job {job_id} is RUNNING but its head does not answer through srun: {}",
                crate::exit::one_line(&e)
            ),
        });
    }
    Ok(Attached {
        files,
        record,
        cluster,
        alloc,
        state,
        ray,
    })
}

/// The jobs a Slurm job that ended took with it, recorded so.
fn settle_ended(
    loaded: &LoadedProfile,
    cluster: &LoadedProfile,
    job_id: u64,
    state: Option<&str>,
) -> Result<(), Error> {
    let settled = settle_records(
        &loaded.host_layout()?,
        &cluster.profile.name,
        job_id,
        state.unwrap_or("gone"),
    );
    if !settled.is_empty() {
        tracing::info!(
            "recorded as ended with Slurm job {job_id}: {}",
            settled.join(", ")
        );
    }
    Ok(())
}

/// The argus binary the nodes run: the one the run was submitted with (checked visible on
/// the nodes then), else this one. The record is on the shared storage, which others may
/// write: the path it names is run only if it is an absolute path to a regular file here
/// that this user or root owns and nobody else may write (what `submit` recorded).
pub fn node_binary(record: &SlurmRecord) -> Result<PathBuf, Error> {
    let Some(path) = &record.argus else {
        return std::env::current_exe().map_err(|source| Error::Spawn {
            program: "argus (its own path)".into(),
            source,
        });
    };
    let path = PathBuf::from(path);
    let refuse = |why: String| {
        Error::Invalid(format!(
            "the run's record names argus's binary {}, which {why}: not run",
            path.display()
        ))
    };
    if !path.is_absolute() {
        return Err(refuse("is not an absolute path".into()));
    }
    let meta =
        std::fs::symlink_metadata(&path).map_err(|e| refuse(format!("cannot be read ({e})")))?;
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    let me = crate::fsx::effective_uid();
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    if meta.uid() != me && meta.uid() != 0 {
        return Err(refuse(format!("belongs to uid {}", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "group or others may write (mode {:04o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(path)
}

/// One relay step: where it runs and what it reaches.
#[derive(Debug, Clone)]
pub(crate) struct Relay {
    job_id: u64,
    node: String,
    port: u16,
    argus: PathBuf,
    profile: PathBuf,
}

impl Relay {
    fn command(&self) -> tokio::process::Command {
        let mut srun = super::srun();
        srun.arg(format!("--jobid={}", self.job_id))
            .args([
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                "--quiet",
                // Without it slurmstepd holds output until a newline: an HTTP answer
                // without one would never arrive.
                "--unbuffered",
                "--kill-on-bad-exit=0",
                "--job-name=argus-relay",
            ])
            .arg(format!("--nodelist={}", self.node))
            .arg(&self.argus)
            .args(["--no-progress", "-q", "-p"])
            .arg(&self.profile)
            .args(["slurm", "relay", &self.port.to_string()]);
        srun
    }
}

/// A forward from a private Unix socket to the head's dashboard through srun relays.
/// Dropping it stops the listener and every relay, and removes the socket's directory.
#[derive(Debug)]
pub struct SrunTunnel {
    dir: PathBuf,
    socket: PathBuf,
    relays: Arc<AtomicU64>,
    serve: JoinHandle<()>,
}

impl SrunTunnel {
    /// Listens; `None`: the job has ended, and every connection is closed at once.
    pub(crate) async fn listen(relay: Option<Relay>) -> Result<SrunTunnel, Error> {
        let dir = private_dir()?;
        let socket = dir.join("dashboard.sock");
        let listener = match UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(source) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::Io {
                    path: socket,
                    source,
                });
            }
        };
        let relays = Arc::new(AtomicU64::new(0));
        let serve = tokio::spawn(serve(listener, relay, relays.clone()));
        Ok(SrunTunnel {
            dir,
            socket,
            relays,
            serve,
        })
    }

    /// The socket to give an HTTP client (`RayClient::over_socket`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// How many relay steps have been started (one per connection).
    pub fn relays_started(&self) -> u64 {
        self.relays.load(Ordering::Relaxed)
    }
}

impl Drop for SrunTunnel {
    fn drop(&mut self) {
        // The JoinSet goes with the task: each connection's srun is killed (kill_on_drop),
        // and Slurm ends its step.
        self.serve.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the forward directories that a killed argus of this user left (Ctrl-C, SIGKILL):
/// older than a minute, and nothing listens on their socket any more.
fn remove_dead_dirs(base: &Path) {
    let me = crate::fsx::effective_uid();
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .starts_with("argus-slurm-")
        {
            continue;
        }
        let dir = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if !meta.is_dir() || meta.uid() != me || !old {
            continue;
        }
        let listening = std::os::unix::net::UnixStream::connect(dir.join("dashboard.sock")).is_ok();
        if !listening {
            tracing::debug!("removing {} (its argus is gone)", dir.display());
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// A new directory only this user can enter, under the temporary directory: created with
/// mode 0700 under a random name (creating never reuses or follows what is there).
fn private_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
    remove_dead_dirs(&base);
    let name = crate::digest::random_hex(8).map_err(|source| Error::Io {
        path: "/dev/urandom".into(),
        source,
    })?;
    let dir = base.join(format!("argus-slurm-{name}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
    Ok(dir)
}

async fn serve(listener: UnixListener, relay: Option<Relay>, relays: Arc<AtomicU64>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let Some(relay) = relay.clone() else {
                        drop(client);
                        continue;
                    };
                    relays.fetch_add(1, Ordering::Relaxed);
                    connections.spawn(async move {
                        if let Err(e) = forward(&relay, client).await {
                            tracing::debug!("srun relay to {}:{}: {e}", relay.node, relay.port);
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("srun tunnel: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Carries one client connection through one relay step.
async fn forward(relay: &Relay, client: UnixStream) -> std::io::Result<()> {
    let mut child = relay
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(mut input), Some(mut output), Some(mut errors)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("srun without pipes"));
    };
    let (mut from_client, mut to_client) = client.into_split();
    let upstream = async {
        tokio::io::copy(&mut from_client, &mut input).await?;
        // The client's EOF becomes the relay's stdin EOF.
        drop(input);
        std::future::pending::<std::io::Result<()>>().await
    };
    let downstream = async {
        tokio::io::copy(&mut output, &mut to_client).await?;
        to_client.shutdown().await
    };
    let done = tokio::select! {
        done = downstream => done,
        failed = upstream => failed,
    };
    let mut stderr = String::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read_to_string(&mut errors, &mut stderr),
    )
    .await;
    let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    if !stderr.trim().is_empty() {
        tracing::debug!(
            "srun relay to {}:{} ({status:?}): {}",
            relay.node,
            relay.port,
            stderr.trim()
        );
    }
    done
}

/// One node's argus containers of a Slurm job, as `argus slurm containers` prints them.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct NodeContainers {
    pub node: String,
    pub containers: Vec<ContainerState>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ContainerState {
    pub name: String,
    pub state: String,
    pub status: String,
}

/// How long one node may take to list its containers.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Every node's containers of the run's job, each node through its own srun step (it lists
/// its own engine's) under its own deadline: the nodes that answered, and why each other
/// one did not (by node name).
pub async fn containers(
    attached: &Attached,
) -> Result<(Vec<NodeContainers>, BTreeMap<String, String>), Error> {
    let argus = node_binary(&attached.record)?;
    let listings = attached.alloc.nodes.iter().map(|node| {
        let output = node_step(
            &attached.steps(&argus),
            &node.name,
            "argus-status",
            &["slurm", "containers", &attached.record.run_id],
        )
        .output();
        async move {
            let result = match tokio::time::timeout(LIST_TIMEOUT, output).await {
                Err(_) => Err(format!("no answer within {}s", LIST_TIMEOUT.as_secs())),
                Ok(Err(e)) => Err(format!("cannot run srun: {e}")),
                Ok(Ok(out)) => {
                    let listed = String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .find_map(|line| serde_json::from_str::<NodeContainers>(line).ok())
                        .filter(|l| l.node == node.name);
                    listed.ok_or_else(|| step_failure(&out.stderr, "no listing"))
                }
            };
            (node.name.clone(), result)
        }
    });
    let mut listed = Vec::new();
    let mut errors = BTreeMap::new();
    for (node, result) in futures_util::future::join_all(listings).await {
        match result {
            Ok(l) => listed.push(l),
            Err(why) => {
                errors.insert(node, why);
            }
        }
    }
    Ok((listed, errors))
}

/// Where a step of a run's Slurm job is started from: the job, the run's profile as the
/// nodes read it, the argus they run.
pub struct StepOf<'a> {
    pub job_id: u64,
    pub profile: PathBuf,
    pub argus: &'a Path,
}

impl Attached {
    /// Steps of this run's job, running `argus`.
    pub fn steps<'a>(&self, argus: &'a Path) -> StepOf<'a> {
        StepOf {
            job_id: self.alloc.job_id,
            profile: self.files.profile_path(),
            argus,
        }
    }
}

/// `argus --json -p <the run's profile> ARGS` on `node` as a step of the run's job of its
/// own (overlapping the job's steps, one task, its output only on stdout).
pub fn node_step(
    of: &StepOf<'_>,
    node: &str,
    job_name: &str,
    args: &[&str],
) -> tokio::process::Command {
    let mut srun = super::srun();
    srun.arg(format!("--jobid={}", of.job_id))
        .args([
            "--overlap",
            "--quiet",
            "--nodes=1",
            "--ntasks=1",
            "--kill-on-bad-exit=0",
        ])
        .arg(format!("--job-name={job_name}"))
        .arg(format!("--nodelist={node}"))
        .arg(of.argus)
        .args(["--no-progress", "-q", "--json", "-p"])
        .arg(&of.profile)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    srun
}

/// Why a node step gave no answer, from its stderr: argus's error line, else srun's first.
pub fn step_failure(stderr: &[u8], otherwise: &str) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let why = stderr
        .lines()
        .find(|l| l.starts_with("error:") || l.contains("caused by"))
        .or_else(|| stderr.lines().next())
        .unwrap_or(otherwise);
    why.trim().trim_start_matches("error: ").to_string()
}

/// This node's containers of the run's Slurm job (the node step of `containers`).
pub async fn node_containers(
    loaded: &LoadedProfile,
    run_id: &str,
) -> Result<NodeContainers, Error> {
    let super::RunView { alloc, cluster, .. } = super::run_view(loaded, run_id)?;
    let engine = super::node::connect(&cluster).await?;
    let label = format!("{}={}", crate::cluster::node::LABEL_SLURM_JOB, alloc.job_id);
    let mut containers: Vec<ContainerState> = engine
        .containers_labelled(&label)
        .await?
        .into_iter()
        .map(|c| ContainerState {
            name: c
                .names
                .and_then(|n| n.into_iter().next())
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_default(),
            state: c.state.map(|s| s.to_string()).unwrap_or_default(),
            status: c.status.unwrap_or_default(),
        })
        .collect();
    containers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(NodeContainers {
        node: super::node::node_name()?,
        containers,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::SrunTunnel;

    #[test]
    fn a_recorded_binary_runs_only_when_nobody_else_could_have_placed_it() {
        let record = |path: &str| super::SlurmRecord {
            argus: Some(path.to_string()),
            ..Default::default()
        };
        let me = std::env::current_exe().expect("exe");
        assert_eq!(
            super::node_binary(&record(&me.display().to_string())).expect("own binary"),
            me
        );
        let refused = |path: &str| super::node_binary(&record(path)).unwrap_err().to_string();
        assert!(refused("bin/argus").contains("not an absolute path"));
        assert!(refused("/nonexistent/argus").contains("cannot be read"));
        assert!(refused("/tmp").contains("not a regular file"));
        let dir = std::env::temp_dir().join(format!("argus-relay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let writable = dir.join("argus");
        std::fs::write(&writable, b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(refused(&writable.display().to_string()).contains("group or others may write"));
        let link = dir.join("link");
        std::os::unix::fs::symlink(&me, &link).expect("symlink");
        assert!(refused(&link.display().to_string()).contains("symbolic link"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[tokio::test]
    async fn the_forward_is_a_socket_only_its_owner_can_reach_and_goes_with_it() {
        let tunnel = SrunTunnel::listen(None).await.expect("listen");
        let dir = tunnel.socket().parent().expect("dir").to_path_buf();
        let mode = std::fs::metadata(&dir).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // The job has ended: a connection is accepted and closed, no relay is started.
        let mut client = tokio::net::UnixStream::connect(tunnel.socket())
            .await
            .expect("connect");
        let mut buf = Vec::new();
        let read = tokio::io::AsyncReadExt::read_to_end(&mut client, &mut buf).await;
        assert!(read.is_ok_and(|n| n == 0));
        assert_eq!(tunnel.relays_started(), 0);
        drop(tunnel);
        assert!(!dir.exists());
    }

    #[test]
    fn a_killed_commands_directory_is_removed_by_the_next_and_a_live_one_is_kept() {
        let base = std::env::temp_dir().join(format!("argus-gc-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).expect("base");
        let dead = base.join("argus-slurm-dead");
        let live = base.join("argus-slurm-live");
        let young = base.join("argus-slurm-young");
        for dir in [&dead, &live, &young] {
            std::fs::create_dir(dir).expect("dir");
        }
        std::fs::write(dead.join("dashboard.sock"), b"").expect("stale file");
        let _listener =
            std::os::unix::net::UnixListener::bind(live.join("dashboard.sock")).expect("bind");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
        for dir in [&dead, &live] {
            std::fs::File::open(dir)
                .and_then(|f| f.set_modified(old))
                .expect("age");
        }
        super::remove_dead_dirs(&base);
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(young.exists());
        std::fs::remove_dir_all(&base).expect("cleanup");
    }
}
