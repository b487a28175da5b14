//! `argus run`.

use crate::commands::error::{Context, Result};

use crate::cli::{Cli, RunArgs};
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::ray::jobs::JobStatus;
use crate::run::{self, Outcome, RunOptions, RunReport, lock::RunLock};
use crate::ui::{Printer, table};

pub async fn run(cli: &Cli, args: &RunArgs, printer: &Printer) -> Result<Exit> {
    if args.slurm {
        let Some(path) = &args.jobspec else {
            return Ok(Exit::Usage);
        };
        let loaded = super::profile(cli)?;
        let job = LoadedJobSpec::load(path, &args.sets)?;
        let reporter = printer.reporter();
        let (submitted, exit) = crate::slurm::submit::run_inside(&loaded, job, &reporter)
            .await
            .context("the run in this Slurm allocation stopped")?;
        if printer.json {
            printer.json(&serde_json::to_value(&submitted)?);
        }
        return Ok(exit);
    }
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
            let (job, old) = super::training::resume_run(
                &loaded,
                run_id,
                args.jobspec.as_deref(),
                &args.sets,
                printer,
            )
            .await?;
            resumes = Some(old);
            (job, loaded, None)
        }
        None => {
            let Some(path) = &args.jobspec else {
                return Ok(Exit::Usage);
            };
            (
                LoadedJobSpec::load(path, &args.sets)?,
                super::profile(cli)?,
                None,
            )
        }
    };
    job.check_on_shared(&loaded.profile.container_layout().mount())?;
    let mut loaded = loaded;
    if args.lock.is_none() {
        image_for_jobspec(cli, &mut loaded, &job, printer).await?;
    }
    // A verl run run with this command's profile ends with its training at a glance.
    let summarize =
        job.spec.workload != crate::config::jobspec::Workload::Custom && args.lock.is_none();
    let options = RunOptions {
        down_after: args.down_after,
        lock,
        allow_drift: args.allow_drift,
        follow: !printer.json,
        new: args.new,
        resumes,
        restart: crate::config::jobspec::restart::effective(
            job.spec.restart.as_ref(),
            &args.restart.flags(),
        )?,
    };
    let reporter = printer.reporter();
    let mut sink = super::training::LogSink::new(printer, "training");
    let outcome = run::run(&loaded, job, &options, &reporter, |text| sink.write(text))
        .await
        .context("the run stopped")?;
    sink.finish();
    let (report, finished_before) = match outcome {
        Outcome::Ran(report) => (report, false),
        Outcome::AlreadyFinished(report) => (report, true),
    };
    let status = report
        .job_status
        .clone()
        .unwrap_or_else(|| JobStatus::Unknown("not ended".into()));
    // A FAILED job's own last words (Ray's message is often generic), from its saved log.
    let saved = SavedLog::of(&loaded, &report);
    let tail = (status == JobStatus::Failed)
        .then(|| saved.tail())
        .flatten()
        .map(|log| crate::submit::watch::driver_tail(&log))
        .filter(|tail| !tail.is_empty());
    if printer.json {
        let mut out = serde_json::to_value(&report)?;
        out["driver_tail"] = serde_json::json!(tail);
        printer.json(&out);
    } else if !finished_before {
        print_stages(printer, &report, &status);
        if let Some(tail) = &tail {
            printer.info(super::job::tail_text(tail));
        }
        if summarize && let Some(id) = &report.submission_id {
            training_summary(cli, &report, id, &saved, printer).await;
        }
    }
    if finished_before {
        printer.info(format!(
            "run {} already finished: job {} {status}; report: {}\nhint: `argus run --new` runs it again",
            report.run_id,
            report.submission_id.clone().unwrap_or_default(),
            report_path(&report),
        ));
    }
    Ok(status.exit())
}

/// `argus job status` of the run's job (steps, the last metrics) and its `job plot`,
/// written beside the run's report. Best effort: the run's outcome is already decided.
async fn training_summary(
    cli: &Cli,
    report: &RunReport,
    id: &str,
    saved: &SavedLog,
    printer: &Printer,
) {
    use crate::cli::JobCommand;
    let status = JobCommand::Status { id: id.to_string() };
    if let Err(e) = super::job::run(cli, &status, printer).await {
        printer.warn(format!("cannot show the job's status: {e}"));
    }
    let Some(lock) = &report.lock else { return };
    // A job that ended before its first step has nothing to draw (its status said why).
    let stepped = saved.any_line(|l| {
        matches!(
            crate::training::log::parse_line(l),
            crate::training::log::Line::Step { .. }
        )
    });
    if !stepped {
        return;
    }
    let output = std::path::Path::new(lock).with_file_name("plot.png");
    let plot = JobCommand::Plot {
        ids: vec![id.to_string()],
        keys: Vec::new(),
        output: Some(output),
    };
    if let Err(e) = super::job::run(cli, &plot, printer).await {
        printer.warn(format!("no plot of the job's metrics: {e}"));
    }
}

