//! Byte sizes as people write them in profiles: `512m`, `2g`, `1.5G`, `64MiB`, or bytes.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of bytes; deserializes from an integer or a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

const EXPECTED: &str = "a size such as 512m, 2g, 1.5GiB or a number of bytes";

impl ByteSize {
    pub fn parse(text: &str) -> Option<ByteSize> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().ok()?;
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return None,
        };
        let bytes = number * multiplier as f64;
        (bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64)
            .then_some(ByteSize(bytes as u64))
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
                if v == 0 {
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
    }
}
