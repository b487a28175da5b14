//! A running job as researchers look at it: how far it is, its metrics, plots of them,
//! and continuing it from its checkpoints.
//!
//! ```text
//! log.rs       verl's console lines (`Total training steps`, `step:N - key:value ...`)  pure
//! metrics.rs   the step × metric table of a log or of a chain of resumed jobs; CSV, JSON  pure
//! progress.rs  step of total, ETA, key metrics; a follower of a streamed log            pure
//! plot.rs      one panel per metric, one line per job, to PNG or SVG                    pure
//! figure.rs    which metrics of which jobs a plot draws, as a figure                    pure
//! resume.rs    the checkpoint directory of a job and the JobSpec that continues it      pure
//! ```
//!
//! This file holds the I/O at the edges that needs no cluster: a job's saved log
//! (`jobs/<id>/logs/driver.log`), the chain of jobs a resumed job continues, and
//! `jobs/<id>/metrics.csv`, written when a job ends. The readers that ask a live cluster
//! (a running job's log, whether a job still runs) live with submit.

pub mod checkpoint;
pub mod figure;
pub mod log;
pub mod metrics;
pub mod plot;
pub mod progress;
pub mod resume;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::exit::{Classify, Exit};
use crate::records::{DRIVER_LOG, JobRecord, Records};
use metrics::Table;

/// How many jobs back a chain of resumed jobs is followed (a guard against a loop).
const MAX_CHAIN: usize = 1000;
/// The largest recorded configuration file read (a payload, a JobSpec, a run report).
pub const CONFIG_CAP: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}", crate::text::shown(path))]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", crate::text::shown(path))]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid --keys pattern {pattern:?}: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("no metric matches --keys {pattern:?} in the log of {jobs}")]
    NoMatch {
        pattern: String,
        jobs: String,
        available: Vec<String>,
    },
    #[error("nothing to plot: the log of {0} has no verl step lines")]
    NothingToPlot(String),
    #[error(
        "cannot plot to {}: the file name must end in .png or .svg",
        crate::text::shown(path)
    )]
    PlotFormat { path: PathBuf },
    #[error("cannot draw the plot: {0}")]
    Render(String),
    #[error("argus has no record of job {0}, so it cannot be resumed")]
    NoRecord(String),
    #[error(
        "job {id} is still {status}: resuming it would make two jobs write the same checkpoints"
    )]
    StillRunning { id: String, status: String },
    #[error("job {id} has no checkpoint to resume from: {}", why_no_checkpoint(dir, skipped, *tracker))]
    NoCheckpoint {
        id: String,
        dir: PathBuf,
        /// Each `global_step_<n>/` there and why it was passed over, newest first.
        skipped: Vec<(u64, String)>,
        /// The step verl's tracker file names, if it is there and names one.
        tracker: Option<u64>,
    },
    #[error("the checkpoints of job {id} ({container_dir}) are not on this host's shared storage")]
    CheckpointsElsewhere { id: String, container_dir: String },
    #[error("no run {run_id}: {} does not exist", crate::text::shown(path))]
    UnknownRun { run_id: String, path: PathBuf },
    #[error("run {0} submitted no job, so there is nothing to resume")]
    RunWithoutJob(String),
    #[error("cannot build the resumed JobSpec of job {id}: {reason}")]
    ResumeSpec { id: String, reason: String },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Record(#[from] crate::records::Error),
}

