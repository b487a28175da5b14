//! verl's console output, one line at a time. Pure: a line in, what it says out.
//!
//! What verl prints (checked in its source, `verl/utils/logger/aggregate_logger.py` and
//! `verl/trainer/ppo/ray_trainer.py`):
//!
//! ```text
//! Total training steps: 435
//! step:1 - actor/pg_loss:-0.0123 - critic/score/mean:0.25 - timing_s/step:12.5
//! ```
//!
//! Each value is `pprint.pformat(v)` of a number (older verl: `f"{v:.3f}"`): Python float
//! reprs (`0.5`, `1e-06`, `nan`, `inf`, `-inf`), ints, `True`/`False`, and under numpy 2
//! the repr of numpy scalars (`np.float64(0.5)`, `np.True_`). The trainer runs inside a Ray
//! actor, so in a job's log the line carries Ray's prefix, often coloured:
//! `\x1b[36m(TaskRunner pid=123, ip=10.0.0.2)\x1b[0m step:1 - ...`, and Ray's
//! deduplication may append ` [repeated 2x across cluster]`.
//!
//! A step line is accepted only whole: `step:<int>` then one or more ` - <key>:<number>`
//! with keys free of whitespace, control characters and bidirectional formatting marks
//! (so a name that reaches a terminal, a CSV cell or a plot is printable as it is).
//! Anything else (a line that merely starts like one, a
//! pretty-printed dict of validation metrics) is not a step line, so noise never becomes
//! a data point.

/// What one line of a driver log says.
#[derive(Debug, Clone, PartialEq)]
pub enum Line<'a> {
    /// `Total training steps: N`.
    Total(u64),
    /// `step:N - key:value - ...`, with at least one metric.
    Step {
        step: u64,
        metrics: Vec<(&'a str, f64)>,
    },
    /// Anything else.
    Other,
}

/// Parses one line (without its newline).
pub fn parse_line(line: &str) -> Line<'_> {
    // Cheap rejection first: most lines of a driver log are neither kind.
    if !line.contains("step") {
        return Line::Other;
    }
    let body = content(line);
    if let Some(rest) = body.strip_prefix("step:") {
        return parse_step(rest);
    }
    if let Some(rest) = body.strip_prefix(TOTAL).or_else(|| logged(body, TOTAL)) {
        return match rest.trim_end().parse::<u64>() {
            Ok(n) => Line::Total(n),
            Err(_) => Line::Other,
        };
    }
    Line::Other
}

const TOTAL: &str = "Total training steps: ";

/// What follows `message` in a line Python's `logging` wrote (`INFO:<name>:<message>`,
/// as verl 0.9's V1 trainer logs its total: `INFO:<date>:Total training steps: N`).
fn logged<'a>(body: &'a str, message: &str) -> Option<&'a str> {
    if !["INFO:", "WARNING:", "DEBUG:"]
        .iter()
        .any(|l| body.starts_with(l))
    {
        return None;
    }
    let at = body.find(message)?;
    body[..at]
        .ends_with(':')
        .then(|| &body[at + message.len()..])
}

/// The text of a line without Ray's decorations: everything up to the last carriage
/// return (a progress bar redrawn on the same line), the colour codes and
/// `(Actor pid=N, ip=...)` prefix Ray puts before it, and the `[repeated Nx across
/// cluster]` suffix of Ray's log deduplication. A slice of `line`: nothing is copied.
fn content(line: &str) -> &str {
    let mut s = line.trim_end_matches(['\r', '\n']);
    if let Some(i) = s.rfind('\r') {
        s = &s[i + 1..];
    }
    s = skip_ansi(s);
    if s.starts_with('(')
        && let Some(close) = s.find(')')
        && s[..close].contains("pid=")
    {
        s = skip_ansi(&s[close + 1..]);
        s = s.strip_prefix(' ').unwrap_or(s);
    }
    // A tqdm bar left without its newline, the step line printed right after it (verl's
    // SFT trainer, in the driver: `Epoch 1/4:  12%|█▎   | 1/8 [00:01<00:10,  1.49s/it]step:2 - ...`).
    if let Some(i) = s.find("]step:")
        && s[..i].contains('|')
    {
        s = &s[i + 1..];
    }
    strip_repeated_suffix(s)
}

