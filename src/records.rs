//! argus's memory of every job, on the shared storage (Ray forgets jobs when the cluster
//! goes down):
//!
//! ```text
//! jobs/<id>/job.json                  the record: what ran, where, its last known status
//! jobs/<id>/config/                   profile.yaml, jobspec.yaml, submit_payload.json (secrets redacted)
//! jobs/<id>/logs/                     submit.out, driver.log (once the job ended)
//! jobs/<id>/debug/                    nodes_before.json, jobs_after.json
//! jobs/<id>/metrics.csv               the metrics table (once the job ended)
//! jobs/<id>/diagnostics/<attempt>/    failure bundles (their files are diagnose's)
//! jobs/<id>/checkpoints/              trainer.default_local_dir
//! jobs/<id>/hydra/, work/             Hydra's run directory, the job's working directory
//! ```
//!
//! A job directory appears under its final name only once the job was accepted by Ray.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::exit::{Classify, Exit};
use crate::fsx;
use crate::ids::SubmissionId;
use crate::ray::jobs::{JobInfo, JobStatus};

/// The names below `jobs/<id>/`, spelled here and nowhere else: every module reaches a
/// job's files through these and [`Records`].
pub const JOB_JSON: &str = "job.json";
pub const CONFIG: &str = "config";
pub const LOGS: &str = "logs";
pub const DEBUG: &str = "debug";
pub const CHECKPOINTS: &str = "checkpoints";
/// Hydra's run directory and the job's working directory (written by the job only).
pub const HYDRA: &str = "hydra";
pub const WORK: &str = "work";
/// The failure bundles, one directory per attempt (their contents are `diagnose`'s).
pub const DIAGNOSTICS: &str = "diagnostics";
/// The metrics table of the job (and the jobs it continues), saved when it ended.
pub const METRICS_CSV: &str = "metrics.csv";
pub const NODES_BEFORE: &str = "debug/nodes_before.json";
pub const JOBS_AFTER: &str = "debug/jobs_after.json";
/// The JobSpec as submitted (secrets redacted).
pub const JOBSPEC: &str = "config/jobspec.yaml";
pub const SUBMIT_PAYLOAD: &str = "config/submit_payload.json";
pub const SUBMIT_OUT: &str = "logs/submit.out";
/// The driver's log as argus saved it (through Ray's API, or streamed by a Slurm run).
pub const DRIVER_LOG: &str = "logs/driver.log";

/// `<jobs_root>/<id>` (with `rest`, `<jobs_root>/<id>/<rest>`) as text: a path in a
/// job's directory as the containers see it, for an entrypoint or an env var. Pure:
/// nothing is opened (the host reaches a job's files through [`Records`]).
pub fn container_path(jobs_root: &Path, id: &str, rest: &str) -> String {
    let dir = format!("{}/{id}", jobs_root.display());
    match rest {
        "" => dir,
        rest => format!("{dir}/{rest}"),
    }
}

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
/// Nothing below the shared root is checked and then used by name: every operation opens
/// the shared root (the one path that may be a link: a mount), reaches `jobs/` and
/// `jobs/<id>/` through handles ([`fsx::Dir`], each component opened without following
/// a link), and opens, writes or renames the leaf relative to the handle of the directory
/// that holds it. A link planted at `jobs/`, `jobs/<id>/` or `jobs/<id>/logs/driver.log`
/// is refused, never followed, and a directory swapped for a link after it was opened is
/// not followed either (the handle still names the directory that was opened). Ids are
/// checked as submission ids before they name anything.
#[derive(Debug, Clone)]
pub struct Records {
    /// The shared root (the parent of `jobs/`): the one path that may be a link (a mount).
    shared: PathBuf,
    /// The name of the jobs directory below it (`jobs`).
    jobs: PathBuf,
}

