//! `argus up`, `argus down`, `argus status`.

use std::time::Duration;

use crate::commands::error::{Context, Result};

use crate::cli::{DownArgs, UpArgs};
use crate::cluster::plan::{GpuAttach, SharedMount};
use crate::cluster::reconcile::{self, UpOptions};
use crate::cluster::status::{self, StatusReport};
use crate::config::LoadedProfile;
use crate::exit::Exit;
use crate::ui::{Printer, table};

pub async fn up(loaded: &LoadedProfile, args: &UpArgs, printer: &Printer) -> Result<Exit> {
    let name = &loaded.profile.name;
    let timeout = Duration::from_secs(args.timeout.unwrap_or(loaded.profile.ray.ready_timeout_s));
    let reporter = printer.reporter();
    let report = reconcile::up(
        loaded,
        &UpOptions {
            dry_run: args.dry_run,
            timeout,
        },
        &reporter,
    )
    .await
    .with_context(|| format!("cannot bring up cluster {name}"))?;

    if printer.json {
        let mut value = serde_json::to_value(&report)?;
        if args.dry_run {
            value["plan"] = crate::secrets::redact_json(serde_json::to_value(&report.plan)?);
        }
        printer.json(&value);
        return Ok(Exit::Success);
    }
    if args.dry_run {
        printer.data(format!(
            "# plan for cluster {name} (dry run: nothing changed)"
        ));
        for action in &report.actions {
            printer.data(action.to_string());
        }
        printer.data("");
        if loaded.has_hosts() {
            for host in &report.plan.hosts {
                printer.data(format!(
                    "host {}{}: {}",
                    host.name,
                    host.address
                        .as_ref()
                        .map(|a| format!(" ({a})"))
                        .unwrap_or_default(),
                    host.containers.join(", ")
                ));
            }
            printer.data("");
        }
        for c in &report.plan.containers {
            let gpu = match &c.gpu {
                GpuAttach::None => "no GPU".to_string(),
                GpuAttach::Simulated { count } => format!("{count} simulated GPUs"),
                GpuAttach::Nvidia { device_ids } => format!("nvidia GPUs {device_ids:?}"),
                GpuAttach::Amd { device_ids } => format!("amd GPUs {device_ids:?}"),
            };
            let mount = match &c.mount {
                SharedMount::Bind { source, target } => format!("{} -> {target}", source.display()),
                SharedMount::Volume { name, target } => format!("volume {name} -> {target}"),
            };
            printer.data(format!("{}: {gpu}; shared {mount}", c.name));
            printer.data(format!("  {}", shell_words(&c.command)));
        }
        return Ok(Exit::Success);
    }
    let alive = report.nodes.len();
    if report.changed {
        printer.info(format!(
            "cluster {name} is up: {alive} nodes, {} GPUs, in {:.1}s",
            report.gpus, report.seconds
        ));
    } else {
        printer.info(format!(
            "cluster {name} is already up to date: {alive} nodes, {} GPUs (checked in {:.2}s)",
            report.gpus, report.seconds
        ));
    }
    printer.data(format!("dashboard: {}", report.dashboard_url));
    Ok(Exit::Success)
}

pub async fn down(loaded: &LoadedProfile, args: &DownArgs, printer: &Printer) -> Result<Exit> {
    let name = &loaded.profile.name;
    let reporter = printer.reporter();
    let report = reconcile::down(loaded, args.dry_run, &reporter)
        .await
        .with_context(|| format!("cannot take down cluster {name}"))?;
    let exit = if report.unreachable.is_empty() {
        Exit::Success
    } else {
        Exit::Unreachable
    };
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
        return Ok(exit);
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if report.removed_containers.is_empty() && report.removed_network.is_none() {
        printer.info(format!("cluster {name} is already down: nothing to remove"));
    } else {
        for container in &report.removed_containers {
            printer.data(format!("{verb} container {container}"));
        }
        if let Some(network) = &report.removed_network {
            printer.data(format!("{verb} network {network}"));
        }
    }
    if let Some(shared) = &report.shared_kept {
        printer.info(format!("shared storage kept at {shared}"));
    }
    for host in &report.unreachable {
        printer.warn(format!(
            "host {} ({}) did not answer: its containers of cluster {name} are still there ({}); run `argus down` again when it is back",
            host.host, host.endpoint, host.reason
        ));
    }
    Ok(exit)
}

