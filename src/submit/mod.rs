//! Job submission: a JobSpec resolved against a target cluster (profile or RayConfig),
//! turned into a Ray Jobs payload, submitted, watched, and recorded under `jobs/<id>/`.

pub mod entrypoint;
pub mod hydra;
pub mod ray;
pub mod records;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cluster::ray::RayClient;
use crate::config::jobspec::{LoadedJobSpec, Workload};
use crate::config::ray_config::RayConfig;
use crate::config::secrets::redact_json;
use crate::config::{Layout, LoadedProfile};
use crate::exit::{Classify, Exit};
use entrypoint::EntrypointInputs;
use hydra::ConfigKeys;
use ray::{JobsApi, JobsError};
use records::{JobRecord, Records};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Jobs(#[from] JobsError),
    #[error("submission id {id} is already used: argus has a record of it at {}", path.display())]
    DuplicateRecord { id: String, path: PathBuf },
    #[error("override `{key}` is not a key of verl's config (checked against {origin}){}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownOverride {
        key: String,
        origin: String,
        suggestion: Option<String>,
    },
    #[error("no snapshot {code_id} under {}", root.display())]
    CodeNotFound { code_id: String, root: PathBuf },
    #[error("no job {0}: neither the cluster nor argus's records know it")]
    UnknownJob(String),
    #[error("invalid submission id {0:?}")]
    BadId(String),
    #[error("cannot write the job records at {}", path.display())]
    Records {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("code.source is snapshotted by `argus run`; `argus submit` needs code_id or code_path")]
    NeedsRun,
    #[error("job {id} is still {status} after waiting {seconds}s")]
    WaitTimeout {
        id: String,
        status: String,
        seconds: u64,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Jobs(JobsError::Ray(e)) => e.exit(),
            Error::Jobs(JobsError::Duplicate(_) | JobsError::NotFound(_)) => Exit::Usage,
            Error::DuplicateRecord { .. }
            | Error::UnknownOverride { .. }
            | Error::CodeNotFound { .. }
            | Error::UnknownJob(_)
            | Error::BadId(_)
            | Error::NeedsRun => Exit::Usage,
            Error::Records { .. } | Error::WaitTimeout { .. } => Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Jobs(JobsError::Ray(e)) => e.hint(),
            Error::Jobs(JobsError::Duplicate(_)) | Error::DuplicateRecord { .. } => {
                Some("choose another submission_id, or leave it out to get a fresh one".into())
            }
            Error::UnknownOverride { .. } => {
                Some("prefix a new key with + (+my.key=1), or pass --no-check".into())
            }
            Error::CodeNotFound { .. } => Some(
                "`argus snapshot list` shows the snapshots; `argus snapshot SRC` makes one".into(),
            ),
            Error::UnknownJob(_) => Some("`argus job list` shows the jobs".into()),
            _ => None,
        }
    }
}

/// Where jobs go and how: the cluster's Jobs API and the shared storage seen from both sides.
#[derive(Debug, Clone)]
pub struct Target {
    pub ray: RayClient,
    pub cluster: String,
    /// The shared storage inside the containers.
    pub mount: String,
    /// The same storage on this host (records, snapshot and model resolution).
    pub host_shared: Option<PathBuf>,
    pub user_code_path: Option<String>,
    pub env_vars: BTreeMap<String, String>,
    pub entrypoint_num_cpus: Option<f64>,
    pub entrypoint_num_gpus: Option<f64>,
    pub entrypoint_resources: BTreeMap<String, f64>,
    /// The configuration as used, secrets redacted: (file name, YAML).
    pub config_record: (String, String),
}

fn default_resources(given: Option<&BTreeMap<String, f64>>) -> BTreeMap<String, f64> {
    given
        .cloned()
        .unwrap_or_else(|| BTreeMap::from([("worker_node".to_string(), 1.0)]))
}

fn redacted_yaml<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_value(value).unwrap_or_default();
    crate::config::yaml::to_string(&redact_json(json))
}

impl Target {
    pub fn from_profile(loaded: &LoadedProfile, ray: RayClient) -> Self {
        let p = &loaded.profile;
        let submit = &p.submit;
        let mount = submit
            .shared_root
            .clone()
            .unwrap_or_else(|| p.shared.mount.clone());
        Target {
            ray,
            cluster: p.name.clone(),
            mount,
            host_shared: loaded.shared_host_path.clone(),
            user_code_path: submit.user_code_path.clone(),
            env_vars: submit.runtime_env.env_vars.clone(),
            entrypoint_num_cpus: submit.entrypoint_num_cpus,
            entrypoint_num_gpus: submit.entrypoint_num_gpus,
            entrypoint_resources: default_resources(submit.entrypoint_resources.as_ref()),
            config_record: ("profile.yaml".into(), redacted_yaml(p)),
        }
    }

