//! Hydra's override syntax, both ways: YAML values written as override values that Hydra
//! reads back unchanged, and override lines (`key=value`, `+key=`, `++key=`, `~key`,
//! `group@package=option`) parsed the way Hydra 1.3's grammar (`OverrideLexer.g4`,
//! `OverrideParser.g4`) parses them. Pure, and imports nothing of the pipeline.
//!
//! Shell quoting is not here: the entrypoint quotes whole words for the shell.

use std::fmt;

use serde_yaml::Value as Yaml;

/// An override value as Hydra's parser returns it (before OmegaConf sees it).
#[derive(Debug, Clone, PartialEq)]
pub enum HydraValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    /// Quoted or not; `${...}` inside stays text (OmegaConf resolves it later).
    Str(String),
    List(Vec<HydraValue>),
    Dict(Vec<(HydraValue, HydraValue)>),
    /// `a,b` or `choice(a,b)`, `range(..)`, `interval(..)`, `glob(..)`: only for --multirun.
    Sweep(String),
    /// A cast or list function (`str(1)`, `extend_list(..)`, ...), left unevaluated.
    Call {
        name: String,
        args: Vec<HydraValue>,
    },
}

impl HydraValue {
    pub fn is_container(&self) -> bool {
        matches!(self, HydraValue::List(_) | HydraValue::Dict(_))
    }

    /// Whether Hydra reads this value as `yaml` (numbers compared by value, NaN equal).
    pub fn same_as(&self, yaml: &Yaml) -> bool {
        match (self, yaml) {
            (v, Yaml::Tagged(t)) => v.same_as(&t.value),
            (HydraValue::Null, Yaml::Null) => true,
            (HydraValue::Bool(a), Yaml::Bool(b)) => a == b,
            (HydraValue::Int(a), Yaml::Number(n)) if n.is_i64() || n.is_u64() => {
                n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)) == Some(*a)
            }
            (HydraValue::Float(a), Yaml::Number(n)) if n.is_f64() => n
                .as_f64()
                .is_some_and(|b| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
            (HydraValue::Str(a), Yaml::String(b)) => a == b,
            (HydraValue::List(a), Yaml::Sequence(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
            }
            (HydraValue::Dict(a), Yaml::Mapping(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, va), (kb, vb))| ka.same_as(kb) && va.same_as(vb))
            }
            _ => false,
        }
    }
}

/// What an override does to the key: set it, add it (`+`), add or set it (`++`), delete it (`~`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Set,
    Add,
    ForceAdd,
    Delete,
}

impl Action {
    pub fn prefix(self) -> &'static str {
        match self {
            Action::Set => "",
            Action::Add => "+",
            Action::ForceAdd => "++",
            Action::Delete => "~",
        }
    }
}

/// One override line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedOverride {
    pub action: Action,
    /// A dotted config key (`trainer.nnodes`) or a config group (`hydra/job_logging`).
    pub key: String,
    /// `group@package`: the package, possibly empty.
    pub package: Option<String>,
    /// None only for `~key` without `=`; `key=` is the empty string.
    pub value: Option<HydraValue>,
}

impl ParsedOverride {
    /// `key` or `key@package`, as Hydra matches it against a defaults list.
    pub fn key_element(&self) -> String {
        match &self.package {
            Some(p) => format!("{}@{p}", self.key),
            None => self.key.clone(),
        }
    }
}

/// Why a text is not a Hydra override (or value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {at})")]
pub struct SyntaxError {
    pub message: String,
    /// 0-based character index into the text.
    pub at: usize,
}

/// A YAML value that no override value can carry exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

