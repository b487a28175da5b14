//! `argus slurm node <run_id>`: the step on one node. Through that node's own engine it
//! removes what Slurm jobs that no longer run left behind, brings the image (from the
//! archive on the shared storage when the engine lacks it, checked by id), creates this
//! node's containers of the job's plan, then waits for Slurm to end the step (SIGTERM or
//! SIGINT: scancel, the time limit, the batch script's end) and removes them.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::alloc::{self, Alloc};
use super::record::SlurmRecord;
use super::{Error, plan_inputs};
use crate::cluster::NodeEngine;
use crate::config::{Layout, LoadedProfile};
use crate::fsx::Dir;
use crate::ui::Reporter;

/// This node's name in Slurm.
pub fn node_name() -> Result<String, Error> {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::Allocation("SLURMD_NODENAME is not set: not a Slurm step".into()))
}

/// Connects to the node's engine (the profile's `slurm.engine_socket`).
pub async fn connect(cluster: &LoadedProfile) -> Result<NodeEngine, Error> {
    let host = cluster
        .cluster_hosts()?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Allocation("no host".into()))?;
    Ok(NodeEngine::connect_host(&host).await?)
}

/// The interface this node reaches the head through, for `NCCL_SOCKET_IFNAME` and
/// `GLOO_SOCKET_IFNAME` (as `up` sets them across hosts with host networking, unless the
/// profile's env sets both): read in the step's own network namespace, which is the
/// node's, so no probe container is needed. None when argus sets nothing, or the route is
/// not found (logged: NCCL and Gloo then choose).
pub fn collective_iface(cluster: &LoadedProfile, alloc: &Alloc) -> Option<String> {
    use crate::cluster::doctor::network::{IFACE_VARS, sets_iface};
    let p = &cluster.profile;
    if !sets_iface(p) || IFACE_VARS.iter().all(|v| p.env.contains_key(*v)) {
        return None;
    }
    let head = alloc.nodes.first()?.address.0;
    match crate::cluster::local_route::iface_to(head) {
        Ok(iface) => Some(iface),
        Err(e) => {
            tracing::warn!("the interface to the head {head}: {e}; NCCL and Gloo choose");
            None
        }
    }
}

