//! A job's log made safe to print, as it streams in pieces.
//!
//! A log is text others wrote: it may carry sequences that move the cursor, retitle the
//! terminal, hide text or reorder it. Ray colours its line prefixes
//! (`ESC[36m(TaskRunner pid=…)ESC[0m`) and tqdm redraws with `\r`, so escaping every
//! control character would bury each line in `\u{1b}[36m`. Instead: colour sequences (SGR,
//! `ESC [ digits;… m`) are dropped (they only colour, and a colour can hide text), a
//! carriage return ends a line (`\r\n` is one line end; tqdm's redraws each get a line),
//! and everything else [`super::safe`] escapes is escaped. A sequence or a `\r\n` cut
//! between two pieces is held back until the next piece completes it.

/// The longest colour sequence held back waiting for its end; anything longer is escaped.
const MAX_HELD: usize = 32;

/// Filters one log's pieces in order.
#[derive(Debug, Default)]
pub struct LogText {
    held: String,
}

impl LogText {
    pub fn new() -> Self {
        Self::default()
    }

    /// The printable text of the next piece (what it completes of the held tail included).
    pub fn push(&mut self, piece: &str) -> String {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(piece);
        let keep = incomplete_tail(&text);
        self.held = text.split_off(text.len() - keep);
        filter(&text)
    }

    /// What is still held at the end of the log.
    pub fn finish(&mut self) -> String {
        let text = std::mem::take(&mut self.held);
        filter(&text)
    }
}

/// The whole of one log at once.
pub fn safe_log(text: &str) -> String {
    let mut log = LogText::new();
    let mut out = log.push(text);
    out.push_str(&log.finish());
    out
}

/// The length of a tail that the next piece may complete: a lone `\r` (maybe `\r\n`), or
/// a colour sequence begun but not ended.
fn incomplete_tail(text: &str) -> usize {
    if text.ends_with('\r') {
        return 1;
    }
    // Bytes, not chars: `len - MAX_HELD` may fall inside a character (ESC is ASCII, so
    // the byte found is always a char boundary).
    let from = text.len().saturating_sub(MAX_HELD);
    let Some(esc) = text.as_bytes()[from..]
        .iter()
        .rposition(|&b| b == 0x1b)
        .map(|i| from + i)
    else {
        return 0;
    };
    let tail = &text[esc + 1..];
    let open = tail.is_empty()
        || tail.strip_prefix('[').is_some_and(|params| {
            params
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b';' || b == b':')
        });
    if open { text.len() - esc } else { 0 }
}

fn filter(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['\x1b', '\r']) {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if rest.as_bytes()[i] == b'\r' {
            out.push('\n');
            rest = after.strip_prefix('\n').unwrap_or(after);
            continue;
        }
        match colour_len(after) {
            Some(len) => rest = &after[len..],
            None => {
                out.push('\x1b');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    super::safe(&out).into_owned()
}

/// The length of `[params m` after an ESC, when it is a colour sequence.
fn colour_len(after: &str) -> Option<usize> {
    let params = after.strip_prefix('[')?;
    let end = params.find(|c: char| !(c.is_ascii_digit() || c == ';' || c == ':'))?;
    (params.as_bytes()[end] == b'm').then_some(end + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_dropped_and_every_other_control_is_escaped() {
        let log = "\x1b[36m(TaskRunner pid=1)\x1b[0m step:1\r\n\x1b[2J\x1b]8;;http://x\x07link\u{9b}\u{202e}x\rbar 50%\rbar 100%\n";
        assert_eq!(
            safe_log(log),
            "(TaskRunner pid=1) step:1\n\\u{1b}[2J\\u{1b}]8;;http://x\\u{7}link\\u{9b}\\u{202e}x\nbar 50%\nbar 100%\n"
        );
    }

    #[test]
    fn a_sequence_or_a_line_end_cut_between_pieces_is_the_same_as_whole() {
        let log = "\x1b[1;36m(pid=1)\x1b[0m a\r\nb\x1b[2Jc\r";
        let whole = safe_log(log);
        for cut in 1..log.len() {
            let mut text = LogText::new();
            let mut out = text.push(&log[..cut]);
            out.push_str(&text.push(&log[cut..]));
            out.push_str(&text.finish());
            assert_eq!(out, whole, "cut at {cut}");
        }
        // A cut where the last 32 bytes start inside a character.
        let mut text = LogText::new();
        let mut out = text.push(&format!("{}\x1b[3", "é".repeat(20)));
        out.push_str(&text.push("6mx"));
        out.push_str(&text.finish());
        assert_eq!(out, format!("{}x", "é".repeat(20)));
        // Nothing is held back without bound.
        let mut text = LogText::new();
        let long = format!("\x1b[{}", "1;".repeat(40));
        assert!(text.push(&long).starts_with("\\u{1b}["));
    }
}
