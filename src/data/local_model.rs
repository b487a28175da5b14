//! A model from a local directory (a JobSpec's `model_from`, `argus prepare --model-from`)
//! into the shared HF cache, in exactly the layout a download produces, so a job loads
//! it by `model_id` like any hub model (huggingface_hub and transformers, offline).
//!
//! A local directory has no commit: its commit is derived from its content (the first 40
//! hex digits of the sha256 over every file's path and sha256), so the same files always
//! make the same snapshot and a changed file makes a new one, which a replay's lock sees.
//! Each blob is named by its sha256 (the hub's etag for LFS files), copied under a
//! temporary name, verified and renamed: a reader never finds a part of a file.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::download::CachedFile;
use super::hf_cache::{HubCache, Incomplete, RepoCache};
use super::{Error, ModelReport, Prepare};
use crate::fsx::Dirs;
use crate::hf::{Commit, Etag, ModelSpec, RepoKind, RepoPath};
use crate::ui::Reporter;

/// At most this many files: a model directory, not a tree of anything.
const MAX_FILES: usize = 10_000;

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io(crate::fsx::io_at(action, path)(source))
}

/// Regular files under `dir`, as repo paths (sorted). Symlinks, FIFOs and devices are
/// refused by name: nothing is followed out of the directory or blocked on.
fn files_of(dir: &Path) -> Result<Vec<(RepoPath, PathBuf)>, Error> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let entries = std::fs::read_dir(&current).map_err(|e| io_error("list", &current, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("list", &current, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| io_error("stat", &path, e))?;
            let name = entry.file_name();
            if name == ".git" {
                continue;
            }
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            if !kind.is_file() {
                return Err(Error::LocalModel(format!(
                    "{} is not a regular file (a symlink, FIFO or device): refusing to read it",
                    path.display()
                )));
            }
            let rel = path
                .strip_prefix(dir)
                .ok()
                .and_then(|r| r.to_str())
                .ok_or_else(|| {
                    Error::LocalModel(format!("{} has a name that is not UTF-8", path.display()))
                })?;
            let repo_path = RepoPath::parse(rel)
                .map_err(|e| Error::LocalModel(format!("{}: {e}", path.display())))?;
            out.push((repo_path, path));
            if out.len() > MAX_FILES {
                return Err(Error::LocalModel(format!(
                    "{} holds more than {MAX_FILES} files: not a model directory",
                    dir.display()
                )));
            }
        }
    }
    out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    Ok(out)
}

