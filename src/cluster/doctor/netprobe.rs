//! The probe containers behind `network`'s checks and `up`'s interface probe: what each
//! is given, how it runs, and how one left behind is removed.
//!
//! Two probes, each given only what it needs, and each running as little of the image's
//! code as it can: the image's `python3` alone, as `python3 -I -S` (no site-packages, so no
//! `.pth` file a pip package ships, no sitecustomize, no `PYTHON*` variable), its entrypoint
//! set explicitly (an image's ENTRYPOINT never wraps it), `LD_PRELOAD` / `LD_LIBRARY_PATH`
//! emptied, no-new-privileges, a read-only root file system ([`docker::confined`]):
//!
//! - the route probe (`assets/doctor/netprobe.py`; `up`'s interface probe is this one
//!   alone): the host's network namespace (the routes, the interfaces and the listening
//!   sockets are the host's only there) and nothing else: its own PID namespace, no
//!   capability, user nobody. It reads `/proc/net/{route,tcp,tcp6}`, asks the kernel for a
//!   route, and dials the head's GCS when asked to.
//! - the holder scan (`assets/doctor/holders.py`), run only when the route probe found a
//!   listener in the cluster's port ranges, which then needs a name: the host's PID
//!   namespace (to map a socket's inode to the process holding it through
//!   `/proc/<pid>/fd`), no network, root with `CAP_SYS_PTRACE` alone (to read another
//!   process's descriptors), and `CAP_DAC_READ_SEARCH` too only when one of those sockets
//!   belongs to a user other than root (that process's `/proc/<pid>/fd` does not list for
//!   root without it). This one can reach the host through `/proc/<pid>/root`: that is why
//!   it runs only when needed and nothing of the image's Python packages runs in it.
//!
//! Every value reaches a script as an argument, never inside it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use serde::Deserialize;

use crate::cluster::docker;
use crate::cluster::plan::{LABEL_CLUSTER, LABEL_ROLE};

const SCRIPT: &str = include_str!("../../../assets/doctor/netprobe.py");
const HOLDERS_SCRIPT: &str = include_str!("../../../assets/doctor/holders.py");

/// The probes' interpreter, isolated (`-I`: no `PYTHON*` variable, no user site, not the
/// working directory on `sys.path`) and without `site` (`-S`: no site-packages, so no
/// `.pth` file and no sitecustomize).
const PYTHON: [&str; 3] = ["python3", "-I", "-S"];
/// The route probe's user: nobody (it reads world-readable files and opens one socket).
const NOBODY: &str = "65534:65534";
/// The holder scan's user: root, whose `/proc/<pid>/fd` it reads with `CAP_SYS_PTRACE`.
const ROOT: &str = "0:0";

/// The label on probe containers (value: a random token), so that one left by a probe that
/// ran out of time is found and removed.
const LABEL_PROBE: &str = "argus.probe";

/// How long one host's probe may take in doctor, container start to removal: a slower
/// host is reported (unknown), within doctor's own bounds.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `up`'s probe of a host's interface may take: there a slow probe is a busy host
/// (its containers start as slowly), and failing on it would fail the `up`.
pub(super) const UP_PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// What the holder scan may spend on `/proc`, at most (the rest is the container's start and
/// end).
const SCRIPT_BUDGET_S: f64 = 2.5;

/// The route to the head as one host's probe saw it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RouteSeen {
    pub iface: Option<String>,
    pub source: Option<String>,
    pub error: Option<String>,
}

/// A TCP connect to the head's GCS: its time or why it failed.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConnectSeen {
    pub ms: Option<f64>,
    pub error: Option<String>,
}

/// A listening socket the route probe found in the port ranges it was given.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Socket {
    pub port: u16,
    pub address: String,
    /// Its inode, which the holder scan looks for among the host's processes' descriptors.
    pub inode: String,
    /// The user it belongs to.
    pub uid: u32,
}

/// What the route probe saw.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RouteProbe {
    pub route: RouteSeen,
    pub connect: Option<ConnectSeen>,
    pub listeners: Vec<Socket>,
}

