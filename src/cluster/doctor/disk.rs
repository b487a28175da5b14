//! `disk_shared` and `disk_engine`: free space on the shared storage as the host mounts it
//! (datasets, the HF cache, checkpoints, job records) and on the engine's data root (image
//! layers, the containers' own files: Ray's logs and spilled objects under /tmp).
//!
//! Bounds: under 1 GiB fails (a checkpoint, a spilled object or an image layer will not
//! fit; Docker refuses to create containers on a full data root); under 10 GiB warns (one
//! checkpoint of a 1.5B-parameter model with its optimizer state is about 18 GB; the verl
//! image is about 8 GB).

use crate::ui::human_bytes;

use super::probe::Space;
use super::{Check, Status};

pub const FAIL_UNDER: u64 = 1 << 30;
pub const WARN_UNDER: u64 = 10 << 30;

/// One of the two checks: `name`, what it is (`the shared storage at /mnt/nfs`), its space.
pub fn check(name: &'static str, what: &str, space: Option<Space>, fix: &str) -> Check {
    let Some(space) = space else {
        return Check {
            name,
            status: Status::Unknown,
            seen: format!("the free space of {what} could not be read"),
            why: "a full disk fails checkpoints, records and container starts".into(),
            fix: String::new(),
        };
    };
    let seen = format!(
        "{} free of {} on {what}",
        human_bytes(space.available),
        human_bytes(space.total)
    );
    let status = if space.available < FAIL_UNDER {
        Status::Fail
    } else if space.available < WARN_UNDER {
        Status::Warn
    } else {
        return Check::ok(name, seen);
    };
    Check {
        name,
        status,
        seen,
        why: format!(
            "under {} free a checkpoint, a spilled object or an image layer does not fit (one checkpoint of a 1.5B model with its optimizer is about 18 GB); under {} nothing can be written",
            human_bytes(WARN_UNDER),
            human_bytes(FAIL_UNDER)
        ),
        fix: fix.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_graded() {
        let space = |free: u64| {
            Some(Space {
                total: 100 << 30,
                available: free,
            })
        };
        assert_eq!(
            check("disk_shared", "x", space(50 << 30), "").status,
            Status::Ok
        );
        assert_eq!(
            check("disk_shared", "x", space(5 << 30), "").status,
            Status::Warn
        );
        let c = check("disk_engine", "the data root", space(1 << 20), "prune");
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.seen, "1.00 MiB free of 100.00 GiB on the data root");
        assert_eq!(check("disk_shared", "x", None, "").status, Status::Unknown);
    }
}
