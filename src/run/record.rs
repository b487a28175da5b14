//! A run's record on the shared storage, `runs/<run_id>/report.json`: which run it is
//! (its id and key), the stage under way or `done`, each stage's duration, and the job's
//! end. The [`Recorder`] rewrites it atomically as each stage starts and ends, so the
//! report always tells where a run is, and a run is found again by its key.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::Error;
use crate::fsx;
use crate::ray::jobs::JobStatus;

/// `runs/<run_id>` below `shared`, checked: the id a plain name, no component a link.
fn checked_dir(shared: &Path, runs: &Path, run_id: &str) -> std::io::Result<PathBuf> {
    if !crate::ids::is_valid_id(run_id) {
        return Err(fsx::Unsafe::Escapes {
            root: shared.join(runs),
            rel: PathBuf::from(run_id),
        }
        .into());
    }
    fsx::under(shared, runs.join(run_id))
}

/// The report's stage once the run has ended.
pub const DONE: &str = "done";
pub const REPORT: &str = "report.json";
pub const LOCK: &str = "run.lock.yaml";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageTiming {
    pub stage: String,
    pub seconds: f64,
    pub note: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    pub run_id: String,
    /// What the run runs (see `resume::RunKey`); runs of one key are one run.
    #[serde(default)]
    pub key: Option<String>,
    /// When the run was first started (RFC 3339, this host's clock).
    #[serde(default)]
    pub started_at: String,
    /// How many times the run was resumed after stopping.
    #[serde(default)]
    pub resumed: u32,
    /// The stage under way, or `done`.
    pub stage: String,
    /// The stages of the latest attempt.
    pub stages: Vec<StageTiming>,
    pub submission_id: Option<String>,
    pub job_status: Option<JobStatus>,
    pub job_message: Option<String>,
    pub driver_log: Option<String>,
    pub checkpoints: Option<String>,
    pub lock: Option<String>,
    pub replay_of: Option<String>,
    #[serde(default)]
    pub drift: Vec<String>,
    /// Seconds of the latest attempt.
    pub seconds: f64,
}

impl RunReport {
    pub fn is_done(&self) -> bool {
        self.stage == DONE
    }

    /// The report at `runs/<run_id>/report.json`, if it is one: read without following a
    /// link (at the file or at its run directory), and only when it names the run of its
    /// own directory (a `run_id` of `../x` would lead its writes elsewhere).
    pub fn read(path: &Path) -> Option<RunReport> {
        use std::io::Read;
        let dir = path.parent()?;
        if std::fs::symlink_metadata(dir)
            .ok()?
            .file_type()
            .is_symlink()
        {
            tracing::warn!(
                "{} is a symbolic link: not followed (argus does not follow links on the shared storage)",
                dir.display()
            );
            return None;
        }
        let mut bytes = Vec::new();
        fsx::open_regular(path)
            .ok()?
            .take(16 << 20)
            .read_to_end(&mut bytes)
            .ok()?;
        let report: RunReport = serde_json::from_slice(&bytes).ok()?;
        let own = dir.file_name().and_then(|n| n.to_str());
        if own != Some(report.run_id.as_str()) {
            tracing::warn!(
                "{}: names run {:?}, not the run of its directory: ignored",
                path.display(),
                report.run_id
            );
            return None;
        }
        Some(report)
    }
}

/// Writes one run's report as the stages go. Its directory, `runs/<run_id>/`, is checked
/// at every write without following links (`runs` is `<shared>/runs`: it and everything
/// below it are checked; only the shared root may be a link).
pub struct Recorder {
    /// The shared root and `runs/<run_id>` below it.
    shared: PathBuf,
    rel: PathBuf,
    dir: PathBuf,
    pub report: RunReport,
    started: Instant,
    stage_started: Instant,
}

