//! The JobSpec's `restart` section: how `argus run` (and `argus slurm submit`) supervise
//! a run, restarting its job from the newest complete checkpoint when it fails, a node of
//! the cluster is lost, or it hangs. argus's own policy: it is not part of what the run
//! runs (the run key ignores it) and never reaches Ray.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::LooseDuration;
use crate::config::yaml::{ConfigError, Source};
use crate::exit::{Classify, Exit};
use crate::yaml_path;

/// The most restarts a policy may ask for (more is a loop, not a policy).
pub const MAX_RESTARTS: u32 = 100;

/// What ended an attempt of a supervised run, and what a policy restarts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartOn {
    /// The job ended FAILED.
    Failed,
    /// A container of the cluster died (or was OOM-killed), or a host's engine stopped
    /// answering.
    NodeLost,
    /// No new training step for `hang_after` while the job said RUNNING.
    Hang,
}

impl RestartOn {
    pub const ALL: [RestartOn; 3] = [RestartOn::Failed, RestartOn::NodeLost, RestartOn::Hang];

    pub fn as_str(self) -> &'static str {
        match self {
            RestartOn::Failed => "failed",
            RestartOn::NodeLost => "node_lost",
            RestartOn::Hang => "hang",
        }
    }
}

impl fmt::Display for RestartOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RestartOn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RestartOn::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of failed, node_lost, hang"))
    }
}

/// A restart policy, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// Restarts after the first attempt.
    pub max: u32,
    pub on: Vec<RestartOn>,
    #[serde(with = "humantime_serde_str")]
    pub hang_after: Duration,
    #[serde(with = "humantime_serde_str")]
    pub backoff: Duration,
    #[serde(with = "humantime_serde_str")]
    pub host_wait: Duration,
}

impl Restart {
    pub const DEFAULT_HANG_AFTER: Duration = Duration::from_secs(15 * 60);
    pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(30);
    pub const DEFAULT_HOST_WAIT: Duration = Duration::from_secs(10 * 60);

    /// A policy of `max` restarts, on every cause, with the default durations.
    pub fn new(max: u32) -> Restart {
        Restart {
            max,
            on: RestartOn::ALL.to_vec(),
            hang_after: Self::DEFAULT_HANG_AFTER,
            backoff: Self::DEFAULT_BACKOFF,
            host_wait: Self::DEFAULT_HOST_WAIT,
        }
    }

    pub fn restarts_on(&self, cause: RestartOn) -> bool {
        self.on.contains(&cause)
    }
}

/// The `restart:` section as written. `max` is required; the rest has defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping: max (restarts, 0 to 100) and optionally on, hang_after, backoff, host_wait"
)]
pub struct RawRestart {
    pub max: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<RestartOn>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_after: Option<LooseDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<LooseDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_wait: Option<LooseDuration>,
}

impl From<Restart> for RawRestart {
    fn from(r: Restart) -> Self {
        RawRestart {
            max: r.max,
            on: Some(r.on),
            hang_after: Some(LooseDuration(r.hang_after)),
            backoff: Some(LooseDuration(r.backoff)),
            host_wait: Some(LooseDuration(r.host_wait)),
        }
    }
}

/// A duration field of the policy: its YAML key, its flag, and its bounds.
struct Bounds {
    key: &'static str,
    flag: &'static str,
    min: Duration,
    max: Duration,
    /// The bounds and an example, as the user writes them.
    valid: &'static str,
}

const HANG_AFTER: Bounds = Bounds {
    key: "hang_after",
    flag: "--hang-after",
    min: Duration::from_secs(10),
    max: Duration::from_secs(7 * 24 * 3600),
    valid: "a duration from 10s to 7d (e.g. 15m, 1h 30m) or a number of seconds",
};
const BACKOFF: Bounds = Bounds {
    key: "backoff",
    flag: "--restart-backoff",
    min: Duration::ZERO,
    max: Duration::from_secs(3600),
    valid: "a duration from 0s to 1h (e.g. 30s, 5m) or a number of seconds",
};
const HOST_WAIT: Bounds = Bounds {
    key: "host_wait",
    flag: "--host-wait",
    min: Duration::ZERO,
    max: Duration::from_secs(7 * 24 * 3600),
    valid: "a duration from 0s to 7d (e.g. 10m, 2h) or a number of seconds",
};
const MAX_VALID: &str = "a whole number of restarts after the first attempt, from 0 to 100";
const ON_VALID: &str = "one or more of failed, node_lost, hang (leave `on` out for all three)";

