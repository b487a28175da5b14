//! What a snapshot holds: the source tree minus `.git`, `__pycache__`, `*.pyc`, what the
//! tree's own `.gitignore` files ignore, and `--exclude` patterns. Symlinks inside the tree
//! stay symlinks (made relative); one pointing outside is an error unless followed.
//!
//! A path inside a snapshot is UTF-8 (the manifest is JSON): a name that is not is refused
//! here, by its escaped bytes, rather than renamed into something two names could share.
//! Each file keeps what the walk saw of it ([`Stamp`]), so hashing and copying can tell
//! a file that changed underneath them.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use super::{Error, source_io};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `mode`: the permission bits the snapshot gives the file, the source's read and
    /// execute bits (never wider: a 0600 file becomes 0400, a 0755 one 0555).
    File {
        mode: u32,
    },
    Symlink {
        target: String,
    },
    /// `mode`: the permission bits the snapshot gives the directory ([`snapshot_dir_mode`]).
    /// The tree's root is the directory `"."`.
    Dir {
        mode: u32,
    },
}

/// What links in the tree become.
#[derive(Debug, Clone, Copy)]
pub enum Links<'a> {
    /// A link inside the tree stays a link; one pointing outside is refused.
    Keep,
    /// A link pointing outside the tree is replaced by what it points to, unless that is
    /// the shared storage `shared` (resolved), something inside it, or a directory holding it.
    Follow { shared: &'a Path },
}

/// Python's byte-code cache: written by running the code (jobs import from the snapshot),
/// never part of a snapshot and never a difference from one.
pub(super) const PYTHON_CACHE_DIR: &str = "__pycache__";

/// A compiled Python file (`*.pyc`), by its name.
pub(super) fn is_python_bytecode(name: &[u8]) -> bool {
    name.ends_with(b".pyc")
}

/// The permission bits a snapshot gives a file whose source has `mode`: its read and
/// execute bits, write and special bits dropped (snapshots are immutable).
pub fn snapshot_mode(mode: u32) -> u32 {
    mode & 0o555
}

/// The mode of every directory of every snapshot made before directory modes were kept,
/// and of most directories since: it is left out of the tree hash and the manifest, so the
/// ids of ordinary trees did not change when directory modes began to be kept.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// The permission bits a snapshot gives a directory whose source has `mode`: its group's
/// and others' read and execute bits (a private 0700 directory stays private), and all of
/// the owner's (the owner must be able to remove the snapshot). 0775 and 0755 both give
/// [`DEFAULT_DIR_MODE`].
pub fn snapshot_dir_mode(mode: u32) -> u32 {
    0o700 | (mode & 0o055)
}

/// What the walk saw of a file: if any of it differs when the file is read, the file
/// changed in between and its bytes cannot be trusted to be the ones hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// One file or symlink of the snapshot.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path inside the snapshot, `/`-separated.
    pub rel: String,
    /// Where the bytes are read from (differs from root/rel for followed links).
    pub source: PathBuf,
    pub kind: Kind,
    pub size: u64,
    /// What the walk saw of a file (default for links).
    pub stamp: Stamp,
    /// Filled in by `hash`.
    pub sha256: String,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        matches!(self.kind, Kind::File { .. })
    }

    fn dir(rel: String, path: &Path) -> Result<Entry, Error> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(source_io("cannot read", path))?;
        Ok(Entry {
            rel,
            source: path.to_path_buf(),
            kind: Kind::Dir {
                mode: snapshot_dir_mode(meta.permissions().mode()),
            },
            size: 0,
            stamp: Stamp::default(),
            sha256: String::new(),
        })
    }
}

/// The path of the tree's root among the entries.
pub const ROOT: &str = ".";

/// Every entry of the tree at `root`, sorted by path; each path is there once. The
/// directories are those that hold a file or link (and the root, `"."`).
pub fn collect(root: &Path, excludes: &[String], links: Links<'_>) -> Result<Vec<Entry>, Error> {
    let mut entries = vec![Entry::dir(ROOT.to_string(), root)?];
    collect_under(root, root, "", excludes, links, 0, &mut entries)?;
    // Only the directories on the way to something copied.
    let mut holding = std::collections::HashSet::new();
    for entry in entries
        .iter()
        .filter(|e| !matches!(e.kind, Kind::Dir { .. }))
    {
        let mut rel = entry.rel.as_str();
        while let Some((parent, _)) = rel.rsplit_once('/') {
            if !holding.insert(parent.to_string()) {
                break;
            }
            rel = parent;
        }
    }
    entries.retain(|e| {
        !matches!(e.kind, Kind::Dir { .. }) || e.rel == ROOT || holding.contains(&e.rel)
    });
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    // Two entries under one path would leave one of them silently lost in the copy.
    if let Some(pair) = entries.windows(2).find(|w| w[0].rel == w[1].rel) {
        return Err(Error::DuplicatePath {
            path: pair[0].rel.clone(),
            first: pair[0].source.clone(),
            second: pair[1].source.clone(),
        });
    }
    Ok(entries)
}

