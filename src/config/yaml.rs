//! The one place YAML is parsed. Every config error carries file:line:column.
//!
//! Type and key errors come from serde (which knows where it was); semantic errors found
//! after parsing (a GPU id used twice, a count below 1) are pointed at the offending node
//! with [`locate`], which walks the document's events to a key path.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use saphyr_parser::{Event, Parser, Span};
use serde::de::DeserializeOwned;

/// A YAML document and the name it is reported under.
#[derive(Debug, Clone)]
pub struct Source {
    /// Where the text came from (a file path, or `<built-in local profile>`).
    pub origin: PathBuf,
    pub text: String,
}

impl Source {
    pub fn new(origin: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        Self {
            origin: origin.into(),
            text: text.into(),
        }
    }

    /// Reads a file; an unreadable file is reported as a config error at 1:1.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        std::fs::read_to_string(path)
            .map(|text| Self::new(path, text))
            .map_err(|e| ConfigError {
                origin: path.to_path_buf(),
                line: 0,
                column: 0,
                message: format!("cannot read: {e}"),
                hint: None,
            })
    }

    /// An error at the node found at `path` (or at the top of the file if it is absent).
    pub fn error_at(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        let (line, column) = locate(&self.text, path).unwrap_or((1, 1));
        ConfigError {
            origin: self.origin.clone(),
            line,
            column,
            message: format!("{}: {}", display_path(path), message.into()),
            hint: None,
        }
    }
}

/// One step of a key path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Builds a key path: `path!["workers", 1, "device_ids"]`.
#[macro_export]
macro_rules! yaml_path {
    ($($seg:expr),* $(,)?) => { [$($crate::config::yaml::Seg::from($seg)),*] };
}

impl From<&str> for Seg {
    fn from(key: &str) -> Self {
        Seg::Key(key.to_string())
    }
}
impl From<String> for Seg {
    fn from(key: String) -> Self {
        Seg::Key(key)
    }
}
impl From<usize> for Seg {
    fn from(index: usize) -> Self {
        Seg::Index(index)
    }
}

/// `workers[1].device_ids[0]`, the way serde_yaml names paths in its own errors.
pub fn display_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() { ".".to_string() } else { out }
}

/// A config file that cannot be used, and where.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    pub origin: PathBuf,
    /// 1-based; 0 when the error is about the whole file (unreadable).
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl ConfigError {
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.origin.display(), self.message)?;
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.origin.display(),
                self.line,
                self.column,
                self.message
            )?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  valid: {hint}")?;
        }
        Ok(())
    }
}

/// Deserializes a document, turning serde_yaml's error into a located [`ConfigError`].
///
/// A key given twice in one mapping is refused first, at the second one: serde would
/// keep the last silently for maps (`env`, `env_vars`, `overrides`) and report a
/// struct's duplicate field at the mapping's start.
pub fn parse<T: DeserializeOwned>(source: &Source) -> Result<T, ConfigError> {
    if let Some(dup) = find_duplicate_key(&source.text) {
        let mut path = dup.path;
        path.push(Seg::Key(dup.key.clone()));
        return Err(ConfigError {
            origin: source.origin.clone(),
            line: dup.line,
            column: dup.column,
            message: format!(
                "{}: key {:?} is given twice (first at line {}, column {})",
                display_path(&path),
                dup.key,
                dup.first.0,
                dup.first.1
            ),
            hint: Some("each key at most once in a mapping; remove one of them".into()),
        });
    }
    serde_yaml::from_str(&source.text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((1, 1));
        let text = e.to_string();
        // serde_yaml appends " at line L column C"; we print the location in front instead.
        let message = match text.rsplit_once(" at line ") {
            Some((head, _)) => head.to_string(),
            None => text,
        };
        ConfigError {
            origin: source.origin.clone(),
            line,
            column,
            message,
            hint: None,
        }
    })
}

/// A key that a mapping has twice: where its mapping is, and both places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    pub path: Vec<Seg>,
    pub key: String,
    /// The second occurrence (1-based).
    pub line: usize,
    pub column: usize,
    /// The first occurrence (1-based line, column).
    pub first: (usize, usize),
}

/// The first key given twice in any mapping of the document (scalar keys, compared as
/// written). A document the YAML parser refuses has none: serde reports it instead.
pub fn find_duplicate_key(text: &str) -> Option<DuplicateKey> {
    let mut events = Parser::new_from_str(text).map_while(Result::ok);
    // Documents after the first are refused by serde; look at the first only.
    let first = events.find(|(ev, _)| {
        !matches!(
            ev,
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing
        )
    })?;
    let mut path = Vec::new();
    duplicate_in(&mut events, first, &mut path, 0)
}

