//! The one place YAML is parsed. Every config error carries file:line:column.
//!
//! Type and key errors come from serde (which knows where it was); semantic errors found
//! after parsing (a GPU id used twice, a count below 1) are pointed at the offending node
//! with [`locate`], which walks the document's events to a key path.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde::de::DeserializeOwned;

/// A YAML document and the name it is reported under.
#[derive(Debug, Clone)]
pub struct Source {
    /// Where the text came from (a file path, or `<built-in local profile>`).
    pub origin: PathBuf,
    /// The document in effect: the file's text, or, after `--set`, the document the
    /// sets made of it (which no one wrote: see [`Source::place`]).
    pub text: String,
    /// After `--set`: the file's own text, where every node no `--set` touched is.
    pub written: Option<String>,
    /// Each `--set` argument with the node it sets (`["restart", "max"]`).
    pub sets: Vec<(Vec<Seg>, String)>,
}

/// Where a node of a document was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// 1-based line and column of the file.
    At(usize, usize),
    /// By this `--set` argument.
    Set(String),
}

impl Source {
    /// A document; a leading UTF-8 byte order mark (as some editors write) is skipped.
    pub fn new(origin: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        let mut text = text.into();
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        Self {
            origin: origin.into(),
            text,
            written: None,
            sets: Vec::new(),
        }
    }

    /// Where the node at `path` was given: by the last `--set` of it or of a node above
    /// it, else where the file writes it.
    pub fn place(&self, path: &[Seg]) -> Option<Place> {
        if let Some((_, arg)) = self
            .sets
            .iter()
            .rev()
            .find(|(set, _)| path.starts_with(set))
        {
            return Some(Place::Set(arg.clone()));
        }
        locate(self.written.as_deref().unwrap_or(&self.text), path).map(|(l, c)| Place::At(l, c))
    }

    /// Reads a profile or JobSpec from disk: a regular file of at most
    /// [`MAX_FILE_BYTES`], UTF-8. Anything else (a FIFO, a device, a directory, a huge
    /// file) is refused as a config error before it is read, never waited on: the file
    /// is opened non-blocking and judged by what the open handle is.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        read_regular(path, MAX_FILE_BYTES)
            .map(|text| Self::new(path, text))
            .map_err(|message| ConfigError {
                origin: path.to_path_buf(),
                line: 0,
                column: 0,
                message,
                hint: Some(format!(
                    "a profile or JobSpec is a regular UTF-8 file of at most {}",
                    human_size(MAX_FILE_BYTES)
                )),
            })
    }

    /// An error at the node found at `path` (or at the top of the file if it is absent).
    pub fn error_at(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        let message = format!("{}: {}", display_path(path), message.into());
        let (line, column, message) = match self.place(path) {
            Some(Place::At(line, column)) => (line, column, message),
            Some(Place::Set(arg)) => (0, 0, format!("--set {arg}: {message}")),
            None => (1, 1, message),
        };
        ConfigError {
            origin: self.origin.clone(),
            line,
            column,
            message,
            hint: None,
        }
    }
}

/// The largest profile or JobSpec read from disk (1 MiB: the shipped ones are a few KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

