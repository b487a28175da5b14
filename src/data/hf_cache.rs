//! The standard Hugging Face cache layout, which huggingface_hub and transformers read
//! offline:
//!
//! ```text
//! hub/{models|datasets}--{org}--{name}/blobs/<etag>
//! hub/{models|datasets}--{org}--{name}/snapshots/<commit>/<path>   relative symlink to the blob
//! hub/{models|datasets}--{org}--{name}/refs/<revision>             the commit, no trailing newline
//! ```
//!
//! The cache is on the shared storage, which others write into: every directory of it is
//! reached through handles ([`Dir`]) from the storage's root, each component opened
//! without following a link, and every file and link is made, read, renamed and removed
//! relative to the handle of the directory that holds it. The snapshot links are the
//! cache's own (made here, read with `readlink`), never followed when writing. Names come
//! from checked types ([`crate::hf`]), so they are plain components too. The path getters
//! ([`HubCache::blob`], ...) are for messages and for the containers' side only.

use std::path::{Path, PathBuf};

use crate::config::Layout;
use crate::fsx::{Dir, Dirs, Kind};
use crate::hf::{Commit, Etag, RepoId, RepoKind, RepoPath, Revision};

/// A ref file holds a commit (40 hex digits); anything much longer is not one.
const MAX_REF: u64 = 4096;

/// The hub cache: `base` is opened as it is named (the caller's own root, a profile's
/// mount), `rel` below it through handles.
#[derive(Debug, Clone)]
pub struct HubCache {
    base: PathBuf,
    rel: PathBuf,
}

impl HubCache {
    /// The cache of the shared storage `layout` (`common/hf/hub`): every directory from
    /// the storage's root down is opened without following a link.
    pub fn of(layout: &Layout) -> Self {
        Self {
            base: layout.root().to_path_buf(),
            rel: layout
                .hf_home()
                .join("hub")
                .strip_prefix(layout.root())
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| PathBuf::from("common/hf/hub")),
        }
    }

    /// A cache at `root` (`$HF_HOME/hub`), which is trusted as it is named (it may be a
    /// link): for a cache of the caller's own. On the shared storage use [`HubCache::of`].
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            base: root.into(),
            rel: PathBuf::new(),
        }
    }

    /// Where the cache is, for messages.
    pub fn root(&self) -> PathBuf {
        self.base.join(&self.rel)
    }

    pub fn repo_dir(&self, kind: RepoKind, repo: &RepoId) -> PathBuf {
        self.root().join(repo.folder_name(kind))
    }

    pub fn blob(&self, kind: RepoKind, repo: &RepoId, etag: &Etag) -> PathBuf {
        self.repo_dir(kind, repo).join("blobs").join(etag.as_str())
    }

    /// Where a blob is downloaded before it is verified: `blobs/<etag>.incomplete`.
    pub fn incomplete(&self, kind: RepoKind, repo: &RepoId, etag: &Etag) -> PathBuf {
        self.repo_dir(kind, repo)
            .join("blobs")
            .join(incomplete_name(etag))
    }

    pub fn snapshot_dir(&self, kind: RepoKind, repo: &RepoId, commit: &Commit) -> PathBuf {
        self.repo_dir(kind, repo)
            .join("snapshots")
            .join(commit.as_str())
    }

    pub fn snapshot_file(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        commit: &Commit,
        file: &RepoPath,
    ) -> PathBuf {
        self.snapshot_dir(kind, repo, commit).join(file.to_path())
    }

    /// The handle of the cache's root; `NotFound` when it does not exist.
    pub fn open(&self) -> std::io::Result<Dir> {
        Dir::root(&self.base)?.open_dir(&self.rel)
    }

    /// The handle of a repository's directory, None when it does not exist. A link or a
    /// file on the way is refused ([`Unsafe`]).
    pub fn open_repo(&self, kind: RepoKind, repo: &RepoId) -> std::io::Result<Option<RepoCache>> {
        crate::fsx::found(
            self.open()
                .and_then(|root| root.open_dir(repo.folder_name(kind))),
        )
        .map(|dir| dir.map(|dir| RepoCache { dir }))
    }

    /// The handle of a repository's directory, made (with the cache's directories above
    /// it) when missing; each directory made below the base is recorded in `dirs`.
    pub fn create_repo(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        dirs: &Dirs,
    ) -> std::io::Result<RepoCache> {
        let base = Dir::create_root(&self.base)?;
        let dir = dirs.create_in(&base, self.rel.join(repo.folder_name(kind)))?;
        Ok(RepoCache { dir })
    }

    /// The commit `refs/<revision>` holds, if it holds one.
    pub fn ref_commit(&self, kind: RepoKind, repo: &RepoId, revision: &Revision) -> Option<Commit> {
        self.open_repo(kind, repo).ok()??.ref_commit(revision)
    }

    /// [`Self::ref_commit`] for names not yet checked (a lock file's): `None` when either
    /// name is not valid.
    pub fn read_ref(&self, kind: RepoKind, repo: &str, revision: &str) -> Option<String> {
        let repo = RepoId::parse(repo).ok()?;
        let revision = Revision::parse(revision).ok()?;
        self.ref_commit(kind, &repo, &revision)
            .map(|c| c.as_str().to_string())
    }

    /// The commit `refs/<revision>` holds when its `snapshots/<commit>/` is there (a real
    /// directory): the model is in the cache.
    pub fn cached_snapshot(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        revision: &Revision,
    ) -> Option<Commit> {
        let repo = self.open_repo(kind, repo).ok()??;
        let commit = repo.ref_commit(revision)?;
        repo.dir
            .open_dir(Path::new("snapshots").join(commit.as_str()))
            .ok()
            .map(|_| commit)
    }
}

