//! `argus slurm run <run_id>`: the batch step, on the allocation's first node.
//!
//! It reads the allocation, claims the job's port slot on its nodes, writes the
//! allocation for the node steps, starts them (one `srun --overlap` task per node), waits
//! until Ray has exactly the planned nodes ALIVE at the nodes' addresses, submits the
//! run's job the way `argus run` does (`submit::prepare`, one JobSpec one job), follows it
//! to its end, ends the node steps (their containers go with them) and returns the job's
//! exit code. Slurm ending the batch step (scancel, the time limit) ends the node steps
//! too; the batch step then records why and leaves.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::alloc::{self, Alloc};
use super::record::{BatchReport, SlurmRecord};
use super::{Error, RunFiles, cluster_profile, plan_inputs, ports, supervise};
use crate::config::jobspec::LoadedJobSpec;
use crate::config::{Layout, LoadedProfile};
use crate::exit::Exit;
use crate::ray::RayClient;
use crate::records::Records;
use crate::submit::Target;

/// How long the node steps get to remove their containers once told to end.
const NODE_STOP_GRACE: Duration = Duration::from_secs(60);

/// The batch step; the exit code is the job's.
pub async fn run(
    loaded: &LoadedProfile,
    run_id: &str,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Exit, Error> {
    let started = Instant::now();
    // Slurm's warning before the allocation's end (`--signal=B:USR1@..`, supervised runs):
    // listened for first, or it would end the process.
    let mut usr1 = signal(tokio::signal::unix::SignalKind::user_defined1(), "SIGUSR1")?;
    let (layout, files) = super::open_run(loaded, run_id)?;
    let record: SlurmRecord = super::read_json(&files.record())?;
    let job = staged_job(&files)?;
    // `ray.auth: token`: the token came with the batch step's environment, looked up as the
    // node steps and the login node look it up (by the profile's name, not the cluster's),
    // before anything is claimed.
    let token = crate::cluster::auth::cluster_token(loaded, false)?;
    let job_id = alloc::job_id_from_env()?;
    let mut alloc: Alloc = tokio::task::spawn_blocking(move || alloc::read(job_id))
        .await
        .map_err(|e| Error::Allocation(e.to_string()))??;
    let names: Vec<String> = alloc.nodes.iter().map(|n| n.name.clone()).collect();
    let (slots, slot) = claim_slot(&layout, job_id, &names).await?;
    alloc.slot = slot;
    let stop = files.stop();
    stop.remove().map_err(stop.io())?;
    super::write_json(&files.alloc(), &alloc)?;
    let cluster = cluster_profile(loaded, &alloc)?;
    let mut report = BatchReport {
        slurm_job_id: job_id,
        cluster: cluster.profile.name.clone(),
        nodes: alloc.nodes.clone(),
        slot: alloc.slot,
        stage: "nodes".into(),
        restart: job.spec.restart.clone(),
        requeues: std::env::var("SLURM_RESTART_COUNT")
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0),
        ..Default::default()
    };
    // Started again on a new allocation (requeued): the run goes on as its next attempt,
    // unless it is over.
    let previous = super::read_json::<BatchReport>(&files.batch())
        .ok()
        .filter(|b| b.slurm_job_id == job_id);
    if let Some(exit) = supervise::carry_over(previous, &mut report) {
        ports::release(&slots, job_id, &names);
        return over(&files, &mut report, run_id, exit);
    }
    super::write_json(&files.batch(), &report)?;
    eprintln!(
        "argus: Slurm job {job_id}: cluster {} on {} (port slot {})",
        report.cluster,
        names.join(", "),
        alloc.slot
    );

    let mut nodes = start_node_steps(loaded, run_id, names.len())?;
    let mut term = signal(tokio::signal::unix::SignalKind::terminate(), "SIGTERM")?;
    let batch = Batch {
        cluster: &cluster,
        layout: &layout,
        alloc: &alloc,
        record: &record,
        files: &files,
        job: &job,
        started,
    };
    let outcome = tokio::select! {
        r = stages(&batch, token, &mut report, &mut nodes, &mut usr1, on_log) => r,
        _ = term.recv() => Err(Error::Allocation("Slurm ended the batch step (scancel, the time limit, a node failure)".into())),
    };
    if !matches!(outcome, Ok(supervise::Outcome::Done(..))) {
        // The job did not end before the batch step: its records must not say it runs.
        let settled = super::attach::settle_records(
            &layout,
            &cluster.profile.name,
            job_id,
            "the batch step stopped: scancel, the time limit or an error",
        );
        if !settled.is_empty() {
            eprintln!("argus: recorded as stopped: {}", settled.join(", "));
        }
    }
    // The node steps remove their containers when they end.
    stop_node_steps(&files, &mut nodes).await;
    ports::release(&slots, job_id, &names);
    record_outcome(&mut report, &outcome);
    super::write_json(&files.batch(), &report)?;
    let (status, message) = match outcome? {
        supervise::Outcome::Done(status, message) => (status, message),
        supervise::Outcome::Requeue(why) => {
            eprintln!("argus: run {run_id} continues in a new allocation: {why}");
            if let Err(e) = supervise::requeue(job_id).await {
                report.stage = "done".into();
                report.error = Some(crate::exit::one_line(&e));
                super::write_json(&files.batch(), &report)?;
                return Err(e);
            }
            return Ok(Exit::Stopped);
        }
    };
    eprintln!(
        "argus: job {} {status}{}",
        report
            .attempts
            .last()
            .map_or(record.submission_id.as_str(), |a| a.submission_id.as_str()),
        message.map(|m| format!(": {m}")).unwrap_or_default()
    );
    Ok(status.exit())
}

