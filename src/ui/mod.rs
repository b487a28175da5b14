//! Everything the user sees: data on stdout, humans on stderr.
//!
//! Library code reports through the small [`Reporter`] / [`Task`] traits and knows nothing
//! of indicatif; commands get a [`Printer`] that decides where each kind of output goes.

pub mod json;
mod log_text;
mod printer;
mod progress;
mod steps;

pub use log_text::{LogText, safe_log};

pub use printer::{Printer, Verbosity};
pub use progress::{Reporter, Task};
pub use steps::StepBar;

pub use progress::human_bytes;

use std::borrow::Cow;
use std::io::IsTerminal;

/// Text from outside argus (YAML keys and values, job records, Ray's and a mirror's
/// answers) made safe to print on a terminal: every control character but newline and
/// tab (ESC, CR, BEL, backspace, DEL, the C1 controls) and the bidirectional overrides
/// and isolates (which reorder what a reader sees) are written as `\u{..}` escapes, so
/// nothing read from a file can move the cursor, recolour, retitle or hide text.
/// The printer passes every message and table through it; a job's own log goes through
/// [`LogText`] (colours dropped, carriage returns made line ends, the rest escaped here).
pub fn safe(text: &str) -> Cow<'_, str> {
    crate::text::escaped(text, |c| acts_on_terminal(c) && c != '\n' && c != '\t')
}

/// Whether a terminal acts on `c` rather than showing it: a control character (C0,
/// DEL, C1) or a bidirectional override, isolate or mark (which reorder what a reader
/// sees). Text escapes them as `\u{..}` ([`safe`], but for newline and tab); JSON as
/// `\uXXXX` ([`json`]).
pub fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// Whether argus's own messages on stderr may carry colour (the log lines of `-v`):
/// only on a terminal, and never when `NO_COLOR` is set to anything non-empty
/// (<https://no-color.org>).
pub fn colour_on_stderr() -> bool {
    colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn colour_allowed(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Left-aligned columns separated by two spaces; the first row is the header.
/// Cells are one line each ([`crate::text::one_line`]: a line feed in a record's message
/// cannot add a row) and passed through [`safe`] (they come from records and Ray).
pub fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| safe(&crate::text::one_line(c)).into_owned())
                .collect()
        })
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = widths[i]))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_text_is_made_safe_to_print() {
        assert!(matches!(safe("plain\ttext\nline 2 é"), Cow::Borrowed(_)));
        assert_eq!(
            safe("a\x1b[31mred\x1b]0;title\x07\rb\u{7f}\u{9b}c\u{202e}d"),
            "a\\u{1b}[31mred\\u{1b}]0;title\\u{7}\\u{d}b\\u{7f}\\u{9b}c\\u{202e}d"
        );
        let t = table(&[
            vec!["ID".into(), "MESSAGE".into()],
            vec!["j".into(), "x\x1b[2Jy".into()],
        ]);
        assert!(!t.contains('\x1b'), "{t:?}");
        assert!(t.contains("x\\u{1b}[2Jy"), "{t:?}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
    }
}
