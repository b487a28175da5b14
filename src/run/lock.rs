//! The run lock (`runs/<run_id>/run.lock.yaml`): everything a run used, pinned, so that
//! `argus run --lock` replays it and refuses when something drifted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::record::RunFile;

pub use crate::inputs::{CodePin, DatasetPin, ModelPin, PinnedFile};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunLock {
    pub format: u32,
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::RunId>")]
    pub run_id: String,
    pub created: String,
    pub argus_version: String,
    pub image: ImagePin,
    pub ray_version: String,
    /// The profile as used (secrets redacted).
    pub profile: serde_yaml::Value,
    /// The JobSpec as used: paths absolute, secrets redacted.
    pub jobspec: serde_yaml::Value,
    pub code: CodePin,
    #[serde(default)]
    pub datasets: Vec<DatasetPin>,
    #[serde(default)]
    pub model: Option<ModelPin>,
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::SubmissionId>")]
    pub submission_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePin {
    pub reference: String,
    pub id: String,
    /// The registry digest, when the image came from a registry.
    #[serde(default)]
    pub digest: Option<String>,
}

/// Where a run lock is read from: a run's own `runs/<run_id>/run.lock.yaml` on the
/// shared storage ([`RunFile`], through its run directory's handle), or a file the user
/// named with `--lock` (a path of the user's choosing, opened by path without following
/// a link at its last name).
pub trait Source {
    /// The file whole, refused over `cap` bytes.
    fn read_capped(&self, cap: u64) -> std::io::Result<Vec<u8>>;
    /// Its path, for messages.
    fn shown(&self) -> &Path;
}

impl Source for RunFile {
    fn read_capped(&self, cap: u64) -> std::io::Result<Vec<u8>> {
        self.read(cap)
    }
    fn shown(&self) -> &Path {
        self.path()
    }
}

impl Source for Path {
    fn read_capped(&self, cap: u64) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut bytes = Vec::new();
        crate::fsx::open_regular(self)?
            .take(cap + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > cap {
            let path = self.to_path_buf();
            return Err(crate::fsx::Unsafe::TooLarge { path, cap }.into());
        }
        Ok(bytes)
    }
    fn shown(&self) -> &Path {
        self
    }
}

impl Source for PathBuf {
    fn read_capped(&self, cap: u64) -> std::io::Result<Vec<u8>> {
        self.as_path().read_capped(cap)
    }
    fn shown(&self) -> &Path {
        self
    }
}

/// The most a run lock may hold.
const LOCK_CAP: u64 = 64 << 20;

impl RunLock {
    /// Reads a lock: a run's own through its run directory's handle, a lock the user
    /// names with `--lock` by its path; never through a link at the file.
    pub fn read<S: Source + ?Sized>(from: &S) -> Result<Self, String> {
        let path = from.shown();
        let bytes = from
            .read_capped(LOCK_CAP)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("cannot read {}: not UTF-8 text", path.display()))?;
        check_format(path, &text)?;
        serde_yaml::from_str(&text).map_err(|e| format!("{}: not a run lock: {e}", path.display()))
    }

    /// Writes the lock atomically (a reader sees the old lock or the new one, never a
    /// part) into its run directory, through that directory's handle: a directory on the
    /// way swapped for a link is never followed, and a link at the file's name is
    /// replaced, not written through.
    pub fn write(&self, to: &RunFile) -> Result<(), super::Error> {
        to.write_atomic(crate::config::yaml::to_string(self).as_bytes())
            .map_err(|source| super::Error::Record {
                path: to.path().to_path_buf(),
                source,
            })
    }
}

/// The lock format this argus reads and writes.
pub const FORMAT: u32 = 1;

/// A lock of a format this argus does not know is refused before its fields are read,
/// at the `format` line: its fields may mean something else.
fn check_format(path: &Path, text: &str) -> Result<(), String> {
    let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return Ok(()); // not YAML: the full parse says where
    };
    let format = doc.get("format");
    if format.and_then(serde_yaml::Value::as_u64) == Some(u64::from(FORMAT)) {
        return Ok(());
    }
    let (line, column) =
        crate::config::yaml::locate(text, &crate::yaml_path!["format"]).unwrap_or((1, 1));
    let given = match format {
        None => "no format".to_string(),
        Some(v) => format!("format {}", crate::config::yaml::to_string(v).trim()),
    };
    Err(format!(
        "{}:{line}:{column}: format: a run lock of {given} is not one this argus {} reads (valid: format: {FORMAT})",
        path.display(),
        env!("CARGO_PKG_VERSION")
    ))
}

/// What a replay found, to compare with the lock.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub image_id: Option<String>,
    pub code_tree_hash: Option<String>,
    /// (dataset name, file, sha256 on the shared storage now).
    pub dataset_files: Vec<(String, String, Option<String>)>,
    pub model_commit: Option<String>,
}

