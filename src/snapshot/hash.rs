//! Content hashing: sha256 of every file, streamed (no whole-file buffers), in parallel;
//! the tree hash covers paths, executable bits, link targets and bytes.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

pub use crate::digest::file_sha256;
use crate::digest::hex;

use super::walk::{Entry, GitState, Kind};
use super::{Error, io};
use crate::ui::Task;

/// Runs `work` on every item with one thread per core; the first error wins.
pub fn parallel<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    let results: Vec<Mutex<Option<Result<R, Error>>>> =
        slots.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = slots.get(i) else { break };
                    let Some(item) = slot.lock().ok().and_then(|mut s| s.take()) else {
                        continue;
                    };
                    let result = work(item);
                    let failed = result.is_err();
                    if let Ok(mut r) = results[i].lock() {
                        *r = Some(result);
                    }
                    if failed {
                        // Stop the others early.
                        next.store(slots.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut out = Vec::with_capacity(results.len());
    for result in results {
        match result.into_inner().ok().flatten() {
            Some(r) => out.push(r?),
            None => continue,
        }
    }
    Ok(out)
}

/// Fills in each file's sha256.
pub fn hash_entries(
    _root: &Path,
    entries: Vec<Entry>,
    task: &dyn Task,
) -> Result<Vec<Entry>, Error> {
    let total = entries.len();
    let done = AtomicUsize::new(0);
    parallel(entries, |mut entry| {
        if entry.is_file() {
            entry.sha256 = file_sha256(&entry.source).map_err(io("cannot read", &entry.source))?;
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(200) {
            task.update(&format!("hashed {n}/{total} files"));
        }
        Ok(entry)
    })
}

/// One hash for the whole tree: every entry's path, kind and content, in path order.
pub fn tree_hash(entries: &[Entry]) -> String {
    let mut hasher = Sha256::new();
    for entry in entries {
        match &entry.kind {
            Kind::File { executable } => {
                hasher.update(if *executable { b"x\0" } else { b"f\0" });
                hasher.update(entry.sha256.as_bytes());
            }
            Kind::Symlink { target } => {
                hasher.update(b"l\0");
                hasher.update(target.as_bytes());
            }
        }
        hasher.update(b"\0");
        hasher.update(entry.rel.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

/// `<git short commit>[-dirty]-<first 12 of the tree hash>`, or just the hash outside git.
pub fn derive_code_id(tree_hash: &str, git: Option<&GitState>) -> String {
    let short = &tree_hash[..12.min(tree_hash.len())];
    match git {
        Some(g) if g.dirty => format!("{}-dirty-{short}", g.commit),
        Some(g) => format!("{}-{short}", g.commit),
        None => short.to_string(),
    }
}
