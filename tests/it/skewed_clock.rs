//! A host whose clock is a year ahead, as far as its Docker Engine's answers tell: a Unix
//! socket in front of an emulated host's engine socket that passes every byte both ways
//! (requests, answers, the attached streams of containers) and rewrites only the year of
//! `"SystemTime":"YYYY-...` in what the engine sends. Same length, so `Content-Length` and
//! chunk sizes stay right.
//!
//! Every emulated host runs on this machine's kernel, and CLOCK_REALTIME has no namespace
//! (time namespaces shift only the monotonic and boot clocks); dockerd reads the time
//! through the vDSO, which libfaketime's LD_PRELOAD does not reach. The engine's own
//! report of its time is what `argus doctor` reads, so this is where a skew can be faked.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const PATTERN: &[u8] = b"\"SystemTime\":\"";
/// The pattern and the year's four digits.
const SPAN: usize = PATTERN.len() + 4;

/// The proxy; stopped (and its socket removed) when dropped.
pub struct SkewedEngine {
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl SkewedEngine {
    /// Listens at `listen`, forwarding to the engine socket at `upstream`.
    pub fn start(listen: &Path, upstream: &Path) -> SkewedEngine {
        let _ = std::fs::remove_file(listen);
        let listener = UnixListener::bind(listen).expect("bind the proxy's socket");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let upstream = upstream.to_path_buf();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(engine) = UnixStream::connect(&upstream) else {
                    continue;
                };
                let (c2, e2) = (
                    client.try_clone().expect("clone"),
                    engine.try_clone().expect("clone"),
                );
                std::thread::spawn(move || pass(client, engine, false));
                std::thread::spawn(move || pass(e2, c2, true));
            }
        });
        SkewedEngine {
            path: listen.to_path_buf(),
            stop,
        }
    }

    /// `unix://<path>`, for a profile's `docker:`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for SkewedEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which sees the flag.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Copies `from` to `to` until either ends (rewriting the year when `skew`), then shuts the
/// other direction's writer so that its peer sees the end.
fn pass(mut from: UnixStream, mut to: UnixStream, skew: bool) {
    let mut held: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        held.extend_from_slice(&buf[..n]);
        let keep = if skew { rewrite(&mut held) } else { 0 };
        let ready = held.len() - keep;
        if to.write_all(&held[..ready]).is_err() {
            break;
        }
        held.drain(..ready);
    }
    let _ = to.write_all(&held);
    let _ = to.shutdown(std::net::Shutdown::Write);
    let _ = from.shutdown(std::net::Shutdown::Read);
}

/// Adds one to every complete year after the pattern in `bytes`; the number of bytes at
/// the end that may begin a match not yet complete (held back until more arrive).
fn rewrite(bytes: &mut [u8]) -> usize {
    let mut at = 0;
    while at + SPAN <= bytes.len() {
        if bytes[at..].starts_with(PATTERN) {
            let year = &mut bytes[at + PATTERN.len()..at + SPAN];
            if let Some(next) = std::str::from_utf8(year)
                .ok()
                .and_then(|y| y.parse::<u16>().ok())
                .map(|y| format!("{:04}", y + 1))
                .filter(|y| y.len() == 4)
            {
                year.copy_from_slice(next.as_bytes());
            }
            at += SPAN;
        } else {
            at += 1;
        }
    }
    // The longest tail that is the start of a match.
    (1..SPAN.min(bytes.len() + 1))
        .rev()
        .find(|&k| could_begin(&bytes[bytes.len() - k..]))
        .unwrap_or(0)
}

/// `tail` is the beginning of the pattern followed by digits.
fn could_begin(tail: &[u8]) -> bool {
    tail.iter().enumerate().all(|(i, b)| match PATTERN.get(i) {
        Some(p) => p == b,
        None => b.is_ascii_digit(),
    })
}

#[test]
fn the_year_is_rewritten_even_across_reads() {
    let mut whole = br#"{"ID":"x","SystemTime":"2026-11-26T10:00:00Z"}"#.to_vec();
    assert_eq!(rewrite(&mut whole), 0);
    assert!(String::from_utf8_lossy(&whole).contains("\"SystemTime\":\"2027-11-26"));
    let mut first = br#"{"ID":"x","SystemTi"#.to_vec();
    assert_eq!(rewrite(&mut first), 9);
    let mut joined = first[first.len() - 9..].to_vec();
    joined.extend_from_slice(br#"me":"2026-11-26T10:00:00Z"}"#);
    rewrite(&mut joined);
    assert!(String::from_utf8_lossy(&joined).starts_with("\"SystemTime\":\"2027"));
}
