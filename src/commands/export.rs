//! `argus export kuberay`: the profile (and a JobSpec) as a KubeRay object, on stdout or
//! into a file, with the warnings on stderr (and in `--json`).

use crate::commands::error::Result;
use serde_json::json;

use crate::cli::{Cli, KubeRayArgs};
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::export::kuberay::{Options, Version};
use crate::export::{self, Exported, Finding, Severity};
use crate::ui::Printer;

pub async fn kuberay(cli: &Cli, args: &KubeRayArgs, printer: &Printer) -> Result<Exit> {
    if cli.config.is_some() {
        return Err(export::Error::Refused(vec![
            Finding::general(
                Severity::Refusal,
                "--config",
                "a RayConfig describes no cluster to export",
            )
            .hint("-p PROFILE"),
        ])
        .into());
    }
    let profile = super::profile(cli)?;
    let reporter = printer.reporter();
    let jobspec = match &args.jobspec {
        Some(path) => {
            let mut job = LoadedJobSpec::load(path, &[])?;
            // A release from PyPI is exported as the snapshot of its sources, as `argus
            // run` makes it: its tree is fetched (once) to know its code id.
            crate::snapshot::pypi::localize(&mut job.spec.code, &reporter).await?;
            Some(job)
        }
        None => None,
    };
    let exported = match export::kuberay(&profile, jobspec.as_ref(), &options_of(args), &reporter) {
        Ok(exported) => exported,
        Err(err) => {
            print_refusal(printer, &err);
            return Err(err.into());
        }
    };
    for warning in &exported.warnings {
        printer.warn(warning.to_string());
    }
    for note in &exported.notes {
        printer.info(note);
    }
    if let Some(path) = &args.output {
        crate::fsx::write_atomic(path, exported.yaml.as_bytes()).map_err(|source| {
            export::Error::Write {
                path: path.clone(),
                source,
            }
        })?;
    }
    print_exported(printer, args, &exported);
    print_next_step(printer, args, &exported, profile.profile.ray.dashboard_port);
    Ok(Exit::Success)
}

fn options_of(args: &KubeRayArgs) -> Options {
    Options {
        image: args.image.clone(),
        pvc: args.pvc.clone(),
        namespace: args.namespace.clone(),
        hf_token_secret: args.hf_token_secret.clone(),
        auth_secret: args.auth_secret.clone(),
        queue: args.queue.clone(),
        // clap only lets the versions Version knows through.
        version: Version::parse(&args.kuberay_version).unwrap_or(Version::V1_7),
        backoff_limit: args.backoff_limit,
    }
}

/// A refused export: its warnings on stderr, and (with `--json`) every finding on stdout.
fn print_refusal(printer: &Printer, err: &export::Error) {
    let findings = err.findings();
    for warning in findings.iter().filter(|f| f.severity == Severity::Warning) {
        printer.warn(warning.to_string());
    }
    if printer.json {
        let (refusals, warnings): (Vec<&Finding>, Vec<&Finding>) = findings
            .iter()
            .partition(|f| f.severity == Severity::Refusal);
        printer.json(&json!({
            "exported": false,
            "refusals": refusals,
            "warnings": warnings,
        }));
    }
}

/// The object (on stdout unless it went into `--output`), or its summary with `--json`.
fn print_exported(printer: &Printer, args: &KubeRayArgs, exported: &Exported) {
    if printer.json {
        let mut out = json!({
            "exported": true,
            "kind": exported.kind,
            "name": exported.name,
            "namespace": exported.namespace,
            "submission_id": exported.submission_id,
            "file": args.output.as_ref().map(|p| p.display().to_string()),
            "refusals": [],
            "warnings": exported.warnings,
        });
        if args.output.is_none() {
            out["manifest"] = json!(exported.yaml);
        }
        printer.json(&out);
    } else if args.output.is_none() {
        printer.raw(&exported.yaml);
    }
}

/// What to do with the object next: apply it, and follow the job or reach the cluster.
fn print_next_step(printer: &Printer, args: &KubeRayArgs, exported: &Exported, port: u16) {
    let file = args
        .output
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "FILE".into());
    let ns = exported
        .namespace
        .as_ref()
        .map(|n| format!(" -n {n}"))
        .unwrap_or_default();
    let name = &exported.name;
    match exported.kind {
        "RayJob" => printer.info(format!(
            "RayJob {name}: kubectl{ns} apply -f {file}; follow it with kubectl{ns} get rayjob {name} -w (the operator submits the job over HTTP: its driver log is `ray job logs -f` through a port-forward of its cluster's head Service, port 8265)"
        )),
        _ => printer.info(format!(
            "RayCluster {name}: kubectl{ns} apply -f {file}; then kubectl{ns} port-forward svc/{name}-head-svc {port}:8265 and argus submit JOBSPEC"
        )),
    }
}
