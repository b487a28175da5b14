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
//! not UTF-8 is refused), permission bits of files and directories are kept, never
//! widened, and are part of the id. From `common/` down nothing on the storage is
//! followed, and nothing is checked and then used by name: every directory is held open
//! ([`crate::fsx::Dir`]) and what is below it is made, read, renamed and removed through
//! that handle, so a directory swapped for a link at any moment leads nowhere.

mod catalog;
pub mod hash;
pub mod manifest;
pub mod publish;
pub mod pypi;
pub mod verify;
pub mod walk;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::exit::{Classify, Exit};
use crate::fsx::{Dir, Dirs, found};
use crate::ui::Reporter;

pub use catalog::{Found, ListedSnapshot, find, list, locate, remove, unfinished_jobs_using};
pub use manifest::Manifest;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("source {0} does not exist")]
    SourceMissing(PathBuf),
    #[error("source {0} is not a directory")]
    SourceNotDir(PathBuf),
    #[error("symlink {link} points outside the source tree (to {target})")]
    LinkOutside { link: String, target: String },
    #[error("symlink {link} cannot be followed: {why}")]
    LinkUnfollowable { link: String, why: String },
    #[error(
        "symlink {link} resolves to {}, which {relation} the shared storage ({}): following it would copy the snapshots into themselves",
        target.display(), shared.display()
    )]
    LinkToShared {
        link: String,
        target: PathBuf,
        relation: &'static str,
        shared: PathBuf,
    },
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
    #[error("{} is {kind}: refusing to read it", crate::text::shown(path))]
    SpecialFile { path: PathBuf, kind: &'static str },
    #[error(
        "{path} has a name that is not UTF-8: a snapshot keeps every name exactly, and its manifest holds UTF-8 names only"
    )]
    NonUtf8Name { path: String },
    #[error(
        "{path:?} would hold two entries of the tree ({} and {})",
        crate::text::shown(first),
        crate::text::shown(second)
    )]
    DuplicatePath {
        path: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "{} changed while it was being snapshotted: its bytes would not be the ones hashed",
        crate::text::shown(path)
    )]
    Changed { path: PathBuf },
    #[error("snapshot {id} exists but does not match its manifest ({what}): it cannot be reused")]
    Corrupt { id: String, what: String },
    #[error(transparent)]
    Unsafe(#[from] crate::fsx::Unsafe),
    #[error(
        "source {} {relation} the shared storage ({}): a snapshot of it would copy the snapshots into themselves",
        crate::text::shown(tree),
        crate::text::shown(shared)
    )]
    SourceContainsShared {
        tree: PathBuf,
        /// "contains", "is" or "is inside".
        relation: &'static str,
        shared: PathBuf,
    },
    #[error(
        "{} is not the snapshot it stands for: its manifest names {names}",
        crate::text::shown(path)
    )]
    Misnamed { path: PathBuf, names: String },
    #[error("snapshot {id} is used by unfinished job(s): {jobs}")]
    InUse { id: String, jobs: String },
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    /// A failure on the shared storage.
    #[error(transparent)]
    Io(#[from] crate::fsx::IoAt),
    /// A failure reading the source tree (the user's, not the storage).
    #[error(transparent)]
    Source(crate::fsx::IoAt),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Io(_) | Error::Source(_) | Error::Changed { .. } | Error::Corrupt { .. } => {
                Exit::Failed
            }
            Error::Lock(e) => e.exit(),
            _ => Exit::Usage,
        }
    }
    fn hint(&self) -> Option<String> {
        use std::io::ErrorKind::PermissionDenied;
        match self {
            Error::LinkOutside { .. } => Some("pass --follow-links to copy what the link points to, or --exclude it".into()),
            Error::LinkUnfollowable { .. } => Some("fix the link, or --exclude it".into()),
            Error::LinkToShared { .. } => Some("--exclude the link: a snapshot never holds the shared storage".into()),
            Error::SpecialFile { .. } => Some("remove it from the tree, or --exclude it".into()),
            Error::NonUtf8Name { .. } => Some("rename it, or --exclude it".into()),
            Error::DuplicatePath { .. } => Some("--exclude one of them".into()),
            Error::Changed { .. } => Some("something is still writing to the source tree: let it finish (or --exclude that file) and snapshot again; nothing was published".into()),
            Error::Corrupt { id, .. } => Some(format!("`argus snapshot verify {id}` lists the differences; remove it with `argus snapshot rm {id}` and snapshot again")),
            Error::Unsafe(refusal) => Some(refusal.hint()),
            Error::SourceContainsShared { .. } => Some("snapshot the code's own directory".into()),
            Error::Misnamed { .. } => Some("a snapshot's directory is named by its code id: this one was copied or renamed there; remove it with `argus snapshot rm`".into()),
            Error::Conflict { .. } => Some("snapshots are immutable: choose another --code-id, or leave it out to derive one from the content".into()),
            Error::InUse { .. } => Some("wait for those jobs to finish, or pass --force".into()),
            Error::Source(e) if e.source.kind() == PermissionDenied => Some("this user cannot read that part of the source tree: make it readable, or --exclude it".into()),
            Error::Io(e) if e.source.kind() == PermissionDenied && e.action.starts_with("cannot read") => Some("this user cannot read the shared storage there".into()),
            Error::Io(e) if e.source.kind() == PermissionDenied => Some("the shared storage is not writable by this user".into()),
            Error::Io(e) if e.source.raw_os_error() == Some(28) => Some("the disk is full; nothing was published".into()),
            _ => None,
        }
    }
}

