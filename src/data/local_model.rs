//! A model from a local directory (a JobSpec's `model_from`, `argus prepare --model-from`)
//! into the shared HF cache, in exactly the layout a download produces, so a job loads
//! it by `model_id` like any hub model (huggingface_hub and transformers, offline).
//!
//! A local directory has no commit: its commit is derived from its content (the first 40
//! hex digits of the sha256 over every file's path and sha256), so the same files always
//! make the same snapshot and a changed file makes a new one, which a replay's lock sees.
//! Each blob is named by its sha256 (the hub's etag for LFS files), copied under a
//! temporary name, verified and renamed: a reader never finds a part of a file.

use std::io::Seek;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::download::CachedFile;
use super::hf_cache::{HubCache, Incomplete, RepoCache};
use super::{Error, ModelReport, Prepare};
use crate::fsx::{Dir, Dirs, Kind, Unsafe};
use crate::hf::{Commit, Etag, ModelSpec, RepoKind, RepoPath};
use crate::ui::Reporter;

/// At most this many files: a model directory, not a tree of anything.
const MAX_FILES: usize = 10_000;

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io(crate::fsx::io_at(action, path)(source))
}

/// The refusal of `path` (a link, FIFO or device; or a file with a second hard link,
/// which could be anyone's file), or the error opening it.
fn open_error(action: &'static str, path: &Path, source: std::io::Error) -> Error {
    match Unsafe::of(&source) {
        Some(Unsafe::Link { .. } | Unsafe::NotFile { .. } | Unsafe::NotDir { .. }) => {
            not_regular(path)
        }
        Some(Unsafe::HardLink { .. }) => Error::LocalModel(format!(
            "{} has a second hard link: it could be anyone's file, linked in by someone who cannot read it; refusing to read it",
            path.display()
        )),
        _ => io_error(action, path, source),
    }
}

fn not_regular(path: &Path) -> Error {
    Error::LocalModel(format!(
        "{} is not a regular file (a symlink, FIFO or device): refusing to read it",
        path.display()
    ))
}

/// A model directory held open, and the regular files below it as repo paths (sorted).
/// Every file is opened through `root` without following a link: the directory may be
/// written by others while argus (root) reads it.
struct Listing {
    root: Dir,
    files: Vec<RepoPath>,
}

impl Listing {
    /// Opens `file` (listed) for reading: a regular file of its own, reached and opened
    /// without following a link, never blocked on.
    fn open(&self, file: &RepoPath) -> Result<std::fs::File, Error> {
        self.root
            .open_file(file.to_path())
            .map_err(|e| open_error("open", &self.root.display(file.to_path()), e))
    }

    /// Opens every listed file once, as a copy will: each refusal (a second hard link, a
    /// file swapped for a link or FIFO since the listing) is found before anything is
    /// written.
    fn check_all(&self) -> Result<(), Error> {
        self.files
            .iter()
            .try_for_each(|file| self.open(file).map(drop))
    }

    /// Opens `file` and hashes it, returning the open file (at its end) and its sha256.
    fn hash(&self, file: &RepoPath) -> Result<(std::fs::File, String), Error> {
        let mut opened = self.open(file)?;
        let sha = crate::digest::reader_sha256(&mut opened)
            .map_err(|e| io_error("read", &self.root.display(file.to_path()), e))?;
        Ok((opened, sha))
    }
}

