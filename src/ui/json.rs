//! JSON on stdout: serde_json's text alone, made safe for a terminal by JSON's own means.
//!
//! A `--json` document may hold text from outside (a record's message, another user's
//! command line, a value from a JobSpec). The characters a terminal acts on (the ones
//! [`super::safe`] escapes for text: C0 and C1 controls, DEL, bidirectional overrides
//! and isolates) are written as JSON `\uXXXX` escapes, never as `\u{..}`: the output is
//! valid JSON that reads back to the same strings, and nothing in it can move a cursor or
//! reorder what a reader sees.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// `value` as JSON on `out` (pretty: two-space indentation, as `--json` prints).
pub fn to_writer<W: Write, T: Serialize + ?Sized>(
    out: W,
    value: &T,
    pretty: bool,
) -> io::Result<()> {
    if pretty {
        let mut ser =
            serde_json::Serializer::with_formatter(out, TerminalSafe(PrettyFormatter::new()));
        value.serialize(&mut ser).map_err(io::Error::from)
    } else {
        let mut ser = serde_json::Serializer::with_formatter(out, TerminalSafe(CompactFormatter));
        value.serialize(&mut ser).map_err(io::Error::from)
    }
}

/// [`to_writer`] into a string.
pub fn to_string<T: Serialize + ?Sized>(value: &T, pretty: bool) -> String {
    let mut out = Vec::new();
    // Writing to a Vec fails only when serializing does (a map with non-string keys).
    let _ = to_writer(&mut out, value, pretty);
    String::from_utf8(out).unwrap_or_default()
}

/// A formatter that writes what `inner` writes, with terminal-acting characters of
/// strings escaped as `\uXXXX` (serde_json escapes only C0 controls, `"` and `\`).
struct TerminalSafe<F>(F);

impl<F: Formatter> Formatter for TerminalSafe<F> {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(super::acts_on_terminal) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            writer.write_all(crate::text::json_escape(c).as_bytes())?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }
    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }
    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }
    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_acting_characters_are_json_escapes_and_read_back() {
        let text = "a\u{202e}b\u{85}c\u{9b}[2J\u{7f}\u{1b}]0;t\u{7}\n\té\u{2066}z\u{1F600}";
        let value = serde_json::json!({"m\u{202e}k": [text, 1, {"x": text}]});
        for pretty in [false, true] {
            let out = to_string(&value, pretty);
            assert!(!out.contains("\\u{"), "{out}");
            // Only the layout's own line breaks are left raw.
            assert!(
                !out.chars()
                    .any(|c| c != '\n' && crate::ui::acts_on_terminal(c)),
                "{out:?}"
            );
            assert!(out.contains("\\u202e") && out.contains("\\u0085"), "{out}");
            let back: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
            assert_eq!(back, value);
        }
        // Pretty output is serde_json's own layout.
        let plain = serde_json::json!({"a": [1, {"b": "c"}], "d": {}});
        assert_eq!(
            to_string(&plain, true),
            serde_json::to_string_pretty(&plain).unwrap()
        );
        assert_eq!(to_string(&plain, false), plain.to_string());
    }
}
