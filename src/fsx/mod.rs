//! Files on storage that other processes and other hosts read: atomic writes, temporary
//! names that say who is writing them, and [`Dir`], the one way below a root that others
//! can write into (a directory held open; see `dir.rs`).
//!
//! A write that must survive a crash goes to a temporary name in the same directory, is
//! fsynced, renamed over the final name, and the directory is fsynced. A temporary name
//! carries the writer's host, pid and process start time (`.tmp-<stem>.<host>.<pid>.<start>`),
//! so a cleanup on one host can tell a dead writer of its own from a live writer on another
//! machine, whose pid means nothing here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod dir;
pub use dir::{Dir, Kind};

/// The prefix of every temporary name argus makes.
pub const TMP_PREFIX: &str = ".tmp-";

/// This process as an owner of temporary names and locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (tells a reused pid apart).
    pub start: u64,
}

impl Owner {
    /// This process.
    pub fn me() -> &'static Owner {
        static ME: OnceLock<Owner> = OnceLock::new();
        ME.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                host: host_name(),
                pid,
                start: process_start(pid).unwrap_or(0),
            }
        })
    }

    /// Whether this owner is known to be gone: same host and no such process (or the pid
    /// now belongs to a younger process). On another host this cannot be known here.
    pub fn liveness(&self) -> Liveness {
        if self.host != Owner::me().host {
            return Liveness::OtherHost;
        }
        match process_start(self.pid) {
            Some(start) if start == self.start || self.start == 0 => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Dead,
    /// Owned by a process on another host: only a heartbeat can tell.
    OtherHost,
}

/// This machine's host name, made safe for a file name (`[A-Za-z0-9-]`, at most 63).
pub fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let safe: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    if safe.is_empty() {
        "unknown-host".to_string()
    } else {
        safe
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in ticks since boot. None
/// when there is no such process or it is a zombie (dead, not yet reaped).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its end.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// The user this process acts as.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A temporary name for `stem` owned by this process, unique within it.
pub fn temp_name(stem: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let me = Owner::me();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{stem}.{}.{}.{}.{n}", me.host, me.pid, me.start)
}

/// The stem and owner of a temporary name made by [`temp_name`].
pub fn parse_temp_name(name: &str) -> Option<(String, Owner)> {
    let rest = name.strip_prefix(TMP_PREFIX)?;
    let mut parts = rest.rsplitn(5, '.');
    let _n: u64 = parts.next()?.parse().ok()?;
    let start: u64 = parts.next()?.parse().ok()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    let host = parts.next()?.to_string();
    let stem = parts.next()?.to_string();
    Some((stem, Owner { host, pid, start }))
}

/// Removes the temporary entries in `dir` whose owner is known to be dead (same host, no
/// such process). Entries of other hosts are kept: their writers may be alive. Returns
/// what was removed.
pub fn remove_dead_temps(dir: &Dir) -> Vec<PathBuf> {
    remove_temps_where(dir, |_, owner| owner.liveness() == Liveness::Dead)
}

/// Removes the temporary entries in `dir` whose stem is `stem`, whoever made them: for a
/// caller that holds the lock on `stem`, so that no live writer of it can exist.
pub fn remove_temps_of(dir: &Dir, stem: &str) -> Vec<PathBuf> {
    let me = Owner::me();
    remove_temps_where(dir, |s, owner| s == stem && owner != me)
}

fn remove_temps_where(dir: &Dir, doomed: impl Fn(&str, &Owner) -> bool) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = dir.entries() else {
        return removed;
    };
    // Asked of the filesystem once, and only when an entry is not owned by our uid.
    let creator = std::cell::OnceCell::new();
    for (name, _) in entries {
        let Some((stem, owner)) = parse_temp_name(&name.to_string_lossy()) else {
            continue;
        };
        if !doomed(&stem, &owner) {
            continue;
        }
        // A name says nothing of who made the entry (anyone who can write the directory
        // can rename a tree of theirs, or of someone else's, to a temporary name): only
        // what this user owns is taken away.
        let owner = dir.owner(&name).ok();
        if owner != Some(effective_uid())
            && owner != *creator.get_or_init(|| dir.creator_uid().ok())
        {
            tracing::debug!(
                "{} has a temporary name but is not ours: left alone",
                dir.display(&name).display()
            );
            continue;
        }
        let path = dir.display(&name);
        tracing::info!(
            "removing the leftovers of an interrupted write: {}",
            path.display()
        );
        if dir.remove_all(&name).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// fsync of a directory: makes a rename or a new entry in it durable.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically and durably: a temporary name in the same
/// directory, fsync, rename, fsync of the directory. Readers see the old content or the
/// new one, never a part; a crash leaves at most a temporary file that
/// [`remove_dead_temps`] recognises. By path: for a file of the caller's own (an output
/// it named, its state directory); on the shared storage use [`Dir::write_atomic`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(temp_name(&stem));
    let result = (|| {
        // create_new: a name planted in the meantime (a symlink) is never followed.
        let mut file = std::fs::File::create_new(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The directories one operation created, so that a failed operation can take the empty
/// ones away again (it leaves nothing new behind). Removal happens on drop unless
/// [`Dirs::keep`] was called.
#[derive(Debug, Default)]
pub struct Dirs {
    created: Mutex<Vec<Made>>,
    keep: AtomicBool,
}

/// A directory one operation made: by path (in the caller's own, trusted tree) or as the
/// handle of its parent and its name (on the shared storage: removed through the handle,
/// never through a link someone swapped in on the way).
#[derive(Debug)]
enum Made {
    Path(PathBuf),
    At(Dir, std::ffi::OsString),
}

impl Dirs {
    pub fn new() -> Self {
        Self::default()
    }

    fn record(&self, made: Made) {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(made);
    }

    /// `create_dir_all`, recording each directory it made (for the caller's own tree: a
    /// state directory, not the shared storage).
    pub fn create_all(&self, dir: &Path) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut cursor = Some(dir);
        while let Some(d) = cursor {
            if d.as_os_str().is_empty() || std::fs::symlink_metadata(d).is_ok() {
                break;
            }
            missing.push(d.to_path_buf());
            cursor = d.parent();
        }
        for d in missing.into_iter().rev() {
            match std::fs::create_dir(&d) {
                Ok(()) => self.record(Made::Path(d)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        if !dir.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        Ok(())
    }

    /// [`Dir::create_dirs`] below `dir`, recording each directory it made: the handle
    /// of `dir/rel`, reached without following a link.
    pub fn create_in(&self, dir: &Dir, rel: impl AsRef<Path>) -> std::io::Result<Dir> {
        let mut failed = None;
        let opened =
            dir.create_dirs_at(rel.as_ref(), &mut |parent, name| match parent.try_clone() {
                Ok(parent) => self.record(Made::At(parent, name.to_os_string())),
                Err(e) => failed = Some(e),
            })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(opened),
        }
    }

    /// The operation succeeded: keep what it created.
    pub fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        if self.keep.load(Ordering::Relaxed) {
            return;
        }
        let created = std::mem::take(self.created.get_mut().unwrap_or_else(|e| e.into_inner()));
        // Deepest first; a directory something else wrote into stays.
        for made in created.iter().rev() {
            let _ = match made {
                Made::Path(dir) => std::fs::remove_dir(dir),
                Made::At(parent, name) => parent.remove_dir(name),
            };
        }
    }
}

/// Why a path below a shared root was refused: the storage is written by others, and
/// argus (often root) must not be led outside it or onto a file someone swapped in.
#[derive(Debug, thiserror::Error)]
pub enum Unsafe {
    #[error(
        "{} is a symbolic link: argus does not follow links on the shared storage (anyone who can write there could have planted it)",
        .path.display()
    )]
    Link { path: PathBuf },
    #[error("{} is not a directory", crate::text::shown(.path))]
    NotDir { path: PathBuf },
    #[error("{} is not a regular file", crate::text::shown(.path))]
    NotFile { path: PathBuf },
    #[error(
        "{} has a second hard link: it could be anyone's file, linked in by someone who cannot read it",
        .path.display()
    )]
    HardLink { path: PathBuf },
    #[error("{} is larger than {cap} bytes: not a file argus wrote", crate::text::shown(.path))]
    TooLarge { path: PathBuf, cap: u64 },
    #[error(
        "{} is a tree deeper than {} levels: not one argus made",
        .path.display(), dir::MAX_DEPTH
    )]
    TooDeep { path: PathBuf },
    #[error(
        "{} was replaced, as argus made it, by a directory of uid {owner}: someone else could change what argus writes there",
        .path.display()
    )]
    Foreign { path: PathBuf, owner: u32 },
    #[error(
        "{:?} does not stay below {}: only plain names are allowed there",
        .rel, .root.display()
    )]
    Escapes { root: PathBuf, rel: PathBuf },
}