/// What the holder scan saw: socket inode -> the processes holding it.
#[derive(Debug, Clone, Default, Deserialize)]
struct HoldersSeen {
    holders: HashMap<String, Vec<super::ports::Holder>>,
    partial: bool,
}

/// Everything the probes of one host saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub route: RouteSeen,
    pub connect: Option<ConnectSeen>,
    pub listeners: Vec<super::ports::Listener>,
    /// The scan of processes ran out of time: some holders may be unnamed.
    pub partial: bool,
}

/// What to ask one host's probe.
#[derive(Debug, Clone, Default)]
pub struct ProbeArgs {
    /// The cluster's image id (present on that host).
    pub image_id: String,
    pub head_address: String,
    pub gcs_port: u16,
    /// Dial the GCS (the cluster is up).
    pub dial: bool,
    /// Port ranges to list listeners in (inclusive).
    pub ranges: Vec<(u32, u32)>,
    /// Ids of the cluster's own containers on that host.
    pub own_ids: Vec<String>,
    /// The cluster's name: the probe carries its label, so `down` removes one left behind.
    pub cluster: String,
}

/// Runs the route probe on one host and, when it found listeners, the holder scan; both
/// within `bound`. A holder scan that fails leaves the listeners unnamed (partial).
pub async fn probe(docker: &Docker, args: &ProbeArgs, bound: Duration) -> Result<Seen, String> {
    let started = Instant::now();
    let found = probe_route(docker, args, bound).await?;
    let mut seen = Seen {
        route: found.route,
        connect: found.connect,
        listeners: Vec::new(),
        partial: false,
    };
    if found.listeners.is_empty() {
        return Ok(seen);
    }
    let left = bound
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1));
    let budget = (left.as_secs_f64() / 2.0).clamp(0.5, SCRIPT_BUDGET_S);
    let held = match probe_holders(docker, args, &found.listeners, budget, left).await {
        Ok(held) => held,
        Err(e) => {
            tracing::warn!("the holder scan failed, the listeners stay unnamed: {e}");
            HoldersSeen {
                partial: true,
                ..Default::default()
            }
        }
    };
    seen.partial = held.partial;
    for socket in found.listeners {
        let pids = held.holders.get(&socket.inode).cloned().unwrap_or_default();
        let own = !pids.is_empty()
            && pids.iter().all(|h| {
                h.container
                    .as_ref()
                    .is_some_and(|c| args.own_ids.contains(c))
            });
        seen.listeners.push(super::ports::Listener {
            port: socket.port,
            address: socket.address,
            pids,
            own,
        });
    }
    Ok(seen)
}

/// Runs the route probe alone on one host (what `up` needs), bounded by `bound`.
pub async fn probe_route(
    docker: &Docker,
    args: &ProbeArgs,
    bound: Duration,
) -> Result<RouteProbe, String> {
    let token = crate::digest::random_hex(8).map_err(|e| format!("no random token: {e}"))?;
    let output = run_bounded(docker, route_body(args, &token), &token, bound).await?;
    last_json(&output)
}

async fn probe_holders(
    docker: &Docker,
    args: &ProbeArgs,
    sockets: &[Socket],
    budget_s: f64,
    bound: Duration,
) -> Result<HoldersSeen, String> {
    let token = crate::digest::random_hex(8).map_err(|e| format!("no random token: {e}"))?;
    let body = holders_body(args, sockets, budget_s, &token);
    let output = run_bounded(docker, body, &token, bound).await?;
    last_json(&output)
}

/// The last line of a probe's output that is a JSON object, read.
fn last_json<T: serde::de::DeserializeOwned>(output: &str) -> Result<T, String> {
    let line = output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("the probe printed no result: {}", last_words(output)))?;
    serde_json::from_str(line).map_err(|e| format!("the probe's result is not readable: {e}"))
}

/// What a Python probe runs and is given: its script and arguments, its user, its
/// namespaces (`host`) and capabilities.
struct PythonProbe<'a> {
    script: &'a str,
    argv: Vec<String>,
    user: &'a str,
    host: HostConfig,
    caps: &'a [&'a str],
}