fn sha256_file(path: &Path) -> Result<String, Error> {
    let mut file = std::fs::File::open(path).map_err(|e| io_error("open", path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| io_error("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The commit a directory's content stands for.
fn content_commit(files: &[(RepoPath, String)]) -> String {
    let mut hasher = Sha256::new();
    for (path, sha) in files {
        hasher.update(path.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(sha.as_bytes());
        hasher.update([b'\n']);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..40]
        .to_string()
}

/// The commit a model directory's content stands for, and each file's sha256 (a model
/// given as a path is pinned by this in a run's lock).
pub fn content_of(dir: &Path) -> Result<(String, Vec<CachedFile>), Error> {
    let listed = files_of(dir)?;
    let mut hashed = Vec::with_capacity(listed.len());
    for (repo_path, path) in &listed {
        hashed.push((repo_path.clone(), sha256_file(path)?));
    }
    let files = hashed
        .iter()
        .map(|(p, sha)| CachedFile {
            path: p.to_string(),
            etag: sha.clone(),
        })
        .collect();
    Ok((content_commit(&hashed), files))
}

/// Puts the model in `dir` into the shared HF cache as `model` (`org/name`, revision
/// `main` unless one is given). Idempotent: blobs already there are not copied again.
pub fn import(
    p: &Prepare,
    model: &str,
    dir: &Path,
    reporter: &dyn Reporter,
) -> Result<ModelReport, Error> {
    let spec = ModelSpec::parse(model).map_err(|e| Error::LocalModel(format!("{model}: {e}")))?;
    let listed = listed_model(model, &spec, dir)?;
    let task = reporter.task(&format!("model {} from {}", spec.repo, dir.display()));
    let mut hashed = Vec::with_capacity(listed.len());
    for (repo_path, path) in &listed {
        hashed.push((repo_path.clone(), sha256_file(path)?));
    }
    let commit =
        Commit::parse(&content_commit(&hashed)).map_err(|e| Error::LocalModel(e.to_string()))?;
    let cache: HubCache = p.cache();
    let dirs = Dirs::new();
    let repo_cache = cache
        .create_repo(RepoKind::Model, &spec.repo, &dirs)
        .map_err(|e| io_error("create", &cache.repo_dir(RepoKind::Model, &spec.repo), e))?;
    let blobs = repo_cache
        .create_blobs(&dirs)
        .map_err(|e| io_error("create", &repo_cache.dir().display("blobs"), e))?;
    let mut files = Vec::new();
    let mut copied = 0usize;
    let mut bytes = 0u64;
    for ((repo_path, path), (_, sha)) in listed.iter().zip(&hashed) {
        let etag = Etag::parse(sha).map_err(|e| Error::LocalModel(e.to_string()))?;
        let announce = || task.update(&format!("copy {repo_path}"));
        if let Some(n) = copy_blob(&repo_cache, &blobs, &etag, (path, sha), announce)? {
            copied += 1;
            bytes += n;
        }
        repo_cache
            .link(&commit, repo_path, &etag, &dirs)
            .map_err(|e| io_error("link", path, e))?;
        files.push(CachedFile {
            path: repo_path.to_string(),
            etag: etag.to_string(),
        });
    }
    if let Some(before) = repo_cache.ref_commit(&spec.revision)
        && before != commit
    {
        reporter.note(&format!(
            "model {}: {} moved from {} to {} (the directory's content differs from what the cache held); jobs naming {} now get this content",
            spec.repo,
            spec.revision,
            before.short(),
            commit.short(),
            spec.repo
        ));
    }
    repo_cache
        .write_ref(&spec.revision, &commit, &dirs)
        .map_err(|e| io_error("write the ref of", dir, e))?;
    dirs.keep();
    let host_path = cache.snapshot_dir(RepoKind::Model, &spec.repo, &commit);
    let relative = host_path
        .strip_prefix(p.host.root())
        .unwrap_or(&host_path)
        .to_path_buf();
    task.done(&format!(
        "{} @ {} ({} files, {copied} copied)",
        spec.repo,
        commit.short(),
        files.len()
    ));
    Ok(ModelReport {
        repo: spec.repo.to_string(),
        revision: spec.revision.to_string(),
        commit: commit.to_string(),
        path: p.mount.root().join(relative).display().to_string(),
        host_path,
        files,
        files_downloaded: copied,
        bytes_downloaded: bytes,
    })
}

/// The files of the model directory `dir` (regular files only, with a config.json), for
/// `model` named without a revision: a directory has none, its commit is its content's
/// hash, under `main`.
fn listed_model(
    model: &str,
    spec: &ModelSpec,
    dir: &Path,
) -> Result<Vec<(RepoPath, PathBuf)>, Error> {
    if model.contains('@') {
        return Err(Error::LocalModel(format!(
            "{model}: a model from a directory is put under its name alone (refs/main -> the hash of its content); leave out @{}",
            spec.revision
        )));
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::LocalModel(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        Err(e) => return Err(Error::LocalModel(format!("{}: {e}", dir.display()))),
    }
    let listed = files_of(dir)?;
    if !listed.iter().any(|(p, _)| p.as_str() == "config.json") {
        return Err(Error::LocalModel(format!(
            "{} holds no config.json: not a Hugging Face model directory",
            dir.display()
        )));
    }
    Ok(listed)
}

/// Copies `path` into the cache as the blob `etag` (through its `.incomplete`, checked
/// against `sha` before the rename, all through the handle of `blobs/`) unless the blob
/// is there with those bytes. Returns the bytes copied, None when nothing was;
/// `announce` is called before a copy.
fn copy_blob(
    repo_cache: &RepoCache,
    blobs: &crate::fsx::Dir,
    etag: &Etag,
    (path, sha): (&Path, &str),
    announce: impl FnOnce(),
) -> Result<Option<u64>, Error> {
    let blob = blobs.display(etag.as_str());
    if let Ok(file) = repo_cache.open_blob(etag)
        && crate::digest::reader_sha256(&file).is_ok_and(|have| have == sha)
    {
        return Ok(None);
    }
    announce();
    let tmp = Incomplete::new(blobs, etag);
    let result = (|| {
        let mut from = std::fs::File::open(path).map_err(|e| io_error("open", path, e))?;
        let mut to = tmp
            .create()
            .map_err(|e| io_error("create", &tmp.path(), e))?;
        let n = std::io::copy(&mut from, &mut to).map_err(|e| io_error("copy", path, e))?;
        to.sync_all()
            .map_err(|e| io_error("write", &tmp.path(), e))?;
        drop(to);
        let copied = tmp.read().map_err(|e| io_error("read", &tmp.path(), e))?;
        if crate::digest::reader_sha256(&copied).map_err(|e| io_error("read", &tmp.path(), e))?
            != sha
        {
            return Err(Error::LocalModel(format!(
                "{} changed while it was copied",
                path.display()
            )));
        }
        tmp.publish().map_err(|e| io_error("rename", &blob, e))?;
        Ok(n)
    })();
    if result.is_err() {
        tmp.discard();
    }
    result.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/tokenizer.json"), "{}").unwrap();
        dir
    }

    #[test]
    fn the_commit_is_the_contents_hash_and_follows_every_byte() {
        let a = model_dir("{\"a\": 1}");
        let b = model_dir("{\"a\": 1}");
        let c = model_dir("{\"a\": 2}");
        let (ca, fa) = content_of(a.path()).unwrap();
        assert_eq!(ca.len(), 40);
        assert_eq!(ca, content_of(b.path()).unwrap().0);
        assert_ne!(ca, content_of(c.path()).unwrap().0);
        let paths: Vec<&str> = fa.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["config.json", "sub/tokenizer.json"]);
        assert_eq!(fa[0].etag.len(), 64);
    }

    #[test]
    fn a_symlink_or_fifo_in_the_directory_is_refused_by_name() {
        let a = model_dir("{}");
        std::os::unix::fs::symlink("/etc/passwd", a.path().join("leak.json")).unwrap();
        let err = content_of(a.path()).unwrap_err().to_string();
        assert!(
            err.contains("leak.json") && err.contains("not a regular file"),
            "{err}"
        );
    }
}