impl Unsafe {
    /// The refusal inside an I/O error made by this module, if that is what it is.
    pub fn of(error: &std::io::Error) -> Option<&Unsafe> {
        error.get_ref().and_then(|e| e.downcast_ref::<Unsafe>())
    }
}

impl From<Unsafe> for std::io::Error {
    fn from(e: Unsafe) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// An I/O failure with what was being done and to which path: the one shape that the
/// stages' `Io` variants wrap (`Io(#[from] fsx::IoAt)`), so the message reads
/// `<action> <path>` with the OS error as its cause everywhere.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}", crate::text::shown(path))]
pub struct IoAt {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Builds an [`IoAt`] for `map_err`: `.map_err(fsx::io_at("cannot read", &path))`.
pub fn io_at<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> IoAt + 'a {
    move |source| IoAt {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// `Ok(None)` for something missing (`NotFound`), the error otherwise: for an open of
/// what may not exist yet.
pub fn found<T>(result: std::io::Result<T>) -> std::io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A top-level directory of a shared root given as one path (`<shared>/jobs`) as the root
/// and the name below it: the root is the caller's (a mount, opened by path), the name is
/// opened from the root's handle like everything below it.
pub fn root_and_name(dir: &Path) -> (PathBuf, std::ffi::OsString) {
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) if parent.as_os_str().is_empty() => {
            (PathBuf::from("."), name.to_owned())
        }
        (Some(parent), Some(name)) => (parent.to_path_buf(), name.to_owned()),
        _ => (dir.to_path_buf(), std::ffi::OsString::new()),
    }
}

/// The exit code of an I/O error on the shared storage: a refused path ([`Unsafe`]: a
/// planted link, a file where a directory belongs, a name that escapes) is bad input
/// (exit 2, nothing was changed), any other failure is exit 1.
pub fn io_exit(error: &std::io::Error) -> crate::exit::Exit {
    if Unsafe::of(error).is_some() {
        crate::exit::Exit::Usage
    } else {
        crate::exit::Exit::Failed
    }
}

/// What to do about a refused path, if `error` is one.
pub fn io_hint(error: &std::io::Error) -> Option<String> {
    Unsafe::of(error).map(Unsafe::hint)
}

impl Unsafe {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            Unsafe::Link { path }
            | Unsafe::NotDir { path }
            | Unsafe::NotFile { path }
            | Unsafe::HardLink { path }
            | Unsafe::Foreign { path, .. } => {
                format!(
                    "someone with write access to the shared storage put it there: check what {} is, remove it, and run the command again",
                    path.display()
                )
            }
            Unsafe::TooLarge { path, .. } | Unsafe::TooDeep { path } => format!(
                "check what {} is (someone with write access to the shared storage may have replaced it), remove it, and run the command again",
                path.display()
            ),
            Unsafe::Escapes { .. } => {
                "ids and names on the shared storage are single plain names (no /, no ..)".into()
            }
        }
    }
}