/// Nesting deeper than this is left to serde (which has its own recursion limit).
const MAX_DEPTH: usize = 128;

fn duplicate_in<'a>(
    events: &mut impl Iterator<Item = Spanned<'a>>,
    node: Spanned<'a>,
    path: &mut Vec<Seg>,
    depth: usize,
) -> Option<DuplicateKey> {
    if depth > MAX_DEPTH {
        skip(events, node);
        return None;
    }
    match node.0 {
        Event::MappingStart(..) => {
            let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
            loop {
                let key = events.next()?;
                if matches!(key.0, Event::MappingEnd) {
                    return None;
                }
                let name = match &key.0 {
                    Event::Scalar(name, ..) => Some(name.to_string()),
                    _ => None,
                };
                let at = (key.1.start.line(), key.1.start.col() + 1);
                if name.is_none() {
                    skip(events, key);
                }
                if let Some(name) = &name {
                    if let Some(first) = seen.get(name) {
                        return Some(DuplicateKey {
                            path: path.clone(),
                            key: name.clone(),
                            line: at.0,
                            column: at.1,
                            first: *first,
                        });
                    }
                    seen.insert(name.clone(), at);
                }
                let value = events.next()?;
                path.push(Seg::Key(name.unwrap_or_else(|| "?".into())));
                let found = duplicate_in(events, value, path, depth + 1);
                path.pop();
                if found.is_some() {
                    return found;
                }
            }
        }
        Event::SequenceStart(..) => {
            let mut index = 0;
            loop {
                let item = events.next()?;
                if matches!(item.0, Event::SequenceEnd) {
                    return None;
                }
                path.push(Seg::Index(index));
                let found = duplicate_in(events, item, path, depth + 1);
                path.pop();
                if found.is_some() {
                    return found;
                }
                index += 1;
            }
        }
        _ => None,
    }
}

/// Serde for an enum written as one word (`workload: ppo`): anything else, a list or a
/// map included, is "expected one of ppo|grpo|sft|custom", never a YAML-tag message.
#[macro_export]
macro_rules! string_enum {
    ($name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        impl $name {
            /// Every spelling, as written in YAML.
            pub const CHOICES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl ::serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        write!(f, "one of {}", $name::CHOICES.join("|"))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        match v {
                            $($text => Ok($name::$variant),)+
                            _ => Err(E::unknown_variant(v, $name::CHOICES)),
                        }
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

/// Serializes a value as YAML (used for records written under the shared storage).
pub fn to_string<T: serde::Serialize>(value: &T) -> String {
    // Serializing plain data structs (strings, maps, numbers) cannot fail.
    serde_yaml::to_string(value).unwrap_or_default()
}

/// The (line, column), both 1-based, of the node at `path`, if the document has one.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let mut events = Parser::new_from_str(text).map_while(Result::ok);
    let first = events.find(|(ev, _)| {
        !matches!(
            ev,
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing
        )
    })?;
    let span = descend(&mut events, first, path)?;
    Some((span.start.line(), span.start.col() + 1))
}

type Spanned<'a> = (Event<'a>, Span);

fn descend<'a>(
    events: &mut impl Iterator<Item = Spanned<'a>>,
    node: Spanned<'a>,
    path: &[Seg],
) -> Option<Span> {
    let Some((seg, rest)) = path.split_first() else {
        return Some(node.1);
    };
    match (node.0, seg) {
        (Event::MappingStart(..), Seg::Key(want)) => loop {
            let key = events.next()?;
            let Event::Scalar(name, ..) = &key.0 else {
                if matches!(key.0, Event::MappingEnd) {
                    return None;
                }
                skip(events, key);
                let value = events.next()?;
                skip(events, value);
                continue;
            };
            let matched = name.as_ref() == want.as_str();
            let value = events.next()?;
            if matched {
                // A key whose value is absent (`key:`) points at the key itself.
                return if rest.is_empty()
                    && matches!(value.0, Event::Scalar(..))
                    && value.1.start == value.1.end
                {
                    Some(key.1)
                } else {
                    descend(events, value, rest)
                };
            }
            skip(events, value);
        },
        (Event::SequenceStart(..), Seg::Index(want)) => {
            let mut index = 0;
            loop {
                let item = events.next()?;
                if matches!(item.0, Event::SequenceEnd) {
                    return None;
                }
                if index == *want {
                    return descend(events, item, rest);
                }
                skip(events, item);
                index += 1;
            }
        }
        _ => None,
    }
}

