//! The JobSpec's types. [`RawJobSpec`] is the YAML as written (strict, old field names);
//! [`JobSpec`] is what it means once checked: ids are ids, the code is a path, a snapshot
//! OR a source (never two, never none), data files cannot leave the shared storage.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::overrides::Overrides;
use super::restart::{RawRestart, Restart};
use super::values::{ScalarString, TimeLimit};
use crate::ids::{CodeName, CodeRef, ContainerPath, PythonName, SubmissionId, UnderRoot};
use crate::string_enum;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
string_enum!(Workload {
    Ppo = "ppo",
    Grpo = "grpo",
    Sft = "sft",
    Custom = "custom"
});

/// Where a job's code comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// `code_path`: the code as the containers see it (checked to be on the shared storage
    /// once the mount is known, see `LoadedJobSpec::check_on_shared`).
    Path(ContainerPath),
    /// `code_id`: a snapshot, `code_id` or `name/code_id`.
    Snapshot(CodeRef),
    /// `code.source`: `argus run` snapshots this directory first.
    Source(CodeSource),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSource {
    /// A directory, relative to the JobSpec file; or `pypi:<name>==<version>`, a release's
    /// sources from PyPI (its wheel, through this host's pip).
    pub source: String,
    /// The snapshot family under common/code/ (default verl).
    #[serde(default = "default_code_name")]
    pub name: CodeName,
    #[serde(default)]
    pub exclude: Vec<String>,
}

fn default_code_name() -> CodeName {
    CodeName::verl()
}

/// `train_file` / `val_file`: a name under `common/datasets/` (`gsm8k` means
/// `gsm8k/<split>.parquet`), or an absolute path that must be on the shared storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataFile {
    Dataset(UnderRoot),
    Path(ContainerPath),
}

impl DataFile {
    pub fn parse(text: &str) -> Result<Self, crate::ids::IdError> {
        if text.starts_with('/') {
            ContainerPath::parse_as("data file", text).map(DataFile::Path)
        } else {
            UnderRoot::parse_as("data file (relative to common/datasets)", text)
                .map(DataFile::Dataset)
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            DataFile::Dataset(d) => d.as_str(),
            DataFile::Path(p) => p.as_str(),
        }
    }
}

impl fmt::Display for DataFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DataFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DataFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::deserialize_checked(d, "a dataset name or an absolute path", DataFile::parse)
    }
}

/// The JobSpec as written. Unknown keys are errors.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJobSpec {
    pub workload: Workload,
    pub submission_id: Option<SubmissionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_path: Option<ContainerPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_id: Option<CodeRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeSource>,
    pub model_id: Option<String>,
    pub train_file: Option<DataFile>,
    pub val_file: Option<DataFile>,
    pub nnodes: Option<u32>,
    pub n_gpus_per_node: Option<u32>,
    pub total_training_steps: Option<u64>,
    pub save_freq: Option<i64>,
    pub test_freq: Option<i64>,
    #[serde(default)]
    pub overrides: Overrides,
    #[serde(default)]
    pub env_vars: BTreeMap<String, ScalarString>,
    #[serde(default)]
    pub metadata: BTreeMap<String, ScalarString>,
    pub time_limit: Option<TimeLimit>,
    pub entrypoint: Option<String>,
    pub data_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_from: Option<String>,
    #[serde(default, skip_serializing_if = "JobRuntimeEnv::is_empty")]
    pub runtime_env: JobRuntimeEnv,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RawRestart>,
}

/// Ray `runtime_env` fields a JobSpec may set besides its `env_vars`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRuntimeEnv {
    /// `module.function` Ray runs in every worker process before anything else (over the
    /// profile's `submit.runtime_env.worker_process_setup_hook`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_process_setup_hook: Option<PythonName>,
}

impl JobRuntimeEnv {
    pub fn is_empty(&self) -> bool {
        self.worker_process_setup_hook.is_none()
    }
}

/// One training run, checked.
#[derive(Debug, Clone, Serialize)]
#[serde(into = "RawJobSpec")]
pub struct JobSpec {
    pub workload: Workload,
    pub submission_id: Option<SubmissionId>,
    pub code: Code,
    /// A model in the shared HF cache (resolved to its snapshot dir), or a path.
    pub model_id: Option<String>,
    /// Relative names resolve under common/datasets/ (`gsm8k` -> gsm8k/train.parquet).
    pub train_file: Option<DataFile>,
    pub val_file: Option<DataFile>,
    pub nnodes: Option<u32>,
    pub n_gpus_per_node: Option<u32>,
    pub total_training_steps: Option<u64>,
    pub save_freq: Option<i64>,
    pub test_freq: Option<i64>,
    /// Extra Hydra overrides: a map (`trainer.logger: [console]`) or a list of `key=value`.
    pub overrides: Overrides,
    pub env_vars: BTreeMap<String, ScalarString>,
    pub metadata: BTreeMap<String, ScalarString>,
    /// `wait` and `logs --follow` stop the job once it has run this long (`2h`, `90m`).
    pub time_limit: Option<TimeLimit>,
    /// The command of a `custom` workload.
    pub entrypoint: Option<String>,
    /// `argus run`: prepare the datasets from this raw copy (the hub repo's layout)
    /// instead of the hub. Relative to the JobSpec file.
    pub data_from: Option<String>,
    /// `argus run`: put the model `model_id` names into the shared HF cache from this
    /// local directory (a model's files: config.json, weights, tokenizer) instead of the
    /// hub. Relative to the JobSpec file.
    pub model_from: Option<String>,
    pub runtime_env: JobRuntimeEnv,
    /// argus's supervision of the run (`argus run`, `argus slurm submit`): not part of
    /// what the job runs, so neither of the run key nor of Ray's payload. Off when None.
    pub restart: Option<Restart>,
}

impl From<JobSpec> for RawJobSpec {
    fn from(j: JobSpec) -> Self {
        let (code_path, code_id, code) = match j.code {
            Code::Path(p) => (Some(p), None, None),
            Code::Snapshot(r) => (None, Some(r), None),
            Code::Source(s) => (None, None, Some(s)),
        };
        RawJobSpec {
            workload: j.workload,
            submission_id: j.submission_id,
            code_path,
            code_id,
            code,
            model_id: j.model_id,
            train_file: j.train_file,
            val_file: j.val_file,
            nnodes: j.nnodes,
            n_gpus_per_node: j.n_gpus_per_node,
            total_training_steps: j.total_training_steps,
            save_freq: j.save_freq,
            test_freq: j.test_freq,
            overrides: j.overrides,
            env_vars: j.env_vars,
            metadata: j.metadata,
            time_limit: j.time_limit,
            entrypoint: j.entrypoint,
            data_from: j.data_from,
            model_from: j.model_from,
            runtime_env: j.runtime_env,
            restart: j.restart.map(RawRestart::from),
        }
    }
}
