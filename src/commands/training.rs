//! `argus job metrics`, `argus job plot`, the progress rows of `argus job status`, the
//! step bar over streamed logs (`submit --follow`, `job logs -f`, `run`), and the JobSpec
//! of `submit --resume` / `run --resume`.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::commands::error::{Context, Result};

use crate::config::LoadedProfile;
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::submit::Target;
use crate::training::figure;
use crate::training::metrics::{KeyPattern, Table};
use crate::training::plot::{self, Format};
use crate::training::progress::{Follower, Progress};
use crate::training::{self, Error};
use crate::ui::{Printer, StepBar};

/// A streamed log on stdout with the step bar on stderr.
pub struct LogSink<'a> {
    printer: &'a Printer,
    follower: Follower,
    bar: StepBar,
    /// The log made safe to print, piece by piece.
    text: crate::ui::LogText,
}

impl<'a> LogSink<'a> {
    pub fn new(printer: &'a Printer, label: &str) -> Self {
        Self {
            printer,
            follower: Follower::new(),
            bar: StepBar::new(printer.bars(), label),
            text: crate::ui::LogText::new(),
        }
    }

    pub fn write(&mut self, text: &str) {
        let printer = self.printer;
        let shown = self.text.push(text);
        self.bar.suspend(|| printer.raw(&shown));
        if let Some(update) = self.follower.feed(text) {
            self.bar
                .update(update.step, update.total, update.eta_s, &update.summary);
        }
    }

    pub fn finish(&mut self) {
        let rest = self.text.finish();
        if !rest.is_empty() {
            let printer = self.printer;
            self.bar.suspend(|| printer.raw(&rest));
        }
        self.bar.finish();
    }
}

fn patterns(keys: &[String]) -> Result<Vec<KeyPattern>, Error> {
    keys.iter()
        .map(|k| {
            KeyPattern::parse(k).map_err(|reason| Error::BadPattern {
                pattern: k.clone(),
                reason,
            })
        })
        .collect()
}

pub async fn metrics(
    target: &Target,
    id: &str,
    csv: bool,
    keys: &[String],
    printer: &Printer,
) -> Result<Exit> {
    let patterns = patterns(keys)?;
    let (table, _, _) = crate::submit::live::chain_table(target, id)
        .await
        .with_context(|| format!("cannot read the metrics of job {id}"))?;
    warn_dropped(&table, printer);
    let columns = if table.is_empty() {
        printer.info(format!(
            "the log of {} has no verl step lines (verl prints them when trainer.logger includes console)",
            table.jobs.join(", ")
        ));
        Vec::new()
    } else {
        table.select(&patterns).map_err(|pattern| Error::NoMatch {
            pattern,
            jobs: table.jobs.join(", "),
            available: table.keys().to_vec(),
        })?
    };
    if csv {
        let mut out = printer.stdout();
        to_stdout(
            table
                .write_csv(&columns, &mut out)
                .and_then(|()| out.flush()),
        )?;
    } else if printer.json {
        // Streamed a row at a time, with the printer's redaction of every string value.
        let secrets = crate::secrets::known();
        let mut out = printer.stdout();
        to_stdout(
            table
                .write_json(&columns, &|text| secrets.redact_str(text), &mut out)
                .and_then(|()| out.flush()),
        )?;
    } else {
        printer.data(crate::ui::table(&table.to_cells(&columns)));
    }
    if table.jobs.len() > 1 {
        printer.info(format!(
            "steps of {} joined: {}",
            id,
            table.jobs.join(" -> ")
        ));
    }
    Ok(Exit::Success)
}