fn human_size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The text of a regular file of at most `max` bytes, or why not (the message).
fn read_regular(path: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let kind = |t: std::fs::FileType| {
        if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO (named pipe)"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        }
    };
    let not_regular = |t| format!("cannot read: it is {}, not a regular file", kind(t));
    let too_big = |size: u64| {
        format!(
            "cannot read: it is larger than {} ({size} bytes or more)",
            human_size(max)
        )
    };
    // Judged before opening (a device is never opened) and again on the open handle
    // (the path may have been swapped in between).
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > max {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "cannot read: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
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
            Seg::Key(k) if out.is_empty() => out.push_str(&crate::text::one_line(k)),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(&crate::text::one_line(k));
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
/// The document's structure is checked first ([`find_structural_error`]): a key given
/// twice in one mapping, also through an alias or a merge (`<<: *a`), and a NUL byte in
/// any key or value are refused where they are written. serde would keep the last of a
/// duplicate map key silently (`env`, `env_vars`, `overrides`), report a struct's
/// duplicate field at the mapping's start, and pass a NUL on to a path or a shell word.
pub fn parse<T: DeserializeOwned>(source: &Source) -> Result<T, ConfigError> {
    if let Some(found) = find_structural_error(&source.text) {
        return Err(ConfigError {
            origin: source.origin.clone(),
            line: found.line,
            column: found.column,
            message: format!("{}: {}", display_path(&found.path), found.message),
            hint: Some(found.hint.into()),
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

/// Something wrong with a document's structure, and where (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructuralError {
    /// The node's key path (for a duplicate: the mapping's path and the key).
    pub path: Vec<Seg>,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: &'static str,
}

/// The first structural error of the document: a key given twice in a mapping (scalar
/// keys compared as written, aliases resolved, keys brought in by `<<` merges counted as
/// given there), or a NUL byte in a key or a value. A document the YAML parser refuses
/// has none: serde reports it instead.
pub fn find_structural_error(text: &str) -> Option<StructuralError> {
    // Documents after the first are refused by serde; look at the first only.
    let (mut events, first) = first_document(text)?;
    let mut walker = Walker::default();
    let mut path = Vec::new();
    walker
        .node(&mut events, first, &mut path, 0)
        .err()
        .flatten()
}

/// Nesting deeper than this is left to serde (which has its own recursion limit).
const MAX_DEPTH: usize = 128;

/// What an anchored node is, as far as keys go.
#[derive(Debug, Clone)]
enum Shape {
    Scalar(String),
    /// A mapping's scalar keys (merged ones included).
    Mapping(Vec<String>),
    Other,
}

/// Err(Some) is a finding; Err(None) a document that ended early (serde reports it).
type Walked = Result<Shape, Option<StructuralError>>;

#[derive(Default)]
struct Walker {
    anchors: HashMap<usize, Shape>,
}

const DUPLICATE_HINT: &str =
    "each key at most once in a mapping (keys merged with `<<` count); remove one of them";

impl Walker {
    fn node<'a>(
        &mut self,
        events: &mut impl Iterator<Item = Spanned<'a>>,
        node: Spanned<'a>,
        path: &mut Vec<Seg>,
        depth: usize,
    ) -> Walked {
        if depth > MAX_DEPTH {
            skip(events, node);
            return Ok(Shape::Other);
        }
        let (shape, anchor) = match node.0 {
            Event::Scalar(ref value, _, anchor, _) => {
                if value.contains('\0') {
                    return Err(Some(StructuralError {
                        path: path.clone(),
                        line: node.1.start.line(),
                        column: node.1.start.col() + 1,
                        message: "contains a NUL byte, which no path, shell word or Hydra value can carry".into(),
                        hint: "remove the NUL (`\\0`, `\\x00`, `\\u0000`) from the value",
                    }));
                }
                (Shape::Scalar(value.to_string()), anchor)
            }
            Event::Alias(id) => return Ok(self.anchors.get(&id).cloned().unwrap_or(Shape::Other)),
            Event::MappingStart(anchor, _) => (self.mapping(events, path, depth)?, anchor),
            Event::SequenceStart(anchor, _) => {
                let mut index = 0;
                loop {
                    let item = events.next().ok_or(None)?;
                    if matches!(item.0, Event::SequenceEnd) {
                        break;
                    }
                    path.push(Seg::Index(index));
                    self.node(events, item, path, depth + 1)?;
                    path.pop();
                    index += 1;
                }
                (Shape::Other, anchor)
            }
            _ => (Shape::Other, 0),
        };
        if anchor != 0 {
            self.anchors.insert(anchor, shape.clone());
        }
        Ok(shape)
    }

    fn mapping<'a>(
        &mut self,
        events: &mut impl Iterator<Item = Spanned<'a>>,
        path: &mut Vec<Seg>,
        depth: usize,
    ) -> Walked {
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut keys = Vec::new();
        let mut add = |name: &str, at: (usize, usize), path: &[Seg]| match seen.get(name) {
            Some(first) => {
                let mut path = path.to_vec();
                path.push(Seg::Key(name.to_string()));
                Err(Some(StructuralError {
                    path,
                    line: at.0,
                    column: at.1,
                    message: format!(
                        "key {name:?} is given twice (first at line {}, column {})",
                        first.0, first.1
                    ),
                    hint: DUPLICATE_HINT,
                }))
            }
            None => {
                seen.insert(name.to_string(), at);
                keys.push(name.to_string());
                Ok(())
            }
        };
        loop {
            let key = events.next().ok_or(None)?;
            if matches!(key.0, Event::MappingEnd) {
                break;
            }
            let at = (key.1.start.line(), key.1.start.col() + 1);
            let merge =
                matches!(&key.0, Event::Scalar(k, ScalarStyle::Plain, _, None) if k == "<<");
            let name = match self.node(events, key, path, depth + 1)? {
                Shape::Scalar(name) => Some(name),
                _ => None,
            };
            let value = events.next().ok_or(None)?;
            if merge {
                // `<<: *a`, `<<: {..}` or `<<: [*a, *b]`: their keys are given here.
                let mut merged = Vec::new();
                if let Event::SequenceStart(..) = value.0 {
                    loop {
                        let item = events.next().ok_or(None)?;
                        if matches!(item.0, Event::SequenceEnd) {
                            break;
                        }
                        if let Shape::Mapping(k) = self.node(events, item, path, depth + 1)? {
                            merged.extend(k);
                        }
                    }
                } else if let Shape::Mapping(k) = self.node(events, value, path, depth + 1)? {
                    merged = k;
                }
                for name in &merged {
                    add(name, at, path)?;
                }
                continue;
            }
            if let Some(name) = &name {
                add(name, at, path)?;
            }
            path.push(Seg::Key(name.unwrap_or_else(|| "?".into())));
            self.node(events, value, path, depth + 1)?;
            path.pop();
        }
        Ok(Shape::Mapping(keys))
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

/// The parser's events of `text` and the first event of its first document's content.
fn first_document(
    text: &str,
) -> Option<(
    impl Iterator<Item = (Event<'_>, Span)> + '_,
    (Event<'_>, Span),
)> {
    let mut events = Parser::new_from_str(text).map_while(Result::ok);
    let first = events.find(|(ev, _)| {
        !matches!(
            ev,
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing
        )
    })?;
    Some((events, first))
}

/// The (line, column), both 1-based, of the node at `path`, if the document has one.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let (mut events, first) = first_document(text)?;
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
    #[test]
    fn only_regular_files_of_bounded_size_are_read_and_never_waited_on() {
        let dir = std::env::temp_dir().join(format!("argus-yaml-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.yaml");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let big = dir.join("big.yaml");
        std::fs::write(&big, "a: 1\n".repeat(300_000)).unwrap();
        let started = std::time::Instant::now();
        for (path, says) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (dir.as_path(), "directory"),
            (big.as_path(), "larger than 1 MiB"),
        ] {
            let err = Source::read(path).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(says), "{text}");
            assert!(text.contains("at most 1 MiB"), "{text}");
            assert_eq!(err.line, 0);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct T {
            a: u32,
        }
        let dir = std::env::temp_dir().join(format!("argus-yaml-bom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bom.yaml");
        std::fs::write(&file, "\u{feff}a: 1\n").unwrap();
        let t: T = parse(&Source::read(&file).unwrap()).unwrap();
        assert_eq!(t.a, 1);
        std::fs::remove_dir_all(&dir).unwrap();
        let err = parse::<T>(&Source::new("b.yaml", "\u{feff}a: 1\nb: 2\n")).unwrap_err();
        assert_eq!((err.line, err.column), (2, 1), "{err}");
    }

    #[test]
    fn duplicates_through_aliases_and_merges_are_refused() {
        for (text, line, column, path) in [
            ("base: &a {A: 1}\nenv:\n  <<: *a\n  A: 2\n", 4, 3, "env.A"),
            ("base: &a {A: 1}\nenv:\n  A: 2\n  <<: *a\n", 4, 3, "env.A"),
            (
                "x: &a {A: 1}\ny: &b {A: 2}\nenv: {<<: [*a, *b]}\n",
                3,
                7,
                "env.A",
            ),
            ("env: {<<: {A: 1}, A: 2}\n", 1, 19, "env.A"),
            ("a: &k A\nenv: {A: 1, *k : 2}\n", 2, 13, "env.A"),
        ] {
            let err = parse::<serde_yaml::Value>(&Source::new("d.yaml", text)).unwrap_err();
            assert_eq!((err.line, err.column), (line, column), "{text:?}: {err}");
            assert!(err.message.starts_with(&format!("{path}: key")), "{err}");
        }
        // A merge without a clash, and an alias used as a value, are fine.
        parse::<serde_yaml::Value>(&Source::new(
            "d.yaml",
            "b: &a {A: 1}\nenv: {<<: *a, B: 2}\nc: *a\n",
        ))
        .unwrap();
    }

    #[test]
    fn a_nul_byte_is_refused_where_it_is_written() {
        for (text, line, column, path) in [
            ("overrides: {x.y: \"a\\0b\"}\n", 1, 18, "overrides.x.y"),
            ("overrides:\n  x.y: \"a\\x00b\"\n", 2, 8, "overrides.x.y"),
            ("env: {\"A\\u0000\": 1}\n", 1, 7, "env"),
            ("list: [a, \"\\0\"]\n", 1, 11, "list[1]"),
        ] {
            let err = parse::<serde_yaml::Value>(&Source::new("n.yaml", text)).unwrap_err();
            assert_eq!((err.line, err.column), (line, column), "{text:?}: {err}");
            assert!(
                err.message
                    == format!(
                        "{path}: contains a NUL byte, which no path, shell word or Hydra value can carry"
                    ),
                "{err}"
            );
        }
    }
}
