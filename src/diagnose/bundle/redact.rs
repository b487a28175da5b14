//! What a bundle hides: the redactor of its files (every secret value argus knows, the
//! job's runtime env as Ray holds it, credential-shaped values whatever their name, and,
//! when Ray does not answer, the job's secret names where a log assigns them), the
//! recorded JobSpec's variables it learns them from, and a container's env as written.

use super::{JOBSPEC, Missed};
use crate::config::profile::Profile;
use crate::ray::jobs::JobInfo;
use crate::secrets::{self, Secrets};

/// The redaction of a bundle: every known secret; the values of the secret-named
/// variables of the job's runtime env as Ray has it; every value of the job's and the
/// profile's env shaped like a credential ([`secrets::secret_shape`]), whatever its name.
///
/// Without Ray's JobInfo (Ray does not answer: its head died, or it lost the job) the
/// values of the job's
/// secrets are unknown (the recorded JobSpec has them redacted), so their names are
/// hidden where they are assigned instead ([`Secrets::add_name`]): the secret-named
/// variables of the recorded JobSpec (`recorded`) and of the profile, and those the
/// record has redacted by value. Then what the manifest says of it, as not collected.
pub(super) fn redactor(
    info: Option<&JobInfo>,
    recorded: Option<&[(String, String)]>,
    p: &Profile,
) -> (Secrets, Option<Missed>) {
    let mut redact = secrets::known();
    let ray_env = info
        .and_then(|i| i.runtime_env.as_ref())
        .and_then(|e| e.get("env_vars"))
        .and_then(|e| e.as_object());
    let by_name = info.is_none();
    if let Some(env) = ray_env {
        let vars: Vec<(&str, &str)> = env
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect();
        redact.add_vars(vars.iter().copied());
        for (_, value) in &vars {
            redact.add_shaped(value);
        }
    }
    let recorded = recorded
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let profile_env = p
        .env
        .iter()
        .chain(&p.head.env)
        .chain(p.workers.iter().flat_map(|g| &g.env))
        .chain(&p.submit.runtime_env.env_vars)
        .map(|(k, v)| (k.as_str(), v.as_str()));
    for (name, value) in recorded.chain(profile_env) {
        redact.add_vars([(name, value)]);
        redact.add_shaped(value);
        if by_name && (secrets::is_secret_name(name) || value == secrets::REDACTED) {
            redact.add_name(name);
        }
    }
    let missed = by_name.then(|| {
        let names: Vec<&str> = redact.names().collect();
        let named = if names.is_empty() {
            "the recorded JobSpec and the profile name no secret variable".to_string()
        } else {
            format!("their names: {}", names.join(", "))
        };
        Missed {
            what: "redaction by value".into(),
            why: format!(
                "Ray did not answer with the job's runtime env, so the values of its secret \
                 variables are unknown (the recorded JobSpec has them redacted): they are \
                 hidden only where a log assigns them by name ({named}), not wherever else \
                 a log prints them"
            ),
        }
    });
    (redact, missed)
}

/// The `env_vars` of a recorded JobSpec (and of its `runtime_env`, if a record has one):
/// (name, value as recorded, `<redacted>` for a secret). None when it cannot be read.
pub(super) fn recorded_env(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    use serde_yaml::Value;
    let text = std::str::from_utf8(bytes).ok()?;
    let spec = crate::inputs::recorded::read(text, JOBSPEC).ok()?;
    let maps = [
        spec.get("env_vars"),
        spec.get("runtime_env").and_then(|r| r.get("env_vars")),
    ];
    let vars = maps
        .into_iter()
        .flatten()
        .filter_map(Value::as_mapping)
        .flatten()
        .filter_map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => String::new(),
            };
            Some((k.as_str()?.to_string(), value))
        })
        .collect();
    Some(vars)
}

/// A container's env (`NAME=value` lines) with the values of secret-named variables and
/// values shaped like a credential (`HF_ENDPOINT=https://user:pw@mirror`) redacted.
pub(super) fn env_text(env: &[String]) -> String {
    let mut out = String::new();
    for kv in env {
        match kv.split_once('=') {
            Some((name, value))
                if secrets::is_secret_name(name) || secrets::secret_shape(value).is_some() =>
            {
                out.push_str(&format!("{name}={}", secrets::REDACTED));
            }
            _ => out.push_str(kv),
        }
        out.push('\n');
    }
    out
}
