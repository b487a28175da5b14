//! Publishing: copy into `<name>/.tmp-<code_id>-<pid>` on the same filesystem, make the
//! files read-only, write the manifest, then rename into place. A crash, Ctrl-C or full
//! disk leaves nothing under a final name; the next run removes the leftovers.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hash::parallel;
use super::manifest::{MANIFEST, Manifest};
use super::walk::{Entry, Kind};
use super::{Error, io};
use crate::ui::Task;

const TMP_PREFIX: &str = ".tmp-";

pub fn publish(
    source: &Path,
    dir: &Path,
    code_id: &str,
    entries: &[Entry],
    manifest: &Manifest,
    task: &dyn Task,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    let tmp = dir.join(format!("{TMP_PREFIX}{code_id}-{}", std::process::id()));
    let result = fill(source, &tmp, entries, manifest, task).and_then(|()| {
        match std::fs::rename(&tmp, dir.join(code_id)) {
            Ok(()) => Ok(()),
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

/// Removes the temporary directories of snapshot runs that are no longer alive.
pub fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(TMP_PREFIX) else {
            continue;
        };
        let pid = rest
            .rsplit_once('-')
            .and_then(|(_, pid)| pid.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| {
            pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
        });
        if !alive {
            tracing::info!(
                "removing the leftovers of an interrupted snapshot: {}",
                entry.path().display()
            );
            let _ = remove_tree(&entry.path());
        }
    }
}

/// Removes a snapshot tree (its files are read-only; its directories are not).
pub fn remove_tree(path: &Path) -> Result<(), Error> {
    std::fs::remove_dir_all(path).map_err(io("cannot remove", path))
}
