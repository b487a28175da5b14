//! `argus run`: from nothing to a finished job, recorded so it can be replayed.
//!
//! Stages: up -> prepare (the JobSpec's datasets and model) -> snapshot (its code source)
//! -> submit -> wait (following the logs) -> collect -> down (when asked). Every stage is
//! a converging step, so a run stopped anywhere is finished by running it again. The
//! record is `runs/<run_id>/`: `run.lock.yaml` (what was used, pinned) and `report.json`
//! (stage timings, the job's end, where its logs and checkpoints are); `report.json` is
//! rewritten as each stage starts, so it also tells where a run is.

pub mod lock;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cluster::image;
use crate::cluster::reconcile::{self, UpOptions};
use crate::config::jobspec::{LoadedJobSpec, Workload};
use crate::config::secrets::{REDACTED, redact_json};
use crate::config::yaml::Source;
use crate::config::{Layout, LoadedProfile};
use crate::data::{self, Dataset, Prepare};
use crate::exit::{Classify, Exit};
use crate::submit::records::write_atomic;
use crate::submit::watch::{self, WaitOptions};
use crate::submit::{self, Target};
use crate::ui::Reporter;
use lock::{CodePin, DatasetPin, ImagePin, ModelPin, Observed, RunLock};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the run's inputs drifted from {lock}:\n  {}", drift.join("\n  "))]
    Drift { lock: String, drift: Vec<String> },
    #[error("invalid run lock: {0}")]
    BadLock(String),
    #[error("the lock redacted {0}; set it in the environment to replay")]
    MissingSecret(String),
    #[error("cannot write the run record at {}", path.display())]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Drift { .. } | Error::Record { .. } => Exit::Failed,
            Error::BadLock(_) | Error::MissingSecret(_) => Exit::Usage,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Drift { .. } => Some("restore the pinned inputs, or pass --allow-drift to run anyway (the drift is recorded)".into()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageTiming {
    pub stage: String,
    pub seconds: f64,
    pub note: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    pub run_id: String,
    /// The stage under way, or `done`.
    pub stage: String,
    pub stages: Vec<StageTiming>,
    pub submission_id: Option<String>,
    pub job_status: Option<String>,
    pub job_message: Option<String>,
    pub driver_log: Option<String>,
    pub checkpoints: Option<String>,
    pub lock: Option<String>,
    pub replay_of: Option<String>,
    #[serde(default)]
    pub drift: Vec<String>,
    pub seconds: f64,
}

pub struct RunOptions {
    pub down_after: bool,
    /// Replay: the lock to check against, and whether drift is tolerated.
    pub lock: Option<(PathBuf, RunLock)>,
    pub allow_drift: bool,
    /// Stream the driver's log while waiting.
    pub follow: bool,
    /// The job this run's job continues from its checkpoints (`run --resume`).
    pub resumes: Option<String>,
}

/// `run-<yyyymmdd-hhmmss>-<hex>`.
pub fn new_run_id() -> String {
    submit::generate_id("run")
}

/// The JobSpec and profile a replay uses: the lock's own, secrets back from the environment.
pub fn from_lock(
    lock: &RunLock,
    profile: Option<&LoadedProfile>,
) -> Result<(LoadedJobSpec, LoadedProfile), anyhow::Error> {
    let mut jobspec = lock.jobspec.clone();
    if let Some(env) = jobspec.get_mut("env_vars").and_then(|e| e.as_mapping_mut()) {
        for (key, value) in env.iter_mut() {
            if value.as_str() == Some(REDACTED) {
                let name = key.as_str().unwrap_or_default().to_string();
                *value = serde_yaml::Value::String(
                    std::env::var(&name).map_err(|_| Error::MissingSecret(name))?,
                );
            }
        }
    }
    let spec = LoadedJobSpec::from_source(
        Source::new(
            "<run lock: jobspec>",
            crate::config::yaml::to_string(&jobspec),
        ),
        &[],
    )?;
    let profile = match profile {
        Some(p) => p.clone(),
        None => LoadedProfile::from_source(Source::new(
            "<run lock: profile>",
            crate::config::yaml::to_string(&lock.profile),
        ))?,
    };
    Ok((spec, profile))
}

struct Recorder {
    dir: PathBuf,
    report: RunReport,
    started: Instant,
    stage_started: Instant,
}

impl Recorder {
    fn save(&self) -> Result<(), Error> {
        let path = self.dir.join("report.json");
        write_atomic(
            &path,
            &serde_json::to_vec_pretty(&self.report).unwrap_or_default(),
        )
        .map_err(|source| Error::Record { path, source })
    }

    fn begin(&mut self, stage: &str) -> Result<(), Error> {
        self.report.stage = stage.to_string();
        self.stage_started = Instant::now();
        self.report.seconds = self.started.elapsed().as_secs_f64();
        self.save()
    }

    fn end(&mut self, note: impl Into<String>) -> Result<(), Error> {
        let stage = self.report.stage.clone();
        self.report.stages.push(StageTiming {
            stage,
            seconds: self.stage_started.elapsed().as_secs_f64(),
            note: note.into(),
        });
        self.report.seconds = self.started.elapsed().as_secs_f64();
        self.save()
    }
}

/// The datasets a JobSpec names (bare names under common/datasets/, or verl's defaults).
fn datasets_needed(spec: &crate::config::jobspec::JobSpec) -> Vec<Dataset> {
    let mut names: Vec<&str> = [&spec.train_file, &spec.val_file]
        .iter()
        .filter_map(|f| f.as_deref())
        .filter(|f| !f.contains('/') && !f.contains('.'))
        .collect();
    if spec.train_file.is_none() && spec.workload != Workload::Custom {
        names.push(if spec.workload == Workload::Sft {
            "gsm8k_sft"
        } else {
            "gsm8k"
        });
    }
    let mut out: Vec<Dataset> = names
        .into_iter()
        .filter_map(|n| Dataset::parse(n).ok())
        .collect();
    out.dedup();
    out
}

fn yaml_value<T: Serialize>(value: &T) -> serde_yaml::Value {
    let json = redact_json(serde_json::to_value(value).unwrap_or_default());
    serde_yaml::to_value(json).unwrap_or(serde_yaml::Value::Null)
}

/// Runs the whole pipeline; returns the report (the job's status decides the exit code).
pub async fn run(
    loaded: &LoadedProfile,
    mut job: LoadedJobSpec,
    options: &RunOptions,
    reporter: &dyn Reporter,
    mut on_log: impl FnMut(&str) + Send,
) -> anyhow::Result<RunReport> {
    let host_layout = loaded.host_layout()?;
    let host = host_layout.root().to_path_buf();
    let mount = Layout::new(&loaded.profile.shared.mount);
    job.absolutize();
    let run_id = new_run_id();
    let dir = host_layout.runs().join(&run_id);
    std::fs::create_dir_all(&dir).map_err(|source| Error::Record {
        path: dir.clone(),
        source,
    })?;
    let mut rec = Recorder {
        dir: dir.clone(),
        report: RunReport {
            run_id: run_id.clone(),
            replay_of: options.lock.as_ref().map(|(p, _)| p.display().to_string()),
            ..Default::default()
        },
        started: Instant::now(),
        stage_started: Instant::now(),
    };
    let mut observed = Observed::default();

    // up: the image (built here when absent and it is argus's own), then the cluster.
    rec.begin("up")?;
    let docker_host = loaded.profile.docker.host.as_deref();
    image::ensure_built(docker_host, &loaded.profile.image, reporter).await?;
    let timeout = Duration::from_secs(loaded.profile.ray.ready_timeout_s);
    let up = reconcile::up(
        loaded,
        &UpOptions {
            dry_run: false,
            timeout,
        },
        reporter,
    )
    .await?;
    let ray = reconcile::ray_client(loaded)?.with_connect_retries(2);
    let ray_version = ray.ray_version().await.unwrap_or_else(|_| "unknown".into());
    observed.image_id = Some(up.image_id.clone());
    rec.end(format!(
        "{} nodes, {} GPUs, ray {ray_version}",
        up.nodes.len(),
        up.gpus
    ))?;

    // Drift that the next stages would repair has to be seen before they run.
    let spec = job.spec.clone();
    let datasets = datasets_needed(&spec);
    if let Some((_, lock)) = &options.lock {
        for pin in &lock.datasets {
            for file in &pin.files {
                let path = host_layout.datasets().join(&pin.name).join(&file.file);
                if path.exists() {
                    let sha = crate::snapshot::hash::file_sha256(&path).ok();
                    observed
                        .dataset_files
                        .push((pin.name.clone(), file.file.clone(), sha));
                }
            }
        }
        if let Some(model) = &lock.model {
            observed.model_commit = data::hf_cache::HubCache::new(
                host_layout.hf_home().join("hub"),
            )
            .read_ref(data::hf::RepoKind::Model, &model.repo, &model.revision);
        }
        // The source as it is now, hashed without snapshotting it.
        if let Some(code) = &spec.code
            && lock.code.source.is_some()
        {
            observed.code_tree_hash = Some(crate::snapshot::tree_hash_of(
                Path::new(&code.source),
                &code.exclude,
                reporter,
            )?);
        }
    }

    // prepare: the datasets and model the JobSpec names.
    rec.begin("prepare")?;
    let prepare = Prepare {
        client: data::hub_client(loaded),
        host: host_layout.clone(),
        mount: mount.clone(),
    };
    let mut dataset_pins = Vec::new();
    for dataset in &datasets {
        let from = spec.data_from.as_deref().map(Path::new);
        let report = data::prepare_dataset(&prepare, *dataset, from, reporter).await?;
        dataset_pins.push(DatasetPin {
            name: dataset.dir_name().to_string(),
            source: report.source.clone(),
            files: report.outputs.clone(),
        });
    }
    let mut model_pin = None;
    if let Some(model) = spec.model_id.as_ref().filter(|m| !m.starts_with('/')) {
        // A replay fetches exactly the pinned commit.
        let pinned = options
            .lock
            .as_ref()
            .and_then(|(_, l)| l.model.as_ref())
            .map(|m| format!("{}@{}", m.repo, m.commit));
        let report = data::prepare_model(
            &prepare,
            pinned.as_deref().unwrap_or(model),
            &[],
            &[],
            reporter,
        )
        .await?;
        let (repo, revision) = data::split_revision(model);
        model_pin = Some(ModelPin {
            repo: repo.into(),
            revision: revision.into(),
            commit: report.commit.clone(),
            files: report.files.iter().map(Into::into).collect(),
        });
    }
    rec.end(format!(
        "{} datasets, {}",
        dataset_pins.len(),
        if model_pin.is_some() {
            "1 model"
        } else {
            "no model"
        }
    ))?;

    // snapshot: the code source (or the snapshot the JobSpec names).
    rec.begin("snapshot")?;
    let code_root = host_layout.code();
    let code_pin = match &spec.code {
        Some(code) => {
            let options = crate::snapshot::SnapshotOptions {
                source: PathBuf::from(&code.source),
                name: code.name.clone(),
                code_id: None,
                excludes: code.exclude.clone(),
                follow_links: false,
            };
            let snap = crate::snapshot::snapshot(&code_root, &options, reporter)?;
            job.spec.code = None;
            job.spec.code_id = Some(format!("{}/{}", code.name, snap.code_id));
            CodePin {
                name: code.name.clone(),
                code_id: snap.code_id,
                tree_hash: snap.tree_hash,
                source: Some(code.source.clone()),
            }
        }
        None => {
            let path = match (&spec.code_id, &spec.code_path) {
                (Some(id), _) => crate::snapshot::find(&code_root, id).ok(),
                (None, Some(p)) => p
                    .strip_prefix(&loaded.profile.shared.mount)
                    .map(|rest| host.join(rest.trim_start_matches('/'))),
                _ => None,
            };
            let manifest = path
                .as_deref()
                .and_then(|p| crate::snapshot::Manifest::read(p).ok());
            let name = path
                .as_ref()
                .and_then(|p| p.parent())
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            CodePin {
                name,
                code_id: manifest
                    .as_ref()
                    .map(|m| m.code_id.clone())
                    .unwrap_or_default(),
                tree_hash: manifest.map(|m| m.tree_hash).unwrap_or_default(),
                source: None,
            }
        }
    };
    if observed.code_tree_hash.is_none() && spec.code.is_none() && options.lock.is_some() {
        observed.code_tree_hash = Some(code_pin.tree_hash.clone());
    }
    rec.end(format!("{} {}", code_pin.name, code_pin.code_id))?;

    // Replay: everything is known now; refuse on drift before anything is submitted.
    if let Some((path, lock)) = &options.lock {
        for pin in &lock.datasets {
            for file in &pin.files {
                if !observed
                    .dataset_files
                    .iter()
                    .any(|(d, f, _)| d == &pin.name && f == &file.file)
                {
                    let sha = crate::snapshot::hash::file_sha256(
                        &host_layout.datasets().join(&pin.name).join(&file.file),
                    )
                    .ok();
                    observed
                        .dataset_files
                        .push((pin.name.clone(), file.file.clone(), sha));
                }
            }
        }
        if observed.model_commit.is_none() {
            observed.model_commit = model_pin.as_ref().map(|m| m.commit.clone());
        }
        let drift = lock::drift(lock, &observed);
        if !drift.is_empty() {
            rec.report.drift = drift.clone();
            rec.save()?;
            if !options.allow_drift {
                return Err(Error::Drift {
                    lock: path.display().to_string(),
                    drift,
                }
                .into());
            }
        }
    }

    // submit: one job per run, unless the JobSpec fixes an id that already exists (then
    // this run picks that job up).
    rec.begin("submit")?;
    if job.spec.submission_id.is_none() {
        job.spec.submission_id = Some(run_id.clone());
    }
    let target = Target::from_profile(loaded, ray.clone());
    let mut prepared = submit::prepare(&target, &job, true)?;
    prepared.resumes = options.resumes.clone();
    let id = prepared.submission_id.clone();
    let existing = target.records().is_some_and(|r| r.exists(&id));
    if existing {
        rec.end(format!("{id} (already submitted: following it)"))?;
    } else {
        submit::submit(&target, &prepared).await?;
        rec.end(id.clone())?;
    }
    rec.report.submission_id = Some(id.clone());

    // wait: follow the logs to the end (time_limit enforced).
    rec.begin("wait")?;
    let wait_options = WaitOptions {
        timeout: None,
        time_limit: spec.time_limit.map(|t| t.0),
        follow: options.follow,
    };
    let info = watch::wait(&target, &id, &wait_options, &mut on_log).await?;
    rec.end(info.status.clone())?;

    // collect: the lock and the report.
    rec.begin("collect")?;
    let job_dir = host_layout.jobs().join(&id);
    rec.report.job_status = Some(info.status.clone());
    rec.report.job_message = info.message.clone();
    rec.report.driver_log = Some(job_dir.join("logs/driver.log").display().to_string());
    rec.report.checkpoints = Some(job_dir.join("checkpoints").display().to_string());
    let digest = image::digest(docker_host, &loaded.profile.image).await?;
    let lock = RunLock {
        format: 1,
        run_id: run_id.clone(),
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        argus_version: env!("CARGO_PKG_VERSION").into(),
        image: ImagePin {
            reference: loaded.profile.image.clone(),
            id: up.image_id.clone(),
            digest,
        },
        ray_version,
        profile: yaml_value(&loaded.profile),
        jobspec: yaml_value(&{
            let mut s = spec.clone();
            s.submission_id = None;
            s
        }),
        code: code_pin,
        datasets: dataset_pins,
        model: model_pin,
        submission_id: id.clone(),
    };
    let lock_path = dir.join("run.lock.yaml");
    write_atomic(&lock_path, crate::config::yaml::to_string(&lock).as_bytes()).map_err(
        |source| Error::Record {
            path: lock_path.clone(),
            source,
        },
    )?;
    rec.report.lock = Some(lock_path.display().to_string());
    rec.end(lock_path.display().to_string())?;

    if options.down_after {
        rec.begin("down")?;
        reconcile::down(loaded, false, reporter).await?;
        rec.end("cluster removed; shared data kept")?;
    }
    rec.report.stage = "done".into();
    rec.report.seconds = rec.started.elapsed().as_secs_f64();
    rec.save()?;
    Ok(rec.report)
}
