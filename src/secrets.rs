//! Secrets never reach files, logs or error messages in clear.
//!
//! Redaction works by name AND by value: the values of variables whose names say they are
//! secret (TOKEN, KEY, SECRET, PASSWORD, PASS, CREDENTIAL, ... see [`is_secret_name`]) are
//! collected from the profile, the JobSpec (env_vars, metadata, overrides whose key says
//! secret), the old RayConfig and the process environment into a [`Secrets`] set; then
//! any occurrence of any of those values is replaced in any string, JSON or YAML value
//! (a `DB_PASS` copied into an override, a token echoed in Ray's error body).
//!
//! The loaders remember what they parse in a process-wide set, so the boundaries that
//! write or print only call [`redact_text`] / [`redact_json`] / [`redact_yaml`].
//!
//! Two more ways for what names alone miss or values alone cannot reach: a value shaped
//! like a well-known credential ([`secret_shape`]: `hf_...`, `ghp_...`, an AWS access key
//! id, a URL with a password) is secret whatever its name, and a secret whose value is
//! unknown is hidden where its name assigns it ([`redact_names`]: `NAME=value`,
//! `NAME: value`, `"NAME": "value"`).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::RwLock;

pub const REDACTED: &str = "<redacted>";

/// Values shorter than this are not redacted by value (they would blank out every `1`
/// and `true` of a log); they are still redacted where a secret name keys them.
pub const MIN_SECRET_LEN: usize = 6;

/// Words that make a variable name secret: a `_`-separated word that ends with one of
/// them (`HF_TOKEN`, `APIKEY`, `DB_PASS`, `MY_PASSWORD`) or starts with one of the long ones
/// (`CREDENTIALS`, `SECRETS`). `TOKENIZERS_PARALLELISM` is not secret.
/// (`PWD`, the working directory, is deliberately not one.)
const ENDINGS: [&str; 7] = [
    "TOKEN", "TOKENS", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS",
];
const STARTS: [&str; 3] = ["CREDENTIAL", "SECRET", "PASSWORD"];

pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .any(|word| {
            ENDINGS.iter().any(|e| word.ends_with(e)) || STARTS.iter().any(|s| word.starts_with(s))
        })
}

/// Whether a Hydra override's value is secret: its key's last segment is secret-named
/// (`wandb.api_key`, `+db.password`). The one rule for overrides, wherever they are
/// collected (the JobSpec) or written out (the entrypoint shown, recorded or printed, is
/// built from overrides whose secret values are replaced by [`REDACTED`] *before* Hydra
/// formatting and shell quoting, so no quoted form of a secret is ever searched for).
pub fn is_secret_override_key(key: &str) -> bool {
    let key = key.trim_start_matches(['+', '~']);
    is_secret_name(key.rsplit('.').next().unwrap_or(key))
}

/// A command line (argv, program first) as argus records or prints it (a lock's holder,
/// a report): secret values replaced structurally, then by value, then joined with
/// spaces and cut to `max_chars` characters (on a character boundary).
///
/// Structurally: `K=V` words (`--set overrides.wandb.api_key=V`, `--set=...`, `HF_TOKEN=V`)
/// whose key is secret-named by [`is_secret_override_key`] keep `K=<redacted>`, and the
/// value of a flag whose name is secret-named (`--hf-token V`, `--hf-token=V`) is replaced.
/// Then every known secret value is redacted ([`known`]).
pub fn redact_args<S: AsRef<str>>(args: &[S], max_chars: usize) -> String {
    let known = known();
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    let mut secret_next = false;
    for arg in args {
        let arg = arg.as_ref();
        if secret_next {
            secret_next = false;
            out.push(REDACTED.into());
            continue;
        }
        let word = if let Some(flag) = arg.strip_prefix("--").filter(|f| !f.is_empty()) {
            match flag.split_once('=') {
                Some((name, _)) if is_secret_name(name) => format!("--{name}={REDACTED}"),
                Some((name, value)) => format!("--{name}={}", redact_assignment(value)),
                None => {
                    secret_next = is_secret_name(flag);
                    arg.to_string()
                }
            }
        } else {
            redact_assignment(arg)
        };
        out.push(known.redact_str(&word).into_owned());
    }
    let line = out.join(" ");
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => line[..cut].to_string(),
        None => line,
    }
}

