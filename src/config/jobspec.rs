//! The JobSpec: one training run. The old submitter's field names load unchanged
//! (`workload`, `submission_id`, `code_path`, `model_id`, `train_file`, `val_file`,
//! `nnodes`, `n_gpus_per_node`, `total_training_steps`, `save_freq`, `test_freq`); added:
//! `code_id`, `overrides`, `env_vars`, `metadata`, `time_limit`, and the `custom` workload
//! with a raw `entrypoint`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::yaml::{self, ConfigError, Source};
use crate::yaml_path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// verl PPO: `python3 -m verl.trainer.main_ppo`.
    Ppo,
    /// verl GRPO: main_ppo with `algorithm.adv_estimator=grpo`, no critic.
    Grpo,
    /// verl SFT on Ray: `python3 -m verl.trainer.sft_trainer_ray`.
    Sft,
    /// Anything else: the raw `entrypoint`.
    Custom,
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Ppo => "ppo",
            Workload::Grpo => "grpo",
            Workload::Sft => "sft",
            Workload::Custom => "custom",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub workload: Workload,
    pub submission_id: Option<String>,
    /// The code as the containers see it (usually a snapshot under common/code/).
    pub code_path: Option<String>,
    /// A snapshot id (`code_id` or `name/code_id`), resolved to its path.
    pub code_id: Option<String>,
    /// A model in the shared HF cache (resolved to its snapshot dir), or a path.
    pub model_id: Option<String>,
    /// Relative names resolve under common/datasets/ (`gsm8k` -> gsm8k/train.parquet).
    pub train_file: Option<String>,
    pub val_file: Option<String>,
    pub nnodes: Option<u32>,
    pub n_gpus_per_node: Option<u32>,
    pub total_training_steps: Option<u64>,
    pub save_freq: Option<i64>,
    pub test_freq: Option<i64>,
    /// Extra Hydra overrides: a map (`trainer.logger: [console]`) or a list of `key=value`.
    #[serde(default)]
    pub overrides: Overrides,
    #[serde(default)]
    pub env_vars: BTreeMap<String, ScalarString>,
    #[serde(default)]
    pub metadata: BTreeMap<String, ScalarString>,
    /// `wait` and `logs --follow` stop the job once it has run this long (`2h`, `90m`).
    pub time_limit: Option<TimeLimit>,
    /// The command of a `custom` workload.
    pub entrypoint: Option<String>,
    /// `argus run`: snapshot this source tree as the job's code.
    pub code: Option<CodeSource>,
    /// `argus run`: prepare the datasets from this raw copy (the hub repo's layout)
    /// instead of the hub. Relative to the JobSpec file.
    pub data_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSource {
    /// A directory, relative to the JobSpec file.
    pub source: String,
    /// The snapshot family under common/code/ (default verl).
    #[serde(default = "default_code_name")]
    pub name: String,
    #[serde(default)]
    pub exclude: Vec<String>,
}

fn default_code_name() -> String {
    "verl".to_string()
}

/// One Hydra override: `key` and either a YAML value (formatted by argus) or raw text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Override {
    pub key: String,
    pub value: OverrideValue,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OverrideValue {
    /// From a map entry: quoted for Hydra by argus.
    Yaml(serde_yaml::Value),
    /// From a `key=value` list item: passed as the user wrote it.
    Raw(String),
    /// `~key`: delete.
    Delete,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides(pub Vec<Override>);

impl Serialize for Overrides {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for o in &self.0 {
            seq.serialize_element(&o.to_string())?;
        }
        seq.end()
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            OverrideValue::Yaml(v) => {
                write!(f, "{}={}", self.key, crate::hydra::format_value(v))
            }
            OverrideValue::Raw(v) => write!(f, "{}={v}", self.key),
            OverrideValue::Delete => write!(f, "{}", self.key),
        }
    }
}

