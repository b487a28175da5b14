//! The driver's log as the dead node's disk had it: when the node that ran a job's driver
//! dies, Ray's copy of the log dies with it, and the log argus streamed runs a little
//! behind. The failure bundle, collected before the node's container is made again, holds
//! the tail of `job-driver-<id>.log` read off that container; what it has past the
//! streamed log's end is the end the stream never delivered.

use super::bundle::Manifest;
use super::{DIR, MANIFEST};
use crate::records::Records;

/// The most of a bundle's file read back.
const CAP: u64 = 64 << 20;

/// The tail of job `id`'s driver log in bundle `attempt`, as read off a node's disk.
pub fn from_bundle(records: &Records, id: &str, attempt: u32) -> Option<String> {
    let dir = format!("{DIR}/{attempt}");
    let manifest = records
        .read_file(id, &format!("{dir}/{MANIFEST}"), CAP)
        .ok()??;
    let manifest: Manifest = serde_json::from_slice(&manifest).ok()?;
    let name = format!("/ray/job-driver-{id}.log");
    let entry = manifest.files.iter().find(|f| f.path.ends_with(&name))?;
    let bytes = records
        .read_file(id, &format!("{dir}/{}", entry.path), CAP)
        .ok()??;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `streamed` with what `disk` (a tail of the same log) has after its end: the streamed
/// log's last line is found in `disk` and what follows it is appended. None when `disk`
/// adds nothing or the two cannot be lined up (the tail starts after the stream's end).
pub fn extend(streamed: &str, disk: &str) -> Option<String> {
    let last = streamed.lines().rev().find(|l| !l.trim().is_empty())?;
    let at = disk.rfind(last)?;
    let rest = disk[at + last.len()..].trim_start_matches(['\r', '\n']);
    if rest.trim().is_empty() {
        return None;
    }
    let mut out = String::with_capacity(streamed.len() + rest.len() + 1);
    out.push_str(streamed);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::extend;

    #[test]
    fn the_disks_lines_after_the_streams_end_are_appended() {
        let streamed = "a\nstep:1 - x:1\n";
        let disk = "step:1 - x:1\nstep:2 - x:2\n";
        assert_eq!(
            extend(streamed, disk).as_deref(),
            Some("a\nstep:1 - x:1\nstep:2 - x:2\n")
        );
        // Nothing new, or nothing to line up with: nothing.
        assert_eq!(extend(streamed, "a\nstep:1 - x:1\n"), None);
        assert_eq!(extend(streamed, "step:5 - x:5\n"), None);
        assert_eq!(extend("", disk), None);
    }
}