/// A `key=value` word with its value's secrets replaced ([`redact_override_value`]: the
/// whole value when `key` is secret-named, the secrets inside a mapping value), else the
/// word unchanged.
fn redact_assignment(word: &str) -> String {
    match word.split_once('=') {
        Some((key, value)) => format!("{key}={}", redact_override_value(key, value)),
        None => word.to_string(),
    }
}

/// A set of secret values and the redactor that hides them; and the names of secrets
/// whose values are unknown, hidden where those names assign them ([`redact_names`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: BTreeSet<String>,
    names: BTreeSet<String>,
}

impl Secrets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value (trimmed), with every form a log may print it in ([`printed_forms`]:
    /// JSON-escaped, Python's `repr`, shell-quoted); short or trivial ones are left out
    /// (see [`MIN_SECRET_LEN`]).
    pub fn add(&mut self, value: &str) {
        let value = value.trim();
        let trivial = ["true", "false", "none", "null", REDACTED];
        if value.chars().count() >= MIN_SECRET_LEN
            && !trivial.iter().any(|t| value.eq_ignore_ascii_case(t))
        {
            self.values.extend(printed_forms(value));
        }
    }

    /// Adds the values of the secret-named variables among `vars`.
    pub fn add_vars<'a>(&mut self, vars: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in vars {
            if is_secret_name(name) {
                self.add(value);
            }
        }
    }

    /// Adds `value` when it is shaped like a credential ([`secret_shape`]), with each
    /// credential-shaped piece of it (the token of `Bearer hf_...`, a URL's password), so
    /// a log that prints the piece alone hides it too. Whether it had a shape.
    pub fn add_shaped(&mut self, value: &str) -> bool {
        let mut shaped = false;
        for (_, piece) in shapes(value) {
            shaped = true;
            self.add(piece);
            if let Some(password) = url_password(piece) {
                self.add(password);
            }
        }
        if shaped {
            self.add(value);
        }
        shaped
    }

    /// Adds the name of a secret whose value is unknown: [`Secrets::redact_str`] then
    /// hides the values this name is assigned in a text ([`redact_names`]).
    pub fn add_name(&mut self, name: &str) {
        if !name.is_empty() {
            self.names.insert(name.to_string());
        }
    }

    /// The names added by [`Secrets::add_name`].
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The secret-named variables of this process's environment (`HF_TOKEN`,
    /// `RAY_AUTH_TOKEN`, ...).
    pub fn from_process_env() -> Self {
        let mut s = Self::new();
        for (name, value) in std::env::vars_os() {
            if let (Some(name), Some(value)) = (name.to_str(), value.to_str()) {
                s.add_vars([(name, value)]);
            }
        }
        s
    }

    pub fn extend(&mut self, other: &Secrets) {
        self.values.extend(other.values.iter().cloned());
        self.names.extend(other.names.iter().cloned());
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// `text` with every occurrence of every secret value replaced (longest first, so a
    /// secret that contains another is hidden whole), then the values the added names
    /// are assigned ([`redact_names`]).
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let by_value = self.redact_values(text);
        if self.names.is_empty() {
            return by_value;
        }
        match by_value {
            Cow::Borrowed(text) => redact_names(text, &self.names),
            Cow::Owned(text) => Cow::Owned(redact_names(&text, &self.names).into_owned()),
        }
    }

    fn redact_values<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut hits: Vec<&String> = self
            .values
            .iter()
            .filter(|v| text.contains(v.as_str()))
            .collect();
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        hits.sort_by_key(|v| std::cmp::Reverse(v.len()));
        let mut out = text.to_string();
        for value in hits {
            out = out.replace(value.as_str(), REDACTED);
        }
        Cow::Owned(out)
    }

    /// A JSON document with what secret-named keys hold (every string and number under
    /// them, however deep) and every secret value replaced, at any depth.
    pub fn redact_json(&self, value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = if is_secret_name(&k) {
                            blank_json(v)
                        } else {
                            self.redact_json(v)
                        };
                        (self.redact_str(&k).into_owned(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.redact_json(v)).collect())
            }
            Value::String(s) => Value::String(self.redact_str(&s).into_owned()),
            other => other,
        }
    }

    /// The same for a YAML value (a mapping-valued Hydra override included).
    pub fn redact_yaml(&self, value: serde_yaml::Value) -> serde_yaml::Value {
        use serde_yaml::Value;
        match value {
            Value::Mapping(map) => Value::Mapping(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = if k.as_str().is_some_and(is_secret_name) {
                            blank_yaml(v)
                        } else {
                            self.redact_yaml(v)
                        };
                        (self.redact_yaml(k), v)
                    })
                    .collect(),
            ),
            Value::Sequence(items) => {
                Value::Sequence(items.into_iter().map(|v| self.redact_yaml(v)).collect())
            }
            Value::String(s) => Value::String(self.redact_str(&s).into_owned()),
            Value::Tagged(t) => {
                let t = *t;
                Value::Tagged(Box::new(serde_yaml::value::TaggedValue {
                    tag: t.tag,
                    value: self.redact_yaml(t.value),
                }))
            }
            other => other,
        }
    }
}

