//! Publishing: copy into a temporary directory in `<name>/` on the same filesystem (one
//! that says which host and process writes it: `crate::fsx::temp_name`, made 0700 so
//! nobody else reaches inside while it is filled), give the files and directories their
//! modes, write the manifest, fsync the tree, then rename into place. A crash, Ctrl-C or
//! full disk leaves nothing under a final name; the next run removes the leftovers, never
//! those of a live writer on another host.
//!
//! Each file is hashed from the very bytes written into the copy, in the same pass, and
//! must give the digest the manifest records; its source must still be what the walk saw
//! after the copy. A file that changed in between fails the snapshot
//! ([`Error::Changed`]): what is published is always what its manifest and id say.
//!
//! `family` (the `<name>/` directory) is held open by the caller; everything below it is
//! made, renamed and removed through handles ([`crate::fsx::Dir`]), so a directory of the
//! storage swapped for a link meanwhile is never followed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hash::{parallel, read_unchanged};
use super::manifest::{ARGUS_DIR, ARGUS_DIR_MODE, MANIFEST_MODE, MANIFEST_NAME, Manifest};
use super::walk::{DEFAULT_DIR_MODE, Entry, Kind, ROOT};
use super::{Error, io};
use crate::fsx::Dir;
use crate::ui::Task;

pub fn publish(
    family: &Dir,
    code_id: &str,
    entries: &[Entry],
    manifest: &Manifest,
    task: &dyn Task,
) -> Result<(), Error> {
    let tmp_name = crate::fsx::temp_name(code_id);
    let tmp = family
        .create_dir(&tmp_name, 0o700)
        .map_err(io("cannot create", &family.display(&tmp_name)))?;
    let result = fill(&tmp, entries, manifest, task).and_then(|()| {
        tmp.sync_tree()
            .map_err(io("cannot sync", &family.display(&tmp_name)))?;
        crate::testpoint::reach("snapshot:before-publish");
        // renameat(2) never follows a link at the target: a directory cannot replace one.
        match family.rename(&tmp_name, family, code_id) {
            Ok(()) => family.sync().map_err(io("cannot sync", family.path())),
            // Published by a concurrent identical snapshot in the meantime.
            Err(_) if published_as(family, code_id, &manifest.tree_hash) => {
                remove(family, &tmp_name)
            }
            Err(e) => Err(crate::fsx::io_at("cannot publish", &family.display(code_id))(e).into()),
        }
    });
    if result.is_err() {
        let _ = remove(family, &tmp_name);
    }
    result
}

/// Whether `family/code_id` is a real snapshot directory whose manifest has `tree_hash`.
fn published_as(family: &Dir, code_id: &str, tree_hash: &str) -> bool {
    family
        .open_dir(code_id)
        .is_ok_and(|dir| Manifest::read_in(&dir).is_ok_and(|m| m.tree_hash == tree_hash))
}

/// The directory of `rel` (`/`-separated) and its last name.
fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

fn fill(tmp: &Dir, entries: &[Entry], manifest: &Manifest, task: &dyn Task) -> Result<(), Error> {
    // Directories first (sequentially, parents before children: the entries are sorted),
    // each private to this process until the tree is whole; then the files in parallel.
    let mut dirs = Vec::new();
    let mut root_mode = DEFAULT_DIR_MODE;
    for entry in entries {
        match entry.kind {
            Kind::Dir { mode } if entry.rel == ROOT => root_mode = mode,
            Kind::Dir { mode } => {
                let (parent, name) = split(&entry.rel);
                let at = tmp.display(&entry.rel);
                tmp.open_dir(parent)
                    .and_then(|p| p.create_dir(name, 0o700))
                    .map_err(io("cannot create", &at))?;
                dirs.push((entry.rel.as_str(), mode));
            }
            _ => {}
        }
    }
    let files: Vec<&Entry> = entries
        .iter()
        .filter(|e| !matches!(e.kind, Kind::Dir { .. }))
        .collect();
    let total = files.len();
    let done = AtomicUsize::new(0);
    parallel(files, |entry: &Entry| {
        let (parent, name) = split(&entry.rel);
        let to = tmp.display(&entry.rel);
        let dir = tmp.open_dir(parent).map_err(io("cannot create", &to))?;
        match &entry.kind {
            Kind::File { mode } => copy_file(entry, &dir, name, &to, *mode)?,
            Kind::Symlink { target } => dir
                .symlink(Path::new(target), name)
                .map_err(io("cannot create link", &to))?,
            Kind::Dir { .. } => {}
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(200) {
            task.update(&format!("copied {n}/{total} files"));
        }
        Ok(())
    })?;
    // A tree may hold its own `.argus/` (then only the manifest is new in it).
    let argus = tmp
        .create_dirs(ARGUS_DIR, &mut |_| {})
        .map_err(io("cannot create", &tmp.display(ARGUS_DIR)))?;
    let manifest_path = argus.display(MANIFEST_NAME);
    let text = serde_json::to_vec_pretty(manifest).unwrap_or_default();
    write_new(
        &argus,
        MANIFEST_NAME,
        &manifest_path,
        MANIFEST_MODE,
        |file| std::io::Write::write_all(file, &text).map_err(io("cannot write", &manifest_path)),
    )?;
    // The modes last, deepest first; the root's own mode once nothing more is made in it.
    let set_mode = |rel: &str, mode: u32| {
        tmp.open_dir(rel)
            .and_then(|d| d.set_mode(mode))
            .map_err(io("cannot set the mode of", &tmp.display(rel)))
    };
    if !dirs.iter().any(|(rel, _)| *rel == ARGUS_DIR) {
        set_mode(ARGUS_DIR, ARGUS_DIR_MODE)?;
    }
    for (rel, mode) in dirs.iter().rev() {
        set_mode(rel, *mode)?;
    }
    set_mode("", root_mode)
}

/// Copies the file of `entry` to the new `name` in `dir` and gives it `mode`; the digest
/// of the bytes written must be the one the manifest records.
fn copy_file(entry: &Entry, dir: &Dir, name: &str, to: &Path, mode: u32) -> Result<(), Error> {
    write_new(dir, name, to, mode, |file| {
        let written = read_unchanged(entry, &mut *file)?;
        if written != entry.sha256 {
            return Err(Error::Changed {
                path: entry.source.clone(),
            });
        }
        Ok(())
    })
}

/// Creates `name` in `dir` (it must not exist: nothing planted there is followed), private
/// to this user while `fill` writes it, then gives it `mode`. `path` is for messages.
fn write_new(
    dir: &Dir,
    name: &str,
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut file = dir
        .create_new(name, 0o600)
        .map_err(io("cannot create", path))?;
    fill(&mut file)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io("cannot set the mode of", path))
}

/// Removes the leftovers of interrupted snapshots in `family`: every temporary copy of
/// `code_id` (the caller holds its lock, so none has a live writer), and those of other ids
/// whose writer on this host is gone. Another host's copies of other ids are left alone.
pub fn remove_leftovers(family: &Dir, code_id: &str) {
    crate::fsx::remove_temps_of(family, code_id);
    crate::fsx::remove_dead_temps(family);
}

/// Removes the snapshot tree (or temporary copy) `name` of `family` (its files are
/// read-only; its directories are not).
pub fn remove(family: &Dir, name: &str) -> Result<(), Error> {
    family
        .remove_all(name)
        .map_err(io("cannot remove", &family.display(name)))
}
