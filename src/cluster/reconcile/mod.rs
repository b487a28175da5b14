//! Reconcile: observe what Docker runs for this cluster, diff it with the plan, act on
//! the difference, then wait for Ray. Idempotent by construction: a converged cluster
//! produces only `keep` actions. `down` is the symmetric teardown.
//!
//! `diff` is pure (observed vs planned -> actions); `cluster::observe` reads the engines
//! (containers, networks; `cluster::held`, the ports other clusters hold); `infra` acts (storage, network,
//! volume, start and removal of containers); `wait` waits for Ray and says why it is not
//! ready. This file orchestrates: `up` and `down`, and the cluster's lock.

mod diff;
mod infra;
mod wait;

use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use serde::Serialize;

use super::docker::{self, docker_err, is_not_found};
use super::doctor::image_tools;
use super::hosts::{self, Engine};
use super::plan::{self, ClusterPlan, ContainerPlan, PlanInputs, Role, SharedMount};
use super::{Error, access, image};
use crate::config::LoadedProfile;
use crate::lock;
use crate::ray::RayNode;
use crate::ui::Reporter;

pub use super::held::observe_ports;
use super::observe::cluster_networks;
pub use super::observe::{Observed, observe, observe_all};
pub use diff::{Action, diff};
use infra::{create_layout_inside, ensure_network, prepare_storage};
pub(crate) use infra::{remove, start};
use wait::wait;

#[derive(Debug, Clone, Serialize)]
pub struct UpReport {
    pub cluster: String,
    pub dashboard_url: String,
    pub image: String,
    pub image_id: String,
    /// With `hosts:`: how the image reached each host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<image::Distribution>,
    pub actions: Vec<Action>,
    pub changed: bool,
    pub dry_run: bool,
    pub nodes: Vec<RayNode>,
    pub gpus: f64,
    pub seconds: f64,
    /// Where the seconds went.
    pub timings: UpTimings,
    #[serde(skip)]
    pub plan: ClusterPlan,
}

/// The seconds of `up`'s parts, one after the other: the image on every host (engines
/// dialled, the image found, built-in checks), the containers (observed, checked before
/// starting, created and started), Ray ready (every planned node ALIVE).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct UpTimings {
    pub image: f64,
    pub containers: f64,
    pub ray_ready: f64,
}

pub struct UpOptions {
    pub dry_run: bool,
    pub timeout: Duration,
}

/// Where a cluster's lock lives: on the shared storage when this host sees it (so `up`
/// and `down` on two hosts exclude each other; reached without following links planted
/// there), else in this user's state directory. A root and the lock's path below it.
fn lock_dir(loaded: &LoadedProfile) -> (std::path::PathBuf, std::path::PathBuf) {
    let name = format!("cluster-{}", loaded.profile.name);
    match loaded.host_layout() {
        Ok(shared) => (
            shared.root().to_path_buf(),
            std::path::Path::new(".argus/locks").join(name),
        ),
        Err(_) => (
            dirs::state_dir()
                .or_else(dirs::home_dir)
                .unwrap_or_else(std::env::temp_dir)
                .join("argus")
                .join("locks"),
            std::path::PathBuf::from(name),
        ),
    }
}

/// Takes the cluster's lock: one `up`, `down` or `run` changes a cluster at a time; the
/// others wait, saying who they wait for.
async fn lock_cluster(
    loaded: &LoadedProfile,
    reporter: &dyn Reporter,
) -> Result<lock::Lock, Error> {
    let (root, rel) = lock_dir(loaded);
    let what = format!("cluster {}", loaded.profile.name);
    let options = lock::Acquire {
        what: &what,
        timeout: None,
    };
    let lock = tokio::task::block_in_place(|| {
        lock::acquire_under(&root, &rel, &options, |holder| {
            reporter.note(&lock::waiting_message(&what, holder));
        })
    })?;
    crate::testpoint::reach("cluster:locked");
    Ok(lock)
}