/// `value` and the text it becomes inside the quotes of the ways programs print a string,
/// so that a secret is found however a log wrote it: JSON (serde_json and Python's
/// `json.dumps`, which writes non-ASCII as `\uXXXX`), Python's `repr` (either quote),
/// and shell quoting (`'\''` as bash's `set -x` writes it, `'"'"'` as Python's
/// `shlex.quote`, a double-quoted word, and backslashes as `printf %q`). Each differs
/// from `value` only when `value` holds a character that form escapes.
fn printed_forms(value: &str) -> BTreeSet<String> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json[1..json.len().saturating_sub(1).max(1)].to_string();
    let ascii_json = json
        .chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                crate::text::json_escape(c)
            }
        })
        .collect();
    let shell_word = |c: char| c.is_ascii_alphanumeric() || "_/.,:@%+=-".contains(c);
    let mut forms = BTreeSet::from([
        value.to_string(),
        json,
        ascii_json,
        python_repr_inner(value, '\''),
        python_repr_inner(value, '"'),
        value.replace('\'', "'\\''"),
        value.replace('\'', "'\"'\"'"),
        value.chars().fold(String::new(), |mut out, c| {
            if matches!(c, '"' | '\\' | '$' | '`') {
                out.push('\\');
            }
            out.push(c);
            out
        }),
        value.chars().fold(String::new(), |mut out, c| {
            if !shell_word(c) {
                out.push('\\');
            }
            out.push(c);
            out
        }),
    ]);
    forms.retain(|f| !f.is_empty());
    forms
}

/// What Python's `repr` writes between its quotes for `value` quoted with `quote`:
/// backslash escapes for the quote, `\\`, `\n`, `\r`, `\t`, and `\xNN` / `\uNNNN` /
/// `\UNNNNNNNN` for what it does not print (controls, separators but the space, format
/// characters: an approximation of `str.isprintable` that covers what a secret holds).
fn python_repr_inner(value: &str, quote: char) -> String {
    let printable = |c: char| {
        !(c.is_control()
            || matches!(c, '\u{a0}' | '\u{ad}' | '\u{1680}' | '\u{2000}'..='\u{200f}'
                | '\u{2028}'..='\u{202f}' | '\u{205f}'..='\u{206f}' | '\u{3000}' | '\u{feff}'))
    };
    let mut out = String::new();
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if printable(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out
}

/// What a secret-named key holds, with every string and number in it (at any depth)
/// replaced by [`REDACTED`]; booleans, nulls and the shape are kept.
fn blank_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(_) | Value::Number(_) => Value::String(REDACTED.into()),
        Value::Array(items) => Value::Array(items.into_iter().map(blank_json).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, blank_json(v))).collect())
        }
        other => other,
    }
}

/// [`blank_json`] for YAML.
fn blank_yaml(value: serde_yaml::Value) -> serde_yaml::Value {
    use serde_yaml::Value;
    match value {
        Value::String(_) | Value::Number(_) => Value::String(REDACTED.into()),
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(blank_yaml).collect()),
        Value::Mapping(map) => {
            Value::Mapping(map.into_iter().map(|(k, v)| (k, blank_yaml(v))).collect())
        }
        Value::Tagged(t) => blank_yaml(t.value),
        other => other,
    }
}

