//! `argus doctor --collective`: a real all-reduce between the worker containers of a running
//! cluster (torch.distributed: gloo on CPU, NCCL on real GPUs), one rank per worker through
//! the exec API, rendezvous on worker 0. Reports latency and bus bandwidth per pair of
//! workers (and for the whole ring with more than two), and names the worker that does not
//! answer: not running, paused, never at the rendezvous, or silent when the bound comes.
//!
//! The rank's script (`assets/doctor/allreduce.py`) takes everything from its environment and
//! ends by itself at the bound, so nothing is left running in a container.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use futures_util::future::join_all;

use super::{Check, HostReport, Status};
use crate::cluster::hosts::{self, Engine};
use crate::cluster::plan::{
    self, ContainerPlan, GpuAttach, NetworkAttach, PlanInputs, Role, block_base, ports_of_command,
};
use crate::config::LoadedProfile;
use crate::ui::Reporter;

const SCRIPT: &str = include_str!("../../../assets/doctor/allreduce.py");

/// Every worker must reach the rendezvous within this.
const JOIN_S: u64 = 45;
/// The whole collective, import of torch included; the ranks end themselves then.
const BOUND_S: u64 = 90;
/// A rank that printed nothing (not even its heartbeat) for this long does not answer.
const SILENT: Duration = Duration::from_secs(4);
/// A rank silent this long while another still speaks: the collective is stuck on it, and
/// argus stops waiting (the ranks end themselves at the bound).
const STALL: Duration = Duration::from_secs(10);
/// Once one rank has ended, how long the others get to end too.
const GRACE: Duration = Duration::from_secs(5);
/// The size of the bandwidth all-reduce.
const BYTES: u64 = 16 << 20;
/// Bridge network: the rendezvous port in worker 0's own network namespace.
const BRIDGE_PORT: u32 = 29500;
/// Host network: the rendezvous port's offset in worker 0's block (6-99: no Ray port).
const BLOCK_OFFSET: u32 = 50;

/// What the section of the report is called.
pub const SECTION: &str = "collective";

/// One worker taking part.
struct Rank {
    rank: usize,
    name: String,
    host: String,
    docker: Docker,
}

/// What one rank printed and how it ended.
#[derive(Default)]
struct RankOut {
    events: Vec<serde_json::Value>,
    last_output: Option<Instant>,
    exit_code: Option<i64>,
    /// The exec could not be made or read.
    failed: Option<String>,
    /// Still running when the bound came (or argus stopped waiting for it).
    timed_out: bool,
}

/// What the ranks' readers share: when each last printed, when the first one ended.
struct Shared {
    started: Instant,
    last: std::sync::Mutex<Vec<Option<Instant>>>,
    ended: std::sync::Mutex<Option<Instant>>,
}

impl Shared {
    fn heard(&self, rank: usize) {
        if let Ok(mut last) = self.last.lock()
            && let Some(slot) = last.get_mut(rank)
        {
            *slot = Some(Instant::now());
        }
    }

    fn end(&self) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert_with(Instant::now);
        }
    }

    /// Whether to stop waiting: a rank ended more than GRACE ago, or one has been silent
    /// for STALL while another spoke in the last two seconds.
    fn give_up(&self) -> bool {
        let now = Instant::now();
        if let Ok(ended) = self.ended.lock()
            && ended.is_some_and(|t| now.duration_since(t) > GRACE)
        {
            return true;
        }
        let Ok(last) = self.last.lock() else {
            return false;
        };
        let times: Vec<Instant> = last.iter().map(|t| t.unwrap_or(self.started)).collect();
        let stalled = times.iter().any(|t| now.duration_since(*t) > STALL);
        let speaking = times
            .iter()
            .any(|t| now.duration_since(*t) < Duration::from_secs(2));
        stalled && speaking
    }
}

fn check(status: Status, seen: String, why: &str, fix: &str) -> Check {
    Check {
        name: "collective",
        status,
        seen,
        why: why.to_string(),
        fix: fix.to_string(),
    }
}