/// Converges the cluster to the profile and waits until Ray is ready. Every host's engine
/// is dialled first: if one a container needs does not answer, nothing is changed anywhere.
pub async fn up(
    loaded: &LoadedProfile,
    options: &UpOptions,
    reporter: &dyn Reporter,
) -> Result<UpReport, Error> {
    let started = Instant::now();
    let profile = &loaded.profile;
    require_device_ids(profile)?;
    let token = super::auth::token_for_up(loaded, options.dry_run)?;
    let engines = hosts::connect_every(loaded).await?;
    hosts::check_distinct(&engines).await?;
    let (image_id, images) = image_on_hosts(loaded, &engines, options.dry_run, reporter).await?;
    let tools = image_tools(loaded, &engines, &image_id, options.dry_run, reporter).await?;
    let image_done = started.elapsed().as_secs_f64();
    check_token_auth(loaded, &engines, &image_id, tools.as_ref()).await?;
    let plan = plan_cluster(loaded, &engines, &image_id, &token, options.dry_run).await?;
    // A dry run only looks; anything that may act holds the cluster's lock from here.
    let _lock = if options.dry_run {
        None
    } else {
        Some(lock_cluster(loaded, reporter).await?)
    };
    let observed = observe_all(&engines, &plan.cluster).await?;
    let actions = diff(&plan, &observed);
    let changed = actions.iter().any(Action::changes);
    let mut report = UpReport {
        cluster: plan.cluster.clone(),
        dashboard_url: plan.dashboard_url.clone(),
        image: profile.image.clone(),
        image_id,
        images,
        actions: actions.clone(),
        changed,
        dry_run: options.dry_run,
        nodes: Vec::new(),
        gpus: 0.0,
        seconds: 0.0,
        timings: UpTimings {
            image: image_done,
            ..Default::default()
        },
        plan: plan.clone(),
    };
    if options.dry_run {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }

    // About to start containers: what would stop them is said now, not after the timeout.
    if actions
        .iter()
        .any(|a| matches!(a, Action::Create { .. } | Action::Recreate { .. }))
    {
        super::doctor::preflight(&engines, &plan, loaded, reporter).await?;
    }
    let head_engine = converge(&engines, &plan, &actions, reporter).await?;
    let containers_done = started.elapsed().as_secs_f64();
    let ray = access::ray_client_on(loaded, &head_engine.docker, token).await?;
    let nodes = wait(&engines, &ray, &plan, options.timeout, reporter).await?;
    report.gpus = nodes.iter().filter(|n| n.alive()).map(RayNode::gpus).sum();
    report.nodes = nodes;
    report.seconds = started.elapsed().as_secs_f64();
    report.timings.containers = containers_done - image_done;
    report.timings.ray_ready = report.seconds - containers_done;
    Ok(report)
}

/// Real GPUs on Docker hosts: argus must know which (Slurm's node step sets them).
fn require_device_ids(profile: &crate::config::profile::Profile) -> Result<(), Error> {
    for group in &profile.workers {
        if group.gpus > 0
            && group.gpu_mode != crate::config::profile::GpuMode::Simulated
            && group.device_ids.is_none()
        {
            return Err(Error::NoDeviceIds {
                group: group.name.clone(),
                gpus: group.gpus,
                mode: group.gpu_mode.as_str().to_string(),
                workers: group.count(),
            });
        }
    }
    Ok(())
}

/// The plan, its host-mode port blocks chosen clear of those other clusters hold.
async fn plan_cluster(
    loaded: &LoadedProfile,
    engines: &[Engine],
    image_id: &str,
    token: &Option<String>,
    dry_run: bool,
) -> Result<ClusterPlan, Error> {
    let (held, own) = observe_ports(engines, &loaded.profile.name).await?;
    let first_block = plan::choose_first_blocks(&loaded.profile, &held, &own)
        .map_err(|clash| Error::Ports(Box::new(clash)))?;
    // Across hosts with host networking: the interface each host reaches the head through,
    // for NCCL and Gloo (what running containers carry; a dry run probes nothing).
    crate::testpoint::reach("up:before-iface-probe");
    let collective_iface =
        match super::doctor::network::ifaces_for_up(&loaded.profile, engines, image_id, dry_run)
            .await
        {
            Ok(ifaces) => ifaces,
            Err((host, detail)) => return Err(Error::RouteProbe { host, detail }),
        };
    Ok(plan::plan(
        loaded,
        &PlanInputs {
            image_id: image_id.to_string(),
            token: token.clone(),
            first_block,
            collective_iface,
            ..Default::default()
        },
    ))
}

