//! Locks that hold across processes and across hosts sharing the storage (NFS), without
//! `flock`, which NFS does not honour reliably.
//!
//! A lock is a directory `<dir>` that appears whole through one atomic rename of a
//! prepared temporary directory holding `owner.json` (host, pid, process start, command,
//! since, a random nonce). Its holder rewrites `heartbeat` every [`HEARTBEAT`] from a
//! thread. A waiter takes a lock over only when its holder is known to be gone: on the
//! same host, when the process no longer exists; on another host, when the heartbeat has
//! not changed for [`STALE_AFTER`] as measured by the waiter's own clock (no clocks of
//! two machines are ever compared). A takeover renames the stale lock aside, checks that
//! it moved the very lock it judged stale, and removes it.
//!
//! Locks live on storage that others write into. Only the caller's root is opened by
//! path; the directory that holds a lock is reached from it through handles
//! ([`fsx::Dir`]) and held open while the lock is, and everything else — the temporary
//! directory, `owner.json`, the heartbeat, the publishing rename, a takeover, the
//! release — is done relative to that handle: a directory on the way swapped for a link
//! at any moment is never followed.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::fsx::{self, Dir, Liveness, Owner};

/// How often a holder proves it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a heartbeat may stand still before another host's lock counts as abandoned.
pub const STALE_AFTER: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot take the lock {}", crate::text::shown(path))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} is locked by {holder} (waited {}s)", waited.as_secs())]
    Timeout {
        what: String,
        holder: Box<Holder>,
        waited: Duration,
    },
}

impl crate::exit::Classify for Error {
    fn exit(&self) -> crate::exit::Exit {
        match self {
            Error::Io { source, .. } => fsx::io_exit(source),
            Error::Timeout { .. } => crate::exit::Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Timeout { holder, .. } => Some(format!(
                "wait for it to finish, or stop it (pid {} on {}); a lock whose holder died is taken over by itself",
                holder.pid, holder.host
            )),
            Error::Io { source, .. } => fsx::io_hint(source).or_else(|| {
                Some("the lock lives on the shared storage: is it mounted and writable?".into())
            }),
        }
    }
}

