//! Code snapshots: a source tree (verl) frozen into `common/code/<name>/<code_id>/`.
//!
//! `walk` decides what is copied, `hash` gives the content id, `publish` copies under a
//! temporary name and renames into place (a crash leaves nothing under a final name),
//! `manifest` records what is inside, `verify` re-hashes against it.
//!
//! A snapshot is what its id says: every file is read through one descriptor whose
//! metadata must not move, and copied from the very bytes it is hashed from, so a file
//! changing underneath fails the snapshot instead of publishing bytes the manifest does
//! not describe; an existing snapshot is reused only after it verifies against its
//! manifest, and the manifest against its tree hash. Names are kept exactly (one that is
//! not UTF-8 is refused), permission bits are kept, never widened, and are part of the
//! id. From `common/` down nothing on the storage is followed: a link planted there is
//! refused ([`crate::fsx::under`]) for writes and reads alike.

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
    #[error(
        "{path} has a name that is not UTF-8: a snapshot keeps every name exactly, and its manifest holds UTF-8 names only"
    )]
    NonUtf8Name { path: String },
    #[error("{path:?} would hold two entries of the tree ({} and {})", first.display(), second.display())]
    DuplicatePath {
        path: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("{} changed while it was being snapshotted: its bytes would not be the ones hashed", path.display())]
    Changed { path: PathBuf },
    #[error("snapshot {id} exists but does not match its manifest ({what}): it cannot be reused")]
    Corrupt { id: String, what: String },
    #[error(transparent)]
    Unsafe(#[from] crate::fsx::Unsafe),
    #[error("source {} contains the shared storage ({}): a snapshot of it would copy the snapshots into themselves", tree.display(), shared.display())]
    SourceContainsShared { tree: PathBuf, shared: PathBuf },
    #[error("snapshot {id} is used by unfinished job(s): {jobs}")]
    InUse { id: String, jobs: String },
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error(transparent)]
    Io(#[from] crate::fsx::IoAt),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Io(_) | Error::Changed { .. } | Error::Corrupt { .. } => Exit::Failed,
            Error::Lock(e) => e.exit(),
            _ => Exit::Usage,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::LinkOutside { .. } => Some("pass --follow-links to copy what the link points to, or --exclude it".into()),
            Error::SpecialFile { .. } => Some("remove it from the tree, or --exclude it".into()),
            Error::NonUtf8Name { .. } => Some("rename it, or --exclude it".into()),
            Error::DuplicatePath { .. } => Some("--exclude one of them".into()),
            Error::Changed { .. } => Some("something is still writing to the source tree: let it finish (or --exclude that file) and snapshot again; nothing was published".into()),
            Error::Corrupt { id, .. } => Some(format!("`argus snapshot verify {id}` lists the differences; remove it with `argus snapshot rm {id}` and snapshot again")),
            Error::Unsafe(_) => Some("check what stands there and remove it, then run argus again".into()),
            Error::SourceContainsShared { .. } => Some("snapshot the code's own directory".into()),
            Error::Conflict { .. } => Some("snapshots are immutable: choose another --code-id, or leave it out to derive one from the content".into()),
            Error::InUse { .. } => Some("wait for those jobs to finish, or pass --force".into()),
            Error::Io(e) if e.source.kind() == std::io::ErrorKind::PermissionDenied => Some("the shared storage is not writable by this user".into()),
            Error::Io(e) if e.source.raw_os_error() == Some(28) => Some("the disk is full; nothing was published".into()),
            _ => None,
        }
    }
}

pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source: std::io::Error| {
        // A refusal of `fsx` (a planted link) is its own error, not a failed read.
        let source = if source
            .get_ref()
            .is_some_and(|e| e.is::<crate::fsx::Unsafe>())
        {
            match source
                .into_inner()
                .map(|e| e.downcast::<crate::fsx::Unsafe>())
            {
                Some(Ok(refusal)) => return Error::Unsafe(*refusal),
                Some(Err(other)) => std::io::Error::other(other),
                None => std::io::Error::other("unknown error"),
            }
        } else {
            source
        };
        Error::Io(crate::fsx::io_at(action, path)(source))
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

/// Where the code root sits: the storage root (the caller's, a profile's mount, which may
/// itself be a link) and the path from it to the code root, which others can write into
/// and so is checked without following links. Every caller passes `<root>/common/code`.
fn anchor(code_root: &Path) -> (PathBuf, PathBuf) {
    if code_root.ends_with(CODE_DIR)
        && let Some(root) = code_root.parent().and_then(Path::parent)
    {
        return (root.to_path_buf(), PathBuf::from(CODE_DIR));
    }
    (code_root.to_path_buf(), PathBuf::new())
}

/// The code root's directory layout, relative to the storage root.
const CODE_DIR: &str = "common/code";

/// `code_root/rel`, refused ([`Error::Unsafe`]) if a link or a non-directory stands
/// anywhere from `common/` down.
fn below(code_root: &Path, rel: impl AsRef<Path>) -> Result<PathBuf, Error> {
    let (root, base) = anchor(code_root);
    let rel = base.join(rel);
    crate::fsx::under(&root, &rel).map_err(io("cannot read", &root.join(&rel)))
}

/// `path` made absolute with its links resolved as far as it exists, the rest (which
/// cannot hold a link, since it does not exist) appended as written.
fn resolve_existing(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut missing = Vec::new();
    let mut cursor = absolute.as_path();
    loop {
        if let Ok(mut resolved) = std::fs::canonicalize(cursor) {
            resolved.extend(missing.iter().rev());
            return resolved;
        }
        match (cursor.parent(), cursor.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                cursor = parent;
            }
            _ => return absolute,
        }
    }
}

/// Snapshots `options.source` into `<code_root>/<name>/<code_id>/`.
pub fn snapshot(
    code_root: &Path,
    options: &SnapshotOptions,
    reporter: &dyn Reporter,
) -> Result<SnapshotReport, Error> {
    let started = std::time::Instant::now();
    let source = check_source(code_root, options)?;
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
    let files = hashed.iter().filter(|e| e.is_file()).count();
    let bytes = hashed.iter().map(|e| e.size).sum();
    let report = |created, target: PathBuf| SnapshotReport {
        code_id: code_id.clone(),
        name: options.name.clone(),
        path: target,
        files,
        bytes,
        tree_hash: tree_hash.clone(),
        git_commit: git.as_ref().map(|g| g.commit.clone()),
        git_dirty: git.as_ref().is_some_and(|g| g.dirty),
        created,
        seconds: started.elapsed().as_secs_f64(),
    };

    let (root, base) = anchor(code_root);
    let family = base.join(&options.name);
    // What this run creates of `common/code/<name>` is taken away again if it fails.
    let made = Made::new(&root, &family);
    // The storage root is the caller's (a profile's mount, made if missing); from
    // `common/` down nothing is followed.
    std::fs::create_dir_all(&root).map_err(io("cannot create", &root))?;
    let dir = crate::fsx::create_dirs_under(&root, &family)
        .map_err(io("cannot create", &root.join(&family)))?;
    // One writer per snapshot id, on any host: a second one waits, then finds it published.
    let what = format!("snapshot {}/{code_id}", options.name);
    let lock = crate::lock::acquire_under(
        &root,
        &family.join(format!(".lock-{code_id}")),
        &crate::lock::Acquire {
            what: &what,
            timeout: None,
        },
        |holder| reporter.note(&crate::lock::waiting_message(&what, holder)),
    )?;
    publish::remove_leftovers(&dir, &code_id);
    let target = crate::fsx::under(&root, family.join(&code_id))
        .map_err(io("cannot read", &dir.join(&code_id)))?;
    if already_published(&target)? {
        made.keep();
        reuse(&target, &options.name, &code_id, &tree_hash, &*task)?;
        task.done(&format!("{code_id} unchanged ({files} files)"));
        return Ok(report(false, target));
    }
    let manifest = Manifest::new(
        &source,
        &code_id,
        &options.name,
        &tree_hash,
        git.as_ref(),
        &hashed,
    );
    crate::testpoint::reach("snapshot:before-copy");
    publish::publish(&dir, &code_id, &hashed, &manifest, &*task)?;
    made.keep();
    drop(lock);
    task.done(&format!(
        "{code_id} ({files} files, {})",
        crate::ui::human_bytes(bytes)
    ));
    Ok(report(true, target))
}

