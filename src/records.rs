//! argus's memory of every job, on the shared storage (Ray forgets jobs when the cluster
//! goes down):
//!
//! ```text
//! jobs/<id>/job.json                  the record: what ran, where, its last known status
//! jobs/<id>/config/                   profile.yaml, jobspec.yaml, submit_payload.json (secrets redacted)
//! jobs/<id>/logs/                     submit.out, driver.log (once the job ended)
//! jobs/<id>/debug/                    nodes_before.json, jobs_after.json
//! jobs/<id>/checkpoints/              trainer.default_local_dir
//! ```
//!
//! A job directory appears under its final name only once the job was accepted by Ray.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::exit::{Classify, Exit};
use crate::fsx;
use crate::ids::SubmissionId;
use crate::ray::jobs::{JobInfo, JobStatus};

/// Every field has a default, so a record written by another argus version (or by hand)
/// still reads: the safety checks that read records (`snapshot rm`) must not skip one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRecord {
    pub submission_id: String,
    pub workload: String,
    pub code_id: Option<String>,
    pub code_path: String,
    pub entrypoint: String,
    pub cluster: String,
    pub dashboard: String,
    pub submitted_at: String,
    /// Last status seen (PENDING right after submit; final once the job ended).
    pub status: JobStatus,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub start_time: Option<u64>,
    #[serde(default)]
    pub end_time: Option<u64>,
    #[serde(default)]
    pub driver_node_id: Option<String>,
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// Why argus stopped the job, when it did (e.g. the time limit).
    #[serde(default)]
    pub stopped_by_argus: Option<String>,
    /// The job this one continues from its checkpoints (`submit --resume`): a submission
    /// id, checked as the record is read (a `../..` or an absolute path makes the record
    /// corrupt; it is never joined to a path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes: Option<SubmissionId>,
}

impl JobRecord {
    pub fn is_final(&self) -> bool {
        self.status.is_finished()
    }

    /// Takes what Ray says about the job.
    pub fn update_from(&mut self, info: &JobInfo) {
        self.status = info.status.clone();
        self.message = info.message.clone().or(self.message.take());
        self.start_time = info.start_time.or(self.start_time);
        self.end_time = info.end_time.or(self.end_time);
        self.driver_node_id = info
            .driver_node_id
            .clone()
            .filter(|n| !n.is_empty())
            .or(self.driver_node_id.take());
    }
}

/// The `jobs/` directory on this host.
///
/// Every path below it is derived here and checked one component at a time without
/// following links ([`fsx::under`]): the storage is written by others, and a link planted
/// at `jobs/`, `jobs/<id>/` or `jobs/<id>/logs/driver.log` is refused, never followed.
/// Ids are checked as submission ids before they are joined.
#[derive(Debug, Clone)]
pub struct Records {
    /// The shared root (the parent of `jobs/`): the one path that may be a link (a mount).
    shared: PathBuf,
    /// The name of the jobs directory below it (`jobs`).
    jobs: PathBuf,
}

/// A job directory being filled before the submission is accepted.
pub struct Staged {
    pub dir: PathBuf,
    pub id: String,
}

/// A record that cannot be used. A corrupt one is bad input (exit 2): a record cut short
/// or edited by hand is named with what is wrong with it, never taken for a missing one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The parser's error is part of the message (`serde_json` says where), not a cause.
    #[error("corrupt record {}: {error}", path.display())]
    Corrupt {
        path: PathBuf,
        error: serde_json::Error,
    },
    #[error("corrupt record {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot read the record {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Corrupt { .. } | Error::Invalid { .. } => Exit::Usage,
            Error::Read { source, .. } => fsx::io_exit(source),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Corrupt { path, .. } | Error::Invalid { path, .. } => Some(format!(
                "the record was cut short or changed by hand: repair {} or move its job directory away",
                path.display()
            )),
            Error::Read { source, .. } => fsx::io_hint(source),
        }
    }
}

/// One entry of `jobs/`: a record, or a job directory whose record cannot be used.
#[derive(Debug)]
pub enum Listed {
    Record(Box<JobRecord>),
    Unreadable { id: String, error: Error },
}