    pub fn from_ray_config(config: &RayConfig, token: Option<String>) -> Self {
        Target {
            ray: RayClient::new(&config.address, token),
            cluster: config.address.clone(),
            mount: config.shared_root.clone(),
            host_shared: Some(PathBuf::from(&config.shared_root)),
            user_code_path: config.user_code_path.clone(),
            env_vars: config.runtime_env.env_vars.clone(),
            entrypoint_num_cpus: config.entrypoint_num_cpus,
            entrypoint_num_gpus: config.entrypoint_num_gpus,
            entrypoint_resources: default_resources(config.entrypoint_resources.as_ref()),
            config_record: ("ray_config.yaml".into(), redacted_yaml(config)),
        }
    }

    pub fn records(&self) -> Option<Records> {
        self.host_shared
            .as_ref()
            .map(|root| Records::new(Layout::new(root).jobs()))
    }

    /// A path inside the containers, as seen from this host (when it is on the shared storage).
    pub fn host_path_of(&self, container_path: &str) -> Option<PathBuf> {
        let rest = container_path.strip_prefix(&self.mount)?;
        Some(
            self.host_shared
                .as_ref()?
                .join(rest.trim_start_matches('/')),
        )
    }
}

/// A job ready to submit: everything decided, nothing written.
#[derive(Debug, Clone, Serialize)]
pub struct Prepared {
    pub submission_id: String,
    pub workload: Workload,
    pub code_id: Option<String>,
    pub code_path: String,
    pub entrypoint: String,
    pub payload: serde_json::Value,
    pub checked_overrides_against: Option<String>,
    pub notes: Vec<String>,
    #[serde(skip)]
    pub time_limit_s: Option<u64>,
    #[serde(skip)]
    pub jobspec_record: String,
    /// The job this one continues (`--resume`); recorded in its job.json.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes: Option<String>,
}

