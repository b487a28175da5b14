//! `argus doctor`: what a cluster needs from each host, checked before it is needed and
//! explained (what was seen, why it matters, the fix). Every check is bounded in time; a
//! check that could not be made says so (`Unknown`), it never passes silently.
//!
//! The checks of one host run together; the hosts run together. The cheap ones also run
//! first inside `up` ([`preflight`]), so an up that will fail says why in its first second.

pub mod clock;
pub mod collective;
mod cuda;
mod disk;
mod engine;
mod gpus;
mod image;
pub mod image_tools;
pub mod netprobe;
pub mod network;
pub mod ports;
mod probe;
mod report;
mod shm;

pub use report::{CLUSTER, Check, HostReport, NAMES, Report, Status};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::Error;
use super::hosts::{self, Engine};
use super::plan::{self, ClusterPlan, ContainerPlan, PlanInputs, SharedMount};
use crate::config::LoadedProfile;
use crate::ui::Reporter;

/// How long one check may take (one engine request, one probe container).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What a per-host check is given.
pub struct HostContext<'a> {
    pub loaded: &'a LoadedProfile,
    /// The host's name (`local` without `hosts:`).
    pub host: &'a str,
    pub engine: &'a Engine,
    /// This host runs the head.
    pub head_host: bool,
    /// The plan with the port blocks `up` would choose (default blocks when it would
    /// refuse them: `plan_clash` says why).
    pub plan: &'a ClusterPlan,
    pub plan_clash: Option<&'a str>,
    /// The plan's containers on this host.
    pub nodes: Vec<&'a ContainerPlan>,
    /// The profile image's id on this host (None: absent).
    pub image_id: Option<&'a str>,
    /// The bound of one check.
    pub deadline: Duration,
}

impl<'a> HostContext<'a> {
    /// The context of `engine`'s host in `plan`: whether it runs the head, and the plan's
    /// containers there, derived from the plan.
    fn new(
        loaded: &'a LoadedProfile,
        engine: &'a Engine,
        plan: &'a ClusterPlan,
        plan_clash: Option<&'a str>,
        image_id: Option<&'a str>,
    ) -> HostContext<'a> {
        let host = engine.name.as_str();
        HostContext {
            loaded,
            host,
            engine,
            head_host: host == plan.head_host(),
            plan,
            plan_clash,
            nodes: plan.containers.iter().filter(|c| c.host == host).collect(),
            image_id,
            deadline: CHECK_TIMEOUT,
        }
    }
}

