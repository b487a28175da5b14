//! One host's share of a cluster, driven from that host through its own engine (a Slurm
//! node step): the image from an archive on the shared storage, this host's containers
//! of a plan, their removal, and the containers of Slurm jobs that are no longer running.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::{ImportImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::StreamExt;

use super::Error;
use super::docker::docker_err;
use super::plan::{ClusterPlan, LABEL_CLUSTER, Role};
use crate::ui::Reporter;

/// The label that ties a container to its Slurm job.
pub const LABEL_SLURM_JOB: &str = "argus.slurm.job";

/// True when the engine has the image `id`.
pub async fn has_image(docker: &Docker, id: &str) -> bool {
    matches!(docker.inspect_image(id).await, Ok(info) if info.id.as_deref() == Some(id))
}

/// The id of the image `reference` names on this engine.
pub async fn image_id(docker: &Docker, reference: &str) -> Option<String> {
    docker
        .inspect_image(reference)
        .await
        .ok()
        .and_then(|i| i.id)
}

/// Writes `reference` (of id `id`) as an archive at `path`, once: an archive already
/// there is kept. Written under a temporary name and renamed, so a reader never sees half.
pub async fn save_archive(docker: &Docker, reference: &str, path: &Path) -> Result<bool, Error> {
    if path.exists() {
        return Ok(false);
    }
    let io = |source: std::io::Error| Error::SharedStorage {
        path: path.display().to_string(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(crate::fsx::temp_name(&stem));
    let result = async {
        use tokio::io::AsyncWriteExt;
        let mut file = tokio::fs::File::create(&temp).await.map_err(io)?;
        let mut stream = docker.export_image(&super::image::one_image(reference));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(docker_err(format!("export image {reference}")))?;
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        std::fs::rename(&temp, path).map_err(io)?;
        Ok::<_, Error>(())
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result.map(|()| true)
}

/// Makes sure the engine has image `id`, loading it from `archive` when absent (without
/// sending the engine the layers it already has) and tagging it `reference`; the id is
/// checked after the load. None when it was there, else the bytes of layers not sent.
///
/// The engine's layers are listed before the load reads the archive: an image removed
/// meanwhile (`docker image prune -a` on a shared node) can take a layer that was left out
/// with it, and that load fails. It is then loaded once more, whole.
pub async fn load_archive(
    docker: &Docker,
    reference: &str,
    id: &str,
    archive: &Path,
) -> Result<Option<u64>, Error> {
    if has_image(docker, id).await {
        return Ok(None);
    }
    let (loaded, skipped) = load(docker, id, archive, true).await;
    let present = loaded.is_ok() || has_image(docker, id).await;
    let skipped = match loaded {
        Ok(()) => skipped,
        // The image is whole (its id is its content's) even if the load failed after it:
        // an archive of several images (an older argus's, of a name without a tag) can fail
        // on another one.
        Err(e) if present => {
            tracing::info!("{} gave image {id}, then failed: {e}", archive.display());
            skipped
        }
        // Only a load that left something out is tried again, and only when the image is
        // not there after all.
        Err(e) if skipped > 0 => {
            tracing::info!(
                "loading {} without the layers this engine had failed ({e}): loading all of it",
                archive.display()
            );
            load(docker, id, archive, false).await.0?;
            0
        }
        Err(e) => return Err(e),
    };
    // Two loads of one archive at once (two jobs on this node) both end with the image.
    if !has_image(docker, id).await {
        return Err(Error::BadEndpoint(format!(
            "{} did not hold image {id}",
            archive.display()
        )));
    }
    // A reference by digest is not a tag to give it (nor a `latest` to move).
    if !reference.contains('@') {
        let (repo, tag) = super::image::split_tag(reference);
        let options = TagImageOptionsBuilder::new().repo(repo).tag(tag).build();
        let _ = docker.tag_image(id, Some(options)).await;
    }
    Ok(Some(skipped))
}

/// One load of `archive` (without the layers the engine has when `skip`), and the bytes
/// it did not send.
async fn load(docker: &Docker, id: &str, archive: &Path, skip: bool) -> (Result<(), Error>, u64) {
    let body = super::image::archive_load_body(docker, "this node", archive, id, skip).await;
    let (body, skipped) = match body {
        Ok(body) => body,
        Err(source) => {
            let path = archive.display().to_string();
            return (Err(Error::SharedStorage { path, source }), 0);
        }
    };
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut load = docker.import_image_stream(options, body, None);
    let mut result = Ok(());
    while let Some(step) = load.next().await {
        if let Err(e) = step {
            result = Err(docker_err(format!("load {}", archive.display()))(e));
            break;
        }
    }
    (result, skipped.load(std::sync::atomic::Ordering::Relaxed))
}

/// Creates and starts this host's containers of the plan, the head first.
pub async fn start_on(
    docker: &Docker,
    plan: &ClusterPlan,
    host: &str,
    reporter: &dyn Reporter,
) -> Result<Vec<String>, Error> {
    let mut mine: Vec<_> = plan.containers.iter().filter(|c| c.host == host).collect();
    mine.sort_by_key(|c| c.role != Role::Head);
    let mut names = Vec::new();
    for c in mine {
        super::reconcile::start(docker, &plan.cluster, c, None, reporter).await?;
        names.push(c.name.clone());
    }
    Ok(names)
}

/// Containers with `label` (`key` or `key=value`), running or not: (name, labels).
async fn labelled(
    docker: &Docker,
    label: &str,
) -> Result<Vec<(String, HashMap<String, String>)>, Error> {
    let list = super::docker::containers_labelled(docker, label).await?;
    Ok(list
        .into_iter()
        .map(|c| {
            let name = c
                .names
                .unwrap_or_default()
                .first()
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_default();
            (name, c.labels.unwrap_or_default())
        })
        .collect())
}

/// Removes the cluster's containers on this engine; their names.
pub async fn remove_cluster(docker: &Docker, cluster: &str) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for (name, _) in labelled(docker, &format!("{LABEL_CLUSTER}={cluster}")).await? {
        super::reconcile::remove(docker, &name).await?;
        removed.push(name);
    }
    Ok(removed)
}

/// Every container of a Slurm job on this engine: (name, job id).
pub async fn slurm_containers(docker: &Docker) -> Result<Vec<(String, u64)>, Error> {
    Ok(labelled(docker, LABEL_SLURM_JOB)
        .await?
        .into_iter()
        .filter_map(|(name, labels)| {
            let job = labels.get(LABEL_SLURM_JOB)?.parse().ok()?;
            Some((name, job))
        })
        .collect())
}

/// Removes one container (gone already is fine).
pub async fn remove(docker: &Docker, name: &str) -> Result<(), Error> {
    super::reconcile::remove(docker, name).await
}
