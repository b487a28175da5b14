//! Hydra overrides as a JobSpec gives them: a map (`trainer.logger: [console]`, formatted
//! for Hydra by argus) or a list of `key=value` strings (passed as written). Keys are
//! checked against a strict charset; each key at most once.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const KEY_RULE: &str =
    "a Hydra key: optional +, ++ or ~, then letters, digits and _ . - / @ [ ]";

/// Whether `key` is a Hydra key argus passes on (no `=`, spaces, quotes or shell characters).
pub fn valid_key(key: &str) -> bool {
    let body = key
        .strip_prefix("++")
        .or_else(|| key.strip_prefix('+'))
        .or_else(|| key.strip_prefix('~'))
        .unwrap_or(key);
    !body.is_empty()
        && body.len() <= 256
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-/@[]".contains(c))
}

/// The key without its `+`, `++` or `~`: two overrides of one bare key are one key given twice.
pub fn bare_key(key: &str) -> &str {
    key.trim_start_matches(['+', '~'])
}

/// One Hydra override: `key` and either a YAML value (formatted by argus) or raw text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Override {
    pub key: String,
    pub value: OverrideValue,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OverrideValue {
    /// From a map entry: quoted for Hydra by argus.
    Yaml(serde_yaml::Value),
    /// From a `key=value` list item: passed as the user wrote it.
    Raw(String),
    /// `~key`: delete.
    Delete,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides(pub Vec<Override>);

impl Overrides {
    /// The same overrides with every secret value (key secret-named, see
    /// [`crate::secrets::is_secret_override_key`]) replaced by `<redacted>`,
    /// structurally, before anything formats or quotes them: what argus shows and
    /// records (the entrypoint printed and written, the JobSpec record) is built from
    /// these, so no quoted form of a secret has to be searched for afterwards.
    pub fn redacted(&self) -> Overrides {
        Overrides(self.0.iter().map(Override::redacted).collect())
    }
}

impl Override {
    /// This override with its secrets replaced by `<redacted>`: the whole value when its
    /// key is secret, else what secret-named keys hold inside a mapping value, at any
    /// depth (`+ray_kwargs.ray_init.runtime_env: {env_vars: {WANDB_API_KEY: ...}}`).
    pub fn redacted(&self) -> Override {
        use crate::secrets;
        let value = match &self.value {
            OverrideValue::Delete => OverrideValue::Delete,
            _ if secrets::is_secret_override_key(&self.key) => {
                OverrideValue::Raw(secrets::REDACTED.into())
            }
            OverrideValue::Yaml(v) => {
                OverrideValue::Yaml(secrets::Secrets::new().redact_yaml(v.clone()))
            }
            OverrideValue::Raw(v) => {
                OverrideValue::Raw(secrets::redact_override_value(&self.key, v).into_owned())
            }
        };
        Override {
            key: self.key.clone(),
            value,
        }
    }

    /// The secret values this override carries, wherever they sit in its value (the
    /// rule of [`Override::redacted`]), for redaction by value elsewhere.
    pub fn secret_values(&self) -> Vec<String> {
        use crate::secrets;
        match &self.value {
            OverrideValue::Delete => Vec::new(),
            OverrideValue::Raw(v) => secrets::secrets_in_override(&self.key, v),
            OverrideValue::Yaml(v) if secrets::is_secret_override_key(&self.key) => {
                let mut out = vec![crate::config::yaml::to_string(v)];
                if let serde_yaml::Value::String(s) = v {
                    out.push(s.clone());
                }
                out
            }
            OverrideValue::Yaml(v) => secrets::secrets_in_yaml(v),
        }
    }
}

impl Serialize for Overrides {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for o in &self.0 {
            seq.serialize_element(&o.to_string())?;
        }
        seq.end()
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            OverrideValue::Yaml(v) => {
                write!(f, "{}={}", self.key, crate::hydra::format_value(v))
            }
            OverrideValue::Raw(v) => write!(f, "{}={v}", self.key),
            OverrideValue::Delete => write!(f, "{}", self.key),
        }
    }
}

impl Override {
    /// Parses `key=value` or `~key` as written on a command line.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('~') && !text.contains('=') {
            return Ok(Override {
                key: text.to_string(),
                value: OverrideValue::Delete,
            });
        }
        match text.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(Override {
                key: key.trim().to_string(),
                value: OverrideValue::Raw(value.to_string()),
            }),
            _ => Err(format!(
                "{text:?} is not a Hydra override (key=value, +key=value or ~key)"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Overrides {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OverridesVisitor;
        impl<'de> Visitor<'de> for OverridesVisitor {
            type Value = Overrides;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of Hydra keys to values, or a list of key=value strings")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Overrides, A::Error> {
                let mut out = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, serde_yaml::Value>()? {
                    out.push(Override {
                        key,
                        value: OverrideValue::Yaml(value),
                    });
                }
                Ok(Overrides(out))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Overrides, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(Override::parse(&item).map_err(de::Error::custom)?);
                }
                Ok(Overrides(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Overrides, E> {
                Ok(Overrides::default())
            }
        }
        d.deserialize_any(OverridesVisitor)
    }
}
