//! A run's record on the shared storage, `runs/<run_id>/report.json`: which run it is
//! (its id and key), the stage under way or `done`, each stage's duration, and the job's
//! end. The [`Recorder`] rewrites it atomically as each stage starts and ends, so the
//! report always tells where a run is, and a run is found again by its key.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::Error;
use crate::fsx::{self, Dir};
use crate::ray::jobs::JobStatus;

/// The most a report may hold: it is on storage others write.
const REPORT_CAP: u64 = 16 << 20;

/// The handle of `runs` (given as `<shared>/runs`): only `<shared>` is opened by path;
/// `runs` is opened from its handle without following a link.
pub fn open_runs(runs: &Path) -> std::io::Result<Dir> {
    let (shared, name) = fsx::root_and_name(runs);
    Dir::root(&shared)?.open_dir(name)
}

/// One run's directory, `runs/<run_id>`, reached through handles (the shared root by
/// path, then `runs` and the run's own directory from their parents' handles, never
/// through a link), and held open once reached: a directory on the way swapped for a
/// link afterwards does not move the run's writes.
#[derive(Debug)]
struct RunDir {
    shared: PathBuf,
    runs: OsString,
    run_id: String,
    held: Option<Dir>,
}

impl RunDir {
    fn new(runs: &Path, run_id: &str) -> RunDir {
        let (shared, runs) = fsx::root_and_name(runs);
        RunDir {
            shared,
            runs,
            run_id: run_id.to_string(),
            held: None,
        }
    }

    /// What messages show for `name` in the run's directory.
    fn display(&self, name: &str) -> PathBuf {
        let dir = self.shared.join(&self.runs).join(&self.run_id);
        if name.is_empty() { dir } else { dir.join(name) }
    }

    /// The run id, refused unless it is a plain id (`../x` would lead elsewhere).
    fn checked_id(&self) -> std::io::Result<&str> {
        if crate::ids::is_valid_id(&self.run_id) {
            Ok(&self.run_id)
        } else {
            Err(fsx::Unsafe::Escapes {
                root: self.shared.join(&self.runs),
                rel: PathBuf::from(&self.run_id),
            }
            .into())
        }
    }

    /// The run's directory reached afresh from the shared root.
    fn reach(&self) -> std::io::Result<Dir> {
        let id = self.checked_id()?;
        Dir::root(&self.shared)?.open_dir(&self.runs)?.open_dir(id)
    }

    /// The run's directory, held open from the first time it is reached.
    fn held(&mut self) -> std::io::Result<&Dir> {
        let dir = match self.held.take() {
            Some(dir) => dir,
            None => self.reach()?,
        };
        Ok(self.held.insert(dir))
    }

    /// Another handle on the run's directory (the held one when there is one).
    fn open(&self) -> std::io::Result<Dir> {
        match &self.held {
            Some(dir) => dir.try_clone(),
            None => self.reach(),
        }
    }

    fn try_clone(&self) -> RunDir {
        RunDir {
            shared: self.shared.clone(),
            runs: self.runs.clone(),
            run_id: self.run_id.clone(),
            held: self.held.as_ref().and_then(|dir| dir.try_clone().ok()),
        }
    }
}

/// A file of one run's directory, `runs/<run_id>/<name>`, read and written through the
/// directory's handle, never by path: what [`Recorder::lock_path`] gives for the run
/// lock. Its path is for messages.
#[derive(Debug)]
pub struct RunFile {
    dir: RunDir,
    name: &'static str,
    shown: PathBuf,
}

impl RunFile {
    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The file's path, for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.shown.display()
    }

    /// Whether anything is at the file's name (a link there counts: it is refused when
    /// read).
    pub fn exists(&self) -> bool {
        self.dir
            .open()
            .and_then(|dir| dir.kind(self.name))
            .is_ok_and(|kind| kind.is_some())
    }

    /// The file whole, a regular file only (see [`Dir::read`]), refused over `cap` bytes.
    pub fn read(&self, cap: u64) -> std::io::Result<Vec<u8>> {
        self.dir.open()?.read(self.name, cap)
    }

    /// Writes the file atomically and durably in the run's directory (a link at its name
    /// is replaced, never followed).
    pub fn write_atomic(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.dir.open()?.write_atomic(self.name, bytes)
    }
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
    /// Where the stage's seconds went, when it says (`up`: image, containers, ray_ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<StagePart>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagePart {
    pub name: String,
    pub seconds: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::RunId>")]
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
    #[serde(
        default,
        deserialize_with = "crate::ids::checked_opt::<_, crate::ids::SubmissionId>"
    )]
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
    /// The restart policy the run is supervised with (none: not supervised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::config::jobspec::Restart>,
    /// The jobs of a supervised run, oldest first; `submission_id` is the last one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::restart::Attempt>,
    /// Why a supervised run stopped restarting (its `max` reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gave_up: Option<String>,
    /// The triage of a failed job's bundle (`jobs/<id>/diagnostics/1/`), one line; a
    /// supervised run's are on its attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<String>,
}

