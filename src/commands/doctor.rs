//! `argus doctor [JOBSPEC]`: every check of the profile's hosts (and of the JobSpec's
//! inputs), printed per host; the exit code says the worst.

use crate::cli::DoctorArgs;
use crate::cluster::doctor::{Report, Status};
use crate::commands::error::Result;
use crate::config::LoadedProfile;
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::ui::Printer;

pub async fn run(
    loaded: &LoadedProfile,
    slurm_run: Option<&str>,
    args: &DoctorArgs,
    printer: &Printer,
) -> Result<Exit> {
    let job = match &args.jobspec {
        Some(path) => Some(LoadedJobSpec::load(path, &[])?),
        None => None,
    };
    let reporter = printer.reporter();
    let mut report = match slurm_run {
        Some(run_id) => crate::doctor::slurm_run(loaded, run_id, job.as_ref(), &reporter).await?,
        None => crate::doctor::run(loaded, job.as_ref(), &reporter).await,
    };
    if args.collective {
        let collective = crate::cluster::doctor::collective::collective(loaded, &reporter).await;
        report.hosts.extend(collective);
    }
    let worst = report.worst();
    let exit = match worst {
        Status::Ok | Status::Warn => Exit::Success,
        Status::Fail => Exit::Failed,
        Status::Unknown => Exit::Unreachable,
    };
    if printer.json {
        let mut value = serde_json::to_value(&report)?;
        value["status"] = serde_json::to_value(worst)?;
        printer.json(&value);
        return Ok(exit);
    }
    for line in human(&report) {
        printer.data(line);
    }
    let count = |s: Status| {
        report
            .hosts
            .iter()
            .flat_map(|h| &h.checks)
            .filter(|c| c.status == s)
            .count()
    };
    printer.info(format!(
        "cluster {}: {} ok, {} warning(s), {} failed, {} unknown",
        loaded.profile.name,
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Unknown)
    ));
    Ok(exit)
}

fn label(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
        Status::Unknown => "UNKNOWN",
    }
}

/// Per host, one line per check (status, name, what was seen); under each one that is not
/// ok, why it matters and the fix.
fn human(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    let width = report
        .hosts
        .iter()
        .flat_map(|h| &h.checks)
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    for host in &report.hosts {
        lines.push(
            if host.host == crate::doctor::CLUSTER
                || host.host == crate::cluster::doctor::collective::SECTION
            {
                host.host.clone()
            } else {
                format!("host {}", host.host)
            },
        );
        for c in &host.checks {
            lines.push(format!(
                "  {:<7} {:<width$}  {}",
                label(c.status),
                c.name,
                c.seen
            ));
            if c.status != Status::Ok {
                if !c.why.is_empty() {
                    lines.push(format!("          why: {}", c.why));
                }
                if !c.fix.is_empty() {
                    lines.push(format!("          fix: {}", c.fix));
                }
            }
        }
    }
    lines
}