/// A Python probe's create request: the script run by `python3 -I -S` in the cluster's
/// image, labelled as a probe of the cluster (`token` finds it again), confined.
fn python_body(args: &ProbeArgs, token: &str, probe: PythonProbe<'_>) -> ContainerCreateBody {
    let mut cmd = vec!["-c".to_string(), probe.script.to_string()];
    cmd.extend(probe.argv);
    let body = ContainerCreateBody {
        image: Some(args.image_id.clone()),
        cmd: Some(cmd),
        user: Some(probe.user.to_string()),
        working_dir: Some("/".to_string()),
        labels: Some(HashMap::from([
            (LABEL_PROBE.to_string(), token.to_string()),
            (LABEL_CLUSTER.to_string(), args.cluster.clone()),
            (LABEL_ROLE.to_string(), "probe".to_string()),
        ])),
        host_config: Some(probe.host),
        ..Default::default()
    };
    docker::confined(body, &PYTHON, probe.caps)
}

/// The route probe's create request: the host's network namespace, nothing else.
pub fn route_body(args: &ProbeArgs, token: &str) -> ContainerCreateBody {
    let ranges: Vec<String> = args
        .ranges
        .iter()
        .map(|(lo, hi)| format!("{lo}-{hi}"))
        .collect();
    let argv = vec![
        args.head_address.clone(),
        args.gcs_port.to_string(),
        if args.dial { "1" } else { "0" }.to_string(),
        ranges.join(","),
    ];
    let host = HostConfig {
        network_mode: Some("host".to_string()),
        ..Default::default()
    };
    python_body(
        args,
        token,
        PythonProbe {
            script: SCRIPT,
            argv,
            user: NOBODY,
            host,
            caps: &[],
        },
    )
}

/// The holder scan's create request: the host's PID namespace, no network, root with
/// `CAP_SYS_PTRACE` (and `CAP_DAC_READ_SEARCH` when a socket is another user's).
pub fn holders_body(
    args: &ProbeArgs,
    sockets: &[Socket],
    budget_s: f64,
    token: &str,
) -> ContainerCreateBody {
    let inodes: Vec<&str> = sockets.iter().map(|s| s.inode.as_str()).collect();
    let mut caps = vec!["SYS_PTRACE"];
    if sockets.iter().any(|s| s.uid != 0) {
        caps.push("DAC_READ_SEARCH");
    }
    let host = HostConfig {
        network_mode: Some("none".to_string()),
        pid_mode: Some("host".to_string()),
        ..Default::default()
    };
    python_body(
        args,
        token,
        PythonProbe {
            script: HOLDERS_SCRIPT,
            argv: vec![inodes.join(","), format!("{budget_s:.2}")],
            user: ROOT,
            host,
            caps: &caps,
        },
    )
}

/// The last lines of a probe's output, for a message.
fn last_words(output: &str) -> String {
    let lines: Vec<&str> = output.trim().lines().collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    if tail.is_empty() {
        "(no output)".to_string()
    } else {
        tail.join(" | ")
    }
}

/// A short-lived probe container (labelled `token`) run to its end within `timeout`: what it
/// printed. Removed whatever happens (one that ran out of time by its label).
async fn run_bounded(
    docker: &Docker,
    body: ContainerCreateBody,
    token: &str,
    timeout: Duration,
) -> Result<String, String> {
    match tokio::time::timeout(timeout, docker::run_to_end(docker, body)).await {
        Ok(Ok((0, output))) => Ok(output),
        Ok(Ok((code, output))) => Err(format!(
            "the probe exited with code {code}: {}",
            last_words(&output)
        )),
        Ok(Err(e)) => Err(crate::exit::one_line(&e)),
        Err(_) => {
            remove_labelled(docker, &format!("{LABEL_PROBE}={token}")).await;
            Err(format!(
                "the probe did not end within {}s",
                timeout.as_secs()
            ))
        }
    }
}

/// Removes this cluster's probe containers on one host (both kinds carry the role
/// `probe`), bounded: what a probe cut short by the host's deadline could not remove.
pub async fn remove_probes(docker: &Docker, cluster: &str) {
    let remove = async {
        let label = format!("{LABEL_ROLE}=probe");
        let Ok(list) = docker::containers_labelled(docker, &label).await else {
            return;
        };
        for c in list {
            let ours = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_CLUSTER))
                .is_some_and(|name| name == cluster);
            if let (true, Some(id)) = (ours, c.id) {
                let options = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build();
                let _ = docker.remove_container(&id, Some(options)).await;
            }
        }
    };
    if tokio::time::timeout(PROBE_TIMEOUT, remove).await.is_err() {
        tracing::warn!(
            "probe containers of {cluster} not removed in time: `argus down` removes them"
        );
    }
}

