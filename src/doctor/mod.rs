//! `argus doctor JOBSPEC`: what a job needs beyond the cluster, checked from this machine
//! before it is submitted: its model complete in the shared Hugging Face cache and its
//! datasets complete under `common/datasets/`, read exactly as `prepare` and `submit` read
//! them (`HubCache::cached_snapshot`, the snapshot's own links, the dataset manifest and
//! its outputs' digests). Nothing is fetched: the hub is not asked.
//!
//! The per-host checks of the cluster are `cluster::doctor`'s; this composes them with the
//! JobSpec's into one report.

use std::path::Path;

use crate::cluster::doctor::{Check, HostReport, Report, Status};
use crate::config::jobspec::{DataFile, LoadedJobSpec};
use crate::config::{Layout, LoadedProfile};
use crate::data::hf_cache::HubCache;
use crate::fsx::Kind;
use crate::hf::{Commit, ModelSpec, RepoKind, RepoPath};
use crate::inputs::ModelPath;
use crate::ui::Reporter;

pub use crate::cluster::doctor::CLUSTER;

/// The cluster's checks, and with a JobSpec its inputs' (under `cluster`).
pub async fn run(
    loaded: &LoadedProfile,
    job: Option<&LoadedJobSpec>,
    reporter: &dyn Reporter,
) -> Report {
    let mut report = crate::cluster::doctor::run(loaded, reporter).await;
    if let Some(job) = job {
        let checks = jobspec_checks(loaded, job);
        report.hosts.push(HostReport {
            host: CLUSTER.into(),
            checks,
        });
    }
    report
}

/// The checks of a Slurm run's nodes (each on its node, through srun), and with a JobSpec
/// its inputs'.
pub async fn slurm_run(
    loaded: &LoadedProfile,
    run_id: &str,
    job: Option<&LoadedJobSpec>,
    reporter: &dyn Reporter,
) -> Result<Report, crate::slurm::Error> {
    let mut report = crate::slurm::doctor::report(loaded, run_id, reporter).await?;
    if let Some(job) = job {
        report.hosts.push(HostReport {
            host: CLUSTER.into(),
            checks: jobspec_checks(loaded, job),
        });
    }
    Ok(report)
}

/// `model_cache` and `dataset_cache` of a JobSpec, on the shared storage as this machine
/// sees it.
pub fn jobspec_checks(loaded: &LoadedProfile, job: &LoadedJobSpec) -> Vec<Check> {
    let Ok(host) = loaded.host_layout() else {
        return vec![Check {
            name: "model_cache",
            status: Status::Unknown,
            seen: "the profile's shared storage is an NFS volume this machine does not mount"
                .into(),
            why: "the cache is read from this machine".into(),
            fix: "use shared.host_path (mounted here too) to check a JobSpec's inputs".into(),
        }];
    };
    let mount = loaded.profile.container_layout();
    let mount = &*mount.mount();
    let spec = &job.spec;
    let mut checks = Vec::new();
    if let Some(model) = &spec.model_id {
        checks.push(model_check(&host, mount, model));
    }
    for dataset in crate::inputs::datasets_needed(spec) {
        checks.push(dataset_check(&host, dataset));
    }
    for file in [&spec.train_file, &spec.val_file].into_iter().flatten() {
        if let DataFile::Path(path) = file
            && let Some(shared) = path.under(mount)
        {
            let on_host = shared.on_host(host.root());
            checks.push(if on_host.is_file() {
                Check::ok("dataset_cache", format!("{path} is there"))
            } else {
                Check {
                    name: "dataset_cache",
                    status: Status::Fail,
                    seen: format!("{path} is not on the shared storage (seen here at {})", on_host.display()),
                    why: "verl reads it on the workers at the start of the job, which fails without it".into(),
                    fix: "put the file there, or name a prepared dataset (train_file: gsm8k)".into(),
                }
            });
        }
    }
    checks
}

