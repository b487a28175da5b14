//! `argus slurm ...`.

use crate::cli::{Cli, SlurmCommand, SlurmSubmitArgs};
use crate::config::jobspec::LoadedJobSpec;
use crate::error::{Context, Result};
use crate::exit::Exit;
use crate::slurm::{self, script::AllocationFlags, submit as login};
use crate::ui::Printer;

pub async fn run(cli: &Cli, command: &SlurmCommand, printer: &Printer) -> Result<Exit> {
    match command {
        SlurmCommand::Submit(args) => submit(cli, args, printer).await,
        SlurmCommand::Status { run_id } => status(cli, run_id, printer).await,
        SlurmCommand::Cancel { run_id } => {
            let loaded = super::profile(cli)?;
            let (_, record) = login::read_run(&loaded, run_id)?;
            login::cancel(&record)
                .await
                .context("cannot cancel the Slurm job")?;
            if printer.json {
                printer.json(&serde_json::json!({"run_id": run_id, "slurm_job_id": record.slurm_job_id, "cancelled": true}));
            } else {
                printer.info(format!(
                    "cancelled Slurm job {} (run {run_id}); its nodes remove their containers",
                    record.slurm_job_id.unwrap_or_default()
                ));
            }
            Ok(Exit::Success)
        }
        SlurmCommand::Epilog { engine } => {
            let docker = crate::cluster::docker::connect(engine.as_deref()).await?;
            let report = slurm::epilog::run(&docker).await?;
            if printer.json {
                printer.json(&serde_json::to_value(&report)?);
            } else if !report.removed.is_empty() {
                printer.info(format!("removed {}", report.removed.join(", ")));
            }
            Ok(Exit::Success)
        }
        SlurmCommand::Run { run_id } => {
            let loaded = super::profile(cli)?;
            let mut log = |text: &str| printer.raw(text);
            Ok(slurm::run::run(&loaded, run_id, &mut log)
                .await
                .context("the Slurm batch step stopped")?)
        }
        SlurmCommand::Node { run_id } => {
            let loaded = super::profile(cli)?;
            let reporter = printer.reporter();
            slurm::node::run(&loaded, run_id, &reporter)
                .await
                .context("the Slurm node step stopped")?;
            Ok(Exit::Success)
        }
    }
}

async fn submit(cli: &Cli, args: &SlurmSubmitArgs, printer: &Printer) -> Result<Exit> {
    let loaded = super::profile(cli)?;
    let job = LoadedJobSpec::load(&args.jobspec, &args.sets)?;
    let options = login::SubmitOptions {
        flags: AllocationFlags {
            nodes: args.nodes,
            gpus_per_node: args.gpus_per_node,
            partition: args.partition.clone(),
            account: args.account.clone(),
            qos: args.qos.clone(),
            time: args.time.clone(),
            sbatch_args: args.sbatch_args.clone(),
        },
        dry_run: args.dry_run,
        argus: args.argus.clone(),
    };
    let reporter = printer.reporter();
    let submitted = login::submit(&loaded, job, &options, &reporter)
        .await
        .context("cannot submit to Slurm")?;
    if args.dry_run {
        if printer.json {
            printer.json(&serde_json::to_value(&submitted)?);
        } else {
            printer.raw(&submitted.script);
        }
        return Ok(Exit::Success);
    }
    let job_id = submitted.slurm_job_id.unwrap_or_default();
    if !args.follow {
        if printer.json {
            printer.json(&serde_json::to_value(&submitted)?);
        } else {
            printer.data(format!("{} {job_id}", submitted.run_id));
            printer.info(format!(
                "run {} submitted as Slurm job {job_id}; script {}\nhint: `argus slurm status {}`",
                submitted.run_id, submitted.script_path, submitted.run_id
            ));
        }
        return Ok(Exit::Success);
    }
    printer.info(format!(
        "run {} submitted as Slurm job {job_id}",
        submitted.run_id
    ));
    let (files, record) = login::read_run(&loaded, &submitted.run_id)?;
    let exit = login::follow(
        &files,
        record,
        |line| printer.info(line),
        |text| {
            if !printer.json {
                printer.raw(text)
            }
        },
    )
    .await?;
    if printer.json {
        let (files, record) = login::read_run(&loaded, &submitted.run_id)?;
        let batch = slurm::read_json::<slurm::record::BatchReport>(&files.batch()).ok();
        printer.json(&serde_json::json!({"run": record, "batch": batch}));
    }
    Ok(exit)
}

async fn status(cli: &Cli, run_id: &str, printer: &Printer) -> Result<Exit> {
    let loaded = super::profile(cli)?;
    let (files, mut record) = login::read_run(&loaded, run_id)?;
    let state = match record.slurm_job_id {
        Some(id) => login::slurm_state(id).await?,
        None => Default::default(),
    };
    if let Some(s) = &state.state
        && login::is_final(s)
        && record.slurm_state.as_deref() != Some(s)
    {
        record.slurm_state = Some(s.clone());
        slurm::write_json(&files.record(), &record)?;
    }
    let batch = slurm::read_json::<slurm::record::BatchReport>(&files.batch()).ok();
    if printer.json {
        printer.json(&serde_json::json!({"run": record, "slurm": state, "batch": batch}));
        return Ok(Exit::Success);
    }
    let shown = state
        .state
        .clone()
        .or(record.slurm_state.clone())
        .unwrap_or_else(|| "unknown to Slurm".into());
    let mut text = format!(
        "run {run_id}: Slurm job {} {shown}{}",
        record
            .slurm_job_id
            .map(|i| i.to_string())
            .unwrap_or_else(|| "-".into()),
        state
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    if let Some(b) = &batch {
        text.push_str(&format!(
            "\ncluster {} (port slot {}), batch step: {}",
            b.cluster, b.slot, b.stage
        ));
        for n in &b.nodes {
            text.push_str(&format!(
                "\n  node {} {} GPUs {:?}",
                n.name, n.address, n.gpus
            ));
        }
        if let Some(status) = &b.job_status {
            text.push_str(&format!("\njob {} {status}", record.submission_id));
        }
        if let Some(e) = &b.error {
            text.push_str(&format!("\nerror: {e}"));
        }
    }
    text.push_str(&format!("\noutput: {}", record.output));
    printer.data(text);
    Ok(Exit::Success)
}