/// Skips ANSI escape codes (`ESC [ params letter`) at the start of `s`.
fn skip_ansi(mut s: &str) -> &str {
    while let Some(rest) = s.strip_prefix("\x1b[") {
        match rest.find(|c: char| c.is_ascii_alphabetic()) {
            Some(end) => s = &rest[end + 1..],
            None => return s,
        }
    }
    s
}

/// `... [repeated 3x across cluster]` (Ray dims it with colour codes) -> `...`.
fn strip_repeated_suffix(s: &str) -> &str {
    // Cheap test first: the suffix ends in `]`, or in the colour reset after it.
    if !s.ends_with(']') && !s.ends_with('m') {
        return s;
    }
    let Some(i) = s.rfind("[repeated ") else {
        return s;
    };
    if !s[i..].contains("x across cluster]") {
        return s;
    }
    let mut head = s[..i].trim_end();
    // A colour code just before the suffix belongs to it.
    if let Some(esc) = head.rfind('\x1b') {
        let code = &head[esc..];
        if code.len() >= 3
            && code.ends_with('m')
            && code[2..code.len() - 1]
                .chars()
                .all(|c| c.is_ascii_digit() || c == ';')
        {
            head = head[..esc].trim_end();
        }
    }
    head
}

/// `<n> - key:value - key:value`. Neither keys nor values contain spaces, so the line is
/// read left to right in one pass: each `key:value` ends at the next space, which must
/// start ` - ` (or be the end of the line).
fn parse_step(rest: &str) -> Line<'_> {
    let rest = rest.trim_end();
    let bytes = rest.as_bytes();
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let Ok(step) = rest[..digits].parse::<u64>() else {
        return Line::Other;
    };
    if !bytes[digits..].starts_with(b" - ") {
        return Line::Other;
    }
    let mut metrics = Vec::with_capacity(rest.len() / 24 + 1);
    let mut at = digits + 3;
    loop {
        // One pass over `key:value`: where it ends (the next space) and its last colon.
        let mut end = bytes.len();
        let mut colon = None;
        for (i, &b) in bytes[at..].iter().enumerate() {
            match b {
                b' ' => {
                    end = at + i;
                    break;
                }
                b':' => colon = Some(at + i),
                // Whitespace and every other C0 control, DEL.
                0..=0x1f | 0x7f => return Line::Other,
                _ => {}
            }
        }
        let Some(colon) = colon.filter(|&c| c > at) else {
            return Line::Other;
        };
        let (key, value) = (&rest[at..colon], &rest[colon + 1..end]);
        if !key.is_ascii() && key.chars().any(unprintable) {
            return Line::Other;
        }
        let Some(value) = parse_value(value) else {
            return Line::Other;
        };
        metrics.push((key, value));
        if end == bytes.len() {
            return Line::Step { step, metrics };
        }
        if !bytes[end..].starts_with(b" - ") {
            return Line::Other;
        }
        at = end + 3;
    }
}