/// Acts on the difference: storage and network first, then the removals, then the head and
/// (in parallel) the workers that are created or recreated. Returns the head's engine.
async fn converge<'e>(
    engines: &'e [Engine],
    plan: &ClusterPlan,
    actions: &[Action],
    reporter: &dyn Reporter,
) -> Result<&'e Engine, Error> {
    let head_engine = host_engine(engines, plan.head_host())?;
    prepare_storage(engines, plan).await?;
    let network_id = ensure_network(&head_engine.docker, plan).await?;
    let network_id = network_id.as_deref();

    let removals = actions.iter().filter_map(|a| match a {
        Action::Remove { name, host, .. } => Some((host.as_str(), name.as_str())),
        _ => None,
    });
    try_join_all(removals.map(|(host, name)| async move {
        remove(&host_engine(engines, host)?.docker, name).await
    }))
    .await?;

    let replace = |role: Role| -> Vec<&ContainerPlan> {
        plan.containers
            .iter()
            .filter(|c| c.role == role)
            .filter(|c| {
                actions.iter().any(|a| {
                    a.name() == c.name
                        && a.host() == c.host
                        && matches!(a, Action::Create { .. } | Action::Recreate { .. })
                })
            })
            .collect()
    };
    if actions.iter().any(Action::changes) && plan.hosts.len() > 1 {
        super::storage_check::check_shared_storage(engines, plan, reporter).await?;
    }
    for head in replace(Role::Head) {
        start(
            &head_engine.docker,
            &plan.cluster,
            head,
            network_id,
            reporter,
        )
        .await?;
        if let SharedMount::Volume { target, .. } = &head.mount {
            // The host may not see an NFS volume: make the layout from inside the head.
            create_layout_inside(&head_engine.docker, &head.name, target).await?;
        }
    }
    let cluster = plan.cluster.as_str();
    try_join_all(replace(Role::Worker).into_iter().map(|w| async move {
        let engine = host_engine(engines, &w.host)?;
        start(&engine.docker, cluster, w, network_id, reporter).await
    }))
    .await?;
    Ok(head_engine)
}

/// The engine of `host`; every host of the plan was connected before anything acts.
fn host_engine<'a>(engines: &'a [Engine], host: &str) -> Result<&'a Engine, Error> {
    hosts::engine(engines, host).ok_or_else(|| {
        Error::HostsUnreachable(vec![hosts::Unreachable {
            host: host.to_string(),
            endpoint: String::new(),
            reason: "not connected".into(),
        }])
    })
}

/// The image's id, the same on every host: found (or pulled) on a single host; on several,
/// brought to each host that lacks it from this machine's engine or a host that has it.
async fn image_on_hosts(
    loaded: &LoadedProfile,
    engines: &[Engine],
    dry_run: bool,
    reporter: &dyn Reporter,
) -> Result<(String, Option<image::Distribution>), Error> {
    let reference = &loaded.profile.image;
    if !loaded.has_hosts() {
        let engine = host_engine(engines, crate::config::profile::LOCAL_HOST)?;
        let id = image::ensure(&engine.docker, reference, dry_run, reporter).await?;
        return Ok((id, None));
    }
    // This machine's own engine may hold the image (where `argus image build` made it)
    // without being a host of the cluster; it is only a source, and may be absent.
    let local = match docker::connect(None).await {
        Ok(local) => Some(local),
        Err(e) => {
            tracing::debug!("no local engine to copy the image from: {e}");
            None
        }
    };
    let local = local.as_ref().map(|docker| image::Engine {
        host: "this machine",
        docker,
    });
    let targets: Vec<image::Engine> = engines
        .iter()
        .map(|e| image::Engine {
            host: &e.name,
            docker: &e.docker,
        })
        .collect();
    let distribution = image::distribute(reference, local, &targets, dry_run, reporter).await?;
    Ok((distribution.image_id.clone(), Some(distribution)))
}

/// What argus runs in the image is there (`doctor::image_tools`), before anything is made.
/// The image is the same id on every host by now: the head's host answers for all. A dry
/// run, which starts no container, does not probe.
async fn image_tools(
    loaded: &LoadedProfile,
    engines: &[Engine],
    image_id: &str,
    dry_run: bool,
    reporter: &dyn Reporter,
) -> Result<Option<image_tools::Tools>, Error> {
    let engine = hosts::engine(engines, loaded.profile.head_host()).or(engines.first());
    match engine {
        Some(engine) if !dry_run => {
            let p = &loaded.profile;
            image_tools::require(&engine.docker, &p.name, &p.image, image_id, reporter).await
        }
        _ => Ok(None),
    }
}