/// Removes the containers of Slurm jobs that are no longer running (never `keep`'s);
/// the names removed.
pub async fn remove_dead(engine: &NodeEngine, keep: Option<u64>) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    let mut states = std::collections::BTreeMap::new();
    for (name, job) in engine.slurm_containers().await? {
        if Some(job) == keep {
            continue;
        }
        let alive = match states.get(&job) {
            Some(alive) => *alive,
            None => {
                let alive = alloc::job_state(job)?.is_some_and(|s| alloc::is_alive(&s));
                states.insert(job, alive);
                alive
            }
        };
        if !alive {
            engine.remove(&name).await?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Where a node's engine got the run's image from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// It had the image (by id) already.
    Present,
    /// Pulled from the registry its reference names, with the run's image id.
    Pulled,
    /// Loaded from the run's archive on the shared storage (verified by id).
    Loaded,
}

/// Brings image `id` to this node's engine: present already; else pulled when `reference`
/// names a registry and the pull gives that very id; else loaded from `archive`. A pull
/// that fails, or brings another image under the tag (it moved since the login node
/// archived it), falls back to the archive, which retags the reference to `id`.
///
/// `archive` is a path of the caller's own (its directory opened as named); the node step
/// loads the run's archive from the shared storage with [`bring_image_at`].
pub async fn bring_image(
    engine: impl Into<NodeEngine>,
    me: &str,
    reference: &str,
    id: &str,
    archive: &Path,
    reporter: &dyn Reporter,
) -> Result<ImageSource, Error> {
    let open = || {
        let dir = archive.parent().filter(|d| !d.as_os_str().is_empty());
        let name = archive.file_name().unwrap_or_default();
        Dir::root(dir.unwrap_or(Path::new(".")))?.open_file(name)
    };
    bring(engine.into(), me, reference, id, &open, archive, reporter).await
}

/// [`bring_image`] with the run's archive on the shared storage of `layout`
/// (`common/images/<hex>.tar`, [`super::image_archive`]): reached, only when it is
/// loaded, through handles from the shared root, a regular file with one link, never
/// through a link.
pub async fn bring_image_at(
    engine: impl Into<NodeEngine>,
    me: &str,
    reference: &str,
    id: &str,
    layout: &Layout,
    reporter: &dyn Reporter,
) -> Result<ImageSource, Error> {
    let name = super::image_archive_name(id)?;
    let open = || layout.open(super::IMAGES)?.open_file(&name);
    let shown = super::image_archive(layout, id);
    bring(engine.into(), me, reference, id, &open, &shown, reporter).await
}

async fn bring(
    engine: NodeEngine,
    me: &str,
    reference: &str,
    id: &str,
    open: &(dyn Fn() -> std::io::Result<std::fs::File> + Sync),
    archive: &Path,
    reporter: &dyn Reporter,
) -> Result<ImageSource, Error> {
    if engine.has_image(id).await {
        return Ok(ImageSource::Present);
    }
    if crate::cluster::image::names_registry(reference) {
        match engine.pull(me, reference, reporter).await {
            Ok(pulled) if pulled == id => {
                reporter.note(&format!("{me}: image pulled from {reference}"));
                return Ok(ImageSource::Pulled);
            }
            Ok(pulled) => reporter.note(&format!(
                "{me}: {reference} is now image {pulled}, not the run's {id}: loading the archive"
            )),
            Err(why) => reporter.note(&format!(
                "{me}: could not pull {reference} ({why}): loading the archive"
            )),
        }
    }
    let file = open().map_err(|source| Error::Io {
        path: archive.to_path_buf(),
        source,
    })?;
    // `load_archive` reads by path: it is given the `/proc/self/fd` path of the file just
    // opened (and checked), which names that very file whatever is renamed or swapped on
    // the way meanwhile. Its messages name the archive's own path.
    let opened = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let loaded = engine.load_archive(reference, id, &opened).await;
    drop(file);
    let fd = opened.display().to_string();
    let shown = archive.display().to_string();
    let skipped = match loaded {
        Ok(skipped) => skipped.unwrap_or(0),
        Err(crate::cluster::Error::SharedStorage { source, .. }) => {
            return Err(Error::Io {
                path: archive.to_path_buf(),
                source,
            });
        }
        Err(crate::cluster::Error::Docker { action, source }) => {
            return Err(crate::cluster::Error::Docker {
                action: action.replace(&fd, &shown),
                source,
            }
            .into());
        }
        Err(crate::cluster::Error::BadEndpoint(why)) => {
            return Err(crate::cluster::Error::BadEndpoint(why.replace(&fd, &shown)).into());
        }
        Err(e) => return Err(e.into()),
    };
    let spared = if skipped > 0 {
        format!(
            " ({} of its layers already here)",
            crate::ui::human_bytes(skipped)
        )
    } else {
        String::new()
    };
    reporter.note(&format!(
        "{me}: image loaded from {}{spared}",
        archive.display()
    ));
    Ok(ImageSource::Loaded)
}

/// The node step, to its end.
pub async fn run(
    loaded: &LoadedProfile,
    run_id: &str,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let started = Instant::now();
    let super::RunView {
        layout,
        files,
        alloc,
        cluster,
    } = super::run_view(loaded, run_id)?;
    let record: SlurmRecord = super::read_json(&files.record())?;
    let me = node_name()?;
    let engine = connect(&cluster).await?;

    // Slurm may end the step at any moment from here: listen before creating anything.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| Error::Io {
            path: "SIGTERM".into(),
            source,
        })?;
    let work = async {
        let removed = remove_dead(&engine, Some(alloc.job_id)).await?;
        if !removed.is_empty() {
            reporter.note(&format!(
                "{me}: removed {} container(s) of Slurm jobs that ended: {}",
                removed.len(),
                removed.join(", ")
            ));
        }
        bring_image_at(
            &engine,
            &me,
            &loaded.profile.image,
            &record.image_id,
            &layout,
            reporter,
        )
        .await?;
        // The token came with the step's environment (sbatch, then srun, export it).
        let token = crate::cluster::auth::cluster_token(loaded, false)?;
        let mut inputs = plan_inputs(&alloc, &record.image_id, token);
        if let Some(iface) = collective_iface(&cluster, &alloc) {
            inputs.collective_iface.insert(me.clone(), iface);
        }
        let plan = crate::cluster::plan::plan(&cluster, &inputs);
        let names = engine.start_on(&plan, &me, reporter).await?;
        reporter.note(&format!(
            "{me}: started {} in {:.1}s",
            names.join(", "),
            started.elapsed().as_secs_f64()
        ));
        Ok::<_, Error>(())
    };
    let stop = files.stop();
    let told_to_stop = crate::http::poll_until(None, std::time::Duration::from_millis(200), || {
        let told = stop.exists();
        async move {
            match told {
                true => crate::http::Poll::Ready(()),
                false => crate::http::Poll::Pending(()),
            }
        }
    });
    tokio::pin!(told_to_stop);
    let outcome = tokio::select! {
        r = work => match r {
            Ok(()) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                    _ = &mut told_to_stop => {}
                }
                Ok(())
            }
            Err(e) => Err(e),
        },
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = &mut told_to_stop => Ok(()),
    };
    let removed = engine.remove_cluster(&cluster.profile.name).await;
    match &removed {
        Ok(names) => reporter.note(&format!("{me}: removed {}", names.join(", "))),
        Err(e) => reporter.note(&format!("{me}: could not remove the containers: {e}")),
    }
    outcome?;
    removed?;
    Ok(())
}
