//! The JobSpec: one training run. The old submitter's field names load unchanged
//! (`workload`, `submission_id`, `code_path`, `model_id`, `train_file`, `val_file`,
//! `nnodes`, `n_gpus_per_node`, `total_training_steps`, `save_freq`, `test_freq`); added:
//! `code_id`, `overrides`, `env_vars`, `metadata`, `time_limit`, the `custom` workload
//! with a raw `entrypoint`, and `restart` (argus's supervision policy, see `restart`).
//!
//! `types` holds the YAML as written and the checked [`JobSpec`]; `overrides` the Hydra
//! overrides; `values` loosely typed scalars; this file loads, applies `--set`, and checks.

mod overrides;
pub mod restart;
mod types;
mod values;

use std::collections::BTreeMap;
use std::path::Path;

pub use overrides::{Override, OverrideValue, Overrides, bare_key, valid_key};
pub use restart::{RawRestart, Restart, RestartFlagError, RestartFlags, RestartOn};
pub use types::{Code, CodeSource, DataFile, JobSpec, RawJobSpec, Workload};
pub use values::{LooseDuration, MAX_TIME_LIMIT, ScalarString, TimeLimit};

use super::profile::check_job_env;
use super::yaml::{self, ConfigError, Seg, Source};
use crate::ids::{CodeRef, ContainerPath, SubmissionId};
use crate::secrets::{self, Secrets};
use crate::yaml_path;

/// The most nodes a job may ask for.
pub const MAX_NNODES: u32 = 1024;
/// The most GPUs per node a job may ask for.
pub const MAX_GPUS_PER_NODE: u32 = 64;
/// The most training steps, and the largest save / test frequency (10^9).
pub const MAX_STEPS: u64 = 1_000_000_000;

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
        if let Code::Source(code) = &mut self.spec.code
            && !code.source.starts_with(crate::ids::PYPI_PREFIX)
        {
            code.source = abs(&code.source);
        }
        if let Some(from) = &mut self.spec.data_from {
            *from = abs(from);
        }
        if let Some(from) = &mut self.spec.model_from {
            *from = abs(from);
        }
    }

    /// Parses, applies `--set key=value` (top-level fields, or `overrides.<hydra key>`),
    /// and validates.
    pub fn from_source(mut source: Source, sets: &[String]) -> Result<Self, ConfigError> {
        let raw: RawJobSpec = yaml::parse(&source)?;
        let mut spec = check(raw, &source)?;
        if !sets.is_empty() {
            let mut value =
                serde_yaml::to_value(&spec).map_err(|e| set_error(&source, &e.to_string()))?;
            let mut done = Vec::new();
            let mut last = None;
            // Applied one by one, each checked as the whole document it makes: what is
            // wrong after a set is that set's, named as the user wrote it (the document
            // the sets make was never written by anyone, its lines mean nothing).
            for set in sets {
                apply_set(&mut value, &mut spec, set).map_err(|m| set_error(&source, &m))?;
                let blame = |e: ConfigError| ConfigError {
                    origin: source.origin.clone(),
                    line: 0,
                    column: 0,
                    message: format!("--set {set}: {}", e.message),
                    hint: e.hint,
                };
                // The overrides are kept aside (typed) and re-added after the round trip.
                let mut doc = value.clone();
                if let Some(map) = doc.as_mapping_mut() {
                    map.remove(serde_yaml::Value::String("overrides".into()));
                }
                let with_sets = Source::new(&source.origin, yaml::to_string(&doc));
                let raw: RawJobSpec = yaml::parse(&with_sets).map_err(blame)?;
                let mut checked = check(raw, &with_sets).map_err(blame)?;
                checked
                    .overrides
                    .0
                    .splice(0..0, spec.overrides.0.iter().cloned());
                check_overrides(&checked.overrides, &with_sets).map_err(blame)?;
                done.push((set_path(set), set.clone()));
                last = Some((checked, with_sets));
            }
            if let Some((checked, with_sets)) = last {
                spec = checked;
                source = Source {
                    written: Some(std::mem::take(&mut source.text)),
                    sets: done,
                    ..with_sets
                };
            }
        }
        secrets::remember(&secrets_of(&spec));
        Ok(Self { spec, source })
    }

    /// Checks the paths that must live on the shared storage mounted at `mount` (as the
    /// containers see it): `code_path`, and absolute `train_file` / `val_file`.
    pub fn check_on_shared(&self, mount: &str) -> Result<(), ConfigError> {
        let spec = &self.spec;
        let mut paths = Vec::new();
        if let Code::Path(p) = &spec.code {
            paths.push(("code_path", p));
        }
        for (key, file) in [
            ("train_file", &spec.train_file),
            ("val_file", &spec.val_file),
        ] {
            if let Some(DataFile::Path(p)) = file {
                paths.push((key, p));
            }
        }
        for (key, path) in paths {
            if path.under(mount).is_none() {
                return Err(self
                    .source
                    .error_at(
                        &yaml_path![key],
                        format!("{path} is not on the shared storage ({mount})"),
                    )
                    .with_hint(format!(
                        "a path under {mount} (e.g. {mount}/common/code/verl/<code_id>), or for data a name under common/datasets such as gsm8k"
                    )));
            }
        }
        Ok(())
    }
}