/// Who holds a lock, as its `owner.json` says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    #[serde(default)]
    pub start: u64,
    pub command: String,
    /// RFC 3339, the holder's clock.
    pub since: String,
    pub nonce: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` (pid {} on {}, since {})",
            crate::secrets::redact_text(&self.command),
            self.pid,
            self.host,
            self.since
        )
    }
}

impl Holder {
    fn owner(&self) -> Owner {
        Owner {
            host: self.host.clone(),
            pid: self.pid,
            start: self.start,
        }
    }
}

/// A held lock; released on drop.
#[derive(Debug)]
pub struct Lock {
    /// The directory that holds the lock, held open: the lock is published, kept alive
    /// and released through this handle, so a directory on the way swapped for a link
    /// after it was opened changes nothing.
    parent: Dir,
    name: OsString,
    /// What messages show (the lock's path as the caller named it).
    shown: PathBuf,
    nonce: String,
    /// Dropped to stop the heartbeat: its thread wakes at once, not at its next beat.
    stop: Option<mpsc::Sender<()>>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
    /// Directories made to hold the lock, removed again (when empty) after the lock
    /// itself: taking a lock leaves nothing behind. Dropped after `Drop::drop` runs.
    _made: fsx::Dirs,
}

/// Options of one acquisition.
pub struct Acquire<'a> {
    /// What the lock protects, for messages (`cluster argus-local`).
    pub what: &'a str,
    /// Give up after this long (None: wait as long as the holder lives).
    pub timeout: Option<Duration>,
}

fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}

/// The longest command line a holder record keeps (characters).
const MAX_COMMAND_CHARS: usize = 200;

/// The most a lock's own file (`owner.json`, `heartbeat`) may hold: anyone may write the
/// storage, and a reader must not be made to swallow a huge file.
const FILE_CAP: u64 = 64 << 10;

/// This process's command line as recorded for other users to read: through the one
/// redaction of command lines ([`crate::secrets::redact_args`]), so a
/// `--set overrides.x.api_key=...` never reaches the shared storage in clear.
fn command_line() -> String {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    recorded_command(&args)
}

/// A command line as a holder record keeps it.
fn recorded_command(args: &[String]) -> String {
    crate::secrets::redact_args(args, MAX_COMMAND_CHARS)
}

/// The record a lock's holder writes into `owner.json`.
fn holder_record(me: &Owner, command: String, nonce: &str) -> Holder {
    Holder {
        host: me.host.clone(),
        pid: me.pid,
        start: me.start,
        command,
        since: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        nonce: nonce.to_string(),
    }
}

/// The lock `name` in `parent`, opened without following a link; None when nothing is
/// there. A link or a file at the name is refused ([`fsx::Unsafe`]).
fn open_lock(parent: &Dir, name: &OsStr) -> std::io::Result<Option<Dir>> {
    match parent.open_dir(name) {
        Ok(lock) => Ok(Some(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The holder a lock's `owner.json` names (a regular file, never through a link).
fn read_holder(lock: &Dir) -> Option<Holder> {
    serde_json::from_slice(&lock.read("owner.json", FILE_CAP).ok()?).ok()
}

fn read_heartbeat(lock: &Dir) -> Option<String> {
    String::from_utf8(lock.read("heartbeat", FILE_CAP).ok()?).ok()
}

/// Whether the lock `name` in `parent` is the one this `nonce` took.
fn is_ours(parent: &Dir, name: &OsStr, nonce: &str) -> bool {
    parent
        .open_dir(name)
        .ok()
        .and_then(|lock| read_holder(&lock))
        .is_some_and(|h| h.nonce == nonce)
}

/// Takes the lock `dir`, waiting while a live holder has it. `on_wait` is called once
/// per new holder seen (to say who is waited for). For a lock on the shared storage, use
/// [`acquire_under`]: this one trusts every directory above `dir` (a state directory of
/// this user's own).
pub fn acquire(
    dir: &Path,
    options: &Acquire<'_>,
    on_wait: impl FnMut(&Holder),
) -> Result<Lock, Error> {
    let Some(name) = dir.file_name() else {
        return Err(Error::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a lock is a directory with a name of its own",
            ),
        });
    };
    let root = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    acquire_in(
        root,
        Path::new(""),
        name,
        dir.to_path_buf(),
        options,
        on_wait,
    )
}

/// Takes the lock `root/rel` (e.g. `.argus/locks/prepare-<key>` below the shared root):
/// as [`acquire`], with only `root` opened by path. Every directory below it is made and
/// opened from its parent's handle without following a link, and the lock is made, read,
/// kept alive and released relative to the handle of the directory that holds it: a link
/// planted at `.argus/`, `.argus/locks/` or the lock itself is refused ([`fsx::Unsafe`]),
/// and one swapped in later is never followed. Nothing is made, read or removed outside
/// `root`.
pub fn acquire_under(
    root: &Path,
    rel: &Path,
    options: &Acquire<'_>,
    on_wait: impl FnMut(&Holder),
) -> Result<Lock, Error> {
    let shown = root.join(rel);
    let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
        return Err(Error::Io {
            path: shown,
            source: fsx::Unsafe::Escapes {
                root: root.to_path_buf(),
                rel: rel.to_path_buf(),
            }
            .into(),
        });
    };
    acquire_in(root, parent, name, shown, options, on_wait)
}

/// The one implementation of both: the lock `name` in `root/parent_rel`.
fn acquire_in(
    root: &Path,
    parent_rel: &Path,
    name: &OsStr,
    shown: PathBuf,
    options: &Acquire<'_>,
    mut on_wait: impl FnMut(&Holder),
) -> Result<Lock, Error> {
    let io = |source| Error::Io {
        path: shown.clone(),
        source,
    };
    let made = fsx::Dirs::new();
    // The root is the caller's (a mount, or a state directory of its own), made as it is
    // named when missing; below it, every directory is made and opened through handles.
    let open_parent = |made: &fsx::Dirs| {
        made.create_all(root)?;
        made.create_in(&Dir::root(root)?, parent_rel)
    };
    let mut parent = open_parent(&made).map_err(io)?;
    let started = Instant::now();
    // The holder last seen, its heartbeat, and since when (our clock) it has not moved.
    let mut watched: Option<(Holder, Option<String>, Instant)> = None;
    loop {
        let nonce = nonce();
        let created = match try_create(&parent, name, &nonce) {
            // The parent was emptied and removed (by another lock's release) since it was
            // opened: make it again, through handles from the root as before. On NFS a
            // handle on a directory another host removed answers ESTALE, not ENOENT.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ESTALE) =>
            {
                parent = open_parent(&made).map_err(io)?;
                try_create(&parent, name, &nonce)
            }
            other => other,
        };
        if created.map_err(io)? {
            return Ok(Lock::start(parent, name.to_os_string(), shown, made, nonce));
        }
        let Some(lock) = open_lock(&parent, name).map_err(io)? else {
            // Released between our failed rename and the look: try again at once.
            continue;
        };
        // No readable owner (written by hand, or cut short): its holder is unknown, and
        // only a heartbeat that stands still tells it is gone.
        let holder = read_holder(&lock).unwrap_or_else(|| Holder {
            host: "an unknown host".into(),
            pid: 0,
            start: 0,
            command: "(the lock's owner.json is missing or unreadable)".into(),
            since: "unknown".into(),
            nonce: String::new(),
        });
        let beat = read_heartbeat(&lock);
        drop(lock);
        let liveness = if holder.nonce.is_empty() {
            Liveness::OtherHost
        } else {
            holder.owner().liveness()
        };
        let stale = match liveness {
            Liveness::Dead => true,
            Liveness::Alive => false,
            Liveness::OtherHost => match &watched {
                Some((h, b, since)) if h.nonce == holder.nonce && *b == beat => {
                    since.elapsed() >= STALE_AFTER
                }
                _ => false,
            },
        };
        let new_holder = watched
            .as_ref()
            .is_none_or(|(h, _, _)| h.nonce != holder.nonce);
        let moved = watched.as_ref().is_some_and(|(_, b, _)| *b != beat);
        if new_holder {
            on_wait(&holder);
        }
        if new_holder || moved {
            watched = Some((holder.clone(), beat, Instant::now()));
        }
        if stale {
            tracing::warn!(
                "taking over the lock {} from {holder}, which is gone",
                shown.display()
            );
            take_over(&parent, name, &holder.nonce);
            watched = None;
            continue;
        }
        if let Some(limit) = options.timeout
            && started.elapsed() >= limit
        {
            return Err(Error::Timeout {
                what: options.what.to_string(),
                holder: Box::new(holder),
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Creates the lock `name` in `parent` whole through one rename; false when something is
/// at the name already.
fn try_create(parent: &Dir, name: &OsStr, nonce: &str) -> std::io::Result<bool> {
    let tmp_name = fsx::temp_name(&name.to_string_lossy());
    let tmp = parent.create_dir(&tmp_name, 0o755)?;
    let me = Owner::me();
    let holder = holder_record(me, command_line(), nonce);
    let json = serde_json::to_vec_pretty(&holder).map_err(std::io::Error::other)?;
    let filled = tmp
        .write_atomic("owner.json", &json)
        .and_then(|()| tmp.write_atomic("heartbeat", b"0"));
    drop(tmp);
    if let Err(e) = filled {
        let _ = parent.remove_all(&tmp_name);
        return Err(e);
    }
    // renameat(2) of a directory onto an existing non-empty directory fails: an atomic
    // test-and-set. Onto a link or a file it fails too (ENOTDIR): the look that follows
    // refuses what is there.
    match parent.rename(&tmp_name, parent, name) {
        Ok(()) => {
            let _ = parent.sync();
            Ok(true)
        }
        Err(e) => {
            let _ = parent.remove_all(&tmp_name);
            let taken = matches!(
                e.raw_os_error(),
                Some(libc::ENOTEMPTY | libc::EEXIST | libc::ENOTDIR)
            );
            if taken { Ok(false) } else { Err(e) }
        }
    }
}

/// Moves the stale lock aside and removes it, if it is still the one judged stale; puts
/// back a lock that was renewed in the meantime. All within `parent`'s handle.
fn take_over(parent: &Dir, name: &OsStr, stale_nonce: &str) {
    let aside = fsx::temp_name("stale-lock");
    if parent.rename(name, parent, &aside).is_err() {
        return; // someone else moved it first
    }
    let moved = parent
        .open_dir(&aside)
        .ok()
        .and_then(|lock| read_holder(&lock));
    match moved {
        Some(h) if h.nonce != stale_nonce => {
            // A fresh holder took it between our look and our rename: give it back.
            if parent.rename(&aside, parent, name).is_err() {
                tracing::warn!(
                    "the lock {} changed hands during a takeover; {} keeps running without it",
                    parent.display(name).display(),
                    h
                );
            }
        }
        _ => {
            let _ = parent.remove_all(&aside);
        }
    }
}

impl Lock {
    fn start(parent: Dir, name: OsString, shown: PathBuf, made: fsx::Dirs, nonce: String) -> Lock {
        let (stop, stopped) = mpsc::channel();
        let heartbeat = match parent.try_clone() {
            Ok(dir) => {
                let name = name.clone();
                let shown = shown.clone();
                let nonce = nonce.clone();
                std::thread::Builder::new()
                    .name("argus-lock-heartbeat".into())
                    .spawn(move || beat(&dir, &name, &shown, &nonce, &stopped))
                    .ok()
            }
            Err(e) => {
                tracing::warn!("the lock {} gets no heartbeat: {e}", shown.display());
                None
            }
        };
        Lock {
            parent,
            name,
            shown,
            nonce,
            stop: Some(stop),
            heartbeat,
            _made: made,
        }
    }

    /// The lock's path, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }
}

/// The heartbeat thread: every [`HEARTBEAT`], while the lock `name` in `dir` is still
/// ours, rewrites its `heartbeat` through the lock's handle; ends as soon as `stopped`'s
/// sender is dropped.
fn beat(dir: &Dir, name: &OsStr, shown: &Path, nonce: &str, stopped: &mpsc::Receiver<()>) {
    let mut n: u64 = 0;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(HEARTBEAT) {
        n += 1;
        let lock = dir.open_dir(name).ok();
        let Some(lock) = lock.filter(|l| read_holder(l).is_some_and(|h| h.nonce == nonce)) else {
            tracing::warn!("the lock {} is no longer ours", shown.display());
            return;
        };
        let _ = lock.write_atomic("heartbeat", n.to_string().as_bytes());
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.heartbeat.take() {
            let _ = thread.join();
        }
        if is_ours(&self.parent, &self.name, &self.nonce) {
            let aside = fsx::temp_name("released-lock");
            if self.parent.rename(&self.name, &self.parent, &aside).is_ok() {
                let _ = self.parent.remove_all(&aside);
                let _ = self.parent.sync();
            }
        }
    }
}

/// The message shown while waiting for `holder`.
pub fn waiting_message(what: &str, holder: &Holder) -> String {
    format!("waiting for {what}: locked by {holder}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder_at(dir: &Path) -> Option<Holder> {
        read_holder(&Dir::root(dir).ok()?)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn opts(timeout_ms: u64) -> Acquire<'static> {
        Acquire {
            what: "test",
            timeout: Some(Duration::from_millis(timeout_ms)),
        }
    }

    #[test]
    fn a_second_taker_waits_and_names_the_holder() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("x.lock");
        let held = acquire(&dir, &opts(100), |_| {}).unwrap();
        let mut seen = Vec::new();
        let err = acquire(&dir, &opts(300), |h| seen.push(h.clone())).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].pid, std::process::id());
        drop(held);
        assert!(!dir.exists());
        let again = acquire(&dir, &opts(100), |_| {}).unwrap();
        drop(again);
        // Nothing but the (now absent) lock was ever left in the parent.
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_dead_holder_on_this_host_is_taken_over_at_once() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("x.lock");
        std::fs::create_dir(&dir).unwrap();
        let me = Owner::me();
        let dead = Holder {
            host: me.host.clone(),
            pid: me.pid,
            start: me.start + 3,
            command: "argus up".into(),
            since: "2026-01-01T00:00:00Z".into(),
            nonce: "dead".into(),
        };
        std::fs::write(dir.join("owner.json"), serde_json::to_vec(&dead).unwrap()).unwrap();
        let lock = acquire(&dir, &opts(2000), |_| {}).unwrap();
        assert_ne!(holder_at(&dir).unwrap().nonce, "dead");
        drop(lock);
    }

    #[test]
    fn a_lock_with_an_unreadable_owner_names_that_and_waits_for_its_heartbeat() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("x.lock");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("owner.json"), "garbage{").unwrap();
        let mut seen = Vec::new();
        let err = acquire(&dir, &opts(400), |h| seen.push(h.command.clone())).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(seen, ["(the lock's owner.json is missing or unreadable)"]);
    }

    #[test]
    fn another_hosts_lock_with_a_live_heartbeat_is_not_taken() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("x.lock");
        std::fs::create_dir(&dir).unwrap();
        let far = Holder {
            host: "some-other-host".into(),
            pid: 1,
            start: 1,
            command: "argus up".into(),
            since: "2026-01-01T00:00:00Z".into(),
            nonce: "far".into(),
        };
        std::fs::write(dir.join("owner.json"), serde_json::to_vec(&far).unwrap()).unwrap();
        std::fs::write(dir.join("heartbeat"), "1").unwrap();
        let err = acquire(&dir, &opts(400), |_| {}).unwrap_err();
        assert!(
            err.to_string().contains("pid 1 on some-other-host"),
            "{err}"
        );
        assert_eq!(holder_at(&dir).unwrap().nonce, "far");
    }
    #[test]
    fn the_holder_record_never_carries_a_secret_from_the_command_line() {
        let args = [
            "argus",
            "run",
            "job.yaml",
            "--set",
            "overrides.x.api_key=a$b'c\\d-clear",
        ]
        .map(String::from);
        let record = holder_record(Owner::me(), recorded_command(&args), "n");
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("a$b"), "{json}");
        assert!(json.contains("overrides.x.api_key=<redacted>"), "{json}");
        let shown = waiting_message("run x", &record);
        assert!(!shown.contains("a$b"), "{shown}");
        // What this process records goes through the same function.
        assert!(command_line().chars().count() <= MAX_COMMAND_CHARS);
    }

    #[test]
    fn a_lock_below_a_planted_link_is_refused_and_nothing_is_made_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("shared"), dir.path().join("outside"));
        std::fs::create_dir_all(root.join(".argus")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let rel = Path::new(".argus/locks/prepare-x");
        for planted in [".argus/locks", ".argus/locks/prepare-x"] {
            std::os::unix::fs::symlink(&outside, root.join(planted)).unwrap();
            let err = acquire_under(&root, rel, &opts(100), |_| {}).unwrap_err();
            assert!(
                matches!(&err, Error::Io { source, .. } if matches!(fsx::Unsafe::of(source), Some(fsx::Unsafe::Link { .. }))),
                "{planted}: {err}"
            );
            assert_eq!(crate::exit::Classify::exit(&err), crate::exit::Exit::Usage);
            assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
            std::fs::remove_file(root.join(planted)).unwrap();
            if planted.ends_with("prepare-x") {
                continue;
            }
            std::fs::create_dir(root.join(planted)).unwrap();
        }
        let lock = acquire_under(&root, rel, &opts(100), |_| {}).unwrap();
        assert!(root.join(rel).join("owner.json").is_file());
        drop(lock);
    }

    #[test]
    fn a_lock_whose_directory_is_swapped_for_a_link_beats_and_is_released_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("shared"), dir.path().join("outside"));
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(root.join(".argus/locks")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let rel = Path::new(".argus/locks/prepare-x");
        let lock = acquire_under(&root, rel, &opts(100), |_| {}).unwrap();
        assert_eq!(lock.path(), root.join(rel));
        crate::fsx::swap_for_link(&root.join(".argus/locks"), &moved, &outside);
        // The heartbeat goes on in the real lock, through the handle.
        std::thread::sleep(HEARTBEAT + Duration::from_millis(700));
        let beat = std::fs::read_to_string(moved.join("prepare-x/heartbeat")).unwrap();
        assert_ne!(beat, "0", "the heartbeat stood still");
        drop(lock);
        assert!(
            names(&moved).is_empty(),
            "released where it is: {:?}",
            names(&moved)
        );
        assert!(
            names(&outside).is_empty(),
            "made outside: {:?}",
            names(&outside)
        );
    }

    #[test]
    fn a_waiter_whose_directory_is_swapped_for_a_link_takes_the_lock_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("shared"), dir.path().join("outside"));
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(root.join(".argus/locks")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let rel = Path::new(".argus/locks/prepare-x");
        let first = acquire_under(&root, rel, &opts(100), |_| {}).unwrap();
        let (waiting, waits) = std::sync::mpsc::channel();
        let second = std::thread::spawn({
            let root = root.clone();
            move || {
                acquire_under(&root, rel, &opts(10_000), |_| {
                    let _ = waiting.send(());
                })
            }
        });
        waits.recv().unwrap();
        // The waiter holds the locks directory open: swap it, then let the first go.
        crate::fsx::swap_for_link(&root.join(".argus/locks"), &moved, &outside);
        drop(first);
        let second = second.join().unwrap().unwrap();
        assert_eq!(
            holder_at(&moved.join("prepare-x")).unwrap().nonce,
            second.nonce
        );
        assert!(
            names(&outside).is_empty(),
            "made outside: {:?}",
            names(&outside)
        );
        drop(second);
        assert!(names(&moved).is_empty(), "{:?}", names(&moved));
        assert!(
            names(&outside).is_empty(),
            "made outside: {:?}",
            names(&outside)
        );
    }

    #[test]
    fn directories_made_for_a_lock_are_removed_where_they_are_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("shared"), dir.path().join("outside"));
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(&root).unwrap();
        // Outside: an empty directory where the swapped link would lead a removal by path.
        std::fs::create_dir_all(outside.join("locks")).unwrap();
        let lock = acquire_under(&root, Path::new(".argus/locks/x"), &opts(100), |_| {}).unwrap();
        assert!(root.join(".argus/locks/x/owner.json").is_file());
        crate::fsx::swap_for_link(&root.join(".argus"), &moved, &outside);
        drop(lock);
        assert!(outside.join("locks").is_dir(), "removed outside");
        assert!(names(&moved).is_empty(), "{:?}", names(&moved));
    }

    #[test]
    fn a_lock_in_a_missing_state_directory_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let lock_dir = dir.path().join("state/argus/locks/x.lock");
        let lock = acquire(&lock_dir, &opts(100), |_| {}).unwrap();
        assert_eq!(holder_at(&lock_dir).unwrap().nonce, lock.nonce);
        drop(lock);
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }
}