fn report(checks: Vec<Check>) -> Vec<HostReport> {
    vec![HostReport {
        host: SECTION.to_string(),
        checks,
    }]
}

/// Runs the all-reduce between the cluster's workers and reports it.
pub async fn collective(loaded: &LoadedProfile, reporter: &dyn Reporter) -> Vec<HostReport> {
    let engines = match hosts::connect_every(loaded).await {
        Ok(engines) => engines,
        Err(e) => {
            return report(vec![check(
                Status::Unknown,
                crate::exit::one_line(&e),
                "the collective runs in the worker containers, through each host's engine",
                "see that every host's engine answers (`argus status`)",
            )]);
        }
    };
    let task = reporter.task("collective");
    task.update("finding the workers");
    let plan = plan::plan(loaded, &PlanInputs::default());
    let workers: Vec<&ContainerPlan> = plan
        .containers
        .iter()
        .filter(|c| c.role == Role::Worker)
        .collect();
    let mut checks = Vec::new();
    let mut ranks = Vec::new();
    let mut commands: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in &workers {
        let Some(engine) = hosts::engine(&engines, &w.host) else {
            continue;
        };
        match worker_state(engine, &w.name).await {
            Ok(command) => {
                commands.insert(w.name.clone(), command);
                ranks.push(Rank {
                    rank: ranks.len(),
                    name: w.name.clone(),
                    host: w.host.clone(),
                    docker: engine.docker.clone(),
                });
            }
            Err(state) => checks.push(check(
                Status::Fail,
                format!("worker {} on host {} {state}", w.name, w.host),
                "a worker that does not run takes no part in any collective: the job's ranks there never start",
                "`argus up` brings it back; `argus status` and `docker logs` say why it stopped",
            )),
        }
    }
    if ranks.len() < 2 {
        task.fail("not enough workers");
        let status = if checks.is_empty() {
            Status::Unknown
        } else {
            Status::Fail
        };
        checks.push(check(
            status,
            format!(
                "{} running worker(s) of {}: no collective between them",
                ranks.len(),
                workers.len()
            ),
            "an all-reduce needs two workers",
            "run `argus up` (a profile with at least two workers), then doctor --collective",
        ));
        return report(checks);
    }
    let (addr, port) = rendezvous(loaded, &plan, &ranks[0], &commands);
    let backend = if workers
        .iter()
        .any(|w| matches!(w.gpu, GpuAttach::Nvidia { .. }))
    {
        "nccl"
    } else {
        "gloo"
    };
    task.update(&format!(
        "all-reduce ({backend}) between {} workers, rendezvous {addr}:{port}",
        ranks.len()
    ));
    let world = ranks.len();
    // Marks this collective's processes (to stop those argus gives up on).
    let token = crate::digest::random_hex(8).unwrap_or_else(|_| std::process::id().to_string());
    let token = token.as_str();
    let started = Instant::now();
    let shared = Shared {
        started,
        last: std::sync::Mutex::new(vec![None; world]),
        ended: std::sync::Mutex::new(None),
    };
    let shared = &shared;
    let outs = join_all(ranks.iter().map(|r| {
        let env = vec![
            format!("ARGUS_RANK={}", r.rank),
            format!("ARGUS_WORLD={world}"),
            format!("ARGUS_MASTER_ADDR={addr}"),
            format!("ARGUS_MASTER_PORT={port}"),
            format!("ARGUS_BACKEND={backend}"),
            format!("ARGUS_JOIN_S={JOIN_S}"),
            format!("ARGUS_TIMEOUT_S={BOUND_S}"),
            format!("ARGUS_BYTES={BYTES}"),
            format!("ARGUS_COLLECTIVE={token}"),
        ];
        run_rank(r, env, shared)
    }))
    .await;
    let seconds = started.elapsed().as_secs_f64();
    stop_left(&ranks, &outs, token).await;
    checks.extend(judge(&ranks, &outs, &addr, port));
    if checks.iter().any(|c| c.status != Status::Ok) {
        task.fail(&format!("{seconds:.1}s"));
    } else {
        task.done(&format!("{world} workers in {seconds:.1}s"));
    }
    report(checks)
}