/// The largest `job.json` read (a record others can write must not eat the memory).
const RECORD_CAP: u64 = 16 << 20;

impl Records {
    /// The records under `jobs_root` (`<shared>/jobs`): its parent is taken as the shared
    /// root, and `jobs_root` itself is checked like everything below it.
    pub fn new(jobs_root: impl Into<PathBuf>) -> Self {
        let (shared, jobs) = fsx::root_and_name(&jobs_root.into());
        Self { shared, jobs }
    }

    /// `jobs/<id>/<rest>` relative to the shared root; an id that is not a submission id
    /// is refused (it would be a path, not a name).
    fn rel(&self, id: &str, rest: &str) -> std::io::Result<PathBuf> {
        if !crate::ids::is_valid_id(id) {
            return Err(fsx::Unsafe::Escapes {
                root: self.shared.join(&self.jobs),
                rel: PathBuf::from(id),
            }
            .into());
        }
        let mut rel = self.jobs.join(id);
        if !rest.is_empty() {
            rel.push(rest);
        }
        Ok(rel)
    }

    /// `jobs/`, for messages (unchecked).
    pub fn root(&self) -> PathBuf {
        self.shared.join(&self.jobs)
    }

    /// `jobs/<id>/`, for messages (unchecked: use [`Records::path`] to touch it).
    pub fn dir(&self, id: &str) -> PathBuf {
        self.shared.join(&self.jobs).join(id)
    }

    /// `jobs/<id>/<rest>`, checked: no component is a link, the id is a plain name.
    pub fn path(&self, id: &str, rest: &str) -> std::io::Result<PathBuf> {
        fsx::under(&self.shared, self.rel(id, rest)?)
    }

    /// Whether `jobs/<id>` is taken (by anything: a planted link counts as taken).
    pub fn exists(&self, id: &str) -> bool {
        match self.path(id, "") {
            Ok(path) => std::fs::symlink_metadata(path).is_ok(),
            Err(_) => true,
        }
    }

    /// `jobs/.tmp-<id>.<host>.<pid>.<start>/` (fsx's temporary name, so a leftover says
    /// whose it was) with the layout's subdirectories.
    pub fn stage(&self, id: &str) -> std::io::Result<Staged> {
        self.rel(id, "")?;
        fsx::create_dirs_under(&self.shared, &self.jobs)?;
        let rel = self.jobs.join(fsx::temp_name(id));
        let dir = fsx::under(&self.shared, &rel)?;
        if std::fs::symlink_metadata(&dir).is_ok() {
            fsx::remove_any(&dir)?;
        }
        for sub in ["config", "logs", "debug", "checkpoints"] {
            fsx::create_dirs_under(&self.shared, rel.join(sub))?;
        }
        Ok(Staged {
            dir,
            id: id.to_string(),
        })
    }

