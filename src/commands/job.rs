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
    Ok(Target::from_profile(&loaded, ray))
}

/// The cluster `submit --dry-run` resolves against: the same target, reached by nothing (a
/// dry run sends no request, so a remote head's tunnel or host is not needed).
async fn dry_run_target(cli: &Cli) -> Result<Target> {
    if cli.config.is_some() || cli.slurm_run.is_some() {
        return target(cli).await;
    }
    let loaded = super::profile(cli)?;
    let ray = crate::ray::RayClient::new(&loaded.dashboard_url(), None);
    Ok(Target::from_profile(&loaded, ray))
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
    loaded.check_on_shared(&target.mount)?;
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
    let target = target(cli).await?;
    match command {
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
    if printer.json {
        printer.json(&serde_json::json!({"job": info, "record": record, "from_cluster": from_cluster, "progress": progress, "driver_tail": tail}));
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
        if let Some(r) = &record {
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

/// `job logs ID`: the driver's log from Ray, else the one argus saved.
async fn logs(target: &Target, id: &str, printer: &Printer) -> Result<Exit> {
    let api = JobsApi { ray: &target.ray };
    match api.logs(id).await {
        Ok(logs) => printer.raw(&logs),
        Err(e) => match saved_log(target, id)? {
            Some((path, text)) => {
                printer.info(format!(
                    "(from {}: the cluster no longer has this job)",
                    path.display()
                ));
                printer.raw(&text);
            }
            None => {
                return Err(submit::Error::from(e))
                    .with_context(|| format!("cannot read the logs of job {id}"));
            }
        },
    }
    Ok(Exit::Success)
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

/// The driver log argus saved for `id` once it ended (`jobs/<id>/logs/driver.log`), as
/// text: bytes that are not UTF-8 are shown as U+FFFD, as Ray's own log API shows them (a
/// live log reaches argus already decoded that way). None when argus saved none.
fn saved_log(target: &Target, id: &str) -> Result<Option<(std::path::PathBuf, String)>> {
    use std::io::Read as _;
    let Some(records) = target.records() else {
        return Ok(None);
    };
    let path = records.dir(id).join(crate::training::DRIVER_LOG);
    let read = |source| crate::training::Error::Read {
        path: path.clone(),
        source,
    };
    let Some(mut file) = records
        .open_file(id, crate::training::DRIVER_LOG)
        .map_err(read)?
    else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(Some((path, text)))
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