impl Recorder {
    /// A new run: `runs/<run_id>/` appears whole, with its report, through one rename.
    pub fn create(runs: &Path, report: RunReport) -> Result<Recorder, Error> {
        let record = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Record { path, source }
        };
        let (shared, name) = fsx::root_and_name(runs);
        fsx::create_dirs_under(&shared, &name).map_err(record(runs))?;
        let dir = checked_dir(&shared, &name, &report.run_id).map_err(record(runs))?;
        if let Ok(dir) = fsx::Dir::root(runs) {
            fsx::remove_dead_temps(&dir);
        }
        let tmp = runs.join(fsx::temp_name(&report.run_id));
        let bytes = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let made = std::fs::create_dir(&tmp)
            .and_then(|()| fsx::write_atomic(&tmp.join(REPORT), &bytes))
            .and_then(|()| std::fs::rename(&tmp, &dir))
            .and_then(|()| fsx::fsync_dir(runs));
        if let Err(source) = made {
            let _ = fsx::remove_any(&tmp);
            return Err(Error::Record { path: dir, source });
        }
        Ok(Recorder::resume(runs, report))
    }

    /// A run found again: its report goes on in its own directory.
    pub fn resume(runs: &Path, report: RunReport) -> Recorder {
        let (shared, name) = fsx::root_and_name(runs);
        Recorder {
            rel: name.join(&report.run_id),
            shared,
            dir: runs.join(&report.run_id),
            report,
            started: Instant::now(),
            stage_started: Instant::now(),
        }
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    pub fn save(&mut self) -> Result<(), Error> {
        self.report.seconds = self.started.elapsed().as_secs_f64();
        let path = self.dir.join(REPORT);
        let record = |source| Error::Record {
            path: path.clone(),
            source,
        };
        if !crate::ids::is_valid_id(&self.report.run_id) {
            return Err(record(
                fsx::Unsafe::Escapes {
                    root: self.shared.clone(),
                    rel: self.rel.clone(),
                }
                .into(),
            ));
        }
        fsx::under(&self.shared, self.rel.join(REPORT)).map_err(record)?;
        fsx::write_atomic(
            &path,
            &serde_json::to_vec_pretty(&self.report).unwrap_or_default(),
        )
        .map_err(|source| Error::Record { path, source })
    }

    /// Starts a stage: the report says so first, then a test may stop the run here
    /// (`run:<stage>`, see `crate::testpoint`).
    pub fn begin(&mut self, stage: &str) -> Result<(), Error> {
        self.report.stage = stage.to_string();
        self.stage_started = Instant::now();
        self.save()?;
        crate::testpoint::reach(&format!("run:{stage}"));
        Ok(())
    }

    pub fn end(&mut self, note: impl Into<String>) -> Result<(), Error> {
        let stage = self.report.stage.clone();
        self.report.stages.push(StageTiming {
            stage,
            seconds: self.stage_started.elapsed().as_secs_f64(),
            note: note.into(),
        });
        self.save()
    }

    /// The run has ended.
    pub fn finish(mut self) -> Result<RunReport, Error> {
        self.report.stage = DONE.into();
        self.save()?;
        Ok(self.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_appears_whole_with_its_report() {
        let root = tempfile::tempdir().unwrap();
        let runs = root.path().join("runs");
        let report = RunReport {
            run_id: "run-1".into(),
            key: Some("k".into()),
            ..Default::default()
        };
        let mut rec = Recorder::create(&runs, report).unwrap();
        let names: Vec<String> = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["run-1"]);
        rec.begin("up").unwrap();
        rec.end("ok").unwrap();
        let read = RunReport::read(&runs.join("run-1").join(REPORT)).unwrap();
        assert_eq!(read.stage, "up");
        assert_eq!(read.stages.len(), 1);
        let done = rec.finish().unwrap();
        assert!(done.is_done());
        assert!(
            RunReport::read(&runs.join("run-1").join(REPORT))
                .unwrap()
                .is_done()
        );
        // The same id again is refused: a run directory is never reused by a new run.
        assert!(Recorder::create(&runs, done).is_err());
    }

    #[test]
    fn a_planted_runs_link_or_a_report_naming_another_run_leads_nowhere() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let runs = root.path().join("runs");
        std::os::unix::fs::symlink(&outside, &runs).unwrap();
        let report = RunReport {
            run_id: "run-1".into(),
            ..Default::default()
        };
        let err = Recorder::create(&runs, report.clone()).err().unwrap();
        assert!(
            err.to_string().contains("runs") || format!("{err:?}").contains("Link"),
            "{err:?}"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let mut rec = Recorder::resume(&runs, report);
        assert!(rec.save().is_err());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

        std::fs::remove_file(&runs).unwrap();
        std::fs::create_dir_all(runs.join("run-2")).unwrap();
        std::fs::write(
            runs.join("run-2").join(REPORT),
            r#"{"run_id": "../outside", "stage": "up", "stages": [], "seconds": 0}"#,
        )
        .unwrap();
        assert!(RunReport::read(&runs.join("run-2").join(REPORT)).is_none());
        std::os::unix::fs::symlink(&outside, runs.join("run-3")).unwrap();
        std::fs::write(
            outside.join(REPORT),
            r#"{"run_id": "run-3", "stage": "up", "stages": [], "seconds": 0}"#,
        )
        .unwrap();
        assert!(RunReport::read(&runs.join("run-3").join(REPORT)).is_none());
        let mut rec = Recorder::resume(
            &runs,
            RunReport {
                run_id: "run-3".into(),
                ..Default::default()
            },
        );
        assert!(rec.save().is_err());
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            1,
            "only the file the test put there"
        );
    }
}