    /// Moves a staged directory to its final name. Fails if the name was taken meanwhile.
    pub fn publish(&self, staged: Staged) -> std::io::Result<PathBuf> {
        let target = self.path(&staged.id, "")?;
        if std::fs::symlink_metadata(&target).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists", target.display()),
            ));
        }
        std::fs::rename(&staged.dir, &target)?;
        Ok(target)
    }

    pub fn discard(&self, staged: Staged) {
        let _ = fsx::remove_any(&staged.dir);
    }

    /// The record of `id`: None when argus has none, an error when it cannot be used
    /// (corrupt, a link, not a regular file, naming another job).
    pub fn load(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let path = self.dir(id).join("job.json");
        let read = |source| Error::Read {
            path: path.clone(),
            source,
        };
        let rel = self.rel(id, "job.json").map_err(read)?;
        let bytes = match fsx::read_under(&self.shared, rel, RECORD_CAP) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read(e)),
        };
        let mut record: JobRecord =
            serde_json::from_slice(&bytes).map_err(|error| Error::Corrupt {
                path: path.clone(),
                error,
            })?;
        if record.submission_id.is_empty() {
            record.submission_id = id.to_string();
        }
        if record.submission_id != id {
            return Err(Error::Invalid {
                path,
                reason: format!(
                    "it names job {:?}, not the job of its directory ({id})",
                    record.submission_id
                ),
            });
        }
        Ok(Some(record))
    }

    /// The record of `id`, None when there is none or it cannot be used (a warning says
    /// why): for callers that skip what they cannot read. [`Records::load`] tells why.
    pub fn read(&self, id: &str) -> Option<JobRecord> {
        self.load(id).unwrap_or_else(|e| {
            tracing::warn!("{}", crate::exit::one_line(&e));
            None
        })
    }

    /// Writes `jobs/<id>/<rest>` atomically, below checked directories (a link planted at
    /// its name is replaced, never followed).
    pub fn write_file(&self, id: &str, rest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.path(id, rest)?;
        fsx::write_atomic(&path, bytes)?;
        Ok(path)
    }

    /// Opens `jobs/<id>/<rest>` for reading if it exists: a regular file below real
    /// directories, never a link.
    pub fn open_file(&self, id: &str, rest: &str) -> std::io::Result<Option<std::fs::File>> {
        match self.path(id, rest).and_then(|p| fsx::open_regular(&p)) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `jobs/<id>/<rest>` whole if it exists (at most `cap` bytes), checked as
    /// [`Records::open_file`].
    pub fn read_file(&self, id: &str, rest: &str, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
        match fsx::read_under(&self.shared, self.rel(id, rest)?, cap) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn write(&self, record: &JobRecord) -> std::io::Result<()> {
        self.write_file(
            &record.submission_id,
            "job.json",
            &serde_json::to_vec_pretty(record).unwrap_or_default(),
        )
        .map(drop)
    }

    /// Every job directory of `jobs/`, newest record first, the unreadable ones (named
    /// with why) after them. An error when `jobs/` itself cannot be used (a link).
    pub fn entries(&self) -> Result<Vec<Listed>, Error> {
        let read = |source| Error::Read {
            path: self.root(),
            source,
        };
        let root = fsx::under(&self.shared, &self.jobs).map_err(read)?;
        let entries = match std::fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(read(e)),
        };
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if !crate::ids::is_valid_id(&name) {
                tracing::debug!("{}: not a job directory", entry.path().display());
                continue;
            }
            match self.load(&name) {
                Ok(Some(record)) => records.push(record),
                // A directory without a record is not a job (yet): skipped, as before.
                Ok(None) => {}
                Err(error) => unreadable.push((name, error)),
            }
        }
        records.sort_by(|a, b| b.submitted_at.cmp(&a.submitted_at));
        unreadable.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(records
            .into_iter()
            .map(|record| Listed::Record(Box::new(record)))
            .chain(
                unreadable
                    .into_iter()
                    .map(|(id, error)| Listed::Unreadable { id, error }),
            )
            .collect())
    }

    /// Every readable record, newest first (a warning names each one skipped).
    pub fn list(&self) -> Vec<JobRecord> {
        let entries = self.entries().unwrap_or_else(|e| {
            tracing::warn!("{}", crate::exit::one_line(&e));
            Vec::new()
        });
        entries
            .into_iter()
            .filter_map(|listed| match listed {
                Listed::Record(record) => Some(*record),
                Listed::Unreadable { error, .. } => {
                    tracing::warn!("{}", crate::exit::one_line(&error));
                    None
                }
            })
            .collect()
    }

    /// Records the end of a job: final status and the driver's log.
    pub fn finish(
        &self,
        record: &mut JobRecord,
        info: &JobInfo,
        driver_log: Option<&str>,
    ) -> std::io::Result<()> {
        record.update_from(info);
        if let Some(log) = driver_log {
            self.write_file(&record.submission_id, "logs/driver.log", log.as_bytes())?;
        }
        self.write(record)
    }
}