/// One repository's directory in the cache, held open.
#[derive(Debug)]
pub struct RepoCache {
    dir: Dir,
}

impl RepoCache {
    /// The repository's directory.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The handle of `blobs/`, made when missing (recorded in `dirs`).
    pub fn create_blobs(&self, dirs: &Dirs) -> std::io::Result<Dir> {
        dirs.create_in(&self.dir, "blobs")
    }

    /// Whether `blobs/<etag>` is there as a regular file.
    pub fn has_blob(&self, etag: &Etag) -> bool {
        self.dir
            .open_dir("blobs")
            .and_then(|blobs| blobs.kind(etag.as_str()))
            .is_ok_and(|kind| kind == Some(Kind::File))
    }

    /// Opens `blobs/<etag>` for reading (a regular file, no link, no second hard link).
    pub fn open_blob(&self, etag: &Etag) -> std::io::Result<std::fs::File> {
        self.dir.open_file(Path::new("blobs").join(etag.as_str()))
    }

    /// The commit `refs/<revision>` holds, if it holds one.
    pub fn ref_commit(&self, revision: &Revision) -> Option<Commit> {
        let bytes = self.dir.read(revision.ref_path(), MAX_REF).ok()?;
        Commit::parse(String::from_utf8(bytes).ok()?.trim()).ok()
    }

    /// `refs/<revision>` = commit, without a trailing newline (as huggingface_hub writes
    /// it), atomically.
    pub fn write_ref(
        &self,
        revision: &Revision,
        commit: &Commit,
        dirs: &Dirs,
    ) -> std::io::Result<()> {
        let rel = revision.ref_path();
        let (parent, name) = split(&rel)?;
        dirs.create_in(&self.dir, parent)?
            .write_atomic(name, commit.as_str().as_bytes())
    }

