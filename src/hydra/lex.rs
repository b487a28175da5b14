//! The lexer of override values: Hydra 1.3's `OverrideLexer.g4` token rules, as lengths
//! of the longest match at a position.

use super::SyntaxError;

/// What Hydra's ESC token escapes with a backslash.
pub(super) const ESCAPED: &str = "\\()[]{}:=, \t";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok {
    POpen,
    Comma,
    PClose,
    BracketOpen,
    BracketClose,
    BraceOpen,
    BraceClose,
    Colon,
    Equal,
    Float,
    Int,
    Bool,
    Null,
    UnquotedChar,
    Id,
    Esc,
    Ws,
    Quoted,
    Interpolation,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub(super) kind: Tok,
    pub(super) text: String,
    pub(super) at: usize,
}

fn ws_len(c: &[char], i: usize) -> usize {
    c[i..]
        .iter()
        .take_while(|c| matches!(c, ' ' | '\t'))
        .count()
}

/// `WS? <ch> WS?` style tokens: lengths of the optional parts.
fn punct(c: &[char], i: usize, ch: char, ws_before: bool, ws_after: bool) -> usize {
    let mut j = i;
    if ws_before {
        j += ws_len(c, j);
    }
    if c.get(j) != Some(&ch) {
        return 0;
    }
    j += 1;
    if ws_after {
        j += ws_len(c, j);
    }
    j - i
}

/// DIGIT ('_'? DIGIT)*
fn digits_len(c: &[char], i: usize) -> usize {
    if !c.get(i).is_some_and(char::is_ascii_digit) {
        return 0;
    }
    let mut j = i + 1;
    loop {
        if c.get(j).is_some_and(char::is_ascii_digit) {
            j += 1;
        } else if c.get(j) == Some(&'_') && c.get(j + 1).is_some_and(char::is_ascii_digit) {
            j += 2;
        } else {
            return j - i;
        }
    }
}

/// '0' | [1-9] ('_'? DIGIT)*
pub(super) fn int_unsigned_len(c: &[char], i: usize) -> usize {
    match c.get(i) {
        Some('0') => 1,
        Some(d) if d.is_ascii_digit() => digits_len(c, i),
        _ => 0,
    }
}

fn sign_len(c: &[char], i: usize) -> usize {
    usize::from(matches!(c.get(i), Some('+' | '-')))
}

fn float_len(c: &[char], i: usize) -> usize {
    let s = sign_len(c, i);
    let j = i + s;
    let mut best = 0;
    let word = |w: &str| {
        let n = w.len();
        c.len() >= j + n
            && c[j..j + n]
                .iter()
                .collect::<String>()
                .eq_ignore_ascii_case(w)
    };
    if word("inf") || word("nan") {
        best = 3;
    }
    // Mantissas: INT_UNSIGNED (only before an exponent) and POINT_FLOATs.
    let int = int_unsigned_len(c, j);
    let mut points = Vec::new();
    if int > 0 && c.get(j + int) == Some(&'.') {
        points.push(int + 1);
        let frac = digits_len(c, j + int + 1);
        if frac > 0 {
            points.push(int + 1 + frac);
        }
    }
    if c.get(j) == Some(&'.') {
        let frac = digits_len(c, j + 1);
        if frac > 0 {
            points.push(1 + frac);
        }
    }
    for &m in &points {
        best = best.max(m);
    }
    let mut mantissas = points;
    if int > 0 {
        mantissas.push(int);
    }
    for m in mantissas {
        if matches!(c.get(j + m), Some('e' | 'E')) {
            let k = j + m + 1 + sign_len(c, j + m + 1);
            let exp = digits_len(c, k);
            if exp > 0 {
                best = best.max(k + exp - j);
            }
        }
    }
    if best == 0 { 0 } else { s + best }
}

fn int_len(c: &[char], i: usize) -> usize {
    let s = sign_len(c, i);
    let n = int_unsigned_len(c, i + s);
    if n == 0 { 0 } else { s + n }
}

fn word_len(c: &[char], i: usize, words: &[&str]) -> usize {
    for w in words {
        let n = w.len();
        if c.len() >= i + n
            && c[i..i + n]
                .iter()
                .collect::<String>()
                .eq_ignore_ascii_case(w)
        {
            return n;
        }
    }
    0
}

fn id_len(c: &[char], i: usize) -> usize {
    if !c
        .get(i)
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == '_')
    {
        return 0;
    }
    1 + c[i + 1..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '-')
        .count()
}

fn esc_len(c: &[char], i: usize) -> usize {
    let mut j = i;
    while c.get(j) == Some(&'\\') && c.get(j + 1).is_some_and(|n| ESCAPED.contains(*n)) {
        j += 2;
    }
    j - i
}

/// A quote, then anything up to the first same quote preceded by an even number of backslashes.
fn quoted_len(c: &[char], i: usize) -> usize {
    let Some(&q) = c.get(i).filter(|q| **q == '\'' || **q == '"') else {
        return 0;
    };
    let mut backslashes = 0;
    for (k, ch) in c.iter().enumerate().skip(i + 1) {
        if *ch == q && backslashes % 2 == 0 {
            return k + 1 - i;
        }
        backslashes = if *ch == '\\' { backslashes + 1 } else { 0 };
    }
    0
}

fn interpolation_len(c: &[char], i: usize) -> usize {
    if c.get(i) != Some(&'$') || c.get(i + 1) != Some(&'{') {
        return 0;
    }
    match c[i + 2..].iter().position(|c| *c == '}') {
        Some(p) if p > 0 => p + 3,
        _ => 0,
    }
}

/// ANTLR's rule: the longest match wins, ties go to the rule listed first.
pub(super) fn lex(c: &[char]) -> Result<Vec<Token>, SyntaxError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let candidates = [
            (Tok::POpen, punct(c, i, '(', true, true)),
            (Tok::Comma, punct(c, i, ',', true, true)),
            (Tok::PClose, punct(c, i, ')', true, false)),
            (Tok::BracketOpen, punct(c, i, '[', false, true)),
            (Tok::BracketClose, punct(c, i, ']', true, false)),
            (Tok::BraceOpen, punct(c, i, '{', false, true)),
            (Tok::BraceClose, punct(c, i, '}', true, false)),
            (Tok::Colon, punct(c, i, ':', true, true)),
            (Tok::Equal, punct(c, i, '=', true, true)),
            (Tok::Float, float_len(c, i)),
            (Tok::Int, int_len(c, i)),
            (Tok::Bool, word_len(c, i, &["true", "false"])),
            (Tok::Null, word_len(c, i, &["null"])),
            (
                Tok::UnquotedChar,
                usize::from("/-\\+.$%*@?|".contains(c[i])),
            ),
            (Tok::Id, id_len(c, i)),
            (Tok::Esc, esc_len(c, i)),
            (Tok::Ws, ws_len(c, i)),
            (Tok::Quoted, quoted_len(c, i)),
            (Tok::Interpolation, interpolation_len(c, i)),
        ];
        let (kind, len) =
            candidates.iter().fold(
                (Tok::Ws, 0),
                |best, &(k, n)| if n > best.1 { (k, n) } else { best },
            );
        if len == 0 {
            return Err(SyntaxError {
                message: format!("Hydra's syntax has no place for {:?} here", c[i]),
                at: i,
            });
        }
        out.push(Token {
            kind,
            text: c[i..i + len].iter().collect(),
            at: i,
        });
        i += len;
    }
    Ok(out)
}