/// Every check of the profile's cluster, on every host at once. Never an error: what could
/// not be checked is an `Unknown` check saying why.
pub async fn run(loaded: &LoadedProfile, reporter: &dyn Reporter) -> Report {
    let started = Instant::now();
    let task = reporter.task("doctor");
    let hosts = match hosts::cluster_hosts(loaded) {
        Ok(hosts) => hosts,
        Err(e) => {
            task.fail("bad endpoint");
            let check = Check::unknown("engine", e.to_string(), "no engine can be dialled");
            return Report {
                hosts: vec![HostReport {
                    host: "cluster".into(),
                    checks: vec![check],
                }],
            };
        }
    };
    task.update(&format!("dialling {} engine(s)", hosts.len()));
    let image = loaded.profile.image.as_str();
    let ((engines, unreachable), local_id) = tokio::join!(
        hosts::connect_all(&hosts, CHECK_TIMEOUT),
        local_image_id(loaded, image)
    );
    let facts = join_all(
        engines
            .iter()
            .map(|e| engine::read(&e.docker, image, CHECK_TIMEOUT)),
    )
    .await;
    // An engine that connected but did not answer `/info` in time is left out of what
    // follows (the plan's ports, the probes, the storage): it would only cost more timeouts.
    let (answered, stuck): (Vec<_>, Vec<_>) = engines
        .into_iter()
        .zip(facts)
        .partition(|(_, f)| f.info.is_ok());
    let (engines, facts): (Vec<Engine>, Vec<engine::EngineFacts>) = answered.into_iter().unzip();
    let ids: Vec<(String, Option<String>)> = engines
        .iter()
        .zip(&facts)
        .map(|(e, f)| (e.name.clone(), f.image_id.clone().ok().flatten()))
        .collect();
    let wanted = image::wanted(local_id.as_deref(), &ids);
    let wanted_id = wanted.as_ref().map(|w| w.id.clone()).unwrap_or_default();
    let (plan, clash) = plan_for(loaded, &engines, &wanted_id).await;

    task.update("probing the hosts");
    let per_host = join_all(engines.iter().zip(&facts).map(|(engine, facts)| {
        let image_id = facts.image_id.as_ref().ok().and_then(|id| id.as_deref());
        let cx = HostContext::new(loaded, engine, &plan, clash.as_deref(), image_id);
        let wanted = wanted.as_ref();
        async move { host_report(&cx, facts, wanted).await }
    }));
    let images: BTreeMap<String, String> = ids
        .iter()
        .filter_map(|(host, id)| Some((host.clone(), id.clone()?)))
        .collect();
    let (mut reports, storage) = tokio::join!(
        per_host,
        shared_storage(&engines, &plan, &images, unreachable.len() + stuck.len())
    );
    for report in &mut reports {
        if let Some(check) = storage.get(&report.host) {
            report.checks.push(check.clone());
        }
    }
    for (e, f) in &stuck {
        reports.push(HostReport {
            host: e.name.clone(),
            checks: vec![engine::check(f)],
        });
    }
    for u in &unreachable {
        reports.push(HostReport {
            host: u.host.clone(),
            checks: vec![engine::unreachable(&u.endpoint, &u.reason)],
        });
    }
    // The hosts in the profile's order.
    let order = |host: &str| hosts.iter().position(|h| h.name == host);
    reports.sort_by_key(|r| order(&r.host));
    let report = Report { hosts: reports };
    task.done(&format!(
        "{} host(s) checked in {:.1}s",
        hosts.len(),
        started.elapsed().as_secs_f64()
    ));
    report
}

/// The checks of one host of a cluster planned elsewhere (`plan`), made on that host: the
/// Slurm node step's doctor, whose engine is the node's own and whose plan is the job's
/// (its port slot, its cluster name). `image_id` is the id every node must have (the
/// run's). The cross-host checks are the caller's.
pub async fn one_host(
    loaded: &LoadedProfile,
    plan: &ClusterPlan,
    host: &str,
    image_id: &str,
) -> HostReport {
    let report = |checks| HostReport {
        host: host.to_string(),
        checks,
    };
    let found = hosts::cluster_hosts(loaded)
        .ok()
        .and_then(|hosts| hosts.into_iter().find(|h| h.name == host));
    let Some(found) = found else {
        return report(vec![Check::unknown(
            "engine",
            format!("{host} is not a host of the cluster"),
            "no engine to dial",
        )]);
    };
    let (engines, unreachable) = hosts::connect_all(&[found], CHECK_TIMEOUT).await;
    let Some(engine) = engines.into_iter().next() else {
        let checks = unreachable
            .iter()
            .map(|u| engine::unreachable(&u.endpoint, &u.reason))
            .collect();
        return report(checks);
    };
    let facts = engine::read(&engine.docker, &loaded.profile.image, CHECK_TIMEOUT).await;
    if facts.info.is_err() {
        return report(vec![engine::check(&facts)]);
    }
    let wanted = image::Wanted {
        id: image_id.to_string(),
        on: "the run's record".into(),
        alone: false,
    };
    let image_id = facts.image_id.as_ref().ok().and_then(|id| id.as_deref());
    let cx = HostContext::new(loaded, &engine, plan, None, image_id);
    host_report(&cx, &facts, Some(&wanted)).await
}

/// The most one host's probes may take together (the resources probe and the network
/// probe run side by side, each bounded; this bounds them both with their engine
/// requests), so that one slow host cannot hold the whole doctor: what is not seen by then
/// is `Unknown`, saying so.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(12);

