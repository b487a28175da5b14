//! Reading config files: a file's defaults list parsed into entries (Hydra's
//! `InputDefault`), its `# @package` header, and Hydra's own config node.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value as Yaml;

use super::Fail;
use crate::config::yaml::{self, Seg, Source};
use crate::submit::override_check::tree::Node;

/// Hydra's own config node, before overrides.
const HYDRA_NODE: &str = include_str!("hydra_node.yaml");

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Choice {
    Name(String),
    Options(Vec<String>),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    SelfRef,
    Config(String),
    Group { group: String, choice: Choice },
}

/// One entry of a defaults list (Hydra's InputDefault).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) kind: Kind,
    pub(super) package: Option<String>,
    pub(super) optional: bool,
    pub(super) is_override: bool,
    pub(super) external: bool,
    pub(super) parent_base: String,
    pub(super) parent_package: String,
    pub(super) header: Option<String>,
}

impl Entry {
    pub(super) fn new(kind: Kind, package: Option<String>) -> Entry {
        Entry {
            kind,
            package: package.map(|p| if p == "_here_" { String::new() } else { p }),
            optional: false,
            is_override: false,
            external: false,
            parent_base: String::new(),
            parent_package: String::new(),
            header: None,
        }
    }

    pub(super) fn is_self(&self) -> bool {
        self.kind == Kind::SelfRef
    }

    pub(super) fn update_parent(&mut self, base: &str, package: &str) {
        self.parent_base = base.to_string();
        self.parent_package = package.to_string();
        if let Some(p) = &self.package
            && p.contains("_group_")
        {
            self.package = Some(format!(
                "_global_.{}",
                p.replace("_group_", &self.default_package())
            ));
        }
    }

    pub(super) fn raw_path(&self) -> &str {
        match &self.kind {
            Kind::Config(path) => path,
            Kind::Group { group, .. } => group,
            Kind::SelfRef => "",
        }
    }

    pub(super) fn relative_group_path(&self) -> String {
        let path = self.raw_path().trim_start_matches('/');
        match &self.kind {
            Kind::Config(_) => path.rsplit_once('/').map_or("", |(d, _)| d).to_string(),
            _ => path.to_string(),
        }
    }

    pub(super) fn group_path(&self) -> String {
        let absolute = self.raw_path().starts_with('/');
        let relative = self.relative_group_path();
        if absolute || self.parent_base.is_empty() {
            relative
        } else if relative.is_empty() {
            self.parent_base.clone()
        } else {
            format!("{}/{relative}", self.parent_base)
        }
    }

    pub(super) fn name(&self) -> Option<String> {
        match &self.kind {
            Kind::Config(path) => Some(path.rsplit('/').next().unwrap_or(path).to_string()),
            Kind::Group {
                choice: Choice::Name(n),
                ..
            } => Some(n.clone()),
            _ => None,
        }
    }

    pub(super) fn config_path(&self) -> String {
        match &self.kind {
            Kind::Config(path) => {
                let absolute = path.starts_with('/');
                let path = path.trim_start_matches('/');
                if absolute || self.parent_base.is_empty() {
                    path.to_string()
                } else {
                    format!("{}/{path}", self.parent_base)
                }
            }
            _ => format!("{}/{}", self.group_path(), self.name().unwrap_or_default()),
        }
    }

    pub(super) fn default_package(&self) -> String {
        self.group_path().replace('/', ".")
    }

    pub(super) fn final_package(&self, with_header: bool) -> String {
        let package = self
            .package
            .clone()
            .or_else(|| self.header.clone().filter(|_| with_header))
            .unwrap_or_else(|| self.relative_group_path().replace('/', "."));
        let joined = if self.parent_package.is_empty() {
            package
        } else if package.is_empty() {
            self.parent_package.clone()
        } else {
            format!("{}.{package}", self.parent_package)
        };
        match joined.rfind("_global_") {
            Some(i) => joined
                .get(i + "_global_".len() + 1..)
                .unwrap_or("")
                .to_string(),
            None => joined,
        }
    }

