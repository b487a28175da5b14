//! What doctor reports: one check's status, what was seen, why it matters and the fix,
//! per host. A report can be read back (a Slurm node step prints its node's): only the
//! checks doctor knows, their texts capped.

use serde::{Deserialize, Serialize};

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Seen and right.
    Ok,
    /// Seen and doubtful: works, but may not for verl (a small margin, a slow clock).
    Warn,
    /// Seen and wrong: the cluster or the job will fail for this reason.
    Fail,
    /// Could not be checked (the engine did not answer in time, a probe failed).
    Unknown,
}

/// One check on one host.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short, stable, for scripts: `engine`, `gpu_runtime`, `gpus`, `cuda_driver`, `shm`,
    /// `memlock`, `disk_shared`, `disk_engine`, `ports`, `clock`, `image`, `image_tools`,
    /// `shared_storage`,
    /// `head_route`, `collective_iface`, `model_cache`, `dataset_cache`, ...
    pub name: &'static str,
    pub status: Status,
    /// What was seen (`API 1.47, Docker 28.1.1`; `/dev/shm 64 MiB`).
    pub seen: String,
    /// Why it matters (empty when Ok).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// What to do (empty when Ok).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

/// The report's part for the checks that are not of one host.
pub const CLUSTER: &str = "cluster";

/// Every check's name: a report read back (a Slurm node step's, printed by the argus on
/// that node) holds only these.
pub const NAMES: &[&str] = &[
    "engine",
    "gpu_runtime",
    "gpus",
    "cuda_driver",
    "shm",
    "memlock",
    "disk_shared",
    "disk_engine",
    "ports",
    "clock",
    "image",
    "image_tools",
    "shared_storage",
    "head_route",
    "collective_iface",
    "probe",
    "node_step",
    "model_cache",
    "dataset_cache",
    "collective",
];

/// The most of each text of a check read back.
const TEXT_CAP: usize = 4096;

/// A check as another argus printed it.
#[derive(Deserialize)]
struct WireCheck {
    name: String,
    status: Status,
    seen: String,
    #[serde(default)]
    why: String,
    #[serde(default)]
    fix: String,
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Check, D::Error> {
        Check::try_from(WireCheck::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<WireCheck> for Check {
    type Error = String;

    fn try_from(wire: WireCheck) -> Result<Check, String> {
        let name = NAMES
            .iter()
            .find(|n| **n == wire.name)
            .ok_or_else(|| format!("no check is named {:?}", wire.name))?;
        let cap = |mut text: String| {
            if text.len() > TEXT_CAP {
                let mut end = TEXT_CAP;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            text
        };
        Ok(Check {
            name,
            status: wire.status,
            seen: cap(wire.seen),
            why: cap(wire.why),
            fix: cap(wire.fix),
        })
    }
}

/// The checks of one host (or, for checks across hosts and of a JobSpec, of `cluster`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostReport {
    pub host: String,
    pub checks: Vec<Check>,
}

/// Everything doctor found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub hosts: Vec<HostReport>,
}

impl Report {
    /// The worst status of any check (Ok for an empty report). Fail outranks Unknown: a
    /// check that failed is the answer even when another could not be made.
    pub fn worst(&self) -> Status {
        let all = self.hosts.iter().flat_map(|h| &h.checks).map(|c| c.status);
        if all.clone().any(|s| s == Status::Fail) {
            Status::Fail
        } else if all.clone().any(|s| s == Status::Unknown) {
            Status::Unknown
        } else if all.clone().any(|s| s == Status::Warn) {
            Status::Warn
        } else {
            Status::Ok
        }
    }
}

impl Check {
    /// Seen and right.
    pub fn ok(name: &'static str, seen: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            seen: seen.into(),
            why: String::new(),
            fix: String::new(),
        }
    }

    /// Could not be checked, for `why`.
    pub fn unknown(name: &'static str, seen: impl Into<String>, why: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Unknown,
            seen: seen.into(),
            why: why.into(),
            fix: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_read_back_holds_only_known_checks() {
        let report = HostReport {
            host: "a".into(),
            checks: vec![Check::ok("shm", "1 GiB")],
        };
        let text = serde_json::to_string(&report).unwrap();
        let back: HostReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.checks[0].name, "shm");
        let forged = text.replace("\"shm\"", "\"rm -rf\"");
        let refused = serde_json::from_str::<HostReport>(&forged).unwrap_err();
        assert!(
            refused.to_string().contains("no check is named"),
            "{refused}"
        );
        let long = text.replace("1 GiB", &"x".repeat(10_000));
        let capped: HostReport = serde_json::from_str(&long).unwrap();
        assert_eq!(capped.checks[0].seen.len(), TEXT_CAP);
    }
}