/// `<prefix>-<yyyymmdd-hhmmss>-<4 hex>` (prefix: the workload, or `run`): readable, sortable, unique enough.
pub fn generate_id(prefix: &str) -> String {
    let now = std::time::SystemTime::now();
    let stamp = humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let random = (nanos ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{}-{stamp}-{random:04x}", prefix)
}

/// Resolves the JobSpec against the target and builds the payload. Reads the shared
/// storage (snapshots, HF cache) but writes nothing.
pub fn prepare(target: &Target, loaded: &LoadedJobSpec, check: bool) -> Result<Prepared, Error> {
    let spec = &loaded.spec;
    let submission_id = spec
        .submission_id
        .clone()
        .unwrap_or_else(|| generate_id(spec.workload.as_str()));
    if !crate::config::jobspec::valid_id(&submission_id) {
        return Err(Error::BadId(submission_id));
    }
    let mut notes = Vec::new();
    let layout = Layout::new(&target.mount);

    let (code_path, code_id) = match (&spec.code_path, &spec.code_id) {
        (None, None) if spec.code.is_some() => return Err(Error::NeedsRun),
        (Some(path), _) => (
            path.clone(),
            Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
        ),
        (None, Some(id)) => {
            let (name, code_id) = id.split_once('/').unwrap_or(("verl", id));
            let path = format!("{}/{name}/{code_id}", layout.code().display());
            if let Some(host) = &target.host_shared {
                let code_root = Layout::new(host).code();
                let found =
                    crate::snapshot::find(&code_root, id).map_err(|_| Error::CodeNotFound {
                        code_id: id.clone(),
                        root: code_root.clone(),
                    })?;
                let found_name = found
                    .parent()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (
                    format!("{}/{found_name}/{code_id}", layout.code().display()),
                    Some(code_id.to_string()),
                )
            } else {
                (path, Some(code_id.to_string()))
            }
        }
        (None, None) => unreachable!("validated: code_path or code_id"),
    };

    let model_path = spec
        .model_id
        .as_ref()
        .map(|m| resolve_model(target, m, &mut notes));
    let verl = spec.workload != Workload::Custom;
    let dataset = if spec.workload == Workload::Sft {
        "gsm8k_sft"
    } else {
        "gsm8k"
    };
    let resolve_data = |value: &Option<String>, split: &str| -> Option<String> {
        let datasets = layout.datasets();
        match value {
            Some(v) if v.starts_with('/') => Some(v.clone()),
            Some(v) if !v.contains('/') && !v.contains('.') => {
                Some(format!("{}/{v}/{split}.parquet", datasets.display()))
            }
            Some(v) => Some(format!("{}/{v}", datasets.display())),
            None if verl => Some(format!("{}/{dataset}/{split}.parquet", datasets.display())),
            None => None,
        }
    };
    let train_file = resolve_data(&spec.train_file, "train");
    let val_file = resolve_data(&spec.val_file, "test");

    let inputs = EntrypointInputs {
        workload: spec.workload,
        model_path,
        train_file,
        val_file,
        nnodes: spec.nnodes,
        n_gpus_per_node: spec.n_gpus_per_node,
        total_training_steps: spec.total_training_steps,
        save_freq: spec.save_freq,
        test_freq: spec.test_freq,
        checkpoint_dir: format!("{}/{submission_id}/checkpoints", layout.jobs().display()),
        user_overrides: spec.overrides.0.clone(),
        custom: spec.entrypoint.clone(),
    };
    let entrypoint = entrypoint::build(&inputs);

    let mut checked_overrides_against = None;
    if verl && check {
        if let Some(keys) = target
            .host_path_of(&code_path)
            .and_then(|host| ConfigKeys::for_entrypoint(&host, spec.workload == Workload::Sft))
        {
            for o in &spec.overrides.0 {
                if let Err(suggestion) = keys.check(&o.key) {
                    return Err(Error::UnknownOverride {
                        key: o.key.clone(),
                        origin: keys.origin.clone(),
                        suggestion,
                    });
                }
            }
            checked_overrides_against = Some(keys.origin);
        } else if !spec.overrides.0.is_empty() {
            notes.push(format!(
                "overrides not checked: no verl configs under {code_path}/verl/trainer/config"
            ));
        }
    }

    let mut env_vars = target.env_vars.clone();
    // What argus resolved, for any workload's own use (a custom script reads its data here).
    let resolved = [
        ("ARGUS_CODE_PATH", Some(code_path.clone())),
        ("ARGUS_TRAIN_FILE", inputs.train_file.clone()),
        ("ARGUS_VAL_FILE", inputs.val_file.clone()),
        ("ARGUS_MODEL_PATH", inputs.model_path.clone()),
        (
            "ARGUS_JOB_DIR",
            Some(format!("{}/{submission_id}", layout.jobs().display())),
        ),
    ];
    env_vars.extend(
        resolved
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v))),
    );
    env_vars.extend(spec.env_vars.iter().map(|(k, v)| (k.clone(), v.0.clone())));
    let mut python_path = vec![code_path.clone()];
    python_path.extend(target.user_code_path.clone());
    python_path.push("${PYTHONPATH}".to_string());
    env_vars.insert("PYTHONPATH".to_string(), python_path.join(":"));

    let mut metadata: BTreeMap<String, String> = spec
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    metadata.insert("workload".into(), spec.workload.as_str().into());
    metadata.insert("code_path".into(), code_path.clone());
    if let Some(id) = &code_id {
        metadata.insert("code_id".into(), id.clone());
    }
    metadata.insert("submitted_by".into(), ray_user_agent());

    let mut payload = serde_json::json!({
        "entrypoint": entrypoint,
        "submission_id": submission_id,
        "runtime_env": {"env_vars": env_vars},
        "metadata": metadata,
        "entrypoint_resources": target.entrypoint_resources,
    });
    if let Some(cpus) = target.entrypoint_num_cpus {
        payload["entrypoint_num_cpus"] = serde_json::json!(cpus);
    }
    if let Some(gpus) = target.entrypoint_num_gpus {
        payload["entrypoint_num_gpus"] = serde_json::json!(gpus);
    }
    Ok(Prepared {
        submission_id,
        workload: spec.workload,
        code_id,
        code_path,
        entrypoint,
        payload,
        checked_overrides_against,
        notes,
        time_limit_s: spec.time_limit.map(|t| t.0.as_secs()),
        jobspec_record: redacted_yaml(spec),
        resumes: None,
    })
}

fn ray_user_agent() -> String {
    crate::cluster::ray::USER_AGENT.to_string()
}

