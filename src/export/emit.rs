//! Manifests as YAML that every Kubernetes reader takes the same way. Pure.
//!
//! kubectl and the API server read YAML 1.1, where `on`, `yes`, `n` or `1:30` are not
//! strings; serde_yaml writes YAML 1.2 and leaves them bare. Here a string is written
//! plain only when it cannot be read as anything else under either version, as a block
//! literal when it has line feeds and nothing else a reader of either version could take
//! for a line break or refuse as non-printable, and double-quoted otherwise, with every
//! such character escaped (`\uXXXX`): YAML 1.1 readers (PyYAML, libyaml, kubectl) also
//! break lines at CR, NEL, U+2028 and U+2029, which would end a literal or fold inside
//! quotes, and the rest of a value would become keys of the object. Maps come out with
//! sorted keys: the same value gives the same bytes.

use serde_json::Value;

/// A JSON value (an object) as a block-style YAML document.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => mapping(map, 0, &mut out),
        other => {
            out.push_str(&inline(other).unwrap_or_else(|| "{}".into()));
            out.push('\n');
        }
    }
    out
}

/// Readers take a key written `key:` (an implicit key) only up to 1024 characters; a
/// longer one is written as an explicit key (`? key` then `:` on the next line).
const IMPLICIT_KEY_MAX: usize = 512;

fn mapping(map: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (key, value) in map {
        let key = string(key);
        out.push_str(&" ".repeat(indent));
        if key.chars().count() > IMPLICIT_KEY_MAX {
            out.push_str("? ");
            out.push_str(&key);
            out.push('\n');
            out.push_str(&" ".repeat(indent));
        } else {
            out.push_str(&key);
        }
        out.push(':');
        child(value, indent, out);
    }
}

/// What follows `key:` or `-`: a scalar on the same line, or a nested block.
fn child(value: &Value, indent: usize, out: &mut String) {
    if let Some(text) = inline(value) {
        out.push(' ');
        out.push_str(&text);
        out.push('\n');
        return;
    }
    match value {
        Value::Object(map) => {
            out.push('\n');
            mapping(map, indent + 2, out);
        }
        Value::Array(items) => {
            out.push('\n');
            sequence(items, indent, out);
        }
        Value::String(text) => literal(text, indent + 2, out),
        _ => unreachable!("scalars are inline"),
    }
}

/// Items at the parent key's indentation (`- name: x`), as kubectl writes them.
fn sequence(items: &[Value], indent: usize, out: &mut String) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            Value::Object(map) if !map.is_empty() => {
                // The first key on the dash's line, the rest aligned under it.
                let mut nested = String::new();
                mapping(map, indent + 2, &mut nested);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            other => child(other, indent + 2, out),
        }
    }
}

/// A scalar or an empty collection on one line; None for what needs a block.
fn inline(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if s.contains('\n') && literal_ok(s) => None,
        Value::String(s) => Some(string(s)),
        Value::Array(items) if items.is_empty() => Some("[]".into()),
        Value::Object(map) if map.is_empty() => Some("{}".into()),
        _ => None,
    }
}