/// The walk of `dir`: its .gitignore files honoured, `.git` and `__pycache__` left out,
/// links not followed, and the `excludes` as overrides.
fn walker(dir: &Path, excludes: &[String]) -> Result<ignore::Walk, Error> {
    let mut overrides = OverrideBuilder::new(dir);
    for pattern in excludes {
        overrides
            .add(&format!("!{pattern}"))
            .map_err(|e| Error::BadPattern {
                pattern: pattern.clone(),
                reason: e.to_string(),
            })?;
    }
    let overrides = overrides.build().map_err(|e| Error::BadPattern {
        pattern: excludes.join(" "),
        reason: e.to_string(),
    })?;
    Ok(WalkBuilder::new(dir)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .parents(false)
        .follow_links(false)
        .overrides(overrides)
        .filter_entry(|e| !matches!(e.file_name().to_str(), Some(".git" | PYTHON_CACHE_DIR)))
        .build())
}

fn collect_under(
    root: &Path,
    dir: &Path,
    prefix: &str,
    excludes: &[String],
    links: Links<'_>,
    depth: usize,
    out: &mut Vec<Entry>,
) -> Result<(), Error> {
    let walker = walker(dir, excludes)?;
    for item in walker {
        let item = item.map_err(|e| {
            let kind = e
                .io_error()
                .map_or(std::io::ErrorKind::Other, std::io::Error::kind);
            source_io("cannot read", dir)(std::io::Error::new(kind, e.to_string()))
        })?;
        let path = item.path();
        let Ok(rel_here) = path.strip_prefix(dir) else {
            continue;
        };
        if rel_here.as_os_str().is_empty() {
            continue;
        }
        let Some(file_type) = item.file_type() else {
            continue;
        };
        // Only what is copied needs a name the manifest can hold (a directory that is not
        // copied, because nothing in it is, may have any name).
        if file_type.is_dir() {
            if let Ok(rel) = join_rel(prefix, rel_here, path) {
                out.push(Entry::dir(rel, path)?);
            }
            continue;
        }
        if is_python_bytecode(path.as_os_str().as_encoded_bytes()) {
            continue;
        }
        let rel = join_rel(prefix, rel_here, path)?;
        if file_type.is_symlink() {
            let target = std::fs::read_link(path).map_err(source_io("cannot read link", path))?;
            let parent = path.parent().unwrap_or(dir);
            let resolved = normalize(&parent.join(&target));
            let canonical = std::fs::canonicalize(&resolved).unwrap_or(resolved.clone());
            if let Ok(inside) = canonical
                .strip_prefix(root)
                .or_else(|_| resolved.strip_prefix(root))
            {
                // Inside the tree: stays a link, relative so it works wherever the snapshot is.
                let link_dir = Path::new(&rel)
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                let target = relative(&link_dir, inside).ok_or_else(|| Error::NonUtf8Name {
                    path: format!("{:?} (the target of link {rel})", parent.join(&target)),
                })?;
                out.push(Entry {
                    rel,
                    source: path.to_path_buf(),
                    kind: Kind::Symlink { target },
                    size: 0,
                    stamp: Stamp::default(),
                    sha256: String::new(),
                });
                continue;
            }
            let Links::Follow { shared } = links else {
                return Err(Error::LinkOutside {
                    link: rel,
                    target: target.display().to_string(),
                });
            };
            if !canonical.exists() {
                return Err(Error::LinkUnfollowable {
                    link: rel,
                    why: format!("it points to {}, which does not exist", target.display()),
                });
            }
            // Following it would copy the storage (the snapshots among it) into itself.
            let relation = if canonical == shared {
                Some("is")
            } else if canonical.starts_with(shared) {
                Some("is inside")
            } else if shared.starts_with(&canonical) {
                Some("holds")
            } else {
                same_inode_relation(&canonical, shared)
            };
            if let Some(relation) = relation {
                return Err(Error::LinkToShared {
                    link: rel,
                    target: canonical,
                    relation,
                    shared: shared.to_path_buf(),
                });
            }
            if canonical.is_dir() {
                if depth > 16 {
                    return Err(Error::LinkUnfollowable {
                        link: rel,
                        why: "it starts a chain of more than 16 followed directory links".into(),
                    });
                }
                out.push(Entry::dir(rel.clone(), &canonical)?);
                collect_under(root, &canonical, &rel, excludes, links, depth + 1, out)?;
            } else {
                out.push(file_entry(rel, &canonical)?);
            }
            continue;
        }
        out.push(file_entry(rel, path)?);
    }
    Ok(())
}

