//! A supervised run in the batch step (`restart:` in the JobSpec, or `--restart N`): its
//! attempts, each one Ray job, recorded in the batch report.
//!
//! Inside the allocation an attempt that FAILED or hung (no new training step for
//! `hang_after` while RUNNING, from the driver's log) is stopped and followed by the next
//! one, from the newest complete checkpoint of the run (`submit::live::resume_point`,
//! verl's own resume, same world size), once the cluster is whole again. What the
//! allocation cannot mend — a node step that ended (its node or its containers gone), or
//! Slurm's USR1 before the allocation's end — is handed to the next allocation: the job is
//! stopped, the node steps end, and the batch requeues itself (`scontrol requeue`). When
//! Slurm requeues the batch itself (NODE_FAIL, PREEMPTED), the batch step that starts
//! again finds the run's attempts in its report and continues with the next one. Past
//! `max` restarts it gives up, every attempt recorded; the exit code is the last one's.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::record::BatchReport;
use super::{Error, RunFiles};
use crate::config::jobspec::{LoadedJobSpec, Restart, RestartOn};
use crate::exit::Exit;
use crate::ray::jobs::{JobStatus, JobsApi};
use crate::records::Records;
use crate::restart::{Attempt, RecoveryTimes, ResumedFrom, Steps, submission_id};
use crate::submit::watch::WaitOptions;
use crate::submit::{self, Target};

/// How often the supervisor looks at the job (its status, the steps seen).
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How long a stopped job gets to end.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// The most a restart inside the allocation waits for the cluster to be whole again.
const WHOLE_WAIT: Duration = Duration::from_secs(60);

/// What a run's attempts came to in this allocation.
#[derive(Debug)]
pub enum Outcome {
    /// The last attempt's end: the run's.
    Done(JobStatus, Option<String>),
    /// The run continues in the next allocation of the batch (why).
    Requeue(String),
}

/// How one attempt ended.
#[derive(Debug)]
enum Ended {
    Job {
        status: JobStatus,
        message: Option<String>,
    },
    NodesLost(String),
    Hang(Duration),
    AllocationEnding,
}

/// What comes after an attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Done,
    RestartHere,
    Requeue,
}

/// Whether the policy allows another attempt after the last one (the rule `argus run`'s
/// supervisor follows too: [`crate::restart::verdict`]).
pub fn may_restart(policy: Option<&Restart>, attempts: &[Attempt]) -> bool {
    attempts.last().is_some_and(|a| a.cause.is_some())
        && policy.is_some_and(|p| {
            crate::restart::verdict(attempts, p) == crate::restart::Verdict::Restart
        })
}

/// What follows the last attempt (`ending`: Slurm's warning of the allocation's end).
pub fn decide(policy: Option<&Restart>, attempts: &[Attempt], ending: bool) -> Decision {
    if ending && policy.is_some() {
        return Decision::Requeue;
    }
    if !may_restart(policy, attempts) {
        return Decision::Done;
    }
    match attempts.last().and_then(|a| a.cause) {
        Some(RestartOn::NodeLost) => Decision::Requeue,
        _ => Decision::RestartHere,
    }
}

use crate::records::now_rfc3339;

