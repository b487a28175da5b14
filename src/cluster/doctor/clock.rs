//! `clock`: a host's clock against this machine's. The engine's `/info` says its time
//! (`SystemTime`); the request took a round trip, so the engine's time is compared with
//! the middle of it and half the round trip is allowed for.
//!
//! Bounds: over 2 s is a warning (the failure bundle orders the first error across hosts
//! by their log times, and a skew of seconds puts the wrong one first); over 300 s fails
//! (Slurm's munge credentials live 300 s by default, TLS certificates are not yet valid or
//! already expired, NFS attribute caching by mtime goes wrong).

use std::time::{Duration, SystemTime};

use super::{Check, Status};

pub const WARN_AFTER: Duration = Duration::from_secs(2);
pub const FAIL_AFTER: Duration = Duration::from_secs(300);

/// One reading of a host's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The host's time minus this machine's at the middle of the request, in seconds.
    pub offset: f64,
    /// Half the round trip: the reading is exact to within this, in seconds.
    pub within: f64,
}

impl Reading {
    /// `engine_time` as Docker writes it (RFC 3339 with nanoseconds and the engine's zone
    /// offset); `sent` and `received` bracket the request on this machine's clock.
    pub fn new(engine_time: &str, sent: SystemTime, received: SystemTime) -> Option<Reading> {
        let engine = parse_rfc3339(engine_time)?;
        let secs = |t: SystemTime| match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        let (sent, received) = (secs(sent), secs(received));
        Some(Reading {
            offset: secs(engine) - (sent + received) / 2.0,
            within: ((received - sent) / 2.0).max(0.0),
        })
    }

    /// The skew that is certain: the offset less what the round trip leaves open.
    pub fn at_least(&self) -> f64 {
        (self.offset.abs() - self.within).max(0.0)
    }
}

/// `2026-11-26T06:52:55.123456789+01:00` (or `Z`) as a point in time.
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    // Another machine's text: a time is ASCII (and slicing it by bytes stays safe).
    if !text.is_ascii() {
        return None;
    }
    let (local, offset) = if let Some(rest) = text.strip_suffix('Z') {
        (rest, 0i64)
    } else {
        let at = text.len().checked_sub(6)?;
        let (local, zone) = text.split_at(at);
        let sign = match zone.as_bytes().first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let (h, m) = zone[1..].split_once(':')?;
        (
            local,
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60),
        )
    };
    let utc_as_if = humantime::parse_rfc3339_weak(local).ok()?;
    let shift = Duration::from_secs(offset.unsigned_abs());
    if offset >= 0 {
        utc_as_if.checked_sub(shift)
    } else {
        utc_as_if.checked_add(shift)
    }
}

/// `clock` of one host.
pub fn check(reading: Option<Reading>) -> Check {
    let Some(r) = reading else {
        return Check {
            name: "clock",
            status: Status::Unknown,
            seen: "the engine did not say its time".into(),
            why: "a skewed clock misorders the hosts' logs and breaks time-limited credentials".into(),
            fix: "`docker info --format '{{.SystemTime}}'` on that host, compared with `date -u` here".into(),
        };
    };
    let seen = format!(
        "{:+.3}s against this machine (±{:.3}s round trip)",
        r.offset, r.within
    );
    let skew = Duration::from_secs_f64(r.at_least());
    let status = if skew > FAIL_AFTER {
        Status::Fail
    } else if skew > WARN_AFTER {
        Status::Warn
    } else {
        return Check::ok("clock", seen);
    };
    Check {
        name: "clock",
        status,
        seen,
        why: format!(
            "hosts more than {}s apart misorder their logs (the first error of a failure is found by time); more than {}s apart, munge (Slurm) and TLS refuse each other's credentials",
            WARN_AFTER.as_secs(),
            FAIL_AFTER.as_secs()
        ),
        fix: "run an NTP client on every host (chrony or systemd-timesyncd: `timedatectl set-ntp true`) and check `chronyc tracking`".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_that_is_not_ascii_is_no_reading() {
        let now = SystemTime::now();
        assert_eq!(Reading::new("ééé2026-11-26T10:00:00+0é:00", now, now), None);
        assert_eq!(Reading::new("éééx", now, now), None);
    }

    fn at(secs: f64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn the_engines_time_is_read_with_its_zone() {
        let utc = parse_rfc3339("2026-11-26T06:52:55.5Z").unwrap();
        let zoned = parse_rfc3339("2026-11-26T07:52:55.500000000+01:00").unwrap();
        let west = parse_rfc3339("2026-11-26T01:52:55.5-05:00").unwrap();
        assert_eq!(utc, zoned);
        assert_eq!(utc, west);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn the_round_trip_is_allowed_for_and_skews_are_graded() {
        let base = 1_800_000_000.0;
        let engine =
            |offset: f64| humantime::format_rfc3339_nanos(at(base + 0.5 + offset)).to_string();
        // A request of 1 s whose answer says the middle: no skew.
        let r = Reading::new(&engine(0.0), at(base), at(base + 1.0)).unwrap();
        assert!(
            r.offset.abs() < 1e-6 && (r.within - 0.5).abs() < 1e-6,
            "{r:?}"
        );
        assert_eq!(check(Some(r)).status, Status::Ok);
        // 2.3 s ahead, known to ±0.5 s: at least 1.8 s, still within the bound.
        let r = Reading::new(&engine(2.3), at(base), at(base + 1.0)).unwrap();
        assert_eq!(check(Some(r)).status, Status::Ok);
        let r = Reading::new(&engine(-10.0), at(base), at(base + 1.0)).unwrap();
        assert_eq!(check(Some(r)).status, Status::Warn);
        let r = Reading::new(&engine(3600.0), at(base), at(base + 1.0)).unwrap();
        let c = check(Some(r));
        assert_eq!(c.status, Status::Fail);
        assert!(c.seen.starts_with("+3600.000s"), "{}", c.seen);
        assert_eq!(check(None).status, Status::Unknown);
    }
}
