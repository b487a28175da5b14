//! Reconcile: observe what Docker runs for this cluster, diff it with the plan, act on
//! the difference, then wait for Ray. Idempotent by construction: a converged cluster
//! produces only `keep` actions. `down` is the symmetric teardown.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use futures_util::future::try_join_all;
use serde::Serialize;

use super::docker::{self, docker_err, is_conflict, is_not_found};
use super::hosts::{self, Engine};
use super::plan::{
    self, ClusterPlan, ContainerPlan, LABEL_CLUSTER, LABEL_SPEC, PlanInputs, Role, SharedMount,
};
use super::ready::{self, Readiness};
use super::{Error, access, image};
use crate::config::LoadedProfile;
use crate::config::layout::{self, Layout};
use crate::lock;
use crate::ray::{RayClient, RayNode};
use crate::ui::Reporter;

/// A container of this cluster as Docker reports it.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The host whose engine runs it.
    pub host: String,
    pub id: String,
    pub name: String,
    pub state: String,
    pub spec: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    Create {
        name: String,
        host: String,
    },
    Recreate {
        name: String,
        host: String,
        reason: String,
    },
    Keep {
        name: String,
        host: String,
    },
    Remove {
        name: String,
        host: String,
        reason: String,
    },
}

impl Action {
    pub fn name(&self) -> &str {
        match self {
            Action::Create { name, .. }
            | Action::Recreate { name, .. }
            | Action::Keep { name, .. }
            | Action::Remove { name, .. } => name,
        }
    }
    pub fn host(&self) -> &str {
        match self {
            Action::Create { host, .. }
            | Action::Recreate { host, .. }
            | Action::Keep { host, .. }
            | Action::Remove { host, .. } => host,
        }
    }
    pub fn changes(&self) -> bool {
        !matches!(self, Action::Keep { .. })
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = |host: &str| {
            if host == crate::config::profile::LOCAL_HOST {
                String::new()
            } else {
                format!(" on {host}")
            }
        };
        match self {
            Action::Create { name, host } => write!(f, "create    {name}{}", on(host)),
            Action::Recreate { name, host, reason } => {
                write!(f, "recreate  {name}{} ({reason})", on(host))
            }
            Action::Keep { name, host } => write!(f, "keep      {name}{}", on(host)),
            Action::Remove { name, host, reason } => {
                write!(f, "remove    {name}{} ({reason})", on(host))
            }
        }
    }
}