/// Regular files below `root`, as repo paths (sorted). Symlinks, FIFOs and devices are
/// refused by name: nothing is followed out of the directory or blocked on. Each
/// directory is opened from `root` one name at a time, refusing a link swapped in
/// meanwhile (and only one is held open at a time, however wide the tree).
fn files_of(root: Dir) -> Result<Listing, Error> {
    let mut files = Vec::new();
    // Directories still to list, as `a/b/` (empty for the root itself).
    let mut stack = vec![String::new()];
    while let Some(prefix) = stack.pop() {
        let shown = root.display(&prefix);
        let current = root
            .open_dir(&prefix)
            .map_err(|e| open_error("open", &shown, e))?;
        let entries = current.entries().map_err(|e| io_error("list", &shown, e))?;
        for (name, kind) in entries {
            if name == ".git" {
                continue;
            }
            let path = current.display(&name);
            let name = name.to_str().ok_or_else(|| {
                Error::LocalModel(format!("{} has a name that is not UTF-8", path.display()))
            })?;
            let rel = format!("{prefix}{name}");
            match kind {
                Kind::Dir => {
                    stack.push(format!("{rel}/"));
                    continue;
                }
                Kind::File => {}
                Kind::Link | Kind::Special => return Err(not_regular(&path)),
            }
            let repo_path = RepoPath::parse(&rel)
                .map_err(|e| Error::LocalModel(format!("{}: {e}", path.display())))?;
            files.push(repo_path);
            if files.len() > MAX_FILES {
                return Err(Error::LocalModel(format!(
                    "{} holds more than {MAX_FILES} files: not a model directory",
                    root.path().display()
                )));
            }
        }
    }
    files.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(Listing { root, files })
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
    let root = Dir::root(dir).map_err(|e| io_error("list", dir, e))?;
    let listed = files_of(root)?;
    let mut hashed = Vec::with_capacity(listed.files.len());
    for repo_path in &listed.files {
        hashed.push((repo_path.clone(), listed.hash(repo_path)?.1));
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

/// Everything about putting the model in `dir` into the cache as `model` that can be
/// checked before anything is written: the name (`org/name`, no `@rev`), a directory of
/// regular files of their own (no link, FIFO, device or second hard link anywhere in
/// it), a config.json. What [`import`] checks first, and `argus run` before it creates a
/// run: one check for both.
pub fn check(model: &str, dir: &Path) -> Result<(), Error> {
    let spec = ModelSpec::parse(model).map_err(|e| Error::LocalModel(format!("{model}: {e}")))?;
    listed_model(model, &spec, dir)?.check_all()
}

/// Puts the model in `dir` into the shared HF cache as `model` (`org/name`, revision
/// `main` unless one is given). Idempotent: blobs already there are not copied again.
///
/// Each file is opened once: hashed, then copied from the same open file (and the copy
/// verified against that hash), so the blob holds exactly the bytes the commit stands for.
pub fn import(
    p: &Prepare,
    model: &str,
    dir: &Path,
    reporter: &dyn Reporter,
) -> Result<ModelReport, Error> {
    let spec = ModelSpec::parse(model).map_err(|e| Error::LocalModel(format!("{model}: {e}")))?;
    let listed = listed_model(model, &spec, dir)?;
    // Every file is openable before the first blob is written.
    listed.check_all()?;
    let task = reporter.task(&format!("model {} from {}", spec.repo, dir.display()));
    let cache: HubCache = p.cache();
    let dirs = Dirs::new();
    let repo_cache = cache
        .create_repo(RepoKind::Model, &spec.repo, &dirs)
        .map_err(|e| io_error("create", &cache.repo_dir(RepoKind::Model, &spec.repo), e))?;
    let blobs = repo_cache
        .create_blobs(&dirs)
        .map_err(|e| io_error("create", &repo_cache.dir().display("blobs"), e))?;
    let mut hashed = Vec::with_capacity(listed.files.len());
    let mut copied = 0usize;
    let mut bytes = 0u64;
    for repo_path in &listed.files {
        let (mut file, sha) = listed.hash(repo_path)?;
        let etag = Etag::parse(&sha).map_err(|e| Error::LocalModel(e.to_string()))?;
        let shown = listed.root.display(repo_path.to_path());
        let announce = || task.update(&format!("copy {repo_path}"));
        if let Some(n) = copy_blob(&repo_cache, &blobs, &etag, (&mut file, &shown), announce)? {
            copied += 1;
            bytes += n;
        }
        hashed.push((repo_path.clone(), sha));
    }
    let commit =
        Commit::parse(&content_commit(&hashed)).map_err(|e| Error::LocalModel(e.to_string()))?;
    let mut files = Vec::new();
    for (repo_path, sha) in &hashed {
        let etag = Etag::parse(sha).map_err(|e| Error::LocalModel(e.to_string()))?;
        repo_cache
            .link(&commit, repo_path, &etag, &dirs)
            .map_err(|e| io_error("link", &listed.root.display(repo_path.to_path()), e))?;
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

/// The model directory `dir` held open with its files (regular files only, with a
/// config.json), for `model` named without a revision: a directory has none, its commit
/// is its content's hash, under `main`.
fn listed_model(model: &str, spec: &ModelSpec, dir: &Path) -> Result<Listing, Error> {
    if model.contains('@') {
        return Err(Error::LocalModel(format!(
            "{model}: a model from a directory is put under its name alone (refs/main -> the hash of its content); leave out @{}",
            spec.revision
        )));
    }
    // The directory the caller names is the caller's (links in its path followed); from
    // there everything goes through the handle.
    let root = Dir::root(dir).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTDIR) {
            Error::LocalModel(format!("{} is not a directory", dir.display()))
        } else {
            Error::LocalModel(format!("{}: {e}", dir.display()))
        }
    })?;
    let listed = files_of(root)?;
    if !listed.files.iter().any(|p| p.as_str() == "config.json") {
        return Err(Error::LocalModel(format!(
            "{} holds no config.json: not a Hugging Face model directory",
            dir.display()
        )));
    }
    Ok(listed)
}

/// Copies `file` (open, already hashed to the sha `etag` names; `shown` is its path, for
/// messages) into the cache as the blob `etag` (from its start, through its
/// `.incomplete`, checked against the hash before the rename, all through the handle of
/// `blobs/`) unless the blob is there with those bytes. Returns the bytes copied, None
/// when nothing was; `announce` is called before a copy.
fn copy_blob(
    repo_cache: &RepoCache,
    blobs: &Dir,
    etag: &Etag,
    (file, shown): (&mut std::fs::File, &Path),
    announce: impl FnOnce(),
) -> Result<Option<u64>, Error> {
    let sha = etag.as_str();
    let blob = blobs.display(sha);
    if let Ok(have) = repo_cache.open_blob(etag)
        && crate::digest::reader_sha256(&have).is_ok_and(|have| have == sha)
    {
        return Ok(None);
    }
    announce();
    let tmp = Incomplete::new(blobs, etag);
    let result = (|| {
        file.rewind().map_err(|e| io_error("read", shown, e))?;
        let mut to = tmp
            .create()
            .map_err(|e| io_error("create", &tmp.path(), e))?;
        let n = std::io::copy(file, &mut to).map_err(|e| io_error("copy", shown, e))?;
        to.sync_all()
            .map_err(|e| io_error("write", &tmp.path(), e))?;
        drop(to);
        let copied = tmp.read().map_err(|e| io_error("read", &tmp.path(), e))?;
        if crate::digest::reader_sha256(&copied).map_err(|e| io_error("read", &tmp.path(), e))?
            != sha
        {
            return Err(Error::LocalModel(format!(
                "{} changed while it was copied",
                shown.display()
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
    use std::path::PathBuf;

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

    /// A model directory and, beside it, a secret only root can read.
    fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let model = top.path().join("model");
        std::fs::create_dir_all(model.join("sub")).unwrap();
        std::fs::write(model.join("config.json"), "{}").unwrap();
        std::fs::write(model.join("sub/tokenizer.json"), "{}").unwrap();
        let secret = top.path().join("outside/shadow");
        std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
        std::fs::write(&secret, "root:SECRET").unwrap();
        (top, model, secret)
    }

    fn mkfifo(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// Runs `f` on another thread: a FIFO opened for reading would block it forever.
    fn without_hanging<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("blocked on a FIFO")
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
        let b = model_dir("{}");
        mkfifo(&b.path().join("sub/pipe"));
        let dir = b.path().to_path_buf();
        let err = without_hanging(move || content_of(&dir).unwrap_err().to_string());
        assert!(
            err.contains("sub/pipe") && err.contains("not a regular file"),
            "{err}"
        );
    }

    #[test]
    fn a_file_swapped_for_a_link_or_fifo_after_the_listing_is_refused_not_followed() {
        let (_top, model, secret) = world();
        let listed = files_of(Dir::root(&model).unwrap()).unwrap();
        let names: Vec<&str> = listed.files.iter().map(RepoPath::as_str).collect();
        assert_eq!(names, ["config.json", "sub/tokenizer.json"]);
        let config = RepoPath::parse("config.json").unwrap();
        let tokenizer = RepoPath::parse("sub/tokenizer.json").unwrap();
        // What another writer of the model directory does between the listing and the read.
        std::fs::remove_file(model.join("config.json")).unwrap();
        std::os::unix::fs::symlink(&secret, model.join("config.json")).unwrap();
        let err = listed.hash(&config).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("not a regular file"),
            "{err}"
        );
        // A directory on the way swapped for a link to the secret's.
        std::fs::rename(model.join("sub"), model.join("moved")).unwrap();
        std::os::unix::fs::symlink(secret.parent().unwrap(), model.join("sub")).unwrap();
        std::fs::copy(&secret, secret.with_file_name("tokenizer.json")).unwrap();
        let err = listed.hash(&tokenizer).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        // A FIFO: refused without blocking.
        std::fs::remove_file(model.join("config.json")).unwrap();
        mkfifo(&model.join("config.json"));
        let err = without_hanging(move || listed.hash(&config).unwrap_err().to_string());
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_file_hard_linked_in_from_outside_is_refused() {
        let (_top, model, secret) = world();
        std::fs::hard_link(&secret, model.join("leak.json")).unwrap();
        let err = content_of(&model).unwrap_err().to_string();
        assert!(
            err.contains("leak.json") && err.contains("second hard link"),
            "{err}"
        );
    }

    #[test]
    fn the_blob_holds_the_bytes_hashed_even_if_the_name_is_replaced_meanwhile() {
        let (top, model, secret) = world();
        let layout = crate::config::Layout::new(top.path().join("shared"));
        let cache = HubCache::of(&layout);
        let dirs = Dirs::new();
        let repo = crate::hf::RepoId::parse("acme/tiny").unwrap();
        let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
        let blobs = repo_cache.create_blobs(&dirs).unwrap();
        let listed = files_of(Dir::root(&model).unwrap()).unwrap();
        let config = RepoPath::parse("config.json").unwrap();
        let (mut file, sha) = listed.hash(&config).unwrap();
        // Swapped after the hash: the copy still comes from the file that was hashed.
        std::fs::remove_file(model.join("config.json")).unwrap();
        std::os::unix::fs::symlink(&secret, model.join("config.json")).unwrap();
        let etag = Etag::parse(&sha).unwrap();
        let shown = listed.root.display("config.json");
        let n = copy_blob(&repo_cache, &blobs, &etag, (&mut file, &shown), || {}).unwrap();
        assert_eq!(n, Some(2));
        assert_eq!(
            std::fs::read(blobs.display(etag.as_str())).unwrap(),
            b"{}",
            "the bytes hashed, not the secret"
        );
        // Again: the blob is there, nothing is copied.
        let n = copy_blob(&repo_cache, &blobs, &etag, (&mut file, &shown), || {}).unwrap();
        assert_eq!(n, None);
    }

    #[test]
    fn a_file_changed_in_place_after_the_hash_is_not_published() {
        let (top, model, _secret) = world();
        let layout = crate::config::Layout::new(top.path().join("shared"));
        let cache = HubCache::of(&layout);
        let dirs = Dirs::new();
        let repo = crate::hf::RepoId::parse("acme/tiny").unwrap();
        let repo_cache = cache.create_repo(RepoKind::Model, &repo, &dirs).unwrap();
        let blobs = repo_cache.create_blobs(&dirs).unwrap();
        let listed = files_of(Dir::root(&model).unwrap()).unwrap();
        let config = RepoPath::parse("config.json").unwrap();
        let (mut file, sha) = listed.hash(&config).unwrap();
        std::fs::write(model.join("config.json"), "{\"changed\": 1}").unwrap();
        let etag = Etag::parse(&sha).unwrap();
        let shown = listed.root.display("config.json");
        let err = copy_blob(&repo_cache, &blobs, &etag, (&mut file, &shown), || {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed while it was copied"), "{err}");
        assert_eq!(blobs.entries().unwrap(), []);
    }

    #[test]
    fn a_model_dir_that_is_not_a_directory_is_refused_without_opening_it() {
        let (top, _model, _secret) = world();
        let fifo = top.path().join("fifo");
        mkfifo(&fifo);
        let spec = ModelSpec::parse("acme/tiny").unwrap();
        let err = without_hanging(move || {
            listed_model("acme/tiny", &spec, &fifo)
                .err()
                .unwrap()
                .to_string()
        });
        assert!(err.contains("is not a directory"), "{err}");
    }

    #[test]
    fn an_import_puts_the_files_hashed_into_the_cache_once() {
        let (top, model, _secret) = world();
        let layout = crate::config::Layout::new(top.path().join("shared"));
        // import never asks the hub; the client is only built.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let p = Prepare {
            client: crate::data::HubClient::new("http://127.0.0.1:9", None),
            host: layout.clone(),
            mount: crate::config::ContainerLayout::in_containers("/mnt/shared"),
        };
        struct Quiet;
        impl crate::ui::Task for Quiet {
            fn update(&self, _: &str) {}
            fn done(&self, _: &str) {}
            fn fail(&self, _: &str) {}
        }
        impl Reporter for Quiet {
            fn task(&self, _: &str) -> Box<dyn crate::ui::Task> {
                Box::new(Quiet)
            }
        }
        let reporter = Quiet;
        let report = import(&p, "acme/tiny", &model, &reporter).unwrap();
        assert_eq!(report.commit, content_of(&model).unwrap().0);
        // Two files with the same bytes: one blob.
        assert_eq!((report.files.len(), report.files_downloaded), (2, 1));
        assert_eq!(
            std::fs::read(report.host_path.join("sub/tokenizer.json")).unwrap(),
            b"{}"
        );
        let again = import(&p, "acme/tiny", &model, &reporter).unwrap();
        assert_eq!((again.commit, again.files_downloaded), (report.commit, 0));
    }
}
