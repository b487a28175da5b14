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
use super::{Error, RunFiles, cluster_profile, plan_inputs, ports};
use crate::config::{Layout, LoadedProfile};
use crate::exit::Exit;
use crate::ray::RayClient;
use crate::ray::jobs::JobStatus;
use crate::records::Records;
use crate::submit::watch::WaitOptions;
use crate::submit::{self, Target};

/// Where a job's records keep its driver log.
const LOGS: &str = "logs";
const DRIVER_LOG: &str = "driver.log";

/// How long the node steps get to remove their containers once told to end.
const NODE_STOP_GRACE: Duration = Duration::from_secs(60);

/// The batch step; the exit code is the job's.
pub async fn run(
    loaded: &LoadedProfile,
    run_id: &str,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Exit, Error> {
    let started = Instant::now();
    let layout = loaded.host_layout()?;
    let files = RunFiles::open(&layout, run_id).map_err(|source| Error::Io {
        path: RunFiles::new(&layout, run_id).path(),
        source,
    })?;
    files.check_profile(loaded)?;
    let record: SlurmRecord = super::read_json(&files.record())?;
    // `ray.auth: token`: the token came with the batch step's environment, looked up as the
    // node steps and the login node look it up (by the profile's name, not the cluster's),
    // before anything is claimed.
    let token = crate::cluster::auth::cluster_token(loaded, false)?;
    let job_id = alloc::job_id_from_env()?;
    let mut alloc: Alloc = tokio::task::spawn_blocking(move || alloc::read(job_id))
        .await
        .map_err(|e| Error::Allocation(e.to_string()))??;
    let names: Vec<String> = alloc.nodes.iter().map(|n| n.name.clone()).collect();
    let slots = layout
        .create_dirs(super::SLOTS_DIR)
        .map_err(|source| Error::Io {
            path: layout.root().join(super::SLOTS_DIR),
            source,
        })?;
    alloc.slot = {
        let names = names.clone();
        let slots = slots.try_clone().map_err(|source| Error::Io {
            path: slots.path().to_path_buf(),
            source,
        })?;
        tokio::task::spawn_blocking(move || {
            ports::claim(&slots, job_id, &names, &mut |job| {
                alloc::job_state(job)
                    .map(|s| s.is_some_and(|s| alloc::is_alive(&s)))
                    .unwrap_or(true)
            })
        })
        .await
        .map_err(|e| Error::Allocation(e.to_string()))??
    };
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
        ..Default::default()
    };
    super::write_json(&files.batch(), &report)?;
    eprintln!(
        "argus: Slurm job {job_id}: cluster {} on {} (port slot {})",
        report.cluster,
        names.join(", "),
        alloc.slot
    );

    let mut nodes = start_node_steps(loaded, run_id, names.len())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| Error::Io {
            path: "SIGTERM".into(),
            source,
        })?;
    let outcome = tokio::select! {
        r = stages(&cluster, &layout, token, &alloc, &record, &files, &mut report, started, &mut nodes, on_log) => r,
        _ = term.recv() => Err(Error::Allocation("Slurm ended the batch step (scancel or the time limit)".into())),
    };
    if outcome.is_err() {
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
    match &outcome {
        Ok((status, _)) => {
            report.stage = "done".into();
            report.job_status = Some(status.to_string());
            report.exit_code = Some(status.exit() as i32);
        }
        Err(e) => {
            report.error = Some(crate::exit::one_line(e));
        }
    }
    super::write_json(&files.batch(), &report)?;
    let (status, message) = outcome?;
    eprintln!(
        "argus: job {} {status}{}",
        record.submission_id,
        message.map(|m| format!(": {m}")).unwrap_or_default()
    );
    Ok(status.exit())
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

#[allow(clippy::too_many_arguments)]
async fn stages(
    cluster: &LoadedProfile,
    layout: &Layout,
    token: Option<String>,
    alloc: &Alloc,
    record: &SlurmRecord,
    files: &RunFiles,
    report: &mut BatchReport,
    started: Instant,
    nodes: &mut tokio::process::Child,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<(JobStatus, Option<String>), Error> {
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

    // Submit: the JobSpec as the login node resolved it, through `submit::prepare`.
    let jobspec = files.jobspec();
    let bytes = jobspec.read(super::FILE_CAP).map_err(jobspec.io())?;
    let text = String::from_utf8(bytes)
        .map_err(|e| Error::Invalid(format!("{}: {e}", jobspec.display())))?;
    let mut job = crate::inputs::recorded::from_text(&text, &jobspec.display().to_string())?;
    job.spec.submission_id = Some(record.submission_id.parse()?);
    let target = Target::from_profile(cluster, ray);
    let prepared = submit::prepare(&target, &job, true)?;
    submit::submit(&target, &prepared).await?;
    report.stage = "wait".into();
    let records = Records::new(layout.jobs());
    report.driver_log = Some(
        records
            .dir(&record.submission_id)
            .join(LOGS)
            .join(DRIVER_LOG)
            .display()
            .to_string(),
    );
    super::write_json(&files.batch(), report)?;

    let options = WaitOptions {
        timeout: None,
        time_limit: job.spec.time_limit.map(|t| t.0),
        follow: true,
    };
    // The log as it streams goes to the job's records too: if Slurm ends the allocation
    // before the job, `argus job logs` still has what it printed (at its end, the whole log
    // from Ray replaces it).
    let mut saved = open_saved_log(&records, &record.submission_id);
    let secrets = crate::secrets::known();
    let info = crate::submit::watch::wait(&target, &record.submission_id, &options, |text| {
        on_log(text);
        if let Some(file) = saved.as_mut() {
            let _ = std::io::Write::write_all(file, secrets.redact_str(text).as_bytes());
        }
    })
    .await?;
    report.job_message = info.message.clone();
    Ok((info.status, info.message))
}

/// The job's saved driver log, `jobs/<id>/logs/driver.log`, opened to append through the
/// handles of the job's records (made when missing; a link or a hard-linked file there is
/// refused, never written through). None when it cannot be: the log still streams.
fn open_saved_log(records: &Records, submission_id: &str) -> Option<std::fs::File> {
    let logs = records.job(submission_id).ok()??.open_dir(LOGS).ok()?;
    match logs.open_append(DRIVER_LOG) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => logs
            .create_new(DRIVER_LOG, 0o644)
            .or_else(|_| logs.open_append(DRIVER_LOG))
            .ok(),
        opened => opened.ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_driver_log_is_appended_through_the_jobs_handles_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let layout = Layout::new(dir.path().join("shared"));
        let jobs = layout.jobs();
        std::fs::create_dir_all(jobs.join("j1/logs")).unwrap();
        let records = Records::new(&jobs);
        let mut file = open_saved_log(&records, "j1").unwrap();
        // Its directory swapped for a link after the log was opened: it stays inside.
        let moved = dir.path().join("moved");
        std::fs::rename(jobs.join("j1"), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, jobs.join("j1")).unwrap();
        std::io::Write::write_all(&mut file, b"a\n").unwrap();
        assert_eq!(
            std::fs::read(moved.join("logs/driver.log")).unwrap(),
            b"a\n"
        );
        // Opened again: the link is refused, nothing made outside.
        assert!(open_saved_log(&records, "j1").is_none());
        // A link planted at the log's name is not appended to.
        std::fs::create_dir_all(jobs.join("j2/logs")).unwrap();
        let target = outside.join("target");
        std::fs::write(&target, b"x").unwrap();
        std::os::unix::fs::symlink(&target, jobs.join("j2/logs/driver.log")).unwrap();
        assert!(open_saved_log(&records, "j2").is_none());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        // An existing log is appended to.
        std::fs::create_dir_all(jobs.join("j3/logs")).unwrap();
        std::fs::write(jobs.join("j3/logs/driver.log"), b"1\n").unwrap();
        let mut file = open_saved_log(&records, "j3").unwrap();
        std::io::Write::write_all(&mut file, b"2\n").unwrap();
        assert_eq!(
            std::fs::read(jobs.join("j3/logs/driver.log")).unwrap(),
            b"1\n2\n"
        );
    }
}