/// What the directory holds that could not be resumed from, each step with its reason.
fn why_no_checkpoint(dir: &Path, skipped: &[(u64, String)], tracker: Option<u64>) -> String {
    use checkpoint::TRACKER;
    let dir = crate::text::shown(dir);
    match (skipped.is_empty(), tracker) {
        (true, None) => format!("{dir} has no global_step_<n>/ and no {TRACKER}"),
        (true, Some(step)) => {
            format!("{dir} has no global_step_<n>/ ({TRACKER} names step {step})")
        }
        (false, _) => {
            let steps: Vec<String> = skipped
                .iter()
                .map(|(step, why)| format!("global_step_{step}/ passed over: {why}"))
                .collect();
            format!("no checkpoint in {dir} is complete: {}", steps.join("; "))
        }
    }
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Record(e) => e.exit(),
            Error::Read { source, .. } => crate::fsx::io_exit(source),
            Error::Render(_) => Exit::Failed,
            Error::Write { .. }
            | Error::BadPattern { .. }
            | Error::NoMatch { .. }
            | Error::NothingToPlot(_)
            | Error::PlotFormat { .. }
            | Error::NoRecord(_)
            | Error::StillRunning { .. }
            | Error::NoCheckpoint { .. }
            | Error::CheckpointsElsewhere { .. }
            | Error::UnknownRun { .. }
            | Error::RunWithoutJob(_)
            | Error::ResumeSpec { .. }
            | Error::Config(_) => Exit::Usage,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            Error::Record(e) => e.hint(),
            Error::Read { source, .. } => crate::fsx::io_hint(source),
            Error::Write { source, .. } if crate::fsx::Unsafe::of(source).is_some() => {
                crate::fsx::io_hint(source)
            }
            Error::Write { .. } => Some("choose a writable path with -o".into()),
            Error::NoMatch { available, .. } => Some(format!(
                "the log has: {}{}",
                available
                    .iter()
                    .take(12)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if available.len() > 12 { ", ..." } else { "" }
            )),
            Error::NothingToPlot(_) => {
                Some("verl prints step lines when trainer.logger includes console".into())
            }
            Error::StillRunning { id, .. } => Some(format!(
                "stop it first: argus job stop {id} --wait"
            )),
            Error::NoCheckpoint { skipped, .. } if !skipped.is_empty() => Some(
                "verl could load none of them: submit the JobSpec again to start from step 1"
                    .into(),
            ),
            Error::NoCheckpoint { .. } => Some(
                "verl saves a checkpoint every trainer.save_freq steps (set save_freq in the JobSpec)"
                    .into(),
            ),
            Error::NoRecord(_) => Some("`argus job list` shows the jobs argus knows".into()),
            Error::UnknownRun { .. } => Some("run ids are the directories under <shared>/runs/".into()),
            _ => None,
        }
    }
}