/// A job directory being filled before the submission is accepted: held open, with the
/// `jobs/` directory it is published into, so neither writes into it nor its publication
/// can be led elsewhere by a directory swapped on the way.
#[derive(Debug)]
pub struct Staged {
    /// The staged directory (`jobs/.tmp-<id>...`).
    pub dir: fsx::Dir,
    /// `jobs/`, as it was when the directory was staged.
    jobs: fsx::Dir,
    /// The staged directory's (temporary) name in `jobs/`.
    name: String,
    pub id: String,
}

impl Staged {
    /// Creates the new file `rel` (`config/jobspec.yaml`) below the staged directory and
    /// writes `bytes` into it: every directory on the way opened from the staged handle,
    /// the file made new (`O_EXCL`: a name planted meanwhile is never written through).
    pub fn write_new(&self, rel: &str, bytes: &[u8]) -> std::io::Result<()> {
        let rel = Path::new(rel);
        let name = rel.file_name().ok_or_else(|| fsx::Unsafe::Escapes {
            root: self.dir.path().to_path_buf(),
            rel: rel.to_path_buf(),
        })?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        self.dir.open_dir(parent)?.write_new(name, bytes)
    }

    /// What messages show for `rel` below the staged directory.
    pub fn display(&self, rel: &str) -> PathBuf {
        self.dir.display(rel)
    }
}

/// A job directory published under its id, still held open (the handle of the staged
/// directory it was: the rename did not change what it names).
#[derive(Debug)]
pub struct Published {
    dir: fsx::Dir,
    path: PathBuf,
}

impl Published {
    /// `jobs/<id>/`, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `rel` (`job.json`, `logs/submit.out`) atomically below the published
    /// directory, reached through its handle; returns its path for messages.
    pub fn write_atomic(&self, rel: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let rel = Path::new(rel);
        let name = rel.file_name().ok_or_else(|| fsx::Unsafe::Escapes {
            root: self.path.clone(),
            rel: rel.to_path_buf(),
        })?;
        self.dir
            .open_dir(rel.parent().unwrap_or(Path::new("")))?
            .write_atomic(name, bytes)?;
        Ok(self.path.join(rel))
    }
}

