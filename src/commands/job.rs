//! `argus submit` and `argus job status | logs | stop | list | wait`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::commands::error::{Context, Result};

use crate::cli::{Cli, JobCommand, SubmitArgs};
use crate::cluster::access;
use crate::config::jobspec::LoadedJobSpec;
use crate::config::ray_config::RayConfig;
use crate::exit::Exit;
use crate::ray::jobs::{JobInfo, JobsApi};
use crate::records::Listed;
use crate::submit::watch::{self, WaitOptions};
use crate::submit::{self, Target};
use crate::ui::{Printer, table};

/// The cluster jobs go to: the RayConfig given with --config, else the profile.
async fn target(cli: &Cli) -> Result<Target> {
    if let Some(path) = &cli.config {
        let (config, _) = RayConfig::load(path)?;
        let token = std::env::var("RAY_AUTH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        return Ok(Target::from_ray_config(&config, token));
    }
    let loaded = super::profile(cli)?;
    if let Some(run_id) = &cli.slurm_run {
        let attached = crate::slurm::attach::attach(&loaded, run_id)
            .await
            .with_context(|| format!("cannot reach the cluster of Slurm run {run_id}"))?;
        if !attached.live() {
            tracing::info!(
                "Slurm job of run {run_id} is {}: reading argus's records",
                attached.state.as_deref().unwrap_or("gone")
            );
        }
        return Ok(Target::from_profile(&attached.cluster, attached.ray));
    }
    let ray = access::ray_client(&loaded).await?.with_connect_retries(2);
    Ok(Target::of_profile(&loaded, ray).await)
}

/// The cluster `submit --dry-run` resolves against: the same target, reached by nothing (a
/// dry run sends no request, so a remote head's tunnel or host is not needed).
async fn dry_run_target(cli: &Cli) -> Result<Target> {
    if cli.config.is_some() || cli.slurm_run.is_some() {
        return target(cli).await;
    }
    let loaded = super::profile(cli)?;
    let ray = crate::ray::RayClient::new(&loaded.dashboard_url(), None);
    Ok(Target::of_profile(&loaded, ray).await)
}

/// What `submit` does not do with the fields only `argus run` acts on, said where they are
/// written, never passed over without a word: the restart policy (supervision) and the
/// local copies a run puts on the shared storage first.
fn run_only_fields(loaded: &LoadedJobSpec) -> Vec<String> {
    let spec = &loaded.spec;
    let said = |key: &str, what: &str| {
        format!(
            "{} (hint: `argus run` acts on it; `argus submit` submits the job once as it is)",
            loaded.source.error_at(&crate::yaml_path![key], what)
        )
    };
    let mut out = Vec::new();
    if spec.restart.is_some() {
        out.push(said(
            "restart",
            "not applied by `argus submit`: no attempt is restarted from a checkpoint",
        ));
    }
    if spec.model_from.is_some() {
        out.push(said(
            "model_from",
            "not used by `argus submit`: the model must already be in the HF cache on the shared storage",
        ));
    }
    if spec.data_from.is_some() {
        out.push(said(
            "data_from",
            "not used by `argus submit`: the datasets must already be on the shared storage",
        ));
    }
    out
}

pub async fn submit(cli: &Cli, args: &SubmitArgs, printer: &Printer) -> Result<Exit> {
    let (loaded, target, what) = match (&args.resume, &args.jobspec) {
        (Some(old), given) => {
            old.parse::<crate::ids::SubmissionId>()?;
            let target = target(cli).await?;
            let loaded =
                super::training::resume(&target, old, given.as_deref(), &args.sets, printer)
                    .await?;
            (loaded, target, format!("the job resuming {old}"))
        }
        (None, Some(path)) => (
            LoadedJobSpec::load(path, &args.sets)?,
            if args.dry_run {
                dry_run_target(cli).await?
            } else {
                target(cli).await?
            },
            path.display().to_string(),
        ),
        (None, None) => return Ok(Exit::Usage),
    };
    loaded.check_on_shared(&target.mount.mount())?;
    for warning in run_only_fields(&loaded) {
        printer.warn(warning);
    }
    let mut prepared = submit::prepare(&target, &loaded, !args.no_check)
        .with_context(|| format!("cannot submit {what}"))?;
    prepared.resumes = args.resume.clone();
    for note in &prepared.notes {
        printer.warn(note);
    }
    if args.dry_run {
        let payload = prepared.shown_payload();
        if printer.json {
            printer.json(&serde_json::json!({"payload": payload, "checked_overrides_against": prepared.checked_overrides_against}));
        } else {
            printer.json(&payload);
            printer.info("dry run: nothing was submitted or written");
        }
        return Ok(Exit::Success);
    }
    let report = submit::submit(&target, &prepared)
        .await
        .with_context(|| format!("cannot submit {what}"))?;
    let id = &report.submission_id;
    if !(args.wait || args.follow) {
        if printer.json {
            printer.json(&serde_json::to_value(&report)?);
        } else {
            printer.data(id);
            if let Some(dir) = &report.record_dir {
                printer.info(format!("submitted {id}; records in {}", dir.display()));
            }
            let via = cli
                .slurm_run
                .as_ref()
                .map(|r| format!("--slurm-run {r} "))
                .unwrap_or_default();
            printer.info(format!("follow it with: argus {via}job logs {id} --follow"));
        }
        return Ok(Exit::Success);
    }
    printer.info(format!("submitted {id}"));
    let options = WaitOptions {
        timeout: None,
        time_limit: prepared.time_limit_s.map(Duration::from_secs),
        follow: args.follow && !printer.json,
    };
    let mut sink = super::training::LogSink::new(printer, id);
    let info = watch::wait(&target, id, &options, |text| sink.write(text))
        .await
        .with_context(|| format!("while waiting for job {id}"))?;
    sink.finish();
    finish(printer, &target, &info).await
}

/// A waited-for job's end: its status and Ray's message, and for a FAILED job the driver
/// log's last lines (Ray's message is often generic; the driver's says what happened).
async fn finish(printer: &Printer, target: &Target, info: &JobInfo) -> Result<Exit> {
    let id = info.submission_id.clone().unwrap_or_default();
    let tail = watch::failure_tail(target, &id, info).await;
    if printer.json {
        let mut out = serde_json::to_value(info)?;
        out["driver_tail"] = serde_json::json!(tail);
        printer.json(&out);
    } else {
        printer.info(format!(
            "job {id} {}{}",
            info.status,
            info.message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
        if let Some(tail) = &tail {
            printer.info(tail_text(tail));
        }
    }
    Ok(info.status.exit())
}

/// The driver's last lines, indented under a heading.
pub(super) fn tail_text(tail: &[String]) -> String {
    let mut text = String::from("the driver's last lines:");
    for line in tail {
        text.push_str("\n    ");
        text.push_str(line);
    }
    text
}

pub async fn run(cli: &Cli, command: &JobCommand, printer: &Printer) -> Result<Exit> {
    check_ids(command)?;
    if let JobCommand::Diagnose { id, attempt } = command {
        return diagnose(cli, id, *attempt, printer).await;
    }
    let target = target(cli).await?;
    match command {
        JobCommand::Diagnose { .. } => Ok(Exit::Usage),
        JobCommand::Status { id } => status(&target, id, printer).await,
        JobCommand::Logs { id, follow: false } => logs(&target, id, printer).await,
        JobCommand::Logs { id, follow: true } | JobCommand::Wait { id, .. } => {
            wait(cli, &target, command, id, printer).await
        }
        JobCommand::Stop { id, wait } => stop(&target, id, *wait, printer).await,
        JobCommand::List => list(&target, printer).await,
        JobCommand::Metrics { id, csv, keys } => {
            super::training::metrics(&target, id, *csv, keys, printer).await
        }
        JobCommand::Plot { ids, keys, output } => {
            super::training::plot(&target, ids, keys, output.as_deref(), printer).await
        }
    }
}

/// A job id becomes a path under jobs/ and a segment of Ray's URLs: it is checked as a
/// submission id first (`../../x`, `a?b` are exit 2), before any file or request.
fn check_ids(command: &JobCommand) -> Result<()> {
    match command {
        JobCommand::Status { id }
        | JobCommand::Diagnose { id, .. }
        | JobCommand::Logs { id, .. }
        | JobCommand::Stop { id, .. }
        | JobCommand::Wait { id, .. }
        | JobCommand::Metrics { id, .. } => {
            id.parse::<crate::ids::SubmissionId>()?;
        }
        JobCommand::Plot { ids, .. } => {
            for id in ids {
                id.parse::<crate::ids::SubmissionId>()?;
            }
        }
        JobCommand::List => {}
    }
    Ok(())
}

/// `job status ID`: what Ray and argus's record say, the progress, a failure's tail.
async fn status(target: &Target, id: &str, printer: &Printer) -> Result<Exit> {
    let (info, record, from_cluster) = watch::status(target, id)
        .await
        .with_context(|| format!("cannot read the status of job {id}"))?;
    let progress = crate::submit::live::progress(target, id, &info, record.as_ref()).await;
    let tail = watch::failure_tail(target, id, &info).await;
    let diagnosis = target
        .records()
        .and_then(|records| crate::diagnose::latest(&records, id));
    if printer.json {
        let diagnosis = diagnosis.as_ref().map(|(attempt, found)| serde_json::json!({"attempt": attempt, "triage": found, "line": found.as_ref().map(|t| t.one_line())}));
        printer.json(&serde_json::json!({"job": info, "record": record, "from_cluster": from_cluster, "progress": progress, "driver_tail": tail, "diagnosis": diagnosis}));
    } else {
        let mut rows = vec![
            vec!["submission_id".to_string(), id.to_string()],
            vec!["status".to_string(), info.status.to_string()],
        ];
        if let Some(m) = &info.message {
            rows.push(vec!["message".into(), m.clone()]);
        }
        if let Some(n) = &info.driver_node_id {
            rows.push(vec!["driver_node_id".into(), n.clone()]);
        }
        let meta = info.metadata.clone().unwrap_or_default();
        if let (Some(run), Some(n)) = (meta.get("argus_run"), meta.get("argus_attempt")) {
            rows.push(vec!["run".into(), format!("{run}, attempt {n}")]);
        }
        if let Some(r) = &record {
            if let Some(old) = &r.resumes {
                rows.push(vec!["resumes".into(), old.to_string()]);
            }
            rows.push(vec!["workload".into(), r.workload.clone()]);
            rows.push(vec![
                "code".into(),
                r.code_id.clone().unwrap_or_else(|| r.code_path.clone()),
            ]);
            if let Some(why) = &r.stopped_by_argus {
                rows.push(vec!["stopped_by_argus".into(), why.clone()]);
            }
        }
        if let Some(p) = &progress {
            rows.extend(super::training::progress_rows(p));
        }
        if let Some((_, found)) = &diagnosis {
            rows.push(vec!["diagnosis".into(), diagnosis_text(found.as_ref())]);
        }
        rows.push(vec![
            "source".into(),
            if from_cluster {
                "cluster".into()
            } else {
                "argus record (the cluster no longer knows this job)".into()
            },
        ]);
        let mut text = table(&rows);
        if let Some(tail) = &tail {
            text = format!("{}\n{}", text.trim_end(), tail_text(tail));
        }
        printer.data(text);
    }
    Ok(Exit::Success)
}

/// A bundle's triage as `job status` and `job diagnose` show it.
fn diagnosis_text(found: Option<&crate::diagnose::Triage>) -> String {
    match found {
        Some(t) => t.one_line(),
        None => "nothing in the bundle names an error".into(),
    }
}

/// `job diagnose ID`: the job's failure bundle, collected now, and its triage. The
/// profile's containers are read whether Ray answers or not (a job the cluster forgot
/// still has its records and the nodes' logs).
async fn diagnose(cli: &Cli, id: &str, attempt: Option<u32>, printer: &Printer) -> Result<Exit> {
    let attempt = attempt.unwrap_or_else(|| {
        id.rsplit_once("-attempt-")
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(1)
    });
    if let Some(run_id) = &cli.slurm_run {
        return diagnose_slurm(cli, run_id, id, attempt, printer).await;
    }
    let loaded = super::profile(cli)?;
    let target = match target(cli).await {
        Ok(target) => target,
        Err(e) => {
            tracing::info!(
                "the cluster's Ray is not reachable ({e:#}): reading the records and containers"
            );
            let ray = crate::ray::RayClient::new(&loaded.dashboard_url(), None);
            Target::from_profile(&loaded, ray)
        }
    };
    let job = crate::diagnose::Job {
        loaded: &loaded,
        target: &target,
        id,
        attempt,
        nodes: None,
    };
    show_bundle(&job, printer).await
}

/// `--slurm-run RUN_ID job diagnose ID`: the run's cluster as the batch step planned it,
/// each node's part gathered on that node through srun. Refused once the allocation has
/// ended (exit 4): the containers went with it, and a bundle made now would replace the
/// one the batch step made when the job ended with one that has no node in it.
async fn diagnose_slurm(
    cli: &Cli,
    run_id: &str,
    id: &str,
    attempt: u32,
    printer: &Printer,
) -> Result<Exit> {
    let loaded = super::profile(cli)?;
    let attached = crate::slurm::attach::attach_nodes(&loaded, run_id)
        .await
        .with_context(|| format!("cannot reach the cluster of Slurm run {run_id}"))?;
    if !attached.live() {
        return Err(crate::slurm::Error::NoCluster {
            run_id: run_id.to_string(),
            why: format!(
                "Slurm job {} is {}: its containers went with the allocation; a bundle the batch step made when an attempt failed, hung or lost a node is under jobs/{id}/diagnostics/ (`argus job status {id}` shows its diagnosis)",
                attached.alloc.job_id,
                attached.state.as_deref().unwrap_or("gone")
            ),
        }
        .into());
    }
    let nodes = crate::slurm::collect::SlurmNodes::new(
        run_id,
        attached.alloc.job_id,
        attached.files.profile_path(),
        crate::slurm::attach::node_binary(&attached.record)?,
        &attached.cluster,
    );
    let cluster = attached.cluster.clone();
    let target = Target::from_profile(&cluster, attached.ray);
    let job = crate::diagnose::Job {
        loaded: &cluster,
        target: &target,
        id,
        attempt,
        nodes: Some(&nodes),
    };
    show_bundle(&job, printer).await
}

/// Collects a job's bundle now and shows it.
async fn show_bundle(job: &crate::diagnose::Job<'_>, printer: &Printer) -> Result<Exit> {
    let (id, attempt) = (job.id, job.attempt);
    let bundle = crate::diagnose::collect(job, &crate::diagnose::Limits::default())
        .await
        .with_context(|| format!("cannot make the failure bundle of job {id}"))?;
    if printer.json {
        printer.json(&serde_json::json!({
            "bundle": bundle.path,
            "attempt": attempt,
            "triage": bundle.triage,
            "line": bundle.triage.as_ref().map(|t| t.one_line()),
            "manifest": bundle.manifest,
        }));
        return Ok(Exit::Success);
    }
    let m = &bundle.manifest;
    printer.info(format!(
        "bundle {} ({} files, {:.1} MB, {:.1} s)",
        bundle.path.display(),
        m.files.len(),
        m.bytes as f64 / 1e6,
        m.seconds
    ));
    for missed in &m.not_collected {
        printer.warn(format!("not collected: {}: {}", missed.what, missed.why));
    }
    printer.data(format!(
        "diagnosis: {}",
        diagnosis_text(bundle.triage.as_ref())
    ));
    Ok(Exit::Success)
}

/// `job logs ID`: the driver's log from Ray, else the one argus saved, made safe for a
/// terminal ([`crate::ui::LogText`]: colour sequences dropped, a carriage return a line
/// end, every other control character, C1 control and bidi override a `\u{..}` escape),
/// on a terminal or not (a log piped to `less -R` or a file shown later reaches a terminal
/// too; the log as the job wrote it stays in `jobs/<id>/logs/driver.log`). A saved log is
/// streamed a chunk at a time, whatever its size.
async fn logs(target: &Target, id: &str, printer: &Printer) -> Result<Exit> {
    let api = JobsApi { ray: &target.ray };
    let error = match api.logs(id).await {
        Ok(logs) => {
            printer.raw(&crate::ui::safe_log(&logs));
            return Ok(Exit::Success);
        }
        Err(e) => e,
    };
    let records = target.records();
    let Some((path, file)) = crate::training::saved_log(records.as_ref(), id)? else {
        return Err(submit::Error::from(error))
            .with_context(|| format!("cannot read the logs of job {id}"));
    };
    printer.info(format!(
        "(from {}: the cluster no longer has this job)",
        path.display()
    ));
    let mut out = printer.stdout();
    match copy_safe(file, &mut out) {
        Ok(()) => Ok(Exit::Success),
        Err(Copy::Read(source)) => Err(crate::training::Error::Read { path, source }.into()),
        // The reader went away (`| head`): nothing more can be delivered, as it asked.
        Err(Copy::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Exit::Success),
        Err(Copy::Write(source)) => Err(crate::training::Error::Write {
            path: "<stdout>".into(),
            source,
        }
        .into()),
    }
}

/// What a read buffer of [`copy_safe`] holds: what showing a log costs in memory,
/// whatever the size of the log.
const LOG_CHUNK: usize = 64 << 10;

/// Which side of a copy failed.
#[derive(Debug)]
enum Copy {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Copies a log from `from` to `to` as text made safe for a terminal
/// ([`crate::ui::safe`]), [`LOG_CHUNK`] bytes at a time: bytes that are not UTF-8 become
/// U+FFFD exactly as `String::from_utf8_lossy` of the whole log would make them (a
/// character cut between two reads is carried to the next one, one cut short at the end
/// is one U+FFFD), as Ray's own log API shows them.
fn copy_safe(mut from: impl std::io::Read, to: &mut impl std::io::Write) -> Result<(), Copy> {
    let mut buf = vec![0u8; LOG_CHUNK];
    let mut text = String::with_capacity(LOG_CHUNK + 8);
    // The first bytes of a character cut by the last read, at the start of `buf`.
    let mut carried = 0;
    let mut log = crate::ui::LogText::new();
    loop {
        let read = match from.read(&mut buf[carried..]) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Copy::Read(e)),
        };
        let end = carried + read;
        let at_end = read == 0;
        text.clear();
        let mut rest = &buf[..end];
        let mut cut = 0;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            text.push('\u{fffd}');
                            rest = &after[bad..];
                        }
                        None if at_end => {
                            text.push('\u{fffd}');
                            break;
                        }
                        None => {
                            cut = after.len();
                            break;
                        }
                    }
                }
            }
        }
        to.write_all(log.push(&text).as_bytes())
            .map_err(Copy::Write)?;
        if at_end {
            to.write_all(log.finish().as_bytes()).map_err(Copy::Write)?;
            return to.flush().map_err(Copy::Write);
        }
        buf.copy_within(end - cut..end, 0);
        carried = cut;
    }
}