/// What must change to go from `observed` to `plan`. Pure. A container is itself only on
/// the host the plan puts it on: one of the same name on another host is removed there.
pub fn diff(plan: &ClusterPlan, observed: &[Observed]) -> Vec<Action> {
    let by_key: HashMap<(&str, &str), &Observed> = observed
        .iter()
        .map(|o| ((o.host.as_str(), o.name.as_str()), o))
        .collect();
    let mut actions = Vec::new();
    let mut head_replaced = false;
    for want in &plan.containers {
        let name = want.name.clone();
        let host = want.host.clone();
        let action = match by_key.get(&(want.host.as_str(), want.name.as_str())) {
            None => Action::Create { name, host },
            Some(o) if o.spec.as_deref() != Some(want.spec_hash().as_str()) => Action::Recreate {
                name,
                host,
                reason: "spec changed".into(),
            },
            Some(o) if !matches!(o.state.as_str(), "running" | "restarting") => Action::Recreate {
                name,
                host,
                reason: format!("container is {}", o.state),
            },
            Some(_) if head_replaced => Action::Recreate {
                name,
                host,
                reason: "the head is replaced".into(),
            },
            Some(_) => Action::Keep { name, host },
        };
        if want.role == Role::Head && action.changes() {
            head_replaced = true;
        }
        actions.push(action);
    }
    for o in observed {
        let planned = plan
            .containers
            .iter()
            .find(|c| c.name == o.name)
            .map(|c| c.host.as_str());
        let reason = match planned {
            Some(host) if host == o.host => continue,
            Some(host) => format!("it belongs on host {host}"),
            None => "not in the profile".into(),
        };
        actions.push(Action::Remove {
            name: o.name.clone(),
            host: o.host.clone(),
            reason,
        });
    }
    actions
}

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
    #[serde(skip)]
    pub plan: ClusterPlan,
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
    match loaded.shared_host_path() {
        Some(shared) => (shared, std::path::Path::new(".argus/locks").join(name)),
        None => (
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
    // Real GPUs on Docker hosts: argus must know which (Slurm's node step sets them).
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
    let token = super::auth::token_for_up(loaded, options.dry_run)?;
    let engines = hosts::connect_every(loaded).await?;
    hosts::check_distinct(&engines).await?;
    let (image_id, images) = image_on_hosts(loaded, &engines, options.dry_run, reporter).await?;
    check_token_auth(loaded, &engines, &image_id).await?;
    let (held, own) = observe_ports(&engines, &profile.name).await?;
    let first_block = plan::choose_first_blocks(profile, &held, &own)
        .map_err(|clash| Error::Ports(Box::new(clash)))?;
    let plan = plan::plan(
        loaded,
        &PlanInputs {
            image_id: image_id.clone(),
            token: token.clone(),
            first_block,
            ..Default::default()
        },
    );
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
        plan: plan.clone(),
    };
    if options.dry_run {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }

    let head_engine = host_engine(&engines, plan.head_host())?;
    prepare_storage(&engines, &plan).await?;
    let network_id = ensure_network(&head_engine.docker, &plan).await?;
    let network_id = network_id.as_deref();

    let removals = actions.iter().filter_map(|a| match a {
        Action::Remove { name, host, .. } => Some((host.as_str(), name.as_str())),
        _ => None,
    });
    let engines = &engines;
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
    if changed && plan.hosts.len() > 1 {
        super::storage_check::check_shared_storage(engines, &plan, reporter).await?;
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

    let ray = access::ray_client_on(loaded, &head_engine.docker, token).await?;
    let nodes = wait(engines, &ray, &plan, options.timeout, reporter).await?;
    report.gpus = nodes.iter().filter(|n| n.alive()).map(RayNode::gpus).sum();
    report.nodes = nodes;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
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

/// `ray.auth: token` with an image whose Ray has no token auth would start a cluster open
/// to anyone: refused before anything starts. The profile check reads argus's own tags;
/// this one reads the version argus's images carry as a label, whatever their name.
async fn check_token_auth(
    loaded: &LoadedProfile,
    engines: &[Engine],
    image_id: &str,
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
        .and_then(|l| l.get(image::LABEL_RAY_VERSION).cloned());
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

/// The containers of the cluster on every host.
pub async fn observe_all(engines: &[Engine], cluster: &str) -> Result<Vec<Observed>, Error> {
    let lists = try_join_all(engines.iter().map(|e| async move {
        let mut list = observe(&e.docker, cluster).await?;
        for o in &mut list {
            o.host = e.name.clone();
        }
        Ok::<_, Error>(list)
    }))
    .await?;
    Ok(lists.into_iter().flatten().collect())
}

/// What the engines say about host ports: the ports and port blocks other argus clusters'
/// containers hold on each host (the engine is the truth, whoever made them: `argus up`,
/// a Slurm job), and the first block this cluster's own containers already use there.
pub async fn observe_ports(
    engines: &[Engine],
    cluster: &str,
) -> Result<
    (
        Vec<plan::HeldPorts>,
        std::collections::BTreeMap<String, u32>,
    ),
    Error,
> {
    let lists = try_join_all(engines.iter().map(|e| async move {
        let list = docker::containers_labelled(&e.docker, LABEL_CLUSTER).await?;
        Ok::<_, Error>((e.name.clone(), list))
    }))
    .await?;
    let mut held = Vec::new();
    let mut own = std::collections::BTreeMap::new();
    for (host, list) in lists {
        for c in list {
            let labels = c.labels.clone().unwrap_or_default();
            let owner = labels.get(LABEL_CLUSTER).cloned().unwrap_or_default();
            let host_network = c
                .host_config
                .as_ref()
                .and_then(|h| h.network_mode.as_deref())
                == Some("host");
            let command = c.command.clone().unwrap_or_default();
            let (block, command_ports) = plan::ports_of_command(command.split_whitespace());
            let block = block.filter(|_| host_network);
            if owner == cluster {
                if let Some(block) = block {
                    let first = own.entry(host.clone()).or_insert(block);
                    *first = (*first).min(block);
                }
                continue;
            }
            // Published ports are the host's in any mode; a command's only in host mode.
            let mut ports: std::collections::BTreeSet<u16> = c
                .ports
                .iter()
                .flatten()
                .filter_map(|p| p.public_port)
                .collect();
            if host_network {
                ports.extend(command_ports);
            }
            if block.is_none() && ports.is_empty() {
                continue;
            }
            held.push(plan::HeldPorts {
                host: host.clone(),
                cluster: owner,
                container: c
                    .names
                    .unwrap_or_default()
                    .first()
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                blocks: block.into_iter().collect(),
                ports,
            });
        }
    }
    Ok((held, own))
}

/// The cluster's containers on one engine, running or not (`host` left empty).
pub async fn observe(docker: &Docker, cluster: &str) -> Result<Vec<Observed>, Error> {
    let list = docker::containers_labelled(docker, &format!("{LABEL_CLUSTER}={cluster}")).await?;
    Ok(list
        .into_iter()
        .map(|c| Observed {
            host: String::new(),
            id: c.id.unwrap_or_default(),
            name: c
                .names
                .unwrap_or_default()
                .first()
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_default(),
            state: c.state.map(|s| s.to_string()).unwrap_or_default(),
            spec: c.labels.unwrap_or_default().get(LABEL_SPEC).cloned(),
        })
        .collect())
}

/// The shared layout (host path: from this machine, which sees the same storage) and, for
/// an NFS export, the Docker volume on every host.
async fn prepare_storage(engines: &[Engine], plan: &ClusterPlan) -> Result<(), Error> {
    if let Some(path) = &plan.shared_host_path {
        Layout::new(path)
            .create()
            .map_err(|source| Error::SharedStorage {
                path: path.display().to_string(),
                source,
            })?;
    }
    try_join_all(engines.iter().map(|e| ensure_volume(&e.docker, plan))).await?;
    Ok(())
}

async fn ensure_volume(docker: &Docker, plan: &ClusterPlan) -> Result<(), Error> {
    if let Some(volume) = &plan.volume {
        match docker.inspect_volume(&volume.name).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {
                let mut device_options = format!("addr={}", volume.server);
                if let Some(options) = &volume.options {
                    device_options.push(',');
                    device_options.push_str(options);
                }
                let request = VolumeCreateRequest {
                    name: Some(volume.name.clone()),
                    driver: Some("local".to_string()),
                    driver_opts: Some(HashMap::from([
                        ("type".to_string(), "nfs".to_string()),
                        ("o".to_string(), device_options),
                        ("device".to_string(), format!(":{}", volume.export)),
                    ])),
                    labels: Some(HashMap::from([(
                        LABEL_CLUSTER.to_string(),
                        plan.cluster.clone(),
                    )])),
                    ..Default::default()
                };
                docker
                    .create_volume(request)
                    .await
                    .map_err(docker_err(format!("create volume {}", volume.name)))?;
            }
            Err(e) => return Err(docker_err(format!("inspect volume {}", volume.name))(e)),
        }
    }
    Ok(())
}

/// The cluster's networks (by label), as (id, name, attached containers).
async fn cluster_networks(
    docker: &Docker,
    cluster: &str,
) -> Result<Vec<(String, String, usize)>, Error> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_CLUSTER}={cluster}")])]);
    let options = bollard::query_parameters::ListNetworksOptionsBuilder::new()
        .filters(&filters)
        .build();
    let list = docker
        .list_networks(Some(options))
        .await
        .map_err(docker_err("list networks"))?;
    let mut out = Vec::new();
    for n in list {
        let id = n.id.unwrap_or_default();
        // The list does not say which containers are attached; inspect does.
        let attached = match docker
            .inspect_network(
                &id,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
        {
            Ok(info) => info.containers.map_or(0, |c| c.len()),
            Err(_) => 0,
        };
        out.push((id, n.name.unwrap_or_default(), attached));
    }
    Ok(out)
}

/// Makes sure the cluster has exactly one network of its name and returns its id. Extra
/// networks of that name (left by two `up`s racing, before argus locked) are removed when
/// nothing is attached to them; containers always address the network by id.
async fn ensure_network(docker: &Docker, plan: &ClusterPlan) -> Result<Option<String>, Error> {
    let Some(network) = &plan.network else {
        return Ok(None);
    };
    let mut ours: Vec<(String, String, usize)> = cluster_networks(docker, &plan.cluster)
        .await?
        .into_iter()
        .filter(|(_, name, _)| name == network)
        .collect();
    // Keep the one with the most containers attached (the one in use).
    ours.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    if let Some(((keep, _, _), extras)) = ours.split_first() {
        for (id, _, attached) in extras {
            if *attached == 0 {
                tracing::info!("removing a duplicate network {network} ({id})");
                let _ = docker.remove_network(id).await;
            }
        }
        return Ok(Some(keep.clone()));
    }
    let request = NetworkCreateRequest {
        name: network.clone(),
        driver: Some("bridge".to_string()),
        labels: Some(HashMap::from([(
            LABEL_CLUSTER.to_string(),
            plan.cluster.clone(),
        )])),
        ..Default::default()
    };
    match docker.create_network(request).await {
        Ok(created) => Ok(Some(created.id)),
        Err(e) if is_conflict(&e) => Err(Error::NameTaken {
            name: network.clone(),
            cluster: plan.cluster.clone(),
        }),
        Err(e) => Err(docker_err(format!("create network {network}"))(e)),
    }
}

pub(crate) async fn remove(docker: &Docker, name: &str) -> Result<(), Error> {
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(docker_err(format!("remove container {name}"))(e)),
    }
}

