//! `argus --slurm-run RUN_ID doctor`: the checks of a Slurm run's nodes. A node's engine
//! is reached only on that node, so each node checks itself: one srun step per node, all
//! at once (`argus slurm doctor-node`), which dials the node's own engine with the job's
//! plan (its cluster name, its port slot, its GPUs) and prints its checks as JSON. Then,
//! on this machine, what only a comparison shows:
//!
//! - `clock`: the node's time, printed first thing by its step, against this machine's
//!   between the step's start and that line's arrival (srun's start-up is the round trip
//!   allowed for);
//! - `shared_storage`: a file this machine writes in the run's directory, read back by
//!   every node where its containers mount the storage (the node's view of `host_path`);
//! - `image`: each node's image against the run's (the id the login node archived), which
//!   the node step compares itself.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::attach::{self, Attached};
use super::{Error, plan_inputs};
use crate::cluster::doctor::{Check, HostReport, Report, Status, clock};
use crate::config::LoadedProfile;
use crate::ui::Reporter;

/// How long one node's step may take, srun's start included (its own checks are bounded
/// by the doctor's deadlines, well inside this).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// The most read of a step's stdout, and of its stderr.
const OUTPUT_CAP: u64 = 4 << 20;

/// What a node step prints: first its clock, then its checks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeLine {
    Clock {
        node: String,
        /// RFC 3339, UTC, when the step started.
        time: String,
    },
    Checks {
        node: String,
        /// Whether the node read the file this machine wrote (None: it did; else why not).
        shared: Option<String>,
        report: HostReport,
    },
}

/// The probe file's name in the run's `slurm/` directory, from its token.
fn probe_name(token: &str) -> Result<String, Error> {
    if token.len() != 16 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Invalid(format!(
            "doctor token {token:?} is not 16 hex digits"
        )));
    }
    Ok(format!("doctor-{token}"))
}

/// The probe file, removed when dropped (an error, a panic, or the end of the checks).
struct ProbeFile<'a>(super::RunFile<'a>);

impl Drop for ProbeFile<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.remove() {
            tracing::warn!("cannot remove {}: {e}", self.0.display());
        }
    }
}

