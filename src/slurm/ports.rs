//! Port slots: two Slurm jobs on one node must not collide on host-network ports.
//!
//! Each job takes one slot on all of its nodes; slot `s` owns host-mode port blocks `2s`
//! (the head, or a node's worker) and `2s + 1` (the first node's worker), the head's GCS
//! and dashboard ports inside block `2s`. A claim is a file on the shared storage,
//! `<shared>/.argus/slurm-slots/<node>/job-<id>`, holding the slot: the batch step
//! writes the job's claim on every node, reads the claims back, and gives way (takes the
//! next free slot) when a live job with a smaller id claimed the same slot on a node of
//! its own. A claim of a job Slurm no longer runs counts for nothing and is removed.
//! Files and renames only: no `flock`, which NFS does not honour.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::Error;
use crate::cluster::plan::block_base;
use crate::config::profile::MAX_HOST_MODE_NODES;
use crate::fsx::{Dir, Kind};

/// Slots per node: two port blocks each.
pub const SLOTS: u32 = MAX_HOST_MODE_NODES / 2;
/// Within the slot's first block: the GCS and the dashboard.
pub const GCS_OFFSET: u32 = 10;
pub const DASHBOARD_OFFSET: u32 = 11;

/// The first port block of a slot.
pub fn first_block(slot: u32) -> u32 {
    2 * slot
}

/// (GCS port, dashboard port) of a slot.
pub fn head_ports(slot: u32) -> (u16, u16) {
    let base = block_base(first_block(slot));
    // SLOTS keeps every block below 65536.
    let port = |offset: u32| u16::try_from(base + offset).unwrap_or(u16::MAX);
    (port(GCS_OFFSET), port(DASHBOARD_OFFSET))
}

/// The lowest slot no other claim holds.
pub fn choose(taken: &BTreeSet<u32>) -> Option<u32> {
    (0..SLOTS).find(|s| !taken.contains(s))
}

/// True when `me` must give way on `slot`: a job with a smaller id claims it too.
pub fn must_yield(me: u64, slot: u32, others: &[(u64, u32)]) -> bool {
    others.iter().any(|&(job, s)| s == slot && job < me)
}

/// What a claim file is named.
fn claim_name(job: u64) -> String {
    format!("job-{job}")
}

/// The most a claim file is read of (it holds a slot number).
const CLAIM_CAP: u64 = 64;

/// The claims of other jobs on `node` that are still alive (dead ones are removed), read
/// through the handle of the node's directory.
fn live_claims(
    slots: &Dir,
    node: &str,
    me: u64,
    alive: &mut dyn FnMut(u64) -> bool,
) -> Vec<(u64, u32)> {
    let Ok(dir) = slots.open_dir(node) else {
        return Vec::new();
    };
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, kind) in entries {
        let Some(job) = name
            .to_str()
            .and_then(|n| n.strip_prefix("job-"))
            .and_then(|j| j.parse::<u64>().ok())
        else {
            continue;
        };
        if job == me || kind != Kind::File {
            continue;
        }
        let Some(slot) = dir
            .read(&name, CLAIM_CAP)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if alive(job) {
            out.push((job, slot));
        } else {
            let _ = dir.remove_file(&name);
        }
    }
    out
}

/// Claims a slot for job `me` on every node in `nodes`; `slots` is the held handle of
/// `<shared>/.argus/slurm-slots`.
pub fn claim(
    slots: &Dir,
    me: u64,
    nodes: &[String],
    alive: &mut dyn FnMut(u64) -> bool,
) -> Result<u32, Error> {
    let io = |path: PathBuf| move |source| Error::Io { path, source };
    let mut refused = BTreeSet::new();
    for _ in 0..=SLOTS {
        let mut others = Vec::new();
        for node in nodes {
            others.extend(live_claims(slots, node, me, alive));
        }
        let mut taken: BTreeSet<u32> = others.iter().map(|&(_, s)| s).collect();
        taken.extend(refused.iter().copied());
        let slot = choose(&taken).ok_or(Error::NoPortSlot {
            nodes: nodes.join(","),
        })?;
        for node in nodes {
            let dir = slots
                .create_dirs(node, &mut |_| {})
                .map_err(io(slots.display(node)))?;
            let name = claim_name(me);
            dir.write_atomic(&name, format!("{slot}\n").as_bytes())
                .map_err(io(dir.display(&name)))?;
        }
        // Read back: a smaller job id that chose the same slot at the same time wins.
        let mut after = Vec::new();
        for node in nodes {
            after.extend(live_claims(slots, node, me, alive));
        }
        if !must_yield(me, slot, &after) {
            return Ok(slot);
        }
        refused.insert(slot);
    }
    Err(Error::NoPortSlot {
        nodes: nodes.join(","),
    })
}