    /// `group` or `group@package`: what a command-line group override must name.
    pub(super) fn override_key(&self) -> Option<String> {
        if !matches!(self.kind, Kind::Group { .. }) {
            return None;
        }
        let group = self.group_path();
        let default = self.default_package();
        let mut package = self.final_package(false);
        if default == package {
            return Some(group);
        }
        if package.is_empty() {
            package = "_global_".into();
        }
        Some(format!("{group}@{package}"))
    }
}

/// One loaded config file.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub(super) content: Node,
    pub(super) defaults: Vec<Entry>,
    pub(super) header: Option<String>,
}

pub(super) fn validate_self(defaults: &mut Vec<Entry>, config_path: &str) -> Result<(), Fail> {
    let mut has_self = false;
    let mut has_non_override = false;
    for d in defaults.iter() {
        if !d.is_override {
            has_non_override = true;
        }
        if d.is_self() {
            if has_self {
                return Err(Fail::Refused(format!(
                    "Duplicate _self_ defined in {config_path}"
                )));
            }
            has_self = true;
        }
    }
    if (!has_self && has_non_override) || defaults.is_empty() {
        defaults.push(Entry::new(Kind::SelfRef, None));
    }
    Ok(())
}

pub(super) fn hydra_node() -> Node {
    serde_yaml::from_str::<Yaml>(HYDRA_NODE)
        .map(|v| Node::from_yaml(&v))
        .unwrap_or_else(|_| Node::empty())
}

/// `# @package x` in the header (leading `# @key value` lines) makes x the absolute package.
pub(super) fn package_header(text: &str) -> Result<Option<String>, String> {
    let head: String = text.chars().take(512).collect();
    for line in head.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(rest) = line.strip_prefix('#').map(str::trim_start) else {
            break;
        };
        if !rest.starts_with('@') {
            break;
        }
        let parts: Vec<&str> = rest
            .trim_start_matches('#')
            .split(' ')
            .filter(|p| !p.is_empty())
            .collect();
        match parts.as_slice() {
            [key, value] if *key == "@package" => {
                let value = value.trim();
                return Ok(Some(if value.is_empty() || value == "_global_" {
                    "_global_".to_string()
                } else if value.starts_with("_global_.") {
                    value.to_string()
                } else {
                    format!("_global_.{value}")
                }));
            }
            [_, _] => {}
            [_] | [] => return Err(format!("Expected header format: KEY VALUE, got '{rest}'")),
            _ => return Err(format!("Too many components in '{rest}'")),
        }
    }
    Ok(None)
}

