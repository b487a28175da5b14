//! Publishing a dataset directory as a whole.
//!
//! The files are written and synced into `.<name>.tmp-<host>-<pid>/` next to the final
//! directory; then the old directory (if any) is renamed aside to
//! `.<name>.old-<host>-<pid>`, the new one renamed into place, and the old one removed.
//! At every moment a reader of `<name>/` finds the old dataset whole, the new one whole,
//! or no directory at all, never a part of one. A failure before the swap removes the
//! staging directory (a full disk leaves no stray files); a crash leaves only dot-named
//! leftovers, which the next run on this host removes once their process is gone.

use std::path::{Path, PathBuf};

use crate::fsx::fsync_dir as sync_dir;

pub struct Staging {
    parent: PathBuf,
    name: String,
    path: PathBuf,
    published: bool,
}

impl Staging {
    /// Creates `<parent>/.<name>.tmp-<host>-<pid>/`, after removing this host's leftovers
    /// of dead runs.
    pub fn new(parent: &Path, name: &str) -> std::io::Result<Self> {
        let host = crate::fsx::host_name();
        remove_leftovers(parent, name, &host);
        let path = parent.join(format!(".{name}.tmp-{host}-{}", std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        std::fs::create_dir(&path)?;
        Ok(Self {
            parent: parent.to_path_buf(),
            name: name.to_string(),
            path,
            published: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Swaps the staging directory in as `final_dir` (which must be `<parent>/<name>`).
    pub fn publish(mut self, final_dir: &Path) -> std::io::Result<()> {
        debug_assert_eq!(final_dir, self.parent.join(&self.name));
        sync_dir(&self.path)?;
        let old = self.parent.join(format!(
            ".{}.old-{}-{}",
            self.name,
            crate::fsx::host_name(),
            std::process::id()
        ));
        let had_old = match std::fs::rename(final_dir, &old) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if let Err(e) = std::fs::rename(&self.path, final_dir) {
            if had_old {
                let _ = std::fs::rename(&old, final_dir);
            }
            return Err(e);
        }
        self.published = true;
        sync_dir(&self.parent)?;
        if had_old && let Err(e) = std::fs::remove_dir_all(&old) {
            tracing::warn!("cannot remove the replaced dataset {}: {e}", old.display());
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Removes `.<name>.tmp-<host>-<pid>` and `.<name>.old-<host>-<pid>` of processes on
/// this host that no longer run. Other hosts' leftovers are theirs to clean.
fn remove_leftovers(parent: &Path, name: &str, host: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let pid = [".tmp-", ".old-"].iter().find_map(|kind| {
            file_name
                .strip_prefix(&format!(".{name}{kind}{host}-"))
                .and_then(|pid| pid.parse::<u32>().ok())
        });
        if let Some(pid) = pid
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_is_swapped_in_whole_and_a_failed_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let final_dir = dir.path().join("gsm8k");
        for round in ["one", "two"] {
            let staging = Staging::new(dir.path(), "gsm8k").unwrap();
            std::fs::write(staging.path().join("train.parquet"), round).unwrap();
            staging.publish(&final_dir).unwrap();
            assert_eq!(
                std::fs::read_to_string(final_dir.join("train.parquet")).unwrap(),
                round
            );
        }
        {
            let staging = Staging::new(dir.path(), "gsm8k").unwrap();
            std::fs::write(staging.path().join("train.parquet"), "half").unwrap();
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["gsm8k"]);
        assert_eq!(
            std::fs::read_to_string(final_dir.join("train.parquet")).unwrap(),
            "two"
        );
    }

    #[test]
    fn leftovers_of_dead_runs_on_this_host_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let host = crate::fsx::host_name();
        let dead = dir.path().join(format!(".gsm8k.tmp-{host}-4000000000"));
        let other = dir.path().join(".gsm8k.tmp-otherhost-1");
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        drop(Staging::new(dir.path(), "gsm8k").unwrap());
        assert!(!dead.exists());
        assert!(other.exists(), "another host's run is not ours to clean");
    }
}
