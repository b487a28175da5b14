//! Verification: re-hash a snapshot and compare it with its manifest, and the manifest with
//! itself (its records must give its tree hash). Nothing in the snapshot is followed: a
//! link stands for itself, a file is opened without following one.

use super::walk::{PYTHON_CACHE_DIR, is_python_bytecode};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::hash::{parallel, records_tree_hash};
use super::manifest::{FileRecord, Manifest};
use super::{Error, io};

#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub path: String,
    pub checked: usize,
    pub changed: Vec<String>,
    pub missing: Vec<String>,
    pub added: Vec<String>,
    /// What is wrong with the manifest itself (its records do not give its tree hash).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifest: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.changed.is_empty()
            && self.missing.is_empty()
            && self.added.is_empty()
            && self.manifest.is_empty()
    }

    /// One line: how many of each, and the first few paths.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self.manifest.clone();
        for (what, files) in [
            ("changed", &self.changed),
            ("missing", &self.missing),
            ("added", &self.added),
        ] {
            if !files.is_empty() {
                let shown: Vec<&str> = files.iter().take(3).map(String::as_str).collect();
                let more = if files.len() > 3 { ", ..." } else { "" };
                parts.push(format!(
                    "{} {what}: {}{more}",
                    files.len(),
                    shown.join(", ")
                ));
            }
        }
        parts.join("; ")
    }
}

/// Checks the snapshot directory `snapshot` (which the caller found with `find`).
pub fn verify(snapshot: &Path) -> Result<VerifyReport, Error> {
    let manifest = Manifest::read(snapshot)?;
    let mut report = VerifyReport {
        path: snapshot.display().to_string(),
        checked: manifest.files.len(),
        ..Default::default()
    };
    if records_tree_hash(&manifest.files) != manifest.tree_hash {
        report
            .manifest
            .push("its file list does not give its tree hash".to_string());
    }
    let mut on_disk: BTreeMap<String, PathBuf> = BTreeMap::new();
    for item in ignore::WalkBuilder::new(snapshot)
        .standard_filters(false)
        .follow_links(false)
        .build()
    {
        let item =
            item.map_err(|e| io("cannot read", snapshot)(std::io::Error::other(e.to_string())))?;
        if item.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel) = item.path().strip_prefix(snapshot) else {
            continue;
        };
        // No manifest names a path that is not UTF-8: such a file was added.
        let Some(rel) = rel.to_str() else {
            report.added.push(format!("{rel:?}"));
            continue;
        };
        // Python's byte-code cache, as the walk leaves it out.
        if rel.starts_with(".argus/")
            || is_python_bytecode(rel.as_bytes())
            || rel.split('/').any(|c| c == PYTHON_CACHE_DIR)
        {
            continue;
        }
        on_disk.insert(rel.to_string(), item.path().to_path_buf());
    }
    let mut present = Vec::new();
    for record in &manifest.files {
        match on_disk.remove(&record.path) {
            Some(path) => present.push((record.clone(), path)),
            None => report.missing.push(record.path.clone()),
        }
    }
    report.added.extend(on_disk.into_keys());
    report.added.sort();
    let changed = parallel(present, |(record, path): (FileRecord, PathBuf)| {
        Ok((!matches(&record, &path)?).then_some(record.path))
    })?;
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
    if !meta.is_file() {
        return Ok(false);
    }
    let file = match crate::fsx::open_regular(path) {
        Ok(file) => file,
        // Swapped for a link or something else since the walk: not the recorded file.
        Err(e) if crate::fsx::Unsafe::of(&e).is_some() => return Ok(false),
        Err(e) => return Err(io("cannot read", path)(e)),
    };
    let meta = file.metadata().map_err(io("cannot read", path))?;
    if meta.len() != record.size || meta.permissions().mode() & 0o7777 != record.mode() {
        return Ok(false);
    }
    let digest = crate::digest::reader_sha256(file.take(record.size + 1))
        .map_err(io("cannot read", path))?;
    Ok(record.sha256.as_deref() == Some(digest.as_str()))
}
