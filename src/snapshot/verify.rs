//! Verification: re-hash a snapshot and compare it with its manifest.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Serialize;

use super::hash::{file_sha256, parallel};
use super::manifest::{FileRecord, Manifest};
use super::{Error, io};

#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub path: String,
    pub checked: usize,
    pub changed: Vec<String>,
    pub missing: Vec<String>,
    pub added: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.changed.is_empty() && self.missing.is_empty() && self.added.is_empty()
    }
}

pub fn verify(snapshot: &Path) -> Result<VerifyReport, Error> {
    let manifest = Manifest::read(snapshot)?;
    let mut on_disk: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for item in ignore::WalkBuilder::new(snapshot)
        .standard_filters(false)
        .follow_links(false)
        .build()
    {
        let item = item.map_err(|e| Error::Io {
            action: "cannot read",
            path: snapshot.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        if item.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel) = item.path().strip_prefix(snapshot) else {
            continue;
        };
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if rel.starts_with(".argus/") {
            continue;
        }
        on_disk.insert(rel, item.path().to_path_buf());
    }
    let mut report = VerifyReport {
        path: snapshot.display().to_string(),
        checked: manifest.files.len(),
        ..Default::default()
    };
    let mut present = Vec::new();
    for record in &manifest.files {
        match on_disk.remove(&record.path) {
            Some(path) => present.push((record.clone(), path)),
            None => report.missing.push(record.path.clone()),
        }
    }
    report.added = on_disk.into_keys().collect();
    let changed = parallel(
        present,
        |(record, path): (FileRecord, std::path::PathBuf)| {
            Ok((!matches(&record, &path)?).then_some(record.path))
        },
    )?;
    report.changed = changed.into_iter().flatten().collect();
    report.changed.sort();
    Ok(report)
}

fn matches(record: &FileRecord, path: &Path) -> Result<bool, Error> {
    let meta = std::fs::symlink_metadata(path).map_err(io("cannot read", path))?;
    if let Some(target) = &record.link {
        let actual = std::fs::read_link(path).ok();
        return Ok(meta.file_type().is_symlink() && actual.as_deref() == Some(Path::new(target)));
    }
    if !meta.is_file()
        || meta.len() != record.size
        || (meta.permissions().mode() & 0o111 != 0) != record.executable
    {
        return Ok(false);
    }
    Ok(record.sha256.as_deref()
        == Some(file_sha256(path).map_err(io("cannot read", path))?.as_str()))
}
