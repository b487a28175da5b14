//! Paths on the shared storage (DESIGN.md "Shared storage layout").
//!
//! The same tree is seen twice: from the host (where argus writes) and from inside the
//! containers (where Ray jobs read). One type for each side, so one cannot be passed
//! where the other is meant: [`Layout`] (`Layout<Host>`) is this host's, the only one with
//! handles and writes; [`ContainerLayout`] (`Layout<Container>`) is the containers', paths
//! for the jobs only. A profile's container side is decided in one place,
//! [`crate::config::Profile::container_layout`]; its host side is
//! [`crate::config::LoadedProfile::host_layout`].
//!
//! On the host, the storage is written by others too: any directory below the root may be
//! swapped for a link at any moment. So the path getters ([`Layout::jobs`], ...) are for
//! messages and for the containers' side only; everything argus touches on the host is
//! reached through a [`Dir`] handle: [`Layout::open`] / [`Layout::create_dirs`] open each
//! component from its parent's handle without following a link (the open is the check),
//! and the caller then works relative to the handle it holds. The root itself is the
//! profile's mount and may be a link.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::fsx::{Dir, Dirs};

/// The side that reads and writes the storage: this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {}

/// The side the jobs see: inside the containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {}

/// The shared storage rooted at one path, as `Side` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout<Side = Host> {
    root: PathBuf,
    side: PhantomData<Side>,
}

/// The shared storage as the containers (and so the jobs) see it.
pub type ContainerLayout = Layout<Container>;

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

impl Layout<Host> {
    /// The storage as this host sees it at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            side: PhantomData,
        }
    }
}

impl Layout<Container> {
    /// The storage as the containers see it at `mount` (an absolute container path). A
    /// profile's is [`crate::config::Profile::container_layout`], never built by hand.
    pub fn in_containers(mount: &str) -> Self {
        Self {
            root: PathBuf::from(mount),
            side: PhantomData,
        }
    }

    /// The mount as text (it was built from text): what jobs are told.
    pub fn mount(&self) -> Cow<'_, str> {
        self.root.to_string_lossy()
    }
}

/// Written as its root (a printed plan shows where the storage is).
impl<Side> serde::Serialize for Layout<Side> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.root.serialize(s)
    }
}

impl<Side> Layout<Side> {
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
}

impl Layout<Host> {
    /// The root's handle (the profile's mount, opened as it is named).
    pub fn dir(&self) -> std::io::Result<Dir> {
        Dir::root(&self.root)
    }

    /// The handle of `root/rel`, each component below the root opened without following
    /// a link ([`Dir::open_dir`]): a link or a file on the way is refused
    /// ([`crate::fsx::Unsafe`]), a missing directory is `NotFound`.
    pub fn open(&self, rel: impl AsRef<Path>) -> std::io::Result<Dir> {
        self.dir()?.open_dir(rel)
    }

    /// The handle of `root/rel`, made with the directories above it when missing (the
    /// root too), each component opened as [`Layout::open`] does.
    pub fn create_dirs(&self, rel: impl AsRef<Path>) -> std::io::Result<Dir> {
        Dir::create_root(&self.root)?.create_dirs(rel, &mut |_| {})
    }

    /// [`Layout::create_dirs`], recording in `dirs` each directory below the root it made
    /// (so that a failed operation takes them away again).
    pub fn create_in(&self, dirs: &Dirs, rel: impl AsRef<Path>) -> std::io::Result<Dir> {
        dirs.create_in(&Dir::create_root(&self.root)?, rel)
    }

    /// Creates the directory tree (idempotent), each component opened without following
    /// a link: a planted link is refused ([`crate::fsx::Unsafe`]), nothing made through it.
    pub fn create(&self) -> std::io::Result<()> {
        self.check()?;
        let root = Dir::create_root(&self.root)?;
        for dir in DIRECTORIES {
            root.create_dirs(dir, &mut |_| {})?;
        }
        Ok(())
    }

    /// Checks the top-level directories that exist (those of [`DIRECTORIES`] and
    /// `.argus/locks`): each opened as a real directory, none through a link. What does
    /// not exist yet is fine (it is made, the same way, when first needed).
    pub fn check(&self) -> std::io::Result<()> {
        let root = match self.dir() {
            Ok(root) => root,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for dir in DIRECTORIES.iter().chain([&LOCKS]) {
            match root.open_dir(dir) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsx::Unsafe;

    #[test]
    fn paths_follow_the_design() {
        let l = Layout::new("/mnt/shared");
        assert_eq!(l.hf_home(), PathBuf::from("/mnt/shared/common/hf"));
        assert_eq!(l.jobs(), PathBuf::from("/mnt/shared/jobs"));
        let dir = tempfile::tempdir().unwrap();
        let l = Layout::new(dir.path().join("fresh"));
        l.check().unwrap();
        l.create().unwrap();
        l.create().unwrap();
        assert!(l.code().is_dir() && l.runs().is_dir() && l.user_code().is_dir());
        assert_eq!(l.open("jobs").unwrap().path(), l.jobs());
        let made = l.create_dirs("jobs/a/b").unwrap();
        assert_eq!(made.path(), l.jobs().join("a/b"));
        assert!(l.jobs().join("a/b").is_dir());
        let err = l.open("jobs/../..").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::Escapes { .. })),
            "{err}"
        );
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
            let mut errors = vec![l.check().unwrap_err(), l.create().unwrap_err()];
            if planted != ".argus/locks" {
                errors.push(l.open(Path::new(planted).join("x")).unwrap_err());
                errors.push(l.create_dirs(Path::new(planted).join("x")).unwrap_err());
            }
            for err in errors {
                assert!(
                    matches!(Unsafe::of(&err), Some(Unsafe::Link { path }) if *path == link),
                    "{planted}: {err}"
                );
            }
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_it_was_opened_keeps_the_writes_inside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let l = Layout::new(dir.path().join("shared"));
        l.create().unwrap();
        let datasets = l.open("common/datasets").unwrap();
        let moved = dir.path().join("moved");
        std::fs::rename(l.datasets(), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, l.datasets()).unwrap();
        datasets.create_dirs("gsm8k", &mut |_| {}).unwrap();
        datasets.write_atomic("f", b"x").unwrap();
        assert!(moved.join("gsm8k").is_dir() && moved.join("f").is_file());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Opened again now, the link is refused.
        let err = l.open("common/datasets").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::Link { .. })),
            "{err}"
        );
    }
}