/// The model: a path on the shared storage holds a config.json; a repo id is cached at its
/// revision with every file's blob.
fn model_check(host: &Layout, mount: &str, model: &str) -> Check {
    let name = "model_cache";
    if model.starts_with('/') {
        // The one check `submit` makes: what it refuses is a failure here.
        return match crate::inputs::check_model_path(model, mount, Some(host.root())) {
            Ok(ModelPath::Shared(_)) => {
                Check::ok(name, format!("{model} holds a model (config.json)"))
            }
            Ok(ModelPath::Elsewhere) => Check::ok(
                name,
                format!("{model} is outside the shared storage: not checked here"),
            ),
            Err(e) => Check {
                name,
                status: Status::Fail,
                seen: e.to_string(),
                why: "`argus submit` refuses it: verl loads the model from that directory on every worker".into(),
                fix: "point model_id at a Hugging Face model directory on the shared storage (a real directory, no link, no `..`), or at a repo id `argus prepare --model` caches".into(),
            },
        };
    }
    let spec = match ModelSpec::parse(model) {
        Ok(spec) => spec,
        Err(e) => {
            return Check {
                name,
                status: Status::Fail,
                seen: format!("model_id {model}: {e}"),
                why: "it is not a Hugging Face repo id".into(),
                fix: "org/name or org/name@revision".into(),
            };
        }
    };
    let cache = HubCache::of(host);
    let missing = |seen: String| {
        Check {
        name,
        status: Status::Fail,
        seen,
        why: "without it in the shared cache every worker downloads the model at the start of the job (through HF_ENDPOINT, if the hosts reach it), or fails offline".into(),
        fix: format!("argus prepare --model {model} (or `argus run`, which prepares what the JobSpec names)"),
    }
    };
    let Some(commit) = cache.cached_snapshot(RepoKind::Model, &spec.repo, &spec.revision) else {
        return missing(format!(
            "{model} is not in the shared HF cache ({})",
            cache.root().display()
        ));
    };
    match snapshot_files(&cache, &spec, &commit) {
        Ok((files, broken)) if broken.is_empty() && files.iter().any(|f| f == "config.json") => {
            Check::ok(
                name,
                format!(
                    "{model} at {} complete ({} files)",
                    commit.short(),
                    files.len()
                ),
            )
        }
        Ok((files, broken)) if broken.is_empty() => missing(format!(
            "{model} at {} has {} files but no config.json",
            commit.short(),
            files.len()
        )),
        Ok((_, broken)) => missing(format!(
            "{model} at {} is incomplete: {} without its blob",
            commit.short(),
            broken.join(", ")
        )),
        Err(e) => Check {
            name,
            status: Status::Unknown,
            seen: format!("cannot read the cache of {model}: {e}"),
            why: "the snapshot's files could not be listed".into(),
            fix: String::new(),
        },
    }
}

/// The files of a cached snapshot (relative paths) and those whose link does not reach a
/// blob of the cache, read through handles without following anything.
fn snapshot_files(
    cache: &HubCache,
    spec: &ModelSpec,
    commit: &Commit,
) -> std::io::Result<(Vec<String>, Vec<String>)> {
    let Some(repo) = cache.open_repo(RepoKind::Model, &spec.repo)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let root = Path::new("snapshots").join(commit.as_str());
    let (mut files, mut broken) = (Vec::new(), Vec::new());
    let mut dirs = vec![String::new()];
    while let Some(rel) = dirs.pop() {
        let dir = repo.dir().open_dir(root.join(&rel))?;
        for (entry, kind) in dir.entries()? {
            let entry = entry.to_string_lossy();
            let path = if rel.is_empty() {
                entry.to_string()
            } else {
                format!("{rel}/{entry}")
            };
            match kind {
                Kind::Dir => dirs.push(path),
                _ => {
                    let linked = RepoPath::parse(&path)
                        .ok()
                        .and_then(|file| repo.linked_etag(commit, &file));
                    if linked.is_none() {
                        broken.push(path.clone());
                    }
                    files.push(path);
                }
            }
        }
    }
    files.sort();
    broken.sort();
    Ok((files, broken))
}

/// A dataset `prepare` makes: its manifest and the outputs it lists, each with its digest.
fn dataset_check(host: &Layout, dataset: crate::data::Dataset) -> Check {
    let name = "dataset_cache";
    let rel = Path::new("common/datasets").join(dataset.dir_name());
    let missing = |seen: String| {
        Check {
        name,
        status: Status::Fail,
        seen,
        why: "verl reads its train and validation parquet files on the workers at the start of the job".into(),
        fix: format!("argus prepare --dataset {} (or `argus run`, which prepares what the JobSpec names)", dataset.dir_name()),
    }
    };
    let dir = match host.open(&rel) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return missing(format!(
                "{} is not prepared (no {})",
                dataset.dir_name(),
                host.root().join(&rel).display()
            ));
        }
        Err(e) => {
            return missing(format!(
                "cannot open {}: {e}",
                host.root().join(&rel).display()
            ));
        }
    };
    let Some(manifest) = crate::data::read_manifest(&dir) else {
        return missing(format!("{} has no readable manifest", dataset.dir_name()));
    };
    if !crate::data::outputs_intact(&dir, &manifest.outputs) {
        return missing(format!(
            "{}: the files its manifest lists are missing or changed since it was prepared",
            dataset.dir_name()
        ));
    }
    let rows: usize = manifest.outputs.iter().map(|o| o.rows).sum();
    Check::ok(
        name,
        format!(
            "{} complete ({}, {rows} rows, from {})",
            dataset.dir_name(),
            manifest
                .outputs
                .iter()
                .map(|o| o.file.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            manifest.source
        ),
    )
}
