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

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// The job this one continues from its checkpoints (`submit --resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes: Option<String>,
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
#[derive(Debug, Clone)]
pub struct Records {
    root: PathBuf,
}

/// A job directory being filled before the submission is accepted.
pub struct Staged {
    pub dir: PathBuf,
    pub id: String,
}

impl Records {
    pub fn new(jobs_root: impl Into<PathBuf>) -> Self {
        Self {
            root: jobs_root.into(),
        }
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    pub fn exists(&self, id: &str) -> bool {
        self.dir(id).exists()
    }

    /// `jobs/.tmp-<id>-<pid>/` with the layout's subdirectories.
    pub fn stage(&self, id: &str) -> std::io::Result<Staged> {
        std::fs::create_dir_all(&self.root)?;
        let dir = self.root.join(format!(".tmp-{id}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        for sub in ["config", "logs", "debug", "checkpoints"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        Ok(Staged {
            dir,
            id: id.to_string(),
        })
    }

    /// Moves a staged directory to its final name. Fails if the name was taken meanwhile.
    pub fn publish(&self, staged: Staged) -> std::io::Result<PathBuf> {
        let target = self.dir(&staged.id);
        if target.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists", target.display()),
            ));
        }
        std::fs::rename(&staged.dir, &target)?;
        Ok(target)
    }

    pub fn discard(&self, staged: Staged) {
        let _ = std::fs::remove_dir_all(staged.dir);
    }

    pub fn read(&self, id: &str) -> Option<JobRecord> {
        let text = std::fs::read_to_string(self.dir(id).join("job.json")).ok()?;
        let mut record: JobRecord = serde_json::from_str(&text).ok()?;
        if record.submission_id.is_empty() {
            record.submission_id = id.to_string();
        }
        Some(record)
    }

    pub fn write(&self, record: &JobRecord) -> std::io::Result<()> {
        write_atomic(
            &self.dir(&record.submission_id).join("job.json"),
            &serde_json::to_vec_pretty(record).unwrap_or_default(),
        )
    }

    /// Every record, newest first.
    pub fn list(&self) -> Vec<JobRecord> {
        let mut records: Vec<JobRecord> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| self.read(&e.file_name().to_string_lossy()))
            .collect();
        records.sort_by(|a, b| b.submitted_at.cmp(&a.submitted_at));
        records
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
            write_atomic(
                &self.dir(&record.submission_id).join("logs/driver.log"),
                log.as_bytes(),
            )?;
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

/// Writes via a temporary file and a rename: readers never see half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
