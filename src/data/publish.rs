//! Publishing a dataset directory as a whole, through the handle of the directory that
//! holds it (`common/datasets`, held open: a swap of any directory on the way after it was
//! opened cannot lead a write elsewhere).
//!
//! The files are written and synced into a fresh staging directory (mode 0700, a
//! temporary name of [`crate::fsx::temp_name`]) next to the final one; then the old
//! directory (if any) is renamed aside under another temporary name, the new one renamed
//! into place (both `renameat` in the held handle), and the old one removed. At every
//! moment a reader of `<name>/` finds the old dataset whole, the new one whole, or no
//! directory at all, never a part of one. A failure before the swap removes the staging
//! directory (a full disk leaves no stray files); a crash leaves only temporary names,
//! which the next run on this host removes once their process is gone
//! ([`crate::fsx::remove_dead_temps`]).

use crate::fsx::Dir;

pub struct Staging<'a> {
    parent: &'a Dir,
    name: String,
    tmp: String,
    dir: Dir,
    published: bool,
}

impl<'a> Staging<'a> {
    /// Creates the staging directory for `<parent>/<name>` (new, mode 0700: only this
    /// process writes in it), after removing this host's leftovers of dead runs.
    pub fn new(parent: &'a Dir, name: &str) -> std::io::Result<Self> {
        crate::fsx::remove_dead_temps(parent);
        let tmp = crate::fsx::temp_name(name);
        let dir = parent.create_dir(&tmp, 0o700)?;
        Ok(Self {
            parent,
            name: name.to_string(),
            tmp,
            dir,
            published: false,
        })
    }

    /// The staging directory: write the dataset's files here.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Syncs the staging tree, gives it `mode` and swaps it in as `<parent>/<name>`.
    pub fn publish(mut self, mode: u32) -> std::io::Result<()> {
        self.dir.sync_tree()?;
        self.dir.set_mode(mode)?;
        let parent = self.parent;
        let old = crate::fsx::temp_name(&format!("{}.old", self.name));
        let had_old = match parent.rename(&self.name, parent, &old) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if let Err(e) = parent.rename(&self.tmp, parent, &self.name) {
            if had_old {
                let _ = parent.rename(&old, parent, &self.name);
            }
            return Err(e);
        }
        self.published = true;
        parent.sync()?;
        if had_old && let Err(e) = parent.remove_all(&old) {
            tracing::warn!(
                "cannot remove the replaced dataset {}: {e}",
                parent.display(&old).display()
            );
        }
        Ok(())
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        if !self.published {
            let _ = self.parent.remove_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_dataset_is_swapped_in_whole_and_a_failed_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let parent = Dir::root(dir.path()).unwrap();
        let final_dir = dir.path().join("gsm8k");
        for round in ["one", "two"] {
            let staging = Staging::new(&parent, "gsm8k").unwrap();
            staging
                .dir()
                .write_new("train.parquet", round.as_bytes())
                .unwrap();
            staging.publish(0o755).unwrap();
            assert_eq!(
                std::fs::read_to_string(final_dir.join("train.parquet")).unwrap(),
                round
            );
            let mode = std::fs::metadata(&final_dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o755);
        }
        {
            let staging = Staging::new(&parent, "gsm8k").unwrap();
            staging.dir().write_new("train.parquet", b"half").unwrap();
        }
        assert_eq!(names(dir.path()), ["gsm8k"]);
        assert_eq!(
            std::fs::read_to_string(final_dir.join("train.parquet")).unwrap(),
            "two"
        );
    }

    #[test]
    fn leftovers_of_dead_runs_on_this_host_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let host = crate::fsx::host_name();
        let dead = dir.path().join(format!(".tmp-gsm8k.{host}.4000000000.1.0"));
        let other = dir.path().join(".tmp-gsm8k.otherhost.1.1.0");
        std::fs::create_dir_all(dead.join("x")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let parent = Dir::root(dir.path()).unwrap();
        drop(Staging::new(&parent, "gsm8k").unwrap());
        assert!(!dead.exists());
        assert!(other.exists(), "another host's run is not ours to clean");
    }

    /// The datasets directory swapped for a link to elsewhere while its handle is held:
    /// the staging, the files and the swap-in all land in the real (moved) directory.
    #[test]
    fn a_datasets_directory_swapped_for_a_link_while_held_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("shared");
        let outside = dir.path().join("outside");
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(root.join("common/datasets/gsm8k")).unwrap();
        std::fs::write(root.join("common/datasets/gsm8k/train.parquet"), "old").unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let datasets = Dir::root(&root)
            .unwrap()
            .open_dir("common/datasets")
            .unwrap();
        let swap = || {
            std::fs::rename(root.join("common/datasets"), &moved).unwrap();
            std::os::unix::fs::symlink(&outside, root.join("common/datasets")).unwrap();
        };
        swap();
        let staging = Staging::new(&datasets, "gsm8k").unwrap();
        staging.dir().write_new("train.parquet", b"new").unwrap();
        staging.publish(0o755).unwrap();
        assert_eq!(
            std::fs::read_to_string(moved.join("gsm8k/train.parquet")).unwrap(),
            "new"
        );
        assert_eq!(names(&moved), ["gsm8k"]);
        assert!(names(&outside).is_empty(), "nothing made outside");
    }
}