/// A directory's identity: the same directory mounted twice (a bind mount, the same
/// export mounted at two places) has two paths but one `(st_dev, st_ino)`.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// How `target` (resolved) stands to the shared storage `shared` (resolved) by identity,
/// where comparing paths cannot see it (another mount of the storage): "is" when it is the
/// storage's root, "is inside" when one of the directories above it is, "holds" when it
/// is one of the directories above the storage.
fn same_inode_relation(target: &Path, shared: &Path) -> Option<&'static str> {
    let root = identity(shared)?;
    let target_id = identity(target)?;
    if target_id == root {
        return Some("is");
    }
    if target
        .ancestors()
        .skip(1)
        .any(|above| identity(above) == Some(root))
    {
        return Some("is inside");
    }
    let above_shared: std::collections::HashSet<(u64, u64)> =
        shared.ancestors().skip(1).filter_map(identity).collect();
    above_shared.contains(&target_id).then_some("holds")
}

fn file_entry(rel: String, path: &Path) -> Result<Entry, Error> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(source_io("cannot read", path))?;
    // A FIFO would block the copy forever, a socket or device cannot be copied: each is
    // refused by name before anything is written.
    if let Some(kind) = crate::fsx::special_kind(meta.file_type()) {
        return Err(Error::SpecialFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    Ok(Entry {
        rel,
        source: path.to_path_buf(),
        kind: Kind::File {
            mode: snapshot_mode(meta.permissions().mode()),
        },
        size: meta.len(),
        stamp: Stamp::of(&meta),
        sha256: String::new(),
    })
}

/// `prefix/rel` with `/` separators; a name that is not UTF-8 is refused (by `path`,
/// escaped), never renamed: two such names could become one.
fn join_rel(prefix: &str, rel: &Path, path: &Path) -> Result<String, Error> {
    let mut names = Vec::new();
    for c in rel.components() {
        names.push(c.as_os_str().to_str().ok_or_else(|| Error::NonUtf8Name {
            path: format!("{path:?}"),
        })?);
    }
    let rel = names.join("/");
    Ok(if prefix.is_empty() {
        rel
    } else {
        format!("{prefix}/{rel}")
    })
}

/// Removes `.` and `..` without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The relative path from directory `from` to `to` (both relative to the tree root);
/// None when a name on the way is not UTF-8.
fn relative(from: &Path, to: &Path) -> Option<String> {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = std::iter::repeat_n("..", from.len() - common).collect();
    for c in &to[common..] {
        parts.push(c.as_os_str().to_str()?);
    }
    Some(if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    })
}

#[derive(Debug, Clone)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
}

/// The checkout's short commit and whether it has uncommitted changes (None: not git).
pub fn git_state(root: &Path) -> Option<GitState> {
    if !root.join(".git").exists() {
        return None;
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let commit = String::from_utf8_lossy(&git(&["rev-parse", "--short=10", "HEAD"])?.stdout)
        .trim()
        .to_string();
    let dirty = git(&["status", "--porcelain"]).is_none_or(|o| !o.stdout.is_empty());
    Some(GitState { commit, dirty })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_between_tree_dirs() {
        let rel = |a: &str, b: &str| relative(Path::new(a), Path::new(b)).unwrap_or_default();
        assert_eq!(rel("a/b", "a/c/f.py"), "../c/f.py");
        assert_eq!(rel("", "x"), "x");
        assert_eq!(rel("a", "a/x"), "x");
        assert_eq!(
            normalize(Path::new("/r/a/../b/./c")),
            PathBuf::from("/r/b/c")
        );
    }
}