/// The profile image's id on this machine's engine, the source `up` copies from (only with
/// `hosts:`; without, the one host is this machine's engine).
async fn local_image_id(loaded: &LoadedProfile, image: &str) -> Option<String> {
    if !loaded.has_hosts() {
        return None;
    }
    let local = async {
        let docker = super::docker::connect(None).await.ok()?;
        docker.inspect_image(image).await.ok()?.id
    };
    tokio::time::timeout(CHECK_TIMEOUT, local)
        .await
        .ok()
        .flatten()
}

/// The plan with the port blocks `up` would choose; when it would refuse them (another
/// cluster holds them), the default blocks and why.
async fn plan_for(
    loaded: &LoadedProfile,
    engines: &[Engine],
    image_id: &str,
) -> (ClusterPlan, Option<String>) {
    let held = tokio::time::timeout(
        CHECK_TIMEOUT,
        super::held::observe_ports(engines, &loaded.profile.name),
    )
    .await;
    let (first_block, clash) = match held {
        Ok(Ok((held, own))) => match plan::choose_first_blocks(&loaded.profile, &held, &own) {
            Ok(blocks) => (blocks, None),
            Err(clash) => (BTreeMap::new(), Some(clash.to_string())),
        },
        Ok(Err(e)) => {
            tracing::debug!("the ports other clusters hold: {e}");
            (BTreeMap::new(), None)
        }
        Err(_) => (BTreeMap::new(), None),
    };
    let inputs = PlanInputs {
        image_id: image_id.to_string(),
        first_block,
        ..Default::default()
    };
    (plan::plan(loaded, &inputs), clash)
}

/// One host's checks: from its engine's answers, its probe, and the network's (H2).
async fn host_report(
    cx: &HostContext<'_>,
    facts: &engine::EngineFacts,
    wanted: Option<&image::Wanted>,
) -> HostReport {
    let image = &cx.loaded.profile.image;
    let mut checks = vec![
        engine::check(facts),
        clock::check(facts.clock),
        image::check(image, &facts.image_id, wanted),
    ];
    let probing = probe_host(cx, facts.info());
    let network = network::host_checks(cx.loaded, cx.plan, cx.plan_clash, cx.engine, cx.image_id);
    let cuda = cuda::check(cx);
    let tools = tools_check(cx);
    match tokio::time::timeout(PROBE_DEADLINE, async {
        tokio::join!(probing, network, cuda, tools)
    })
    .await
    {
        Ok((outcome, network, cuda, tools)) => {
            checks.push(tools);
            checks.extend(probe_checks(cx, facts.info(), outcome.as_ref(), false));
            checks.extend(cuda);
            checks.extend(network);
        }
        Err(_) => {
            // The probes cut short could not remove their containers.
            netprobe::remove_probes(&cx.engine.docker, &cx.plan.cluster).await;
            checks.push(Check::unknown(
                "probe",
                format!(
                    "host {}'s probes did not end within {}s",
                    cx.host,
                    PROBE_DEADLINE.as_secs()
                ),
                "its engine or its probe containers are too slow: what the probes read (GPUs, /dev/shm, disks, ports, the route to the head) is not known",
            ));
        }
    }
    HostReport {
        host: cx.host.to_string(),
        checks,
    }
}

/// `image_tools` of one host: what argus runs in the image is there.
async fn tools_check(cx: &HostContext<'_>) -> Check {
    let image = &cx.loaded.profile.image;
    let seen = match cx.image_id {
        Some(id) => {
            image_tools::inspect(&cx.engine.docker, &cx.plan.cluster, id, cx.deadline).await
        }
        None => Err(format!(
            "{image} is not on this host, and the probe runs it"
        )),
    };
    image_tools::check(image, &seen)
}

