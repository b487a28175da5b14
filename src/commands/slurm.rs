//! `argus slurm ...`.

use crate::cli::{Cli, SlurmCommand, SlurmSubmitArgs};
use crate::commands::error::{Context, Result};
use crate::config::jobspec::LoadedJobSpec;
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
            let before = match record.slurm_job_id {
                Some(id) => login::slurm_state(id).await?.state,
                None => None,
            };
            let ended =
                record.slurm_job_id.is_some() && before.as_deref().is_none_or(login::is_final);
            if !ended {
                login::cancel(&record)
                    .await
                    .context("cannot cancel the Slurm job")?;
            }
            if printer.json {
                printer.json(&serde_json::json!({"run_id": run_id, "slurm_job_id": record.slurm_job_id, "cancelled": !ended, "state": before}));
            } else if ended {
                printer.info(format!(
                    "Slurm job {} of run {run_id} has already ended ({}): nothing to cancel",
                    record.slurm_job_id.unwrap_or_default(),
                    before.as_deref().unwrap_or("gone")
                ));
            } else {
                printer.info(format!(
                    "cancelled Slurm job {} (run {run_id}); its nodes remove their containers",
                    record.slurm_job_id.unwrap_or_default()
                ));
            }
            Ok(Exit::Success)
        }
        SlurmCommand::Epilog { engine } => {
            let node = crate::cluster::NodeEngine::connect(engine.as_deref()).await?;
            let report = slurm::epilog::run(&node).await?;
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
        SlurmCommand::Relay { port } => match slurm::relay::run(*port) {
            Ok(()) => Ok(Exit::Success),
            Err(e) => {
                eprintln!("argus: cannot reach 127.0.0.1:{port} on this node: {e}");
                std::process::exit(slurm::relay::REFUSED);
            }
        },
        SlurmCommand::Containers { run_id } => {
            let loaded = super::profile(cli)?;
            let listed = slurm::attach::node_containers(&loaded, run_id).await?;
            // One line per node: srun passes the nodes' lines through whole.
            printer.json_line(&listed);
            Ok(Exit::Success)
        }
        SlurmCommand::CollectNode { run_id, params } => {
            let loaded = super::profile(cli)?;
            let params: crate::diagnose::bundle::NodeParams = serde_json::from_str(params)
                .map_err(|e| slurm::Error::Invalid(format!("--params: {e}")))?;
            let part = slurm::collect::node_part(&loaded, run_id, &params).await?;
            printer.json_line(&part);
            Ok(Exit::Success)
        }
        SlurmCommand::DoctorNode { run_id, token } => {
            let loaded = super::profile(cli)?;
            // One line each: srun passes the node's lines through whole.
            let mut print = |line: &slurm::doctor::NodeLine| {
                printer.json_line(line);
            };
            slurm::doctor::node_step(&loaded, run_id, token, &mut print).await?;
            Ok(Exit::Success)
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
    let mut job = LoadedJobSpec::load(&args.jobspec, &args.sets)?;
    // The policy travels to the batch step in the staged JobSpec (flags applied).
    job.spec.restart = crate::config::jobspec::restart::effective(
        job.spec.restart.as_ref(),
        &args.restart.flags(),
    )
    .map_err(slurm::Error::from)?;
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
    let mut log = crate::ui::LogText::new();
    let exit = login::follow(
        &files,
        record,
        |line| printer.info(line),
        |text| {
            if !printer.json {
                printer.raw(&log.push(text))
            }
        },
    )
    .await?;
    if !printer.json {
        printer.raw(&log.finish());
    }
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
    // The allocation has ended: jobs the records still show unfinished ended with it.
    if let (Some(b), Some(job_id)) = (&batch, record.slurm_job_id)
        && state.state.as_deref().is_none_or(login::is_final)
    {
        let shown = state.state.as_deref().unwrap_or("gone");
        slurm::attach::settle_records(&loaded.host_layout()?, &b.cluster, job_id, shown);
    }
    // While the allocation holds its nodes: what is on them, through srun.
    let live = slurm::attach::live_state(state.state.as_deref()) && files.alloc().exists();
    let cluster = if live {
        // The job running now: a supervised run's latest attempt.
        let current = batch
            .as_ref()
            .and_then(|b| b.attempts.last())
            .map_or(record.submission_id.as_str(), |a| a.submission_id.as_str());
        Some(live_cluster(&loaded, run_id, current).await)
    } else {
        None
    };
    if printer.json {
        printer.json(&serde_json::json!({
            "run": record,
            "slurm": state,
            "batch": batch,
            "containers": cluster.as_ref().map(|c| &c.containers),
            "ray_nodes": cluster.as_ref().map(|c| &c.ray_nodes),
            "job": cluster.as_ref().map(|c| &c.job),
            "errors": cluster.as_ref().map(|c| &c.errors),
        }));
        return Ok(Exit::Success);
    }
    printer.data(status_text(
        run_id,
        &record,
        &state,
        batch.as_ref(),
        cluster.as_ref(),
    ));
    Ok(Exit::Success)
}

/// `slurm status` for a human: the Slurm job, the batch step, each node's containers,
/// Ray's nodes and the job, with what could not be read.
fn status_text(
    run_id: &str,
    record: &slurm::record::SlurmRecord,
    state: &login::SlurmState,
    batch: Option<&slurm::record::BatchReport>,
    cluster: Option<&LiveCluster>,
) -> String {
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
    if let Some(b) = batch {
        text.push_str(&format!(
            "\ncluster {} (port slot {}), batch step: {}",
            b.cluster, b.slot, b.stage
        ));
        for n in &b.nodes {
            text.push_str(&format!(
                "\n  node {} {} GPUs {:?}",
                n.name, n.address, n.gpus
            ));
            if let Some(listed) = cluster
                .and_then(|c| c.containers.as_ref())
                .and_then(|all| all.iter().find(|l| l.node == n.name))
            {
                for c in &listed.containers {
                    text.push_str(&format!("\n    {} {} ({})", c.name, c.state, c.status));
                }
                if listed.containers.is_empty() {
                    text.push_str("\n    no container");
                }
            }
        }
        if let Some(nodes) = cluster.and_then(|c| c.ray_nodes.as_ref()) {
            let alive = nodes.iter().filter(|n| n.alive()).count();
            text.push_str(&format!("\nRay: {alive} of {} nodes ALIVE", nodes.len()));
            for n in nodes {
                text.push_str(&format!(
                    "\n  {} {}{} GPU {}",
                    n.node_ip,
                    n.state,
                    if n.is_head_node { " head" } else { "" },
                    n.gpus()
                ));
            }
        }
        match cluster.and_then(|c| c.job.as_ref()) {
            Some(job) => text.push_str(&format!(
                "\njob {} {}{}",
                record.submission_id,
                job.status,
                job.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
            None => {
                if let Some(status) = &b.job_status {
                    text.push_str(&format!("\njob {} {status}", record.submission_id));
                }
            }
        }
        attempts_text(&mut text, b);
        if let Some(e) = &b.error {
            text.push_str(&format!("\nerror: {e}"));
        }
    }
    for (what, e) in cluster.iter().flat_map(|c| &c.errors) {
        text.push_str(&format!("\n{what}: unavailable ({e})"));
    }
    text.push_str(&format!("\noutput: {}", record.output));
    text
}

/// A supervised run's attempts, one line each.
fn attempts_text(text: &mut String, b: &slurm::record::BatchReport) {
    let Some(policy) = &b.restart else {
        return;
    };
    text.push_str(&format!(
        "\nattempts: {} (restart: max {} on {}; Slurm requeued the batch {} time(s))",
        b.attempts.len(),
        policy.max,
        policy
            .on
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        b.requeues
    ));
    for a in &b.attempts {
        let mut line = format!(
            "\n  {} {} {}",
            a.n,
            a.submission_id,
            a.status
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_else(|| "running".into())
        );
        if let Some(from) = &a.resumed_from {
            line.push_str(&format!(", resumed from step {}", from.step));
        }
        if let Some(step) = a.last_step {
            line.push_str(&format!(", last step {step}"));
        }
        if let Some(lost) = a.steps_lost {
            line.push_str(&format!(", {lost} step(s) lost"));
        }
        if let Some(down) = a.downtime_s {
            line.push_str(&format!(", down {down:.0}s before it"));
        }
        if let Some(cause) = a.cause {
            line.push_str(&format!(
                "; ended: {cause}{}",
                a.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ));
        }
        text.push_str(&line);
    }
}

/// What a live Slurm run's cluster shows: each node's containers, Ray's nodes, the job.
/// Each part that cannot be read is an entry of `errors` rather than a failure.
struct LiveCluster {
    containers: Option<Vec<slurm::attach::NodeContainers>>,
    ray_nodes: Option<Vec<crate::ray::RayNode>>,
    job: Option<crate::ray::jobs::JobInfo>,
    errors: std::collections::BTreeMap<String, String>,
}

async fn live_cluster(
    loaded: &crate::config::LoadedProfile,
    run_id: &str,
    submission_id: &str,
) -> LiveCluster {
    let mut live = LiveCluster {
        containers: None,
        ray_nodes: None,
        job: None,
        errors: Default::default(),
    };
    let attached = match slurm::attach::attach(loaded, run_id).await {
        Ok(a) => a,
        Err(e) => {
            live.errors
                .insert("cluster".into(), crate::exit::one_line(&e));
            return live;
        }
    };
    let api = crate::ray::jobs::JobsApi { ray: &attached.ray };
    let (containers, nodes, job) = tokio::join!(
        slurm::attach::containers(&attached),
        attached.ray.nodes(),
        api.get(submission_id)
    );
    match containers {
        Ok((listed, failed)) => {
            live.containers = Some(listed);
            for (node, why) in failed {
                live.errors.insert(format!("containers on {node}"), why);
            }
        }
        Err(e) => drop(
            live.errors
                .insert("containers".into(), crate::exit::one_line(&e)),
        ),
    }
    match nodes {
        Ok(n) => live.ray_nodes = Some(n),
        Err(e) => drop(
            live.errors
                .insert("ray_nodes".into(), crate::exit::one_line(&e)),
        ),
    }
    match job {
        Ok(j) => live.job = Some(j),
        Err(crate::ray::jobs::JobsError::NotFound(_)) => {}
        Err(e) => drop(live.errors.insert("job".into(), crate::exit::one_line(&e))),
    }
    live
}