/// Removes what stands under the name (if it is ours), creates and starts the container.
pub(crate) async fn start(
    docker: &Docker,
    cluster: &str,
    c: &ContainerPlan,
    network_id: Option<&str>,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let task = reporter.task(&c.name);
    task.update("creating");
    match docker
        .inspect_container(&c.name, None::<InspectContainerOptions>)
        .await
    {
        Ok(existing) => {
            let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
            if labels.get(LABEL_CLUSTER).map(String::as_str) != Some(cluster) {
                task.fail("name taken by another container");
                return Err(Error::NameTaken {
                    name: c.name.clone(),
                    cluster: cluster.to_string(),
                });
            }
            remove(docker, &c.name).await?;
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(docker_err(format!("inspect container {}", c.name))(e)),
    }
    let options = CreateContainerOptionsBuilder::new().name(&c.name).build();
    docker
        .create_container(Some(options), docker::create_body(c, cluster, network_id))
        .await
        .map_err(|e| {
            task.fail("create failed");
            docker_err(format!("create container {}", c.name))(e)
        })?;
    task.update("starting");
    docker
        .start_container(
            &c.name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| {
            task.fail("start failed");
            docker_err(format!("start container {}", c.name))(e)
        })?;
    task.done("started");
    Ok(())
}

/// Waits for Ray. Fails fast, with its log, when a container whose node is missing has
/// stopped or restarted since the wait began (a crash loop never becomes ready).
async fn wait(
    engines: &[Engine],
    ray: &RayClient,
    plan: &ClusterPlan,
    timeout: Duration,
    reporter: &dyn Reporter,
) -> Result<Vec<RayNode>, Error> {
    // Each container is looked at through its own host's engine.
    let mut docker_of: HashMap<&str, &Docker> = HashMap::new();
    for c in &plan.containers {
        docker_of.insert(&c.name, &host_engine(engines, &c.host)?.docker);
    }
    let docker_of = |name: &str| docker_of.get(name).copied();
    let task = reporter.task("ray");
    let total = plan.containers.len();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut restarts_before = HashMap::new();
    for c in &plan.containers {
        restarts_before.insert(
            c.name.clone(),
            container_health(docker_of(&c.name), &c.name).await.restarts,
        );
    }
    loop {
        // Poll Ray in slices, looking at the containers in between: when each last
        // started (a node older than its container is a previous life's) and whether a
        // missing node's container has died.
        let mut incarnations = ready::Incarnations::new();
        for c in &plan.containers {
            if let Some(started) = container_health(docker_of(&c.name), &c.name)
                .await
                .started_ms
            {
                incarnations.insert(c.name.clone(), started);
            }
        }
        let slice_end = deadline.min(tokio::time::Instant::now() + Duration::from_secs(2));
        let outcome = ready::wait_ready(
            ray,
            &plan.containers,
            &incarnations,
            slice_end,
            |r: &Readiness| {
                task.update(&format!("{}/{total} nodes ready", r.ready.len()));
            },
        )
        .await;
        let (readiness, error) = match outcome {
            Ok(_) => {
                let nodes = ray.nodes().await.unwrap_or_default();
                let nodes: Vec<RayNode> = nodes.into_iter().filter(RayNode::alive).collect();
                let gpus: f64 = nodes.iter().map(RayNode::gpus).sum();
                task.done(&format!("{total}/{total} nodes alive, {gpus} GPUs"));
                return Ok(nodes);
            }
            Err(failed) => failed,
        };
        // The dashboard can die while its container runs on (`ray start --block` does not
        // exit for it): nothing will answer again, so say so now, with the head's log.
        if error.is_some()
            && let Some(head) = plan.head()
            && let Some(docker) = docker_of(&head.name)
            && let Some(logs) = docker::exec_output(
                docker,
                &head.name,
                &[
                    "tail",
                    "-n",
                    "30",
                    "/tmp/ray/session_latest/logs/dashboard.log",
                ],
            )
            .await
            && logs.contains("The dashboard on node")
            && logs.contains("failed with the following error")
        {
            task.fail("the dashboard died");
            return Err(Error::NodeExited {
                name: format!("{} (its Ray dashboard)", head.name),
                exit_code: -1,
                logs,
            });
        }
        for (name, _) in &readiness.missing {
            let Health {
                running,
                restarts,
                exit_code,
                ..
            } = container_health(docker_of(name), name).await;
            if !running || restarts > restarts_before.get(name).copied().unwrap_or(0) {
                task.fail(&format!("{name} stopped"));
                let logs = tail_logs(docker_of(name), name, 20).await;
                return Err(Error::NodeExited {
                    name: name.clone(),
                    exit_code,
                    logs,
                });
            }
        }
        if tokio::time::Instant::now() < deadline {
            continue;
        }
        task.fail("not ready");
        let mut detail = String::new();
        for (name, problem) in &readiness.missing {
            let logs = tail_logs(docker_of(name), name, 15).await;
            detail.push_str(&format!(
                "\n  {name}: {problem}\n  last lines of its log:\n{logs}"
            ));
        }
        for name in &readiness.unexpected {
            detail.push_str(&format!("\n  unexpected ALIVE node {name}"));
        }
        if let Some(error) = error {
            detail.push_str(&format!("\n  last error: {error}"));
        }
        return Err(Error::NotReady {
            seconds: timeout.as_secs(),
            detail,
        });
    }
}

/// `mkdir -p` of the shared layout, run in `container` through the exec API.
async fn create_layout_inside(docker: &Docker, container: &str, mount: &str) -> Result<(), Error> {
    let mut cmd = vec!["mkdir".to_string(), "-p".to_string()];
    cmd.extend(
        layout::DIRECTORIES
            .iter()
            .map(|dir| format!("{mount}/{dir}")),
    );
    let failed = |source| Error::Docker {
        action: format!("create the shared layout in {container}"),
        source,
    };
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(cmd),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(failed)?;
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.map_err(failed)?
    {
        while output.next().await.is_some() {}
    }
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(failed)?
        .exit_code;
    if code != Some(0) {
        return Err(Error::SharedStorage {
            path: mount.to_string(),
            source: std::io::Error::other(format!("mkdir -p in {container} exited with {code:?}")),
        });
    }
    Ok(())
}

/// A container's state as readiness needs it.
#[derive(Debug, Clone, Copy, Default)]
struct Health {
    running: bool,
    restarts: i64,
    exit_code: i64,
    /// When its current process started (ms since the epoch, the host's clock).
    started_ms: Option<u64>,
}

/// Docker's `2026-11-23T05:12:34.123456789Z` as ms since the epoch.
fn epoch_ms(rfc3339: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as u64)
}