/// The secrets a YAML value holds wherever they sit: every string and number under a
/// secret-named key, at any depth (`{env_vars: {WANDB_API_KEY: ...}}` as a Hydra
/// override's value). The one rule [`Secrets::redact_yaml`] redacts by.
pub fn secrets_in_yaml(value: &serde_yaml::Value) -> Vec<String> {
    fn walk(value: &serde_yaml::Value, under_secret: bool, out: &mut Vec<String>) {
        use serde_yaml::Value;
        match value {
            Value::String(s) if under_secret => out.push(s.clone()),
            Value::Number(n) if under_secret => out.push(n.to_string()),
            Value::Sequence(items) => items.iter().for_each(|v| walk(v, under_secret, out)),
            Value::Mapping(map) => {
                for (k, v) in map {
                    walk(
                        v,
                        under_secret || k.as_str().is_some_and(is_secret_name),
                        out,
                    );
                }
            }
            Value::Tagged(t) => walk(&t.value, under_secret, out),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, false, &mut out);
    out
}

/// A Hydra override's value text as the tree Hydra's grammar reads (`{a: {b: c}}`,
/// `[x, y]`, a scalar); None when it is not a plain value (a sweep, a function call,
/// a syntax error).
fn override_tree(text: &str) -> Option<serde_yaml::Value> {
    crate::hydra::parse_value(text).ok()?.to_yaml()
}

/// The secrets in a Hydra override written as `key=value` text: the whole value when the
/// key is secret-named ([`is_secret_override_key`]), else what secret-named keys inside
/// the value hold, at any depth ([`secrets_in_yaml`]).
pub fn secrets_in_override(key: &str, value: &str) -> Vec<String> {
    if is_secret_override_key(key) {
        return vec![value.to_string()];
    }
    override_tree(value)
        .map(|tree| secrets_in_yaml(&tree))
        .unwrap_or_default()
}

/// A Hydra override's value text with its secrets replaced, for what argus shows and
/// records: [`REDACTED`] for the whole value when the key is secret-named; the value
/// rewritten with secret-named keys' contents replaced when it holds any (at any depth);
/// [`REDACTED`] whole when it cannot be read as a plain value but names a secret-named
/// word (it may hide one where this cannot see); else unchanged.
pub fn redact_override_value<'a>(key: &str, value: &'a str) -> Cow<'a, str> {
    if is_secret_override_key(key) {
        return Cow::Borrowed(REDACTED);
    }
    match override_tree(value) {
        Some(tree) if secrets_in_yaml(&tree).is_empty() => Cow::Borrowed(value),
        Some(tree) => Cow::Owned(crate::hydra::format_value(
            &Secrets::new().redact_yaml(tree),
        )),
        None if is_secret_name(value) => Cow::Borrowed(REDACTED),
        None => Cow::Borrowed(value),
    }
}

/// What the loaders parsed in this process (profile, JobSpec, RayConfig).
static REMEMBERED: RwLock<Secrets> = RwLock::new(Secrets {
    values: BTreeSet::new(),
    names: BTreeSet::new(),
});

/// Adds to the process-wide set that [`known`] returns.
pub fn remember(secrets: &Secrets) {
    if let Ok(mut known) = REMEMBERED.write() {
        known.extend(secrets);
    }
}

/// Every secret this process knows: what the loaders remembered, and the secret-named
/// variables of the environment (read now, so a token exported later is covered).
pub fn known() -> Secrets {
    let mut s = REMEMBERED.read().map(|k| k.clone()).unwrap_or_default();
    s.extend(&Secrets::from_process_env());
    s
}

/// `text` with every known secret replaced: for error messages and logs.
pub fn redact_text(text: &str) -> String {
    known().redact_str(text).into_owned()
}

/// A JSON document with secrets replaced by name and by value (every known secret): for
/// records written under the shared storage and JSON printed on stdout.
pub fn redact_json(value: serde_json::Value) -> serde_json::Value {
    known().redact_json(value)
}

/// A YAML value with secrets replaced by name and by value.
pub fn redact_yaml(value: serde_yaml::Value) -> serde_yaml::Value {
    known().redact_yaml(value)
}

