//! Hydra's override syntax, both ways: YAML values written as override values that Hydra
//! reads back unchanged, and override lines (`key=value`, `+key=`, `++key=`, `~key`,
//! `group@package=option`) parsed the way Hydra 1.3's grammar (`OverrideLexer.g4`,
//! `OverrideParser.g4`) parses them. Pure, and imports nothing of the pipeline.
//!
//! Shell quoting is not here: the entrypoint quotes whole words for the shell.

use std::fmt;

mod format;
mod lex;
mod parse;

pub use format::{format_value, try_format_value};
pub use parse::{parse_override, parse_value};

use serde_yaml::Value as Yaml;

/// An override value as Hydra's parser returns it (before OmegaConf sees it).
#[derive(Debug, Clone, PartialEq)]
pub enum HydraValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    /// Quoted or not; `${...}` inside stays text (OmegaConf resolves it later).
    Str(String),
    List(Vec<HydraValue>),
    Dict(Vec<(HydraValue, HydraValue)>),
    /// `a,b` or `choice(a,b)`, `range(..)`, `interval(..)`, `glob(..)`: only for --multirun.
    Sweep(String),
    /// A cast or list function (`str(1)`, `extend_list(..)`, ...), left unevaluated.
    Call {
        name: String,
        args: Vec<HydraValue>,
    },
}

impl HydraValue {
    pub fn is_container(&self) -> bool {
        matches!(self, HydraValue::List(_) | HydraValue::Dict(_))
    }

    /// The YAML value OmegaConf makes of this one; None when it holds a sweep or a
    /// function call, which only Hydra itself evaluates.
    pub fn to_yaml(&self) -> Option<Yaml> {
        Some(match self {
            HydraValue::Null => Yaml::Null,
            HydraValue::Bool(b) => Yaml::Bool(*b),
            HydraValue::Int(i) => match i64::try_from(*i) {
                Ok(i) => Yaml::Number(i.into()),
                Err(_) => Yaml::String(i.to_string()),
            },
            HydraValue::Float(f) => Yaml::Number((*f).into()),
            HydraValue::Str(s) => Yaml::String(s.clone()),
            HydraValue::List(items) => Yaml::Sequence(
                items
                    .iter()
                    .map(HydraValue::to_yaml)
                    .collect::<Option<_>>()?,
            ),
            HydraValue::Dict(entries) => Yaml::Mapping(
                entries
                    .iter()
                    .map(|(k, v)| Some((k.to_yaml()?, v.to_yaml()?)))
                    .collect::<Option<_>>()?,
            ),
            HydraValue::Sweep(_) | HydraValue::Call { .. } => return None,
        })
    }

    /// Whether Hydra reads this value as `yaml` (numbers compared by value, NaN equal).
    pub fn same_as(&self, yaml: &Yaml) -> bool {
        match (self, yaml) {
            (v, Yaml::Tagged(t)) => v.same_as(&t.value),
            (HydraValue::Null, Yaml::Null) => true,
            (HydraValue::Bool(a), Yaml::Bool(b)) => a == b,
            (HydraValue::Int(a), Yaml::Number(n)) if n.is_i64() || n.is_u64() => {
                n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)) == Some(*a)
            }
            (HydraValue::Float(a), Yaml::Number(n)) if n.is_f64() => n
                .as_f64()
                .is_some_and(|b| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
            (HydraValue::Str(a), Yaml::String(b)) => a == b,
            (HydraValue::List(a), Yaml::Sequence(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
            }
            (HydraValue::Dict(a), Yaml::Mapping(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, va), (kb, vb))| ka.same_as(kb) && va.same_as(vb))
            }
            _ => false,
        }
    }
}

/// What an override does to the key: set it, add it (`+`), add or set it (`++`), delete it (`~`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Set,
    Add,
    ForceAdd,
    Delete,
}

impl Action {
    pub fn prefix(self) -> &'static str {
        match self {
            Action::Set => "",
            Action::Add => "+",
            Action::ForceAdd => "++",
            Action::Delete => "~",
        }
    }
}

/// One override line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedOverride {
    pub action: Action,
    /// A dotted config key (`trainer.nnodes`) or a config group (`hydra/job_logging`).
    pub key: String,
    /// `group@package`: the package, possibly empty.
    pub package: Option<String>,
    /// None only for `~key` without `=`; `key=` is the empty string.
    pub value: Option<HydraValue>,
}

impl ParsedOverride {
    /// `key` or `key@package`, as Hydra matches it against a defaults list.
    pub fn key_element(&self) -> String {
        match &self.package {
            Some(p) => format!("{}@{p}", self.key),
            None => self.key.clone(),
        }
    }
}

/// Why a text is not a Hydra override (or value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {at})")]
pub struct SyntaxError {
    pub message: String,
    /// 0-based character index into the text.
    pub at: usize,
}

/// A YAML value that no override value can carry exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

impl fmt::Display for ParsedOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.action.prefix(), self.key_element())
    }
}

#[cfg(test)]
mod tests;