/// Consumes the rest of a node whose first event is `node`.
fn skip<'a>(events: &mut impl Iterator<Item = Spanned<'a>>, node: Spanned<'a>) {
    let mut depth = match node.0 {
        Event::MappingStart(..) | Event::SequenceStart(..) => 1usize,
        _ => return,
    };
    while depth > 0 {
        match events.next() {
            Some((Event::MappingStart(..) | Event::SequenceStart(..), _)) => depth += 1,
            Some((Event::MappingEnd | Event::SequenceEnd, _)) => depth -= 1,
            Some(_) => {}
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name: ''\nworkers:\n  - name: gpu\n    device_ids: [[0, 1], [2, 3]]\n  - name: b\n    count: 0\nempty:\n";

    #[test]
    fn locates_nested_keys_and_indices() {
        assert_eq!(
            locate(DOC, &yaml_path!["name"]),
            Some((1, 7)),
            "an empty quoted value is a value"
        );
        assert_eq!(
            locate(DOC, &yaml_path!["workers", 1, "count"]),
            Some((6, 12))
        );
        assert_eq!(
            locate(DOC, &yaml_path!["workers", 0, "device_ids", 1, 0]),
            Some((4, 27))
        );
        assert_eq!(locate(DOC, &yaml_path!["empty"]), Some((7, 1)));
        assert_eq!(locate(DOC, &yaml_path!["missing"]), None);
        assert_eq!(locate(DOC, &yaml_path!["workers", 5]), None);
    }

    #[test]
    fn display_matches_serde_yaml_style() {
        assert_eq!(
            display_path(&yaml_path!["workers", 1, "device_ids", 0]),
            "workers[1].device_ids[0]"
        );
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        list: Vec<std::collections::BTreeMap<String, u32>>,
        a: Option<u32>,
    }

    #[test]
    fn serde_alone_keeps_the_last_of_a_duplicate_map_key() {
        // Why `parse` looks for duplicates itself: serde_yaml_ng accepts this.
        let doc: Doc = serde_yaml::from_str("env: {A: 1, A: 2}\n").unwrap();
        assert_eq!(doc.env["A"], "2");
    }

    #[test]
    fn duplicate_keys_are_refused_at_the_second_one_anywhere() {
        for (text, line, column, path) in [
            ("env:\n  A: x\n  B: y\n  A: z\n", 4, 3, "env.A"),
            ("env: {A: 1, A: 2}\n", 1, 13, "env.A"),
            ("a: 1\nenv: {}\na: 2\n", 3, 1, "a"),
            (
                "list:\n  - {x: 1}\n  - {x: 1, y: 2, x: 3}\n",
                3,
                18,
                "list[1].x",
            ),
            ("env: {'A': 1, \"A\": 2}\n", 1, 15, "env.A"),
        ] {
            let err = parse::<Doc>(&Source::new("d.yaml", text)).unwrap_err();
            assert_eq!((err.line, err.column), (line, column), "{text:?}: {err}");
            assert!(err.message.starts_with(&format!("{path}: key")), "{err}");
            assert!(
                err.message.contains("is given twice (first at line"),
                "{err}"
            );
        }
        // The same key in different mappings is fine.
        parse::<Doc>(&Source::new("d.yaml", "list: [{x: 1}, {x: 2}]\n")).unwrap();
    }

    #[test]
    fn one_word_enums_say_their_choices() {
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum Mode {
            A,
            B,
        }
        crate::string_enum!(Mode { A = "a", B = "b" });
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            mode: Mode,
        }
        for text in ["mode: [a]\n", "mode: {a: 1}\n"] {
            let err = parse::<T>(&Source::new("t.yaml", text)).unwrap_err();
            assert!(
                err.message.ends_with("expected one of a|b"),
                "{text:?}: {err}"
            );
            assert!(!err.message.contains("tag"), "{err}");
        }
        let err = parse::<T>(&Source::new("t.yaml", "mode: c\n")).unwrap_err();
        assert!(
            err.message
                .contains("unknown variant `c`, expected `a` or `b`"),
            "{err}"
        );
        assert_eq!(Mode::B.to_string(), "b");
    }

    #[test]
    fn parse_errors_carry_location_without_duplicating_it() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: u32,
        }
        let err = parse::<T>(&Source::new("f.yaml", "a: 1\nb: 2\n")).unwrap_err();
        assert_eq!((err.line, err.column), (2, 1));
        assert_eq!(
            err.to_string(),
            "f.yaml:2:1: unknown field `b`, expected `a`"
        );
    }
}
