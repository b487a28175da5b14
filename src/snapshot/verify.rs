//! Verification: re-hash a snapshot and compare it with its manifest, and the manifest with
//! itself (its records must give its tree hash). The snapshot is walked through handles
//! ([`crate::fsx::Dir`]): nothing in it is followed, a link stands for itself, a file is
//! opened without following one. Besides the files, the modes of the directories (the
//! snapshot's root and `.argus/` included) and of the manifest are checked, anything in
//! `.argus/` but the manifest is a difference, and so is a directory no record leads to
//! and anything owned by another user than the snapshot's root (who could make it
//! writable).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Serialize;

use super::hash::{parallel, records_tree_hash};
use super::manifest::{ARGUS_DIR, ARGUS_DIR_MODE, FileRecord, MANIFEST, MANIFEST_MODE, Manifest};
use super::walk::{DEFAULT_DIR_MODE, PYTHON_CACHE_DIR, ROOT, is_python_bytecode};
use super::{Error, io};
use crate::fsx::{Dir, Kind};

#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub path: String,
    pub checked: usize,
    /// Files and links whose content, target, mode or owner differ, and directories
    /// (`<path>/`, the snapshot itself `./`) whose mode or owner differs.
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

/// Checks the snapshot at `snapshot` (`<root>/common/code/<name>/<code_id>`, as `find`
/// gives it), reached from the storage root without following a link.
pub fn verify(snapshot: &Path) -> Result<VerifyReport, Error> {
    verify_in(&super::open_snapshot(snapshot)?)
}

/// What stands in the snapshot, by path: links not followed, Python's byte-code caches
/// left out (as the walk leaves them out: running the code writes them).
#[derive(Default)]
struct OnDisk {
    /// Files, links and anything else that is not a directory.
    leaves: BTreeMap<String, Kind>,
    /// Directories with their modes (the root is ".").
    dirs: BTreeMap<String, u32>,
    /// Names that are not UTF-8 (no manifest names one), escaped.
    foreign: Vec<String>,
    /// The owner of the snapshot's root: every entry of a snapshot has it.
    owner: u32,
    /// Entries (directories as `<path>/`) owned by someone else, who could make them
    /// writable and change them.
    foreign_owned: Vec<String>,
}