/// Whether a worker runs: its command (for its port block), else what it is instead.
async fn worker_state(engine: &Engine, name: &str) -> Result<Vec<String>, String> {
    let inspect = engine.docker.inspect_container(name, None);
    let info = tokio::time::timeout(super::CHECK_TIMEOUT, inspect)
        .await
        .map_err(|_| format!("did not answer within {}s", super::CHECK_TIMEOUT.as_secs()))?
        .map_err(|e| {
            if crate::cluster::docker::is_not_found(&e) {
                "does not exist (the cluster is not up)".to_string()
            } else {
                format!("cannot be inspected: {}", crate::exit::one_line(&e))
            }
        })?;
    let state = info.state.unwrap_or_default();
    if state.paused == Some(true) {
        return Err("is paused: it does not answer".into());
    }
    if state.running != Some(true) {
        return Err(format!(
            "is not running ({}, exit code {})",
            state
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown".into()),
            state.exit_code.unwrap_or_default()
        ));
    }
    Ok(info.config.and_then(|c| c.cmd).unwrap_or_default())
}

/// Where the ranks meet: worker 0's name on a bridge network (port 29500 of its own network
/// namespace); with host networking its host's address and a port of its block no Ray
/// process uses.
fn rendezvous(
    loaded: &LoadedProfile,
    plan: &plan::ClusterPlan,
    first: &Rank,
    commands: &BTreeMap<String, Vec<String>>,
) -> (String, u32) {
    let planned = plan.containers.iter().find(|c| c.name == first.name);
    if let Some(ContainerPlan {
        network: NetworkAttach::Bridge { .. },
        ..
    }) = planned
    {
        return (first.name.clone(), BRIDGE_PORT);
    }
    let address = plan
        .hosts
        .iter()
        .find(|h| h.name == first.host)
        .and_then(|h| h.address.clone())
        .filter(|_| loaded.has_hosts())
        .unwrap_or_else(|| "127.0.0.1".to_string());
    let block = commands
        .get(&first.name)
        .and_then(|cmd| ports_of_command(cmd.iter().map(String::as_str)).0)
        .unwrap_or(0);
    (address, block_base(block) + BLOCK_OFFSET)
}

/// One rank: the script through the exec API, its lines read until it ends or the bound.
async fn run_rank(r: &Rank, env: Vec<String>, shared: &Shared) -> RankOut {
    let out = read_rank(r, env, shared).await;
    shared.end();
    out
}

async fn read_rank(r: &Rank, env: Vec<String>, shared: &Shared) -> RankOut {
    let mut out = RankOut::default();
    let create = r.docker.create_exec(
        &r.name,
        CreateExecOptions {
            cmd: Some(vec![
                "python3".to_string(),
                "-c".to_string(),
                SCRIPT.to_string(),
            ]),
            env: Some(env),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        },
    );
    let exec = match tokio::time::timeout(super::CHECK_TIMEOUT, create).await {
        Ok(Ok(exec)) => exec,
        Ok(Err(e)) => {
            out.failed = Some(crate::exit::one_line(&e));
            return out;
        }
        Err(_) => {
            out.failed = Some(format!(
                "its engine did not create the exec within {}s",
                super::CHECK_TIMEOUT.as_secs()
            ));
            return out;
        }
    };
    let start = tokio::time::timeout(super::CHECK_TIMEOUT, r.docker.start_exec(&exec.id, None));
    let started = match start.await.unwrap_or_else(|_| {
        Err(bollard::errors::Error::IOError {
            err: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "its engine did not start the exec in time",
            ),
        })
    }) {
        Ok(StartExecResults::Attached { output, .. }) => output,
        Ok(StartExecResults::Detached) => {
            out.failed = Some("the exec did not attach".into());
            return out;
        }
        Err(e) => {
            out.failed = Some(crate::exit::one_line(&e));
            return out;
        }
    };
    let mut output = started;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(BOUND_S + 5);
    let mut pending = String::new();
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline || shared.give_up() {
            out.timed_out = true;
            break;
        }
        let tick = deadline.min(now + Duration::from_millis(500));
        match tokio::time::timeout_at(tick, output.next()).await {
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                out.failed = Some(crate::exit::one_line(&e));
                break;
            }
            Ok(Some(Ok(chunk))) => {
                out.last_output = Some(Instant::now());
                shared.heard(r.rank);
                pending.push_str(&chunk.to_string());
                while let Some(at) = pending.find('\n') {
                    let line: String = pending.drain(..=at).collect();
                    if let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim()) {
                        out.events.push(value);
                    } else if !line.trim().is_empty() {
                        tracing::debug!("rank {} ({}): {}", r.rank, r.name, line.trim());
                    }
                }
            }
        }
    }
    if !out.timed_out
        && let Ok(Ok(info)) =
            tokio::time::timeout(super::CHECK_TIMEOUT, r.docker.inspect_exec(&exec.id)).await
    {
        out.exit_code = info.exit_code;
    }
    out
}