    /// The etag of the blob `snapshots/<commit>/<file>` points at, if it is the cache's
    /// own link (`../../blobs/<etag>`) and the blob is there. Nothing is followed.
    pub fn linked_etag(&self, commit: &Commit, file: &RepoPath) -> Option<Etag> {
        let rel = snapshot_rel(commit, file);
        let (parent, name) = split(&rel).ok()?;
        let dir = self.dir.open_dir(parent).ok()?;
        let target = dir.read_link(name).ok()?;
        let etag = Etag::parse(target.file_name()?.to_str()?).ok()?;
        (target == link_target(file, &etag) && self.has_blob(&etag)).then_some(etag)
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative symlink (made
    /// under a temporary name and renamed over the name: whatever was there, a planted
    /// link included, is replaced, never followed).
    pub fn link(
        &self,
        commit: &Commit,
        file: &RepoPath,
        etag: &Etag,
        dirs: &Dirs,
    ) -> std::io::Result<()> {
        let rel = snapshot_rel(commit, file);
        let (parent, name) = split(&rel)?;
        let dir = dirs.create_in(&self.dir, parent)?;
        let target = link_target(file, etag);
        match dir.kind(name)? {
            Some(Kind::Link) if dir.read_link(name)? == target => return Ok(()),
            Some(Kind::Dir) => {
                return Err(std::io::Error::other(format!(
                    "{} is a directory in the cache, where the file {file} belongs",
                    dir.display(name).display()
                )));
            }
            _ => {}
        }
        let tmp = crate::fsx::temp_name(&name.to_string_lossy());
        dir.symlink(&target, &tmp)?;
        dir.rename(&tmp, &dir, name).inspect_err(|_| {
            let _ = dir.remove_file(&tmp);
        })
    }
}

/// A blob's download in progress, `blobs/<etag>.incomplete`, made, appended to, read,
/// removed and renamed to `blobs/<etag>` only through the handle of `blobs/`.
pub struct Incomplete<'a> {
    blobs: &'a Dir,
    etag: String,
    name: String,
}

fn incomplete_name(etag: &Etag) -> String {
    format!("{etag}.incomplete")
}

impl<'a> Incomplete<'a> {
    pub fn new(blobs: &'a Dir, etag: &Etag) -> Self {
        Self {
            blobs,
            etag: etag.as_str().to_string(),
            name: incomplete_name(etag),
        }
    }

    /// Where it is, for messages.
    pub fn path(&self) -> PathBuf {
        self.blobs.display(&self.name)
    }

    /// How many bytes it holds: 0 when it is missing, or not a regular file of its own
    /// (a link or anything else planted there is removed, never followed).
    pub fn held(&self) -> u64 {
        match self.blobs.kind(&self.name) {
            Ok(Some(Kind::File)) => match self.read().and_then(|f| f.metadata()) {
                Ok(meta) => meta.len(),
                Err(_) => {
                    self.discard();
                    0
                }
            },
            Ok(Some(_)) => {
                self.discard();
                0
            }
            _ => 0,
        }
    }

    /// A new, empty file in its place (whatever was there is removed first, and the
    /// create refuses anything planted in between).
    pub fn create(&self) -> std::io::Result<std::fs::File> {
        match self.blobs.remove_file(&self.name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.blobs.create_new(&self.name, 0o644)
    }

    /// Opens it to append to: a regular file with no other hard link, not through a link
    /// (see [`Dir::open_append`]).
    pub fn append(&self) -> std::io::Result<std::fs::File> {
        self.blobs.open_append(&self.name)
    }

    /// Opens it for reading (see [`Dir::open_file`]).
    pub fn read(&self) -> std::io::Result<std::fs::File> {
        self.blobs.open_file(&self.name)
    }

    /// Removes it (a link there, not what it points to).
    pub fn discard(&self) {
        let _ = self.blobs.remove_file(&self.name);
    }

    /// Renames it to `blobs/<etag>` (verified by the caller) and syncs `blobs/`.
    pub fn publish(&self) -> std::io::Result<()> {
        self.blobs.rename(&self.name, self.blobs, &self.etag)?;
        self.blobs.sync()
    }
}

/// `snapshots/<commit>/<file>`, below the repo dir.
fn snapshot_rel(commit: &Commit, file: &RepoPath) -> PathBuf {
    Path::new("snapshots")
        .join(commit.as_str())
        .join(file.to_path())
}

/// The directory part and last name of a relative path built from checked names.
fn split(rel: &Path) -> std::io::Result<(&Path, &std::ffi::OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(std::io::Error::other(format!(
            "{} has no name",
            rel.display()
        ))),
    }
}

/// `snapshots/<commit>/a/b.txt` -> `../../../blobs/<etag>`: one `..` per level below the
/// repo dir.
fn link_target(file: &RepoPath, etag: &Etag) -> PathBuf {
    PathBuf::from("../".repeat(2 + file.depth()))
        .join("blobs")
        .join(etag.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsx::Unsafe;
    use std::io::Write;

    const C1: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

    fn world() -> (tempfile::TempDir, Layout, HubCache, RepoId) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("shared"));
        let cache = HubCache::of(&layout);
        (dir, layout, cache, RepoId::parse("acme/tiny").unwrap())
    }