/// The probe of one host (None: the image is not there to run it).
async fn probe_host(
    cx: &HostContext<'_>,
    info: Option<&bollard::models::SystemInfo>,
) -> Option<probe::Outcome> {
    let image_id = cx.image_id?;
    let (nvidia, amd) = gpus::needs(&cx.nodes);
    let spec = probe::ProbeSpec {
        cluster: cx.plan.cluster.clone(),
        image_id: image_id.to_string(),
        mount: shared_mount(cx.plan)?,
        data_root: info.and_then(|i| i.docker_root_dir.clone()),
        host_dev: nvidia || amd,
        nvidia,
    };
    Some(probe::probe(&cx.engine.docker, &spec, cx.deadline).await)
}

/// The shared storage as the nodes mount it.
fn shared_mount(plan: &ClusterPlan) -> Option<SharedMount> {
    plan.containers.first().map(|c| c.mount.clone())
}

/// The checks the probe's facts answer: GPUs, `/dev/shm`, memlock, disks (`in_up`: `up`
/// is about to make what is missing on a single host).
fn probe_checks(
    cx: &HostContext<'_>,
    info: Option<&bollard::models::SystemInfo>,
    outcome: Option<&probe::Outcome>,
    in_up: bool,
) -> Vec<Check> {
    let why_not = match outcome {
        None => Some(format!(
            "{} is not on this host, and the probe runs it: `argus up` brings it",
            cx.loaded.profile.image
        )),
        Some(probe::Outcome::Failed(e)) => Some(format!("the probe failed: {e}")),
        Some(_) => None,
    };
    let mut checks = match (outcome, &why_not) {
        (Some(outcome), _) => gpus::checks(&cx.nodes, outcome, info),
        (None, Some(why)) => gpus::checks(&cx.nodes, &probe::Outcome::Failed(why.clone()), info),
        (None, None) => Vec::new(),
    };
    let facts = match outcome {
        Some(probe::Outcome::Ran(f)) => Some(f),
        Some(probe::Outcome::NvidiaRefused { facts, .. }) => facts.as_ref(),
        _ => None,
    };
    let Some(facts) = facts else {
        let why = why_not.unwrap_or_else(|| "the probe did not run".into());
        for name in ["shm", "memlock", "disk_shared", "disk_engine"] {
            checks.push(Check::unknown(
                name,
                why.clone(),
                "the probe reads it inside the host",
            ));
        }
        return checks;
    };
    let memory = info.and_then(|i| i.mem_total).map(|m| m.max(0) as u64);
    checks.push(shm::check(&cx.nodes, facts.shm.map(|s| s.total), memory));
    checks.push(shm::memlock(&cx.nodes, Some(facts)));
    checks.push(shared_disk(cx, facts, in_up));
    let root = info
        .and_then(|i| i.docker_root_dir.as_deref())
        .unwrap_or("the engine's data root");
    checks.push(disk::check(
        "disk_engine",
        &format!("the engine's data root {root}"),
        facts.data_root,
        "free space there (`docker system prune` removes stopped containers and unused images), or move the engine's data-root to a larger disk",
    ));
    checks
}

/// `disk_shared`, or the storage missing on this host.
fn shared_disk(cx: &HostContext<'_>, facts: &probe::Facts, in_up: bool) -> Check {
    let mount = shared_mount(cx.plan);
    let what = match &mount {
        Some(SharedMount::Bind { source, .. }) => {
            format!("the shared storage {}", source.display())
        }
        Some(SharedMount::Volume { name, .. }) => format!("the shared storage (volume {name})"),
        None => "the shared storage".to_string(),
    };
    if let Some(error) = &facts.shared_missing {
        // One host: `up` makes the directory; across hosts it must be the mounted export.
        let volume = matches!(mount, Some(SharedMount::Volume { .. }));
        let (status, fix) = if cx.loaded.has_hosts() && !volume {
            (
                Status::Fail,
                "mount the shared storage (the NFS export) at shared.host_path on this host, or use shared.nfs so that Docker mounts it",
            )
        } else if in_up {
            (Status::Ok, "")
        } else {
            (Status::Warn, "`argus up` creates it")
        };
        return Check {
            name: "disk_shared",
            status,
            seen: format!("{what} does not exist on this host ({error})"),
            why: "datasets, the HF cache, checkpoints and job records live there; every node mounts it".into(),
            fix: fix.into(),
        };
    }
    disk::check(
        "disk_shared",
        &what,
        facts.shared,
        "free space on the shared storage (old checkpoints under jobs/*/checkpoints, `argus snapshot rm`), or grow it",
    )
}

