//! The standard Hugging Face cache layout, which huggingface_hub and transformers read
//! offline:
//!
//! ```text
//! hub/{models|datasets}--{org}--{name}/blobs/<etag>
//! hub/{models|datasets}--{org}--{name}/snapshots/<commit>/<path>   relative symlink to the blob
//! hub/{models|datasets}--{org}--{name}/refs/<revision>             the commit, no trailing newline
//! ```
//!
//! Every path is built from checked names ([`crate::hf`]), so it is the root
//! followed by plain components; before anything is written into a directory, the
//! directory is also resolved on disk and must still be under the (resolved) root, so a
//! symlink planted in the cache cannot redirect a write either.

use std::path::{Path, PathBuf};

use crate::fsx::Dirs;
use crate::hf::{Commit, Etag, RepoId, RepoKind, RepoPath, Revision, lexically_under};

#[derive(Debug, Clone)]
pub struct HubCache {
    root: PathBuf,
}

impl HubCache {
    /// `root` is `$HF_HOME/hub`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn repo_dir(&self, kind: RepoKind, repo: &RepoId) -> PathBuf {
        self.root.join(repo.folder_name(kind))
    }

    pub fn blob(&self, kind: RepoKind, repo: &RepoId, etag: &Etag) -> PathBuf {
        self.repo_dir(kind, repo).join("blobs").join(etag.as_str())
    }

    /// Where a blob is downloaded before it is verified: `blobs/<etag>.incomplete`.
    pub fn incomplete(&self, kind: RepoKind, repo: &RepoId, etag: &Etag) -> PathBuf {
        self.repo_dir(kind, repo)
            .join("blobs")
            .join(format!("{etag}.incomplete"))
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

    fn ref_file(&self, kind: RepoKind, repo: &RepoId, revision: &Revision) -> PathBuf {
        self.repo_dir(kind, repo).join(revision.ref_path())
    }

    /// The commit `refs/<revision>` holds, if it holds one.
    pub fn ref_commit(&self, kind: RepoKind, repo: &RepoId, revision: &Revision) -> Option<Commit> {
        let text = std::fs::read_to_string(self.ref_file(kind, repo, revision)).ok()?;
        Commit::parse(text.trim()).ok()
    }

    /// [`Self::ref_commit`] for names not yet checked (a lock file's): `None` when either
    /// name is not valid.
    pub fn read_ref(&self, kind: RepoKind, repo: &str, revision: &str) -> Option<String> {
        let repo = RepoId::parse(repo).ok()?;
        let revision = Revision::parse(revision).ok()?;
        self.ref_commit(kind, &repo, &revision)
            .map(|c| c.as_str().to_string())
    }

    /// `refs/<revision>` = commit, without a trailing newline (as huggingface_hub writes it).
    pub fn write_ref(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        revision: &Revision,
        commit: &Commit,
        dirs: &Dirs,
    ) -> std::io::Result<()> {
        let path = self.ref_file(kind, repo, revision);
        if let Some(parent) = path.parent() {
            self.create_dir(parent, dirs)?;
        }
        crate::fsx::write_atomic(&path, commit.as_str().as_bytes())
    }

    /// The etag of the blob `snapshots/<commit>/<file>` points at, if the blob is there.
    pub fn linked_etag(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        commit: &Commit,
        file: &RepoPath,
    ) -> Option<Etag> {
        let link = self.snapshot_file(kind, repo, commit, file);
        let target = std::fs::read_link(&link).ok()?;
        // The blob must exist (not dangling) for the file to count as present.
        std::fs::metadata(&link).ok()?.is_file().then_some(())?;
        let etag = Etag::parse(target.file_name()?.to_str()?).ok()?;
        (target == link_target(file, &etag)).then_some(etag)
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative symlink.
    pub fn link(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        commit: &Commit,
        file: &RepoPath,
        etag: &Etag,
        dirs: &Dirs,
    ) -> std::io::Result<()> {
        let link = self.snapshot_file(kind, repo, commit, file);
        if let Some(parent) = link.parent() {
            self.create_dir(parent, dirs)?;
        }
        let target = link_target(file, etag);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() && std::fs::read_link(&link)? == target => {
                return Ok(());
            }
            Ok(m) if m.is_dir() => {
                return Err(std::io::Error::other(format!(
                    "{} is a directory in the cache, where the file {file} belongs",
                    link.display()
                )));
            }
            _ => {}
        }
        let tmp = link.with_file_name(format!(
            ".{}.tmp-{}",
            link.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)?;
        std::fs::rename(&tmp, &link).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Creates `dir` (and its missing parents, recorded in `dirs`), then proves that it
    /// is under the cache root both as written and as resolved on disk.
    pub fn create_dir(&self, dir: &Path, dirs: &Dirs) -> std::io::Result<()> {
        if !lexically_under(&self.root, dir) {
            return Err(escapes(dir));
        }
        dirs.create_all(dir)?;
        let root = self.root.canonicalize()?;
        if !dir.canonicalize()?.starts_with(&root) {
            return Err(escapes(dir));
        }
        Ok(())
    }
}

fn escapes(dir: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "{} resolves outside the Hugging Face cache: refusing to write there",
        dir.display()
    ))
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

    const C1: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

    #[test]
    fn nested_files_link_relatively_to_their_blob() {
        let dir = tempfile::tempdir().unwrap();
        let cache = HubCache::new(dir.path().join("hub"));
        let repo = RepoId::parse("acme/tiny").unwrap();
        let commit = Commit::parse(C1).unwrap();
        let etag = Etag::parse(&"e1".repeat(20)).unwrap();
        let file = RepoPath::parse("sub/dir/f.txt").unwrap();
        let dirs = Dirs::new();
        let blob = cache.blob(RepoKind::Model, &repo, &etag);
        cache.create_dir(blob.parent().unwrap(), &dirs).unwrap();
        std::fs::write(&blob, "x").unwrap();
        cache
            .link(RepoKind::Model, &repo, &commit, &file, &etag, &dirs)
            .unwrap();
        let link = cache.snapshot_file(RepoKind::Model, &repo, &commit, &file);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            PathBuf::from(format!("../../../../blobs/{etag}"))
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "x");
        assert_eq!(
            cache.linked_etag(RepoKind::Model, &repo, &commit, &file),
            Some(etag)
        );
        let main = Revision::main();
        cache
            .write_ref(RepoKind::Model, &repo, &main, &commit, &dirs)
            .unwrap();
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
        assert_eq!(cache.read_ref(RepoKind::Model, "acme/tiny", "../x"), None);
        assert_eq!(
            RepoId::parse("openai/gsm8k")
                .unwrap()
                .folder_name(RepoKind::Dataset),
            "datasets--openai--gsm8k"
        );
    }

    #[test]
    fn a_symlink_planted_in_the_cache_cannot_redirect_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let cache = HubCache::new(dir.path().join("hub"));
        let repo = RepoId::parse("acme/tiny").unwrap();
        std::fs::create_dir_all(cache.repo_dir(RepoKind::Model, &repo)).unwrap();
        std::os::unix::fs::symlink(
            &outside,
            cache.repo_dir(RepoKind::Model, &repo).join("blobs"),
        )
        .unwrap();
        let etag = Etag::parse(&"e1".repeat(20)).unwrap();
        let blobs = cache.blob(RepoKind::Model, &repo, &etag);
        let err = cache
            .create_dir(blobs.parent().unwrap(), &Dirs::new())
            .unwrap_err();
        assert!(err.to_string().contains("outside the Hugging Face cache"));
    }

    #[test]
    fn a_failed_operation_removes_the_directories_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let cache = HubCache::new(dir.path().join("hub"));
        let repo = RepoId::parse("acme/tiny").unwrap();
        {
            let dirs = Dirs::new();
            let deep = cache.repo_dir(RepoKind::Model, &repo).join("blobs");
            cache.create_dir(&deep, &dirs).unwrap();
            assert!(deep.is_dir());
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