/// Kills, in a worker, every process of this collective (its environment carries `token`):
/// what argus stopped waiting for is not left to its own bound. (A paused container's is
/// not reachable: it ends itself at the bound once resumed.)
const KILL_RANKS: &str = "import os, signal, sys
want = ('ARGUS_COLLECTIVE=' + sys.argv[1]).encode()
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        with open('/proc/%s/environ' % pid, 'rb') as f:
            if want in f.read().split(b'\\0') and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
";

async fn stop_left(ranks: &[Rank], outs: &[RankOut], token: &str) {
    join_all(
        ranks
            .iter()
            .zip(outs)
            .filter(|(_, o)| o.timed_out)
            .map(|(r, _)| async move {
                let kill = ["python3", "-c", KILL_RANKS, token];
                let exec = crate::cluster::docker::exec_output(&r.docker, &r.name, &kill);
                if tokio::time::timeout(GRACE + super::CHECK_TIMEOUT, exec).await.is_err() {
                    tracing::warn!(
                        "{}: the collective's ranks could not be killed in time; they end themselves at {BOUND_S}s",
                        r.name
                    );
                }
            }),
    )
    .await;
}

fn event<'a>(out: &'a RankOut, kind: &str) -> Option<&'a serde_json::Value> {
    out.events.iter().find(|e| e["event"] == kind)
}

fn who(r: &Rank) -> String {
    format!("worker {} (rank {}, host {})", r.name, r.rank, r.host)
}

/// The checks from what the ranks printed: a line per pair (and the ring), or the workers
/// that did not answer.
fn judge(ranks: &[Rank], outs: &[RankOut], addr: &str, port: u32) -> Vec<Check> {
    if let Some(no_torch) = no_torch(outs) {
        return vec![no_torch];
    }
    let mut checks = measured(ranks, outs);
    let all_done = outs.iter().all(|o| event(o, "done").is_some());
    if all_done && !checks.is_empty() {
        return checks;
    }
    let mut named = not_answering(ranks, outs, addr, port);
    if named.is_empty() {
        named = own_errors(ranks, outs);
    }
    if named.is_empty() {
        named.push("the all-reduce did not report its numbers".into());
    }
    checks.push(check(
        Status::Fail,
        named.join("; "),
        "every rank of a collective waits for the slowest: one worker that does not answer hangs the whole job until NCCL's or Gloo's timeout",
        "look at that worker: `argus status`, `docker logs` on its host, the host's network to worker 0 (doctor's head_route and collective_iface)",
    ));
    checks
}