/// Every node's checks, and the comparisons across them; `Unknown` checks for the nodes
/// that did not answer. The Slurm job must be running (its cluster exists only then).
pub async fn report(
    loaded: &LoadedProfile,
    run_id: &str,
    reporter: &dyn Reporter,
) -> Result<Report, Error> {
    let attached = attach::attach_nodes(loaded, run_id).await?;
    if !attached.live() {
        let state = attached.state.as_deref().unwrap_or("gone");
        return Ok(Report {
            hosts: vec![HostReport {
                host: crate::cluster::doctor::CLUSTER.into(),
                checks: vec![Check::unknown(
                    "node_step",
                    format!(
                        "Slurm job {} is {state}: its nodes no longer run the cluster",
                        attached.alloc.job_id
                    ),
                    "the checks run on the allocation's nodes, inside the job",
                )],
            }],
        });
    }
    let task = reporter.task("doctor");
    task.update(&format!(
        "checking {} node(s) through srun",
        attached.alloc.nodes.len()
    ));
    let started = std::time::Instant::now();
    let token = crate::digest::random_hex(8).map_err(|source| Error::Io {
        path: "random token".into(),
        source,
    })?;
    let argus = attach::node_binary(&attached.record)?;
    let name = probe_name(&token)?;
    let probe = ProbeFile(attached.files.doctor_probe(&name));
    probe
        .0
        .write_atomic(token.as_bytes())
        .map_err(probe.0.io())?;
    let steps = attached
        .alloc
        .nodes
        .iter()
        .map(|node| node_report(&attached, &argus, &node.name, &token));
    let hosts = futures_util::future::join_all(steps).await;
    drop(probe);
    task.done(&format!(
        "{} node(s) checked in {:.1}s",
        attached.alloc.nodes.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(Report { hosts })
}

/// One node's report through its step: its checks, with `clock` replaced by this
/// machine's reading of the node's time and `shared_storage` from the probe file.
async fn node_report(
    attached: &Attached,
    argus: &std::path::Path,
    node: &str,
    token: &str,
) -> HostReport {
    let run_id = attached.record.run_id.as_str();
    let args = ["slurm", "doctor-node", run_id, "--token", token];
    let mut command = attach::node_step(&attached.steps(argus), node, "argus-doctor", &args);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let sent = SystemTime::now();
    let failed = |why: String| HostReport {
        host: node.to_string(),
        checks: vec![Check {
            name: "node_step",
            status: Status::Unknown,
            seen: why,
            why: "each node is checked by a step of the run's Slurm job on it".into(),
            fix: format!(
                "`argus slurm status {run_id}` shows the nodes; `srun --jobid {} --overlap -w {node} true` tries a step there",
                attached.alloc.job_id
            ),
        }],
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot run srun: {e}")),
    };
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return failed("srun's output was not captured".into());
    };
    let read = async {
        // Both pipes at once (a step that fills its stderr first would otherwise stall),
        // each within its cap; a line that is not UTF-8 is passed over, not the end.
        let out = async {
            let mut lines = BufReader::new(stdout.take(OUTPUT_CAP)).split(b'\n');
            let mut clock_at = None;
            let mut checks = None;
            while let Ok(Some(line)) = lines.next_segment().await {
                match serde_json::from_slice::<NodeLine>(&line) {
                    Ok(NodeLine::Clock { node: n, time }) if n == node => {
                        clock_at = clock::Reading::new(&time, sent, SystemTime::now());
                    }
                    Ok(NodeLine::Checks {
                        node: n,
                        shared,
                        report,
                    }) if n == node => checks = Some((shared, report)),
                    _ => {}
                }
            }
            (clock_at, checks)
        };
        let err = async {
            let mut err = Vec::new();
            let _ = (&mut stderr).take(OUTPUT_CAP).read_to_end(&mut err).await;
            err
        };
        let ((clock_at, checks), err) = tokio::join!(out, err);
        let _ = child.wait().await;
        (clock_at, checks, err)
    };
    let (clock_at, checks, err) = match tokio::time::timeout(STEP_TIMEOUT, read).await {
        Ok(read) => read,
        Err(_) => {
            return failed(format!(
                "the step on {node} did not end within {}s",
                STEP_TIMEOUT.as_secs()
            ));
        }
    };
    let Some((shared, mut report)) = checks else {
        return failed(attach::step_failure(&err, "the step printed no checks"));
    };
    report.host = node.to_string();
    let target = attached.cluster.profile.container_layout();
    let target = target.mount();
    let storage = match shared {
        None => Check::ok(
            "shared_storage",
            format!("reads the file this machine wrote in the run's directory (mounted at {target} in its containers)"),
        ),
        Some(why) => Check {
            name: "shared_storage",
            status: Status::Fail,
            seen: why,
            why: "every node must see the same datasets, model cache, code snapshots and checkpoints: a node on another directory fails its job, or writes checkpoints nobody else sees".into(),
            fix: "mount the same storage (the NFS export) at shared.host_path on every node".into(),
        },
    };
    let mut clock_check = clock::check(clock_at);
    clock_check.seen = clock_check.seen.replace(
        "against this machine",
        "against this machine (through srun)",
    );
    report
        .checks
        .retain(|c| c.name != "clock" && c.name != "shared_storage");
    report
        .checks
        .insert(1.min(report.checks.len()), clock_check);
    report.checks.push(storage);
    report
}

/// The node step (`argus slurm doctor-node RUN_ID --token T`): prints the node's time at
/// once, then its checks against the job's plan and whether it reads the probe file.
pub async fn node_step(
    loaded: &LoadedProfile,
    run_id: &str,
    token: &str,
    print: &mut dyn FnMut(&NodeLine),
) -> Result<(), Error> {
    let name = probe_name(token)?;
    let me = super::node::node_name()?;
    print(&NodeLine::Clock {
        node: me.clone(),
        time: humantime::format_rfc3339_nanos(SystemTime::now()).to_string(),
    });
    let super::RunView {
        files,
        alloc,
        cluster,
        ..
    } = super::run_view(loaded, run_id)?;
    let record: super::record::SlurmRecord = super::read_json(&files.record())?;
    let mut inputs = plan_inputs(&alloc, &record.image_id, None);
    if let Some(iface) = super::node::collective_iface(&cluster, &alloc) {
        inputs.collective_iface.insert(me.clone(), iface);
    }
    let plan = crate::cluster::plan::plan(&cluster, &inputs);
    let report = crate::cluster::doctor::one_host(&cluster, &plan, &me, &record.image_id).await;
    let probe = files.doctor_probe(&name);
    let shared = match probe.read(64) {
        Ok(bytes) if bytes == token.as_bytes() => None,
        Ok(_) => Some(format!(
            "{} holds another token on node {me}",
            probe.display()
        )),
        Err(e) => Some(format!("node {me} cannot read {}: {e}", probe.display())),
    };
    print(&NodeLine::Checks {
        node: me,
        shared,
        report,
    });
    Ok(())
}