/// The secret values a JobSpec carries: secret-named env vars and metadata, overrides
/// whose last key segment is secret-named (`wandb.api_key: ...`), and what secret-named
/// keys hold inside an override's value, at any depth.
pub fn secrets_of(spec: &JobSpec) -> Secrets {
    let mut s = Secrets::new();
    s.add_vars(
        spec.env_vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    );
    s.add_vars(
        spec.metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    );
    for o in &spec.overrides.0 {
        for value in o.secret_values() {
            s.add(&value);
        }
    }
    s
}

fn set_error(source: &Source, message: &str) -> ConfigError {
    ConfigError {
        origin: source.origin.clone(),
        line: 0,
        column: 0,
        message: format!("--set: {message}"),
        hint: Some(
            "--set field=value (a JobSpec field), --set section.field=value (restart.max=2) or --set overrides.<hydra.key>=value".into(),
        ),
    }
}

/// The node a `--set` argument sets: `["restart", "max"]`, `["overrides", "trainer.x"]`.
fn set_path(set: &str) -> Vec<Seg> {
    let key = set.split_once('=').map_or(set, |(key, _)| key);
    match key.strip_prefix("overrides.") {
        Some(hydra_key) => vec![Seg::from("overrides"), Seg::from(hydra_key)],
        None => key.splitn(2, '.').map(Seg::from).collect(),
    }
}