impl Override {
    /// Parses `key=value` or `~key` as written on a command line.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('~') && !text.contains('=') {
            return Ok(Override {
                key: text.to_string(),
                value: OverrideValue::Delete,
            });
        }
        match text.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(Override {
                key: key.trim().to_string(),
                value: OverrideValue::Raw(value.to_string()),
            }),
            _ => Err(format!(
                "{text:?} is not a Hydra override (key=value, +key=value or ~key)"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Overrides {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OverridesVisitor;
        impl<'de> Visitor<'de> for OverridesVisitor {
            type Value = Overrides;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of Hydra keys to values, or a list of key=value strings")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Overrides, A::Error> {
                let mut out = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, serde_yaml::Value>()? {
                    out.push(Override {
                        key,
                        value: OverrideValue::Yaml(value),
                    });
                }
                Ok(Overrides(out))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Overrides, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(Override::parse(&item).map_err(de::Error::custom)?);
                }
                Ok(Overrides(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Overrides, E> {
                Ok(Overrides::default())
            }
        }
        d.deserialize_any(OverridesVisitor)
    }
}

/// A string that YAML may have typed as a number or a boolean (`NCCL_DEBUG: 1`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ScalarString(pub String);

impl<'de> Deserialize<'de> for ScalarString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = ScalarString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
        }
        d.deserialize_any(ScalarVisitor)
    }
}

/// A duration: `2h`, `90m`, `1h 30m`, `45s`, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimit(pub Duration);