/// The saved driver log of a job, opened, if argus has one: `jobs/<id>/logs/driver.log`
/// as a regular file with one link, below real directories reached through handles (a
/// planted link is an error, never followed).
pub fn saved_log(records: Option<&Records>, id: &str) -> Result<Option<(PathBuf, File)>, Error> {
    let Some(records) = records else {
        return Ok(None);
    };
    let path = records.dir(id).join(DRIVER_LOG);
    let read = |source| Error::Read {
        path: path.clone(),
        source,
    };
    let Some(job) = records.job(id).map_err(read)? else {
        return Ok(None);
    };
    // The job's directory is held: whatever is swapped on the way to it from now on, the
    // log is opened below this very directory (never through a link).
    crate::testpoint::reach("saved-log:job-opened");
    match job.open_file(DRIVER_LOG) {
        Ok(file) => Ok(Some((path, file))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(read(source)),
    }
}

/// The end of a log (at most its last 256 KiB, which holds far more than the lines a
/// failure shows), as text: a log of any size is never read whole.
pub fn log_tail(mut file: File) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL_BYTES: u64 = 256 << 10;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub fn read_saved(id: &str, (path, file): (PathBuf, File)) -> Result<Table, Error> {
    Table::from_reader(id, BufReader::with_capacity(1 << 16, file))
        .map_err(|source| Error::Read { path, source })
}

/// The record of `id`, if argus has one (a corrupt one is an error, not a missing one).
pub fn load(records: Option<&Records>, id: &str) -> Result<Option<JobRecord>, Error> {
    Ok(match records {
        Some(records) => records.load(id)?,
        None => None,
    })
}

/// The jobs `id` continues, oldest first, ending with `id` (argus's records name them,
/// as checked submission ids: a record whose `resumes` is a path is corrupt).
pub fn chain_ids(records: Option<&Records>, id: &str) -> Result<Vec<String>, Error> {
    let mut ids = vec![id.to_string()];
    let mut current = load(records, id)?;
    while let Some(previous) = current.and_then(|r| r.resumes) {
        let previous = previous.into_string();
        if ids.contains(&previous) {
            tracing::warn!(
                "the records of the jobs {id} continues loop back to {previous}: the chain is cut there"
            );
            break;
        }
        if ids.len() >= MAX_CHAIN {
            tracing::warn!(
                "the chain of jobs {id} continues is cut at {MAX_CHAIN} jobs: {previous} and the jobs before it are left out"
            );
            break;
        }
        current = load(records, &previous)?;
        ids.push(previous);
    }
    ids.reverse();
    Ok(ids)
}

/// Writes `jobs/<id>/metrics.csv` from the saved logs of the job and the jobs it
/// continues (what `argus job metrics ID --csv` prints). Nothing is written for a log
/// without verl lines. Called when a job's end is recorded.
pub fn save_metrics(records: &Records, id: &str) -> Result<Option<PathBuf>, Error> {
    let mut tables = Vec::new();
    for job in chain_ids(Some(records), id)? {
        if let Some(saved) = saved_log(Some(records), &job)? {
            tables.push(read_saved(&job, saved)?);
        }
    }
    let table = Table::chain(tables);
    if table.is_empty() {
        return Ok(None);
    }
    let mut csv = Vec::new();
    let columns: Vec<usize> = (0..table.keys().len()).collect();
    let path = records.dir(id).join(crate::records::METRICS_CSV);
    table
        .write_csv(&columns, &mut csv)
        .and_then(|()| records.write_file(id, crate::records::METRICS_CSV, &csv))
        .map_err(|source| Error::Write { path, source })
        .map(Some)
}

/// What a resumed submission needs: the old job, its checkpoint directory (as the
/// containers see it) and the newest complete checkpoint's step.
#[derive(Debug, Clone)]
pub struct ResumePoint {
    pub old_id: String,
    pub checkpoint_dir: String,
    pub step: u64,
    /// `<checkpoint_dir>/global_step_<step>` when verl's tracker names another (newer,
    /// incomplete) step: the checkpoint is then named (`resume_mode=resume_path`).
    pub from_step: Option<String>,
    /// The newer steps passed over, with why.
    pub skipped: Vec<(u64, String)>,
    /// The world size the checkpoint was saved with (verl loads it only with that one).
    pub world_size: u32,
    /// The old job's JobSpec as recorded (secrets redacted), as YAML.
    pub recorded_jobspec: Option<serde_yaml::Value>,
}

/// The JobSpec of the job that continues `point`: `given` (a JobSpec file the user
/// names) or the old job's own, with the resume settings, then the user's `--set`s.
pub fn resumed_jobspec(
    point: &ResumePoint,
    given: Option<&Path>,
    sets: &[String],
) -> Result<crate::config::jobspec::LoadedJobSpec, Error> {
    use crate::config::jobspec::LoadedJobSpec;
    let (origin, base) = match given {
        Some(path) => {
            // Validated as written first, so its errors point at its own lines.
            let loaded = LoadedJobSpec::load(path, &[])?;
            // A file the user wrote, not a record: read as it was validated.
            let mut value: serde_yaml::Value = crate::config::yaml::parse(&loaded.source)?;
            // Relative paths in the file stay relative to it.
            if let Some(map) = value.as_mapping_mut() {
                let mut absolute = loaded.clone();
                absolute.absolutize();
                if let crate::config::jobspec::Code::Source(code) = &absolute.spec.code {
                    map.insert(
                        "code".into(),
                        serde_yaml::to_value(code).unwrap_or_default(),
                    );
                }
                if let Some(from) = &absolute.spec.data_from {
                    map.insert("data_from".into(), from.clone().into());
                }
            }
            (
                format!("{} (resuming {})", path.display(), point.old_id),
                value,
            )
        }
        None => (
            format!("<recorded JobSpec of {}>", point.old_id),
            point
                .recorded_jobspec
                .clone()
                .ok_or_else(|| Error::ResumeSpec {
                    id: point.old_id.clone(),
                    reason: "its record has no config/jobspec.yaml; give a JobSpec".into(),
                })?,
        ),
    };
    let value = resume::resumed_jobspec(
        base,
        &point.old_id,
        &point.checkpoint_dir,
        point.from_step.as_deref(),
        |name| std::env::var(name).ok(),
    )
    .map_err(|e| Error::ResumeSpec {
        id: point.old_id.clone(),
        reason: e.to_string(),
    })?;
    let loaded = crate::inputs::recorded::load(origin, &value, sets)?;
    check_world_size(point, &loaded.spec)?;
    Ok(loaded)
}

/// The resumed job runs as many ranks as the checkpoint was saved with: verl loads a
/// checkpoint only with the world size that wrote it, and would fail on the cluster.
fn check_world_size(
    point: &ResumePoint,
    spec: &crate::config::jobspec::JobSpec,
) -> Result<(), Error> {
    let (Some(nodes), Some(gpus)) = (spec.nnodes, spec.n_gpus_per_node) else {
        return Ok(());
    };
    let ranks = u64::from(nodes) * u64::from(gpus);
    if ranks == u64::from(point.world_size) {
        return Ok(());
    }
    Err(Error::ResumeSpec {
        id: point.old_id.clone(),
        reason: format!(
            "global_step_{} was saved by {} ranks, but the resumed job runs {ranks} (nnodes {nodes} x n_gpus_per_node {gpus}): verl loads a checkpoint only with the world size that wrote it",
            point.step, point.world_size
        ),
    })
}

/// The job a run submitted, from `runs/<run_id>/report.json` (`runs` is `<shared>/runs`:
/// it and everything below it are checked, never followed through a link).
pub fn job_of_run(runs: &Path, run_id: &str) -> Result<String, Error> {
    let path = runs.join(run_id).join("report.json");
    let unknown = || Error::UnknownRun {
        run_id: run_id.to_string(),
        path: path.clone(),
    };
    if !crate::config::jobspec::valid_id(run_id) {
        return Err(unknown());
    }
    // The shared root (the parent of `runs`, a mount) is opened by path; `runs/` and
    // everything below it through handles, never through a link.
    let (shared, name) = crate::fsx::root_and_name(runs);
    let bytes = match crate::fsx::Dir::root(&shared).and_then(|root| {
        root.read(
            Path::new(&name).join(run_id).join("report.json"),
            CONFIG_CAP,
        )
    }) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown()),
        Err(source) => return Err(Error::Read { path, source }),
    };
    let report: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let id = report["submission_id"]
        .as_str()
        .ok_or_else(|| Error::RunWithoutJob(run_id.to_string()))?;
    // A path there (`../..`) is a corrupt report, never joined below `jobs/`.
    match id.parse::<crate::ids::SubmissionId>() {
        Ok(id) => Ok(id.into_string()),
        Err(e) => Err(crate::records::Error::Invalid {
            path,
            reason: e.to_string(),
        }
        .into()),
    }
}