impl Bounds {
    /// Why `d` is out of bounds, if it is.
    fn out_of_bounds(&self, d: Duration) -> Option<String> {
        let text = humantime::format_duration(d);
        if d < self.min {
            Some(format!(
                "{text} is less than {}",
                humantime::format_duration(self.min)
            ))
        } else if d > self.max {
            Some(format!(
                "{text} is more than {}",
                humantime::format_duration(self.max)
            ))
        } else {
            None
        }
    }

    /// The YAML's value (or the default), checked; errors point at the value.
    fn check_yaml(
        &self,
        given: Option<LooseDuration>,
        default: Duration,
        src: &Source,
    ) -> Result<Duration, ConfigError> {
        let Some(LooseDuration(d)) = given else {
            return Ok(default);
        };
        match self.out_of_bounds(d) {
            None => Ok(d),
            Some(why) => Err(src
                .error_at(&yaml_path!["restart", self.key], why)
                .with_hint(self.valid)),
        }
    }

    /// A flag's text, parsed and checked.
    fn check_flag(&self, text: &str) -> Result<Duration, RestartFlagError> {
        let invalid = |why: String| RestartFlagError::Invalid {
            flag: self.flag,
            value: text.to_string(),
            why,
            valid: self.valid,
        };
        let d = LooseDuration::parse(text).ok_or_else(|| invalid("not a duration".into()))?;
        match self.out_of_bounds(d) {
            None => Ok(d),
            Some(why) => Err(invalid(why)),
        }
    }
}

/// The section, checked: `max` at most [`MAX_RESTARTS`], a non-empty `on` (a cause
/// given twice counts once), durations within their bounds. Errors point at the value.
pub fn check(raw: Option<RawRestart>, src: &Source) -> Result<Option<Restart>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if raw.max > MAX_RESTARTS {
        return Err(src
            .error_at(
                &yaml_path!["restart", "max"],
                format!("{} is more than {MAX_RESTARTS}", raw.max),
            )
            .with_hint(MAX_VALID));
    }
    let on = match raw.on {
        None => RestartOn::ALL.to_vec(),
        Some(on) if on.is_empty() => {
            return Err(src
                .error_at(
                    &yaml_path!["restart", "on"],
                    "no cause given: a policy restarts on at least one",
                )
                .with_hint(ON_VALID));
        }
        Some(on) => dedup(on),
    };
    Ok(Some(Restart {
        max: raw.max,
        on,
        hang_after: HANG_AFTER.check_yaml(raw.hang_after, Restart::DEFAULT_HANG_AFTER, src)?,
        backoff: BACKOFF.check_yaml(raw.backoff, Restart::DEFAULT_BACKOFF, src)?,
        host_wait: HOST_WAIT.check_yaml(raw.host_wait, Restart::DEFAULT_HOST_WAIT, src)?,
    }))
}

/// The causes in the order given, each once.
fn dedup(causes: Vec<RestartOn>) -> Vec<RestartOn> {
    let mut out = Vec::with_capacity(causes.len());
    for c in causes {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The restart flags as typed (`argus run` and `argus slurm submit`; the clap side is
/// `cli::RestartArgs`), not yet checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartFlags {
    /// `--restart N`.
    pub max: Option<u32>,
    /// `--restart-on failed,node_lost,hang`.
    pub on: Option<String>,
    /// `--hang-after DUR`.
    pub hang_after: Option<String>,
    /// `--restart-backoff DUR`.
    pub backoff: Option<String>,
    /// `--host-wait DUR`.
    pub host_wait: Option<String>,
}

/// A restart flag that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestartFlagError {
    #[error("{flag} needs a restart policy: --restart N or restart: in the JobSpec")]
    NoPolicy { flag: &'static str },
    #[error("{flag} {value}: {why}")]
    Invalid {
        flag: &'static str,
        value: String,
        why: String,
        valid: &'static str,
    },
}

impl Classify for RestartFlagError {
    fn exit(&self) -> Exit {
        Exit::Usage
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            RestartFlagError::NoPolicy { flag } => {
                format!("add --restart N (e.g. --restart 3) to supervise the run, or drop {flag}")
            }
            RestartFlagError::Invalid { valid, .. } => valid.to_string(),
        })
    }
}