/// Every difference between the lock and what is there now, one sentence each. Pure.
pub fn drift(lock: &RunLock, now: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(id) = &now.image_id
        && *id != lock.image.id
    {
        out.push(format!(
            "image {}: is {id}, the lock pins {}",
            lock.image.reference, lock.image.id
        ));
    }
    if let Some(hash) = &now.code_tree_hash
        && *hash != lock.code.tree_hash
    {
        out.push(format!(
            "code {}: the tree hash is {hash}, the lock pins {} ({})",
            lock.code.source.as_deref().unwrap_or(&lock.code.code_id),
            lock.code.tree_hash,
            lock.code.code_id
        ));
    }
    for (dataset, file, sha) in &now.dataset_files {
        let pinned = lock
            .datasets
            .iter()
            .find(|d| &d.name == dataset)
            .and_then(|d| d.files.iter().find(|f| &f.file == file));
        match (pinned, sha) {
            (Some(p), Some(sha)) if *sha != p.sha256 => out.push(format!(
                "dataset {dataset}/{file}: sha256 is {sha}, the lock pins {}",
                p.sha256
            )),
            (Some(_), None) => out.push(format!("dataset {dataset}/{file}: missing")),
            _ => {}
        }
    }
    if let (Some(model), Some(commit)) = (&lock.model, &now.model_commit)
        && *commit != model.commit
    {
        out.push(format!(
            "model {}@{}: the cache's ref is {commit}, the lock pins {}",
            model.repo, model.revision, model.commit
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::FileDigest;

    fn lock() -> RunLock {
        RunLock {
            format: 1,
            run_id: "r".into(),
            created: "t".into(),
            argus_version: "0".into(),
            image: ImagePin {
                reference: "argus/ray:2.51.1".into(),
                id: "sha256:a".into(),
                digest: None,
            },
            ray_version: "2.51.1".into(),
            profile: serde_yaml::Value::Null,
            jobspec: serde_yaml::Value::Null,
            code: CodePin {
                name: "verl".into(),
                code_id: "c".into(),
                tree_hash: "t1".into(),
                source: Some("/src".into()),
            },
            datasets: vec![DatasetPin {
                name: "gsm8k".into(),
                source: "s".into(),
                files: vec![FileDigest {
                    file: "train.parquet".into(),
                    sha256: "s1".into(),
                    rows: 1,
                }],
            }],
            model: Some(ModelPin {
                repo: "acme/tiny".into(),
                revision: "main".into(),
                commit: "m1".into(),
                files: vec![],
            }),
            submission_id: "j".into(),
        }
    }

    fn run_dir(runs: &Path, run_id: &str) -> crate::run::record::Recorder {
        let report = crate::run::RunReport {
            run_id: run_id.into(),
            ..Default::default()
        };
        crate::run::record::Recorder::create(runs, report).unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_lock_written_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let file = run_dir(&runs, "run-1").lock_path();
        assert_eq!(file.path(), runs.join("run-1/run.lock.yaml"));
        assert!(!file.exists());
        lock().write(&file).unwrap();
        assert!(file.exists());
        assert_eq!(RunLock::read(&file).unwrap().code, lock().code);
        // The same file named by the user (`--lock <path>`).
        assert_eq!(RunLock::read(file.path()).unwrap().code, lock().code);
        assert_eq!(names(&runs.join("run-1")), ["report.json", "run.lock.yaml"]);
    }

    #[test]
    fn a_run_lock_goes_into_its_run_directory_after_runs_is_swapped_for_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (runs, moved) = (dir.path().join("runs"), dir.path().join("moved"));
        let outside = dir.path().join("outside");
        // Outside: what a write by path through the swapped link would land in.
        std::fs::create_dir_all(outside.join("run-1")).unwrap();
        let rec = run_dir(&runs, "run-1");
        std::fs::rename(&runs, &moved).unwrap();
        std::os::unix::fs::symlink(&outside, &runs).unwrap();
        let file = rec.lock_path();
        lock().write(&file).unwrap();
        assert_eq!(RunLock::read(&file).unwrap().code, lock().code);
        assert_eq!(
            names(&moved.join("run-1")),
            ["report.json", "run.lock.yaml"]
        );
        assert!(names(&outside.join("run-1")).is_empty(), "written outside");
        // Named by path through the link, it is read as the user named it; a link at
        // the file itself is refused.
        std::os::unix::fs::symlink(moved.join("run-1/run.lock.yaml"), outside.join("l")).unwrap();
        let err = RunLock::read(&outside.join("l")).unwrap_err();
        assert!(err.contains("is a symbolic link"), "{err}");
    }

    #[test]
    fn an_unknown_format_is_refused_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.lock.yaml");
        let good = crate::config::yaml::to_string(&lock());
        std::fs::write(&path, &good).unwrap();
        assert!(RunLock::read(&path).is_ok());
        for (bad, given) in [("format: 2", "format 2"), ("format: x", "format x")] {
            std::fs::write(&path, good.replace("format: 1", bad)).unwrap();
            let err = RunLock::read(&path).unwrap_err();
            assert!(
                err.contains(&format!(":1:9: format: a run lock of {given}")),
                "{err}"
            );
            assert!(err.contains("valid: format: 1"), "{err}");
        }
        std::fs::write(&path, good.replace("format: 1\n", "")).unwrap();
        let err = RunLock::read(&path).unwrap_err();
        assert!(err.contains("a run lock of no format"), "{err}");
    }

    #[test]
    fn no_drift_when_everything_matches() {
        let now = Observed {
            image_id: Some("sha256:a".into()),
            code_tree_hash: Some("t1".into()),
            dataset_files: vec![("gsm8k".into(), "train.parquet".into(), Some("s1".into()))],
            model_commit: Some("m1".into()),
        };
        assert!(drift(&lock(), &now).is_empty());
    }

    #[test]
    fn each_drift_is_named() {
        let now = Observed {
            image_id: Some("sha256:b".into()),
            code_tree_hash: Some("t2".into()),
            dataset_files: vec![("gsm8k".into(), "train.parquet".into(), Some("s2".into()))],
            model_commit: Some("m2".into()),
        };
        let d = drift(&lock(), &now);
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(d[0].starts_with("image argus/ray:2.51.1"));
        assert!(d[1].starts_with("code /src"));
        assert!(d[2].starts_with("dataset gsm8k/train.parquet"));
        assert!(d[3].starts_with("model acme/tiny@main"));
    }
}
