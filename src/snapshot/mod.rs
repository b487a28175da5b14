//! Code snapshots: a source tree (verl) frozen into `common/code/<name>/<code_id>/`.
//!
//! `walk` decides what is copied, `hash` gives the content id, `publish` copies under a
//! temporary name and renames into place (a crash leaves nothing under a final name),
//! `manifest` records what is inside, `verify` re-hashes against it.

pub mod hash;
pub mod manifest;
pub mod publish;
pub mod pypi;
pub mod verify;
pub mod walk;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::exit::{Classify, Exit};
use crate::ui::Reporter;

pub use manifest::Manifest;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("source {0} does not exist")]
    SourceMissing(PathBuf),
    #[error("source {0} is not a directory")]
    SourceNotDir(PathBuf),
    #[error("symlink {link} points outside the source tree (to {target})")]
    LinkOutside { link: String, target: String },
    #[error(
        "invalid {what} {value:?}: only letters, digits, '.', '_' and '-', and not '.' or '..'"
    )]
    InvalidId { what: &'static str, value: String },
    #[error("invalid --exclude pattern {pattern:?}: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error(
        "snapshot {name}/{code_id} already exists with different content (tree {existing}, this source {new})"
    )]
    Conflict {
        name: String,
        code_id: String,
        existing: String,
        new: String,
    },
    #[error("no snapshot {0}")]
    NotFound(String),
    #[error("{} is {kind}: refusing to read it", path.display())]
    SpecialFile { path: PathBuf, kind: &'static str },
    #[error("source {} contains the shared storage ({}): a snapshot of it would copy the snapshots into themselves", tree.display(), shared.display())]
    SourceContainsShared { tree: PathBuf, shared: PathBuf },
    #[error("snapshot {id} is used by unfinished job(s): {jobs}")]
    InUse { id: String, jobs: String },
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Io { .. } => Exit::Failed,
            Error::Lock(e) => e.exit(),
            _ => Exit::Usage,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::LinkOutside { .. } => Some("pass --follow-links to copy what the link points to, or --exclude it".into()),
            Error::SpecialFile { .. } => Some("remove it from the tree, or --exclude it".into()),
            Error::SourceContainsShared { .. } => Some("snapshot the code's own directory".into()),
            Error::Conflict { .. } => Some("snapshots are immutable: choose another --code-id, or leave it out to derive one from the content".into()),
            Error::InUse { .. } => Some("wait for those jobs to finish, or pass --force".into()),
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => Some("the shared storage is not writable by this user".into()),
            Error::Io { source, .. } if source.raw_os_error() == Some(28) => Some("the disk is full; nothing was published".into()),
            _ => None,
        }
    }
}

pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Ids and names: `[A-Za-z0-9._-]+`, not `.` or `..` (they become directory names).
pub fn validate_id(what: &'static str, value: &str) -> Result<(), Error> {
    let ok = crate::config::jobspec::valid_id(value);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidId {
            what,
            value: value.to_string(),
        })
    }
}