/// The options' names checked and the source tree resolved: a directory that does not
/// hold the snapshots' own storage, with no link planted where the snapshot goes.
fn check_source(code_root: &Path, options: &SnapshotOptions) -> Result<PathBuf, Error> {
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
    // Where the snapshots will be, whether or not the storage has a `common/` yet.
    if resolve_existing(code_root).starts_with(&source) {
        return Err(Error::SourceContainsShared {
            tree: source,
            shared: resolve_existing(&anchor(code_root).0),
        });
    }
    // A planted link is refused before the long walk (and again, race-free, below).
    if let Err(e @ Error::Unsafe(_)) = below(code_root, &options.name) {
        return Err(e);
    }
    Ok(source)
}

/// Whether the snapshot is already published at `target` (a directory; anything else
/// there is refused).
fn already_published(target: &Path) -> Result<bool, Error> {
    match std::fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(crate::fsx::Unsafe::NotDir {
            path: target.to_path_buf(),
        }
        .into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io("cannot read", target)(e)),
    }
}

/// An existing snapshot is reused only if it holds the same tree and is what its
/// manifest (and so its id) says.
fn reuse(
    target: &Path,
    name: &str,
    code_id: &str,
    tree_hash: &str,
    task: &dyn crate::ui::Task,
) -> Result<(), Error> {
    let manifest = Manifest::read(target)?;
    if manifest.tree_hash != tree_hash {
        task.fail("id taken");
        return Err(Error::Conflict {
            name: name.to_string(),
            code_id: code_id.to_string(),
            existing: manifest.tree_hash,
            new: tree_hash.to_string(),
        });
    }
    task.update("checking the existing snapshot");
    let check = verify::verify(target)?;
    if !check.ok() {
        task.fail("damaged");
        return Err(Error::Corrupt {
            id: format!("{name}/{code_id}"),
            what: check.summary(),
        });
    }
    Ok(())
}

/// The directories of `root/rel` (and of `root` itself) that do not exist yet: removed again (if still empty) when
/// dropped, unless kept.
struct Made {
    dirs: Vec<PathBuf>,
    keep: std::cell::Cell<bool>,
}

impl Made {
    fn new(root: &Path, rel: &Path) -> Self {
        let mut dirs: Vec<PathBuf> = root
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
            .map(Path::to_path_buf)
            .collect();
        dirs.reverse();
        let mut path = root.to_path_buf();
        for name in rel.components() {
            path.push(name);
            if std::fs::symlink_metadata(&path).is_err() {
                dirs.push(path.clone());
            }
        }
        Made {
            dirs,
            keep: std::cell::Cell::new(false),
        }
    }