/// How the batch step's stages ended, into its report.
fn record_outcome(report: &mut BatchReport, outcome: &Result<supervise::Outcome, Error>) {
    match outcome {
        Ok(supervise::Outcome::Done(status, _)) => {
            report.stage = "done".into();
            report.job_status = Some(status.to_string());
            report.exit_code = Some(status.exit() as i32);
        }
        Ok(supervise::Outcome::Requeue(_)) => report.stage = "requeued".into(),
        Err(e) => report.error = Some(crate::exit::one_line(e)),
    }
}

/// Claims the job's port slot on its nodes: the slots' directory, the slot.
async fn claim_slot(
    layout: &Layout,
    job_id: u64,
    names: &[String],
) -> Result<(crate::fsx::Dir, u32), Error> {
    let slots = layout
        .create_dirs(super::SLOTS_DIR)
        .map_err(|source| Error::Io {
            path: layout.root().join(super::SLOTS_DIR),
            source,
        })?;
    let held = slots.try_clone().map_err(|source| Error::Io {
        path: slots.path().to_path_buf(),
        source,
    })?;
    let names = names.to_vec();
    let slot = tokio::task::spawn_blocking(move || {
        ports::claim(&held, job_id, &names, &mut |job| {
            alloc::job_state(job)
                .map(|s| s.is_some_and(|s| alloc::is_alive(&s)))
                .unwrap_or(true)
        })
    })
    .await
    .map_err(|e| Error::Allocation(e.to_string()))??;
    Ok((slots, slot))
}

/// A requeued batch whose run is over (past its restarts, or not restartable): recorded
/// as done with the last attempt's end; its exit code.
fn over(
    files: &RunFiles,
    report: &mut BatchReport,
    run_id: &str,
    exit: Exit,
) -> Result<Exit, Error> {
    report.stage = "done".into();
    report.job_status = Some(supervise::last_status(&report.attempts).to_string());
    report.exit_code = Some(exit as i32);
    super::write_json(&files.batch(), report)?;
    eprintln!(
        "argus: run {run_id} is over after {} attempt(s): {}",
        report.attempts.len(),
        report.job_status.as_deref().unwrap_or_default()
    );
    Ok(exit)
}

/// `srun` of `argus slurm node` on every node, in the background.
fn start_node_steps(
    loaded: &LoadedProfile,
    run_id: &str,
    nodes: usize,
) -> Result<tokio::process::Child, Error> {
    let argus = std::env::current_exe().map_err(|source| Error::Spawn {
        program: "argus (its own path)".into(),
        source,
    })?;
    let profile = loaded.source.origin.clone();
    let n = nodes.to_string();
    let mut srun = super::srun();
    srun.args([
        "--overlap",
        "--nodes",
        &n,
        "--ntasks",
        &n,
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        "--job-name=argus-node",
    ])
    .arg(argus)
    .arg("--no-progress")
    .arg("-p")
    .arg(profile)
    .args(["slurm", "node", run_id])
    .stdin(Stdio::null())
    .kill_on_drop(true)
    .spawn()
    .map_err(|source| Error::Spawn {
        program: "srun".into(),
        source,
    })
}