/// `text` with the value of every assignment of one of `names` replaced by [`REDACTED`]:
/// `NAME=value`, `NAME: value`, `"NAME": "value"`, `'NAME': 'value'` (and their
/// JSON-escaped `\"` forms). `NAME` is a whole word (`MY_HF_TOKEN` is not `HF_TOKEN`). A
/// quoted value is replaced inside its quotes, up to the end of its line at most; a bare
/// one up to the next whitespace or quote. A line is never joined to the next, so line
/// numbers hold. For secrets whose values are unknown: a bare word that merely follows
/// `NAME:` is hidden too, which is the safe side.
pub fn redact_names<'a, S: AsRef<str>>(
    text: &'a str,
    names: impl IntoIterator<Item = S>,
) -> Cow<'a, str> {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for name in names {
        let name = name.as_ref();
        if name.is_empty() {
            continue;
        }
        for (at, _) in text.match_indices(name) {
            if let Some(span) = assigned_at(text, at, at + name.len()) {
                spans.push(span);
            }
        }
    }
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for (start, end) in spans {
        if end <= done {
            continue;
        }
        let start = start.max(done);
        out.push_str(&text[done..start]);
        out.push_str(REDACTED);
        done = end;
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

/// The span of the value assigned to the name found at `text[at..end]`, when it is one.
/// Every byte looked for is ASCII, so every index is on a character boundary.
fn assigned_at(text: &str, at: usize, end: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let blank = |c: u8| c == b' ' || c == b'\t';
    // After a word character, unless it ends an escape (`\nNAME` in a JSON string).
    if at > 0 && word(b[at - 1]) && !(at >= 2 && b[at - 2] == b'\\') {
        return None;
    }
    let mut i = end;
    // The name's closing quote: `"NAME"`, `'NAME'`, `\"NAME\"`.
    if b[i..].starts_with(b"\\\"") {
        i += 2;
    } else if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
        i += 1;
    } else if i < b.len() && word(b[i]) {
        return None;
    }
    while i < b.len() && blank(b[i]) {
        i += 1;
    }
    if i >= b.len() || (b[i] != b'=' && b[i] != b':') {
        return None;
    }
    i += 1;
    while i < b.len() && blank(b[i]) {
        i += 1;
    }
    let (start, stop): (usize, &[u8]) = if b[i..].starts_with(b"\\\"") {
        (i + 2, b"\\\"")
    } else if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
        (i + 1, std::slice::from_ref(&b[i]))
    } else {
        (i, b"")
    };
    let mut j = start;
    while j < b.len() && b[j] != b'\n' && b[j] != b'\r' {
        if stop.is_empty() {
            if b[j].is_ascii_whitespace() || b[j] == b'"' || b[j] == b'\'' || b[j] == b'\\' {
                break;
            }
        } else if b[j..].starts_with(stop) {
            break;
        } else if b[j] == b'\\'
            && stop.len() == 1
            && b.get(j + 1)
                .is_some_and(|c| c.is_ascii() && !b"\r\n".contains(c))
        {
            // An escaped character of a quoted value (`\"`) is part of it.
            j += 1;
        }
        j += 1;
    }
    let j = j.min(b.len());
    (j > start && &text[start..j] != REDACTED).then_some((start, j))
}

/// What a value is when it is shaped like a well-known credential.
pub fn secret_shape(value: &str) -> Option<&'static str> {
    shapes(value).next().map(|(what, _)| what)
}

/// Every credential-shaped piece of `value`, in order: (what it is, the piece).
fn shapes(value: &str) -> impl Iterator<Item = (&'static str, &str)> {
    let key = value
        .contains("PRIVATE KEY-----")
        .then_some(("a private key", value));
    let tokens = value
        .split(|c: char| c.is_whitespace() || "=,;'\"`()[]{}".contains(c))
        .filter_map(|token| token_shape(token).map(|what| (what, token)));
    key.into_iter().chain(tokens)
}

/// What one token (no blank, quote or separator in it) is when it is a credential.
fn token_shape(token: &str) -> Option<&'static str> {
    let tail = |prefix: &str, min: usize| {
        token.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= min
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
    };
    if tail("hf_", 30) {
        return Some("a Hugging Face token");
    }
    if ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"]
        .iter()
        .any(|p| tail(p, 30))
    {
        return Some("a GitHub token");
    }
    if tail("glpat-", 20) {
        return Some("a GitLab token");
    }
    if tail("sk-", 20) {
        return Some("an API key");
    }
    if ["xoxb-", "xoxp-", "xoxa-", "xoxr-"]
        .iter()
        .any(|p| tail(p, 10))
    {
        return Some("a Slack token");
    }
    if token.len() == 20
        && (token.starts_with("AKIA") || token.starts_with("ASIA"))
        && token
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        return Some("an AWS access key");
    }
    if url_password(token).is_some() {
        return Some("a URL with a password");
    }
    None
}