// ---------------------------------------------------------------------------------------
// Writing values

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
fn format_string(s: &str) -> String {
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

/// What Hydra's ESC token escapes with a backslash.
const ESCAPED: &str = "\\()[]{}:=, \t";

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

// ---------------------------------------------------------------------------------------
// Reading overrides

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
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
struct Token {
    kind: Tok,
    text: String,
    at: usize,
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
fn int_unsigned_len(c: &[char], i: usize) -> usize {
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
fn lex(c: &[char]) -> Result<Vec<Token>, SyntaxError> {
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

impl fmt::Display for ParsedOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.action.prefix(), self.key_element())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Yaml {
        serde_yaml::from_str(s).expect("yaml")
    }

    #[test]
    fn values_are_quoted_only_when_hydra_needs_it() {
        let v = |s: &str| format_value(&yaml(s));
        assert_eq!(v("abc"), "abc");
        assert_eq!(
            v("/mnt/shared/data/train.parquet"),
            "/mnt/shared/data/train.parquet"
        );
        assert_eq!(v("'a b'"), "'a b'");
        assert_eq!(v("\"it's\""), r"'it\'s'");
        assert_eq!(v("'$HOME'"), "'$HOME'");
        assert_eq!(v("'1e-6'"), "'1e-6'");
        assert_eq!(v("1e-6"), "1e-6");
        assert_eq!(v("[console, wandb]"), "[console,wandb]");
        assert_eq!(v("{a: 1, b: 'x y'}"), "{a:1,b:'x y'}");
        assert_eq!(v("'true'"), "'true'");
        assert_eq!(v("~"), "null");
        assert_eq!(v("3.0"), "3.0");
        assert_eq!(v(".inf"), "inf");
        assert_eq!(v("-.inf"), "-inf");
        assert_eq!(v("{'a b': 1}"), r"{a\ b:1}");
    }

    #[test]
    fn backslashes_are_doubled_only_before_quotes() {
        for (s, quoted) in [
            (r"a\b", r"'a\b'"),
            (r"a\", r"'a\\'"),
            (r"a\'b", r"'a\\\'b'"),
            (r"\\", r"'\\\\'"),
            ("it's", r"'it\'s'"),
        ] {
            assert_eq!(format_string(s), quoted, "{s}");
            assert_eq!(
                parse_value(quoted),
                Ok(HydraValue::Str(s.to_string())),
                "{quoted}"
            );
        }
    }

    #[test]
    fn values_round_trip_through_the_parser() {
        for text in [
            "abc",
            "'a b'",
            "\"it's a $HOME test\"",
            "'x,y'",
            "'a=b'",
            "'[x]'",
            "'${trainer.project_name}-x'",
            "'\\\\'",
            "[a, 'b c', [1, 2.5, null, true]]",
            "{a: 1, 'b c': {d: 'e,f'}}",
            "1e-6",
            "-3",
            "0.00001",
            "''",
            "'\u{e9}t\u{e9}'",
            "\"line\\nbreak\"",
            "18446744073709551615",
        ] {
            let v = yaml(text);
            let formatted = try_format_value(&v).unwrap_or_else(|e| panic!("{text}: {e}"));
            let back = parse_value(&formatted).expect("parses");
            assert!(back.same_as(&v), "{text} -> {formatted} -> {back:?}");
        }
    }

    #[test]
    fn values_hydra_cannot_carry_are_refused() {
        for text in ["{\"a'b\": 1}", "{'1': x}", "{'true': x}", "{'a#b': 1}"] {
            assert!(try_format_value(&yaml(text)).is_err(), "{text}");
        }
    }

    #[test]
    fn override_lines_parse_like_hydra() {
        let p = |s: &str| parse_override(s);
        let o = p("+trainer.new=1").unwrap();
        assert_eq!(
            (o.action, o.key.as_str(), o.value),
            (Action::Add, "trainer.new", Some(HydraValue::Int(1)))
        );
        assert_eq!(p("++a.b=x").unwrap().action, Action::ForceAdd);
        let o = p("~a.b").unwrap();
        assert_eq!((o.action, o.value), (Action::Delete, None));
        assert_eq!(
            p("~a=").unwrap().value,
            Some(HydraValue::Str(String::new()))
        );
        let o = p("actor@actor_rollout_ref.actor=megatron_actor").unwrap();
        assert_eq!(o.key_element(), "actor@actor_rollout_ref.actor");
        assert_eq!(
            p("hydra/job_logging=disabled").unwrap().key,
            "hydra/job_logging"
        );
        assert_eq!(p("a.0.b=1").unwrap().key, "a.0.b");
        assert_eq!(
            p("k= a b ").unwrap().value,
            Some(HydraValue::Str("a b".into()))
        );
        assert_eq!(
            p("k=a\\ ").unwrap().value,
            Some(HydraValue::Str("a ".into()))
        );
        assert_eq!(p("k=1_000").unwrap().value, Some(HydraValue::Int(1000)));
        assert_eq!(p("k=00").unwrap().value, Some(HydraValue::Str("00".into())));
        assert_eq!(p("k=.5e3").unwrap().value, Some(HydraValue::Float(500.0)));
        assert_eq!(p("k=NULL").unwrap().value, Some(HydraValue::Null));
        assert_eq!(
            p("k=a: b").unwrap().value,
            Some(HydraValue::Str("a: b".into()))
        );
        assert!(matches!(
            p("k=a,b").unwrap().value,
            Some(HydraValue::Sweep(_))
        ));
        assert!(matches!(
            p("k=choice(1,2)").unwrap().value,
            Some(HydraValue::Sweep(_))
        ));
        assert!(matches!(
            p("k=str(1)").unwrap().value,
            Some(HydraValue::Call { .. })
        ));
        for bad in [
            "k",
            "+k",
            "k=a=b",
            "k=a'b",
            "k='x' ",
            "k={'a':1}",
            "k=[a,b",
            "-a=1",
            "a/b.c=1",
            "a.01=1",
            "+++k=1",
            "k=foo(1)",
            "k=${a",
            "k=\u{e9}",
            "k=a#b",
            "k=''''",
            "a b=1",
        ] {
            assert!(p(bad).is_err(), "{bad} should not parse");
        }
    }
}
