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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::fsx::{self, Liveness, Owner};

/// How often a holder proves it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a heartbeat may stand still before another host's lock counts as abandoned.
pub const STALE_AFTER: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot take the lock {}", path.display())]
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
    dir: PathBuf,
    /// Directories made to hold the lock, removed again (when empty) after the lock
    /// itself: taking a lock leaves nothing behind. Dropped after `Drop::drop` runs.
    _made: fsx::Dirs,
    nonce: String,
    stop: Arc<AtomicBool>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
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

/// A small file of a lock, never through a link (anyone may write the storage).
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    fsx::open_regular(path)
        .ok()?
        .take(64 << 10)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn read_holder(dir: &Path) -> Option<Holder> {
    serde_json::from_str(&read_small(&dir.join("owner.json"))?).ok()
}

fn read_heartbeat(dir: &Path) -> Option<String> {
    read_small(&dir.join("heartbeat"))
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
    let parent = dir.parent().unwrap_or(Path::new("."));
    let made = fsx::Dirs::new();
    made.create_all(parent).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    acquire_in(dir, made, options, on_wait)
}

/// Takes the lock `root/rel` (e.g. `.argus/locks/prepare-<key>` below the shared root):
/// as [`acquire`], with every directory below `root` made and checked one component at a
/// time, so a link planted at `.argus/`, `.argus/locks/` or the lock itself is refused
/// ([`fsx::Unsafe`]), never followed: nothing is made or read outside `root`.
pub fn acquire_under(
    root: &Path,
    rel: &Path,
    options: &Acquire<'_>,
    on_wait: impl FnMut(&Holder),
) -> Result<Lock, Error> {
    let io = |source| Error::Io {
        path: root.join(rel),
        source,
    };
    let made = fsx::Dirs::new();
    if let Some(parent) = rel.parent() {
        made.create_under(root, parent).map_err(io)?;
    }
    let dir = fsx::under(root, rel).map_err(io)?;
    acquire_in(&dir, made, options, on_wait)
}

fn acquire_in(
    dir: &Path,
    made: fsx::Dirs,
    options: &Acquire<'_>,
    mut on_wait: impl FnMut(&Holder),
) -> Result<Lock, Error> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    let started = Instant::now();
    // The holder last seen, its heartbeat, and since when (our clock) it has not moved.
    let mut watched: Option<(Holder, Option<String>, Instant)> = None;
    loop {
        let nonce = nonce();
        match try_create(dir, &nonce) {
            Ok(true) => return Ok(Lock::start(dir.to_path_buf(), made, nonce)),
            Ok(false) => {}
            Err(e) => return Err(io(e)),
        }
        let holder = read_holder(dir);
        let beat = read_heartbeat(dir);
        let Some(holder) = holder.or_else(|| {
            // Released between our failed rename and the read: try again at once. Still
            // there with no readable owner (written by hand, or cut short): its holder is
            // unknown, and only a heartbeat that stands still tells it is gone.
            dir.exists().then(|| Holder {
                host: "an unknown host".into(),
                pid: 0,
                start: 0,
                command: "(the lock's owner.json is missing or unreadable)".into(),
                since: "unknown".into(),
                nonce: String::new(),
            })
        }) else {
            continue;
        };
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
                dir.display()
            );
            take_over(dir, &holder.nonce);
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

/// Creates the lock whole through one rename; false when it exists.
fn try_create(dir: &Path, nonce: &str) -> std::io::Result<bool> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let stem = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(fsx::temp_name(&stem));
    if let Err(e) = std::fs::create_dir(&tmp) {
        // Another lock's holder removed the (then empty) parent in between: make it again.
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(e);
        }
        std::fs::create_dir_all(parent)?;
        std::fs::create_dir(&tmp)?;
    }
    let me = Owner::me();
    let holder = holder_record(me, command_line(), nonce);
    let json = serde_json::to_vec_pretty(&holder).map_err(std::io::Error::other)?;
    let filled = fsx::write_atomic(&tmp.join("owner.json"), &json)
        .and_then(|()| fsx::write_atomic(&tmp.join("heartbeat"), b"0"));
    if let Err(e) = filled {
        let _ = fsx::remove_any(&tmp);
        return Err(e);
    }
    // rename(2) of a directory onto an existing non-empty directory fails: atomic test-and-set.
    match std::fs::rename(&tmp, dir) {
        Ok(()) => {
            let _ = fsx::fsync_dir(parent);
            Ok(true)
        }
        Err(e) => {
            let _ = fsx::remove_any(&tmp);
            let exists = matches!(
                e.raw_os_error(),
                Some(libc_errno::ENOTEMPTY | libc_errno::EEXIST)
            ) || e.kind() == std::io::ErrorKind::AlreadyExists
                || e.kind() == std::io::ErrorKind::DirectoryNotEmpty;
            if exists { Ok(false) } else { Err(e) }
        }
    }
}

mod libc_errno {
    pub const EEXIST: i32 = 17;
    pub const ENOTEMPTY: i32 = 39;
}

/// Moves the stale lock aside and removes it, if it is still the one judged stale; puts
/// back a lock that was renewed in the meantime.
fn take_over(dir: &Path, stale_nonce: &str) {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let aside = parent.join(fsx::temp_name("stale-lock"));
    if std::fs::rename(dir, &aside).is_err() {
        return; // someone else moved it first
    }
    match read_holder(&aside) {
        Some(h) if h.nonce != stale_nonce => {
            // A fresh holder took it between our look and our rename: give it back.
            if std::fs::rename(&aside, dir).is_err() {
                tracing::warn!(
                    "the lock {} changed hands during a takeover; {} keeps running without it",
                    dir.display(),
                    h
                );
            }
        }
        _ => {
            let _ = fsx::remove_any(&aside);
        }
    }
}

impl Lock {
    fn start(dir: PathBuf, made: fsx::Dirs, nonce: String) -> Lock {
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let stop = stop.clone();
            let dir = dir.clone();
            let nonce = nonce.clone();
            std::thread::Builder::new()
                .name("argus-lock-heartbeat".into())
                .spawn(move || {
                    let mut n: u64 = 0;
                    let mut slept = Duration::ZERO;
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(POLL);
                        slept += POLL;
                        if slept < HEARTBEAT {
                            continue;
                        }
                        slept = Duration::ZERO;
                        n += 1;
                        if read_holder(&dir).is_none_or(|h| h.nonce != nonce) {
                            tracing::warn!("the lock {} is no longer ours", dir.display());
                            return;
                        }
                        let _ = fsx::write_atomic(&dir.join("heartbeat"), n.to_string().as_bytes());
                    }
                })
                .ok()
        };
        Lock {
            dir,
            _made: made,
            nonce,
            stop,
            heartbeat,
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.heartbeat.take() {
            let _ = thread.join();
        }
        if read_holder(&self.dir).is_some_and(|h| h.nonce == self.nonce) {
            let parent = self.dir.parent().unwrap_or(Path::new("."));
            let aside = parent.join(fsx::temp_name("released-lock"));
            if std::fs::rename(&self.dir, &aside).is_ok() {
                let _ = fsx::remove_any(&aside);
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
        assert_ne!(read_holder(&dir).unwrap().nonce, "dead");
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
        assert_eq!(read_holder(&dir).unwrap().nonce, "far");
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
}