/// Removes the containers carrying `label`, bounded (an engine that does not answer
/// leaves them to `down`: they carry the cluster's label).
async fn remove_labelled(docker: &Docker, label: &str) {
    let remove = async {
        let Ok(list) = docker::containers_labelled(docker, label).await else {
            return;
        };
        for c in list {
            if let Some(id) = c.id {
                let options = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build();
                let _ = docker.remove_container(&id, Some(options)).await;
            }
        }
    };
    if tokio::time::timeout(PROBE_TIMEOUT, remove).await.is_err() {
        tracing::warn!("probe containers ({label}) not removed in time: `argus down` removes them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The route probe gets the host's network and nothing else; the holder scan the host's
    /// PID namespace and `CAP_SYS_PTRACE`, no network; neither runs the image's
    /// site-packages, its entrypoint, or a preloaded library.
    #[test]
    fn each_probe_is_given_only_what_it_needs() {
        let args = ProbeArgs {
            image_id: "sha256:1".into(),
            head_address: "10.0.0.1".into(),
            gcs_port: 6379,
            ranges: vec![(20000, 20999)],
            cluster: "c".into(),
            ..Default::default()
        };
        let confined = |body: &ContainerCreateBody| {
            assert_eq!(
                body.entrypoint.clone().unwrap_or_default(),
                ["python3", "-I", "-S"]
            );
            let env = body.env.clone().unwrap_or_default();
            for var in ["LD_PRELOAD=", "LD_LIBRARY_PATH="] {
                assert!(env.iter().any(|e| e == var), "{env:?}");
            }
            let host = body.host_config.clone().unwrap_or_default();
            assert_eq!(host.cap_drop.unwrap_or_default(), ["ALL"]);
            assert_eq!(host.security_opt.unwrap_or_default(), ["no-new-privileges"]);
            assert_eq!(host.readonly_rootfs, Some(true));
            assert_eq!(host.privileged, None);
            assert_eq!(
                body.labels.clone().unwrap_or_default()["argus.role"],
                "probe"
            );
        };
        let route = route_body(&args, "t");
        confined(&route);
        let host = route.host_config.clone().unwrap_or_default();
        assert_eq!(host.network_mode.as_deref(), Some("host"));
        assert_eq!(host.pid_mode, None, "no host PID namespace");
        assert_eq!(host.cap_add.unwrap_or_default(), Vec::<String>::new());
        assert_eq!(route.user.as_deref(), Some("65534:65534"));
        let cmd = route.cmd.clone().unwrap_or_default();
        assert_eq!(cmd[1], SCRIPT);
        assert_eq!(cmd[2..], ["10.0.0.1", "6379", "0", "20000-20999"]);

        let root_socket = Socket {
            port: 20050,
            address: "0.0.0.0".into(),
            inode: "4242".into(),
            uid: 0,
        };
        let scan = holders_body(&args, std::slice::from_ref(&root_socket), 2.5, "t");
        confined(&scan);
        let host = scan.host_config.clone().unwrap_or_default();
        assert_eq!(host.pid_mode.as_deref(), Some("host"));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_add.unwrap_or_default(), ["SYS_PTRACE"]);
        assert_eq!(scan.cmd.clone().unwrap_or_default()[2..], ["4242", "2.50"]);
        // Another user's socket: its /proc/<pid>/fd lists for root only with DAC_READ_SEARCH.
        let users = Socket {
            uid: 1000,
            ..root_socket.clone()
        };
        let scan = holders_body(&args, &[root_socket, users], 2.5, "t");
        assert_eq!(
            scan.host_config
                .unwrap_or_default()
                .cap_add
                .unwrap_or_default(),
            ["SYS_PTRACE", "DAC_READ_SEARCH"]
        );
    }
}