/// A model id present in the shared HF cache becomes its snapshot directory (as the
/// containers see it); a path stays a path; anything else is left for verl to download.
fn resolve_model(target: &Target, model: &str, notes: &mut Vec<String>) -> String {
    if model.starts_with('/') {
        return model.to_string();
    }
    let (repo, revision) = model.split_once('@').unwrap_or((model, "main"));
    let folder = format!("models--{}", repo.replace('/', "--"));
    let container_hub = Layout::new(&target.mount).hf_home().join("hub");
    if let Some(host) = &target.host_shared {
        let cache = Layout::new(host).hf_home().join("hub").join(&folder);
        let commit = std::fs::read_to_string(cache.join("refs").join(revision))
            .ok()
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| revision.to_string());
        if cache.join("snapshots").join(&commit).is_dir() {
            return format!("{}/{folder}/snapshots/{commit}", container_hub.display());
        }
    }
    notes.push(format!("model {model} is not in the shared HF cache: verl will fetch it through HF_ENDPOINT (`argus prepare --model {model}` caches it)"));
    repo.to_string()
}

#[derive(Debug, Clone, Serialize)]
pub struct SubmitReport {
    pub submission_id: String,
    pub record_dir: Option<PathBuf>,
    pub dashboard: String,
    pub entrypoint: String,
}

/// Submits a prepared job: checks the id is free, stages the records, POSTs, publishes.
pub async fn submit(target: &Target, prepared: &Prepared) -> Result<SubmitReport, Error> {
    let api = JobsApi { ray: &target.ray };
    let id = &prepared.submission_id;
    let records = target.records();
    if let Some(records) = &records
        && records.exists(id)
    {
        return Err(Error::DuplicateRecord {
            id: id.clone(),
            path: records.dir(id),
        });
    }
    if api.exists(id).await? {
        return Err(JobsError::Duplicate(id.clone()).into());
    }
    let staged = match &records {
        Some(records) => {
            let staged = records.stage(id).map_err(|source| Error::Records {
                path: records.dir(id),
                source,
            })?;
            let nodes = target
                .ray
                .get_text("/api/v0/nodes?limit=10000&detail=true")
                .await
                .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
            let write = |rel: &str, bytes: &[u8]| {
                std::fs::write(staged.dir.join(rel), bytes).map_err(|source| Error::Records {
                    path: staged.dir.join(rel),
                    source,
                })
            };
            let result = write(
                &format!("config/{}", target.config_record.0),
                target.config_record.1.as_bytes(),
            )
            .and_then(|()| write("config/jobspec.yaml", prepared.jobspec_record.as_bytes()))
            .and_then(|()| {
                write(
                    "config/submit_payload.json",
                    &serde_json::to_vec_pretty(&redact_json(prepared.payload.clone()))
                        .unwrap_or_default(),
                )
            })
            .and_then(|()| write("debug/nodes_before.json", nodes.as_bytes()));
            if let Err(e) = result {
                records.discard(staged);
                return Err(e);
            }
            Some(staged)
        }
        None => None,
    };
    if let Err(e) = api.submit(&prepared.payload).await {
        if let (Some(records), Some(staged)) = (&records, staged) {
            records.discard(staged);
        }
        return Err(e.into());
    }
    let mut record_dir = None;
    if let (Some(records), Some(staged)) = (&records, staged) {
        let dir = records.publish(staged).map_err(|source| Error::Records {
            path: records.dir(id),
            source,
        })?;
        let record = JobRecord {
            submission_id: id.clone(),
            workload: prepared.workload.as_str().into(),
            code_id: prepared.code_id.clone(),
            code_path: prepared.code_path.clone(),
            entrypoint: prepared.entrypoint.clone(),
            cluster: target.cluster.clone(),
            dashboard: target.ray.base_url().to_string(),
            submitted_at: humantime::format_rfc3339_millis(std::time::SystemTime::now())
                .to_string(),
            status: "PENDING".into(),
            time_limit_s: prepared.time_limit_s,
            resumes: prepared.resumes.clone(),
            ..Default::default()
        };
        records.write(&record).map_err(|source| Error::Records {
            path: dir.clone(),
            source,
        })?;
        let out = format!(
            "submitted {id} at {}\ncluster: {} ({})\nentrypoint: {}\n",
            record.submitted_at,
            target.cluster,
            target.ray.base_url(),
            prepared.entrypoint
        );
        let _ = std::fs::write(dir.join("logs/submit.out"), out);
        if let Ok(jobs) = api.list_raw().await {
            // Ray echoes every job's runtime_env (secrets included): redact before writing.
            let _ = std::fs::write(
                dir.join("debug/jobs_after.json"),
                serde_json::to_vec_pretty(&redact_json(jobs)).unwrap_or_default(),
            );
        }
        record_dir = Some(dir);
    }
    Ok(SubmitReport {
        submission_id: id.clone(),
        record_dir,
        dashboard: target.ray.base_url().to_string(),
        entrypoint: prepared.entrypoint.clone(),
    })
}