/// `|` (one final line break) or `|-` (none), the lines indented under the key.
fn literal(text: &str, indent: usize, out: &mut String) {
    let (body, indicator) = match text.strip_suffix('\n') {
        Some(body) => (body, "|"),
        None => (text, "|-"),
    };
    out.push(' ');
    out.push_str(indicator);
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// Block literals keep every character as is, so they hold only characters written raw
/// means the same to every reader ([`raw_ok`], and `\n`); they cannot start with a blank
/// line or an indented one (that would need an indentation indicator), end in several
/// line breaks, or have lines ending in blanks.
fn literal_ok(text: &str) -> bool {
    let first = text.split('\n').next().unwrap_or_default();
    !first.is_empty()
        && !first.starts_with([' ', '\t'])
        && !text.ends_with("\n\n")
        && text.chars().all(|c| c == '\n' || raw_ok(c))
        && !text.split('\n').any(|l| l.ends_with([' ', '\t']))
}

/// A character that YAML 1.1 and 1.2 both call printable and neither takes for a line
/// break: not the C0 and C1 controls (tab, LF, CR and NEL included), DEL, the line and
/// paragraph separators, the byte order mark (a reader may drop it), surrogates or
/// U+FFFE/U+FFFF.
fn raw_ok(c: char) -> bool {
    matches!(c,
        ' '..='~'
        | '\u{a0}'..='\u{d7ff}'
        | '\u{e000}'..='\u{fffd}'
        | '\u{10000}'..='\u{10ffff}')
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Plain when no YAML 1.1 or 1.2 reader can take it for anything but this string;
/// double-quoted otherwise.
fn string(text: &str) -> String {
    if plain_ok(text) {
        text.to_string()
    } else {
        quoted(text)
    }
}

/// A double-quoted scalar on one line: `"` and `\` escaped, and every character that is
/// not [`raw_ok`] written as an escape both YAML versions read the same (`\n`, `\t`,
/// `\r`, else `\uXXXX`), so nothing is folded, dropped or taken for a break.
fn quoted(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if raw_ok(c) => out.push(c),
            // Writing to a String cannot fail.
            c if u32::from(c) > 0xFFFF => {
                let _ = write!(out, "\\U{:08X}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

fn plain_ok(text: &str) -> bool {
    const WORDS: [&str; 10] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan",
    ];
    text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:@+=,-".contains(c))
        // `x:` would end in a mapping indicator.
        && !text.ends_with(':')
        && !WORDS.contains(&text.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_style_with_sorted_keys() {
        let v = json!({"spec": {"b": [{"x": 1, "name": "a"}, "s"], "a": {}}, "apiVersion": "ray.io/v1", "empty": []});
        assert_eq!(
            to_yaml(&v),
            "apiVersion: ray.io/v1\nempty: []\nspec:\n  a: {}\n  b:\n  - name: a\n    x: 1\n  - s\n"
        );
    }

    #[test]
    fn strings_a_yaml_1_1_reader_would_retype_are_quoted() {
        for s in [
            "on", "Yes", "n", "NULL", "1", "1:30", "0o17", "", " x", "a b", "-x", "~", "=", "*a",
        ] {
            assert_eq!(string(s), serde_json::to_string(s).unwrap(), "{s}");
        }
        for s in [
            "argus/ray:2.51.1",
            "worker_node",
            "app.kubernetes.io/managed-by",
            "/mnt/shared",
            "HTTPMode",
        ] {
            assert_eq!(string(s), s);
        }
        assert_eq!(string("x:"), "\"x:\"");
    }

    #[test]
    fn multi_line_strings_are_block_literals() {
        let v = json!({"a": "{\n  \"k\": 1\n}", "b": "x\n", "c": "\n lead"});
        assert_eq!(
            to_yaml(&v),
            "a: |-\n  {\n    \"k\": 1\n  }\nb: |\n  x\nc: \"\\n lead\"\n"
        );
        let nested = json!({"l": [{"m": "p\nq"}]});
        assert_eq!(to_yaml(&nested), "l:\n- m: |-\n    p\n    q\n");
    }

    #[test]
    fn the_output_reads_back_as_the_same_value() {
        let v = json!({"env": [{"name": "X", "value": "on"}, {"name": "Y", "value": "it's \"q\" \\ é\ttab"}], "n": 1.5, "t": true, "multi": "a\nb\n"});
        let back: Value = serde_yaml::from_str(&to_yaml(&v)).unwrap();
        assert_eq!(back, v);
    }

    /// Every value a reader could take for another: each character with the payloads a
    /// line break would turn into keys, in a quoted scalar, a would-be block literal and
    /// a key.
    fn payloads(c: char) -> Vec<(String, String)> {
        vec![
            (format!("{c}"), format!("{c}")),
            (format!("q{c}"), format!("x{c}suspend: true")),
            (format!("n{c}"), format!("x{c}  hostPID: true")),
            (format!("l{c}"), format!("echo a\n{c}suspend: true\nb{c}\n")),
            (format!("j{c}"), format!("{{\n  \"A\": \"{c}\\\"\"\n}}")),
        ]
    }

    fn every_char(range: std::ops::RangeInclusive<u32>) -> impl Iterator<Item = char> {
        range.filter_map(char::from_u32)
    }

    #[track_caller]
    fn reads_back(v: &Value) {
        let yaml = to_yaml(v);
        let back: Value = serde_yaml::from_str(&yaml)
            .unwrap_or_else(|e| panic!("does not read back: {e}\n{yaml}"));
        assert_eq!(&back, v, "{yaml}");
    }

    #[test]
    fn every_character_reads_back_as_itself() {
        let all: Vec<char> = every_char(0..=0x10FFFF).collect();
        for chunk in all.chunks(8192) {
            let map: serde_json::Map<String, Value> = chunk
                .iter()
                .map(|c| (format!("k{:x}", u32::from(*c)), json!(format!("a{c}b: c"))))
                .collect();
            reads_back(&Value::Object(map));
        }
    }

    #[test]
    fn no_line_break_or_control_character_makes_keys() {
        let ranges = [
            0..=0x2FF,
            0x1680..=0x180F,
            0x2000..=0x206F,
            0x3000..=0x3000,
            0xD7F0..=0xD7FF,
            0xE000..=0xE0FF,
            0xFDD0..=0xFDEF,
            0xFE00..=0xFFFF,
            0x10000..=0x100FF,
            0x1FFFE..=0x1FFFF,
            0x10FFF0..=0x10FFFF,
        ];
        for range in ranges {
            for c in every_char(range) {
                let values: serde_json::Map<String, Value> = payloads(c)
                    .into_iter()
                    .map(|(k, v)| (k, json!(v)))
                    .collect();
                let env: Vec<Value> = values
                    .iter()
                    .map(|(k, v)| json!({"name": k, "value": v}))
                    .collect();
                reads_back(&json!({"spec": {"env": env, "by_key": values}, "z": 1}));
            }
        }
    }

    #[test]
    fn breaks_and_non_printables_are_escaped_never_raw() {
        for (c, escape) in [
            ('\u{2028}', r"\u2028"),
            ('\u{2029}', r"\u2029"),
            ('\u{85}', r"\u0085"),
            ('\u{feff}', r"\uFEFF"),
            ('\u{7f}', r"\u007F"),
            ('\u{0}', r"\u0000"),
            ('\u{ffff}', r"\uFFFF"),
            ('\r', r"\r"),
        ] {
            let yaml = to_yaml(&json!({"v": format!("a\n{c}suspend: true\n")}));
            assert_eq!(yaml, format!("v: \"a\\n{escape}suspend: true\\n\"\n"));
        }
        assert_eq!(
            to_yaml(&json!({"v": "é \u{10FFFD}\n"})),
            "v: |\n  é \u{10FFFD}\n"
        );
    }

    #[test]
    fn a_long_key_is_an_explicit_key() {
        let long = "k".repeat(2000);
        let v = json!({ &long: {"a": [1]}, "l": [{ &long: "x", "b": 2 }] });
        let yaml = to_yaml(&v);
        assert!(
            yaml.starts_with(&format!("? {long}\n:\n  a:\n  - 1\n")),
            "{yaml}"
        );
        reads_back(&v);
    }
}
