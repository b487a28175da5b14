//! Paths on the shared storage (DESIGN.md "Shared storage layout").
//!
//! The same tree is seen twice: from the host (where argus writes) and from inside the
//! containers (where Ray jobs read). `Layout` holds one root; build one for each side.

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
        self.root.join(".argus").join("locks")
    }
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// Creates the directory tree (idempotent).
    pub fn create(&self) -> std::io::Result<()> {
        for dir in DIRECTORIES {
            std::fs::create_dir_all(self.root.join(dir))?;
        }
        Ok(())
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
}