/// Tells the node steps to end and waits for them: through a file on the shared storage,
/// since srun, told SIGTERM, kills its tasks outright (they would leave their containers).
async fn stop_node_steps(files: &RunFiles, child: &mut tokio::process::Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Err(e) = files.stop().write_atomic(b"stop\n") {
        eprintln!("argus: cannot tell the node steps to stop: {e}");
    }
    if tokio::time::timeout(NODE_STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// What the batch step's stages share.
struct Batch<'a> {
    cluster: &'a LoadedProfile,
    layout: &'a Layout,
    alloc: &'a Alloc,
    record: &'a SlurmRecord,
    files: &'a RunFiles,
    /// The JobSpec as staged on the login node.
    job: &'a LoadedJobSpec,
    started: Instant,
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
    name: &str,
) -> Result<tokio::signal::unix::Signal, Error> {
    tokio::signal::unix::signal(kind).map_err(|source| Error::Io {
        path: name.into(),
        source,
    })
}

/// The JobSpec as the login node resolved it (code pinned), from the run's files.
fn staged_job(files: &RunFiles) -> Result<LoadedJobSpec, Error> {
    let jobspec = files.jobspec();
    let bytes = jobspec.read(super::FILE_CAP).map_err(jobspec.io())?;
    let text = String::from_utf8(bytes)
        .map_err(|e| Error::Invalid(format!("{}: {e}", jobspec.display())))?;
    Ok(crate::inputs::recorded::from_text(
        &text,
        &jobspec.display().to_string(),
    )?)
}

async fn stages(
    batch: &Batch<'_>,
    token: Option<String>,
    report: &mut BatchReport,
    nodes: &mut tokio::process::Child,
    usr1: &mut tokio::signal::unix::Signal,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<supervise::Outcome, Error> {
    let Batch {
        cluster,
        layout,
        alloc,
        record,
        files,
        job,
        started,
    } = *batch;
    // Ready: exactly the planned nodes ALIVE, each at its node's address.
    let plan = crate::cluster::plan::plan(
        cluster,
        &plan_inputs(alloc, &record.image_id, token.clone()),
    );
    let ray = RayClient::new(&cluster.dashboard_url(), token);
    let timeout = Duration::from_secs(cluster.profile.ray.ready_timeout_s);
    let deadline = tokio::time::Instant::now() + timeout;
    let incarnations = Default::default();
    let ready =
        crate::cluster::ready::wait_ready(&ray, &plan.containers, &incarnations, deadline, |_| {});
    tokio::select! {
        r = ready => if let Err((readiness, error)) = r {
            let mut detail: Vec<String> = readiness
                .missing
                .iter()
                .map(|(name, problem)| format!("{name}: {problem}"))
                .collect();
            if let Some(e) = error {
                detail.push(format!("last error: {e}"));
            }
            return Err(crate::cluster::Error::NotReady {
                seconds: timeout.as_secs(),
                detail: detail.join("; "),
            }
            .into());
        },
        status = nodes.wait() => {
            return Err(Error::Allocation(format!(
                "the node steps ended before Ray was ready ({}); see the batch output",
                status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())
            )));
        }
    }
    report.seconds_to_ready = Some(started.elapsed().as_secs_f64());
    report.stage = "submit".into();
    super::write_json(&files.batch(), report)?;
    eprintln!(
        "argus: {} Ray nodes ALIVE after {:.1}s",
        plan.containers.len(),
        started.elapsed().as_secs_f64()
    );

    // Submit: the JobSpec as the login node resolved it, through `submit::prepare`; a
    // supervised run's next attempts from its newest complete checkpoint.
    let target = Target::from_profile(cluster, ray);
    let records = Records::new(layout.jobs());
    // An attempt that fails, hangs or loses a node gets its failure bundle, each node's
    // part through a step on that node (this argus, which the nodes run too).
    let argus = std::env::current_exe().map_err(|source| Error::Spawn {
        program: "argus (its own path)".into(),
        source,
    })?;
    let bundle_nodes = super::collect::SlurmNodes::new(
        &record.run_id,
        alloc.job_id,
        files.profile_path(),
        argus,
        cluster,
    );
    let ctx = supervise::Ctx {
        target: &target,
        files,
        records: &records,
        first_id: &record.submission_id,
        job,
        plan: &plan.containers,
        cluster,
        bundle_nodes: &bundle_nodes,
    };
    supervise::attempts(&ctx, report, nodes, usr1, on_log).await
}
