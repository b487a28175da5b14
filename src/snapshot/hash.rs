//! Content hashing: sha256 of every file, streamed (no whole-file buffers), in parallel;
//! the tree hash covers paths, permission bits (of directories too, when not the usual
//! 0755), link targets and bytes.
//!
//! A file is read through one descriptor whose metadata must be what the walk saw, before
//! and after the read: a file written to, truncated or replaced meanwhile is an error
//! ([`Error::Changed`]), never a digest of bytes that were never there all at once.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

use crate::digest::hex;

use super::manifest::FileRecord;
use super::walk::{DEFAULT_DIR_MODE, Entry, GitState, Stamp};
use super::{Error, io, source_io};
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
            entry.sha256 = read_unchanged(&entry, std::io::sink())?;
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(200) {
            task.update(&format!("hashed {n}/{total} files"));
        }
        Ok(entry)
    })
}

/// Streams the file of `entry` into `sink` and returns the sha256 of exactly the bytes
/// written there. The file is opened without following a link at its name; its metadata
/// must match what the walk saw before the first byte and after the last, and the bytes
/// must add up to the size the walk saw: otherwise it changed meanwhile
/// ([`Error::Changed`]).
pub fn read_unchanged(entry: &Entry, mut sink: impl Write) -> Result<String, Error> {
    let path = &entry.source;
    let changed = || Error::Changed { path: path.clone() };
    let mut file = crate::fsx::open_regular(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => changed(),
        _ if crate::fsx::Unsafe::of(&e).is_some() => changed(),
        _ => source_io("cannot read", path)(e),
    })?;
    let stamp = |file: &std::fs::File| {
        file.metadata()
            .map(|m| Stamp::of(&m))
            .map_err(source_io("cannot read", path))
    };
    if stamp(&file)? != entry.stamp {
        return Err(changed());
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(source_io("cannot read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        sink.write_all(&buffer[..n])
            .map_err(io("cannot write a copy of", path))?;
        total += n as u64;
    }
    if total != entry.stamp.size || stamp(&file)? != entry.stamp {
        return Err(changed());
    }
    Ok(hex(&hasher.finalize()))
}

/// One hash for the whole tree: every entry's path, kind and content, in path order.
pub fn tree_hash(entries: &[Entry]) -> String {
    let records: Vec<FileRecord> = entries.iter().map(FileRecord::from).collect();
    records_tree_hash(&records)
}

/// The tree hash of a manifest's records: what `tree_hash` gives the tree they describe,
/// so a manifest can be checked against its own id.
///
/// Each record is `<kind>\0<sha256 or link target>\0<path>\n`. The kind is `f` (mode
/// 0444), `x` (0555), `l` (a link), `m<octal mode>` (a file of any other mode) or
/// `d<octal mode>` (a directory, with an empty second part): the first two are what every
/// snapshot had before modes were kept, and a directory of mode 0755 (what every snapshot
/// had before directory modes were kept) has no record at all, so those ids stay the
/// same. No part holds a NUL and the kind holds no newline, so the encoding is
/// unambiguous.
pub fn records_tree_hash(records: &[FileRecord]) -> String {
    let mut hasher = Sha256::new();
    for record in records {
        match (&record.link, &record.sha256) {
            _ if record.dir => {
                if record.mode() == DEFAULT_DIR_MODE {
                    continue;
                }
                hasher.update(format!("d{:o}\0", record.mode()).as_bytes());
            }
            (Some(target), _) => {
                hasher.update(b"l\0");
                hasher.update(target.as_bytes());
            }
            (None, sha) => {
                match record.mode() {
                    0o444 => hasher.update(b"f\0"),
                    0o555 => hasher.update(b"x\0"),
                    other => hasher.update(format!("m{other:o}\0").as_bytes()),
                }
                hasher.update(sha.as_deref().unwrap_or("").as_bytes());
            }
        }
        hasher.update(b"\0");
        hasher.update(record.path.as_bytes());
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