pub(super) fn parse_config(path: &Path, text: String) -> Result<Loaded, Fail> {
    let header = package_header(&text).map_err(|message| {
        Fail::Invalid(yaml::ConfigError {
            origin: path.to_path_buf(),
            line: 1,
            column: 1,
            message,
            hint: None,
        })
    })?;
    let source = Source::new(path, text);
    let mut doc: Yaml = yaml::parse(&source).map_err(Fail::Invalid)?;
    doc.apply_merge()
        .map_err(|e| Fail::Invalid(source.error_at(&[], e.to_string())))?;
    let mut map = match doc {
        Yaml::Null => serde_yaml::Mapping::new(),
        Yaml::Mapping(m) => m,
        _ => {
            return Err(Fail::Invalid(
                source.error_at(&[], "a Hydra config must be a mapping"),
            ));
        }
    };
    let defaults = match map.remove("defaults") {
        None => Vec::new(),
        Some(Yaml::Sequence(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                parse_entry(item).map_err(|m| {
                    Fail::Invalid(source.error_at(&[Seg::Key("defaults".into()), Seg::Index(i)], m))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(Fail::Invalid(source.error_at(
                &[Seg::Key("defaults".into())],
                "defaults must be a list",
            )));
        }
    };
    Ok(Loaded {
        content: Node::from_yaml(&Yaml::Mapping(map)),
        defaults,
        header,
    })
}

/// `_self_`, `path[@pkg]`, or `[optional ][override ]group[@pkg]: option | [options] | null`.
pub(super) fn parse_entry(item: &Yaml) -> Result<Entry, String> {
    let split_package = |s: &str| -> (String, Option<String>) {
        match s.split_once('@') {
            Some((g, p)) => (
                g.to_string(),
                Some(p.split_once(':').map_or(p, |(p, _)| p).to_string()),
            ),
            None => (s.to_string(), None),
        }
    };
    match item {
        Yaml::String(s) if s == "_self_" => Ok(Entry::new(Kind::SelfRef, None)),
        Yaml::String(s) => {
            let (path, package) = split_package(s);
            if path == "_self_" {
                return Err("_self_@PACKAGE is not supported".into());
            }
            Ok(Entry::new(Kind::Config(path), package))
        }
        Yaml::Mapping(m) if m.len() == 1 => {
            let Some((Yaml::String(key), value)) = m.iter().next() else {
                return Err("a defaults entry's key must be a string".into());
            };
            let (group_words, package) = split_package(key);
            let words: Vec<&str> = group_words.split(' ').collect();
            let (group, keywords) = words.split_last().ok_or("a defaults entry has no group")?;
            let mut optional = false;
            let mut is_override = false;
            for w in keywords {
                match *w {
                    "optional" => optional = true,
                    "override" => is_override = true,
                    _ => break,
                }
            }
            let choice = match value {
                Yaml::Null => Choice::Null,
                Yaml::String(s) => Choice::Name(s.clone()),
                Yaml::Sequence(items) => Choice::Options(
                    items
                        .iter()
                        .map(|i| {
                            i.as_str().map(str::to_string).ok_or_else(|| {
                                "nested list items of a defaults entry must be strings".to_string()
                            })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                _ => return Err("a defaults entry's value must be a string, a list or null".into()),
            };
            let mut entry = Entry::new(
                Kind::Group {
                    group: group.to_string(),
                    choice,
                },
                package,
            );
            entry.optional = optional;
            entry.is_override = is_override;
            Ok(entry)
        }
        Yaml::Mapping(m) if m.is_empty() => {
            Err("a defaults entry is missing its group name".into())
        }
        Yaml::Mapping(_) => Err("too many keys in a defaults entry".into()),
        _ => Err("a defaults entry must be a string or a one-key mapping".into()),
    }
}

/// A defaults entry's `${key}` (in its option, or a config entry's path) replaced by the
/// option chosen for the group `key`, as Hydra resolves it against the known choices. A
/// key no choice has is Hydra's error; what OmegaConf would resolve otherwise (a resolver,
/// a nested or dotted key, a null choice) is not modelled.
pub(super) fn resolve_interpolation(
    entry: &mut Entry,
    known: &BTreeMap<String, Option<String>>,
    config_path: &str,
) -> Result<(), Fail> {
    let text = match &entry.kind {
        Kind::Group {
            choice: Choice::Name(name),
            ..
        } => name.clone(),
        Kind::Config(path) => path.clone(),
        _ => return Ok(()),
    };
    let unsupported = || {
        Fail::Unsupported(format!(
            "In '{config_path}': the defaults entry '{}: {text}' chooses its option by an interpolation argus does not model",
            entry.raw_path()
        ))
    };
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(unsupported)?;
        let key = &after[..end];
        if key.is_empty() || key.contains(['$', '{', ':', '.', ' ']) {
            return Err(unsupported());
        }
        match known.get(key) {
            Some(Some(choice)) => out.push_str(choice),
            Some(None) => return Err(unsupported()),
            None => {
                let keys: Vec<&str> = known.keys().map(String::as_str).collect();
                return Err(Fail::Refused(format!(
                    "Error resolving interpolation '{text}', possible interpolation keys: {}",
                    keys.join(", ")
                )));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    match &mut entry.kind {
        Kind::Group { choice, .. } => *choice = Choice::Name(out),
        Kind::Config(path) => *path = out,
        Kind::SelfRef => {}
    }
    Ok(())
}