/// What `f` logs through `tracing` (warnings included), as text: for tests of what a
/// user is told.
#[cfg(test)]
pub(crate) fn warnings_of(f: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = captured.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_with_another_world_size_than_its_checkpoint_is_refused() {
        let point = |world_size| {
            ResumePoint {
            old_id: "old-1".into(),
            checkpoint_dir: "/mnt/shared/jobs/old-1/checkpoints".into(),
            step: 4,
            from_step: None,
            skipped: Vec::new(),
            world_size,
            recorded_jobspec: Some(
                serde_yaml::from_str(
                    "workload: grpo\ncode_id: abc\nmodel_id: /m\ntrain_file: /d/train.parquet\nval_file: /d/test.parquet\nnnodes: 2\nn_gpus_per_node: 1\n",
                )
                .unwrap(),
            ),
        }
        };
        assert!(resumed_jobspec(&point(2), None, &[]).is_ok());
        let err = resumed_jobspec(&point(2), None, &["n_gpus_per_node=4".into()]).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(
            err.to_string()
                .contains("saved by 2 ranks, but the resumed job runs 8")
                || format!("{err:?}").contains("saved by 2 ranks, but the resumed job runs 8"),
            "{err:?}"
        );
    }

    fn record(shared: &Path, id: &str, resumes: Option<&str>) {
        let dir = shared.join("jobs").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut json = serde_json::json!({"submission_id": id, "status": "STOPPED"});
        if let Some(r) = resumes {
            json["resumes"] = r.into();
        }
        std::fs::write(dir.join("job.json"), json.to_string()).unwrap();
    }

    #[test]
    fn a_chain_follows_ids_and_refuses_a_resumes_that_is_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        record(&shared, "a", None);
        record(&shared, "b", Some("a"));
        record(&shared, "c", Some("b"));
        let records = Records::new(shared.join("jobs"));
        assert_eq!(chain_ids(Some(&records), "c").unwrap(), ["a", "b", "c"]);
        for bad in ["../..", "/etc", "../../outside"] {
            record(&shared, "d", Some(bad));
            let err = chain_ids(Some(&records), "d").unwrap_err();
            assert_eq!(err.exit(), Exit::Usage, "{bad}: {err}");
            assert!(err.to_string().starts_with("corrupt record "), "{err}");
        }
        // A link to a driver log outside is refused, not read.
        std::fs::create_dir_all(shared.join("jobs/a/logs")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", shared.join("jobs/a/logs/driver.log")).unwrap();
        let err = save_metrics(&records, "c").unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
        assert!(!shared.join("jobs/c/metrics.csv").exists());
    }

    #[test]
    fn the_job_of_a_run_is_an_id_read_below_a_real_runs_directory() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("shared/runs");
        std::fs::create_dir_all(runs.join("r-1")).unwrap();
        std::fs::write(runs.join("r-1/report.json"), r#"{"submission_id": "j-1"}"#).unwrap();
        assert_eq!(job_of_run(&runs, "r-1").unwrap(), "j-1");
        std::fs::write(runs.join("r-1/report.json"), r#"{"submission_id": "../x"}"#).unwrap();
        assert_eq!(job_of_run(&runs, "r-1").unwrap_err().exit(), Exit::Usage);
        let outside = dir.path().join("outside");
        std::fs::rename(&runs, &outside).unwrap();
        std::os::unix::fs::symlink(&outside, &runs).unwrap();
        let err = job_of_run(&runs, "r-1").unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
        assert!(format!("{err:?}").contains("Link"), "{err:?}");
    }

    #[test]
    fn a_chain_cut_at_its_limit_or_by_a_loop_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        record(&shared, "j0", None);
        for i in 1..=MAX_CHAIN {
            record(&shared, &format!("j{i}"), Some(&format!("j{}", i - 1)));
        }
        let records = Records::new(shared.join("jobs"));
        let last = format!("j{MAX_CHAIN}");
        let mut ids = Vec::new();
        let warnings = warnings_of(|| ids = chain_ids(Some(&records), &last).unwrap());
        assert_eq!(ids.len(), MAX_CHAIN);
        assert_eq!(ids[0], "j1");
        assert!(
            warnings.contains(&format!(
                "the chain of jobs {last} continues is cut at {MAX_CHAIN} jobs: j0 and the jobs before it are left out"
            )),
            "{warnings}"
        );
        // Below the limit: nothing said.
        let warnings = warnings_of(|| ids = chain_ids(Some(&records), "j5").unwrap());
        assert_eq!(ids, ["j0", "j1", "j2", "j3", "j4", "j5"]);
        assert!(warnings.is_empty(), "{warnings}");
        // A loop.
        record(&shared, "x", Some("y"));
        record(&shared, "y", Some("x"));
        let warnings = warnings_of(|| ids = chain_ids(Some(&records), "x").unwrap());
        assert_eq!(ids, ["y", "x"]);
        assert!(warnings.contains("loop back to x"), "{warnings}");
    }
}
