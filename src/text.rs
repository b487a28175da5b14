//! Text from outside that argus shows on one line: a table cell, a YAML key in an error,
//! a file name in an error. A line break inside it would start a line argus did not write
//! (a forged `status  SUCCEEDED` row, a made-up line of an error), so every character any
//! reader takes for a line break is written as a `\u{..}` escape, as the printer writes the
//! other controls. Also the one way argus writes a character as a JSON escape.

use std::borrow::Cow;
use std::path::Path;

/// Whether `c` breaks a line for some reader: LF, CR, VT, FF, NEL, LINE and PARAGRAPH
/// SEPARATOR.
pub fn breaks_line(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// `text` with its line breaks escaped: one line, whatever it holds.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, breaks_line)
}

/// `text` with every character `escape` picks written as a `\u{..}` escape (borrowed
/// when there is none): the one form argus shows a character it will not print raw.
pub fn escaped(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.contains(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `c` as JSON's `\uXXXX` escape (lowercase hex, as serde_json and Python's `json`
/// write it), a surrogate pair beyond the Basic Multilingual Plane.
pub fn json_escape(c: char) -> String {
    let mut units = [0u16; 2];
    c.encode_utf16(&mut units)
        .iter()
        .map(|u| format!("\\u{u:04x}"))
        .collect()
}

/// A path as an error names it: [`Path::display`] on one line.
pub fn shown(path: &Path) -> String {
    one_line(&path.display().to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_break_is_escaped_and_nothing_else() {
        let text = "a\nstatus  SUCCEEDED\r\u{b}\u{c}\u{85}\u{2028}\u{2029}z\té";
        let line = one_line(text);
        assert_eq!(
            line,
            "a\\u{a}status  SUCCEEDED\\u{d}\\u{b}\\u{c}\\u{85}\\u{2028}\\u{2029}z\té"
        );
        assert_eq!(line.lines().count(), 1);
        assert!(matches!(one_line("plain é\t"), Cow::Borrowed(_)));
        assert_eq!(shown(Path::new("/x/a\nb")), "/x/a\\u{a}b");
        assert_eq!(json_escape('\u{202e}'), "\\u202e");
        assert_eq!(json_escape('\u{1F600}'), "\\ud83d\\ude00");
    }
}