impl RunReport {
    pub fn is_done(&self) -> bool {
        self.stage == DONE
    }

    /// The report at `<shared>/runs/<run_id>/report.json`, if it is one: only `<shared>`
    /// is opened by path, the rest as [`RunReport::read_in`] does.
    pub fn read(path: &Path) -> Option<RunReport> {
        let dir = path.parent()?;
        let runs = open_runs(dir.parent()?).ok()?;
        Self::read_named(&runs, dir.file_name()?, path.file_name()?).unwrap_or_else(|why| {
            tracing::warn!("{why}");
            None
        })
    }

    /// The key a report names, when it names one, however the rest of it reads: a run of
    /// a key whose report cannot be read is not passed over for a new one.
    pub fn key_in(runs: &Dir, run_id: &OsStr) -> Option<String> {
        let bytes = runs
            .open_dir(run_id)
            .and_then(|dir| dir.read(REPORT, REPORT_CAP))
            .ok()?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        value.get("key")?.as_str().map(str::to_string)
    }

    /// The report of the run `run_id` in `runs` (a handle), if it is one: its directory
    /// opened from the handle and the report read without following a link, and only
    /// when it names the run of its own directory (a `run_id` of `../x` would lead its
    /// writes elsewhere). One that cannot be read is said (a warning) and passed over.
    pub fn read_in(runs: &Dir, run_id: &OsStr) -> Option<RunReport> {
        Self::read_named(runs, run_id, OsStr::new(REPORT)).unwrap_or_else(|why| {
            tracing::warn!("{why}");
            None
        })
    }

    /// [`RunReport::read_in`], with why a report that is there cannot be read (the file
    /// named): an id in it that is not one (`../../x`), text that is not a report, a link.
    pub fn try_read_in(runs: &Dir, run_id: &OsStr) -> Result<Option<RunReport>, String> {
        Self::read_named(runs, run_id, OsStr::new(REPORT))
    }

    fn read_named(runs: &Dir, run_id: &OsStr, file: &OsStr) -> Result<Option<RunReport>, String> {
        let shown = || {
            runs.display(Path::new(run_id).join(file))
                .display()
                .to_string()
        };
        let read = runs
            .open_dir(run_id)
            .and_then(|dir| dir.read(file, REPORT_CAP));
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) if fsx::Unsafe::of(&e).is_some() => return Err(format!("{e}: not read")),
            Err(_) => return Ok(None),
        };
        // Every id in it is checked as it is read (`ids::checked`).
        let report: RunReport = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a run report argus can read: {e}", shown()))?;
        if run_id.to_str() != Some(report.run_id.as_str()) {
            return Err(format!(
                "{}: names run {:?}, not the run of its directory",
                shown(),
                report.run_id
            ));
        }
        Ok(Some(report))
    }
}

/// Writes one run's report as the stages go, into its directory `runs/<run_id>/`, reached
/// through handles from the shared root (only the root, a profile's mount, is opened by
/// path) and held open from then on.
pub struct Recorder {
    dir: RunDir,
    pub report: RunReport,
    started: Instant,
    stage_started: Instant,
}