/// A C1 control, or a mark that reorders what a terminal shows (Trojan Source).
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// A Python number as `repr`/`pformat` writes it, including numpy 2 scalar reprs.
pub fn parse_value(text: &str) -> Option<f64> {
    match text {
        "True" | "np.True_" => return Some(1.0),
        "False" | "np.False_" => return Some(0.0),
        _ => {}
    }
    let inner = match text.strip_prefix("np.") {
        // np.float64(0.5), np.float32(1e-06), np.int64(3)
        Some(rest) => {
            let open = rest.find('(')?;
            let name = &rest[..open];
            if !(name.starts_with("float") || name.starts_with("int") || name.starts_with("uint")) {
                return None;
            }
            rest[open + 1..].strip_suffix(')')?
        }
        None => text,
    };
    // Rust's float syntax is a superset of Python's reprs except for the spellings
    // Python never prints; refuse empty or signed-only text explicitly.
    let first = inner.as_bytes().first()?;
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.' | b'n' | b'i' | b'N' | b'I'))
    {
        return None;
    }
    inner.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(line: &str) -> (u64, Vec<(String, f64)>) {
        match parse_line(line) {
            Line::Step { step, metrics } => (
                step,
                metrics
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
            other => panic!("not a step line: {line:?} -> {other:?}"),
        }
    }

    #[test]
    fn verl_step_lines_with_python_reprs() {
        let (n, m) = step(
            "step:3 - actor/pg_loss:-0.0123 - actor/lr:1e-06 - critic/score/mean:0.5 - actor/entropy:nan - perf/max:inf - x/neg:-inf - response_length/mean:123 - flag:True",
        );
        assert_eq!(n, 3);
        assert_eq!(m[0], ("actor/pg_loss".into(), -0.0123));
        assert_eq!(m[1].1, 1e-6);
        assert_eq!(m[2].1, 0.5);
        assert!(m[3].1.is_nan());
        assert_eq!(m[4].1, f64::INFINITY);
        assert_eq!(m[5].1, f64::NEG_INFINITY);
        assert_eq!(m[6].1, 123.0);
        assert_eq!(m[7].1, 1.0);
    }

    #[test]
    fn numpy_2_scalar_reprs_and_old_three_decimals() {
        let (_, m) = step(
            "step:1 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.25) - a:np.float32(1e-06) - b:np.int64(7) - c:np.True_ - d:0.500",
        );
        let values: Vec<f64> = m.iter().map(|(_, v)| *v).collect();
        assert_eq!(values, [0.25, 1e-6, 7.0, 1.0, 0.5]);
        assert_eq!(m[0].0, "val-core/openai/gsm8k/reward/mean@1");
    }

    #[test]
    fn ray_prefixes_colours_carriage_returns_and_dedup_suffixes_are_removed() {
        for line in [
            "\x1b[36m(TaskRunner pid=1234)\x1b[0m step:2 - a:0.5",
            "(TaskRunner pid=1234, ip=10.0.0.3) step:2 - a:0.5",
            "\x1b[36m(TaskRunner pid=1234, ip=10.0.0.3)\x1b[0m step:2 - a:0.5 \x1b[32m[repeated 2x across cluster]\x1b[0m",
            "Training Progress:  20%|##   | 1/5\r(TaskRunner pid=9) step:2 - a:0.5\r",
            "step:2 - a:0.5 [repeated 3x across cluster]",
            // verl 0.8.0's SFT trainer, as seen in a real run's driver log.
            "Epoch 1/4:  12%|\u{2588}\u{258e}        | 1/8 [00:01<00:10,  1.49s/it]step:2 - a:0.5",
        ] {
            assert_eq!(step(line), (2, vec![("a".into(), 0.5)]), "{line:?}");
        }
        assert_eq!(
            parse_line("\x1b[36m(TaskRunner pid=1)\x1b[0m Total training steps: 435"),
            Line::Total(435)
        );
        // verl 0.9's V1 trainer logs it through Python's logging.
        assert_eq!(
            parse_line(
                "\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m INFO:2026-11-28 10:00:01,123:Total training steps: 4"
            ),
            Line::Total(4)
        );
    }

    #[test]
    fn near_misses_are_not_step_lines() {
        for line in [
            "step:2 - critic/score/mean:9.9 - note:rollout starting",
            "step:2",
            "step:2 -",
            "step: 2 - a:1",
            "steps:2 - a:1",
            "step:two - a:1",
            "step:2 - a: 1",
            "step:2 - some key:1",
            "step:2 - a:",
            "step:2 - :1",
            "step:2 - a:0x10",
            "step:2 - a:np.str_(x)",
            // Names a terminal would act on rather than show.
            "step:2 - a\x1b[2Jb:1",
            "step:2 - a\x07:1",
            "step:2 - a\x7f:1",
            "step:2 - a\u{9b}2J:1",
            "step:2 - a\u{202e}b:1",
            "step:2 - ok:1 - \u{2066}x:2",
            "Initial validation metrics: {'val-core/openai/gsm8k/reward/mean@1': 0.5}",
            "(TaskRunner pid=1) validation at step:4 - a:1",
            "Total training steps: many",
            "Total time for train steps: 12.00s",
            "INFO:x:note: Total training steps: 4",
            "ERROR:x:Total training steps: 4",
        ] {
            assert_eq!(parse_line(line), Line::Other, "{line:?}");
        }
    }
}
