//! The network as each host sees it, through short-lived probe containers of the cluster's
//! image: the interface a host reaches the head through, whether the head's GCS answers from
//! there, and who listens on the ports the cluster's nodes need (`ports`). Also what `up`
//! learns before creating the containers: the interface `NCCL_SOCKET_IFNAME` /
//! `GLOO_SOCKET_IFNAME` must name when Ray spans hosts with host networking.
//!
//!
//! The probe containers themselves, and what each is given and why: `netprobe`.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::Docker;
use futures_util::future::join_all;

use super::netprobe::{
    ConnectSeen, PROBE_TIMEOUT, ProbeArgs, Seen, UP_PROBE_TIMEOUT, probe, probe_route,
};
use super::{Check, Status};
use crate::cluster::docker;
use crate::cluster::hosts::Engine;
use crate::cluster::plan::{ClusterPlan, LABEL_CLUSTER};
use crate::config::LoadedProfile;
use crate::config::profile::{NetworkMode, Profile};

/// The variables naming the interface of collectives.
pub const IFACE_VARS: [&str; 2] = ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"];

/// Where Ray's nodes find the head: the head host's address in host mode (127.0.0.1 on one
/// host without one), the head container's name on a bridge network.
pub fn head_address(p: &Profile) -> String {
    let head_host = p.head_host();
    if p.network.mode != NetworkMode::Host {
        return crate::cluster::plan::head_name(&p.name);
    }
    p.hosts
        .iter()
        .find(|h| h.name == head_host)
        .map(|h| h.address.to_string())
        .or_else(|| p.network.head_address.map(|a| a.to_string()))
        .unwrap_or_else(|| "127.0.0.1".to_string())
}

/// True when argus sets the collectives' interface: Ray spans several hosts with host
/// networking. On a bridge network each container has one interface (its `eth0` on the
/// cluster's network) and one host: NCCL and Gloo find it themselves; on one host with host
/// networking every rank is on the same machine.
pub fn sets_iface(p: &Profile) -> bool {
    p.network.mode == NetworkMode::Host && p.hosts.len() > 1
}

/// `up`, host networking across hosts: the interface each host reaches the head through,
/// learned by a probe on every host at once, for `NCCL_SOCKET_IFNAME` and
/// `GLOO_SOCKET_IFNAME`. Empty when the profile sets both itself (nothing is probed) or
/// argus sets nothing. A host whose probe fails is an error (named): a container of the
/// cluster's image could not run there, and planning without it would change that host's
/// containers.
pub async fn ifaces_for_up(
    p: &Profile,
    engines: &[Engine],
    image_id: &str,
    dry_run: bool,
) -> Result<BTreeMap<String, String>, (String, String)> {
    if !sets_iface(p) || IFACE_VARS.iter().all(|v| p.env.contains_key(*v)) {
        return Ok(BTreeMap::new());
    }
    let args = ProbeArgs {
        image_id: image_id.to_string(),
        head_address: head_address(p),
        gcs_port: p.ray.gcs_port,
        cluster: p.name.clone(),
        ..Default::default()
    };
    // A host whose running containers carry the interface argus gave them keeps it (an
    // unchanged cluster is not probed, and a dry run starts nothing); the others are
    // probed, except on a dry run (their containers are to be made: the value is learned
    // then).
    let seen = join_all(engines.iter().map(|e| {
        let args = &args;
        async move {
            if let Some(iface) = iface_in_use(p, &e.docker).await {
                return (e.name.clone(), Some(Ok(iface)));
            }
            if dry_run {
                return (e.name.clone(), None);
            }
            let outcome = probe_route(&e.docker, args, UP_PROBE_TIMEOUT)
                .await
                .and_then(|seen| {
                    seen.route
                        .iface
                        .ok_or_else(|| seen.route.error.unwrap_or_else(|| "no interface".into()))
                });
            (e.name.clone(), Some(outcome))
        }
    }))
    .await;
    let mut ifaces = BTreeMap::new();
    for (host, outcome) in seen {
        match outcome {
            Some(Ok(iface)) => {
                ifaces.insert(host, iface);
            }
            Some(Err(why)) => return Err((host, why)),
            None => {}
        }
    }
    Ok(ifaces)
}