/// The policy a run is supervised by: the JobSpec's, with each flag given replacing its
/// field; `--restart N` alone makes a policy of N restarts with the defaults. None when
/// neither asks for one. A flag other than `--restart` with no policy to change is an
/// error, as is a value out of the bounds the YAML has.
pub fn effective(
    spec: Option<&Restart>,
    flags: &RestartFlags,
) -> Result<Option<Restart>, RestartFlagError> {
    let mut policy = match (spec, flags.max) {
        (_, Some(max)) if max > MAX_RESTARTS => {
            return Err(RestartFlagError::Invalid {
                flag: "--restart",
                value: max.to_string(),
                why: format!("more than {MAX_RESTARTS}"),
                valid: MAX_VALID,
            });
        }
        (Some(spec), Some(max)) => Restart {
            max,
            ..spec.clone()
        },
        (None, Some(max)) => Restart::new(max),
        (Some(spec), None) => spec.clone(),
        (None, None) => {
            let given = [
                ("--restart-on", &flags.on),
                (HANG_AFTER.flag, &flags.hang_after),
                (BACKOFF.flag, &flags.backoff),
                (HOST_WAIT.flag, &flags.host_wait),
            ];
            return match given.into_iter().find(|(_, v)| v.is_some()) {
                Some((flag, _)) => Err(RestartFlagError::NoPolicy { flag }),
                None => Ok(None),
            };
        }
    };
    if let Some(text) = &flags.on {
        policy.on = parse_on(text)?;
    }
    for (bounds, text, field) in [
        (&HANG_AFTER, &flags.hang_after, &mut policy.hang_after),
        (&BACKOFF, &flags.backoff, &mut policy.backoff),
        (&HOST_WAIT, &flags.host_wait, &mut policy.host_wait),
    ] {
        if let Some(text) = text {
            *field = bounds.check_flag(text)?;
        }
    }
    Ok(Some(policy))
}

/// `--restart-on failed,node_lost`: one or more causes, comma separated.
fn parse_on(text: &str) -> Result<Vec<RestartOn>, RestartFlagError> {
    let invalid = |why: String| RestartFlagError::Invalid {
        flag: "--restart-on",
        value: text.to_string(),
        why,
        valid: "one or more of failed, node_lost, hang, comma separated",
    };
    let causes = text
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| c.parse::<RestartOn>().map_err(&invalid))
        .collect::<Result<Vec<_>, _>>()?;
    if causes.is_empty() {
        return Err(invalid("no cause given".into()));
    }
    Ok(dedup(causes))
}