/// The plain names of `rel`, or [`Unsafe::Escapes`] when it is absolute or has `..`.
fn plain_names<'a>(root: &Path, rel: &'a Path) -> Result<Vec<&'a std::ffi::OsStr>, Unsafe> {
    use std::path::Component;
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => {
                return Err(Unsafe::Escapes {
                    root: root.to_path_buf(),
                    rel: rel.to_path_buf(),
                });
            }
        }
    }
    Ok(names)
}

/// What a file is when it is a FIFO, socket or device node: the kinds that reading or
/// copying must refuse by name (a FIFO would block forever). None for anything else.
pub fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

/// Opens a regular file for reading without following a link at its last component
/// (`O_NOFOLLOW`) and without blocking on a FIFO (`O_NONBLOCK`); anything but a regular
/// file is refused. By path: for a file of the caller's own (a source tree, a file the
/// user named); on the shared storage use [`Dir::open_file`].
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Unsafe::Link {
                    path: path.to_path_buf(),
                }
                .into()
            } else {
                e
            }
        })?;
    if !file.metadata()?.is_file() {
        return Err(Unsafe::NotFile {
            path: path.to_path_buf(),
        }
        .into());
    }
    Ok(file)
}

/// The swap a hostile writer of the storage can make at any moment, for tests: the real
/// directory renamed away to `moved`, a link to `outside` in its place.
#[cfg(test)]
pub fn swap_for_link(real: &Path, moved: &Path, outside: &Path) {
    std::fs::rename(real, moved).expect("move the real directory away");
    std::os::unix::fs::symlink(outside, real).expect("plant the link");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip_with_their_owner() {
        let name = temp_name("abc.def-1");
        let (stem, owner) = parse_temp_name(&name).expect("parses");
        assert_eq!(stem, "abc.def-1");
        assert_eq!(&owner, Owner::me());
        assert_eq!(owner.liveness(), Liveness::Alive);
        assert!(parse_temp_name("abc").is_none());
        assert!(parse_temp_name(".tmp-x.host.notapid.1.0").is_none());
    }

    #[test]
    fn a_dead_writer_is_told_from_a_live_one_and_from_another_hosts() {
        let me = Owner::me();
        let dead = Owner {
            pid: me.pid,
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(dead.liveness(), Liveness::Dead);
        let other = Owner {
            host: format!("{}-elsewhere", me.host),
            ..me.clone()
        };
        assert_eq!(other.liveness(), Liveness::OtherHost);
    }

    #[test]
    fn cleanup_keeps_live_and_foreign_temps() {
        let dir = tempfile::tempdir().unwrap();
        let me = Owner::me();
        let mine = dir.path().join(temp_name("live"));
        std::fs::write(&mine, b"x").unwrap();
        let dead = dir.path().join(format!(
            ".tmp-gone.{}.{}.{}.0",
            me.host,
            me.pid,
            me.start + 7
        ));
        std::fs::create_dir(&dead).unwrap();
        let foreign = dir.path().join(format!(
            ".tmp-far.{}-b.{}.{}.0",
            me.host,
            me.pid,
            me.start + 7
        ));
        std::fs::write(&foreign, b"x").unwrap();
        // Someone else's tree renamed to a dead writer's temporary name is not ours.
        let renamed = dir.path().join(format!(
            ".tmp-theirs.{}.{}.{}.0",
            me.host,
            me.pid,
            me.start + 7
        ));
        std::fs::create_dir(&renamed).unwrap();
        let other_uid = if effective_uid() == 65534 {
            65533
        } else {
            65534
        };
        std::os::unix::fs::lchown(&renamed, Some(other_uid), None).unwrap();
        let removed = remove_dead_temps(&Dir::root(dir.path()).unwrap());
        assert_eq!(removed, vec![dead.clone()]);
        assert!(mine.exists() && foreign.exists() && !dead.exists() && renamed.exists());
    }

    #[test]
    fn a_failed_operation_removes_what_it_made_where_it_is_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("shared");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("common")).unwrap();
        std::fs::create_dir_all(outside.join("a/b")).unwrap();
        let made = Dirs::new();
        made.create_in(&Dir::root(&root).unwrap(), "common/a/b")
            .unwrap();
        // `common` swapped for a link to a tree of the same shape outside.
        std::fs::rename(root.join("common"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("common")).unwrap();
        drop(made);
        assert!(outside.join("a/b").is_dir(), "nothing removed outside");
        assert!(
            !dir.path().join("moved/a").exists(),
            "removed where it was made"
        );
    }

    #[test]
    fn atomic_write_replaces_whole_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
