//! `argus run`.

use crate::error::{Context, Result};

use crate::cli::{Cli, RunArgs};
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::ray::jobs::JobStatus;
use crate::run::{self, RunOptions, lock::RunLock};
use crate::ui::{Printer, table};

pub async fn run(cli: &Cli, args: &RunArgs, printer: &Printer) -> Result<Exit> {
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
        None => {
            let Some(path) = &args.jobspec else {
                return Ok(Exit::Usage);
            };
            (LoadedJobSpec::load(path, &[])?, super::profile(cli)?, None)
        }
    };
    let p = &loaded.profile;
    job.check_on_shared(p.submit.shared_root.as_deref().unwrap_or(&p.shared.mount))?;
    let options = RunOptions {
        down_after: args.down_after,
        lock,
        allow_drift: args.allow_drift,
        follow: !printer.json,
    };
    let reporter = printer.reporter();
    let report = run::run(&loaded, job, &options, &reporter, |text| printer.raw(text))
        .await
        .context("the run stopped")?;
    let status = report
        .job_status
        .clone()
        .unwrap_or_else(|| JobStatus::Unknown("not ended".into()));
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
    Ok(status.exit())
}
