//! Scalar values a JobSpec writes loosely: a string YAML may have typed as a number, and
//! a duration.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest `time_limit`: a year (longer is a typo).
pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A string that YAML may have typed as a number or a boolean (`NCCL_DEBUG: 1`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ScalarString(pub String);

impl<'de> Deserialize<'de> for ScalarString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = ScalarString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
        }
        d.deserialize_any(ScalarVisitor)
    }
}

/// A duration: `2h`, `90m`, `1h 30m`, `45s`, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimit(pub Duration);

impl Serialize for TimeLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for TimeLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LimitVisitor;
        impl Visitor<'_> for LimitVisitor {
            type Value = TimeLimit;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a duration such as 2h, 90m, 1h 30m or a number of seconds, at most 365 days",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeLimit, E> {
                if v == 0 || v > MAX_TIME_LIMIT.as_secs() {
                    return Err(E::invalid_value(de::Unexpected::Unsigned(v), &self));
                }
                Ok(TimeLimit(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeLimit, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TimeLimit, E> {
                match humantime::parse_duration(v) {
                    Ok(d) if !d.is_zero() && d <= MAX_TIME_LIMIT => Ok(TimeLimit(d)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(LimitVisitor)
    }
}

/// A duration with no bounds of its own (its field checks them, to name the field in
/// the error): humantime text (`15m`, `1h 30m`, `0s`) or a whole number of seconds.
/// Written back as humantime text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LooseDuration(pub Duration);

impl LooseDuration {
    /// The same forms from a flag's text: `15m`, `1h 30m`, or `900` (seconds).
    pub fn parse(text: &str) -> Option<Duration> {
        let text = text.trim();
        match text.parse::<u64>() {
            Ok(secs) => Some(Duration::from_secs(secs)),
            Err(_) => humantime::parse_duration(text).ok(),
        }
    }
}

impl Serialize for LooseDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for LooseDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = LooseDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 30s, 15m, 1h 30m or a number of seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LooseDuration, E> {
                Ok(LooseDuration(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LooseDuration, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LooseDuration, E> {
                humantime::parse_duration(v)
                    .map(LooseDuration)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(DurationVisitor)
    }
}
