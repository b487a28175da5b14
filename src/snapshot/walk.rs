//! What a snapshot holds: the source tree minus `.git`, `__pycache__`, `*.pyc`, what the
//! tree's own `.gitignore` files ignore, and `--exclude` patterns. Symlinks inside the tree
//! stay symlinks (made relative); one pointing outside is an error unless followed.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use super::{Error, io};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File { executable: bool },
    Symlink { target: String },
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
    /// Filled in by `hash`.
    pub sha256: String,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        matches!(self.kind, Kind::File { .. })
    }
}

/// Every entry of the tree at `root`, sorted by path.
pub fn collect(root: &Path, excludes: &[String], follow_links: bool) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    collect_under(root, root, "", excludes, follow_links, 0, &mut entries)?;
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(entries)
}

fn collect_under(
    root: &Path,
    dir: &Path,
    prefix: &str,
    excludes: &[String],
    follow_links: bool,
    depth: usize,
    out: &mut Vec<Entry>,
) -> Result<(), Error> {
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
    let walker = WalkBuilder::new(dir)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .parents(false)
        .follow_links(false)
        .overrides(overrides)
        .filter_entry(|e| !matches!(e.file_name().to_str(), Some(".git" | "__pycache__")))
        .build();
    for item in walker {
        let item = item.map_err(|e| Error::Io {
            action: "cannot read",
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let path = item.path();
        let Ok(rel_here) = path.strip_prefix(dir) else {
            continue;
        };
        if rel_here.as_os_str().is_empty() {
            continue;
        }
        let rel = join_rel(prefix, rel_here);
        let Some(file_type) = item.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            continue;
        }
        if rel.ends_with(".pyc") {
            continue;
        }
        if file_type.is_symlink() {
            let target = std::fs::read_link(path).map_err(io("cannot read link", path))?;
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
                out.push(Entry {
                    rel,
                    source: path.to_path_buf(),
                    kind: Kind::Symlink {
                        target: relative(&link_dir, inside),
                    },
                    size: 0,
                    sha256: String::new(),
                });
                continue;
            }
            if !follow_links || !canonical.exists() {
                return Err(Error::LinkOutside {
                    link: rel,
                    target: target.display().to_string(),
                });
            }
            if canonical.is_dir() {
                if depth > 16 {
                    return Err(Error::LinkOutside {
                        link: rel,
                        target: "a chain of more than 16 followed directory links".into(),
                    });
                }
                collect_under(
                    root,
                    &canonical,
                    &rel,
                    excludes,
                    follow_links,
                    depth + 1,
                    out,
                )?;
            } else {
                out.push(file_entry(rel, &canonical)?);
            }
            continue;
        }
        out.push(file_entry(rel, path)?);
    }
    Ok(())
}

fn file_entry(rel: String, path: &Path) -> Result<Entry, Error> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(path).map_err(io("cannot read", path))?;
    // A FIFO would block the copy forever, a socket or device cannot be copied: each is
    // refused by name before anything is written.
    let t = meta.file_type();
    let special = if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        None
    };
    if let Some(kind) = special {
        return Err(Error::SpecialFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    let executable = meta.permissions().mode() & 0o111 != 0;
    Ok(Entry {
        rel,
        source: path.to_path_buf(),
        kind: Kind::File { executable },
        size: meta.len(),
        sha256: String::new(),
    })
}

fn join_rel(prefix: &str, rel: &Path) -> String {
    let rel = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if prefix.is_empty() {
        rel
    } else {
        format!("{prefix}/{rel}")
    }
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

/// The relative path from directory `from` to `to` (both relative to the tree root).
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> =
        std::iter::repeat_n("..".to_string(), from.len() - common).collect();
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
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
        assert_eq!(
            relative(Path::new("a/b"), Path::new("a/c/f.py")),
            "../c/f.py"
        );
        assert_eq!(relative(Path::new(""), Path::new("x")), "x");
        assert_eq!(relative(Path::new("a"), Path::new("a/x")), "x");
        assert_eq!(
            normalize(Path::new("/r/a/../b/./c")),
            PathBuf::from("/r/b/c")
        );
    }
}