/// The password of a URL's `user:password@`, when it has a non-empty one.
fn url_password(token: &str) -> Option<&str> {
    let (_, rest) = token.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_decide_by_word() {
        for secret in [
            "HF_TOKEN",
            "RAY_AUTH_TOKEN",
            "api_key",
            "APIKEY",
            "DB_PASS",
            "MYSQL_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "WANDB_API_KEY",
            "PGPASSWD",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "TOKENIZERS_PARALLELISM",
            "HF_HOME",
            "NCCL_DEBUG",
            "RAY_AUTH_MODE",
            "PASSAGE_LEN",
            "PWD",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
    }

    #[test]
    fn secret_values_are_replaced_at_any_depth_by_name_and_by_value() {
        let mut s = Secrets::new();
        s.add_vars([("DB_PASS", "hunter2-db"), ("NCCL_DEBUG", "WARN-long-value")]);
        s.add("1");
        assert_eq!(
            s.len(),
            1,
            "short values and non-secret names are not collected"
        );
        let v = serde_json::json!({
            "env": {"HF_TOKEN": "hf_abc", "HF_HOME": "/x", "DB_PASS": "hunter2-db"},
            "list": [{"api_key": "k"}],
            "entrypoint": "python3 -m x db.password=hunter2-db other=1",
            "metadata": {"note": "pass is hunter2-db!"}
        });
        let r = s.redact_json(v);
        let text = r.to_string();
        assert!(!text.contains("hunter2-db"), "{text}");
        assert_eq!(r["env"]["HF_TOKEN"], REDACTED);
        assert_eq!(r["env"]["HF_HOME"], "/x");
        assert_eq!(r["list"][0]["api_key"], REDACTED);
        assert_eq!(
            r["entrypoint"],
            "python3 -m x db.password=<redacted> other=1"
        );
    }

    #[test]
    fn longer_secrets_are_hidden_whole_and_yaml_too() {
        let mut s = Secrets::new();
        s.add("abcdef");
        s.add("abcdef-123456");
        assert_eq!(
            s.redact_str("x abcdef-123456 y abcdef"),
            "x <redacted> y <redacted>"
        );
        let y: serde_yaml::Value =
            serde_yaml::from_str("a: [x abcdef]\nMY_TOKEN: 12345\nb: {c: abcdef-123456}\n")
                .unwrap();
        let text = serde_yaml::to_string(&s.redact_yaml(y)).unwrap();
        assert!(
            !text.contains("abcdef") && !text.contains("12345"),
            "{text}"
        );
    }

    #[test]
    fn the_process_wide_set_includes_the_environment() {
        // SAFETY: a variable no other test reads.
        unsafe { std::env::set_var("ARGUS_TEST_SECRET_TOKEN", "tok-from-env-123") };
        let mut s = Secrets::new();
        s.add("remembered-secret");
        remember(&s);
        let text = redact_text("a tok-from-env-123 b remembered-secret c");
        assert_eq!(text, "a <redacted> b <redacted> c");
    }
    #[test]
    fn a_command_line_is_redacted_by_key_by_flag_and_by_value() {
        let args = [
            "argus",
            "run",
            "job.yaml",
            "--set",
            "overrides.x.api_key=a$b'c\\d-secret",
            "--set=overrides.trainer.wandb_password=pw-0123456",
            "--set",
            "total_training_steps=5",
            "--hf-token",
            "hf_tok_value",
            "--db-secret=inline-value",
            "HF_TOKEN=env-tok-xyz",
        ];
        let line = redact_args(&args, 1000);
        for secret in [
            "a$b",
            "pw-0123456",
            "hf_tok_value",
            "inline-value",
            "env-tok-xyz",
        ] {
            assert!(!line.contains(secret), "{secret} in {line}");
        }
        assert_eq!(
            line,
            "argus run job.yaml --set overrides.x.api_key=<redacted> --set=overrides.trainer.wandb_password=<redacted> --set total_training_steps=5 --hf-token <redacted> --db-secret=<redacted> HF_TOKEN=<redacted>"
        );
        // Cut on a character boundary, never inside one.
        assert_eq!(redact_args(&["é".repeat(300)], 200).chars().count(), 200);
        assert!(is_secret_override_key("+wandb.api_key"));
        assert!(!is_secret_override_key("data.tokenizer"));
    }

    #[test]
    fn a_secret_named_key_is_seen_at_any_depth_of_a_value() {
        let tree: serde_yaml::Value = serde_yaml::from_str(
            "env_vars: {WANDB_API_KEY: wandb-deep-1, PLAIN: keep-me}\nlist: [{db: {password: [pw-in-list, 12345678]}}]\nCREDENTIALS: {a: {b: cred-deep-2}, on: true}\n",
        )
        .unwrap();
        let found = secrets_in_yaml(&tree);
        assert_eq!(
            found,
            ["wandb-deep-1", "pw-in-list", "12345678", "cred-deep-2"]
        );
        let text = serde_yaml::to_string(&Secrets::new().redact_yaml(tree)).unwrap();
        for clear in &found {
            assert!(!text.contains(clear.as_str()), "{clear} in {text}");
        }
        assert!(
            text.contains("keep-me") && text.contains("on: true"),
            "{text}"
        );
        let json = serde_json::json!({"a": {"b": {"HF_TOKEN": {"x": ["t-deep-3", 1]}}}});
        let text = Secrets::new().redact_json(json).to_string();
        assert_eq!(
            text,
            r#"{"a":{"b":{"HF_TOKEN":{"x":["<redacted>","<redacted>"]}}}}"#
        );
    }

    #[test]
    fn an_override_value_is_redacted_inside_as_hydra_reads_it() {
        let key = "+ray_kwargs.ray_init.runtime_env";
        let value = "{env_vars: {WANDB_API_KEY: 'w k-1', PLAIN: x}}";
        assert_eq!(secrets_in_override(key, value), ["w k-1"]);
        let shown = redact_override_value(key, value);
        assert!(!shown.contains("w k-1"), "{shown}");
        let back = crate::hydra::parse_value(&shown)
            .unwrap()
            .to_yaml()
            .unwrap();
        assert_eq!(back["env_vars"]["WANDB_API_KEY"], REDACTED);
        assert_eq!(back["env_vars"]["PLAIN"], "x");
        // Nothing secret: the text as written.
        assert_eq!(redact_override_value("a.b", "{x: 1}"), "{x: 1}");
        assert_eq!(redact_override_value("a.api_key", "abc"), REDACTED);
        // What Hydra's grammar cannot read as a plain value is hidden whole when it names
        // a secret-named word.
        assert_eq!(redact_override_value("a", "choice({token: x},y)"), REDACTED);
        // A command line (a lock's holder): the same rule inside `--set` words.
        let line = redact_args(
            &[
                "argus",
                "run",
                "--set",
                "overrides.+a.b={creds: {db_password: pw-raw-4567}}",
            ],
            1000,
        );
        assert!(!line.contains("pw-raw-4567"), "{line}");
        assert!(line.contains("db_password"), "{line}");
    }

    #[test]
    fn a_secret_is_found_however_a_program_printed_it() {
        let secret = "pa\"ss\\w'ord-é $x";
        let mut s = Secrets::new();
        s.add(secret);
        // The forms Python and a shell print, made by Python itself where it can run.
        let python = std::process::Command::new("python3")
            .args([
                "-c",
                "import json,shlex,sys; v=sys.argv[1]; print(json.dumps(v)); print(json.dumps(v, ensure_ascii=False)); print(repr(v)); print(repr(v.replace(chr(39), ''))); print(shlex.quote(v)); print({'k': v})",
                secret,
            ])
            .output();
        let mut printed: Vec<String> = match python {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        assert_eq!(printed.len(), 6, "python3 printed the forms");
        printed.push(format!("'{}'", secret.replace('\'', "'\\''")));
        printed.push(serde_json::to_string(secret).unwrap());
        let mut bash_q = String::new();
        for c in secret.chars() {
            if !(c.is_ascii_alphanumeric() || "_/.,:@%+=-".contains(c)) {
                bash_q.push('\\');
            }
            bash_q.push(c);
        }
        printed.push(bash_q);
        // The value without its quote (Python's repr then keeps single quotes).
        s.add(&secret.replace('\'', ""));
        for line in printed {
            let text = format!("token={line} next");
            let shown = s.redact_str(&text);
            assert!(
                !shown.contains("ord-é") && !shown.contains("ord-\\u00e9"),
                "{line} -> {shown}"
            );
            assert!(shown.ends_with(" next"), "{shown}");
        }
    }

    #[test]
    fn credentials_are_recognised_by_shape() {
        let hf = format!("hf_{}", "a".repeat(34));
        assert_eq!(secret_shape(&hf), Some("a Hugging Face token"));
        assert_eq!(
            secret_shape(&format!("Bearer {hf}")),
            Some("a Hugging Face token")
        );
        assert_eq!(
            secret_shape("https://user:pw@mirror.example/x"),
            Some("a URL with a password")
        );
        assert_eq!(
            secret_shape("AKIAABCDEFGHIJKLMNOP"),
            Some("an AWS access key")
        );
        for fine in [
            "https://hf-mirror.example",
            "https://user@host/x",
            "/mnt/shared/common/hf",
            "hf_home",
            "false",
            "Qwen/Qwen2.5-0.5B-Instruct",
        ] {
            assert_eq!(secret_shape(fine), None, "{fine}");
        }
    }

    #[test]
    fn a_shaped_value_is_added_whole_and_by_its_pieces() {
        let hf = format!("hf_{}", "b".repeat(34));
        let mut s = Secrets::new();
        assert!(s.add_shaped(&format!("Bearer {hf}")));
        assert!(s.add_shaped("https://user:mirror-pw-1@mirror.example/x"));
        assert!(s.add_shaped("AKIAABCDEFGHIJKLMNOP"));
        assert!(!s.add_shaped("https://hf-mirror.example"));
        assert!(!s.add_shaped("/mnt/shared/common/hf"));
        let log = format!(
            "auth {hf}\nGET https://user:mirror-pw-1@mirror.example/other\npw mirror-pw-1\nkey AKIAABCDEFGHIJKLMNOP\nhttps://hf-mirror.example\n"
        );
        assert_eq!(
            s.redact_str(&log),
            "auth <redacted>\nGET https://user:<redacted>@mirror.example/other\npw <redacted>\nkey <redacted>\nhttps://hf-mirror.example\n"
        );
    }

    #[test]
    fn names_hide_the_values_they_assign() {
        let names = ["HF_TOKEN", "DB_PASS"];
        let cases = [
            ("HF_TOKEN=hf_abc123 next", "HF_TOKEN=<redacted> next"),
            (
                "export DB_PASS='s3 cret' x",
                "export DB_PASS='<redacted>' x",
            ),
            ("HF_TOKEN: abc\nB: c", "HF_TOKEN: <redacted>\nB: c"),
            (
                r#"{"HF_TOKEN": "abc", "HF_HOME": "/x"}"#,
                r#"{"HF_TOKEN": "<redacted>", "HF_HOME": "/x"}"#,
            ),
            (
                "environ({'DB_PASS': 'p\\'w', 'A': 'b'})",
                "environ({'DB_PASS': '<redacted>', 'A': 'b'})",
            ),
            // A log line inside a JSON string (triage.json).
            (
                r#""line": "HF_TOKEN=abc\nDB_PASS: \"x y\"""#,
                r#""line": "HF_TOKEN=<redacted>\nDB_PASS: \"<redacted>\"""#,
            ),
            // Whole words only; a name without an assignment is left alone.
            ("MY_HF_TOKEN=a HF_TOKENS=b", "MY_HF_TOKEN=a HF_TOKENS=b"),
            ("set HF_TOKEN, then DB_PASS", "set HF_TOKEN, then DB_PASS"),
            (
                "HF_TOKEN=\nHF_TOKEN=<redacted>",
                "HF_TOKEN=\nHF_TOKEN=<redacted>",
            ),
            // An unclosed quote stops at the end of its line: lines are kept.
            ("DB_PASS=\"abc\nnext", "DB_PASS=\"<redacted>\nnext"),
            ("DB_PASS='abc\\\nnext", "DB_PASS='<redacted>\nnext"),
            ("é HF_TOKEN=ü-ß é", "é HF_TOKEN=<redacted> é"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_names(text, names), want, "{text}");
        }
        assert!(matches!(redact_names("nothing", names), Cow::Borrowed(_)));
    }

    #[test]
    fn a_redactor_with_names_hides_by_value_then_by_name() {
        let mut s = Secrets::new();
        s.add("known-secret");
        s.add_name("DB_PASS");
        assert_eq!(
            s.redact_str("A=known-secret DB_PASS=unknown DB_PASS=known-secret"),
            "A=<redacted> DB_PASS=<redacted> DB_PASS=<redacted>"
        );
        assert_eq!(s.names().collect::<Vec<_>>(), ["DB_PASS"]);
    }
}
