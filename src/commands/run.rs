//! `argus run`.

use anyhow::{Context, Result};

use crate::cli::{Cli, RunArgs};
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::run::{self, RunOptions, lock::RunLock};
use crate::ui::{Printer, table};

pub async fn run(cli: &Cli, args: &RunArgs, printer: &Printer) -> Result<Exit> {
    let mut resumes = None;
    let (job, loaded, lock) = match &args.lock {
        Some(path) => {
            let lock = RunLock::read(path).map_err(run::Error::BadLock)?;
            let profile = match &cli.profile {
                Some(_) => Some(super::profile(cli)?),
                None => None,
            };
            let (job, loaded) = run::from_lock(&lock, profile.as_ref())?;
            (job, loaded, Some((path.clone(), lock)))
        }
        None if args.resume.is_some() => {
            let run_id = args.resume.as_deref().unwrap_or_default();
            let loaded = super::profile(cli)?;
            let (job, old) =
                super::training::resume_run(&loaded, run_id, args.jobspec.as_deref(), printer)
                    .await?;
            resumes = Some(old);
            (job, loaded, None)
        }
        None => {
            let Some(path) = &args.jobspec else {
                return Ok(Exit::Usage);
            };
            (LoadedJobSpec::load(path, &[])?, super::profile(cli)?, None)
        }
    };
    let options = RunOptions {
        down_after: args.down_after,
        lock,
        allow_drift: args.allow_drift,
        follow: !printer.json,
        resumes,
    };
    let reporter = printer.reporter();
    let mut sink = super::training::LogSink::new(printer, "training");
    let report = run::run(&loaded, job, &options, &reporter, |text| sink.write(text))
        .await
        .context("the run stopped")?;
    sink.finish();
    let status = report.job_status.clone().unwrap_or_default();
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
    } else {
        let mut rows = vec![vec![
            "STAGE".to_string(),
            "SECONDS".to_string(),
            "".to_string(),
        ]];
        rows.extend(
            report
                .stages
                .iter()
                .map(|s| vec![s.stage.clone(), format!("{:.2}", s.seconds), s.note.clone()]),
        );
        printer.info(table(&rows));
        printer.info(format!(
            "run {}: job {} {status} in {:.1}s",
            report.run_id,
            report.submission_id.clone().unwrap_or_default(),
            report.seconds
        ));
        for drift in &report.drift {
            printer.warn(format!("drift (allowed): {drift}"));
        }
        if let Some(lock) = &report.lock {
            printer.info(format!(
                "lock:   {lock}\nreport: {}",
                lock.replace("run.lock.yaml", "report.json")
            ));
        }
    }
    Ok(match status.as_str() {
        "SUCCEEDED" => Exit::Success,
        "STOPPED" => Exit::Stopped,
        _ => Exit::Failed,
    })
}
