//! The stages that put the job's inputs on the shared storage: `prepare` (the datasets
//! and model the JobSpec names) and `snapshot` (its code source), each pinned.
//!
//! Both stages converge: what is already there is checked and left alone, so running
//! them again costs little.

use std::path::{Path, PathBuf};

use super::model::{ModelPath, ModelPathError, check_model_path};
use super::pins::{CodePin, DatasetPin, ModelPin};
use super::{Ctx, Error};
use crate::config::jobspec::{Code, DataFile, JobSpec, Workload};
use crate::data::{self, Dataset, Prepare};
use crate::ids::CodeRef;

/// The datasets a JobSpec names (bare names under common/datasets/, or verl's defaults).
pub fn datasets_needed(spec: &JobSpec) -> Vec<Dataset> {
    let mut names: Vec<&str> = [&spec.train_file, &spec.val_file]
        .iter()
        .filter_map(|f| f.as_ref().map(DataFile::as_str))
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

/// The revision a model given as a path is pinned at (its commit is its content's hash).
pub const PATH_REVISION: &str = "(path: content hash)";

/// A model path (as the containers see it) on this host, when it is on the shared storage
/// and passes the one model path check ([`check_model_path`]).
pub fn model_dir_on_host(ctx: &Ctx<'_>, model: &str) -> Option<PathBuf> {
    model_dir_checked(ctx, model).ok().flatten()
}

fn model_dir_checked(ctx: &Ctx<'_>, model: &str) -> Result<Option<PathBuf>, ModelPathError> {
    Ok(
        match check_model_path(model, &ctx.mount.mount(), Some(ctx.host.root()))? {
            ModelPath::Shared(dir) => Some(dir),
            ModelPath::Elsewhere => None,
        },
    )
}

/// `prepare`: the datasets and the model, pinned.
pub async fn prepare(
    ctx: &Ctx<'_>,
    spec: &JobSpec,
    pinned_model: Option<&ModelPin>,
) -> Result<(Vec<DatasetPin>, Option<ModelPin>), Error> {
    let prepare = Prepare {
        client: data::hub_client(ctx.loaded),
        host: ctx.host.clone(),
        mount: ctx.mount.clone(),
    };
    let mut datasets = Vec::new();
    for dataset in datasets_needed(spec) {
        let from = spec.data_from.as_deref().map(Path::new);
        let report = data::prepare_dataset(&prepare, dataset, from, ctx.reporter).await?;
        datasets.push(DatasetPin {
            name: dataset.dir_name().to_string(),
            source: report.source.clone(),
            files: report.outputs.clone(),
        });
    }
    let mut model_pin = None;
    // A model given as a path is pinned by its content, when it is on the shared storage.
    // Refused here as `submit` would refuse it, before anything is submitted.
    let model_path = match spec.model_id.as_ref().filter(|m| m.starts_with('/')) {
        Some(path) => model_dir_checked(ctx, path)
            .map_err(|e| Error::Invalid(format!("model_id: {e}")))?
            .map(|dir| (path, dir)),
        None => None,
    };
    if let Some((path, dir)) = model_path {
        let (commit, files) = data::local_model::content_of(&dir)?;
        model_pin = Some(ModelPin {
            repo: path.clone(),
            revision: PATH_REVISION.into(),
            commit,
            files: files.iter().map(Into::into).collect(),
        });
    }
    if let Some(model) = spec.model_id.as_ref().filter(|m| !m.starts_with('/')) {
        // A replay fetches exactly the pinned commit.
        let pinned = pinned_model.map(|m| format!("{}@{}", m.repo, m.commit));
        let report = match &spec.model_from {
            Some(dir) => data::local_model::import(&prepare, model, Path::new(dir), ctx.reporter)?,
            None => {
                data::prepare_model(
                    &prepare,
                    pinned.as_deref().unwrap_or(model),
                    &[],
                    &[],
                    ctx.reporter,
                )
                .await?
            }
        };
        let (repo, revision) = data::split_revision(model);
        model_pin = Some(ModelPin {
            repo: repo.into(),
            revision: revision.into(),
            commit: report.commit.clone(),
            files: report.files.iter().map(Into::into).collect(),
        });
    }
    Ok((datasets, model_pin))
}

/// `snapshot`: the code source frozen (the job then names the snapshot), or the snapshot
/// the JobSpec names, pinned.
pub fn snapshot(ctx: &Ctx<'_>, job: &mut JobSpec) -> Result<CodePin, Error> {
    let code_root = ctx.host.code();
    let path = match &job.code {
        Code::Source(code) => {
            let options = crate::snapshot::SnapshotOptions {
                source: PathBuf::from(&code.source),
                name: code.name.to_string(),
                code_id: None,
                excludes: code.exclude.clone(),
                follow_links: false,
            };
            let snap = crate::snapshot::snapshot(&code_root, &options, ctx.reporter)?;
            let pin = CodePin {
                name: code.name.to_string(),
                code_id: snap.code_id.clone(),
                tree_hash: snap.tree_hash,
                source: Some(code.source.clone()),
            };
            job.code = Code::Snapshot(CodeRef {
                name: Some(code.name.clone()),
                id: snap.code_id.parse()?,
            });
            return Ok(pin);
        }
        Code::Snapshot(id) => crate::snapshot::find(&code_root, &id.to_string()).ok(),
        Code::Path(p) => p
            .under(&ctx.mount.mount())
            .map(|shared| shared.on_host(ctx.host.root())),
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
    Ok(CodePin {
        name,
        code_id: manifest
            .as_ref()
            .map(|m| m.code_id.clone())
            .unwrap_or_default(),
        tree_hash: manifest.map(|m| m.tree_hash).unwrap_or_default(),
        source: None,
    })
}