/// Durations as humantime text (`15m`), read back the same way.
mod humantime_serde_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::jobspec::LoadedJobSpec;

    const JOB: &str = "workload: ppo\ncode_id: a\n";

    fn load(extra: &str, sets: &[&str]) -> Result<Option<Restart>, ConfigError> {
        let sets: Vec<String> = sets.iter().map(ToString::to_string).collect();
        LoadedJobSpec::from_source(Source::new("j.yaml", format!("{JOB}{extra}")), &sets)
            .map(|j| j.spec.restart)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn restart_is_off_by_default_and_max_alone_takes_the_defaults() {
        assert_eq!(load("", &[]).unwrap(), None);
        assert_eq!(
            load("restart:\n  max: 3\n", &[]).unwrap(),
            Some(Restart::new(3))
        );
        let r = Restart::new(3);
        assert_eq!(
            r.on,
            [RestartOn::Failed, RestartOn::NodeLost, RestartOn::Hang]
        );
        assert_eq!(
            (r.hang_after, r.backoff, r.host_wait),
            (secs(900), secs(30), secs(600))
        );
        assert!(RestartOn::ALL.iter().all(|c| r.restarts_on(*c)));
    }

    #[test]
    fn restart_fields_take_durations_as_text_or_seconds() {
        let r = load(
            "restart: {max: 0, on: [hang, failed, hang], hang_after: 1h 30m, backoff: 0, host_wait: 7d}\n",
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.max, 0);
        assert_eq!(r.on, [RestartOn::Hang, RestartOn::Failed]);
        assert!(!r.restarts_on(RestartOn::NodeLost));
        assert_eq!(
            (r.hang_after, r.backoff, r.host_wait),
            (secs(5400), secs(0), secs(7 * 86400))
        );
        let r = load("restart: {max: 1, hang_after: 10, backoff: 3600}\n", &[])
            .unwrap()
            .unwrap();
        assert_eq!((r.hang_after, r.backoff), (secs(10), secs(3600)));
    }

    /// (section, line, column, text the message must contain); the JobSpec's first two
    /// lines are the workload and the code, so the section starts at line 3.
    const BAD: &[(&str, usize, usize, &str)] = &[
        (
            "restart:\n  max: 1\n  tries: 2\n",
            5,
            3,
            "restart: unknown field `tries`, expected one of `max`, `on`, `hang_after`, `backoff`, `host_wait`",
        ),
        (
            "restart: 3\n",
            3,
            10,
            "restart: invalid type: integer `3`, expected a mapping: max (restarts, 0 to 100)",
        ),
        (
            "restart:\n  max: three\n",
            4,
            8,
            "restart.max: invalid type: string \"three\", expected u32",
        ),
        (
            "restart:\n  max: -1\n",
            4,
            8,
            "restart.max: invalid type: integer `-1`, expected u32",
        ),
        (
            "restart:\n  on: [hang]\n",
            4,
            3,
            "restart: missing field `max`",
        ),
        (
            "restart:\n  max: 101\n",
            4,
            8,
            "restart.max: 101 is more than 100",
        ),
        (
            "restart:\n  max: 1\n  on: [failed, oom]\n",
            5,
            16,
            "restart.on[1]: unknown variant `oom`, expected one of `failed`, `node_lost`, `hang`",
        ),
        (
            "restart:\n  max: 1\n  on: hang\n",
            5,
            7,
            "restart.on: invalid type: string \"hang\", expected a sequence",
        ),
        (
            "restart:\n  max: 1\n  on: []\n",
            5,
            7,
            "restart.on: no cause given",
        ),
        (
            "restart:\n  max: 1\n  hang_after: 5s\n",
            5,
            15,
            "restart.hang_after: 5s is less than 10s",
        ),
        (
            "restart:\n  max: 1\n  hang_after: 8d\n",
            5,
            15,
            "restart.hang_after: 8days is more than 7days",
        ),
        (
            "restart:\n  max: 1\n  hang_after: soon\n",
            5,
            15,
            "restart.hang_after: invalid value: string \"soon\", expected a duration such as 30s",
        ),
        (
            "restart:\n  max: 1\n  backoff: 2h\n",
            5,
            12,
            "restart.backoff: 2h is more than 1h",
        ),
        (
            "restart:\n  max: 1\n  backoff: -1\n",
            5,
            12,
            "restart.backoff: invalid value: integer `-1`, expected a duration",
        ),
        (
            "restart:\n  max: 1\n  host_wait: 604801\n",
            5,
            14,
            "restart.host_wait: 7days 1s is more than 7days",
        ),
        (
            "restart:\n  max: 1\n  host_wait: [10m]\n",
            5,
            14,
            "restart.host_wait: invalid type: sequence, expected a duration",
        ),
    ];

    #[test]
    fn bad_restart_sections_get_one_located_error_each() {
        let mut wrong = Vec::new();
        for (section, line, column, want) in BAD {
            match load(section, &[]) {
                Ok(r) => wrong.push(format!("{section:?} loaded: {r:?}")),
                Err(e)
                    if !e.to_string().contains(want) || (e.line, e.column) != (*line, *column) =>
                {
                    wrong.push(format!(
                        "{section:?}\n  want {line}:{column} {want:?}\n  got  {e}"
                    ))
                }
                Err(_) => {}
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        let e = load("restart:\n  max: 1\n  hang_after: 5s\n", &[]).unwrap_err();
        assert_eq!(
            e.hint.as_deref(),
            Some("a duration from 10s to 7d (e.g. 15m, 1h 30m) or a number of seconds")
        );
    }

    #[test]
    fn restart_fields_can_be_set_and_the_section_round_trips() {
        let r = load("", &["restart.max=2", "restart.hang_after=20m"])
            .unwrap()
            .unwrap();
        assert_eq!((r.max, r.hang_after), (2, secs(1200)));
        let r = load("restart: {max: 5, on: [hang]}\n", &["restart.max=1"])
            .unwrap()
            .unwrap();
        assert_eq!((r.max, r.on.as_slice()), (1, &[RestartOn::Hang][..]));
        let e = load("", &["restart.max=101"]).unwrap_err();
        assert!(
            e.to_string().contains("restart.max: 101 is more than 100"),
            "{e}"
        );
        let e = load("", &["restart.hang_after=1m"]).unwrap_err();
        assert!(e.to_string().contains("missing field `max`"), "{e}");

        // The JobSpec as recorded (config/jobspec.yaml, the lock) reads back the same.
        let text = "restart: {max: 2, on: [node_lost], hang_after: 1h 30m, backoff: 0s}\n";
        let loaded =
            LoadedJobSpec::from_source(Source::new("j.yaml", format!("{JOB}{text}")), &[]).unwrap();
        let record = crate::config::yaml::to_string(&loaded.spec);
        assert!(record.contains("hang_after: 1h 30m"), "{record}");
        let again = LoadedJobSpec::from_source(Source::new("r.yaml", record), &[]).unwrap();
        assert_eq!(again.spec.restart, loaded.spec.restart);

        // A report's JSON carries the policy with durations as text.
        let policy = loaded.spec.restart.unwrap();
        let json = serde_json::to_value(&policy).unwrap();
        assert_eq!(json["hang_after"], "1h 30m");
        assert_eq!(json["backoff"], "0s");
        assert_eq!(json["on"], serde_json::json!(["node_lost"]));
        assert_eq!(serde_json::from_value::<Restart>(json).unwrap(), policy);
    }

    fn flags(f: impl FnOnce(&mut RestartFlags)) -> RestartFlags {
        let mut flags = RestartFlags::default();
        f(&mut flags);
        flags
    }

    #[test]
    fn restart_flags_replace_the_jobspecs_fields_one_by_one() {
        assert_eq!(effective(None, &RestartFlags::default()), Ok(None));
        let spec = Restart {
            on: vec![RestartOn::Hang],
            ..Restart::new(3)
        };
        assert_eq!(
            effective(Some(&spec), &RestartFlags::default()),
            Ok(Some(spec.clone()))
        );
        assert_eq!(
            effective(None, &flags(|f| f.max = Some(2))),
            Ok(Some(Restart::new(2)))
        );
        let merged = effective(
            Some(&spec),
            &flags(|f| {
                f.max = Some(7);
                f.hang_after = Some("900".into());
                f.backoff = Some("1m".into());
            }),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            merged,
            Restart {
                max: 7,
                on: vec![RestartOn::Hang],
                hang_after: secs(900),
                backoff: secs(60),
                host_wait: Restart::DEFAULT_HOST_WAIT,
            }
        );
        let merged = effective(
            Some(&spec),
            &flags(|f| {
                f.on = Some("node_lost, failed,node_lost".into());
                f.host_wait = Some("0".into());
            }),
        )
        .unwrap()
        .unwrap();
        assert_eq!(merged.max, 3);
        assert_eq!(merged.on, [RestartOn::NodeLost, RestartOn::Failed]);
        assert_eq!(merged.host_wait, Duration::ZERO);
    }

    #[test]
    fn restart_flags_without_a_policy_or_out_of_bounds_are_usage_errors() {
        let e = effective(None, &flags(|f| f.hang_after = Some("20m".into()))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--hang-after needs a restart policy: --restart N or restart: in the JobSpec"
        );
        assert_eq!(e.exit(), Exit::Usage);
        for (f, flag) in [
            (flags(|f| f.on = Some("hang".into())), "--restart-on"),
            (
                flags(|f| f.backoff = Some("1s".into())),
                "--restart-backoff",
            ),
            (flags(|f| f.host_wait = Some("1s".into())), "--host-wait"),
        ] {
            assert_eq!(
                effective(None, &f),
                Err(RestartFlagError::NoPolicy { flag })
            );
        }
        let spec = Restart::new(1);
        for (f, want) in [
            (flags(|f| f.max = Some(101)), "--restart 101: more than 100"),
            (
                flags(|f| f.hang_after = Some("5s".into())),
                "--hang-after 5s: 5s is less than 10s",
            ),
            (
                flags(|f| f.hang_after = Some("soon".into())),
                "--hang-after soon: not a duration",
            ),
            (
                flags(|f| f.backoff = Some("61m".into())),
                "--restart-backoff 61m: 1h 1m is more than 1h",
            ),
            (
                flags(|f| f.host_wait = Some("-5".into())),
                "--host-wait -5: not a duration",
            ),
            (
                flags(|f| f.on = Some("failed,oom".into())),
                "--restart-on failed,oom: \"oom\" is not one of failed, node_lost, hang",
            ),
            (
                flags(|f| f.on = Some(" , ".into())),
                "--restart-on  , : no cause given",
            ),
        ] {
            let e = effective(Some(&spec), &f).unwrap_err();
            assert_eq!(e.to_string(), want);
            assert_eq!(e.exit(), Exit::Usage);
            assert!(e.hint().is_some_and(|h| !h.is_empty()));
        }
    }
}