/// The interface variable argus set on this cluster's running containers on a host
/// (one the profile does not set itself), bounded; None when there is none to read.
async fn iface_in_use(p: &Profile, docker: &Docker) -> Option<String> {
    let var = IFACE_VARS.iter().find(|v| !p.env.contains_key(**v))?;
    let look = async {
        let label = format!("{LABEL_CLUSTER}={}", p.name);
        let list = docker::containers_labelled(docker, &label).await.ok()?;
        for c in list
            .iter()
            .filter(|c| c.state.as_ref().is_some_and(|s| s.to_string() == "running"))
        {
            let Some(id) = c.id.as_deref() else { continue };
            let Ok(info) = docker.inspect_container(id, None).await else {
                continue;
            };
            let env = info.config.and_then(|c| c.env).unwrap_or_default();
            let prefix = format!("{var}=");
            if let Some(value) = env.iter().find_map(|e| e.strip_prefix(&prefix)) {
                return Some(value.to_string());
            }
        }
        None
    };
    tokio::time::timeout(PROBE_TIMEOUT, look)
        .await
        .ok()
        .flatten()
}

/// Whether an `NCCL_SOCKET_IFNAME` value selects `iface`: a comma-separated list of
/// prefixes (`eth` selects `eth0`), `=name` for an exact name, a leading `^` excluding
/// the listed ones instead.
pub fn nccl_selects(value: &str, iface: &str) -> bool {
    let (exclude, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let matches = list
        .split(',')
        .map(str::trim)
        .any(|item| match item.strip_prefix('=') {
            Some(exact) => exact == iface,
            None => !item.is_empty() && iface.starts_with(item),
        });
    matches != exclude
}

/// Whether a `GLOO_SOCKET_IFNAME` value (one name, or several comma-separated) names `iface`.
pub fn gloo_selects(value: &str, iface: &str) -> bool {
    value.split(',').map(str::trim).any(|item| item == iface)
}

/// The `head_route` check of one host from its probe.
pub fn route_check(host: &str, head: &str, gcs_port: u16, seen: &Seen) -> Check {
    let route = match (&seen.route.iface, &seen.route.error) {
        (Some(iface), _) => format!(
            "reaches the head {head} through {iface}{}",
            seen.route
                .source
                .as_deref()
                .map(|s| format!(" (from {s})"))
                .unwrap_or_default()
        ),
        (None, error) => {
            return Check {
                name: "head_route",
                status: Status::Fail,
                seen: format!(
                    "no route to the head {head}: {}",
                    error.as_deref().unwrap_or("no interface")
                ),
                why: "Ray on this host must reach the head's GCS to join the cluster".into(),
                fix: format!(
                    "give host {host} a route to {head} (ip route), or correct the head's address in the profile (hosts[].address)"
                ),
            };
        }
    };
    match &seen.connect {
        None => Check {
            name: "head_route",
            status: Status::Ok,
            seen: format!("{route}; the cluster is not up: GCS not dialled"),
            why: String::new(),
            fix: String::new(),
        },
        Some(ConnectSeen { ms: Some(ms), .. }) => Check {
            name: "head_route",
            status: Status::Ok,
            seen: format!("{route}; GCS {head}:{gcs_port} answered in {ms:.1} ms"),
            why: String::new(),
            fix: String::new(),
        },
        Some(ConnectSeen { error, .. }) => Check {
            name: "head_route",
            status: Status::Fail,
            seen: format!(
                "{route}, but the GCS {head}:{gcs_port} does not answer from host {host}: {}",
                error.as_deref().unwrap_or("no answer")
            ),
            why: "Ray on this host cannot reach the head: its node never joins or is lost, and its workers' collectives fail".into(),
            fix: format!(
                "allow TCP from host {host} to {head} port {gcs_port} and to the head's port block (20000 + 1000·n): look for a firewall rule on either host (iptables -S, nft list ruleset)"
            ),
        },
    }
}

/// The `collective_iface` check of one host: the interface variables its containers have
/// (`env`: the running containers', else the plan's) against the interface the probe saw.
pub fn iface_check(host: &str, iface: &str, env: &BTreeMap<String, String>) -> Check {
    let mut wrong = Vec::new();
    let mut missing = Vec::new();
    for var in IFACE_VARS {
        match env.get(var) {
            None => missing.push(var),
            Some(value) => {
                let selects = if var == "NCCL_SOCKET_IFNAME" {
                    nccl_selects(value, iface)
                } else {
                    gloo_selects(value, iface)
                };
                if !selects {
                    wrong.push(format!("{var}={value}"));
                }
            }
        }
    }
    let set: Vec<String> = IFACE_VARS
        .iter()
        .filter_map(|v| env.get(*v).map(|value| format!("{v}={value}")))
        .collect();
    if !wrong.is_empty() {
        return Check {
            name: "collective_iface",
            status: Status::Fail,
            seen: format!(
                "{} on host {host}, which reaches the head through {iface}",
                wrong.join(", ")
            ),
            why: "NCCL and Gloo bind the interface these name: one the other hosts cannot reach hangs every collective until its timeout".into(),
            fix: format!(
                "set them to {iface} for this host (a node's env in the profile), or remove them from the profile's env: argus then sets them from each host's route to the head"
            ),
        };
    }
    if !missing.is_empty() {
        return Check {
            name: "collective_iface",
            status: Status::Warn,
            seen: format!(
                "{} not set on host {host} (it reaches the head through {iface})",
                missing.join(", ")
            ),
            why: "without them NCCL and Gloo choose an interface themselves, with host networking often docker0 or another that the other hosts cannot reach".into(),
            fix: "run `argus up` again (it sets both from each host's route to the head), or set them in the profile's env".into(),
        };
    }
    Check {
        name: "collective_iface",
        status: Status::Ok,
        seen: format!(
            "{} (host {host} reaches the head through {iface})",
            set.join(", ")
        ),
        why: String::new(),
        fix: String::new(),
    }
}

/// A check that could not be made because the probe did not run.
pub fn unknown(name: &'static str, host: &str, detail: &str) -> Check {
    Check {
        name,
        status: Status::Unknown,
        seen: format!("the network probe on host {host} failed: {detail}"),
        why: "argus looks at the host's network from a short-lived container of the cluster's image".into(),
        fix: "see that the host's engine runs containers of the image (`argus up` brings the image to every host), then run doctor again".into(),
    }
}

/// A `ports` check for a plan whose blocks `up` would refuse (another argus cluster holds
/// them), on the host the clash names.
fn clash_on(host: &str, clash: &str) -> Option<Check> {
    clash
        .contains(&format!("host {host} "))
        .then(|| Check {
            name: "ports",
            status: Status::Fail,
            seen: clash.to_string(),
            why: "`argus up` refuses a cluster whose ports another argus cluster holds".into(),
            fix: "give the cluster ports the other does not use (ray.gcs_port, ray.dashboard_port), fewer nodes on that host, or take the other cluster down first".into(),
        })
}

/// One host's network checks: `ports`, and with host networking `head_route` and (across
/// hosts) `collective_iface`. `plan` has the blocks `up` would choose (`clash`: why it would
/// refuse them); `image_id` is the profile's image on this host (None: absent). Bounded by
/// the probe's timeout and the engine's answers.
pub async fn host_checks(
    loaded: &LoadedProfile,
    plan: &ClusterPlan,
    clash: Option<&str>,
    engine: &Engine,
    image_id: Option<&str>,
) -> Vec<Check> {
    let bound = PROBE_TIMEOUT + Duration::from_secs(3);
    let checks = host_checks_unbounded(loaded, plan, clash, engine, image_id);
    match tokio::time::timeout(bound, checks).await {
        Ok(checks) => checks,
        Err(_) => {
            let host = engine.name.as_str();
            let why = format!("no answer within {}s", bound.as_secs());
            let mut checks = vec![unknown("ports", host, &why)];
            if loaded.profile.network.mode == NetworkMode::Host {
                checks.push(unknown("head_route", host, &why));
            }
            checks
        }
    }
}

async fn host_checks_unbounded(
    loaded: &LoadedProfile,
    plan: &ClusterPlan,
    clash: Option<&str>,
    engine: &Engine,
    image_id: Option<&str>,
) -> Vec<Check> {
    let p = &loaded.profile;
    let host = engine.name.as_str();
    let host_mode = p.network.mode == NetworkMode::Host;
    let head = head_address(p);
    let head = head.as_str();
    let needs = super::ports::needs_on(plan, loaded, host);
    let own: Vec<crate::cluster::observe::Observed> =
        crate::cluster::observe::observe(&engine.docker, &p.name)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.state == "running")
            .collect();
    // The running containers' interface variables and published ports.
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut published: Vec<u16> = Vec::new();
    for o in &own {
        let Ok(info) = engine.docker.inspect_container(&o.id, None).await else {
            continue;
        };
        for pair in info.config.and_then(|c| c.env).unwrap_or_default() {
            if let Some((k, v)) = pair.split_once('=')
                && IFACE_VARS.contains(&k)
            {
                env.insert(k.to_string(), v.to_string());
            }
        }
        let bindings = info
            .host_config
            .and_then(|h| h.port_bindings)
            .unwrap_or_default();
        for list in bindings.into_values().flatten() {
            for b in list {
                if let Some(port) = b.host_port.and_then(|p| p.parse().ok()) {
                    published.push(port);
                }
            }
        }
    }
    let clash = clash.and_then(|c| clash_on(host, c));
    let Some(image_id) = image_id.map(str::to_string) else {
        let why = format!("the image {} is not on this host yet", p.image);
        let mut checks = vec![clash.unwrap_or_else(|| unknown("ports", host, &why))];
        if host_mode {
            checks.push(unknown("head_route", host, &why));
        }
        return checks;
    };
    let args = ProbeArgs {
        image_id,
        head_address: head.to_string(),
        gcs_port: p.ray.gcs_port,
        // The cluster's containers run here: the head must answer.
        dial: host_mode && !own.is_empty(),
        ranges: super::ports::ranges(&needs),
        own_ids: own.iter().map(|o| o.id.clone()).collect(),
        cluster: p.name.clone(),
    };
    let seen = match probe(&engine.docker, &args, PROBE_TIMEOUT).await {
        Ok(seen) => seen,
        Err(e) => {
            let mut checks = vec![clash.unwrap_or_else(|| unknown("ports", host, &e))];
            if host_mode {
                checks.push(unknown("head_route", host, &e));
            }
            return checks;
        }
    };
    let mut checks = vec![clash.unwrap_or_else(|| {
        super::ports::ports_check(host, &needs, &seen.listeners, seen.partial, &published)
    })];
    // On a bridge network the nodes reach the head inside the cluster's network, not
    // through the host's routes: Ray's readiness (`status`) is that network's check.
    if host_mode {
        checks.push(route_check(host, head, p.ray.gcs_port, &seen));
        if sets_iface(p)
            && let Some(iface) = &seen.route.iface
        {
            // Not up: what the plan would set (the profile's, or argus's at `up`).
            if own.is_empty() {
                env = plan
                    .containers
                    .iter()
                    .find(|c| c.host == host)
                    .map(|c| {
                        c.env
                            .iter()
                            .filter(|(k, _)| IFACE_VARS.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                for var in IFACE_VARS {
                    env.entry(var.to_string()).or_insert_with(|| iface.clone());
                }
            }
            checks.push(iface_check(host, iface, &env));
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::super::netprobe::RouteSeen;
    use super::*;

    #[test]
    fn nccl_values_select_as_nccl_reads_them() {
        assert!(nccl_selects("eth0", "eth0"));
        assert!(nccl_selects("eth", "eth0"));
        assert!(!nccl_selects("=eth", "eth0"));
        assert!(nccl_selects("=eth0", "eth0"));
        assert!(nccl_selects("ib,eth0", "eth0"));
        assert!(!nccl_selects("^eth", "eth0"));
        assert!(nccl_selects("^docker,lo", "eth0"));
        assert!(!nccl_selects("docker0", "eth0"));
        assert!(gloo_selects("eth0", "eth0"));
        assert!(!gloo_selects("eth", "eth0"));
    }

    /// What `up` learned per host goes into that host's nodes, under what the profile sets.
    #[test]
    fn the_learned_interface_is_each_nodes_unless_the_profile_sets_it() {
        use crate::cluster::plan::{PlanInputs, plan};
        use crate::config::yaml::Source;
        let text = std::fs::read_to_string("profiles/multi-host.yaml").expect("profile");
        let inputs = |p: &Profile| PlanInputs {
            collective_iface: p
                .hosts
                .iter()
                .map(|h| (h.name.clone(), format!("if-{}", h.name)))
                .collect(),
            ..Default::default()
        };
        let loaded = LoadedProfile::from_source(Source::new("m.yaml", text.clone())).expect("load");
        assert!(sets_iface(&loaded.profile));
        let planned = plan(&loaded, &inputs(&loaded.profile));
        for c in &planned.containers {
            let want = format!("if-{}", c.host);
            assert_eq!(c.env["NCCL_SOCKET_IFNAME"], want, "{}", c.name);
            assert_eq!(c.env["GLOO_SOCKET_IFNAME"], want, "{}", c.name);
        }
        let text = text.replace("network:\n", "env: {NCCL_SOCKET_IFNAME: ib0}\nnetwork:\n");
        let loaded = LoadedProfile::from_source(Source::new("m.yaml", text)).expect("load");
        let planned = plan(&loaded, &inputs(&loaded.profile));
        assert_eq!(planned.containers[1].env["NCCL_SOCKET_IFNAME"], "ib0");
        assert_eq!(planned.containers[1].env["GLOO_SOCKET_IFNAME"], "if-gpu-b");
        // One host on a bridge network: nothing set (one interface per container).
        assert!(!sets_iface(
            &LoadedProfile::load(None).expect("built-in").profile
        ));
    }

    #[test]
    fn a_wrong_interface_fails_and_names_the_right_one() {
        let env = BTreeMap::from([
            ("NCCL_SOCKET_IFNAME".to_string(), "docker0".to_string()),
            ("GLOO_SOCKET_IFNAME".to_string(), "eth0".to_string()),
        ]);
        let check = iface_check("b", "eth0", &env);
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.seen.contains("NCCL_SOCKET_IFNAME=docker0"),
            "{check:?}"
        );
        assert!(check.fix.contains("eth0"));
        let check = iface_check("b", "eth0", &BTreeMap::new());
        assert_eq!(check.status, Status::Warn);
    }

    #[test]
    fn a_gcs_that_does_not_answer_is_a_failure_naming_the_host() {
        let seen = Seen {
            route: RouteSeen {
                iface: Some("eth0".into()),
                source: Some("10.0.0.3".into()),
                error: None,
            },
            connect: Some(ConnectSeen {
                ms: None,
                error: Some("no answer within 2s".into()),
            }),
            ..Default::default()
        };
        let check = route_check("c", "10.0.0.1", 6379, &seen);
        assert_eq!(check.status, Status::Fail);
        assert!(check.seen.contains("from host c"), "{}", check.seen);
        assert!(check.fix.contains("iptables"), "{}", check.fix);
    }
}