/// `ray.auth: token` with an image whose Ray has no token auth would start a cluster open
/// to anyone: refused before anything starts. The profile check reads argus's own tags;
/// this one reads the version argus's images carry as a label, whatever their name, else
/// the one `image_tools` read in the image (any image with Ray installed by pip).
async fn check_token_auth(
    loaded: &LoadedProfile,
    engines: &[Engine],
    image_id: &str,
    tools: Option<&image_tools::Tools>,
) -> Result<(), Error> {
    if loaded.profile.ray.auth != crate::config::profile::AuthMode::Token || image_id.is_empty() {
        return Ok(());
    }
    let Some(engine) = engines.first() else {
        return Ok(());
    };
    let Ok(info) = engine.docker.inspect_image(image_id).await else {
        return Ok(());
    };
    let version = info
        .config
        .and_then(|c| c.labels)
        .and_then(|l| l.get(image::LABEL_RAY_VERSION).cloned())
        .or_else(|| tools.and_then(|t| t.ray_version.clone()));
    if let Some(version) = version
        && crate::config::profile::token_auth_supported(&version) == Some(false)
    {
        return Err(Error::NoTokenAuth {
            image: loaded.profile.image.clone(),
            version,
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct DownReport {
    pub cluster: String,
    /// Containers removed (or, in a dry run, that would be), as `name` on a single host
    /// and `name on host` with `hosts:`.
    pub removed_containers: Vec<String>,
    pub removed_network: Option<String>,
    pub dry_run: bool,
    pub shared_kept: Option<String>,
    /// Hosts whose engine did not answer: their containers are still there.
    pub unreachable: Vec<hosts::Unreachable>,
}

/// Removes the cluster's containers and networks on every host that answers; keeps the
/// shared storage (and volume). A host that does not answer is reported, not waited for:
/// the others are taken down all the same.
pub async fn down(
    loaded: &LoadedProfile,
    dry_run: bool,
    reporter: &dyn Reporter,
) -> Result<DownReport, Error> {
    let cluster = loaded.profile.name.clone();
    // One host that does not answer is an error (nothing was removed); of several, those
    // that answer are taken down and the others reported.
    let (engines, unreachable) = if loaded.has_hosts() {
        let all_hosts = hosts::cluster_hosts(loaded)?;
        hosts::connect_all(&all_hosts, hosts::CONNECT_TIMEOUT).await
    } else {
        (hosts::connect_every(loaded).await?, Vec::new())
    };
    let _lock = if dry_run {
        None
    } else {
        Some(lock_cluster(loaded, reporter).await?)
    };
    let observed = observe_all(&engines, &cluster).await?;
    let names: Vec<String> = observed
        .iter()
        .map(|o| {
            if loaded.has_hosts() {
                format!("{} on {}", o.name, o.host)
            } else {
                o.name.clone()
            }
        })
        .collect();
    // Networks by label and id: a name may be shared by several (Docker allows it).
    let mut networks = Vec::new();
    for e in &engines {
        for (id, name, _) in cluster_networks(&e.docker, &cluster).await? {
            networks.push((e, id, name));
        }
    }
    let report = DownReport {
        cluster,
        removed_containers: names.clone(),
        removed_network: networks.first().map(|(_, _, name)| name.clone()),
        dry_run,
        shared_kept: loaded
            .host_layout()
            .ok()
            .map(|host| host.root().display().to_string()),
        unreachable,
    };
    if dry_run {
        return Ok(report);
    }
    if !names.is_empty() {
        let task = reporter.task("containers");
        task.update(&format!("removing {}", names.len()));
        let engines = &engines;
        try_join_all(
            observed.iter().map(|o| async move {
                remove(&host_engine(engines, &o.host)?.docker, &o.id).await
            }),
        )
        .await?;
        task.done(&format!("removed {}", names.len()));
    }
    for (engine, id, name) in &networks {
        match engine.docker.remove_network(id).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(docker_err(format!("remove network {name} ({id})"))(e)),
        }
    }
    Ok(report)
}