/// The image has no torch: the one check then.
fn no_torch(outs: &[RankOut]) -> Option<Check> {
    let no_torch = outs.iter().find_map(|o| event(o, "no_torch"))?;
    Some(check(
        Status::Unknown,
        format!(
            "the cluster's image has no torch ({})",
            no_torch["error"].as_str().unwrap_or("ImportError")
        ),
        "the collective is torch.distributed's all-reduce, run in the worker containers",
        "use the verl image (image: argus/verl:0.9.1-cpu, built by `argus image build --verl`), or any image with torch, then `argus up` and doctor --collective again",
    ))
}

/// A line per pair (and the ring) the ranks measured.
fn measured(ranks: &[Rank], outs: &[RankOut]) -> Vec<Check> {
    let mut checks = Vec::new();
    let name = |i: u64| {
        ranks
            .get(i as usize)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| format!("rank {i}"))
    };
    let host_of = |i: u64| {
        ranks
            .get(i as usize)
            .map(|r| r.host.clone())
            .unwrap_or_default()
    };
    for out in outs {
        for e in out
            .events
            .iter()
            .filter(|e| e["event"] == "pair" || e["event"] == "ring")
        {
            let lat = e["lat_us"].as_f64().unwrap_or_default();
            let gbps = e["gbps"].as_f64().unwrap_or_default();
            let mib = e["bytes"].as_u64().unwrap_or_default() >> 20;
            let backend = e["backend"].as_str().unwrap_or("?");
            let what = if e["event"] == "pair" {
                let (a, b) = (
                    e["a"].as_u64().unwrap_or_default(),
                    e["b"].as_u64().unwrap_or_default(),
                );
                format!(
                    "pair {} (host {}) <-> {} (host {})",
                    name(a),
                    host_of(a),
                    name(b),
                    host_of(b)
                )
            } else {
                format!("ring of all {} workers", ranks.len())
            };
            checks.push(check(
                Status::Ok,
                format!(
                    "{what}: latency {lat:.0} µs, bus bandwidth {gbps:.3} GB/s ({backend} all-reduce of {mib} MiB)"
                ),
                "",
                "",
            ));
        }
    }
    checks
}

/// The workers that did not answer: could not be started, never at the rendezvous, killed,
/// or silent.
fn not_answering(ranks: &[Rank], outs: &[RankOut], addr: &str, port: u32) -> Vec<String> {
    let missing: Vec<u64> = outs
        .iter()
        .find_map(|o| event(o, "missing"))
        .and_then(|e| e["ranks"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let latest = outs.iter().filter_map(|o| o.last_output).max();
    let mut named = Vec::new();
    for (r, out) in ranks.iter().zip(outs) {
        let reason = if let Some(failed) = &out.failed {
            Some(format!("could not be run in: {failed}"))
        } else if missing.contains(&(r.rank as u64)) {
            Some(format!(
                "never reached the rendezvous at {addr}:{port} within {JOIN_S}s"
            ))
        } else if event(out, "done").is_none()
            && event(out, "error").is_none()
            && !out.timed_out
            && out.exit_code != Some(4)
        {
            Some(format!(
                "ended without a word: its rank's process exited with code {} (killed?)",
                out.exit_code
                    .map_or_else(|| "unknown".into(), |c| c.to_string())
            ))
        } else if out.last_output.is_none() {
            Some("does not answer: its rank printed nothing".to_string())
        } else if let (Some(last), Some(latest)) = (out.last_output, latest)
            && latest.duration_since(last) > SILENT
        {
            Some(format!(
                "does not answer: silent for {:.0}s while the others still spoke (frozen or paused)",
                latest.duration_since(last).as_secs_f64()
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            named.push(format!("{} {reason}", who(r)));
        }
    }
    named
}

/// Everyone answered but it failed: their own words.
fn own_errors(ranks: &[Rank], outs: &[RankOut]) -> Vec<String> {
    let mut named = Vec::new();
    for (r, out) in ranks.iter().zip(outs) {
        if let Some(e) = event(out, "error") {
            named.push(format!(
                "{}: {}",
                who(r),
                e["error"].as_str().unwrap_or("error")
            ));
        } else if out.timed_out {
            named.push(format!("{} did not finish within {BOUND_S}s", who(r)));
        }
    }
    named
}