impl Serialize for TimeLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for TimeLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LimitVisitor;
        impl Visitor<'_> for LimitVisitor {
            type Value = TimeLimit;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 2h, 90m, 1h 30m or a number of seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeLimit, E> {
                if v == 0 {
                    return Err(E::invalid_value(de::Unexpected::Unsigned(v), &self));
                }
                Ok(TimeLimit(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeLimit, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TimeLimit, E> {
                match humantime::parse_duration(v) {
                    Ok(d) if !d.is_zero() => Ok(TimeLimit(d)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(LimitVisitor)
    }
}

/// A JobSpec together with the document it came from.
#[derive(Debug, Clone)]
pub struct LoadedJobSpec {
    pub spec: JobSpec,
    pub source: Source,
}

impl LoadedJobSpec {
    pub fn load(path: &Path, sets: &[String]) -> Result<Self, ConfigError> {
        let source = Source::read(path)?;
        Self::from_source(source, sets)
    }

    /// Paths in the JobSpec (code.source, data_from) made absolute against its directory.
    pub fn absolutize(&mut self) {
        let base = self
            .source
            .origin
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        let abs = |p: &str| {
            if Path::new(p).is_absolute() {
                p.to_string()
            } else {
                base.join(p).display().to_string()
            }
        };
        if let Some(code) = &mut self.spec.code {
            code.source = abs(&code.source);
        }
        if let Some(from) = &mut self.spec.data_from {
            *from = abs(from);
        }
    }

    /// Parses, applies `--set key=value` (top-level fields, or `overrides.<hydra key>`),
    /// and validates.
    pub fn from_source(mut source: Source, sets: &[String]) -> Result<Self, ConfigError> {
        let mut spec: JobSpec = yaml::parse(&source)?;
        validate(&spec, &source)?;
        if !sets.is_empty() {
            let mut value =
                serde_yaml::to_value(&spec).map_err(|e| set_error(&source, &e.to_string()))?;
            for set in sets {
                apply_set(&mut value, &mut spec, set).map_err(|m| set_error(&source, &m))?;
            }
            let text = yaml::to_string(&value);
            let with_sets = Source::new(format!("{} (with --set)", source.origin.display()), text);
            let overrides = std::mem::take(&mut spec.overrides);
            spec = yaml::parse(&with_sets)?;
            spec.overrides.0.splice(0..0, overrides.0);
            validate(&spec, &with_sets)?;
            source = with_sets;
        }
        Ok(Self { spec, source })
    }
}

fn set_error(source: &Source, message: &str) -> ConfigError {
    ConfigError {
        origin: source.origin.clone(),
        line: 0,
        column: 0,
        message: format!("--set: {message}"),
        hint: Some(
            "--set field=value (a JobSpec field) or --set overrides.<hydra.key>=value".into(),
        ),
    }
}

/// `--set total_training_steps=5`, `--set overrides.trainer.logger=[console]`.
fn apply_set(value: &mut serde_yaml::Value, spec: &mut JobSpec, set: &str) -> Result<(), String> {
    let (key, raw) = set
        .split_once('=')
        .ok_or_else(|| format!("{set:?} is not key=value"))?;
    if let Some(hydra_key) = key.strip_prefix("overrides.") {
        spec.overrides.0.push(Override {
            key: hydra_key.to_string(),
            value: OverrideValue::Raw(raw.to_string()),
        });
        return Ok(());
    }
    let parsed: serde_yaml::Value =
        serde_yaml::from_str(raw).unwrap_or_else(|_| serde_yaml::Value::String(raw.to_string()));
    let map = value
        .as_mapping_mut()
        .ok_or("the JobSpec is not a mapping")?;
    map.insert(serde_yaml::Value::String(key.to_string()), parsed);
    // The overrides are kept aside (typed) and re-added after the round trip.
    map.remove(serde_yaml::Value::String("overrides".into()));
    Ok(())
}

/// Ids become directory names and Ray submission ids.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

fn validate(spec: &JobSpec, src: &Source) -> Result<(), ConfigError> {
    if let Some(id) = &spec.submission_id
        && !valid_id(id)
    {
        return Err(src
            .error_at(
                &yaml_path!["submission_id"],
                format!("invalid submission id {id:?}"),
            )
            .with_hint("letters, digits, '.', '_' and '-' (not '.' or '..')"));
    }
    let given = [
        spec.code_path.is_some(),
        spec.code_id.is_some(),
        spec.code.is_some(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        let at = if spec.code.is_some() {
            "code"
        } else {
            "code_id"
        };
        return Err(src.error_at(
            &yaml_path![at],
            "give one of code_path, code_id and code.source",
        ));
    }
    match (&spec.code_path, &spec.code_id) {
        (None, None) if spec.code.is_some() => {}
        (None, None) => {
            return Err(src
                .error_at(&[], "missing code_path (or code_id)")
                .with_hint("code_id: <id from `argus snapshot`>, or code_path: /mnt/shared/common/code/verl/<id>"));
        }
        (Some(path), None) if !path.starts_with('/') => {
            return Err(src
                .error_at(
                    &yaml_path!["code_path"],
                    format!("{path:?} is not an absolute path inside the containers"),
                )
                .with_hint("e.g. /mnt/shared/common/code/verl/<code_id>"));
        }
        (None, Some(id)) => {
            let ok = match id.split_once('/') {
                Some((name, id)) => valid_id(name) && valid_id(id),
                None => valid_id(id),
            };
            if !ok {
                return Err(src
                    .error_at(&yaml_path!["code_id"], format!("invalid code id {id:?}"))
                    .with_hint("a code_id printed by `argus snapshot`, or name/code_id"));
            }
        }
        _ => {}
    }
    match (spec.workload, &spec.entrypoint) {
        (Workload::Custom, None) => {
            return Err(src
                .error_at(
                    &yaml_path!["workload"],
                    "workload custom needs an entrypoint",
                )
                .with_hint("entrypoint: python3 -m my.module --flag"));
        }
        (Workload::Custom, Some(e)) if e.trim().is_empty() => {
            return Err(src.error_at(&yaml_path!["entrypoint"], "entrypoint is empty"));
        }
        (w, Some(_)) if w != Workload::Custom => {
            return Err(src
                .error_at(
                    &yaml_path!["entrypoint"],
                    format!(
                        "entrypoint is only for workload custom ({} builds its own)",
                        w.as_str()
                    ),
                )
                .with_hint("use overrides: to change the verl command line"));
        }
        _ => {}
    }
    for (field, value) in [
        ("nnodes", spec.nnodes),
        ("n_gpus_per_node", spec.n_gpus_per_node),
    ] {
        if value == Some(0) {
            return Err(src.error_at(&yaml_path![field], format!("{field} must be at least 1")));
        }
    }
    for key in spec.env_vars.keys() {
        if key.is_empty()
            || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || key.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(src.error_at(
                &yaml_path!["env_vars", key.as_str()],
                format!("{key:?} is not an environment variable name"),
            ));
        }
    }
    for o in &spec.overrides.0 {
        if o.key.is_empty() || o.key.contains(char::is_whitespace) {
            return Err(src.error_at(
                &yaml_path!["overrides"],
                format!("invalid override key {:?}", o.key),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<LoadedJobSpec, ConfigError> {
        LoadedJobSpec::from_source(Source::new("j.yaml", text), &[])
    }

    #[test]
    fn old_field_names_load() {
        let j = load("workload: ppo\nsubmission_id: run-1\ncode_path: /mnt/shared/common/code/verl/abc\nmodel_id: Qwen/Qwen2.5-0.5B-Instruct\ntrain_file: /data/train.parquet\nval_file: /data/test.parquet\nnnodes: 1\nn_gpus_per_node: 4\ntotal_training_steps: 10\nsave_freq: 5\ntest_freq: 5\n").unwrap();
        assert_eq!(j.spec.workload, Workload::Ppo);
        assert_eq!(j.spec.n_gpus_per_node, Some(4));
    }

    #[test]
    fn overrides_as_map_or_list_and_env_scalars() {
        let j = load("workload: ppo\ncode_id: abc\noverrides:\n  trainer.logger: [console]\n  data.max_prompt_length: 512\nenv_vars: {NCCL_DEBUG: 1}\ntime_limit: 1h 30m\n").unwrap();
        assert_eq!(
            j.spec.overrides.0[0].to_string(),
            "trainer.logger=[console]"
        );
        assert_eq!(j.spec.env_vars["NCCL_DEBUG"].0, "1");
        assert_eq!(
            j.spec.time_limit,
            Some(TimeLimit(Duration::from_secs(5400)))
        );
        let j = load(
            "workload: ppo\ncode_id: abc\noverrides: ['+new.key=1', '~trainer.val_before_train']\n",
        )
        .unwrap();
        assert_eq!(j.spec.overrides.0[1].value, OverrideValue::Delete);
    }

    #[test]
    fn bad_specs_are_located() {
        let e = load("workload: pp0\ncode_id: abc\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 11), "{e}");
        assert!(
            e.message
                .contains("expected one of `ppo`, `grpo`, `sft`, `custom`"),
            "{e}"
        );
        let e = load("workload: custom\ncode_id: abc\n").unwrap_err();
        assert!(e.message.contains("needs an entrypoint"), "{e}");
        let e = load("workload: ppo\n").unwrap_err();
        assert!(e.message.contains("missing code_path"), "{e}");
        let e = load("workload: ppo\ncode_id: ../x\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = load("workload: ppo\ncode_id: a\nsubmission_id: a/b\n").unwrap_err();
        assert!(e.message.contains("invalid submission id"), "{e}");
        let e = load("workload: ppo\ncode_id: a\ntime_limit: soon\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn sets_change_fields_and_add_overrides() {
        let src = Source::new(
            "j.yaml",
            "workload: ppo\ncode_id: abc\noverrides: {a.b: 1}\n",
        );
        let j = LoadedJobSpec::from_source(
            src,
            &["total_training_steps=7".into(), "overrides.c.d=x y".into()],
        )
        .unwrap();
        assert_eq!(j.spec.total_training_steps, Some(7));
        let keys: Vec<_> = j.spec.overrides.0.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["a.b", "c.d"]);
        let src = Source::new("j.yaml", "workload: ppo\ncode_id: abc\n");
        let e = LoadedJobSpec::from_source(src, &["nnodes=two".into()]).unwrap_err();
        assert!(e.message.contains("nnodes"), "{e}");
    }
}
