//! Paths on the shared storage (DESIGN.md "Shared storage layout").
//!
//! The same tree is seen twice: from the host (where argus writes) and from inside the
//! containers (where Ray jobs read). `Layout` holds one root; build one for each side.
//!
//! On the host, the storage is written by others too: its top-level directories may be
//! links someone planted (on a fresh storage, before argus made them). [`Layout::create`]
//! and [`Layout::check`] refuse them (a link is never followed), and every path below
//! them is derived through [`Layout::under`] / [`Layout::create_under`], checked one
//! component at a time ([`crate::fsx::under`]). The root itself is the profile's mount
//! and may be a link.

use std::path::{Path, PathBuf};

/// The shared storage rooted at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

/// Directories every cluster's shared storage has, relative to the root.
pub const DIRECTORIES: [&str; 6] = [
    "common/code",
    "common/datasets",
    "common/hf",
    "user/code",
    "jobs",
    "runs",
];

/// Where cross-host locks live, relative to the root.
pub const LOCKS: &str = ".argus/locks";

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn code(&self) -> PathBuf {
        self.root.join("common/code")
    }
    pub fn datasets(&self) -> PathBuf {
        self.root.join("common/datasets")
    }
    /// `HF_HOME`; the hub cache is `hub/` inside it.
    pub fn hf_home(&self) -> PathBuf {
        self.root.join("common/hf")
    }
    pub fn user_code(&self) -> PathBuf {
        self.root.join("user/code")
    }
    pub fn jobs(&self) -> PathBuf {
        self.root.join("jobs")
    }
    /// Locks that hold across hosts: `.argus/locks/<kind>-<key>`.
    pub fn locks(&self) -> PathBuf {
        self.root.join(LOCKS)
    }
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// Creates the directory tree (idempotent), each component checked to be a real
    /// directory: a planted link is refused ([`crate::fsx::Unsafe`]), nothing made through it.
    pub fn create(&self) -> std::io::Result<()> {
        self.check()?;
        for dir in DIRECTORIES {
            crate::fsx::create_dirs_under(&self.root, dir)?;
        }
        Ok(())
    }

    /// Checks the top-level directories that exist (those of [`DIRECTORIES`] and
    /// `.argus/locks`): each a real directory, none a link. What does not exist yet is
    /// fine (it is made, checked, when first needed).
    pub fn check(&self) -> std::io::Result<()> {
        for dir in DIRECTORIES.iter().chain([&LOCKS]) {
            let path = crate::fsx::under(&self.root, dir)?;
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if !meta.is_dir() => {
                    return Err(crate::fsx::Unsafe::NotDir { path }.into());
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `root/rel`, checked without following links (see [`crate::fsx::under`]).
    pub fn under(&self, rel: impl AsRef<Path>) -> std::io::Result<PathBuf> {
        crate::fsx::under(&self.root, rel)
    }

    /// Creates `root/rel` and the directories above it, each checked (see
    /// [`crate::fsx::create_dirs_under`]).
    pub fn create_under(&self, rel: impl AsRef<Path>) -> std::io::Result<PathBuf> {
        crate::fsx::create_dirs_under(&self.root, rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_design() {
        let l = Layout::new("/mnt/shared");
        assert_eq!(l.hf_home(), PathBuf::from("/mnt/shared/common/hf"));
        assert_eq!(l.jobs(), PathBuf::from("/mnt/shared/jobs"));
        let dir = tempfile::tempdir().unwrap();
        let l = Layout::new(dir.path());
        l.create().unwrap();
        l.create().unwrap();
        assert!(l.code().is_dir() && l.runs().is_dir() && l.user_code().is_dir());
    }

    #[test]
    fn a_planted_top_level_link_is_refused_and_nothing_is_made_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        for planted in ["jobs", "runs", "common", ".argus/locks"] {
            let root = dir
                .path()
                .join(format!("shared-{}", planted.replace('/', "-")));
            let link = root.join(planted);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&outside, &link).unwrap();
            let l = Layout::new(&root);
            for err in [l.check().unwrap_err(), l.create().unwrap_err()] {
                assert!(
                    matches!(crate::fsx::Unsafe::of(&err), Some(crate::fsx::Unsafe::Link { path }) if *path == link),
                    "{planted}: {err}"
                );
            }
            assert!(l.create_under("jobs/x").is_err() || planted != "jobs");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }
}