impl Recorder {
    /// A new run: `runs/<run_id>/` appears whole, with its report, through one rename.
    pub fn create(runs: &Path, report: RunReport) -> Result<Recorder, Error> {
        let mut dir = RunDir::new(runs, &report.run_id);
        let shown = dir.display("");
        let record = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Record { path, source }
        };
        let id = dir.checked_id().map_err(record(&shown))?;
        // The shared root is the caller's (a profile's mount, made if missing); from
        // `runs` down nothing is followed.
        let runs_dir = Dir::create_root(&dir.shared)
            .and_then(|shared| shared.create_dirs(&dir.runs, &mut |_| {}))
            .map_err(record(runs))?;
        fsx::remove_dead_temps(&runs_dir);
        let tmp = fsx::temp_name(id);
        let bytes = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let made = runs_dir
            .create_dir(&tmp, 0o777)
            .and_then(|staged| {
                staged
                    .write_new(REPORT, &bytes)
                    .and_then(|()| staged.sync())
            })
            .and_then(|()| runs_dir.rename(&tmp, &runs_dir, id))
            .and_then(|()| runs_dir.sync())
            .and_then(|()| runs_dir.open_dir(id));
        match made {
            Ok(held) => dir.held = Some(held),
            Err(source) => {
                let _ = runs_dir.remove_all(&tmp);
                return Err(Error::Record {
                    path: shown,
                    source,
                });
            }
        }
        Ok(Recorder {
            dir,
            report,
            started: Instant::now(),
            stage_started: Instant::now(),
        })
    }

    /// A run found again: its report goes on in its own directory (reached at the first
    /// write, and held from then on).
    pub fn resume(runs: &Path, report: RunReport) -> Recorder {
        Recorder {
            dir: RunDir::new(runs, &report.run_id),
            report,
            started: Instant::now(),
            stage_started: Instant::now(),
        }
    }

    /// The run lock's file, `runs/<run_id>/run.lock.yaml`, reached through the run
    /// directory's handle (its path is for messages).
    pub fn lock_path(&self) -> RunFile {
        RunFile {
            dir: self.dir.try_clone(),
            name: LOCK,
            shown: self.dir.display(LOCK),
        }
    }

    pub fn save(&mut self) -> Result<(), Error> {
        self.report.seconds = self.started.elapsed().as_secs_f64();
        let bytes = serde_json::to_vec_pretty(&self.report).unwrap_or_default();
        self.dir
            .held()
            .and_then(|dir| dir.write_atomic(REPORT, &bytes))
            .map_err(|source| Error::Record {
                path: self.dir.display(REPORT),
                source,
            })
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
        self.end_with_parts(note, Vec::new())
    }

    /// Ends the stage with where its seconds went.
    pub fn end_with_parts(
        &mut self,
        note: impl Into<String>,
        parts: Vec<StagePart>,
    ) -> Result<(), Error> {
        let stage = self.report.stage.clone();
        self.report.stages.push(StageTiming {
            stage,
            seconds: self.stage_started.elapsed().as_secs_f64(),
            note: note.into(),
            parts,
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

    #[test]
    fn a_run_goes_on_in_its_directory_after_runs_is_swapped_for_a_link() {
        let root = tempfile::tempdir().unwrap();
        let (runs, moved) = (root.path().join("runs"), root.path().join("moved"));
        let outside = root.path().join("outside");
        // Outside: what a write by path through the swapped link would land in.
        std::fs::create_dir_all(outside.join("run-1")).unwrap();
        let report = RunReport {
            run_id: "run-1".into(),
            ..Default::default()
        };
        let mut rec = Recorder::create(&runs, report).unwrap();
        std::fs::rename(&runs, &moved).unwrap();
        std::os::unix::fs::symlink(&outside, &runs).unwrap();
        rec.begin("up").unwrap();
        rec.end("ok").unwrap();
        let runs_dir = Dir::root(&moved).unwrap();
        let read = RunReport::read_in(&runs_dir, OsStr::new("run-1")).unwrap();
        assert_eq!((read.stage.as_str(), read.stages.len()), ("up", 1));
        assert_eq!(std::fs::read_dir(outside.join("run-1")).unwrap().count(), 0);
        // Reached afresh, the link is refused.
        assert!(RunReport::read(&runs.join("run-1").join(REPORT)).is_none());
        let mut again = Recorder::resume(&runs, read);
        let err = again.save().unwrap_err();
        assert!(format!("{err:?}").contains("Link"), "{err:?}");
        assert_eq!(std::fs::read_dir(outside.join("run-1")).unwrap().count(), 0);
    }

    /// Every job id a report holds is checked as it is read: a path in `submission_id` or
    /// in an attempt's is an error naming the report, never an id argus acts on.
    #[test]
    fn a_job_id_that_is_a_path_makes_the_report_unreadable_naming_it() {
        let root = tempfile::tempdir().unwrap();
        let runs = root.path().join("runs");
        std::fs::create_dir_all(runs.join("run-1")).unwrap();
        let runs_dir = Dir::root(&runs).unwrap();
        let good = serde_json::json!({
            "run_id": "run-1", "stage": "done", "stages": [], "seconds": 1.0,
            "submission_id": "j-1", "job_status": "SUCCEEDED",
            "attempts": [{"n": 1, "submission_id": "j-1", "started_at": ""}],
        });
        let write = |json: &serde_json::Value| {
            std::fs::write(runs.join("run-1").join(REPORT), json.to_string()).unwrap()
        };
        write(&good);
        let read = RunReport::try_read_in(&runs_dir, OsStr::new("run-1")).unwrap();
        assert_eq!(read.unwrap().attempts[0].submission_id, "j-1");
        for (pointer, bad) in [
            ("/submission_id", "../../x"),
            ("/attempts/0/submission_id", "../x"),
            ("/run_id", "../run-1"),
        ] {
            let mut planted = good.clone();
            if let Some(v) = planted.pointer_mut(pointer) {
                *v = serde_json::json!(bad);
            }
            write(&planted);
            let err = RunReport::try_read_in(&runs_dir, OsStr::new("run-1")).unwrap_err();
            assert!(err.contains("run-1/report.json"), "{err}");
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(RunReport::read_in(&runs_dir, OsStr::new("run-1")).is_none());
        }
    }

    #[test]
    fn leftovers_of_a_dead_writer_are_removed_when_a_run_is_created() {
        let root = tempfile::tempdir().unwrap();
        let runs = root.path().join("runs");
        let me = fsx::Owner::me();
        let dead = format!(".tmp-run-0.{}.{}.{}.0", me.host, me.pid, me.start + 9);
        std::fs::create_dir_all(runs.join(&dead).join("x")).unwrap();
        let report = RunReport {
            run_id: "run-1".into(),
            ..Default::default()
        };
        Recorder::create(&runs, report).unwrap();
        let names: Vec<_> = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["run-1"]);
    }
}
