//! A replay (`argus run --lock`): what it finds before `prepare` and `snapshot` run
//! (they would repair drift), and the drift between that and what the lock pins.

use std::path::Path;

use super::lock::{CodePin, ModelPin, Observed, RunLock};
use super::{Ctx, Error};
use crate::config::jobspec::{Code, JobSpec};
use crate::data;
use crate::inputs::model_dir_on_host;

/// A replay looks before `prepare` and `snapshot` run, since they would repair drift:
/// each pinned dataset file's sha256, the model's cached ref, the code source's tree hash.
pub fn observe_before(ctx: &Ctx<'_>, spec: &JobSpec, lock: &RunLock) -> Result<Observed, Error> {
    let mut observed = Observed::default();
    for pin in &lock.datasets {
        for file in &pin.files {
            // Through handles: a link planted in the dataset is not hashed through.
            let opened = ctx
                .host
                .open(Path::new("common/datasets").join(&pin.name))
                .and_then(|dir| dir.open_file(&file.file));
            match opened {
                Ok(f) => {
                    let sha = crate::digest::reader_sha256(f).ok();
                    observed
                        .dataset_files
                        .push((pin.name.clone(), file.file.clone(), sha));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => observed
                    .dataset_files
                    .push((pin.name.clone(), file.file.clone(), None)),
            }
        }
    }
    if let Some(model) = &lock.model {
        observed.model_commit = match model_dir_on_host(&ctx.inputs(), &model.repo) {
            Some(dir) => data::local_model::content_of(&dir).ok().map(|(c, _)| c),
            None => data::hf_cache::HubCache::of(&ctx.host).read_ref(
                data::hf::RepoKind::Model,
                &model.repo,
                &model.revision,
            ),
        };
    }
    // The source as it is now, hashed without snapshotting it.
    if let Code::Source(code) = &spec.code
        && lock.code.source.is_some()
    {
        observed.code_tree_hash = Some(
            crate::snapshot::tree_hash_of(Path::new(&code.source), &code.exclude, ctx.reporter)
                .map_err(crate::inputs::Error::from)?,
        );
    }
    Ok(observed)
}

/// Completes what a replay observed with what `prepare` and `snapshot` found for inputs
/// that did not exist before them, and compares with the lock. Pure but for reading
/// dataset files that appeared meanwhile.
pub fn drift(
    ctx: &Ctx<'_>,
    lock: &RunLock,
    mut observed: Observed,
    code: &CodePin,
    model: Option<&ModelPin>,
) -> Vec<String> {
    for pin in &lock.datasets {
        for file in &pin.files {
            if !observed
                .dataset_files
                .iter()
                .any(|(d, f, _)| d == &pin.name && f == &file.file)
            {
                let sha = crate::digest::file_sha256(
                    &ctx.host.datasets().join(&pin.name).join(&file.file),
                )
                .ok();
                observed
                    .dataset_files
                    .push((pin.name.clone(), file.file.clone(), sha));
            }
        }
    }
    if observed.code_tree_hash.is_none() && code.source.is_none() {
        observed.code_tree_hash = Some(code.tree_hash.clone());
    }
    if observed.model_commit.is_none() {
        observed.model_commit = model.map(|m| m.commit.clone());
    }
    super::lock::drift(lock, &observed)
}
