//! The `ports` check: the host ports each node of the cluster needs on its host (with host
//! networking its block of 1,000 and the head's own ports; on a bridge network the head's
//! published dashboard) free there, and who holds them when not. Listeners of the cluster's
//! own containers are not findings: doctor on a running cluster finds nothing.
//!
//! Which ports are the nodes' is the plan's (the blocks `up` would choose, clear of other
//! argus clusters; a clash with one is named by `network`); who listens is the network
//! probe's (`network`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Check, Status};
use crate::cluster::plan::{self, ClusterPlan, block_base, ports_of_command};
use crate::config::LoadedProfile;
use crate::config::profile::HOST_MODE_PORT_BLOCK;

/// A process holding a socket.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    /// The id of the container it runs in (from its cgroup), if any.
    pub container: Option<String>,
}

/// A TCP socket listening on one of the ports looked at.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Listener {
    pub port: u16,
    pub address: String,
    pub pids: Vec<Holder>,
    /// Held by the cluster's own containers only.
    pub own: bool,
}

/// Host ports one node needs, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub node: String,
    /// `port block`, `gcs_port`, `dashboard_port`.
    pub what: &'static str,
    pub lo: u32,
    pub hi: u32,
}

/// Within a block, the offset from which Ray hands ports to worker processes.
const WORKER_OFFSET: u32 = 100;

/// The ports the plan's nodes on `host` need there.
pub fn needs_on(plan: &ClusterPlan, loaded: &LoadedProfile, host: &str) -> Vec<Need> {
    let p = &loaded.profile;
    let mut needs = Vec::new();
    for c in plan.containers.iter().filter(|c| c.host == host) {
        let (block, _) = ports_of_command(c.command.iter().map(String::as_str));
        if let Some(block) = block {
            needs.push(Need {
                node: c.name.clone(),
                what: "port block",
                lo: block_base(block),
                hi: block_base(block) + HOST_MODE_PORT_BLOCK - 1,
            });
            if c.role == plan::Role::Head {
                for (what, port) in [
                    ("gcs_port", p.ray.gcs_port),
                    ("dashboard_port", p.ray.dashboard_port),
                ] {
                    needs.push(Need {
                        node: c.name.clone(),
                        what,
                        lo: u32::from(port),
                        hi: u32::from(port),
                    });
                }
            }
        }
        for (_, _, host_port) in &c.ports {
            needs.push(Need {
                node: c.name.clone(),
                what: "dashboard_port",
                lo: u32::from(*host_port),
                hi: u32::from(*host_port),
            });
        }
    }
    needs
}

/// The port ranges to ask the probe about.
pub fn ranges(needs: &[Need]) -> Vec<(u32, u32)> {
    needs.iter().map(|n| (n.lo, n.hi)).collect()
}

/// Whether a listener is the cluster's own: the probe matched its holders to the cluster's
/// containers, or it is Docker's proxy of a port the cluster's running head publishes.
fn is_own(listener: &Listener, own_published: &[u16]) -> bool {
    listener.own
        || (!listener.pids.is_empty()
            && listener.pids.iter().all(|h| h.comm == "docker-proxy")
            && own_published.contains(&listener.port))
}

