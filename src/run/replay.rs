//! A replay (`argus run --lock`): what it finds before `prepare` and `snapshot` run
//! (they would repair drift), and the drift between that and what the lock pins.

use std::path::Path;

use super::lock::{CodePin, ModelPin, Observed, RunLock};
use super::{Ctx, Error};
use crate::config::jobspec::{Code, JobSpec};
use crate::data;
use crate::inputs::model_dir_on_host;

/// The sha256 of a dataset's file on the shared storage, read through handles (a link
/// planted in the dataset is never hashed through, a FIFO never opened).
fn dataset_file_sha(ctx: &Ctx<'_>, dataset: &str, file: &str) -> std::io::Result<String> {
    ctx.host
        .open(Path::new("common/datasets").join(dataset))
        .and_then(|dir| dir.open_file(file))
        .and_then(crate::digest::reader_sha256)
}

/// A replay looks before `prepare` and `snapshot` run, since they would repair drift:
/// each pinned dataset file's sha256, the model's cached ref, the code source's tree hash.
pub fn observe_before(ctx: &Ctx<'_>, spec: &JobSpec, lock: &RunLock) -> Result<Observed, Error> {
    let mut observed = Observed::default();
    for pin in &lock.datasets {
        for file in &pin.files {
            match dataset_file_sha(ctx, &pin.name, &file.file) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                sha => observed
                    .dataset_files
                    .push((pin.name.clone(), file.file.clone(), sha.ok())),
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
                let sha = dataset_file_sha(ctx, &pin.name, &file.file).ok();
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