fn seconds_since(rfc3339: Option<&str>) -> Option<f64> {
    let then = humantime::parse_rfc3339_weak(rfc3339?).ok()?;
    SystemTime::now()
        .duration_since(then)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// A batch step starting on an allocation: the attempts of the batch's earlier
/// allocations carried over (`previous`, its report there). An attempt Slurm cut off
/// (requeued for a node failure or a preemption: it has no end) is closed as node_lost.
/// None: go on with the next attempt (or the first); Some: the run is over, with that
/// exit code (past `max`, or not restartable).
pub fn carry_over(previous: Option<BatchReport>, report: &mut BatchReport) -> Option<Exit> {
    let previous = previous?;
    report.attempts = previous.attempts;
    let requeued_by_argus = previous.stage == "requeued";
    let last = report.attempts.last_mut()?;
    if last.status.is_none() {
        last.status = Some(JobStatus::Stopped);
        last.ended_at = Some(now_rfc3339());
        last.detected_at = last.ended_at.clone();
        last.cause = Some(RestartOn::NodeLost);
        last.detail = Some(format!(
            "Slurm requeued the batch (a node failed, or the job was preempted){}",
            previous.error.map(|e| format!(": {e}")).unwrap_or_default()
        ));
    }
    if requeued_by_argus || may_restart(report.restart.as_ref(), &report.attempts) {
        return None;
    }
    let status = last_status(&report.attempts);
    Some(status.exit())
}

/// The last attempt's status (STOPPED when it has none).
pub fn last_status(attempts: &[Attempt]) -> JobStatus {
    attempts
        .last()
        .and_then(|a| a.status.clone())
        .unwrap_or(JobStatus::Stopped)
}

/// Everything an attempt needs.
pub struct Ctx<'a> {
    pub target: &'a Target,
    pub files: &'a RunFiles,
    pub records: &'a Records,
    /// The first attempt's submission id (the run's).
    pub first_id: &'a str,
    /// The JobSpec as staged (the first attempt's).
    pub job: &'a LoadedJobSpec,
    /// The cluster's containers as planned (whole: each one's Ray node ALIVE).
    pub plan: &'a [crate::cluster::plan::ContainerPlan],
    /// The cluster as planned from the allocation, and how its nodes' part of a failure
    /// bundle is gathered.
    pub cluster: &'a crate::config::LoadedProfile,
    pub bundle_nodes: &'a super::collect::SlurmNodes,
}