/// `--set total_training_steps=5`, `--set overrides.trainer.logger=[console]`. An
/// override given again replaces the file's.
fn apply_set(value: &mut serde_yaml::Value, spec: &mut JobSpec, set: &str) -> Result<(), String> {
    let (key, raw) = set
        .split_once('=')
        .ok_or_else(|| format!("{set:?} is not key=value"))?;
    if let Some(hydra_key) = key.strip_prefix("overrides.") {
        if !valid_key(hydra_key) {
            return Err(format!(
                "{hydra_key:?} is not {KEY}",
                KEY = overrides::KEY_RULE
            ));
        }
        spec.overrides
            .0
            .retain(|o| bare_key(&o.key) != bare_key(hydra_key));
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
    // `restart.max=2`: a field of a section (the section is made when absent).
    let (head, field) = match key.split_once('.') {
        Some((head, field)) => (head, Some(field)),
        None => (key, None),
    };
    // One code source: setting one drops the others (`code.source` keeps `code`).
    if ["code_path", "code_id", "code"].contains(&head) {
        for other in ["code_path", "code_id", "code"] {
            if other != head || field.is_none() {
                map.remove(serde_yaml::Value::String(other.into()));
            }
        }
    }
    if key == "overrides" {
        return Err("set overrides one by one: --set overrides.<hydra.key>=value".into());
    }
    let head_key = serde_yaml::Value::String(head.to_string());
    let Some(field) = field else {
        map.insert(head_key, parsed);
        return Ok(());
    };
    let section = map.entry(head_key).or_insert(serde_yaml::Value::Null);
    if section.is_null() {
        *section = serde_yaml::Value::Mapping(Default::default());
    }
    let section = section
        .as_mapping_mut()
        .ok_or_else(|| format!("{head} is not a section with fields: --set {head}=value"))?;
    section.insert(serde_yaml::Value::String(field.to_string()), parsed);
    Ok(())
}

/// Ids become directory names and Ray submission ids: the rule of [`crate::ids`].
pub fn valid_id(id: &str) -> bool {
    crate::ids::is_valid_id(id)
}

/// The raw document, checked: one code source, a command only for custom, bounds.
fn check(mut raw: RawJobSpec, src: &Source) -> Result<JobSpec, ConfigError> {
    let code = check_code(
        raw.code_path.take(),
        raw.code_id.take(),
        raw.code.take(),
        src,
    )?;
    check_entrypoint(raw.workload, raw.entrypoint.as_deref(), src)?;
    check_bounds(&raw, src)?;
    check_env_vars(&raw.env_vars, src)?;
    check_overrides(&raw.overrides, src)?;
    check_model_from(&raw, src)?;
    let restart = restart::check(raw.restart.take(), src)?;
    Ok(JobSpec {
        workload: raw.workload,
        submission_id: raw.submission_id,
        code,
        model_id: raw.model_id,
        train_file: raw.train_file,
        val_file: raw.val_file,
        nnodes: raw.nnodes,
        n_gpus_per_node: raw.n_gpus_per_node,
        total_training_steps: raw.total_training_steps,
        save_freq: raw.save_freq,
        test_freq: raw.test_freq,
        overrides: raw.overrides,
        env_vars: raw.env_vars,
        metadata: raw.metadata,
        time_limit: raw.time_limit,
        entrypoint: raw.entrypoint,
        data_from: raw.data_from,
        model_from: raw.model_from,
        runtime_env: raw.runtime_env,
        restart,
    })
}

/// Exactly one of `code_path`, `code_id` and `code.source`; a PyPI source pins a release.
fn check_code(
    code_path: Option<ContainerPath>,
    code_id: Option<CodeRef>,
    code: Option<CodeSource>,
    src: &Source,
) -> Result<Code, ConfigError> {
    Ok(match (code_path, code_id, code) {
        (Some(p), None, None) => Code::Path(p),
        (None, Some(id), None) => Code::Snapshot(id),
        (None, None, Some(s)) => {
            if s.source.starts_with(crate::ids::PYPI_PREFIX)
                && let Err(why) = crate::ids::PinnedRelease::parse(&s.source)
            {
                return Err(src
                    .error_at(&yaml_path!["code", "source"], why)
                    .with_hint("a directory relative to the JobSpec, or pypi:<name>==<version> (e.g. pypi:verl==0.8.0)"));
            }
            Code::Source(s)
        }
        (None, None, None) => {
            return Err(src
                .error_at(&[], "missing code_path (or code_id, or code.source)")
                .with_hint("code_id: <id from `argus snapshot`>, or code_path: /mnt/shared/common/code/verl/<id>"));
        }
        (_, id, source) => {
            let at = if source.is_some() {
                "code"
            } else if id.is_some() {
                "code_id"
            } else {
                "code_path"
            };
            return Err(src
                .error_at(&yaml_path![at], "give one of code_path, code_id and code.source")
                .with_hint("code_path: /mnt/shared/common/code/verl/<id> | code_id: <id> | code: {source: ../verl}"));
        }
    })
}

/// An entrypoint for workload custom, and only for it: non-empty, without a NUL byte.
fn check_entrypoint(
    workload: Workload,
    entrypoint: Option<&str>,
    src: &Source,
) -> Result<(), ConfigError> {
    match (workload, entrypoint) {
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
        (Workload::Custom, Some(e)) if e.contains('\0') => {
            return Err(src.error_at(&yaml_path!["entrypoint"], "entrypoint contains a NUL byte"));
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
    Ok(())
}

/// Node, GPU and step counts within their bounds.
fn check_bounds(raw: &RawJobSpec, src: &Source) -> Result<(), ConfigError> {
    for (field, value, max) in [
        ("nnodes", raw.nnodes, MAX_NNODES),
        ("n_gpus_per_node", raw.n_gpus_per_node, MAX_GPUS_PER_NODE),
    ] {
        if let Some(n) = value
            && (n == 0 || n > max)
        {
            return Err(src
                .error_at(&yaml_path![field], format!("{field} is {n}"))
                .with_hint(format!("a whole number from 1 to {max}")));
        }
    }
    if let Some(n) = raw.total_training_steps
        && (n == 0 || n > MAX_STEPS)
    {
        return Err(src
            .error_at(
                &yaml_path!["total_training_steps"],
                format!("total_training_steps is {n}"),
            )
            .with_hint(format!("a whole number from 1 to {MAX_STEPS}")));
    }
    for (field, value) in [("save_freq", raw.save_freq), ("test_freq", raw.test_freq)] {
        if let Some(n) = value
            && (n < -1 || n == 0 || n > MAX_STEPS as i64)
        {
            return Err(src
                .error_at(&yaml_path![field], format!("{field} is {n}"))
                .with_hint(format!(
                    "a number of steps from 1 to {MAX_STEPS}, or -1 for never"
                )));
        }
    }
    Ok(())
}

/// `env_vars`: names a job may set, values without a NUL byte.
fn check_env_vars(
    env_vars: &BTreeMap<String, ScalarString>,
    src: &Source,
) -> Result<(), ConfigError> {
    check_job_env(src, &yaml_path!["env_vars"], env_vars.keys())?;
    for (key, value) in env_vars {
        if value.0.contains('\0') {
            return Err(src.error_at(
                &yaml_path!["env_vars", key.as_str()],
                "the value contains a NUL byte",
            ));
        }
    }
    Ok(())
}

/// `model_from` needs a `model_id` that is a hub name: the model's name in the shared HF
/// cache.
fn check_model_from(raw: &RawJobSpec, src: &Source) -> Result<(), ConfigError> {
    if raw.model_from.is_some() {
        match raw.model_id.as_deref() {
            None => {
                return Err(src
                    .error_at(
                        &yaml_path!["model_from"],
                        "model_from needs model_id: the name the model gets in the shared HF cache",
                    )
                    .with_hint("model_id: argus/tiny-qwen2 (ORG/NAME)"));
            }
            Some(id) if crate::hf::ModelSpec::parse(id).is_err() => {
                return Err(src
                    .error_at(&yaml_path!["model_id"], format!("with model_from, model_id {id:?} must be a hub name: the model goes into the shared HF cache under it"))
                    .with_hint("ORG/NAME, e.g. argus/tiny-qwen2"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Keys in Hydra's charset.
fn check_overrides(overrides: &Overrides, src: &Source) -> Result<(), ConfigError> {
    let at = |i: usize, key: &str| -> Vec<Seg> {
        let by_key = yaml_path!["overrides", key];
        if src.place(&by_key).is_some() {
            by_key.to_vec()
        } else {
            yaml_path!["overrides", i].to_vec()
        }
    };
    // A key given twice is Hydra's to apply (both, in order: the last value wins);
    // `submit::prepare` warns, naming both.
    for (i, o) in overrides.0.iter().enumerate() {
        if !valid_key(&o.key) {
            return Err(src
                .error_at(&at(i, &o.key), format!("invalid override key {:?}", o.key))
                .with_hint(overrides::KEY_RULE));
        }
    }
    Ok(())
}

/// A fresh submission id for `workload`, as argus makes them.
pub fn generated_submission_id(workload: Workload) -> SubmissionId {
    SubmissionId::generate(workload.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    /// (document, line, column, text the message must contain)
    const BAD: &[(&str, usize, usize, &str)] = &[
        (
            "workload: [ppo]\ncode_id: a\n",
            1,
            11,
            "workload: invalid type: sequence, expected one of ppo|grpo|sft|custom",
        ),
        (
            "workload: ppo\ncode_id: a\nenv_vars:\n  A: 1\n  A: 2\n",
            5,
            3,
            "env_vars.A: key \"A\" is given twice",
        ),
        (
            "workload: ppo\ncode_id: a\noverrides:\n  trainer.x: 1\n  trainer.x: 2\n",
            5,
            3,
            "overrides.trainer.x: key \"trainer.x\" is given twice",
        ),
        (
            "workload: ppo\ncode_id: a\noverrides: {'a=b': 1}\n",
            3,
            20,
            "invalid override key \"a=b\"",
        ),
        (
            "workload: ppo\ncode_id: a\noverrides: ['a b=1']\n",
            3,
            13,
            "invalid override key \"a b\"",
        ),
        (
            "workload: ppo\ncode_id: a\nsubmission_id: ../../x\n",
            3,
            16,
            "submission_id: invalid submission id \"../../x\"",
        ),
        (
            "workload: ppo\ncode_id: a\nsubmission_id: a/b\n",
            3,
            16,
            "'/' is not allowed",
        ),
        (
            "workload: ppo\ncode_id: a\nsubmission_id: \"a\\0b\"\n",
            3,
            16,
            "submission_id: contains a NUL byte",
        ),
        (
            "workload: ppo\ncode_id: a\nsubmission_id: \"ppо\"\n",
            3,
            16,
            "'о' is not allowed",
        ),
        (
            "workload: ppo\ncode_id: a\nsubmission_id: -rf\n",
            3,
            16,
            "starts with - or .",
        ),
        (
            "workload: ppo\ncode_id: ../x\n",
            2,
            10,
            "code_id: invalid code id \"../x\"",
        ),
        (
            "workload: ppo\ncode_path: /mnt/shared/../../etc\n",
            2,
            12,
            "code_path: invalid absolute path",
        ),
        (
            "workload: ppo\ncode_path: relative/x\n",
            2,
            12,
            "it is not absolute",
        ),
        (
            "workload: ppo\ncode_id: a\ntrain_file: ../../etc/passwd\n",
            3,
            13,
            "train_file: invalid data file (relative to common/datasets) \"../../etc/passwd\": .. would leave its directory",
        ),
        (
            "workload: ppo\ncode_id: a\nval_file: /data/../../etc/passwd\n",
            3,
            11,
            ".. would leave its directory",
        ),
        (
            "workload: ppo\ncode_id: a\ncode_path: /mnt/shared/x\n",
            2,
            10,
            "give one of code_path, code_id and code.source",
        ),
        (
            "workload: ppo\ncode_id: a\nnnodes: 100000\n",
            3,
            9,
            "nnodes is 100000",
        ),
        (
            "workload: ppo\ncode_id: a\nn_gpus_per_node: 0\n",
            3,
            18,
            "n_gpus_per_node is 0",
        ),
        (
            "workload: ppo\ncode_id: a\ntotal_training_steps: 0\n",
            3,
            23,
            "total_training_steps is 0",
        ),
        (
            "workload: ppo\ncode_id: a\nsave_freq: -5\n",
            3,
            12,
            "save_freq is -5",
        ),
        (
            "workload: ppo\ncode_id: a\ntime_limit: 1000d\n",
            3,
            13,
            "at most 365 days",
        ),
        (
            "workload: ppo\ncode_id: a\nenv_vars: {PYTHONPATH: /x}\n",
            3,
            24,
            "PYTHONPATH cannot be set here",
        ),
        (
            "workload: ppo\ncode_id: a\nenv_vars: {ARGUS_JOB_DIR: /x}\n",
            3,
            27,
            "ARGUS_* variables are argus's own",
        ),
        (
            "workload: ppo\ncode_id: a\nentrypoint: python3 x.py\n",
            3,
            13,
            "entrypoint is only for workload custom",
        ),
        (
            "workload: custom\ncode_id: a\nentrypoint: \"python3\\0x\"\n",
            3,
            13,
            "NUL",
        ),
    ];

    #[test]
    fn bad_jobspecs_get_one_located_error_each() {
        let long = format!(
            "workload: ppo\ncode_id: a\nsubmission_id: {}\n",
            "a".repeat(200)
        );
        let mut cases: Vec<(String, usize, usize, String)> = BAD
            .iter()
            .map(|(t, l, c, w)| (t.to_string(), *l, *c, w.to_string()))
            .collect();
        cases.push((long, 3, 16, "it is 200 characters long".into()));
        let mut wrong = Vec::new();
        for (text, line, column, want) in &cases {
            let err = load(text).unwrap_err();
            if !err.to_string().contains(want.as_str())
                || (err.line, err.column) != (*line, *column)
            {
                wrong.push(format!(
                    "{text:?}\n  want {line}:{column} {want:?}\n  got  {err}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn code_and_data_paths_must_be_on_the_shared_storage() {
        let j = load("workload: ppo\ncode_path: /etc\n").unwrap();
        let err = j.check_on_shared("/mnt/shared").unwrap_err();
        assert_eq!((err.line, err.column), (2, 12), "{err}");
        assert!(
            err.message
                .contains("/etc is not on the shared storage (/mnt/shared)"),
            "{err}"
        );
        let j = load("workload: ppo\ncode_id: a\ntrain_file: /mnt/sharedX/t.parquet\n").unwrap();
        assert!(j.check_on_shared("/mnt/shared").is_err());
        let j = load("workload: ppo\ncode_path: /mnt/shared/common/code/verl/a\ntrain_file: gsm8k\nval_file: /mnt/shared/common/datasets/gsm8k/test.parquet\n").unwrap();
        j.check_on_shared("/mnt/shared").unwrap();
        assert!(matches!(j.spec.code, Code::Path(_)));
        assert!(matches!(j.spec.train_file, Some(DataFile::Dataset(_))));
    }

    #[test]
    fn the_code_is_one_of_three_and_round_trips() {
        for (text, want) in [
            ("workload: ppo\ncode_id: verl/abc\n", "code_id: verl/abc"),
            (
                "workload: ppo\ncode_path: /mnt/shared/x\n",
                "code_path: /mnt/shared/x",
            ),
            (
                "workload: ppo\ncode: {source: ../verl}\n",
                "source: ../verl",
            ),
        ] {
            let j = load(text).unwrap();
            let record = yaml::to_string(&j.spec);
            assert!(record.contains(want), "{record}");
            let again = load(&record).unwrap();
            assert_eq!(again.spec.code, j.spec.code);
        }
    }

    #[test]
    fn a_set_override_replaces_the_files_and_secrets_are_remembered() {
        let src = Source::new(
            "j.yaml",
            "workload: ppo\ncode_id: abc\noverrides: {a.b: 1, wandb.api_key: sk-override-secret}\nenv_vars: {DB_PASS: db-pass-secret}\n",
        );
        let j = LoadedJobSpec::from_source(src, &["overrides.a.b=2".into()]).unwrap();
        let rendered: Vec<String> = j.spec.overrides.0.iter().map(ToString::to_string).collect();
        assert_eq!(rendered, ["wandb.api_key=sk-override-secret", "a.b=2"]);
        let s = secrets_of(&j.spec);
        let text = s.redact_str("x wandb.api_key=sk-override-secret DB_PASS=db-pass-secret");
        assert_eq!(text, "x wandb.api_key=<redacted> DB_PASS=<redacted>");
        let known = crate::secrets::redact_text("db-pass-secret sk-override-secret");
        assert_eq!(known, "<redacted> <redacted>");
    }
}