/// `shared_storage` of every host (several hosts only): the head's host writes, the others
/// read (`storage_check`), bounded. `unreachable`: hosts not dialled (never compared).
async fn shared_storage(
    engines: &[Engine],
    plan: &ClusterPlan,
    images: &BTreeMap<String, String>,
    unreachable: usize,
) -> BTreeMap<String, Check> {
    let mut out = BTreeMap::new();
    if engines.len() + unreachable < 2 {
        return out;
    }
    let head_host = plan.head_host();
    let Some(mount) = shared_mount(plan) else {
        return out;
    };
    let target = mount.target().to_string();
    let name = "shared_storage";
    if !images.contains_key(head_host) || !engines.iter().any(|e| e.name == head_host) {
        for e in engines {
            out.insert(
                e.name.clone(),
                Check::unknown(
                    name,
                    format!("the head's host {head_host} cannot write a probe (its engine or the image is missing)"),
                    "the storage is proven the same by a file written on the head's host and read on the others",
                ),
            );
        }
        return out;
    }
    // A volume is compared once `up` has created it everywhere (a probe would create a
    // plain local one).
    if let SharedMount::Volume { name: volume, .. } = &mount {
        let missing = join_all(engines.iter().map(|e| async move {
            let found = tokio::time::timeout(CHECK_TIMEOUT, e.docker.inspect_volume(volume)).await;
            (!matches!(found, Ok(Ok(_)))).then(|| e.name.clone())
        }))
        .await;
        let missing: Vec<String> = missing.into_iter().flatten().collect();
        if !missing.is_empty() {
            for e in engines {
                out.insert(
                    e.name.clone(),
                    Check::unknown(
                        name,
                        format!("volume {volume} is not there on host(s) {}", missing.join(", ")),
                        "`argus up` creates it on every host; the storage is compared once it is there",
                    ),
                );
            }
            return out;
        }
    }
    match super::storage_check::compare(engines, plan, images, CHECK_TIMEOUT).await {
        Err(e) => {
            out.insert(
                head_host.to_string(),
                Check {
                    name,
                    status: Status::Fail,
                    seen: crate::exit::one_line(&e),
                    why: "the head's host cannot write to the shared storage: no job can write its records or checkpoints".into(),
                    fix: format!("make {target} writable on host {head_host} (the mount's options, the directory's owner)"),
                },
            );
        }
        Ok(seen) => {
            out.insert(
                head_host.to_string(),
                Check::ok(
                    name,
                    format!("wrote a probe file at {target}, read back on the other hosts"),
                ),
            );
            for (host, outcome) in seen {
                let check = match outcome {
                    Ok(None) => Check::ok(
                        name,
                        format!("reads at {target} the file host {head_host} wrote, and can write"),
                    ),
                    Ok(Some(detail)) => Check {
                        name,
                        status: Status::Fail,
                        seen: detail,
                        why: "every node must see the same datasets, model cache, code snapshots and checkpoints: a node on another directory fails its job, or writes checkpoints nobody else sees".into(),
                        fix: "mount the same storage (the NFS export) at shared.host_path on every host, or use shared.nfs so that Docker mounts it everywhere".into(),
                    },
                    Err(e) => Check::unknown(
                        name,
                        crate::exit::one_line(&e),
                        "the probe could not read the file back on this host",
                    ),
                };
                out.insert(host, check);
            }
        }
    }
    out
}

/// A check of `up`'s preflight that failed, on its host.
#[derive(Debug, Clone)]
pub struct Finding {
    pub host: String,
    pub check: Check,
}

