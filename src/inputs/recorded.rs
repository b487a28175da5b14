//! The recorded JobSpec: the one codec by which a JobSpec is written with its secrets
//! redacted (a run lock, a Slurm run's `jobspec.yaml`, a job's `config/jobspec.yaml`)
//! and read back: as a value ([`read`]: a resume, a failure bundle's redaction) or
//! loaded with the secrets taken from the environment.

use serde_yaml::Value;

use super::Error;
use crate::config::jobspec::{JobSpec, LoadedJobSpec};
use crate::config::yaml::Source;
use crate::secrets::{REDACTED, redact_json};

/// A JobSpec as a YAML value with its secrets redacted (what a lock or a Slurm run keeps):
/// secret override values structurally, before Hydra formatting quotes them
/// ([`crate::config::jobspec::Overrides::redacted`]), then by name and by value.
pub fn to_value(spec: &JobSpec) -> Value {
    redacted_value(&JobSpec {
        overrides: spec.overrides.redacted(),
        ..spec.clone()
    })
}

/// [`to_value`] as YAML text.
pub fn to_text(spec: &JobSpec) -> String {
    crate::config::yaml::to_string(&to_value(spec))
}

/// Any recorded value (a profile, a JobSpec) as YAML, its secrets redacted by name and
/// by value.
pub fn redacted_value<T: serde::Serialize>(value: &T) -> Value {
    let json = redact_json(serde_json::to_value(value).unwrap_or_default());
    serde_yaml::to_value(json).unwrap_or(Value::Null)
}

/// Puts back each redacted `env_vars` value from `env`; the name of the first one `env`
/// does not know is the error.
pub fn restore_secrets(
    jobspec: &mut Value,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    if let Some(vars) = jobspec.get_mut("env_vars").and_then(|e| e.as_mapping_mut()) {
        for (key, value) in vars.iter_mut() {
            if value.as_str() == Some(REDACTED) {
                let name = key.as_str().unwrap_or_default().to_string();
                *value = Value::String(env(&name).ok_or(name)?);
            }
        }
    }
    Ok(())
}

/// A JobSpec written by [`to_value`], loaded again with the secrets taken back from the
/// environment.
pub fn from_value(mut jobspec: Value, origin: &str) -> Result<LoadedJobSpec, Error> {
    restore_secrets(&mut jobspec, |name| std::env::var(name).ok()).map_err(Error::MissingSecret)?;
    Ok(load(origin, &jobspec, &[])?)
}

/// A JobSpec written by [`to_text`] (`origin` names where it was read), loaded again.
pub fn from_text(text: &str, origin: &str) -> Result<LoadedJobSpec, Error> {
    from_value(read(text, origin)?, origin)
}

/// A JobSpec written by [`to_text`] as the value it was (secrets still redacted), read
/// as strictly as a JobSpec file (a key given twice is refused).
pub fn read(text: &str, origin: &str) -> Result<Value, Error> {
    crate::config::yaml::parse(&Source::new(origin, text))
        .map_err(|e| Error::Invalid(e.to_string()))
}

/// A recorded JobSpec value (secrets already in place) parsed strictly, then `sets`.
pub fn load(
    origin: impl Into<std::path::PathBuf>,
    jobspec: &Value,
    sets: &[String],
) -> Result<LoadedJobSpec, crate::config::ConfigError> {
    LoadedJobSpec::from_source(
        Source::new(origin.into(), crate::config::yaml::to_string(jobspec)),
        sets,
    )
}
