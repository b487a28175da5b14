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

/// `key=<redacted>` when `key` is secret-named, else the word unchanged.
fn redact_assignment(word: &str) -> String {
    match word.split_once('=') {
        Some((key, _)) if is_secret_override_key(key) => format!("{key}={REDACTED}"),
        _ => word.to_string(),
    }
}

/// A set of secret values and the redactor that hides them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: BTreeSet<String>,
}

impl Secrets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value (trimmed); short or trivial ones are left out (see [`MIN_SECRET_LEN`]).
    pub fn add(&mut self, value: &str) {
        let value = value.trim();
        let trivial = ["true", "false", "none", "null", REDACTED];
        if value.chars().count() >= MIN_SECRET_LEN
            && !trivial.iter().any(|t| value.eq_ignore_ascii_case(t))
        {
            self.values.insert(value.to_string());
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
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// `text` with every occurrence of every secret value replaced (longest first, so a
    /// secret that contains another is hidden whole).
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
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

    /// A JSON document with secret-named keys' string values and every secret value
    /// replaced, at any depth.
    pub fn redact_json(&self, value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = match v {
                            Value::String(_) | Value::Number(_) if is_secret_name(&k) => {
                                Value::String(REDACTED.into())
                            }
                            other => self.redact_json(other),
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

    /// The same for a YAML value.
    pub fn redact_yaml(&self, value: serde_yaml::Value) -> serde_yaml::Value {
        use serde_yaml::Value;
        match value {
            Value::Mapping(map) => Value::Mapping(
                map.into_iter()
                    .map(|(k, v)| {
                        let secret_key = k.as_str().is_some_and(is_secret_name);
                        let v = match v {
                            Value::String(_) | Value::Number(_) if secret_key => {
                                Value::String(REDACTED.into())
                            }
                            other => self.redact_yaml(other),
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

/// What the loaders parsed in this process (profile, JobSpec, RayConfig).
static REMEMBERED: RwLock<Secrets> = RwLock::new(Secrets {
    values: BTreeSet::new(),
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
}
