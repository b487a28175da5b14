//! Manifests as YAML that every Kubernetes reader takes the same way. Pure.
//!
//! kubectl and the API server read YAML 1.1, where `on`, `yes`, `n` or `1:30` are not
//! strings; serde_yaml writes YAML 1.2 and leaves them bare. Here a string is written
//! plain only when it cannot be read as anything else under either version, as a block
//! literal when it has line breaks, and double-quoted (JSON escapes, which YAML shares)
//! otherwise. Maps come out with sorted keys: the same value gives the same bytes.

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

fn mapping(map: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&string(key));
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

/// Block literals keep every character as is, but cannot start with a blank line or
/// an indented one (that would need an indentation indicator), end in several line
/// breaks, or hold control characters.
fn literal_ok(text: &str) -> bool {
    let first = text.split('\n').next().unwrap_or_default();
    !first.is_empty()
        && !first.starts_with([' ', '\t'])
        && !text.ends_with("\n\n")
        && !text.chars().any(|c| c.is_control() && c != '\n')
        && !text.split('\n').any(|l| l.ends_with([' ', '\t']))
}

/// Plain when no YAML 1.1 or 1.2 reader can take it for anything but this string;
/// double-quoted otherwise.
fn string(text: &str) -> String {
    if plain_ok(text) {
        text.to_string()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

fn plain_ok(text: &str) -> bool {
    const WORDS: [&str; 10] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan",
    ];
    text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:@+=,-".contains(c))
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
}
