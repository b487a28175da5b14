//! The run lock (`runs/<run_id>/run.lock.yaml`): everything a run used, pinned, so that
//! `argus run --lock` replays it and refuses when something drifted.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::inputs::{CodePin, DatasetPin, ModelPin, PinnedFile};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunLock {
    pub format: u32,
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

impl RunLock {
    /// Reads a lock without following a link at it (a lock in `runs/<id>/` is on storage
    /// others write; a lock the user names with `--lock` is opened the same way).
    pub fn read(path: &Path) -> Result<Self, String> {
        use std::io::Read;
        let mut text = String::new();
        crate::fsx::open_regular(path)
            .and_then(|file| file.take(64 << 20).read_to_string(&mut text))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        check_format(path, &text)?;
        serde_yaml::from_str(&text).map_err(|e| format!("{}: not a run lock: {e}", path.display()))
    }

    /// Writes the lock atomically (a reader sees the old lock or the new one, never a part),
    /// into its run directory only if that is a real directory (a planted link is refused).
    pub fn write(&self, path: &Path) -> Result<(), super::Error> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let checked = match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => Err(crate::fsx::Unsafe::Link {
                path: dir.to_path_buf(),
            }
            .into()),
            _ => Ok(()),
        };
        checked
            .and_then(|()| {
                crate::fsx::write_atomic(path, crate::config::yaml::to_string(self).as_bytes())
            })
            .map_err(|source| super::Error::Record {
                path: path.to_path_buf(),
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

    #[test]
    fn a_lock_written_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.lock.yaml");
        lock().write(&path).unwrap();
        assert_eq!(RunLock::read(&path).unwrap().code, lock().code);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
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
