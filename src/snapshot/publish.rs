//! Publishing: copy into a temporary name in `<name>/` on the same filesystem (one that
//! says which host and process writes it: `crate::fsx::temp_name`), give the files their
//! read-only modes, write the manifest, fsync the tree, then rename into place. A crash,
//! Ctrl-C or full disk leaves nothing under a final name; the next run removes the
//! leftovers, never those of a live writer on another host.
//!
//! Each file is hashed from the very bytes written into the copy, in the same pass, and
//! must give the digest the manifest records; its source must still be what the walk saw
//! after the copy. A file that changed in between fails the snapshot
//! ([`Error::Changed`]): what is published is always what its manifest and id say.
//!
//! `dir` (the `<name>/` directory) is the caller's, checked to be a real directory on the
//! storage; everything below it is made here, with names that are never followed.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hash::{parallel, read_unchanged};
use super::manifest::{MANIFEST, Manifest};
use super::walk::{Entry, Kind};
use super::{Error, io};
use crate::ui::Task;

pub fn publish(
    dir: &Path,
    code_id: &str,
    entries: &[Entry],
    manifest: &Manifest,
    task: &dyn Task,
) -> Result<(), Error> {
    let tmp = dir.join(crate::fsx::temp_name(code_id));
    let target = dir.join(code_id);
    let result = fill(&tmp, entries, manifest, task).and_then(|()| {
        crate::fsx::fsync_tree(&tmp).map_err(io("cannot sync", &tmp))?;
        crate::testpoint::reach("snapshot:before-publish");
        // rename(2) never follows a link at the target: a directory cannot replace one.
        match std::fs::rename(&tmp, &target) {
            Ok(()) => crate::fsx::fsync_dir(dir).map_err(io("cannot sync", dir)),
            // Published by a concurrent identical snapshot in the meantime.
            Err(_) if published_as(&target, &manifest.tree_hash) => remove_tree(&tmp),
            Err(e) => Err(crate::fsx::io_at("cannot publish", &target)(e).into()),
        }
    });
    if result.is_err() {
        let _ = remove_tree(&tmp);
    }
    result
}

/// Whether `target` is a real snapshot directory whose manifest has `tree_hash`.
fn published_as(target: &Path, tree_hash: &str) -> bool {
    std::fs::symlink_metadata(target).is_ok_and(|m| m.is_dir())
        && Manifest::read(target).is_ok_and(|m| m.tree_hash == tree_hash)
}

fn fill(tmp: &Path, entries: &[Entry], manifest: &Manifest, task: &dyn Task) -> Result<(), Error> {
    std::fs::create_dir(tmp).map_err(io("cannot create", tmp))?;
    // Directories first (sequentially), then the files in parallel.
    let mut dirs: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.rel.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        crate::fsx::create_dirs_under(tmp, d).map_err(io("cannot create", &tmp.join(d)))?;
    }
    let total = entries.len();
    let done = AtomicUsize::new(0);
    parallel(entries.iter().collect(), |entry: &Entry| {
        let to = tmp.join(&entry.rel);
        match &entry.kind {
            Kind::File { mode } => copy_file(entry, &to, *mode)?,
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
    crate::fsx::create_dirs_under(tmp, ".argus").map_err(io("cannot create", tmp))?;
    let manifest_path = tmp.join(MANIFEST);
    let text = serde_json::to_vec_pretty(manifest).unwrap_or_default();
    write_new(&manifest_path, 0o444, |file| {
        std::io::Write::write_all(file, &text).map_err(io("cannot write", &manifest_path))
    })
}

/// Copies the file of `entry` to the new name `to` and gives it `mode`; the digest of the
/// bytes written must be the one the manifest records.
fn copy_file(entry: &Entry, to: &Path, mode: u32) -> Result<(), Error> {
    write_new(to, mode, |file| {
        let written = read_unchanged(entry, &mut *file)?;
        if written != entry.sha256 {
            return Err(Error::Changed {
                path: entry.source.clone(),
            });
        }
        Ok(())
    })
}

/// Creates `path` (which must not exist: nothing planted there is followed), private to
/// this user while `fill` writes it, then gives it `mode`.
fn write_new(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("cannot create", path))?;
    fill(&mut file)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io("cannot set the mode of", path))
}

/// Removes the leftovers of interrupted snapshots in `dir`: every temporary copy of
/// `code_id` (the caller holds its lock, so none has a live writer), and those of other ids
/// whose writer on this host is gone. Another host's copies of other ids are left alone.
pub fn remove_leftovers(dir: &Path, code_id: &str) {
    if let Ok(dir) = crate::fsx::Dir::root(dir) {
        crate::fsx::remove_temps_of(&dir, code_id);
        crate::fsx::remove_dead_temps(&dir);
    }
}

/// Removes a snapshot tree (its files are read-only; its directories are not).
pub fn remove_tree(path: &Path) -> Result<(), Error> {
    crate::fsx::remove_any(path).map_err(io("cannot remove", path))
}
