//! Publishing: copy into a temporary name in `<name>/` on the same filesystem (one that
//! says which host and process writes it: `crate::fsx::temp_name`), make the files
//! read-only, write the manifest, fsync the tree, then rename into place. A crash, Ctrl-C
//! or full disk leaves nothing under a final name; the next run removes the leftovers,
//! never those of a live writer on another host.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hash::parallel;
use super::manifest::{MANIFEST, Manifest};
use super::walk::{Entry, Kind};
use super::{Error, io};
use crate::ui::Task;

pub fn publish(
    source: &Path,
    dir: &Path,
    code_id: &str,
    entries: &[Entry],
    manifest: &Manifest,
    task: &dyn Task,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    let tmp = dir.join(crate::fsx::temp_name(code_id));
    let result = fill(source, &tmp, entries, manifest, task).and_then(|()| {
        crate::fsx::fsync_tree(&tmp).map_err(io("cannot sync", &tmp))?;
        crate::testpoint::reach("snapshot:before-publish");
        match std::fs::rename(&tmp, dir.join(code_id)) {
            Ok(()) => crate::fsx::fsync_dir(dir).map_err(io("cannot sync", dir)),
            // Published by a concurrent identical snapshot in the meantime.
            Err(_) if dir.join(code_id).join(MANIFEST).is_file() => remove_tree(&tmp),
            Err(e) => Err(Error::Io {
                action: "cannot publish",
                path: dir.join(code_id),
                source: e,
            }),
        }
    });
    if result.is_err() {
        let _ = remove_tree(&tmp);
    }
    result
}

fn fill(
    _source: &Path,
    tmp: &Path,
    entries: &[Entry],
    manifest: &Manifest,
    task: &dyn Task,
) -> Result<(), Error> {
    std::fs::create_dir(tmp).map_err(io("cannot create", tmp))?;
    // Directories first (sequentially), then the files in parallel.
    let mut dirs: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.rel.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        let path = tmp.join(d);
        std::fs::create_dir_all(&path).map_err(io("cannot create", &path))?;
    }
    let total = entries.len();
    let done = AtomicUsize::new(0);
    parallel(entries.iter().collect(), |entry: &Entry| {
        let to = tmp.join(&entry.rel);
        match &entry.kind {
            Kind::File { executable } => {
                std::fs::copy(&entry.source, &to).map_err(io("cannot copy to", &to))?;
                let mode = if *executable { 0o555 } else { 0o444 };
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
                    .map_err(io("cannot set the mode of", &to))?;
            }
            Kind::Symlink { target } => {
                std::os::unix::fs::symlink(target, &to).map_err(io("cannot create link", &to))?
            }
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(200) {
            task.update(&format!("copied {n}/{total} files"));
        }
        Ok(())
    })?;
    let manifest_path = tmp.join(MANIFEST);
    if let Some(parent) = manifest_path.parent() {
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
    }
    let text = serde_json::to_vec_pretty(manifest).unwrap_or_default();
    std::fs::write(&manifest_path, text).map_err(io("cannot write", &manifest_path))?;
    std::fs::set_permissions(&manifest_path, std::fs::Permissions::from_mode(0o444))
        .map_err(io("cannot set the mode of", &manifest_path))?;
    Ok(())
}

/// Removes the leftovers of interrupted snapshots in `dir`: every temporary copy of
/// `code_id` (the caller holds its lock, so none has a live writer), and those of other ids
/// whose writer on this host is gone. Another host's copies of other ids are left alone.
pub fn remove_leftovers(dir: &Path, code_id: &str) {
    crate::fsx::remove_temps_of(dir, code_id);
    crate::fsx::remove_dead_temps(dir);
}

/// Removes a snapshot tree (its files are read-only; its directories are not).
pub fn remove_tree(path: &Path) -> Result<(), Error> {
    crate::fsx::remove_any(path).map_err(io("cannot remove", path))
}