    fn keep(&self) {
        self.keep.set(true);
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if !self.keep.get() {
            for dir in self.dirs.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
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

/// The entries of directory `dir`; a link among them is refused, never followed.
fn real_dirs_in(dir: &Path) -> Result<Vec<std::fs::DirEntry>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("cannot read", dir))? {
        let entry = entry.map_err(io("cannot read", dir))?;
        let kind = entry
            .file_type()
            .map_err(io("cannot read", &entry.path()))?;
        if kind.is_symlink() {
            return Err(crate::fsx::Unsafe::Link { path: entry.path() }.into());
        }
        if kind.is_dir() {
            out.push(entry);
        }
    }
    Ok(out)
}

/// Every published snapshot under `code_root`, by name then creation time.
pub fn list(code_root: &Path) -> Result<Vec<ListedSnapshot>, Error> {
    let mut out = Vec::new();
    let code = below(code_root, "")?;
    if std::fs::symlink_metadata(&code).is_err() {
        return Ok(out);
    }
    for name in real_dirs_in(&code)? {
        // Dot entries are temporary copies and locks, never snapshots.
        for id in real_dirs_in(&name.path())?
            .into_iter()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        {
            let manifest = match Manifest::read(&id.path()) {
                Ok(m) => m,
                Err(e @ Error::Unsafe(_)) => return Err(e),
                Err(_) => continue,
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

/// `code_root/<name>/<code_id>` if it holds a snapshot (a manifest), every component
/// checked not to be a link.
fn published(
    code_root: &Path,
    name: &std::ffi::OsStr,
    code_id: &str,
) -> Result<Option<PathBuf>, Error> {
    let rel = Path::new(name).join(code_id);
    let manifest = below(code_root, rel.join(manifest::MANIFEST))?;
    Ok(std::fs::symlink_metadata(manifest)
        .is_ok_and(|m| m.is_file())
        .then(|| code_root.join(rel)))
}

/// The directory of snapshot `id` (`code_id`, or `name/code_id` when the id is ambiguous).
pub fn find(code_root: &Path, id: &str) -> Result<PathBuf, Error> {
    if let Some((name, code_id)) = id.split_once('/') {
        validate_id("name", name)?;
        validate_id("code id", code_id)?;
        return published(code_root, name.as_ref(), code_id)?
            .ok_or_else(|| Error::NotFound(id.to_string()));
    }
    validate_id("code id", id)?;
    let code = below(code_root, "")?;
    let mut matches = Vec::new();
    if std::fs::symlink_metadata(&code).is_ok() {
        for name in real_dirs_in(&code)? {
            matches.extend(published(code_root, &name.file_name(), id)?);
        }
    }
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
    let entries = match records.entries() {
        Ok(entries) => entries,
        // `jobs/` itself unusable (a planted link): nothing proves the snapshot unused.
        Err(e) => return vec![format!("jobs/ ({})", crate::exit::one_line(&e))],
    };
    let mut users: Vec<String> = entries
        .into_iter()
        .filter_map(|listed| match listed {
            crate::records::Listed::Record(r)
                if r.code_id.as_deref() == Some(code_id) && !r.status.is_finished() =>
            {
                Some(r.submission_id.clone())
            }
            crate::records::Listed::Record(_) => None,
            crate::records::Listed::Unreadable { id, .. } => {
                Some(format!("{id} (unreadable record)"))
            }
        })
        .collect();
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

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::ui::Task;

    struct Quiet;

    impl Reporter for Quiet {
        fn task(&self, _: &str) -> Box<dyn Task> {
            Box::new(Quiet)
        }
    }

    impl Task for Quiet {
        fn update(&self, _: &str) {}
        fn done(&self, _: &str) {}
        fn fail(&self, _: &str) {}
    }

    fn quiet() -> Quiet {
        Quiet
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn options(source: &Path) -> SnapshotOptions {
        SnapshotOptions {
            source: source.to_path_buf(),
            name: "verl".into(),
            code_id: Some("c1".into()),
            excludes: Vec::new(),
            follow_links: false,
        }
    }

    /// A source tree and a storage root beside it, `common/code` not made yet.
    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        write(&src.join("pkg/model.py"), "W = 1\n");
        write(&src.join("run.sh"), "#!/bin/sh\n");
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let code_root = dir.path().join("shared/common/code");
        (dir, src, code_root)
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn a_file_changed_after_the_walk_is_never_hashed() {
        let (_dir, src, _) = setup();
        let entries = walk::collect(&src, &[], false).unwrap();
        write(&src.join("pkg/model.py"), "W = 1\nX = 2\n");
        let err = hash::hash_entries(&src, entries, &*quiet().task("t")).unwrap_err();
        assert!(
            matches!(&err, Error::Changed { path } if path.ends_with("pkg/model.py")),
            "{err}"
        );
        assert_eq!(err.exit(), Exit::Failed);
    }

    #[test]
    fn a_file_changed_between_hash_and_copy_fails_the_copy_and_publishes_nothing() {
        let (_dir, src, code_root) = setup();
        let entries = walk::collect(&src, &[], false).unwrap();
        let hashed = hash::hash_entries(&src, entries, &*quiet().task("t")).unwrap();
        let tree = hash::tree_hash(&hashed);
        let manifest = Manifest::new(&src, "c1", "verl", &tree, None, &hashed);
        // Same size, other bytes, and the stamp taken again: only the digest of the bytes
        // written can tell.
        let path = src.join("pkg/model.py");
        std::fs::write(&path, "W = 9\n").unwrap();
        let dir = code_root.join("verl");
        std::fs::create_dir_all(&dir).unwrap();
        let mut stale = hashed.clone();
        for entry in &mut stale {
            if entry.rel == "pkg/model.py" {
                entry.stamp = walk::Stamp::of(&std::fs::metadata(&path).unwrap());
            }
        }
        let err = publish::publish(&dir, "c1", &stale, &manifest, &*quiet().task("t")).unwrap_err();
        assert!(
            matches!(&err, Error::Changed { path } if path.ends_with("pkg/model.py")),
            "{err}"
        );
        assert!(
            names_in(&dir).is_empty(),
            "no snapshot, no temp: {:?}",
            names_in(&dir)
        );
    }

    #[test]
    fn names_that_are_not_utf8_are_refused_not_renamed() {
        let (dir, src, code_root) = setup();
        for name in [b"a\xff.py".as_slice(), b"a\xfe.py"] {
            let path = src.join(std::ffi::OsStr::from_bytes(name));
            std::fs::write(path, "x").unwrap();
        }
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(
            matches!(&err, Error::NonUtf8Name { path } if path.contains(r"a\xFE.py") || path.contains(r"a\xFF.py")),
            "{err}"
        );
        assert_eq!(err.exit(), Exit::Usage);
        assert!(!dir.path().join("shared").exists(), "nothing written");
        // Excluded, they are no obstacle.
        let mut excluded = options(&src);
        excluded.excludes = vec!["a*.py".into()];
        snapshot(&code_root, &excluded, &quiet()).unwrap();
    }

    #[test]
    fn modes_are_kept_never_widened_and_are_part_of_the_id() {
        let (_dir, src, code_root) = setup();
        let secret = src.join("pkg/secret.py");
        write(&secret, "KEY = 1\n");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let private = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let mode = |rel: &str| {
            std::fs::symlink_metadata(private.path.join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("pkg/secret.py"), 0o400, "not world-readable");
        assert_eq!(mode("run.sh"), 0o555, "executable kept");
        assert_eq!(mode("pkg/model.py"), 0o444);
        let manifest = Manifest::read(&private.path).unwrap();
        let record = manifest
            .files
            .iter()
            .find(|f| f.path == "pkg/secret.py")
            .unwrap();
        assert_eq!(record.mode, Some(0o400));
        assert!(verify::verify(&private.path).unwrap().ok());

        // The same bytes readable by all: another snapshot, not the private one reused.
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut derived = options(&src);
        derived.code_id = None;
        let open = snapshot(&code_root, &derived, &quiet()).unwrap();
        assert_ne!(open.tree_hash, private.tree_hash);
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{err}");
    }

    #[test]
    fn ids_of_snapshots_made_before_modes_were_kept_are_unchanged() {
        let record = |mode, executable| manifest::FileRecord {
            path: "a.py".into(),
            size: 1,
            executable,
            mode,
            sha256: Some("00".into()),
            link: None,
        };
        for executable in [false, true] {
            let new = if executable { 0o555 } else { 0o444 };
            assert_eq!(
                hash::records_tree_hash(&[record(None, executable)]),
                hash::records_tree_hash(&[record(Some(new), executable)]),
            );
        }
        // The encoding of the old ones, spelled out.
        assert_eq!(
            hash::records_tree_hash(&[record(Some(0o555), true)]),
            crate::digest::sha256_hex(b"x\x0000\x00a.py\n")
        );
    }

    #[test]
    fn the_shared_root_guard_holds_on_a_fresh_storage() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        write(&src.join("a.py"), "A = 1\n");
        for made in [false, true] {
            // The storage inside the tree: not there at all, then there but empty.
            let shared = src.join("shared");
            if made {
                std::fs::create_dir(&shared).unwrap();
            }
            let err = snapshot(&shared.join("common/code"), &options(&src), &quiet()).unwrap_err();
            assert!(matches!(err, Error::SourceContainsShared { .. }), "{err}");
            assert_eq!(err.exit(), Exit::Usage);
            assert_eq!(shared.exists(), made);
            assert!(!shared.join("common").exists(), "nothing written");
        }
    }

    #[test]
    fn links_planted_at_common_code_are_refused_for_writes_and_reads() {
        let (dir, src, code_root) = setup();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(&code_root).unwrap();
        // common/code/verl planted as a link.
        std::os::unix::fs::symlink(&outside, code_root.join("verl")).unwrap();
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(
            matches!(&err, Error::Unsafe(crate::fsx::Unsafe::Link { path }) if *path == code_root.join("verl")),
            "{err}"
        );
        assert_eq!(err.exit(), Exit::Usage);
        assert!(names_in(&outside).is_empty(), "nothing written outside");

        // A snapshot behind the link is not read either.
        std::fs::remove_file(code_root.join("verl")).unwrap();
        let real = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        std::fs::rename(code_root.join("verl"), outside.join("verl")).unwrap();
        std::os::unix::fs::symlink(outside.join("verl"), code_root.join("verl")).unwrap();
        for result in [
            find(&code_root, "c1").map(drop),
            find(&code_root, "verl/c1").map(drop),
            list(&code_root).map(drop),
            snapshot(&code_root, &options(&src), &quiet()).map(drop),
        ] {
            assert!(matches!(result, Err(Error::Unsafe(_))), "{result:?}");
        }

        // common/code itself a link.
        std::fs::remove_file(code_root.join("verl")).unwrap();
        std::fs::remove_dir(&code_root).unwrap();
        std::os::unix::fs::symlink(&outside, &code_root).unwrap();
        for result in [
            find(&code_root, "c1").map(drop),
            list(&code_root).map(drop),
            snapshot(&code_root, &options(&src), &quiet()).map(drop),
        ] {
            assert!(matches!(result, Err(Error::Unsafe(_))), "{result:?}");
        }
        // The snapshot's id directory, or its manifest, a link: refused too.
        std::fs::remove_file(&code_root).unwrap();
        std::fs::create_dir_all(code_root.join("verl")).unwrap();
        std::os::unix::fs::symlink(outside.join("verl/c1"), code_root.join("verl/c1")).unwrap();
        for result in [
            find(&code_root, "c1").map(drop),
            snapshot(&code_root, &options(&src), &quiet()).map(drop),
        ] {
            assert!(matches!(result, Err(Error::Unsafe(_))), "{result:?}");
        }
        assert_eq!(real.path, code_root.join("verl/c1"));
    }

    #[test]
    fn an_existing_snapshot_that_differs_from_its_manifest_is_not_reused() {
        let (_dir, src, code_root) = setup();
        let first = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let model = first.path.join("pkg/model.py");
        std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&model, "W = 7\n").unwrap();
        std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o444)).unwrap();
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, .. } if what.contains("pkg/model.py")),
            "{err}"
        );
        assert_eq!(err.exit(), Exit::Failed);

        // The manifest edited to agree with the new bytes: it no longer gives its own
        // tree hash (and so its id), and is not trusted either.
        let mut manifest = Manifest::read(&first.path).unwrap();
        for f in &mut manifest.files {
            if f.path == "pkg/model.py" {
                f.sha256 = Some(crate::digest::sha256_hex(b"W = 7\n"));
            }
        }
        let path = first.path.join(manifest::MANIFEST);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let report = verify::verify(&first.path).unwrap();
        assert!(report.changed.is_empty() && !report.ok(), "{report:?}");
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, .. } if what.contains("tree hash")),
            "{err}"
        );
    }
}