/// `job logs -f ID`, `job wait ID`: the job followed to its end.
async fn wait(
    cli: &Cli,
    target: &Target,
    command: &JobCommand,
    id: &str,
    printer: &Printer,
) -> Result<Exit> {
    let follow = matches!(command, JobCommand::Logs { .. });
    let timeout = match command {
        JobCommand::Wait { timeout, .. } => timeout.map(Duration::from_secs),
        _ => None,
    };
    let record = match target.records() {
        Some(records) => records.load(id)?,
        None => None,
    };
    let time_limit = record.and_then(|r| r.time_limit_s).map(Duration::from_secs);
    let options = WaitOptions {
        timeout,
        time_limit,
        follow,
    };
    let mut sink = super::training::LogSink::new(printer, id);
    let waited = watch::wait(target, id, &options, |text| sink.write(text)).await;
    sink.finish();
    let info = match waited {
        Ok(info) => info,
        Err(e) => match ended_with_allocation(cli, id).await {
            Some(info) => info,
            None => return Err(e).with_context(|| format!("while waiting for job {id}")),
        },
    };
    finish(printer, target, &info).await
}

/// `job stop ID [--wait]`.
async fn stop(target: &Target, id: &str, wait: bool, printer: &Printer) -> Result<Exit> {
    let api = JobsApi { ray: &target.ray };
    let stopped = api
        .stop(id)
        .await
        .map_err(submit::Error::from)
        .with_context(|| format!("cannot stop job {id}"))?;
    if !stopped {
        printer.info(format!("job {id} had already ended"));
    }
    if wait {
        let info = watch::wait(
            target,
            id,
            &WaitOptions {
                timeout: None,
                time_limit: None,
                follow: false,
            },
            |_| {},
        )
        .await?;
        return finish(printer, target, &info).await;
    }
    printer.info(format!("stop sent to job {id}"));
    Ok(Exit::Success)
}

