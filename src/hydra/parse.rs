//! Reading overrides: override lines and values parsed as Hydra 1.3's `OverrideParser.g4`
//! parses them.

use super::lex::{Tok, Token, int_unsigned_len, lex};
use super::{Action, HydraValue, ParsedOverride, SyntaxError};

/// Parses one override line as Hydra does.
pub fn parse_override(text: &str) -> Result<ParsedOverride, SyntaxError> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let action = if text.starts_with("++") {
        i = 2;
        Action::ForceAdd
    } else if text.starts_with('+') {
        i = 1;
        Action::Add
    } else if text.starts_with('~') {
        i = 1;
        Action::Delete
    } else {
        Action::Set
    };
    let key_end = chars[i..]
        .iter()
        .position(|c| *c == '=')
        .map_or(chars.len(), |p| p + i);
    let key_text: String = chars[i..key_end].iter().collect();
    let (key, package) = parse_key(&key_text, i)?;
    if key_end == chars.len() {
        if action == Action::Delete {
            return Ok(ParsedOverride {
                action,
                key,
                package,
                value: None,
            });
        }
        return Err(SyntaxError {
            message: "missing `=` (write key=value)".into(),
            at: chars.len(),
        });
    }
    // `=` eats the whitespace after it.
    let mut start = key_end + 1;
    while start < chars.len() && matches!(chars[start], ' ' | '\t') {
        start += 1;
    }
    let value = if start == chars.len() {
        HydraValue::Str(String::new())
    } else {
        parse_value_chars(&chars[start..]).map_err(|e| SyntaxError {
            message: e.message,
            at: e.at + start,
        })?
    };
    Ok(ParsedOverride {
        action,
        key,
        package,
        value: Some(value),
    })
}

/// `packageOrGroup (@ package)?`: a dotted key, or a group path `a/b`; packages are dotted.
fn parse_key(text: &str, offset: usize) -> Result<(String, Option<String>), SyntaxError> {
    let err = |message: String, at: usize| SyntaxError {
        message,
        at: offset + at,
    };
    let (key, package) = match text.split_once('@') {
        Some((k, p)) => (k, Some(p)),
        None => (text, None),
    };
    let group_like = key.contains('/');
    let ok = if group_like {
        key.split('/').all(is_id)
    } else {
        is_package(key)
    };
    if !ok {
        let what = if group_like {
            "a config group (names separated by /)"
        } else {
            "a key (names separated by dots)"
        };
        return Err(err(format!("{key:?} is not {what}"), 0));
    }
    if key.is_empty() {
        return Err(err("the key is empty".into(), 0));
    }
    if let Some(p) = package
        && !is_package(p)
    {
        return Err(err(
            format!("{p:?} is not a package (names separated by dots)"),
            key.len() + 1,
        ));
    }
    Ok((key.to_string(), package.map(str::to_string)))
}