/// The failed checks as `up`'s error says them.
pub fn findings_text(findings: &[Finding]) -> String {
    let mut text = match findings {
        [one] => format!("host {} cannot run this cluster", one.host),
        _ => format!("{} problems on the cluster's hosts", findings.len()),
    };
    for f in findings {
        text.push_str(&format!(
            "\n  {} {}: {}",
            f.host, f.check.name, f.check.seen
        ));
        if !f.check.why.is_empty() {
            text.push_str(&format!("\n    {}", f.check.why));
        }
    }
    text
}

/// What to do about them.
pub fn findings_fix(findings: &[Finding]) -> String {
    let mut fixes: Vec<String> = Vec::new();
    for f in findings {
        let fix = format!("{} ({})", f.check.fix, f.check.name);
        if !f.check.fix.is_empty() && !fixes.contains(&fix) {
            fixes.push(fix);
        }
    }
    fixes.push("`argus doctor` checks everything else".into());
    fixes.join("; ")
}

/// The cheap checks, first thing in `up` when it is about to create containers: on every
/// host of the plan, the GPU runtime and devices, `/dev/shm`, memlock and the disks (one
/// engine request and one probe container per host, all hosts at once). A check that fails
/// is an error naming it, before anything is created; a doubtful one is a note; one that
/// could not be made is left to `up` itself.
pub async fn preflight(
    engines: &[Engine],
    plan: &ClusterPlan,
    loaded: &LoadedProfile,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let started = Instant::now();
    let Some(image_id) = plan.containers.first().map(|c| c.image_id.clone()) else {
        return Ok(());
    };
    let hosts = engines
        .iter()
        .filter(|e| plan.containers.iter().any(|c| c.host == e.name));
    let checked = join_all(hosts.map(|engine| {
        let image_id = image_id.as_str();
        async move {
            let info = tokio::time::timeout(CHECK_TIMEOUT, engine.docker.info())
                .await
                .ok()
                .and_then(Result::ok);
            let cx = HostContext::new(loaded, engine, plan, None, Some(image_id));
            let outcome = probe_host(&cx, info.as_ref()).await;
            let checks = probe_checks(&cx, info.as_ref(), outcome.as_ref(), true);
            (engine.name.clone(), checks)
        }
    }))
    .await;
    tracing::debug!(
        "preflight: {} host(s) checked in {:.2}s",
        checked.len(),
        started.elapsed().as_secs_f64()
    );
    let mut failed = Vec::new();
    for (host, checks) in checked {
        for check in checks {
            match check.status {
                Status::Fail => failed.push(Finding {
                    host: host.clone(),
                    check,
                }),
                Status::Warn => reporter.note(&format!(
                    "warning: host {host} {}: {} ({})",
                    check.name, check.seen, check.why
                )),
                Status::Unknown => tracing::debug!(
                    "preflight on {host}: {} unknown: {}",
                    check.name,
                    check.seen
                ),
                Status::Ok => {}
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Preflight(failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ups_error_names_each_failed_check_and_gathers_the_fixes() {
        let fail = |name, fix: &str| Check {
            name,
            status: Status::Fail,
            seen: format!("{name} seen"),
            why: format!("{name} matters"),
            fix: fix.to_string(),
        };
        let findings = vec![
            Finding {
                host: "b".into(),
                check: fail("gpu_runtime", "install the toolkit"),
            },
            Finding {
                host: "c".into(),
                check: fail("gpu_runtime", "install the toolkit"),
            },
        ];
        assert_eq!(
            findings_text(&findings),
            "2 problems on the cluster's hosts\n  b gpu_runtime: gpu_runtime seen\n    gpu_runtime matters\n  c gpu_runtime: gpu_runtime seen\n    gpu_runtime matters"
        );
        assert_eq!(
            findings_fix(&findings),
            "install the toolkit (gpu_runtime); `argus doctor` checks everything else"
        );
        let report = Report {
            hosts: vec![HostReport {
                host: "a".into(),
                checks: vec![
                    Check::ok("engine", "up"),
                    Check::unknown("clock", "?", "?"),
                    fail("shm", "more"),
                ],
            }],
        };
        assert_eq!(report.worst(), Status::Fail);
    }
}