/// With `--slurm-run`, when following a job failed because Slurm ended the allocation
/// under it: the job's end as argus's records now say it (STOPPED, with the Slurm state).
async fn ended_with_allocation(cli: &Cli, id: &str) -> Option<JobInfo> {
    let run_id = cli.slurm_run.as_ref()?;
    let loaded = super::profile(cli).ok()?;
    // Slurm may still say RUNNING for a moment after the nodes tore the cluster down.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let attached = crate::http::poll_until(deadline, Duration::from_millis(500), async || {
        match crate::slurm::attach::attach(&loaded, run_id).await {
            Ok(attached) if !attached.live() => crate::http::Poll::Ready(attached),
            _ => crate::http::Poll::Pending(()),
        }
    })
    .await
    .ok()?;
    let target = Target::from_profile(&attached.cluster, attached.ray);
    let (info, _, _) = watch::status(&target, id).await.ok()?;
    info.status.is_finished().then_some(info)
}

async fn list(target: &Target, printer: &Printer) -> Result<Exit> {
    let api = JobsApi { ray: &target.ray };
    let mut rows: BTreeMap<String, (String, String, String, String)> = BTreeMap::new();
    let from_cluster = match api.list().await {
        Ok(jobs) => jobs,
        Err(e) => {
            printer.warn(format!(
                "the cluster's job list is unavailable ({e}); showing argus's records"
            ));
            Vec::new()
        }
    };
    for job in &from_cluster {
        let Some(id) = job.submission_id.clone() else {
            continue;
        };
        let meta = job.metadata.clone().unwrap_or_default();
        rows.insert(
            id,
            (
                job.status.to_string(),
                meta.get("workload").cloned().unwrap_or_else(|| "-".into()),
                meta.get("code_id").cloned().unwrap_or_else(|| "-".into()),
                "cluster".into(),
            ),
        );
    }
    let listed = match target.records() {
        Some(records) => records.entries()?,
        None => Vec::new(),
    };
    for entry in listed {
        match entry {
            Listed::Record(record) => {
                rows.entry(record.submission_id.clone())
                    .and_modify(|row| row.3 = "cluster+record".into())
                    .or_insert((
                        record.status.to_string(),
                        record.workload.clone(),
                        record.code_id.clone().unwrap_or_else(|| "-".into()),
                        "record".into(),
                    ));
            }
            // Listed, not dropped: the job exists; its record (corrupt, or a planted link) says
            // nothing usable, and the warning says why.
            Listed::Unreadable { id, error } => {
                printer.warn(crate::exit::one_line(&error));
                rows.entry(id)
                    .and_modify(|row| row.3 = "cluster+unreadable record".into())
                    .or_insert((
                        "UNREADABLE".into(),
                        "-".into(),
                        "-".into(),
                        "unreadable record".into(),
                    ));
            }
        }
    }
    if printer.json {
        let list: Vec<_> = rows.iter().map(|(id, (status, workload, code, source))| serde_json::json!({"submission_id": id, "status": status, "workload": workload, "code_id": code, "source": source})).collect();
        printer.json(&serde_json::Value::Array(list));
        return Ok(Exit::Success);
    }
    let mut table_rows = vec![
        ["SUBMISSION_ID", "STATUS", "WORKLOAD", "CODE_ID", "SOURCE"]
            .map(String::from)
            .to_vec(),
    ];
    table_rows.extend(
        rows.into_iter()
            .map(|(id, (a, b, c, d))| vec![id, a, b, c, d]),
    );
    printer.data(table(&table_rows));
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out `data` a few bytes at a time (so characters are cut
    /// between reads) and fails if it is ever asked to fill more than [`LOG_CHUNK`].
    struct Dribble<'a> {
        data: &'a [u8],
        sizes: std::iter::Cycle<std::slice::Iter<'a, usize>>,
        largest_ask: usize,
    }

    impl std::io::Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.largest_ask = self.largest_ask.max(buf.len());
            let n = (*self.sizes.next().unwrap_or(&1))
                .min(buf.len())
                .min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn shown(data: &[u8], sizes: &[usize]) -> String {
        let mut out = Vec::new();
        let mut reader = Dribble {
            data,
            sizes: sizes.iter().cycle(),
            largest_ask: 0,
        };
        copy_safe(&mut reader, &mut out).unwrap();
        assert!(reader.largest_ask <= LOG_CHUNK);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_saved_log_is_shown_with_its_control_sequences_escaped() {
        let log = "step:1\n\x1b[2Jcleared\n\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\nc1 \u{9b}31m\nbidi \u{202e}txt.exe\ttab\r\nend é€😀\n";
        let want = "step:1\n\\u{1b}[2Jcleared\n\\u{1b}]8;;http://evil.example\\u{1b}\\click\\u{1b}]8;;\\u{1b}\\\nc1 \\u{9b}31m\nbidi \\u{202e}txt.exe\ttab\nend é€😀\n";
        for sizes in [&[1][..], &[2, 3], &[7, 1, 5], &[LOG_CHUNK]] {
            let out = shown(log.as_bytes(), sizes);
            assert_eq!(out, want, "reads of {sizes:?}");
            assert!(!out.contains(['\x1b', '\u{9b}', '\u{202e}', '\r']));
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_as_a_whole_read_would_replace_them() {
        // Invalid bytes, a character cut between reads, one cut short at the end.
        let mut log = b"caf\xe9 au lait\n\xff\xfe ok \xe2\x82\xac \xf0\x9f\x98".to_vec();
        let whole = crate::ui::safe(&String::from_utf8_lossy(&log)).into_owned();
        for sizes in [&[1][..], &[2], &[3, 1], &[5, 4, 1]] {
            assert_eq!(shown(&log, sizes), whole, "reads of {sizes:?}");
        }
        log.extend_from_slice(b"\x80 more");
        let whole = crate::ui::safe(&String::from_utf8_lossy(&log)).into_owned();
        assert_eq!(shown(&log, &[1]), whole);
    }

    /// A log far larger than the read buffer goes through in bounded pieces: no read asks
    /// for more than [`LOG_CHUNK`] and no write is larger than its escapes can make of one.
    #[test]
    fn a_large_log_is_streamed_in_bounded_pieces() {
        struct Endless {
            left: usize,
            largest_ask: usize,
        }
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.largest_ask = self.largest_ask.max(buf.len());
                let line = "step:1 - a:0.5 \u{1b}[2J é\n".as_bytes();
                let n = buf.len().min(self.left);
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    *b = line[(self.left - n + i) % line.len()];
                }
                self.left -= n;
                Ok(n)
            }
        }
        struct Counting {
            bytes: usize,
            largest_write: usize,
        }
        impl std::io::Write for Counting {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.bytes += buf.len();
                self.largest_write = self.largest_write.max(buf.len());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let size = 16 << 20;
        let mut from = Endless {
            left: size,
            largest_ask: 0,
        };
        let mut to = Counting {
            bytes: 0,
            largest_write: 0,
        };
        copy_safe(&mut from, &mut to).unwrap();
        assert!(from.largest_ask <= LOG_CHUNK, "{}", from.largest_ask);
        // ESC (1 byte) is the largest growth: 6 bytes as `\u{1b}`.
        assert!(
            to.largest_write <= 6 * (LOG_CHUNK + 3),
            "{}",
            to.largest_write
        );
        assert!(to.bytes > size, "{} of {size}", to.bytes);
    }

    #[test]
    fn a_failed_read_or_write_says_which() {
        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk gone"))
            }
        }
        assert!(matches!(
            copy_safe(Failing, &mut Vec::new()),
            Err(Copy::Read(_))
        ));
        struct Closed;
        impl std::io::Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(matches!(
            copy_safe(&b"x"[..], &mut Closed),
            Err(Copy::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe
        ));
    }
}