/// Now, in milliseconds since the epoch (how Ray and the records write times).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> (tempfile::TempDir, PathBuf, Records) {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(shared.join("jobs")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        let records = Records::new(shared.join("jobs"));
        (dir, shared, records)
    }

    fn record_json(id: &str, extra: &str) -> String {
        format!(r#"{{"submission_id": "{id}", "status": "SUCCEEDED", "submitted_at": "t"{extra}}}"#)
    }

    #[test]
    fn a_corrupt_record_is_an_error_that_names_it_not_a_missing_one() {
        let (_dir, shared, records) = world();
        std::fs::create_dir(shared.join("jobs/cut")).unwrap();
        std::fs::write(shared.join("jobs/cut/job.json"), r#"{"submission_id": "cu"#).unwrap();
        let err = records.load("cut").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert_eq!(err.exit(), Exit::Usage);
        let text = err.to_string();
        assert!(
            text.starts_with("corrupt record ") && text.contains("cut/job.json: EOF"),
            "{text}"
        );
        assert!(records.load("none").unwrap().is_none());
    }

    #[test]
    fn a_resumes_or_an_id_that_is_a_path_makes_the_record_corrupt() {
        let (_dir, shared, records) = world();
        for (id, extra) in [
            ("up", r#", "resumes": "../..""#),
            ("abs", r#", "resumes": "/etc""#),
        ] {
            std::fs::create_dir(shared.join("jobs").join(id)).unwrap();
            std::fs::write(
                shared.join("jobs").join(id).join("job.json"),
                record_json(id, extra),
            )
            .unwrap();
            let err = records.load(id).unwrap_err().to_string();
            assert!(err.contains("invalid submission id"), "{err}");
        }
        // A record naming another job would lead its writes there.
        std::fs::create_dir(shared.join("jobs/other")).unwrap();
        std::fs::write(
            shared.join("jobs/other/job.json"),
            record_json("../../x", ""),
        )
        .unwrap();
        let err = records.load("other").unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        // An id that is a path never reaches a join.
        let err = records.load("../outside").unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
    }

    #[test]
    fn links_at_jobs_a_job_or_its_log_are_refused_and_nothing_is_written_through_them() {
        let (dir, shared, records) = world();
        let outside = dir.path().join("outside");
        std::fs::write(outside.join("job.json"), record_json("x", "")).unwrap();
        std::fs::create_dir_all(shared.join("jobs/real/logs")).unwrap();
        std::fs::write(shared.join("jobs/real/job.json"), record_json("real", "")).unwrap();
        std::os::unix::fs::symlink(&outside, shared.join("jobs/x")).unwrap();
        std::os::unix::fs::symlink(
            outside.join("job.json"),
            shared.join("jobs/real/logs/driver.log"),
        )
        .unwrap();

        let refused =
            |e: &std::io::Error| matches!(fsx::Unsafe::of(e), Some(fsx::Unsafe::Link { .. }));
        assert!(
            matches!(records.load("x"), Err(Error::Read { ref source, .. }) if refused(source))
        );
        assert!(refused(
            &records.open_file("real", "logs/driver.log").unwrap_err()
        ));
        let mut record = records.load("real").unwrap().unwrap();
        record.submission_id = "x".into();
        assert!(refused(&records.write(&record).unwrap_err()));
        assert!(records.exists("x"), "a planted link takes the name");
        // The listing names the unreadable one and keeps the others.
        let listed = records.entries().unwrap();
        assert!(matches!(&listed[0], Listed::Record(r) if r.submission_id == "real"));
        assert!(matches!(&listed[1], Listed::Unreadable { id, .. } if id == "x"));

        // jobs/ itself a link: everything is refused, nothing is made through it.
        std::fs::rename(shared.join("jobs"), dir.path().join("old-jobs")).unwrap();
        std::os::unix::fs::symlink(&outside, shared.join("jobs")).unwrap();
        assert!(records.entries().is_err());
        assert!(refused(&records.stage("new").err().unwrap()));
        assert!(
            matches!(records.load("x"), Err(Error::Read { ref source, .. }) if refused(source))
        );
        assert!(refused(
            &records.write_file("x", "metrics.csv", b"1").unwrap_err()
        ));
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["job.json"], "nothing was written outside");
    }

    #[test]
    fn a_staged_directory_is_published_under_its_id() {
        let (_dir, shared, records) = world();
        let staged = records.stage("j-1").unwrap();
        std::fs::write(staged.dir.join("config/a"), "a").unwrap();
        let dir = records.publish(staged).unwrap();
        assert_eq!(dir, shared.join("jobs/j-1"));
        records
            .write(&JobRecord {
                submission_id: "j-1".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(records.list().len(), 1);
        assert!(records.publish(records.stage("j-1").unwrap()).is_err());
    }
}