/// The result of writing data to stdout: a reader that went away (`| head`) is no error.
fn to_stdout(result: std::io::Result<()>) -> Result<(), Error> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Write {
            path: "<stdout>".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// One warning for what a log held that its table left out (see [`Table::dropped`]).
fn warn_dropped(table: &Table, printer: &Printer) {
    if let Some(what) = table.dropped.describe() {
        printer.warn(format!("the log of {}: {what}", table.jobs.join(", ")));
    }
}

pub async fn plot(
    target: &Target,
    ids: &[String],
    keys: &[String],
    output: Option<&Path>,
    printer: &Printer,
) -> Result<Exit> {
    let patterns = patterns(keys)?;
    let output = output
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("{}.png", ids[0])));
    let format = Format::from_path(&output).ok_or_else(|| Error::PlotFormat {
        path: output.clone(),
    })?;
    let mut tables = Vec::new();
    for id in ids {
        let (table, _, _) = crate::submit::live::chain_table(target, id)
            .await
            .with_context(|| format!("cannot read the metrics of job {id}"))?;
        warn_dropped(&table, printer);
        if table.is_empty() {
            printer.warn(format!("the log of {id} has no verl step lines"));
        }
        tables.push((id.clone(), table));
    }
    let chosen = figure::choose(&tables, &patterns, ids)?;
    if chosen.matched > plot::MAX_PANELS {
        printer.warn(format!(
            "{} metrics match; plotting the first {} (choose others with --keys)",
            chosen.matched,
            plot::MAX_PANELS
        ));
    }
    let figure = figure::figure(&tables, &chosen.keys, ids);
    let bytes = plot::render(&figure, format).map_err(Error::Render)?;
    write_output(&output, &bytes)?;
    if printer.json {
        printer.json(&serde_json::json!({
            "output": output,
            "format": match format { Format::Png => "png", Format::Svg => "svg" },
            "figure": figure,
        }));
    } else {
        printer.data(output.display().to_string());
        printer.info(format!(
            "{} panel(s): {}",
            figure.panels.len(),
            chosen.keys.join(", ")
        ));
    }
    Ok(Exit::Success)
}

/// Writes the image atomically (a temporary name in the same directory, then a rename).
fn write_output(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    crate::fsx::write_atomic(path, bytes).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn seconds(s: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(s.round() as u64)).to_string()
}

/// Rows for the `job status` table.
pub fn progress_rows(p: &Progress) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let step = match (p.step, p.total_steps, p.percent) {
        (Some(s), Some(t), Some(pc)) => format!("{s}/{t} ({pc:.0}%)"),
        (Some(s), _, _) => s.to_string(),
        (None, Some(t), _) => format!("0/{t}"),
        (None, None, _) => "-".into(),
    };
    rows.push(vec!["step".into(), step]);
    if let Some(e) = p.elapsed_s {
        rows.push(vec!["elapsed".into(), seconds(e)]);
    }
    if let (Some(eta), Some(from)) = (p.eta_s, &p.eta_from) {
        rows.push(vec![
            "eta".into(),
            format!("{} (from {from})", seconds(eta)),
        ]);
    }
    for m in &p.metrics {
        let value = match m.value.as_f64() {
            Some(v) => crate::training::metrics::human_number(v),
            None => m.value.as_str().unwrap_or_default().to_string(),
        };
        rows.push(vec![
            m.label.clone(),
            format!("{value}  ({} at step {})", m.key, m.step),
        ]);
    }
    rows
}

/// The JobSpec of a job continuing `old` (checked: it has ended and has a checkpoint).
pub async fn resume(
    target: &Target,
    old: &str,
    given: Option<&Path>,
    sets: &[String],
    printer: &Printer,
) -> Result<LoadedJobSpec> {
    let point = crate::submit::live::resume_point(target, old)
        .await
        .with_context(|| format!("cannot resume job {old}"))?;
    for (step, why) in &point.skipped {
        printer.warn(format!("global_step_{step} is not used: {why}"));
    }
    printer.info(format!(
        "resuming {old} from global_step_{} in {}",
        point.step, point.checkpoint_dir
    ));
    training::resumed_jobspec(&point, given, sets)
        .with_context(|| format!("cannot resume job {old}"))
}

/// `run --resume RUN_ID [--set k=v]...`: the JobSpec continuing that run's job (`--set`
/// applied as `submit --resume` applies it), and the job's id.
pub async fn resume_run(
    loaded: &LoadedProfile,
    run_id: &str,
    given: Option<&Path>,
    sets: &[String],
    printer: &Printer,
) -> Result<(LoadedJobSpec, String)> {
    let runs = loaded.host_layout()?.runs();
    let old = training::job_of_run(&runs, run_id)?;
    // The cluster may be down (run brings it up): ask it once, else trust the record.
    let ray = crate::cluster::access::ray_client(loaded)
        .await?
        .with_connect_retries(0);
    let target = Target::from_profile(loaded, ray);
    let job = resume(&target, &old, given, sets, printer).await?;
    Ok((job, old))
}
