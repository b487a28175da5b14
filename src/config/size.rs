//! Byte sizes as people write them in profiles: `512m`, `2g`, `1.5G`, `64MiB`, or bytes.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of bytes; deserializes from an integer or a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// The largest size a profile may give: 1 PiB. Larger is a typo (no host has it), and
/// Docker takes sizes as signed 64-bit numbers, so `10000000t` must never be cast there.
pub const MAX: ByteSize = ByteSize(1 << 50);

const EXPECTED: &str =
    "a size such as 512m, 2g, 1.5GiB or a number of bytes, from 1 byte to 1024t (1 PiB)";

impl ByteSize {
    /// Parses `512m`, `1.5GiB`, `100`: exact decimal arithmetic, checked for overflow,
    /// between 1 byte and [`MAX`].
    pub fn parse(text: &str) -> Option<ByteSize> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let multiplier: u128 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return None,
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        // At most 18 digits on either side: larger is over MAX whatever the unit.
        if whole.len() > 18 || fraction.len() > 18 || fraction.contains('.') {
            return None;
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let bytes = whole.checked_mul(multiplier)?;
        let bytes = if fraction.is_empty() {
            bytes
        } else {
            let scale = 10u128.checked_pow(fraction.len() as u32)?;
            let part: u128 = fraction.parse().ok()?;
            bytes.checked_add(part.checked_mul(multiplier)? / scale)?
        };
        (1..=u128::from(MAX.0))
            .contains(&bytes)
            .then_some(ByteSize(bytes as u64))
    }

    /// The size as Docker's API takes it (a signed 64-bit number); never negative, since
    /// a `ByteSize` is at most [`MAX`].
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("t", 1 << 40),
            ("g", 1 << 30),
            ("m", 1 << 20),
            ("k", 1 << 10),
        ];
        for (unit, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                if v == 0 || v > MAX.0 {
                    return Err(E::invalid_value(de::Unexpected::Unsigned(v), &self));
                }
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(SizeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::ByteSize;

    #[test]
    fn parses_units() {
        assert_eq!(ByteSize::parse("512m"), Some(ByteSize(512 << 20)));
        assert_eq!(ByteSize::parse("2g"), Some(ByteSize(2 << 30)));
        assert_eq!(ByteSize::parse("1.5GiB"), Some(ByteSize(3 << 29)));
        assert_eq!(ByteSize::parse("100"), Some(ByteSize(100)));
        assert_eq!(ByteSize::parse("2x"), None);
        assert_eq!(ByteSize::parse("0"), None);
        assert_eq!(ByteSize::parse(""), None);
        assert_eq!(ByteSize(2 << 30).to_string(), "2g");
        assert_eq!(ByteSize::parse(".5k"), Some(ByteSize(512)));
        assert_eq!(ByteSize::parse("1024t"), Some(super::MAX));
    }

    #[test]
    fn sizes_that_would_overflow_are_refused() {
        for text in [
            "10000000t",
            "1025t",
            "18446744073709551616",
            "99999999999999999999999999g",
            "1.5.3g",
            ".",
            "1e3",
            "-1g",
            "0.0000001",
        ] {
            assert_eq!(ByteSize::parse(text), None, "{text}");
        }
        let err = serde_yaml::from_str::<ByteSize>("10000000t").unwrap_err();
        assert!(err.to_string().contains("1024t (1 PiB)"), "{err}");
        assert!(serde_yaml::from_str::<ByteSize>("2000000000000000").is_err());
        assert_eq!(super::MAX.as_i64(), 1 << 50);
    }
}