/// A record that cannot be used. A corrupt one is bad input (exit 2): a record cut short
/// or edited by hand is named with what is wrong with it, never taken for a missing one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The parser's error is part of the message (`serde_json` says where), not a cause.
    #[error("corrupt record {}: {error}", crate::text::shown(path))]
    Corrupt {
        path: PathBuf,
        error: serde_json::Error,
    },
    #[error("corrupt record {}: {reason}", crate::text::shown(path))]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot read the record {}", crate::text::shown(path))]
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
    /// root, and `jobs_root` itself is opened like everything below it (never through a
    /// link).
    pub fn new(jobs_root: impl Into<PathBuf>) -> Self {
        let (shared, jobs) = fsx::root_and_name(&jobs_root.into());
        Self {
            shared,
            jobs: jobs.into(),
        }
    }

    /// The id checked to be a submission id (a plain name, never a path).
    fn check_id(&self, id: &str) -> std::io::Result<()> {
        if crate::ids::is_valid_id(id) {
            Ok(())
        } else {
            Err(fsx::Unsafe::Escapes {
                root: self.root(),
                rel: PathBuf::from(id),
            }
            .into())
        }
    }

    /// `jobs/`, opened from the shared root without following a link.
    fn open_jobs(&self) -> std::io::Result<fsx::Dir> {
        fsx::Dir::root(&self.shared)?.open_dir(&self.jobs)
    }

    /// `jobs/`, for messages.
    pub fn root(&self) -> PathBuf {
        self.shared.join(&self.jobs)
    }

    /// `jobs/<id>/`, for messages (to touch it, use [`Records::job`]).
    pub fn dir(&self, id: &str) -> PathBuf {
        self.root().join(id)
    }

    /// The directory `jobs/<id>/` held open, if it exists: what is read below it
    /// afterwards is read from this very directory, whatever is renamed or swapped on the
    /// way to it meanwhile.
    pub fn job(&self, id: &str) -> std::io::Result<Option<fsx::Dir>> {
        self.check_id(id)?;
        fsx::found(self.open_jobs().and_then(|jobs| jobs.open_dir(id)))
    }

    /// Whether `jobs/<id>` is taken (by anything: a planted link counts as taken).
    pub fn exists(&self, id: &str) -> bool {
        if self.check_id(id).is_err() {
            return true;
        }
        match self.open_jobs() {
            Ok(jobs) => jobs.kind(id).map_or(true, |kind| kind.is_some()),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }

    /// `jobs/.tmp-<id>.<host>.<pid>.<start>/` (fsx's temporary name, so a leftover says
    /// whose it was) with the layout's subdirectories, held open.
    pub fn stage(&self, id: &str) -> std::io::Result<Staged> {
        self.check_id(id)?;
        let jobs = fsx::Dir::create_root(&self.shared)?.create_dirs(&self.jobs, &mut |_| {})?;
        let name = fsx::temp_name(id);
        if jobs.kind(&name)?.is_some() {
            jobs.remove_all(&name)?;
        }
        let dir = jobs.create_dir(&name, 0o777)?;
        for sub in [CONFIG, LOGS, DEBUG, CHECKPOINTS] {
            dir.create_dir(sub, 0o777)?;
        }
        Ok(Staged {
            dir,
            jobs,
            name,
            id: id.to_string(),
        })
    }

    /// Moves a staged directory to its final name, in the `jobs/` it was staged in (both
    /// names relative to that handle), and keeps it open: what is written into the job
    /// afterwards lands in this very directory. Fails if the name was taken meanwhile.
    pub fn publish(&self, staged: Staged) -> std::io::Result<Published> {
        let target = staged.jobs.display(&staged.id);
        staged
            .jobs
            .rename_new(&staged.name, &staged.jobs, &staged.id)?;
        // The job is accepted already: a failed fsync must not make it look refused.
        if let Err(e) = staged.jobs.sync() {
            tracing::debug!("cannot sync {}: {e}", staged.jobs.path().display());
        }
        Ok(Published {
            dir: staged.dir,
            path: target,
        })
    }

    /// Removes a staged directory (through the `jobs/` handle it was staged in).
    pub fn discard(&self, staged: Staged) {
        if let Err(e) = staged.jobs.remove_all(&staged.name) {
            tracing::debug!(
                "cannot remove {}: {e}",
                staged.jobs.display(&staged.name).display()
            );
        }
    }

    /// The record of `id`: None when argus has none, an error when it cannot be used
    /// (corrupt, a link, not a regular file, naming another job).
    pub fn load(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let read = |source| Error::Read {
            path: self.dir(id).join(JOB_JSON),
            source,
        };
        self.check_id(id).map_err(read)?;
        let jobs = match fsx::found(self.open_jobs()).map_err(read)? {
            Some(jobs) => jobs,
            None => return Ok(None),
        };
        load_in(&jobs, id)
    }

    /// The record of `id`, None when there is none or it cannot be used (a warning says
    /// why): for callers that skip what they cannot read. [`Records::load`] tells why.
    pub fn read(&self, id: &str) -> Option<JobRecord> {
        self.load(id).unwrap_or_else(|e| {
            tracing::warn!("{}", crate::exit::one_line(&e));
            None
        })
    }

    /// Writes `jobs/<id>/<rest>` atomically in its directory, reached through handles (a
    /// link planted at its name is replaced, never followed; a link on the way is refused).
    pub fn write_file(&self, id: &str, rest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        self.check_id(id)?;
        let rest = Path::new(rest);
        let name = rest.file_name().ok_or_else(|| fsx::Unsafe::Escapes {
            root: self.dir(id),
            rel: rest.to_path_buf(),
        })?;
        let dir = self
            .open_jobs()?
            .open_dir(Path::new(id).join(rest.parent().unwrap_or(Path::new(""))))?;
        dir.write_atomic(name, bytes)?;
        Ok(dir.display(name))
    }

    /// Opens `jobs/<id>/<rest>` for reading if it exists: a regular file with one link,
    /// below real directories, never a link (see [`fsx::Dir::open_file`]).
    pub fn open_file(&self, id: &str, rest: &str) -> std::io::Result<Option<std::fs::File>> {
        self.check_id(id)?;
        fsx::found(
            self.open_jobs()
                .and_then(|jobs| jobs.open_file(Path::new(id).join(rest))),
        )
    }

    /// The job's saved driver log ([`DRIVER_LOG`]), opened to append through the handles of
    /// the job's directory (made when missing; a link or a hard-linked file there is
    /// refused, never written through). None when it cannot be: a streaming log goes on.
    pub fn open_driver_log_to_append(&self, id: &str) -> Option<std::fs::File> {
        let (dir, name) = DRIVER_LOG.split_once('/')?;
        let logs = self.job(id).ok()??.open_dir(dir).ok()?;
        match logs.open_append(name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => logs
                .create_new(name, 0o644)
                .or_else(|_| logs.open_append(name))
                .ok(),
            opened => opened.ok(),
        }
    }

    /// Reads `jobs/<id>/<rest>` whole if it exists (at most `cap` bytes), opened as
    /// [`Records::open_file`].
    pub fn read_file(&self, id: &str, rest: &str, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
        self.check_id(id)?;
        fsx::found(
            self.open_jobs()
                .and_then(|jobs| jobs.read(Path::new(id).join(rest), cap)),
        )
    }

    pub fn write(&self, record: &JobRecord) -> std::io::Result<()> {
        self.write_file(
            &record.submission_id,
            JOB_JSON,
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
        let Some(jobs) = fsx::found(self.open_jobs()).map_err(read)? else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for (name, _) in jobs.entries().map_err(read)? {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if !crate::ids::is_valid_id(&name) {
                tracing::debug!("{}: not a job directory", jobs.display(&name).display());
                continue;
            }
            match load_in(&jobs, &name) {
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

/// The record `<id>/job.json` in the `jobs/` directory `jobs` (`id` checked already):
/// None when there is none.
fn load_in(jobs: &fsx::Dir, id: &str) -> Result<Option<JobRecord>, Error> {
    let path = jobs.display(Path::new(id).join(JOB_JSON));
    let bytes = match fsx::found(jobs.read(Path::new(id).join(JOB_JSON), RECORD_CAP)) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(source) => return Err(Error::Read { path, source }),
    };
    let mut record: JobRecord = serde_json::from_slice(&bytes).map_err(|error| Error::Corrupt {
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

/// Now, in milliseconds since the epoch (how Ray and the records write times).
/// Now as RFC 3339 with milliseconds (this host's clock): how records, reports and
/// attempts write a time.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

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
    fn container_paths_spell_the_job_directory_as_the_entrypoint_did() {
        let jobs = Path::new("/mnt/shared/jobs");
        assert_eq!(container_path(jobs, "j1", ""), "/mnt/shared/jobs/j1");
        assert_eq!(
            container_path(jobs, "j1", CHECKPOINTS),
            "/mnt/shared/jobs/j1/checkpoints"
        );
        assert_eq!(
            container_path(jobs, "j1", HYDRA),
            "/mnt/shared/jobs/j1/hydra"
        );
        assert_eq!(container_path(jobs, "j1", WORK), "/mnt/shared/jobs/j1/work");
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
        staged.write_new("config/a", b"a").unwrap();
        let published = records.publish(staged).unwrap();
        assert_eq!(published.path(), shared.join("jobs/j-1"));
        records
            .write(&JobRecord {
                submission_id: "j-1".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(records.list().len(), 1);
        assert!(records.publish(records.stage("j-1").unwrap()).is_err());
    }

    /// What is below `dir`, as relative paths (links not followed).
    fn names_below(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    todo.push(path.clone());
                }
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_staged_job_is_filled_and_published_where_it_was_staged_whatever_is_swapped_meanwhile() {
        let (dir, shared, records) = world();
        let outside = dir.path().join("outside");
        let staged = records.stage("j-1").unwrap();
        // The swap a hostile writer of the storage can make at any moment: the real
        // jobs/ moved away, a link to a directory outside in its place.
        let moved = dir.path().join("moved-jobs");
        std::fs::rename(shared.join("jobs"), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, shared.join("jobs")).unwrap();
        // ... with the staged directory's layout mirrored there, ready to be written.
        for sub in ["config", "logs", "debug"] {
            std::fs::create_dir_all(outside.join(&staged.name).join(sub)).unwrap();
        }
        staged.write_new("config/jobspec.yaml", b"spec").unwrap();
        staged.write_new("debug/nodes_before.json", b"{}").unwrap();
        // A directory inside the staged one swapped too: refused, not followed.
        let staged_path = moved.join(&staged.name);
        std::fs::rename(staged_path.join("logs"), dir.path().join("moved-logs")).unwrap();
        std::os::unix::fs::symlink(&outside, staged_path.join("logs")).unwrap();
        let err = staged.write_new("logs/submit.out", b"x").unwrap_err();
        assert!(
            matches!(fsx::Unsafe::of(&err), Some(fsx::Unsafe::Link { .. })),
            "{err}"
        );
        std::fs::remove_file(staged_path.join("logs")).unwrap();
        std::fs::rename(dir.path().join("moved-logs"), staged_path.join("logs")).unwrap();
        // ... and the published job as well, when the record is written.
        std::fs::create_dir_all(outside.join("j-1/logs")).unwrap();
        let mirrored = names_below(&outside);
        let published = records.publish(staged).unwrap();
        published.write_atomic("job.json", b"{}").unwrap();
        published.write_atomic("logs/submit.out", b"out").unwrap();
        assert_eq!(published.path(), shared.join("jobs/j-1"));
        assert_eq!(
            names_below(&outside),
            mirrored,
            "nothing written or moved outside"
        );
        assert_eq!(
            std::fs::read(moved.join("j-1/logs/submit.out")).unwrap(),
            b"out"
        );
        assert!(moved.join("j-1/job.json").is_file());
        assert_eq!(
            std::fs::read(moved.join("j-1/config/jobspec.yaml")).unwrap(),
            b"spec"
        );
        assert!(moved.join("j-1/debug/nodes_before.json").is_file());
        assert_eq!(
            names_below(&moved)
                .iter()
                .filter(|n| n.starts_with(".tmp-"))
                .count(),
            0,
            "published under its id in the real jobs/"
        );
        // A discarded stage goes from the jobs/ it was made in, never from a link's target.
        std::fs::remove_file(shared.join("jobs")).unwrap();
        std::fs::rename(&moved, shared.join("jobs")).unwrap();
        let staged = records.stage("j-2").unwrap();
        let name = staged.name.clone();
        std::fs::rename(shared.join("jobs"), &moved).unwrap();
        std::fs::create_dir_all(outside.join(&name)).unwrap();
        std::os::unix::fs::symlink(&outside, shared.join("jobs")).unwrap();
        records.discard(staged);
        assert!(
            outside.join(&name).is_dir(),
            "the link's target is left alone"
        );
        assert!(!moved.join(&name).exists(), "the stage itself is gone");
    }

    #[test]
    fn a_reader_holding_a_job_reads_nothing_outside_when_its_directories_are_swapped() {
        let (dir, shared, records) = world();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(shared.join("jobs/j-1/logs")).unwrap();
        std::fs::write(shared.join("jobs/j-1/logs/driver.log"), "mine\n").unwrap();
        std::fs::create_dir_all(outside.join("logs")).unwrap();
        std::fs::write(outside.join("logs/driver.log"), "SECRET\n").unwrap();
        let job = records.job("j-1").unwrap().unwrap();
        // logs/ swapped for a link after the job was opened: refused, never followed.
        let moved_logs = dir.path().join("moved-logs");
        std::fs::rename(shared.join("jobs/j-1/logs"), &moved_logs).unwrap();
        std::os::unix::fs::symlink(outside.join("logs"), shared.join("jobs/j-1/logs")).unwrap();
        let err = job.open_file("logs/driver.log").unwrap_err();
        assert!(
            matches!(fsx::Unsafe::of(&err), Some(fsx::Unsafe::Link { .. })),
            "{err}"
        );
        assert!(refused_link(
            &records.open_file("j-1", "logs/driver.log").unwrap_err()
        ));
        std::fs::remove_file(shared.join("jobs/j-1/logs")).unwrap();
        std::fs::rename(&moved_logs, shared.join("jobs/j-1/logs")).unwrap();
        // The job directory itself swapped: the held one is still read.
        let moved_job = dir.path().join("moved-job");
        std::fs::rename(shared.join("jobs/j-1"), &moved_job).unwrap();
        std::os::unix::fs::symlink(&outside, shared.join("jobs/j-1")).unwrap();
        let text = std::io::read_to_string(job.open_file("logs/driver.log").unwrap()).unwrap();
        assert_eq!(text, "mine\n");
    }

    fn refused_link(e: &std::io::Error) -> bool {
        matches!(fsx::Unsafe::of(e), Some(fsx::Unsafe::Link { .. }))
    }

    #[test]
    fn a_driver_log_with_a_second_hard_link_is_refused() {
        let (dir, shared, records) = world();
        std::fs::create_dir_all(shared.join("jobs/j-1/logs")).unwrap();
        // Someone's file, hard-linked in where argus reads a driver log.
        let theirs = dir.path().join("outside/theirs");
        std::fs::write(&theirs, "SECRET\n").unwrap();
        std::fs::hard_link(&theirs, shared.join("jobs/j-1/logs/driver.log")).unwrap();
        let err = records.open_file("j-1", "logs/driver.log").unwrap_err();
        assert!(
            matches!(fsx::Unsafe::of(&err), Some(fsx::Unsafe::HardLink { .. })),
            "{err}"
        );
        assert_eq!(fsx::io_exit(&err), Exit::Usage);
        assert!(records.read_file("j-1", "logs/driver.log", 1024).is_err());
        assert!(records.open_file("j-1", "logs/none.log").unwrap().is_none());
        assert!(
            records
                .open_file("j-9", "logs/driver.log")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_saved_driver_log_is_appended_through_the_jobs_handles_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let jobs = dir.path().join("shared/jobs");
        std::fs::create_dir_all(jobs.join("j1/logs")).unwrap();
        let records = Records::new(&jobs);
        let mut file = records.open_driver_log_to_append("j1").unwrap();
        // Its directory swapped for a link after the log was opened: it stays inside.
        let moved = dir.path().join("moved");
        std::fs::rename(jobs.join("j1"), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, jobs.join("j1")).unwrap();
        std::io::Write::write_all(&mut file, b"a\n").unwrap();
        assert_eq!(
            std::fs::read(moved.join("logs/driver.log")).unwrap(),
            b"a\n"
        );
        // Opened again: the link is refused, nothing made outside.
        assert!(records.open_driver_log_to_append("j1").is_none());
        // A link planted at the log's name is not appended to.
        std::fs::create_dir_all(jobs.join("j2/logs")).unwrap();
        let target = outside.join("target");
        std::fs::write(&target, b"x").unwrap();
        std::os::unix::fs::symlink(&target, jobs.join("j2/logs/driver.log")).unwrap();
        assert!(records.open_driver_log_to_append("j2").is_none());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        // An existing log is appended to.
        std::fs::create_dir_all(jobs.join("j3/logs")).unwrap();
        std::fs::write(jobs.join("j3/logs/driver.log"), b"1\n").unwrap();
        let mut file = records.open_driver_log_to_append("j3").unwrap();
        std::io::Write::write_all(&mut file, b"2\n").unwrap();
        assert_eq!(
            std::fs::read(jobs.join("j3/logs/driver.log")).unwrap(),
            b"1\n2\n"
        );
    }
}