/// An I/O error on the shared storage, with what was being done and where; a refusal of
/// `fsx` (a planted link) is its own error, not a failed read.
pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source: std::io::Error| match refusal(source) {
        Ok(refusal) => Error::Unsafe(refusal),
        Err(source) => Error::Io(crate::fsx::io_at(action, path)(source)),
    }
}

/// An I/O error reading the source tree.
pub(crate) fn source_io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source: std::io::Error| match refusal(source) {
        Ok(refusal) => Error::Unsafe(refusal),
        Err(source) => Error::Source(crate::fsx::io_at(action, path)(source)),
    }
}

/// The refusal of `fsx` inside `error`, or the error as it was.
fn refusal(error: std::io::Error) -> Result<crate::fsx::Unsafe, std::io::Error> {
    if crate::fsx::Unsafe::of(&error).is_none() {
        return Err(error);
    }
    let kind = error.kind();
    match error
        .into_inner()
        .map(|e| e.downcast::<crate::fsx::Unsafe>())
    {
        Some(Ok(refusal)) => Ok(*refusal),
        Some(Err(other)) => Err(std::io::Error::new(kind, other)),
        None => Err(std::io::Error::other("unknown error")),
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
/// and so is reached through handles, never following a link. Every caller passes
/// `<root>/common/code`.
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

/// The code root held open (None when it does not exist yet): the storage root opened as
/// the caller names it, `common/code` below it without following a link.
fn open_code(code_root: &Path) -> Result<Option<Dir>, Error> {
    let (root, base) = anchor(code_root);
    let Some(top) = found(Dir::root(&root)).map_err(io("cannot read", &root))? else {
        return Ok(None);
    };
    found(top.open_dir(&base)).map_err(io("cannot read", code_root))
}

/// The snapshot directory at `path` (`<root>/common/code/<name>/<code_id>`, as [`find`]
/// gives it) held open: the storage root opened as named, everything from `common/` down
/// without following a link.
pub(crate) fn open_snapshot(path: &Path) -> Result<Dir, Error> {
    let family = path.parent().unwrap_or(path);
    let (code_root, root_rel) = match (family.parent(), family.file_name(), path.file_name()) {
        (Some(code_root), Some(name), Some(id)) => (code_root, Path::new(name).join(id)),
        _ => (path, PathBuf::new()),
    };
    let (root, base) = anchor(code_root);
    let top = Dir::root(&root).map_err(io("cannot read", &root))?;
    top.open_dir(base.join(root_rel))
        .map_err(io("cannot read", path))
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
    let (root, base) = anchor(code_root);
    // What a followed link must not lead to (or hold): the whole storage.
    let shared = resolve_existing(&root);
    let links = if options.follow_links {
        walk::Links::Follow { shared: &shared }
    } else {
        walk::Links::Keep
    };
    let task = reporter.task("snapshot");
    task.update("listing files");
    let entries = walk::collect(&source, &options.excludes, links)?;
    let to_hash = entries.iter().filter(|e| e.is_file()).count();
    task.update(&format!("hashing {to_hash} files"));
    let hashed = hash::hash_entries(&source, entries, &*task)?;
    let tree_hash = hash::tree_hash(&hashed);
    let git = walk::git_state(&source);
    let code_id = match &options.code_id {
        Some(id) => id.clone(),
        None => hash::derive_code_id(&tree_hash, git.as_ref()),
    };
    let files = hashed.iter().filter(|e| e.is_file()).count();
    let bytes = hashed.iter().map(|e| e.size).sum();
    let target = code_root.join(&options.name).join(&code_id);
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

    let family_rel = base.join(&options.name);
    // What this run creates, the storage root included, is taken away again if it fails.
    let made = Dirs::new();
    // The storage root is the caller's (a profile's mount, made if missing); from
    // `common/` down nothing is followed, and the family directory is held open.
    made.create_all(&root).map_err(io("cannot create", &root))?;
    let top = Dir::root(&root).map_err(io("cannot create", &root))?;
    let family = made
        .create_in(&top, &family_rel)
        .map_err(io("cannot create", &root.join(&family_rel)))?;
    // One writer per snapshot id, on any host: a second one waits, then finds it published.
    let what = format!("snapshot {}/{code_id}", options.name);
    let lock = crate::lock::acquire_under(
        &root,
        &family_rel.join(format!(".lock-{code_id}")),
        &crate::lock::Acquire {
            what: &what,
            timeout: None,
        },
        |holder| reporter.note(&crate::lock::waiting_message(&what, holder)),
    )?;
    publish::remove_leftovers(&family, &code_id);
    if already_published(&family, &code_id)? {
        made.keep();
        reuse(&family, &options.name, &code_id, &tree_hash, &*task)?;
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
    before_copy();
    publish::publish(&family, &code_id, &hashed, &manifest, &*task)?;
    made.keep();
    drop(lock);
    task.done(&format!(
        "{code_id} ({files} files, {})",
        crate::ui::human_bytes(bytes)
    ));
    Ok(report(true))
}

/// Where a test stops a snapshot after its family directory was opened and before it is
/// copied (a unit test's hook on the test's own thread; the named test point otherwise).
fn before_copy() {
    crate::testpoint::reach("snapshot:before-copy");
    #[cfg(test)]
    tests::BEFORE_COPY.with(|hook| {
        if let Some(hook) = hook.borrow_mut().take() {
            hook();
        }
    });
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
    let source = std::fs::canonicalize(source).map_err(source_io("cannot resolve", source))?;
    // Where the snapshots will be, whether or not the storage has a `common/` yet.
    if resolve_existing(code_root).starts_with(&source) {
        let shared = resolve_existing(&anchor(code_root).0);
        let relation = if source == shared {
            "is"
        } else if source.starts_with(&shared) {
            "is inside"
        } else {
            "contains"
        };
        return Err(Error::SourceContainsShared {
            tree: source,
            relation,
            shared,
        });
    }
    // A planted link is refused before the long walk (and again, race-free, below).
    let planted = open_code(code_root).and_then(|code| match code {
        Some(code) => found(code.open_dir(&options.name))
            .map(drop)
            .map_err(io("cannot read", &code_root.join(&options.name))),
        None => Ok(()),
    });
    if let Err(e @ Error::Unsafe(_)) = planted {
        return Err(e);
    }
    Ok(source)
}

/// Whether the snapshot `code_id` is already published in `family` (a directory; anything
/// else there is refused).
fn already_published(family: &Dir, code_id: &str) -> Result<bool, Error> {
    let path = family.display(code_id);
    match family.kind(code_id).map_err(io("cannot read", &path))? {
        Some(crate::fsx::Kind::Dir) => Ok(true),
        Some(crate::fsx::Kind::Link) => Err(crate::fsx::Unsafe::Link { path }.into()),
        Some(_) => Err(crate::fsx::Unsafe::NotDir { path }.into()),
        None => Ok(false),
    }
}

/// An existing snapshot is reused only if it holds the same tree and is what its
/// manifest (and so its id) says.
fn reuse(
    family: &Dir,
    name: &str,
    code_id: &str,
    tree_hash: &str,
    task: &dyn crate::ui::Task,
) -> Result<(), Error> {
    let target = family
        .open_dir(code_id)
        .map_err(io("cannot read", &family.display(code_id)))?;
    let manifest = Manifest::read_in(&target)?;
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
    let check = verify::verify_in(&target)?;
    if !check.ok() {
        task.fail("damaged");
        return Err(Error::Corrupt {
            id: format!("{name}/{code_id}"),
            what: check.summary(),
        });
    }
    Ok(())
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
    let entries = walk::collect(&source, excludes, walk::Links::Keep)?;
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

    thread_local! {
        /// Run once where a snapshot on this thread is about to copy (see `before_copy`).
        pub(super) static BEFORE_COPY: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            std::cell::RefCell::new(None);
    }

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
        let entries = walk::collect(&src, &[], walk::Links::Keep).unwrap();
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
        let entries = walk::collect(&src, &[], walk::Links::Keep).unwrap();
        let hashed = hash::hash_entries(&src, entries, &*quiet().task("t")).unwrap();
        let tree = hash::tree_hash(&hashed);
        let manifest = Manifest::new(&src, "c1", "verl", &tree, None, &hashed);
        // Same size, other bytes, and the stamp taken again: only the digest of the bytes
        // written can tell.
        let path = src.join("pkg/model.py");
        std::fs::write(&path, "W = 9\n").unwrap();
        let dir = code_root.join("verl");
        std::fs::create_dir_all(&dir).unwrap();
        let family = Dir::root(&dir).unwrap();
        let mut stale = hashed.clone();
        for entry in &mut stale {
            if entry.rel == "pkg/model.py" {
                entry.stamp = walk::Stamp::of(&std::fs::metadata(&path).unwrap());
            }
        }
        let err =
            publish::publish(&family, "c1", &stale, &manifest, &*quiet().task("t")).unwrap_err();
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
            dir: false,
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
            snapshot(&code_root, &options(&src), &quiet()).map(drop),
        ] {
            assert!(matches!(result, Err(Error::Unsafe(_))), "{result:?}");
        }
        // Listed as unreadable, saying why; nothing behind it read.
        let listed = list(&code_root).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(
            listed[0]
                .unreadable
                .as_deref()
                .is_some_and(|why| why.contains("symbolic link")),
            "{listed:?}"
        );

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
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let report = verify::verify(&first.path).unwrap();
        assert!(report.changed.is_empty() && !report.ok(), "{report:?}");
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, .. } if what.contains("tree hash")),
            "{err}"
        );
    }

    /// Every entry below `dir` (links not followed), relative, sorted.
    fn everything_under(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
                if entry.file_type().unwrap().is_dir() {
                    stack.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// `<name>/` swapped for a link to an outside directory after argus opened it (the
    /// race a writer of the storage can win at any moment): nothing is written outside,
    /// and the snapshot lands in the real directory, now moved away.
    #[test]
    fn a_family_directory_swapped_for_a_link_mid_snapshot_is_never_followed() {
        let (dir, src, code_root) = setup();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(code_root.join("verl")).unwrap();
        let moved = dir.path().join("moved");
        let (family, away, out) = (code_root.join("verl"), moved.clone(), outside.clone());
        BEFORE_COPY.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&family, &away).unwrap();
                std::os::unix::fs::symlink(&out, &family).unwrap();
            }))
        });
        let result = snapshot(&code_root, &options(&src), &quiet());
        assert!(
            BEFORE_COPY.with(|hook| hook.borrow().is_none()),
            "the swap happened"
        );
        assert!(
            everything_under(&outside).is_empty(),
            "written outside: {:?}",
            everything_under(&outside)
        );
        result.unwrap();
        let published = moved.join("c1");
        assert_eq!(
            std::fs::read_to_string(published.join("pkg/model.py")).unwrap(),
            "W = 1\n"
        );
        assert!(
            verify::verify_in(&Dir::root(&published).unwrap())
                .unwrap()
                .ok()
        );
        assert!(
            !everything_under(&moved)
                .iter()
                .any(|n| n.starts_with(".tmp-")),
            "{:?}",
            everything_under(&moved)
        );
    }

    /// The same at the level of `publish`: the handle of `<name>/` is what it writes into.
    #[test]
    fn publish_writes_through_the_handle_it_was_given() {
        let (dir, src, code_root) = setup();
        let entries = walk::collect(&src, &[], walk::Links::Keep).unwrap();
        let hashed = hash::hash_entries(&src, entries, &*quiet().task("t")).unwrap();
        let tree = hash::tree_hash(&hashed);
        let manifest = Manifest::new(&src, "c1", "verl", &tree, None, &hashed);
        std::fs::create_dir_all(code_root.join("verl")).unwrap();
        let family = Dir::root(&code_root).unwrap().open_dir("verl").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::rename(code_root.join("verl"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, code_root.join("verl")).unwrap();
        publish::publish(&family, "c1", &hashed, &manifest, &*quiet().task("t")).unwrap();
        publish::remove_leftovers(&family, "c1");
        assert!(everything_under(&outside).is_empty());
        assert!(dir.path().join("moved/c1/.argus/manifest.json").is_file());
        assert!(already_published(&family, "c1").unwrap());
        reuse(&family, "verl", "c1", &tree, &*quiet().task("t")).unwrap();
        publish::remove(&family, "c1").unwrap();
        assert!(everything_under(&dir.path().join("moved")).is_empty());
    }

    /// With --follow-links, a link to the shared storage, to a directory holding it, or to
    /// something inside it is refused (exit 2), naming the link and where it leads; nothing
    /// is written.
    #[test]
    fn followed_links_never_lead_to_the_shared_storage() {
        let (dir, src, code_root) = setup();
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(shared.join("user/code")).unwrap();
        for (target, relation) in [
            (shared.clone(), "is"),
            (shared.join("user/code"), "is inside"),
            (dir.path().to_path_buf(), "holds"),
        ] {
            let link = src.join("pkg/storage");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&target, &link).unwrap();
            let mut follow = options(&src);
            follow.follow_links = true;
            let err = snapshot(&code_root, &follow, &quiet()).unwrap_err();
            assert!(
                matches!(&err, Error::LinkToShared { link, target: t, relation: r, .. }
                    if link == "pkg/storage" && *t == std::fs::canonicalize(&target).unwrap() && *r == relation),
                "{err}"
            );
            assert!(err.to_string().contains("pkg/storage"), "{err}");
            assert_eq!(err.exit(), Exit::Usage);
            assert!(!shared.join("common").exists(), "nothing written");
        }
        // Another outside directory is still followed.
        let other = dir.path().join("other");
        write(&other.join("x.py"), "X = 1\n");
        let link = src.join("pkg/storage");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let mut follow = options(&src);
        follow.follow_links = true;
        let made = snapshot(&code_root, &follow, &quiet()).unwrap();
        assert!(made.path.join("pkg/storage/x.py").is_file());
    }

    /// The hint to pass --follow-links only where it was not passed; an unreadable source
    /// file is not blamed on the storage.
    #[test]
    fn hints_fit_what_happened() {
        let (dir, src, _) = setup();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), src.join("gone")).unwrap();
        let kept = walk::collect(&src, &[], walk::Links::Keep).unwrap_err();
        assert!(kept.hint().unwrap().contains("--follow-links"), "{kept}");
        let shared = dir.path().join("shared");
        let followed =
            walk::collect(&src, &[], walk::Links::Follow { shared: &shared }).unwrap_err();
        assert!(
            matches!(followed, Error::LinkUnfollowable { .. }),
            "{followed}"
        );
        assert!(
            !followed.hint().unwrap().contains("--follow-links"),
            "{followed}"
        );
        assert!(
            followed.to_string().contains("does not exist"),
            "{followed}"
        );

        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let unreadable = source_io("cannot read", &src.join("run.sh"))(denied());
        let hint = unreadable.hint().unwrap();
        assert!(
            hint.contains("source tree") && !hint.contains("storage"),
            "{hint}"
        );
        assert_eq!(unreadable.exit(), Exit::Failed);
        let unwritable = io("cannot create", &shared)(denied());
        assert!(unwritable.hint().unwrap().contains("not writable"));
    }

    /// One bad entry under `common/code` (a planted link, a corrupt manifest, a file where
    /// a snapshot belongs) does not hide the others: each is listed as unreadable, saying why.
    #[test]
    fn list_shows_the_others_and_says_why_one_is_unreadable() {
        let (dir, src, code_root) = setup();
        snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let mut second = options(&src);
        second.code_id = Some("c2".into());
        write(&src.join("pkg/model.py"), "W = 2\n");
        snapshot(&code_root, &second, &quiet()).unwrap();
        let manifest = code_root.join("verl/c2").join(manifest::MANIFEST);
        std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&manifest, "{not json").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join(".argus")).unwrap();
        std::os::unix::fs::symlink(&outside, code_root.join("verl/evil")).unwrap();
        std::fs::write(code_root.join("verl/stray"), "x").unwrap();
        let listed = list(&code_root).unwrap();
        let shown: Vec<(&str, Option<&str>)> = listed
            .iter()
            .map(|l| (l.code_id.as_str(), l.unreadable.as_deref()))
            .collect();
        assert_eq!(shown.len(), 4, "{listed:#?}");
        let why = |id: &str| {
            shown
                .iter()
                .find(|(c, _)| *c == id)
                .and_then(|(_, why)| why.map(str::to_string))
        };
        assert_eq!(why("c1"), None);
        assert!(why("c2").unwrap().contains("corrupt manifest"), "{shown:?}");
        assert!(why("evil").unwrap().contains("symbolic link"), "{shown:?}");
        assert!(
            why("stray").unwrap().contains("not a directory"),
            "{shown:?}"
        );
        assert!(everything_under(&outside) == [".argus"]);
    }

    /// Directory modes are kept (a private directory stays private) and are part of the id
    /// only when they are not 0755, so an ordinary tree has the id it always had.
    #[test]
    fn directory_modes_are_kept_and_ordinary_ids_do_not_move() {
        let (_dir, src, code_root) = setup();
        let set = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(&src, 0o775);
        set(&src.join("pkg"), 0o755);
        let entries = walk::collect(&src, &[], walk::Links::Keep).unwrap();
        let hashed = hash::hash_entries(&src, entries, &*quiet().task("t")).unwrap();
        // The id of this tree before directory modes were kept, spelled out.
        assert_eq!(
            hash::tree_hash(&hashed),
            "98c89739d1d9b2f7b7bfc9b62bacebd38aa563ba386eed052138bf8abdcbe161"
        );
        let ordinary = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let manifest = Manifest::read(&ordinary.path).unwrap();
        assert!(
            manifest.files.iter().all(|f| !f.dir),
            "{:?}",
            manifest.files
        );
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&ordinary.path), 0o755);
        assert_eq!(mode(&ordinary.path.join("pkg")), 0o755);
        assert_eq!(mode(&ordinary.path.join(".argus")), 0o755);

        set(&src.join("pkg"), 0o700);
        let mut private = options(&src);
        private.code_id = Some("c2".into());
        let made = snapshot(&code_root, &private, &quiet()).unwrap();
        assert_ne!(made.tree_hash, ordinary.tree_hash);
        assert_eq!(mode(&made.path.join("pkg")), 0o700, "not widened");
        assert_eq!(mode(&made.path), 0o755);
        let manifest = Manifest::read(&made.path).unwrap();
        let record = manifest.files.iter().find(|f| f.dir).unwrap();
        assert_eq!((record.path.as_str(), record.mode()), ("pkg", 0o700));
        assert!(verify::verify(&made.path).unwrap().ok());
        // Widened afterwards: a difference.
        set(&made.path.join("pkg"), 0o755);
        let report = verify::verify(&made.path).unwrap();
        assert_eq!(report.changed, ["pkg/"], "{report:?}");
    }

    /// The snapshot's root, `.argus/` and the manifest made writable or readable by more,
    /// and anything added to `.argus/`: each is a difference.
    #[test]
    fn verify_sees_widened_modes_and_extra_files_of_the_snapshot_itself() {
        let (_dir, src, code_root) = setup();
        let made = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let set = |rel: &str, mode| {
            std::fs::set_permissions(made.path.join(rel), std::fs::Permissions::from_mode(mode))
                .unwrap()
        };
        assert!(verify::verify(&made.path).unwrap().ok());
        set("", 0o777);
        set(".argus", 0o777);
        set(manifest::MANIFEST, 0o666);
        std::fs::write(made.path.join(".argus/extra"), "x").unwrap();
        let report = verify::verify(&made.path).unwrap();
        assert_eq!(
            report.changed,
            ["./", ".argus/", ".argus/manifest.json"],
            "{report:?}"
        );
        assert_eq!(report.added, [".argus/extra"], "{report:?}");
        // Not reused either.
        let err = snapshot(&code_root, &options(&src), &quiet()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    /// A bind mount made for a test, unmounted when dropped (the test failing too).
    struct Mounted(PathBuf);

    impl Mounted {
        /// `what` mounted again at `at`; None (with a note) where this process cannot mount.
        fn bind(what: &Path, at: &Path) -> Option<Mounted> {
            std::fs::create_dir_all(at).unwrap();
            let status = std::process::Command::new("mount")
                .arg("--bind")
                .arg(what)
                .arg(at)
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                eprintln!("note: cannot bind-mount here ({status:?}): that check is skipped");
                return None;
            }
            Some(Mounted(at.to_path_buf()))
        }
    }

    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }

    /// A second mount of the storage has other paths but the same directories: a followed
    /// link to it, into it, or to a directory holding it is refused as the paths would be.
    #[test]
    fn followed_links_to_another_mount_of_the_storage_are_refused() {
        let (dir, src, _) = setup();
        let outer = dir.path().join("outer");
        let code_root = outer.join("shared/common/code");
        std::fs::create_dir_all(outer.join("shared/common/data")).unwrap();
        let Some(_mounted) = Mounted::bind(&outer, &dir.path().join("bind")) else {
            return;
        };
        let bind = dir.path().join("bind");
        for (target, relation) in [
            (bind.join("shared"), "is"),
            (bind.join("shared/common/data"), "is inside"),
            (bind.clone(), "holds"),
        ] {
            let link = src.join("pkg/storage");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&target, &link).unwrap();
            let mut follow = options(&src);
            follow.follow_links = true;
            let err = snapshot(&code_root, &follow, &quiet()).unwrap_err();
            assert!(
                matches!(&err, Error::LinkToShared { link, relation: r, .. }
                    if link == "pkg/storage" && *r == relation),
                "{target:?}: {err}"
            );
            assert_eq!(err.exit(), Exit::Usage);
            assert!(!code_root.exists(), "nothing written");
        }
    }

    /// A link, a file or an unreadable directory planted beside the snapshots does not stop
    /// `verify` or `rm` of another: it is passed over, named for a warning.
    #[test]
    fn an_unusable_sibling_family_is_passed_over_with_a_warning() {
        let (dir, src, code_root) = setup();
        snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("c1/.argus")).unwrap();
        std::os::unix::fs::symlink(&outside, code_root.join("evil")).unwrap();
        std::fs::write(code_root.join("stray"), "x").unwrap();
        // A family where `c1` is a link: not the snapshot c1 either.
        std::fs::create_dir_all(code_root.join("other")).unwrap();
        std::os::unix::fs::symlink(outside.join("c1"), code_root.join("other/c1")).unwrap();
        let found = locate(&code_root, "c1").unwrap();
        assert_eq!(found.path, code_root.join("verl/c1"));
        let skipped = found.skipped.join("\n");
        assert!(
            skipped.contains("evil") && skipped.contains("other/c1"),
            "{skipped}"
        );
        assert!(verify::verify_in(&found.open().unwrap()).unwrap().ok());
        let removed = remove(&code_root, &dir.path().join("jobs"), "c1", false).unwrap();
        assert!(removed.skipped.join("\n").contains("evil"));
        assert!(!code_root.join("verl/c1").exists());
        assert!(
            outside.join("c1/.argus").is_dir(),
            "nothing outside touched"
        );
        // With no snapshot left, what stands at `other/c1` is the error.
        let err = locate(&code_root, "c1").unwrap_err();
        assert!(matches!(err, Error::Unsafe(_)), "{err}");
    }

    /// Directories added to a snapshot are differences (Python's caches are not), and so
    /// is anything owned by another user than the snapshot's root.
    #[test]
    fn verify_sees_added_directories_and_other_owners() {
        use std::os::unix::fs::{chown, lchown};
        let (_dir, src, code_root) = setup();
        std::os::unix::fs::symlink("model.py", src.join("pkg/alias.py")).unwrap();
        let made = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let p = |rel: &str| made.path.join(rel);
        let mkdir = |rel: &str, mode| {
            std::fs::create_dir_all(p(rel)).unwrap();
            std::fs::set_permissions(p(rel), std::fs::Permissions::from_mode(mode)).unwrap();
        };
        mkdir("pkg/__pycache__", 0o755);
        std::fs::write(p("pkg/__pycache__/model.cpython-311.pyc"), "x").unwrap();
        assert!(verify::verify(&made.path).unwrap().ok());
        mkdir("empty", 0o777);
        mkdir("a/b/c", 0o755);
        mkdir(".argus/d", 0o1777);
        mkdir("pkg/new.py", 0o755);
        let report = verify::verify(&made.path).unwrap();
        assert_eq!(
            report.added,
            [".argus/d/", "a/", "a/b/", "a/b/c/", "empty/", "pkg/new.py/"],
            "{report:?}"
        );
        assert!(report.changed.is_empty(), "{report:?}");
        for rel in ["empty", "a", ".argus/d", "pkg/new.py"] {
            std::fs::remove_dir_all(p(rel)).unwrap();
        }
        assert!(verify::verify(&made.path).unwrap().ok());

        chown(p("pkg/model.py"), Some(4321), None).unwrap();
        chown(p("pkg"), Some(4321), None).unwrap();
        lchown(p("pkg/alias.py"), Some(4321), None).unwrap();
        let report = verify::verify(&made.path).unwrap();
        assert_eq!(
            report.changed,
            ["pkg/", "pkg/alias.py", "pkg/model.py"],
            "{report:?}"
        );
        assert!(report.added.is_empty() && report.missing.is_empty());
    }

    /// A copy of a snapshot under another id is listed as unreadable, and neither found
    /// nor verified as that id; `rm` still removes it.
    #[test]
    fn a_snapshot_copied_under_another_id_is_not_that_id() {
        let (dir, src, code_root) = setup();
        snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(code_root.join("verl/c1"))
            .arg(code_root.join("verl/evil"))
            .status()
            .unwrap();
        assert!(copied.success());
        let listed = list(&code_root).unwrap();
        let evil = listed.iter().find(|l| l.code_id == "evil").unwrap();
        let why = evil.unreadable.as_deref().unwrap_or_default();
        assert!(why.contains("its manifest names c1"), "{listed:#?}");
        assert_eq!(listed.iter().filter(|l| l.code_id == "c1").count(), 1);
        for id in ["evil", "verl/evil"] {
            let err = locate(&code_root, id).unwrap_err();
            assert!(matches!(err, Error::Misnamed { .. }), "{err}");
            assert_eq!(err.exit(), Exit::Usage);
        }
        let report = verify::verify(&code_root.join("verl/evil")).unwrap();
        assert!(!report.ok(), "{report:?}");
        remove(&code_root, &dir.path().join("jobs"), "evil", false).unwrap();
        assert!(!code_root.join("verl/evil").exists());
        assert!(locate(&code_root, "c1").is_ok());
    }

    /// An entry whose name is not UTF-8 is listed saying so, not by a lookup of another name.
    #[test]
    fn list_says_a_name_that_is_not_utf8_is_no_snapshot() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, src, code_root) = setup();
        snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let bad = std::ffi::OsStr::from_bytes(b"x\xff");
        std::fs::create_dir(code_root.join(bad)).unwrap();
        std::fs::create_dir(code_root.join("verl").join(bad)).unwrap();
        let listed = list(&code_root).unwrap();
        let whys: Vec<&str> = listed
            .iter()
            .filter_map(|l| l.unreadable.as_deref())
            .collect();
        assert_eq!(whys.len(), 2, "{listed:#?}");
        for why in whys {
            assert!(
                why.contains("not UTF-8") && !why.contains("No such file"),
                "{why}"
            );
        }
    }

    /// A manifest larger than any argus writes is refused by its size, not read.
    #[test]
    fn a_giant_manifest_is_refused_unread() {
        let (_dir, src, code_root) = setup();
        let made = snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let path = made.path.join(manifest::MANIFEST);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(manifest::MAX_MANIFEST_BYTES + 1).unwrap();
        let started = std::time::Instant::now();
        let err = manifest::Manifest::read(&made.path).unwrap_err();
        assert!(
            matches!(err, Error::Unsafe(crate::fsx::Unsafe::TooLarge { .. })),
            "{err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        const { assert!(manifest::MAX_MANIFEST_BYTES <= 256 << 20) };
    }

    /// A source inside the storage is refused saying so.
    #[test]
    fn a_source_inside_the_storage_is_said_to_be_inside() {
        let (dir, src, code_root) = setup();
        snapshot(&code_root, &options(&src), &quiet()).unwrap();
        let err = snapshot(
            &code_root,
            &options(&dir.path().join("shared/common")),
            &quiet(),
        )
        .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::SourceContainsShared {
                    relation: "is inside",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("is inside the shared storage"),
            "{err}"
        );
        let err = snapshot(&code_root, &options(&src.join("..")), &quiet()).unwrap_err();
        assert!(
            err.to_string().contains("contains the shared storage"),
            "{err}"
        );
    }
}