pub async fn status(loaded: &LoadedProfile, printer: &Printer) -> Result<Exit> {
    let report = status::status(loaded)
        .await
        .with_context(|| format!("cannot read the status of cluster {}", loaded.profile.name))?;
    // 4: a host did not answer; 1: the cluster has containers but Ray does not answer
    // (a dead head, a frozen dashboard), so a script can tell a sick cluster from a well one.
    let exit = if report.unreachable().next().is_some() {
        Exit::Unreachable
    } else if report.ray_error.is_some() && !report.containers.is_empty() {
        Exit::Failed
    } else {
        Exit::Success
    };
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
        return Ok(exit);
    }
    printer.data(format!(
        "cluster {}  dashboard {}{}",
        report.cluster,
        report.dashboard_url,
        report
            .ray_version
            .as_ref()
            .map(|v| format!("  ray {v}"))
            .unwrap_or_default()
    ));
    printer.data("");
    printer.data(table(&hosts_table(&report)));
    printer.data("");
    printer.data(table(&containers_table(&report)));
    printer.data("");
    for h in report.unreachable() {
        printer.warn(format!(
            "host {} ({}) is unreachable, so its containers are not listed: {}",
            h.name,
            h.endpoint,
            h.error.as_deref().unwrap_or("no answer")
        ));
    }
    if let Some(error) = &report.ray_error {
        printer.data(format!("ray: {error}"));
        return Ok(exit);
    }
    printer.data(table(&nodes_table(&report)));
    Ok(exit)
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(ToString::to_string).collect()
}

fn hosts_table(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![header(&["HOST", "ENDPOINT", "ENGINE", "IMAGE"])];
    for h in &report.hosts {
        let engine = match (&h.engine_version, &h.error) {
            (_, Some(_)) => "unreachable".to_string(),
            (Some(version), None) => format!("docker {version}"),
            (None, None) => "reachable".to_string(),
        };
        let image = match (&h.image_id, h.reachable) {
            (Some(id), _) => crate::cluster::image::short_id(id).to_string(),
            (None, true) => "absent".to_string(),
            (None, false) => "?".to_string(),
        };
        rows.push(vec![h.name.clone(), h.endpoint.clone(), engine, image]);
    }
    rows
}

fn containers_table(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![header(&["CONTAINER", "HOST", "STATE", "RESTARTS"])];
    rows.extend(report.containers.iter().map(|c| {
        vec![
            c.name.clone(),
            c.host.clone(),
            c.state.clone(),
            c.restarts.to_string(),
        ]
    }));
    rows
}

fn nodes_table(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![header(&["NODE", "STATE", "IP", "CPU", "GPU", "RESOURCES"])];
    for node in &report.nodes {
        let custom: Vec<String> = node
            .resources_total
            .iter()
            .filter(|(k, _)| {
                !["CPU", "GPU", "memory", "object_store_memory"].contains(&k.as_str())
                    && !k.starts_with("node:")
                    && !k.starts_with("accelerator_type:")
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rows.push(vec![
            node.node_name.clone(),
            node.state.clone(),
            node.node_ip.clone(),
            node.resources_total
                .get("CPU")
                .copied()
                .unwrap_or(0.0)
                .to_string(),
            node.gpus().to_string(),
            custom.join(","),
        ]);
    }
    rows
}

fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.contains(['"', ' ', '{', '\'']) {
                format!("'{w}'")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