/// The last lines of a container's log, through its host's engine.
async fn tail_logs(docker: Option<&Docker>, name: &str, lines: usize) -> String {
    match docker {
        Some(docker) => docker::tail_logs(docker, name, lines).await,
        None => "    (its host is not connected)".to_string(),
    }
}

/// A missing container (or one on a host not connected) is not running.
async fn container_health(docker: Option<&Docker>, name: &str) -> Health {
    let Some(docker) = docker else {
        return Health {
            exit_code: -1,
            ..Health::default()
        };
    };
    match docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
    {
        Ok(info) => {
            let state = info.state.unwrap_or_default();
            Health {
                running: state.running == Some(true) && state.restarting != Some(true),
                restarts: info.restart_count.unwrap_or(0),
                exit_code: state.exit_code.unwrap_or(-1),
                started_ms: state.started_at.as_deref().and_then(epoch_ms),
            }
        }
        Err(_) => Health {
            exit_code: -1,
            ..Health::default()
        },
    }
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
        shared_kept: loaded.shared_host_path().map(|p| p.display().to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadedProfile;

    fn plan() -> ClusterPlan {
        plan::plan(
            &LoadedProfile::load(None).unwrap(),
            &PlanInputs {
                image_id: "sha256:1".into(),
                ..Default::default()
            },
        )
    }

    fn running(c: &ContainerPlan) -> Observed {
        Observed {
            host: c.host.clone(),
            id: c.name.clone(),
            name: c.name.clone(),
            state: "running".into(),
            spec: Some(c.spec_hash()),
        }
    }

    #[test]
    fn dockers_start_times_parse_to_the_millisecond() {
        assert_eq!(
            epoch_ms("2026-11-23T05:12:34.123456789Z"),
            Some(1_795_410_754_123)
        );
        assert_eq!(epoch_ms("0001-01-01T00:00:00Z"), None);
    }

    #[test]
    fn converged_cluster_only_keeps() {
        let plan = plan();
        let observed: Vec<_> = plan.containers.iter().map(running).collect();
        assert!(diff(&plan, &observed).iter().all(|a| !a.changes()));
    }

    #[test]
    fn missing_exited_changed_and_extra_containers_are_acted_on() {
        let plan = plan();
        let mut observed: Vec<_> = plan.containers.iter().map(running).collect();
        observed.remove(2);
        observed[1].state = "exited".into();
        observed.push(Observed {
            host: "local".into(),
            id: "x".into(),
            name: "argus-local-old-0".into(),
            state: "running".into(),
            spec: None,
        });
        let actions = diff(&plan, &observed);
        assert_eq!(
            actions[0],
            Action::Keep {
                name: "argus-local-head".into(),
                host: "local".into(),
            }
        );
        assert_eq!(
            actions[1],
            Action::Recreate {
                name: "argus-local-gpu-0".into(),
                host: "local".into(),
                reason: "container is exited".into()
            }
        );
        assert_eq!(
            actions[2],
            Action::Create {
                name: "argus-local-gpu-1".into(),
                host: "local".into(),
            }
        );
        assert_eq!(
            actions[3],
            Action::Remove {
                name: "argus-local-old-0".into(),
                host: "local".into(),
                reason: "not in the profile".into()
            }
        );
    }

    #[test]
    fn a_replaced_head_takes_the_workers_with_it() {
        let plan = plan();
        let mut observed: Vec<_> = plan.containers.iter().map(running).collect();
        observed[0].spec = Some("old".into());
        let actions = diff(&plan, &observed);
        assert!(
            actions.iter().all(|a| matches!(a, Action::Recreate { .. })),
            "{actions:?}"
        );
    }
}
