//! Writing values: YAML values as override values that Hydra reads back unchanged.

use serde_yaml::Value as Yaml;

use super::lex::ESCAPED;
use super::{FormatError, HydraValue, parse_value};

/// A YAML value as Hydra override syntax: `1`, `true`, `null`, `abc`, `'a b'`, `[a,b]`, `{k:v}`.
/// Best effort; [`try_format_value`] also proves that Hydra reads it back unchanged.
pub fn format_value(value: &Yaml) -> String {
    match value {
        Yaml::Null => "null".to_string(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => format_number(n),
        Yaml::String(s) => format_string(s),
        Yaml::Sequence(items) => format!(
            "[{}]",
            items.iter().map(format_value).collect::<Vec<_>>().join(",")
        ),
        Yaml::Mapping(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", format_key(k), format_value(v)))
                .collect();
            format!("{{{}}}", entries.join(","))
        }
        Yaml::Tagged(tagged) => format_value(&tagged.value),
    }
}

/// [`format_value`], refused when Hydra would read the text back as anything else
/// (a mapping key Hydra's syntax cannot write, such as one with a quote, or the string "1").
pub fn try_format_value(value: &Yaml) -> Result<String, FormatError> {
    check_keys(value)?;
    let text = format_value(value);
    match parse_value(&text) {
        Ok(parsed) if parsed.same_as(value) => Ok(text),
        Ok(parsed) => Err(FormatError(format!(
            "Hydra would read {text} back as {}",
            describe(&parsed)
        ))),
        Err(e) => Err(FormatError(format!("Hydra cannot parse {text}: {e}"))),
    }
}

fn check_keys(value: &Yaml) -> Result<(), FormatError> {
    match value {
        Yaml::Sequence(items) => items.iter().try_for_each(check_keys),
        Yaml::Mapping(map) => map.iter().try_for_each(|(k, v)| {
            if let Yaml::String(s) = k
                && let Some(c) = s.chars().find(|c| !key_char_ok(*c))
            {
                return Err(FormatError(format!(
                    "the mapping key {s:?} has {c:?}, which Hydra's syntax cannot write in a key (keys cannot be quoted)"
                )));
            }
            check_keys(v)
        }),
        Yaml::Tagged(t) => check_keys(&t.value),
        _ => Ok(()),
    }
}

fn describe(v: &HydraValue) -> String {
    match v {
        HydraValue::Null => "null".into(),
        HydraValue::Bool(b) => format!("the boolean {b}"),
        HydraValue::Int(i) => format!("the integer {i}"),
        HydraValue::Float(f) => format!("the float {f}"),
        HydraValue::Str(s) => format!("the string {s:?}"),
        HydraValue::List(_) => "a different list".into(),
        HydraValue::Dict(_) => "a different mapping".into(),
        HydraValue::Sweep(_) => "a sweep".into(),
        HydraValue::Call { name, .. } => format!("a call of {name}()"),
    }
}

fn format_number(n: &serde_yaml::Number) -> String {
    if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
        if f.is_nan() {
            return "nan".into();
        }
        if f.is_infinite() {
            return if f > 0.0 { "inf" } else { "-inf" }.into();
        }
        // Keep it a float for Hydra: `1e16` and `0.5` are, `100` would be an int.
        let text = n.to_string();
        if text.contains(['.', 'e', 'E']) {
            return text;
        }
        return format!("{text}.0");
    }
    n.to_string()
}

/// Characters Hydra reads as themselves in an unquoted value.
fn plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./:@+%".contains(c)
}

/// Plain when Hydra reads it back as the same string, else single-quoted: inside, a quote
/// is written `\'`, and only backslashes just before a quote (or the closing quote) are
/// doubled, since Hydra unescapes nothing else.
pub(super) fn format_string(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(plain_char)
        && !s.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+' || c == '.')
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "nan" | "inf"
        );
    // Paths start with '/', which Hydra reads fine unquoted.
    let path_like = s.starts_with('/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./@+%".contains(c));
    if plain || path_like {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    let mut backslashes = 0;
    for c in s.chars() {
        match c {
            '\\' => backslashes += 1,
            '\'' => {
                push_backslashes(&mut out, 2 * backslashes + 1);
                out.push('\'');
                backslashes = 0;
            }
            _ => {
                push_backslashes(&mut out, backslashes);
                out.push(c);
                backslashes = 0;
            }
        }
    }
    push_backslashes(&mut out, 2 * backslashes);
    out.push('\'');
    out
}

fn push_backslashes(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n('\\', n));
}

/// Characters a dict key may hold (as themselves, or escaped with a backslash).
fn key_char_ok(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-/+.$%*@?|".contains(c) || ESCAPED.contains(c)
}

/// Mapping keys cannot be quoted in Hydra: special characters are backslash-escaped.
fn format_key(key: &Yaml) -> String {
    match key {
        Yaml::String(s) if s.is_empty() => "''".to_string(),
        Yaml::String(s) => {
            let mut out = String::with_capacity(s.len());
            for c in s.chars() {
                if ESCAPED.contains(c) {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
        other => format_value(other),
    }
}