fn report_path(report: &RunReport) -> String {
    match &report.lock {
        Some(lock) => lock.replace("run.lock.yaml", "report.json"),
        None => format!("runs/{}/report.json", report.run_id),
    }
}

fn print_stages(printer: &Printer, report: &RunReport, status: &JobStatus) {
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
    let resumed = match report.resumed {
        0 => String::new(),
        1 => " (resumed)".to_string(),
        n => format!(" (resumed {n} times)"),
    };
    printer.info(format!(
        "run {}{resumed}: job {} {status} in {:.1}s",
        report.run_id,
        report.submission_id.clone().unwrap_or_default(),
        report.seconds
    ));
    if !report.attempts.is_empty() {
        printer.info(attempts_table(report));
    }
    for drift in &report.drift {
        printer.warn(format!("drift (allowed): {drift}"));
    }
    if let Some(lock) = &report.lock {
        printer.info(format!("lock:   {lock}\nreport: {}", report_path(report)));
    }
}

/// The attempts of a supervised run, one row each.
fn attempts_table(report: &RunReport) -> String {
    let mut rows = vec![
        [
            "ATTEMPT",
            "JOB",
            "STATUS",
            "ENDED BY",
            "FROM",
            "LAST STEP",
            "",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for a in &report.attempts {
        rows.push(vec![
            a.n.to_string(),
            a.submission_id.clone(),
            a.status
                .as_ref()
                .map_or("RUNNING".to_string(), ToString::to_string),
            a.cause.map_or("-".to_string(), |c| c.to_string()),
            a.resumed_from
                .as_ref()
                .map_or("start".to_string(), |r| format!("global_step_{}", r.step)),
            a.last_step.map_or("-".to_string(), |s| s.to_string()),
            match a.unlogged_steps.as_slice() {
                [] => a.detail.clone().unwrap_or_default(),
                steps => format!(
                    "{} (trained, never logged: steps {})",
                    a.detail.clone().unwrap_or_default(),
                    steps
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        ]);
    }
    table(&rows)
}

/// The run's job's saved driver log (`jobs/<id>/logs/driver.log`), reached through the
/// job directory's handle like every read of a record (no link followed, no FIFO opened,
/// a hard link refused), and read in bounded pieces: others can write the storage.
struct SavedLog {
    records: Option<crate::records::Records>,
    id: Option<String>,
}

impl SavedLog {
    fn of(loaded: &crate::config::LoadedProfile, report: &RunReport) -> SavedLog {
        SavedLog {
            records: loaded
                .host_layout()
                .ok()
                .map(|layout| crate::records::Records::new(layout.jobs())),
            id: report.submission_id.clone(),
        }
    }

    fn open(&self) -> Option<std::fs::File> {
        let id = self.id.as_deref()?;
        match crate::training::saved_log(self.records.as_ref(), id) {
            Ok(found) => found.map(|(_, file)| file),
            Err(e) => {
                tracing::warn!("{}", crate::exit::one_line(&e));
                None
            }
        }
    }

    /// The log's end ([`crate::training::log_tail`]).
    fn tail(&self) -> Option<String> {
        crate::training::log_tail(self.open()?).ok()
    }

    /// Whether some line of the log satisfies `pred`, read a line at a time as the
    /// metrics reader reads it (a line over its cap is skipped, never held).
    fn any_line(&self, pred: impl Fn(&str) -> bool) -> bool {
        use crate::training::metrics::{MAX_LINE, read_line_capped};
        let Some(file) = self.open() else {
            return false;
        };
        let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
        let mut line = Vec::new();
        while let Ok(Some(whole)) = read_line_capped(&mut reader, &mut line, MAX_LINE) {
            if whole && pred(&String::from_utf8_lossy(&line)) {
                return true;
            }
        }
        false
    }
}

/// The image for the verl release the JobSpec pins: the built-in profile's follows it;
/// another profile's is refused here when it is another release, before anything runs. (A
/// replay runs on the image its lock pinned, never another: not called for one.)
async fn image_for_jobspec(
    cli: &Cli,
    loaded: &mut crate::config::LoadedProfile,
    job: &LoadedJobSpec,
    printer: &Printer,
) -> Result<()> {
    let builtin = cli.profile.is_none() && cli.config.is_none();
    let label = crate::cluster::image::verl_version_label(
        loaded.profile.docker.host.as_deref(),
        &loaded.profile.image,
    )
    .await;
    let note =
        crate::submit::verl_match::image_for_run(&mut loaded.profile, builtin, &job.spec, label)
            .map_err(crate::submit::Error::VerlMismatch)?;
    if let Some(note) = note {
        printer.info(note);
    }
    Ok(())
}