/// Who holds a port, for a message: `python3 (pid 4242: python3 -m http.server 21050)`.
fn holder_text(listener: &Listener) -> String {
    if listener.pids.is_empty() {
        return "a process argus could not name (another PID namespace, or the scan ran out of time)".into();
    }
    listener
        .pids
        .iter()
        .map(|h| {
            let mut text = format!("{} (pid {}", h.comm, h.pid);
            if !h.cmdline.is_empty() {
                // Another process's command line may carry a password (`-pS3cret`).
                let args: Vec<&str> = h.cmdline.split_whitespace().collect();
                let cmd = crate::secrets::redact_args(&args, 80);
                text.push_str(&format!(": {cmd}"));
            }
            if let Some(id) = &h.container {
                let short: String = id.chars().take(12).collect();
                text.push_str(&format!("; in container {short}"));
            }
            text.push(')');
            text
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `ports` check of one host.
pub fn ports_check(
    host: &str,
    needs: &[Need],
    listeners: &[Listener],
    partial: bool,
    own_published: &[u16],
) -> Check {
    let total: u32 = needs.iter().map(|n| n.hi - n.lo + 1).sum();
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let mut pids: BTreeMap<u32, String> = BTreeMap::new();
    for listener in listeners.iter().filter(|l| !is_own(l, own_published)) {
        let port = u32::from(listener.port);
        let Some(need) = needs.iter().find(|n| (n.lo..=n.hi).contains(&port)) else {
            continue;
        };
        let worker_port = need.what == "port block" && port - need.lo >= WORKER_OFFSET;
        let text = format!(
            "port {port} ({} of {}) on {} is held by {}",
            need.what,
            need.node,
            listener.address,
            holder_text(listener)
        );
        for h in &listener.pids {
            pids.insert(h.pid, h.comm.clone());
        }
        if worker_port { &mut warns } else { &mut fails }.push(text);
    }
    if fails.is_empty() && warns.is_empty() {
        let mut seen_text = format!(
            "{total} port(s) of {} node(s) free{}",
            needs
                .iter()
                .map(|n| n.node.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            if listeners.is_empty() {
                ""
            } else {
                " (or the cluster's own)"
            }
        );
        if needs.is_empty() {
            seen_text = format!("no node of the cluster needs a port of host {host}");
        }
        return Check {
            name: "ports",
            status: Status::Ok,
            seen: seen_text,
            why: String::new(),
            fix: String::new(),
        };
    }
    let stop = pids
        .iter()
        .map(|(pid, comm)| format!("{comm} (pid {pid})"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut all = fails.clone();
    all.extend(warns.iter().cloned());
    let status = if fails.is_empty() {
        Status::Warn
    } else {
        Status::Fail
    };
    Check {
        name: "ports",
        status,
        seen: all.join("; "),
        why: if fails.is_empty() {
            "Ray hands the ports of a node's block to its worker processes: a worker given a port already taken fails to start".into()
        } else {
            "Ray binds these ports when the node starts: the node does not start (or the head never serves) while another process holds one".into()
        },
        fix: format!(
            "on host {host}, stop {stop} or move it off these ports; argus keeps clear of other argus clusters, not of other programs{}",
            if partial {
                " (the scan of processes ran out of time: some holders may be unnamed)"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(port: u16, comm: &str, own: bool) -> Listener {
        Listener {
            port,
            address: "0.0.0.0".into(),
            pids: vec![Holder {
                pid: 42,
                comm: comm.into(),
                cmdline: format!("{comm} -m http.server {port}"),
                container: None,
            }],
            own,
        }
    }

    fn needs() -> Vec<Need> {
        vec![Need {
            node: "c-gpu-0".into(),
            what: "port block",
            lo: 21000,
            hi: 21999,
        }]
    }

    #[test]
    fn a_port_of_a_block_held_by_another_process_names_it() {
        let seen = [
            listener(21002, "python3", false),
            listener(21003, "raylet", true),
        ];
        let check = ports_check("b", &needs(), &seen, false, &[]);
        assert_eq!(check.status, Status::Fail);
        assert!(check.seen.contains("port 21002"), "{}", check.seen);
        assert!(check.seen.contains("python3 (pid 42"), "{}", check.seen);
        assert!(!check.seen.contains("21003"), "{}", check.seen);
        assert!(
            check.fix.contains("on host b, stop python3 (pid 42)"),
            "{}",
            check.fix
        );
        // A worker port: a warning.
        let seen = [listener(21500, "nc", false)];
        assert_eq!(
            ports_check("b", &needs(), &seen, false, &[]).status,
            Status::Warn
        );
        // Docker's proxy of the cluster's own published port.
        let seen = [listener(21001, "docker-proxy", false)];
        assert_eq!(
            ports_check("b", &needs(), &seen, false, &[21001]).status,
            Status::Ok
        );
    }
}