/// Removes job `me`'s claims.
pub fn release(slots: &Dir, me: u64, nodes: &[String]) {
    for node in nodes {
        if let Ok(dir) = slots.open_dir(node) {
            let _ = dir.remove_file(claim_name(me));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_own_disjoint_blocks_with_the_head_ports_inside() {
        assert_eq!(SLOTS, 22);
        assert_eq!(head_ports(0), (20010, 20011));
        assert_eq!(head_ports(1), (22010, 22011));
        let (gcs, dash) = head_ports(SLOTS - 1);
        assert!(u32::from(dash) < block_base(first_block(SLOTS - 1) + 1));
        assert!(gcs > 0);
    }

    #[test]
    fn choosing_and_yielding() {
        assert_eq!(choose(&BTreeSet::new()), Some(0));
        assert_eq!(choose(&BTreeSet::from([0, 1, 3])), Some(2));
        assert_eq!(choose(&(0..SLOTS).collect()), None);
        assert!(must_yield(9, 0, &[(7, 0)]));
        assert!(!must_yield(7, 0, &[(9, 0)]));
        assert!(!must_yield(9, 1, &[(7, 0)]));
    }

    #[test]
    fn two_jobs_on_shared_nodes_get_different_slots_and_dead_claims_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Dir::root(dir.path()).unwrap();
        let nodes_a = vec!["a".to_string(), "b".to_string()];
        let nodes_b = vec!["b".to_string(), "c".to_string()];
        let mut all_alive = |_| true;
        let first = claim(&slots, 10, &nodes_a, &mut all_alive).unwrap();
        let second = claim(&slots, 11, &nodes_b, &mut all_alive).unwrap();
        assert_eq!((first, second), (0, 1));
        // Job 10 has ended: its slot is free again, and its claim files are removed.
        let mut only_11 = |job| job == 11;
        let third = claim(&slots, 12, &nodes_a, &mut only_11).unwrap();
        assert_eq!(third, 0);
        assert!(!dir.path().join("a/job-10").exists());
        release(&slots, 12, &nodes_a);
        assert!(!dir.path().join("a/job-12").exists());
    }

    #[test]
    fn a_smaller_job_that_raced_to_the_same_slot_wins() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = vec!["a".to_string()];
        // Job 5 wrote slot 0 on `a` at the same moment job 8 did.
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/job-5"), "0\n").unwrap();
        let slots = Dir::root(dir.path()).unwrap();
        let mut alive = |_| true;
        assert_eq!(claim(&slots, 8, &nodes, &mut alive).unwrap(), 1);
    }

    #[test]
    fn a_slots_directory_swapped_for_a_link_keeps_the_claims_inside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("a")).unwrap();
        let real = dir.path().join("shared/.argus/slurm-slots");
        std::fs::create_dir_all(real.join("a")).unwrap();
        std::fs::write(real.join("a/job-5"), "0\n").unwrap();
        let slots = Dir::root(&dir.path().join("shared"))
            .unwrap()
            .open_dir(".argus/slurm-slots")
            .unwrap();
        // Swapped after the batch step opened it: the claims still go where it was.
        let moved = dir.path().join("moved");
        std::fs::rename(&real, &moved).unwrap();
        std::os::unix::fs::symlink(&outside, &real).unwrap();
        let nodes = vec!["a".to_string(), "b".to_string()];
        let mut alive = |job| job != 5;
        assert_eq!(claim(&slots, 8, &nodes, &mut alive).unwrap(), 0);
        assert_eq!(
            std::fs::read_to_string(moved.join("a/job-8")).unwrap(),
            "0\n"
        );
        assert_eq!(
            std::fs::read_to_string(moved.join("b/job-8")).unwrap(),
            "0\n"
        );
        assert!(!moved.join("a/job-5").exists(), "the dead claim is removed");
        release(&slots, 8, &nodes);
        assert!(!moved.join("a/job-8").exists() && !moved.join("b/job-8").exists());
        // Nothing was made, read or removed outside.
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        assert_eq!(std::fs::read_dir(outside.join("a")).unwrap().count(), 0);
    }

    #[test]
    fn a_node_directory_that_is_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("job-5"), "0\n").unwrap();
        let root = dir.path().join("slots");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a")).unwrap();
        let slots = Dir::root(&root).unwrap();
        let mut dead = |_| false;
        let err = claim(&slots, 8, &["a".to_string()], &mut dead).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if crate::fsx::Unsafe::of(source).is_some()),
            "{err}"
        );
        assert_eq!(crate::exit::Classify::exit(&err), crate::exit::Exit::Usage);
        // The dead claim behind the link is neither read as ours nor removed.
        assert!(outside.join("job-5").exists());
        assert!(!outside.join("job-8").exists());
    }
}
