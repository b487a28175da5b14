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

    pub fn read(path: &Path) -> Option<RunReport> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// Writes one run's report as the stages go.
pub struct Recorder {
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
        std::fs::create_dir_all(runs).map_err(record(runs))?;
        fsx::remove_dead_temps(runs);
        let dir = runs.join(&report.run_id);
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
        Recorder {
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
}
