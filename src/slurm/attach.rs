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

use super::alloc::Alloc;
use super::record::SlurmRecord;
use super::{Error, RunFiles, cluster_profile, ports, submit};
use crate::config::LoadedProfile;
use crate::ray::RayClient;

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
        self.state.as_deref() == Some("RUNNING")
    }
}

/// The run's cluster: its records, Slurm's state, a Ray client that reaches its head.
pub async fn attach(loaded: &LoadedProfile, run_id: &str) -> Result<Attached, Error> {
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
        Err(_) => {
            let shown = state.as_deref().unwrap_or("unknown to Slurm");
            return Err(Error::NoCluster {
                run_id: run_id.into(),
                why: format!(
                    "its batch step has not started (Slurm job {job_id} is {shown}); `argus slurm status {run_id}` follows it"
                ),
            });
        }
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
    let head =
        alloc.nodes.first().map(|n| n.name.clone()).ok_or_else(|| {
            Error::Allocation(format!("{} lists no node", files.alloc().display()))
        })?;
    let (_, port) = ports::head_ports(alloc.slot);
    let live = state.as_deref() == Some("RUNNING");
    let relay = Relay {
        job_id,
        node: head.clone(),
        port,
        argus: relay_binary(&record)?,
        profile: files.profile(),
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
    Ok(Attached {
        files,
        record,
        cluster,
        alloc,
        state,
        ray,
    })
}

/// The argus binary the nodes run: the one the run was submitted with (checked visible on
/// the nodes then), else this one. The record is on the shared storage, which others may
/// write: the path it names is run only if it is an absolute path to a regular file here
/// that this user or root owns and nobody else may write (what `submit` recorded).
fn relay_binary(record: &SlurmRecord) -> Result<PathBuf, Error> {
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
    let meta = std::fs::metadata(&path).map_err(|e| refuse(format!("cannot be read ({e})")))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
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

/// A new directory only this user can enter, under the temporary directory: created with
/// mode 0700 under a random name (creating never reuses or follows what is there).
fn private_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
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

/// Every node's containers of the run's job, through one srun step per node (each lists
/// its own engine's). Nodes that did not answer are missing from the result.
pub async fn containers(attached: &Attached) -> Result<Vec<NodeContainers>, Error> {
    let n = attached.alloc.nodes.len().to_string();
    let nodes: Vec<&str> = attached
        .alloc
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    let output = super::srun()
        .arg(format!("--jobid={}", attached.alloc.job_id))
        .args([
            "--overlap",
            "--quiet",
            "--kill-on-bad-exit=0",
            "--job-name=argus-status",
        ])
        .args(["--nodes", &n, "--ntasks", &n, "--ntasks-per-node=1"])
        .arg(format!("--nodelist={}", nodes.join(",")))
        .arg(relay_binary(&attached.record)?)
        .args(["--no-progress", "-q", "--json", "-p"])
        .arg(attached.files.profile())
        .args(["slurm", "containers", &attached.record.run_id])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .map_err(|_| Error::Allocation("srun of the container listing took over 30 s".into()))?
        .map_err(|source| Error::Spawn {
            program: "srun".into(),
            source,
        })?;
    let mut listed: Vec<NodeContainers> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    listed.sort_by_key(|n| {
        nodes
            .iter()
            .position(|name| *name == n.node)
            .unwrap_or(usize::MAX)
    });
    if listed.is_empty() {
        return Err(Error::Command {
            command: "srun argus slurm containers".into(),
            code: output.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(listed)
}

/// This node's containers of the run's Slurm job (the node step of `containers`).
pub async fn node_containers(
    loaded: &LoadedProfile,
    run_id: &str,
) -> Result<NodeContainers, Error> {
    let layout = loaded.host_layout()?;
    let files = RunFiles::new(&layout, run_id);
    let alloc: Alloc = super::read_json(&files.alloc())?;
    let cluster = cluster_profile(loaded, &alloc)?;
    let docker = super::node::connect(&cluster).await?;
    let label = format!("{}={}", crate::cluster::node::LABEL_SLURM_JOB, alloc.job_id);
    let mut containers: Vec<ContainerState> =
        crate::cluster::docker::containers_labelled(&docker, &label)
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
            super::relay_binary(&record(&me.display().to_string())).expect("own binary"),
            me
        );
        let refused = |path: &str| super::relay_binary(&record(path)).unwrap_err().to_string();
        assert!(refused("bin/argus").contains("not an absolute path"));
        assert!(refused("/nonexistent/argus").contains("cannot be read"));
        assert!(refused("/tmp").contains("not a regular file"));
        let dir = std::env::temp_dir().join(format!("argus-relay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let writable = dir.join("argus");
        std::fs::write(&writable, b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(refused(&writable.display().to_string()).contains("group or others may write"));
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
}