/// Waits up to `wait` until every planned node is ALIVE again; what is missing if not.
async fn whole(ctx: &Ctx<'_>, wait: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + wait;
    crate::cluster::ready::wait_ready(
        &ctx.target.ray,
        ctx.plan,
        &Default::default(),
        deadline,
        |_| {},
    )
    .await
    .map(|_| ())
    .map_err(|(readiness, _)| {
        readiness
            .missing
            .iter()
            .map(|(name, problem)| format!("{name}: {problem}"))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// The run's attempts in this allocation, from the next one on.
pub async fn attempts(
    ctx: &Ctx<'_>,
    report: &mut BatchReport,
    nodes: &mut tokio::process::Child,
    usr1: &mut tokio::signal::unix::Signal,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, Error> {
    let policy = report.restart.clone();
    let mut recovery: Option<RecoveryTimes> = None;
    loop {
        let n = report.attempts.len() as u32 + 1;
        let id = submission_id(ctx.first_id, n);
        let began = Instant::now();
        let (job, resumed_from) = next_job(ctx, report, &id)?;
        let prepared = submit::prepare(ctx.target, &job, true)?;
        submit::submit(ctx.target, &prepared).await?;
        if let Some(times) = recovery.as_mut() {
            times.resubmit_s = began.elapsed().as_secs_f64();
        }
        if n > 1 {
            say_resubmitted(ctx.first_id, n, &id, resumed_from.as_ref());
        }
        report.attempts.push(Attempt {
            n,
            submission_id: id.clone(),
            started_at: now_rfc3339(),
            resumed_from,
            recovery: recovery.take(),
            ..Default::default()
        });
        report.stage = "wait".into();
        report.driver_log = Some(
            ctx.records
                .dir(&id)
                .join(crate::records::DRIVER_LOG)
                .display()
                .to_string(),
        );
        super::write_json(&ctx.files.batch(), report)?;

        let ended = watch(ctx, &job, &id, report, nodes, usr1, on_log, policy.as_ref()).await?;
        let detected = Instant::now();
        let (status, message) = match &ended {
            Ended::Job { status, message } => (status.clone(), message.clone()),
            _ => (stop_job(ctx.target, &id).await, None),
        };
        let stop_s = detected.elapsed().as_secs_f64();
        let (cause, detail) = cause_of(&ended);
        let attempt = report
            .attempts
            .last_mut()
            .ok_or_else(|| Error::Invalid("no attempt".into()))?;
        attempt.ended_at = Some(now_rfc3339());
        attempt.detected_at = attempt.ended_at.clone();
        attempt.status = Some(status.clone());
        attempt.cause = cause;
        attempt.detail = detail;
        if cause.is_some() {
            attempt.diagnosis = diagnose(ctx, &id, n).await;
        }
        let decision = decide(
            policy.as_ref(),
            &report.attempts,
            matches!(ended, Ended::AllocationEnding),
        );
        super::write_json(&ctx.files.batch(), report)?;
        if let Some(cause) = cause {
            eprintln!(
                "argus: attempt {n} ({id}) ended: {cause}{}",
                report
                    .attempts
                    .last()
                    .and_then(|a| a.detail.as_deref())
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            );
        }
        match decision {
            Decision::Done => {
                report.job_message = message.clone();
                return Ok(Outcome::Done(status, message));
            }
            Decision::Requeue => {
                return Ok(Outcome::Requeue(
                    report
                        .attempts
                        .last()
                        .and_then(|a| a.detail.clone())
                        .unwrap_or_default(),
                ));
            }
            Decision::RestartHere => {
                let repair = Instant::now();
                let backoff = policy.as_ref().map(|p| p.backoff).unwrap_or_default();
                tokio::time::sleep(backoff).await;
                let wait = policy
                    .as_ref()
                    .map_or(WHOLE_WAIT, |p| p.host_wait.min(WHOLE_WAIT));
                if let Err(why) = whole(ctx, wait).await {
                    return Ok(Outcome::Requeue(format!(
                        "the cluster is not whole again after {}s: {why}",
                        wait.as_secs()
                    )));
                }
                recovery = Some(RecoveryTimes {
                    detect_s: 0.0,
                    stop_s,
                    repair_s: repair.elapsed().as_secs_f64(),
                    resubmit_s: 0.0,
                });
            }
        }
    }
}

/// Attempt `n` of run `run`, submitted as `id`, and what it resumes from.
fn say_resubmitted(run: &str, n: u32, id: &str, resumed_from: Option<&ResumedFrom>) {
    eprintln!(
        "argus: attempt {n} of run {run} submitted as job {id}{}",
        resumed_from
            .map(|r| format!(", resuming from step {}", r.step))
            .unwrap_or_else(|| ", from the start (no complete checkpoint)".into())
    );
}

/// The failure bundle of attempt `n` (`id`), each node's part gathered on that node while
/// its containers still run; the triage's line, shown.
async fn diagnose(ctx: &Ctx<'_>, id: &str, n: u32) -> Option<String> {
    let job = crate::diagnose::Job {
        loaded: ctx.cluster,
        target: ctx.target,
        id,
        attempt: n,
        nodes: Some(ctx.bundle_nodes),
    };
    let line = crate::diagnose::after_failure(&job, &Default::default()).await;
    if let Some(line) = &line {
        eprintln!("argus: attempt {n} ({id}) diagnosis: {line}");
    }
    line
}

/// What ended an attempt (none: it ended by itself, or the allocation is ending), and
/// what was seen.
fn cause_of(ended: &Ended) -> (Option<RestartOn>, Option<String>) {
    match ended {
        Ended::Job { status, message } => (
            (*status == JobStatus::Failed).then_some(RestartOn::Failed),
            message.clone(),
        ),
        Ended::NodesLost(why) => (Some(RestartOn::NodeLost), Some(why.clone())),
        Ended::Hang(quiet) => (
            Some(RestartOn::Hang),
            Some(format!(
                "no new training step for {} while RUNNING",
                humantime::format_duration(Duration::from_secs(quiet.as_secs()))
            )),
        ),
        Ended::AllocationEnding => (
            None,
            Some(format!(
                "the allocation ends in {}s (Slurm's USR1): stopped, continued in the next allocation",
                super::script::SIGNAL_GRACE_S
            )),
        ),
    }
}

/// The JobSpec of attempt `id`: the staged one for the first; for the next ones, the
/// previous attempt's resumed from the newest complete checkpoint
/// ([`crate::restart::next_job`]; the previous job was seen stopped), or from the start
/// when there is none.
fn next_job(
    ctx: &Ctx<'_>,
    report: &mut BatchReport,
    id: &str,
) -> Result<(LoadedJobSpec, Option<ResumedFrom>), Error> {
    let Some(previous) = report.attempts.last_mut() else {
        let mut job = ctx.job.clone();
        job.spec.submission_id = Some(id.parse()?);
        return Ok((job, None));
    };
    let (job, from) = crate::restart::next_job(ctx.target, &previous.submission_id, ctx.job, id)?;
    previous.note_resumed(from.as_ref().map(|f| f.step));
    Ok((job, from))
}

/// Follows attempt `id` to its end, or until a node is lost, it hangs, or Slurm warns of
/// the allocation's end (the last three only when supervised).
#[allow(clippy::too_many_arguments)]
async fn watch(
    ctx: &Ctx<'_>,
    job: &LoadedJobSpec,
    id: &str,
    report: &mut BatchReport,
    nodes: &mut tokio::process::Child,
    usr1: &mut tokio::signal::unix::Signal,
    on_log: &mut (dyn FnMut(&str) + Send),
    policy: Option<&Restart>,
) -> Result<Ended, Error> {
    let options = WaitOptions {
        timeout: None,
        time_limit: job.spec.time_limit.map(|t| t.0),
        follow: true,
    };
    let seen = Steps::new();
    // The log as it streams goes to the job's records too.
    let mut saved = ctx.records.open_driver_log_to_append(id);
    let secrets = crate::secrets::known();
    let waited = crate::submit::watch::wait(ctx.target, id, &options, |text| {
        on_log(text);
        if let Some(file) = saved.as_mut() {
            let _ = std::io::Write::write_all(file, secrets.redact_str(text).as_bytes());
        }
        if let Ok(mut seen) = seen.lock() {
            // The log is saved as it streams (above): the steps only are followed.
            seen.feed(text);
            let _ = seen.take_log();
        }
    });
    let hang_after = policy
        .filter(|p| p.restarts_on(RestartOn::Hang))
        .map(|p| p.hang_after);
    let looks = looks(ctx, id, report, &seen, hang_after);
    let supervised = policy.is_some();
    let lost = async {
        if !supervised {
            return std::future::pending().await;
        }
        let status = nodes.wait().await;
        format!(
            "the node steps ended ({}): a node or its containers are gone",
            status
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string())
        )
    };
    let ending = async {
        if !supervised {
            return std::future::pending().await;
        }
        usr1.recv().await
    };
    tokio::select! {
        info = waited => {
            let info = info?;
            Ok(Ended::Job { status: info.status, message: info.message })
        }
        quiet = looks => Ok(Ended::Hang(quiet)),
        why = lost => Ok(Ended::NodesLost(why)),
        _ = ending => Ok(Ended::AllocationEnding),
    }
}

/// Every [`LOOK_EVERY`]: the steps seen into the report (written), and, with `hang_after`,
/// Ray's status of the job: RUNNING without a new step for that long ends the look (a
/// hang). Pending forever otherwise.
async fn looks(
    ctx: &Ctx<'_>,
    id: &str,
    report: &mut BatchReport,
    seen: &Mutex<Steps>,
    hang_after: Option<Duration>,
) -> Duration {
    let api = JobsApi {
        ray: &ctx.target.ray,
    };
    // Since when Ray says RUNNING: quiet before that is not a hang.
    let mut running_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let running = match hang_after {
            Some(_) => matches!(api.get(id).await, Ok(info) if info.status == JobStatus::Running),
            None => false,
        };
        if running {
            running_since.get_or_insert_with(Instant::now);
        } else {
            running_since = None;
        }
        let Ok(s) = seen.lock() else { continue };
        let quiet = s
            .changed
            .elapsed()
            .min(running_since.map_or(Duration::ZERO, |t| t.elapsed()));
        let first_step_at = s
            .first_step_at
            .map(|t| humantime::format_rfc3339_millis(t).to_string());
        let last_step = s.last_step;
        drop(s);
        let previous_detected = report
            .attempts
            .iter()
            .rev()
            .nth(1)
            .and_then(|a| a.detected_at.clone());
        if let Some(attempt) = report.attempts.last_mut()
            && (attempt.last_step != last_step || attempt.first_step_at != first_step_at)
        {
            if attempt.first_step_at.is_none() && first_step_at.is_some() {
                attempt.downtime_s = seconds_since(previous_detected.as_deref());
            }
            attempt.last_step = last_step;
            attempt.first_step_at = first_step_at;
            let _ = super::write_json(&ctx.files.batch(), report);
        }
        if let Some(after) = hang_after
            && quiet >= after
        {
            return quiet;
        }
    }
}

/// Stops job `id` and waits (bounded) for its end ([`crate::restart::stop`]). A job argus
/// stopped is STOPPED, whatever its driver's last word; one that does not end in time is
/// taken down with the allocation's node steps.
async fn stop_job(target: &Target, id: &str) -> JobStatus {
    let api = JobsApi { ray: &target.ray };
    if let Err(stuck) = crate::restart::stop::stop_and_wait(&api, id, STOP_WAIT, |_| {}).await {
        tracing::warn!(
            "job {id} still says {} {}s after it was told to stop",
            stuck.status,
            STOP_WAIT.as_secs()
        );
    }
    JobStatus::Stopped
}

/// `scontrol requeue` of the batch's own Slurm job: it starts again on a new allocation
/// and continues the run.
pub async fn requeue(job_id: u64) -> Result<(), Error> {
    tokio::task::spawn_blocking(move || {
        super::slurm_command("scontrol", &["requeue", &job_id.to_string()]).map(|_| ())
    })
    .await
    .map_err(|e| Error::Allocation(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max: u32, on: &[RestartOn]) -> Restart {
        Restart {
            max,
            on: on.to_vec(),
            hang_after: Duration::from_secs(60),
            backoff: Duration::ZERO,
            host_wait: Duration::from_secs(60),
        }
    }

    fn ended(cause: Option<RestartOn>, status: JobStatus) -> Attempt {
        Attempt {
            cause,
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn a_failure_restarts_here_a_lost_node_requeues_and_max_gives_up() {
        let p = policy(2, &RestartOn::ALL);
        let failed = ended(Some(RestartOn::Failed), JobStatus::Failed);
        let lost = ended(Some(RestartOn::NodeLost), JobStatus::Stopped);
        let ok = ended(None, JobStatus::Succeeded);
        assert_eq!(
            decide(Some(&p), std::slice::from_ref(&failed), false),
            Decision::RestartHere
        );
        assert_eq!(
            decide(Some(&p), std::slice::from_ref(&lost), false),
            Decision::Requeue
        );
        assert_eq!(
            decide(Some(&p), std::slice::from_ref(&ok), false),
            Decision::Done
        );
        // Two restarts used: a third failure ends the run.
        let three = [failed.clone(), lost.clone(), failed.clone()];
        assert_eq!(decide(Some(&p), &three, false), Decision::Done);
        assert_eq!(decide(Some(&p), &three[..2], false), Decision::Requeue);
        // Not in `on`, or no policy: done.
        let only_hang = policy(2, &[RestartOn::Hang]);
        assert_eq!(
            decide(Some(&only_hang), std::slice::from_ref(&failed), false),
            Decision::Done
        );
        assert_eq!(
            decide(None, std::slice::from_ref(&failed), false),
            Decision::Done
        );
        // The allocation's end: requeued whatever the count.
        assert_eq!(decide(Some(&p), &three, true), Decision::Requeue);
        // An attempt argus requeued at the allocation's end does not use a restart.
        let moved = ended(None, JobStatus::Stopped);
        let p1 = policy(1, &RestartOn::ALL);
        assert!(may_restart(Some(&p1), &[moved, failed]));
    }

    #[test]
    fn a_batch_started_again_closes_the_cut_off_attempt_and_counts_it() {
        let previous = |attempts: Vec<Attempt>, stage: &str| BatchReport {
            attempts,
            stage: stage.into(),
            ..Default::default()
        };
        let open = Attempt {
            n: 1,
            submission_id: "r".into(),
            last_step: Some(5),
            ..Default::default()
        };
        let mut report = BatchReport {
            restart: Some(policy(1, &RestartOn::ALL)),
            ..Default::default()
        };
        assert_eq!(carry_over(None, &mut report), None);
        assert_eq!(
            carry_over(Some(previous(vec![open.clone()], "wait")), &mut report),
            None
        );
        let closed = &report.attempts[0];
        assert_eq!(closed.cause, Some(RestartOn::NodeLost));
        assert_eq!(closed.status, Some(JobStatus::Stopped));
        // A second cut-off attempt is past max 1: the run is over, STOPPED.
        let mut second = open.clone();
        second.n = 2;
        let attempts = vec![report.attempts[0].clone(), second];
        assert_eq!(
            carry_over(Some(previous(attempts.clone(), "wait")), &mut report),
            Some(Exit::Stopped)
        );
        assert_eq!(report.attempts.len(), 2);
        // Requeued by argus itself (the allocation's end): it goes on.
        let mut moved = attempts;
        moved[1].status = Some(JobStatus::Stopped);
        moved[1].cause = None;
        assert_eq!(
            carry_over(Some(previous(moved, "requeued")), &mut report),
            None
        );
        // Without a policy a requeued batch does not start the run again.
        let mut bare = BatchReport::default();
        assert_eq!(
            carry_over(Some(previous(vec![open], "wait")), &mut bare),
            Some(Exit::Stopped)
        );
    }
}