/// Hydra's ID: a letter or `_`, then letters, digits, `_`, `-`.
fn is_id(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// KEY_SPECIAL: an ID that may also use `$`.
fn is_key_special(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
}

/// A package: empty, one name, or a dotted path whose parts are names or list indexes.
fn is_package(s: &str) -> bool {
    if s.is_empty() || is_key_special(s) {
        return true;
    }
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() > 1
        && parts.iter().all(|p| {
            is_key_special(p)
                || (!p.is_empty() && int_unsigned_len(&p.chars().collect::<Vec<_>>(), 0) == p.len())
        })
}

/// Parses an override value (what follows `=`).
pub fn parse_value(text: &str) -> Result<HydraValue, SyntaxError> {
    let chars: Vec<char> = text.chars().collect();
    let start = chars
        .iter()
        .position(|c| !matches!(c, ' ' | '\t'))
        .unwrap_or(chars.len());
    if start == chars.len() {
        return Ok(HydraValue::Str(String::new()));
    }
    parse_value_chars(&chars[start..]).map_err(|e| SyntaxError {
        at: e.at + start,
        ..e
    })
}

fn parse_value_chars(chars: &[char]) -> Result<HydraValue, SyntaxError> {
    let tokens = lex(chars)?;
    let mut p = Parser {
        tokens: &tokens,
        pos: 0,
        end: chars.len(),
    };
    let first = p.element()?;
    let value = if p.peek() == Some(Tok::Comma) {
        while p.peek() == Some(Tok::Comma) {
            p.pos += 1;
            p.element()?;
        }
        HydraValue::Sweep(chars.iter().collect())
    } else {
        first
    };
    if p.pos != tokens.len() {
        return Err(p.error("unexpected input (quote the value if it is one string)"));
    }
    Ok(value)
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    end: usize,
}

const SWEEP_FUNCTIONS: &[&str] = &["choice", "range", "interval", "glob"];
const FUNCTIONS: &[&str] = &[
    "bool",
    "float",
    "int",
    "json_str",
    "str",
    "sort",
    "shuffle",
    "tag",
    "extend_list",
];

impl Parser<'_> {
    fn peek(&self) -> Option<Tok> {
        self.tokens.get(self.pos).map(|t| t.kind)
    }

    fn error(&self, message: &str) -> SyntaxError {
        SyntaxError {
            message: message.to_string(),
            at: self.tokens.get(self.pos).map_or(self.end, |t| t.at),
        }
    }

    fn expect(&mut self, kind: Tok, what: &str) -> Result<(), SyntaxError> {
        if self.peek() == Some(kind) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {what}")))
        }
    }

    fn element(&mut self) -> Result<HydraValue, SyntaxError> {
        match self.peek() {
            Some(Tok::BracketOpen) => self.list(),
            Some(Tok::BraceOpen) => self.dict(),
            Some(Tok::Id) if self.tokens.get(self.pos + 1).map(|t| t.kind) == Some(Tok::POpen) => {
                self.function()
            }
            _ => self.primitive(),
        }
    }

    fn list(&mut self) -> Result<HydraValue, SyntaxError> {
        self.pos += 1;
        let mut items = Vec::new();
        if self.peek() != Some(Tok::BracketClose) {
            items.push(self.element()?);
            while self.peek() == Some(Tok::Comma) {
                self.pos += 1;
                items.push(self.element()?);
            }
        }
        self.expect(Tok::BracketClose, "`,` or `]`")?;
        Ok(HydraValue::List(items))
    }

    fn dict(&mut self) -> Result<HydraValue, SyntaxError> {
        self.pos += 1;
        let mut entries = Vec::new();
        if self.peek() != Some(Tok::BraceClose) {
            loop {
                let key = self.run(&[
                    Tok::Id,
                    Tok::Null,
                    Tok::Int,
                    Tok::Float,
                    Tok::Bool,
                    Tok::UnquotedChar,
                    Tok::Esc,
                    Tok::Ws,
                ])?;
                self.expect(Tok::Colon, "`:` after a mapping key")?;
                let value = self.element()?;
                entries.push((key, value));
                if self.peek() != Some(Tok::Comma) {
                    break;
                }
                self.pos += 1;
            }
        }
        self.expect(Tok::BraceClose, "`,` or `}`")?;
        Ok(HydraValue::Dict(entries))
    }

    fn function(&mut self) -> Result<HydraValue, SyntaxError> {
        let name = self.tokens[self.pos].text.clone();
        let start = self.tokens[self.pos].at;
        self.pos += 2;
        let mut args = Vec::new();
        let mut keyword = false;
        if self.peek() != Some(Tok::PClose) {
            loop {
                if self.peek() == Some(Tok::Id)
                    && self.tokens.get(self.pos + 1).map(|t| t.kind) == Some(Tok::Equal)
                {
                    self.pos += 2;
                    keyword = true;
                } else if keyword {
                    return Err(self.error("positional argument follows keyword argument"));
                }
                args.push(self.element()?);
                if self.peek() != Some(Tok::Comma) {
                    break;
                }
                self.pos += 1;
            }
        }
        self.expect(Tok::PClose, "`,` or `)`")?;
        if SWEEP_FUNCTIONS.contains(&name.as_str()) {
            let end = self.tokens.get(self.pos).map_or(self.end, |t| t.at);
            let text: String = self
                .tokens
                .iter()
                .filter(|t| t.at >= start && t.at < end)
                .map(|t| t.text.as_str())
                .collect();
            return Ok(HydraValue::Sweep(text));
        }
        if !FUNCTIONS.contains(&name.as_str()) {
            return Err(SyntaxError {
                message: format!("unknown function `{name}`"),
                at: start,
            });
        }
        Ok(HydraValue::Call { name, args })
    }

    fn primitive(&mut self) -> Result<HydraValue, SyntaxError> {
        if self.peek() == Some(Tok::Quoted) {
            let text = &self.tokens[self.pos].text;
            self.pos += 1;
            return Ok(HydraValue::Str(unescape_quoted(text)));
        }
        self.run(&[
            Tok::Id,
            Tok::Null,
            Tok::Int,
            Tok::Float,
            Tok::Bool,
            Tok::Interpolation,
            Tok::UnquotedChar,
            Tok::Colon,
            Tok::Esc,
            Tok::Ws,
        ])
    }

    /// A run of primitive tokens: typed when it is one token, else the text (escapes undone,
    /// whitespace at both ends dropped).
    fn run(&mut self, allowed: &[Tok]) -> Result<HydraValue, SyntaxError> {
        let start = self.pos;
        while self.peek().is_some_and(|k| allowed.contains(&k)) {
            self.pos += 1;
        }
        let mut run = &self.tokens[start..self.pos];
        if run.is_empty() {
            return Err(self.error("expected a value"));
        }
        if run[0].kind == Tok::Ws {
            if run.len() == 1 {
                return Err(self.error("a value cannot be only whitespace"));
            }
            run = &run[1..];
        }
        if run.len() > 1 && run[run.len() - 1].kind == Tok::Ws {
            run = &run[..run.len() - 1];
        }
        if run.len() > 1 {
            return Ok(HydraValue::Str(
                run.iter()
                    .map(|t| {
                        if t.kind == Tok::Esc {
                            t.text.chars().skip(1).step_by(2).collect()
                        } else {
                            t.text.clone()
                        }
                    })
                    .collect(),
            ));
        }
        let t = &run[0];
        Ok(match t.kind {
            Tok::Int => {
                HydraValue::Int(t.text.replace('_', "").parse().map_err(|_| SyntaxError {
                    message: format!("integer {} is too large", t.text),
                    at: t.at,
                })?)
            }
            Tok::Float => HydraValue::Float(parse_float(&t.text)),
            Tok::Null => HydraValue::Null,
            Tok::Bool => HydraValue::Bool(t.text.eq_ignore_ascii_case("true")),
            Tok::Esc => HydraValue::Str(t.text.chars().skip(1).step_by(2).collect()),
            _ => HydraValue::Str(t.text.clone()),
        })
    }
}

fn parse_float(text: &str) -> f64 {
    let clean = text.replace('_', "").to_ascii_lowercase();
    let (sign, body) = match clean.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, clean.trim_start_matches('+')),
    };
    let magnitude = match body {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => body.parse().unwrap_or(f64::NAN),
    };
    sign * magnitude
}

/// Hydra's unescaping of a quoted value: only backslashes before a quote are escapes.
fn unescape_quoted(token: &str) -> String {
    let chars: Vec<char> = token.chars().collect();
    let q = chars[0];
    let inner = &chars[1..chars.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while i <= inner.len() {
        // A run of backslashes followed by a quote (or by the end: the closing quote).
        let run = inner[i..].iter().take_while(|c| **c == '\\').count();
        let next = inner.get(i + run);
        if run > 0 && (next == Some(&q) || next.is_none()) {
            let mut text: Vec<char> = inner[i..i + run].to_vec();
            if let Some(q) = next {
                text.push(*q);
            }
            // Every other character, starting from the second: `\\\'` -> `\'`.
            out.extend(text.iter().skip(1).step_by(2));
            i += run + usize::from(next.is_some());
            continue;
        }
        match inner.get(i) {
            Some(c) => out.push(*c),
            None => break,
        }
        i += 1;
    }
    out
}