    fn etag() -> Etag {
        Etag::parse(&"e1".repeat(20)).unwrap()
    }

    #[test]
    fn nested_files_link_relatively_to_their_blob() {
        let (_dir, layout, cache, repo) = world();
        assert_eq!(cache.root(), layout.hf_home().join("hub"));
        let commit = Commit::parse(C1).unwrap();
        let etag = etag();
        let file = RepoPath::parse("sub/dir/f.txt").unwrap();
        let dirs = Dirs::new();
        let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
        let blobs = repo_cache.create_blobs(&dirs).unwrap();
        blobs.write_new(etag.as_str(), b"x").unwrap();
        assert!(repo_cache.has_blob(&etag));
        repo_cache.link(&commit, &file, &etag, &dirs).unwrap();
        // Again: the same link is kept as it is.
        repo_cache.link(&commit, &file, &etag, &dirs).unwrap();
        let link = cache.snapshot_file(RepoKind::Model, &repo, &commit, &file);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            PathBuf::from(format!("../../../../blobs/{etag}"))
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "x");
        assert_eq!(repo_cache.linked_etag(&commit, &file), Some(etag));
        let main = Revision::main();
        repo_cache.write_ref(&main, &commit, &dirs).unwrap();
        dirs.keep();
        assert_eq!(
            std::fs::read(cache.repo_dir(RepoKind::Model, &repo).join("refs/main")).unwrap(),
            C1.as_bytes()
        );
        assert_eq!(
            cache
                .read_ref(RepoKind::Model, "acme/tiny", "main")
                .as_deref(),
            Some(C1)
        );
        assert_eq!(
            cache.cached_snapshot(RepoKind::Model, &repo, &main),
            Some(commit)
        );
        assert_eq!(cache.read_ref(RepoKind::Model, "acme/tiny", "../x"), None);
        assert_eq!(
            RepoId::parse("openai/gsm8k")
                .unwrap()
                .folder_name(RepoKind::Dataset),
            "datasets--openai--gsm8k"
        );
    }

    #[test]
    fn a_symlink_planted_in_the_cache_is_refused_and_never_followed() {
        let (dir, _layout, cache, repo) = world();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join(etag().as_str()), "theirs").unwrap();
        let repo_dir = cache.repo_dir(RepoKind::Model, &repo);
        std::fs::create_dir_all(&repo_dir).unwrap();
        std::os::unix::fs::symlink(&outside, repo_dir.join("blobs")).unwrap();
        let repo_cache = cache
            .create_repo(RepoKind::Model, &repo, &Dirs::new())
            .unwrap();
        let err = repo_cache.create_blobs(&Dirs::new()).unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::Link { .. })),
            "{err}"
        );
        assert!(!repo_cache.has_blob(&etag()));
        assert!(repo_cache.open_blob(&etag()).is_err());
        // A link planted for a snapshot file, pointing at a blob-named file elsewhere,
        // is not the cache's own.
        let commit = Commit::parse(C1).unwrap();
        let snap = repo_dir.join("snapshots").join(C1);
        std::fs::create_dir_all(&snap).unwrap();
        std::os::unix::fs::symlink(outside.join(etag().as_str()), snap.join("f")).unwrap();
        let file = RepoPath::parse("f").unwrap();
        assert_eq!(repo_cache.linked_etag(&commit, &file), None);
        // A planted refs/ link is not read through.
        std::os::unix::fs::symlink(&outside, repo_dir.join("refs")).unwrap();
        std::fs::write(outside.join("main"), C1).unwrap();
        assert_eq!(repo_cache.ref_commit(&Revision::main()), None);
        assert!(
            repo_cache
                .write_ref(&Revision::main(), &commit, &Dirs::new())
                .is_err()
        );
        assert_eq!(std::fs::read_to_string(outside.join("main")).unwrap(), C1);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 2);
    }

    #[test]
    fn a_failed_operation_removes_the_directories_it_made() {
        let (dir, layout, cache, repo) = world();
        std::fs::create_dir_all(layout.root()).unwrap();
        {
            let dirs = Dirs::new();
            let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
            repo_cache.create_blobs(&dirs).unwrap();
            assert!(
                cache
                    .repo_dir(RepoKind::Model, &repo)
                    .join("blobs")
                    .is_dir()
            );
        }
        assert_eq!(std::fs::read_dir(layout.root()).unwrap().count(), 0);
        drop(dir);
    }

    /// The repo's `blobs/` swapped for a link to elsewhere while its handle is held: the
    /// download's `.incomplete` is made, appended to, read and published in the real
    /// (moved) directory, and nothing appears outside.
    #[test]
    fn blobs_swapped_for_a_link_while_held_keep_the_download_inside() {
        let (dir, _layout, cache, repo) = world();
        let outside = dir.path().join("outside");
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(&outside).unwrap();
        let dirs = Dirs::new();
        let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
        let blobs = repo_cache.create_blobs(&dirs).unwrap();
        let at = cache.repo_dir(RepoKind::Model, &repo).join("blobs");
        std::fs::rename(&at, &moved).unwrap();
        std::os::unix::fs::symlink(&outside, &at).unwrap();
        let etag = etag();
        let partial = Incomplete::new(&blobs, &etag);
        assert_eq!(partial.held(), 0);
        partial.create().unwrap().write_all(b"ab").unwrap();
        partial.append().unwrap().write_all(b"cd").unwrap();
        assert_eq!(partial.held(), 4);
        partial.publish().unwrap();
        assert_eq!(std::fs::read(moved.join(etag.as_str())).unwrap(), b"abcd");
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 1);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert_eq!(partial.path(), at.join(format!("{etag}.incomplete")));
    }

    #[test]
    fn a_planted_incomplete_is_never_written_through() {
        let (dir, _layout, cache, repo) = world();
        let dirs = Dirs::new();
        let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
        let blobs = repo_cache.create_blobs(&dirs).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "do not touch").unwrap();
        let etag = etag();
        let partial = Incomplete::new(&blobs, &etag);
        let at = cache.incomplete(RepoKind::Model, &repo, &etag);
        // A link: not appended through, and removed when asked how much it holds.
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        let err = partial.append().unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::Link { .. })),
            "{err}"
        );
        assert_eq!(partial.held(), 0);
        assert!(std::fs::symlink_metadata(&at).is_err());
        // A hard link to someone's file: refused, and a new file replaces the name.
        std::fs::hard_link(&victim, &at).unwrap();
        let err = partial.append().unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::HardLink { .. })),
            "{err}"
        );
        partial.create().unwrap().write_all(b"mine").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "do not touch");
        assert_eq!(std::fs::read_to_string(&at).unwrap(), "mine");
    }
}