/// The permission bits and owner of the directory held open as `dir`.
fn mode_and_owner(dir: &Dir) -> std::io::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self/fd/N` stands for the handle itself: this is fstat(2) of it.
    Ok((dir.mode()?, std::fs::metadata(dir.fd_path())?.uid()))
}

fn scan(dir: &Dir, rel: &str, out: &mut OnDisk) -> Result<(), Error> {
    let (mode, owner) = mode_and_owner(dir).map_err(io("cannot read", dir.path()))?;
    if rel.is_empty() {
        out.owner = owner;
    } else if owner != out.owner {
        out.foreign_owned.push(format!("{rel}/"));
    }
    out.dirs.insert(
        if rel.is_empty() {
            ROOT.into()
        } else {
            rel.into()
        },
        mode,
    );
    let entries = dir.entries().map_err(io("cannot read", dir.path()))?;
    for (name, kind) in entries {
        let Some(name) = name.to_str() else {
            out.foreign
                .push(format!("{:?}", Path::new(rel).join(&name)));
            continue;
        };
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        match kind {
            Kind::Dir if name == PYTHON_CACHE_DIR => {}
            Kind::Dir => {
                let child = dir
                    .open_dir(name)
                    .map_err(io("cannot read", &dir.display(name)))?;
                scan(&child, &path, out)?;
            }
            _ if kind == Kind::File && is_python_bytecode(name.as_bytes()) => {}
            _ => {
                let owner = dir
                    .owner(name)
                    .map_err(io("cannot read", &dir.display(name)))?;
                if owner != out.owner {
                    out.foreign_owned.push(path.clone());
                }
                out.leaves.insert(path, kind);
            }
        }
    }
    Ok(())
}

/// Checks the snapshot held open as `snapshot`.
pub fn verify_in(snapshot: &Dir) -> Result<VerifyReport, Error> {
    let manifest = Manifest::read_in(snapshot)?;
    let mut report = VerifyReport {
        path: snapshot.path().display().to_string(),
        checked: manifest.files.len(),
        ..Default::default()
    };
    if records_tree_hash(&manifest.files) != manifest.tree_hash {
        report
            .manifest
            .push("its file list does not give its tree hash".to_string());
    }
    // A copy of another snapshot under this one's name.
    let name = snapshot.path().file_name().and_then(|n| n.to_str());
    if name.is_some_and(|name| name != manifest.code_id) {
        report
            .manifest
            .push(format!("it names {}, not this directory", manifest.code_id));
    }
    let mut on_disk = OnDisk::default();
    scan(snapshot, "", &mut on_disk)?;
    report.added.append(&mut on_disk.foreign);
    report.changed.append(&mut on_disk.foreign_owned);

    // Directories: those recorded have their recorded mode; every other one on the way to
    // a record, the root and `.argus/` have 0755 (before format 2, whatever the umask left
    // of 0775: group write was not taken away then).
    let usual = |mode: u32| {
        mode == DEFAULT_DIR_MODE || (manifest.format < 2 && mode == DEFAULT_DIR_MODE | 0o020)
    };
    let mut expected: BTreeMap<String, Option<u32>> = BTreeMap::new();
    expected.insert(ROOT.into(), None);
    expected.insert(
        ARGUS_DIR.into(),
        Some(ARGUS_DIR_MODE).filter(|_| manifest.format >= 2),
    );
    for record in &manifest.files {
        let mut rel = record.path.as_str();
        while let Some((parent, _)) = rel.rsplit_once('/') {
            expected.entry(parent.to_string()).or_insert(None);
            rel = parent;
        }
    }
    let mut records = Vec::new();
    for record in &manifest.files {
        if record.dir {
            expected.insert(record.path.clone(), Some(record.mode()));
        } else {
            records.push(record);
        }
    }
    // A directory no record leads to was added (Python's caches were never scanned).
    for rel in on_disk.dirs.keys() {
        if !expected.contains_key(rel) {
            report.added.push(format!("{rel}/"));
        }
    }
    for (rel, want) in expected {
        let shown = if rel == ROOT {
            "./".to_string()
        } else {
            format!("{rel}/")
        };
        match (on_disk.dirs.get(&rel), want) {
            (None, _) if on_disk.leaves.contains_key(&rel) => report.changed.push(shown),
            (None, _) => report.missing.push(shown),
            (Some(&mode), Some(want)) if mode != want => report.changed.push(shown),
            (Some(&mode), None) if !usual(mode) => report.changed.push(shown),
            (Some(_), _) => {}
        }
    }

    // Files and links; in `.argus/`, only the manifest (unless the tree had its own).
    let mut present = Vec::new();
    for record in records {
        match on_disk.leaves.remove(&record.path) {
            Some(kind) => present.push((record.clone(), kind)),
            None => report.missing.push(record.path.clone()),
        }
    }
    match on_disk.leaves.remove(MANIFEST) {
        Some(Kind::File) => {
            let mode = snapshot
                .open_file(MANIFEST)
                .and_then(|f| f.metadata())
                .map(|m| m.permissions().mode() & 0o7777);
            // Format 1 manifests were written 0444 too.
            if !matches!(mode, Ok(MANIFEST_MODE)) {
                report.changed.push(MANIFEST.to_string());
            }
        }
        Some(_) => report.changed.push(MANIFEST.to_string()),
        None => {}
    }
    report.added.extend(on_disk.leaves.into_keys());
    report.added.sort();
    let changed = parallel(present, |(record, kind): (FileRecord, Kind)| {
        Ok((!matches(snapshot, &record, kind)?).then_some(record.path))
    })?;
    report.changed.extend(changed.into_iter().flatten());
    report.changed.sort();
    report.changed.dedup();
    report.missing.sort();
    Ok(report)
}

/// Whether what stands at `record.path` (of `kind`) is what the record says.
fn matches(snapshot: &Dir, record: &FileRecord, kind: Kind) -> Result<bool, Error> {
    let path = snapshot.display(&record.path);
    if let Some(target) = &record.link {
        if kind != Kind::Link {
            return Ok(false);
        }
        let (parent, name) = record.path.rsplit_once('/').unwrap_or(("", &record.path));
        let dir = match snapshot.open_dir(parent) {
            Ok(dir) => dir,
            Err(e) if crate::fsx::Unsafe::of(&e).is_some() => return Ok(false),
            Err(e) => return Err(io("cannot read", &path)(e)),
        };
        // readlink(2) of the name in the directory held open: the link itself, not followed.
        let actual = dir.read_link(name).ok();
        return Ok(actual.as_deref() == Some(Path::new(target)));
    }
    if kind != Kind::File {
        return Ok(false);
    }
    let file = match snapshot.open_file(&record.path) {
        Ok(file) => file,
        // Swapped for a link or something else since the walk: not the recorded file.
        Err(e) if crate::fsx::Unsafe::of(&e).is_some() => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io("cannot read", &path)(e)),
    };
    let meta = file.metadata().map_err(io("cannot read", &path))?;
    if meta.len() != record.size || meta.permissions().mode() & 0o7777 != record.mode() {
        return Ok(false);
    }
    let digest = crate::digest::reader_sha256(file.take(record.size + 1))
        .map_err(io("cannot read", &path))?;
    Ok(record.sha256.as_deref() == Some(digest.as_str()))
}
