//! The standard Hugging Face cache layout, which huggingface_hub and transformers read
//! offline:
//!
//! ```text
//! hub/{models|datasets}--{org}--{name}/blobs/<etag>
//! hub/{models|datasets}--{org}--{name}/snapshots/<commit>/<path>   relative symlink to the blob
//! hub/{models|datasets}--{org}--{name}/refs/<revision>             the commit, no trailing newline
//! ```

use std::path::{Path, PathBuf};

use super::hf::RepoKind;

#[derive(Debug, Clone)]
pub struct HubCache {
    root: PathBuf,
}

impl HubCache {
    /// `root` is `$HF_HOME/hub`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn folder_name(kind: RepoKind, repo: &str) -> String {
        format!("{}--{}", kind.plural(), repo.replace('/', "--"))
    }

    pub fn repo_dir(&self, kind: RepoKind, repo: &str) -> PathBuf {
        self.root.join(Self::folder_name(kind, repo))
    }

    pub fn blob(&self, kind: RepoKind, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(kind, repo).join("blobs").join(etag)
    }

    pub fn snapshot_dir(&self, kind: RepoKind, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(kind, repo).join("snapshots").join(commit)
    }

    pub fn read_ref(&self, kind: RepoKind, repo: &str, revision: &str) -> Option<String> {
        let text =
            std::fs::read_to_string(self.repo_dir(kind, repo).join("refs").join(revision)).ok()?;
        Some(text.trim().to_string()).filter(|c| !c.is_empty())
    }

    /// `refs/<revision>` = commit, without a trailing newline (as huggingface_hub writes it).
    pub fn write_ref(
        &self,
        kind: RepoKind,
        repo: &str,
        revision: &str,
        commit: &str,
    ) -> std::io::Result<()> {
        let path = self.repo_dir(kind, repo).join("refs").join(revision);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        crate::fsx::write_atomic(&path, commit.as_bytes())
    }

    /// The etag of the blob `snapshots/<commit>/<file>` points at, if it is whole.
    pub fn linked_etag(
        &self,
        kind: RepoKind,
        repo: &str,
        commit: &str,
        file: &str,
    ) -> Option<String> {
        let link = self.snapshot_dir(kind, repo, commit).join(file);
        let target = std::fs::read_link(&link).ok()?;
        // The blob must exist (not dangling) for the file to count as present.
        std::fs::metadata(&link).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative symlink.
    pub fn link(
        &self,
        kind: RepoKind,
        repo: &str,
        commit: &str,
        file: &str,
        etag: &str,
    ) -> std::io::Result<()> {
        let link = self.snapshot_dir(kind, repo, commit).join(file);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // snapshots/<commit>/a/b.txt -> ../../../blobs/<etag>: one `..` per level below the repo dir.
        let depth = 2 + Path::new(file).components().count() - 1;
        let target = PathBuf::from("../".repeat(depth)).join("blobs").join(etag);
        match std::fs::read_link(&link) {
            Ok(existing) if existing == target => return Ok(()),
            Ok(_) => std::fs::remove_file(&link)?,
            Err(_) if link.exists() => std::fs::remove_file(&link)?,
            Err(_) => {}
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
        std::fs::rename(&tmp, &link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_files_link_relatively_to_their_blob() {
        let dir = tempfile::tempdir().unwrap();
        let cache = HubCache::new(dir.path());
        let blob = cache.blob(RepoKind::Model, "acme/tiny", "e1");
        std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
        std::fs::write(&blob, "x").unwrap();
        cache
            .link(RepoKind::Model, "acme/tiny", "c1", "sub/dir/f.txt", "e1")
            .unwrap();
        let link = cache
            .snapshot_dir(RepoKind::Model, "acme/tiny", "c1")
            .join("sub/dir/f.txt");
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            PathBuf::from("../../../../blobs/e1")
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "x");
        assert_eq!(
            cache
                .linked_etag(RepoKind::Model, "acme/tiny", "c1", "sub/dir/f.txt")
                .as_deref(),
            Some("e1")
        );
        cache
            .write_ref(RepoKind::Model, "acme/tiny", "main", "c1")
            .unwrap();
        assert_eq!(
            std::fs::read(
                cache
                    .repo_dir(RepoKind::Model, "acme/tiny")
                    .join("refs/main")
            )
            .unwrap(),
            b"c1"
        );
        assert_eq!(
            HubCache::folder_name(RepoKind::Dataset, "openai/gsm8k"),
            "datasets--openai--gsm8k"
        );
    }
}