pub struct SnapshotOptions {
    pub source: PathBuf,
    pub name: String,
    pub code_id: Option<String>,
    pub excludes: Vec<String>,
    pub follow_links: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotReport {
    pub code_id: String,
    pub name: String,
    pub path: PathBuf,
    pub files: usize,
    pub bytes: u64,
    pub tree_hash: String,
    pub git_commit: Option<String>,
    pub git_dirty: bool,
    /// False when an identical snapshot already existed and nothing was copied.
    pub created: bool,
    pub seconds: f64,
}

/// Snapshots `options.source` into `<code_root>/<name>/<code_id>/`.
pub fn snapshot(
    code_root: &Path,
    options: &SnapshotOptions,
    reporter: &dyn Reporter,
) -> Result<SnapshotReport, Error> {
    let started = std::time::Instant::now();
    validate_id("name", &options.name)?;
    if let Some(id) = &options.code_id {
        validate_id("code id", id)?;
    }
    let source = &options.source;
    match std::fs::metadata(source) {
        Err(_) => return Err(Error::SourceMissing(source.clone())),
        Ok(m) if !m.is_dir() => return Err(Error::SourceNotDir(source.clone())),
        Ok(_) => {}
    }
    let source = std::fs::canonicalize(source).map_err(io("cannot resolve", source))?;
    let shared = std::fs::canonicalize(code_root).ok().or_else(|| {
        code_root
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
    });
    if let Some(shared) = shared
        && shared.starts_with(&source)
    {
        return Err(Error::SourceContainsShared {
            tree: source,
            shared,
        });
    }

    let task = reporter.task("snapshot");
    task.update("listing files");
    let entries = walk::collect(&source, &options.excludes, options.follow_links)?;
    task.update(&format!("hashing {} files", entries.len()));
    let hashed = hash::hash_entries(&source, entries, &*task)?;
    let tree_hash = hash::tree_hash(&hashed);
    let git = walk::git_state(&source);
    let code_id = match &options.code_id {
        Some(id) => id.clone(),
        None => hash::derive_code_id(&tree_hash, git.as_ref()),
    };
    let dir = code_root.join(&options.name);
    let target = dir.join(&code_id);
    let files = hashed.iter().filter(|e| e.is_file()).count();
    let bytes = hashed.iter().map(|e| e.size).sum();
    let report = |created| SnapshotReport {
        code_id: code_id.clone(),
        name: options.name.clone(),
        path: target.clone(),
        files,
        bytes,
        tree_hash: tree_hash.clone(),
        git_commit: git.as_ref().map(|g| g.commit.clone()),
        git_dirty: git.as_ref().is_some_and(|g| g.dirty),
        created,
        seconds: started.elapsed().as_secs_f64(),
    };

    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    // One writer per snapshot id, on any host: a second one waits, then finds it published.
    let what = format!("snapshot {}/{code_id}", options.name);
    let _lock = crate::lock::acquire(
        &dir.join(format!(".lock-{code_id}")),
        &crate::lock::Acquire {
            what: &what,
            timeout: None,
        },
        |holder| reporter.note(&crate::lock::waiting_message(&what, holder)),
    )?;
    publish::remove_leftovers(&dir, &code_id);
    if target.exists() {
        let existing = Manifest::read(&target)?;
        if existing.tree_hash != tree_hash {
            task.fail("id taken");
            return Err(Error::Conflict {
                name: options.name.clone(),
                code_id,
                existing: existing.tree_hash,
                new: tree_hash,
            });
        }
        task.done(&format!("{code_id} unchanged ({files} files)"));
        return Ok(report(false));
    }
    let manifest = Manifest::new(
        &source,
        &code_id,
        &options.name,
        &tree_hash,
        git.as_ref(),
        &hashed,
    );
    publish::publish(&source, &dir, &code_id, &hashed, &manifest, &*task)?;
    task.done(&format!(
        "{code_id} ({files} files, {})",
        crate::ui::human_bytes(bytes)
    ));
    Ok(report(true))
}

#[derive(Debug, Clone, Serialize)]
pub struct ListedSnapshot {
    pub name: String,
    pub code_id: String,
    pub created: String,
    pub files: usize,
    pub bytes: u64,
    pub git_commit: Option<String>,
    pub git_dirty: bool,
}

/// Every published snapshot under `code_root`, by name then creation time.
pub fn list(code_root: &Path) -> Result<Vec<ListedSnapshot>, Error> {
    let mut out = Vec::new();
    let Ok(names) = std::fs::read_dir(code_root) else {
        return Ok(out);
    };
    for name in names.flatten() {
        let Ok(ids) = std::fs::read_dir(name.path()) else {
            continue;
        };
        // Dot entries are temporary copies and locks, never snapshots.
        for id in ids
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        {
            let Ok(manifest) = Manifest::read(&id.path()) else {
                continue;
            };
            out.push(ListedSnapshot {
                name: name.file_name().to_string_lossy().into_owned(),
                code_id: manifest.code_id.clone(),
                created: manifest.created.clone(),
                files: manifest.files.iter().filter(|f| f.sha256.is_some()).count(),
                bytes: manifest.files.iter().map(|f| f.size).sum(),
                git_commit: manifest.git_commit.clone(),
                git_dirty: manifest.git_dirty,
            });
        }
    }
    out.sort_by(|a, b| (&a.name, &a.created, &a.code_id).cmp(&(&b.name, &b.created, &b.code_id)));
    Ok(out)
}

/// The directory of snapshot `id` (`code_id`, or `name/code_id` when the id is ambiguous).
pub fn find(code_root: &Path, id: &str) -> Result<PathBuf, Error> {
    if let Some((name, code_id)) = id.split_once('/') {
        validate_id("name", name)?;
        validate_id("code id", code_id)?;
        let path = code_root.join(name).join(code_id);
        return if path.join(manifest::MANIFEST).is_file() {
            Ok(path)
        } else {
            Err(Error::NotFound(id.to_string()))
        };
    }
    validate_id("code id", id)?;
    let matches: Vec<PathBuf> = std::fs::read_dir(code_root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|name| name.path().join(id))
        .filter(|p| p.join(manifest::MANIFEST).is_file())
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::NotFound(id.to_string())),
        _ => Err(Error::InvalidId {
            what: "code id (it exists under several names; write name/code_id)",
            value: id.to_string(),
        }),
    }
}

/// Removes a snapshot, unless an unfinished job record under `jobs_root` names it.
pub fn remove(code_root: &Path, jobs_root: &Path, id: &str, force: bool) -> Result<PathBuf, Error> {
    let path = find(code_root, id)?;
    let code_id = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !force {
        let users = unfinished_jobs_using(jobs_root, &code_id);
        if !users.is_empty() {
            return Err(Error::InUse {
                id: id.to_string(),
                jobs: users.join(", "),
            });
        }
    }
    publish::remove_tree(&path)?;
    Ok(path)
}

/// Jobs whose record (`jobs/<id>/job.json`) names `code_id` and has not finished (an
/// unknown status counts as unfinished: the snapshot may still be in use).
/// A record that cannot be read at all may name it too, so it counts (saying so).
pub fn unfinished_jobs_using(jobs_root: &Path, code_id: &str) -> Vec<String> {
    let records = crate::records::Records::new(jobs_root);
    let mut users = Vec::new();
    for entry in std::fs::read_dir(jobs_root).into_iter().flatten().flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        if id.starts_with('.') || !entry.path().join("job.json").exists() {
            continue;
        }
        match records.read(&id) {
            Some(r) if r.code_id.as_deref() == Some(code_id) && !r.status.is_finished() => {
                users.push(id)
            }
            Some(_) => {}
            None => users.push(format!("{id} (unreadable record)")),
        }
    }
    users.sort();
    users
}

/// The tree hash `snapshot` would give `source` (nothing copied): for drift checks.
pub fn tree_hash_of(
    source: &Path,
    excludes: &[String],
    reporter: &dyn Reporter,
) -> Result<String, Error> {
    let source =
        std::fs::canonicalize(source).map_err(|_| Error::SourceMissing(source.to_path_buf()))?;
    let task = reporter.task("code");
    let entries = walk::collect(&source, excludes, false)?;
    let hashed = hash::hash_entries(&source, entries, &*task)?;
    task.done("hashed");
    Ok(hash::tree_hash(&hashed))
}
