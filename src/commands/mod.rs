//! Command handlers: resolve the profile, call the library, print the result. The only
//! layer that adds context (`crate::commands::error::Context`) to library errors.
//!
//! Before any handler runs, [`check_flags`] refuses flags given where they do not apply
//! (they would be ignored silently, and the command would act on something else), and a
//! command that talks to Docker has its endpoint parsed: a malformed one is bad input.

mod cluster;
mod doctor;
pub mod error;
mod export;
mod image;
mod job;
mod prepare;
mod run;
mod slurm;
mod snapshot;
mod training;

use crate::commands::error::Result;

use crate::cli::{Cli, Commands, ExportCommand, ImageCommand, PrepareArgs};
use crate::config::docker::{DockerEndpoint, VALID_ENDPOINTS};
use crate::config::{ConfigError, LoadedProfile};
use crate::exit::{Classify, Exit};
use crate::ui::Printer;

pub async fn run(cli: &Cli, printer: &Printer) -> Result<Exit> {
    check_flags(cli)?;
    match &cli.command {
        Commands::Up(args) => cluster::up(&docker_profile(cli)?, args, printer).await,
        Commands::Down(args) => cluster::down(&docker_profile(cli)?, args, printer).await,
        Commands::Status => cluster::status(&docker_profile(cli)?, printer).await,
        Commands::Doctor(args) if cli.slurm_run.is_some() => {
            doctor::run(&profile(cli)?, cli.slurm_run.as_deref(), args, printer).await
        }
        Commands::Doctor(args) => doctor::run(&docker_profile(cli)?, None, args, printer).await,
        Commands::Image(ImageCommand::Build(args)) => {
            match &cli.profile {
                Some(_) => drop(docker_profile(cli)?),
                None => drop(DockerEndpoint::resolve(None).map_err(endpoint_error)?),
            }
            image::build(cli, args, printer).await
        }
        Commands::Snapshot(args) => snapshot::run(&profile(cli)?, args, printer),
        Commands::Prepare(args) => {
            let loaded = profile(cli)?;
            check_prepare_flags(args, &loaded)?;
            prepare::run(&loaded, args, printer).await
        }
        Commands::Submit(args) => job::submit(cli, args, printer).await,
        Commands::Run(args) => {
            if args.lock.is_none() || cli.profile.is_some() {
                drop(docker_profile(cli)?);
            } else {
                // The profile comes from the lock; DOCKER_HOST, when set, must still parse.
                DockerEndpoint::from_env().map_err(endpoint_error)?;
            }
            run::run(cli, args, printer).await
        }
        Commands::Job(command) => job::run(cli, command, printer).await,
        Commands::Export(ExportCommand::Kuberay(args)) => export::kuberay(cli, args, printer).await,
        Commands::Slurm(command) => slurm::run(cli, command, printer).await,
    }
}

/// The profile named by `-p`, or the built-in one; validated before anything else runs.
fn profile(cli: &Cli) -> Result<LoadedProfile> {
    Ok(LoadedProfile::load(cli.profile.as_deref())?)
}

/// The profile, for a command that talks to Docker: its endpoint must be well-formed.
fn docker_profile(cli: &Cli) -> Result<LoadedProfile> {
    let loaded = profile(cli)?;
    loaded.docker_endpoint()?;
    Ok(loaded)
}

fn endpoint_error(message: String) -> ConfigError {
    ConfigError {
        origin: "environment".into(),
        line: 0,
        column: 0,
        message,
        hint: Some(VALID_ENDPOINTS.into()),
    }
}

/// A flag given to a command it does not apply to.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{flag} does not apply to `argus {command}`: {why}")]
pub struct FlagError {
    pub flag: &'static str,
    pub command: String,
    pub why: String,
    pub hint: String,
}

impl Classify for FlagError {
    fn exit(&self) -> Exit {
        Exit::Usage
    }
    fn hint(&self) -> Option<String> {
        Some(self.hint.clone())
    }
}

fn command_name(command: &Commands) -> &'static str {
    match command {
        Commands::Up(_) => "up",
        Commands::Down(_) => "down",
        Commands::Status => "status",
        Commands::Doctor(_) => "doctor",
        Commands::Image(_) => "image build",
        Commands::Snapshot(_) => "snapshot",
        Commands::Prepare(_) => "prepare",
        Commands::Submit(_) => "submit",
        Commands::Run(_) => "run",
        Commands::Job(_) => "job",
        Commands::Export(_) => "export kuberay",
        Commands::Slurm(_) => "slurm",
    }
}

/// Flags that clap accepts (they are global, or valid in some combination) but that would
/// be ignored here.
pub fn check_flags(cli: &Cli) -> Result<(), FlagError> {
    let command = command_name(&cli.command);
    let refuse = |flag: &'static str, why: &str, hint: &str| FlagError {
        flag,
        command: command.to_string(),
        why: why.to_string(),
        hint: hint.to_string(),
    };
    if cli.config.is_some() && !matches!(cli.command, Commands::Submit(_) | Commands::Job(_)) {
        return Err(refuse(
            "--config",
            "the old RayConfig only says where to submit jobs; this command would fall back to the built-in profile and act on that cluster",
            "use -p PROFILE here; --config is for `argus submit` and `argus job`",
        ));
    }
    if cli.slurm_run.is_some()
        && !matches!(
            cli.command,
            Commands::Submit(_) | Commands::Job(_) | Commands::Doctor(_)
        )
    {
        return Err(refuse(
            "--slurm-run",
            "it names the cluster of a Slurm run for jobs; this command would act on the profile's own cluster",
            "`argus slurm status RUN_ID` and `argus slurm cancel RUN_ID` act on a Slurm run; --slurm-run is for `argus submit`, `argus job` and `argus doctor`",
        ));
    }
    if cli.slurm_run.is_some()
        && let Commands::Doctor(args) = &cli.command
        && args.collective
    {
        return Err(refuse(
            "--collective with --slurm-run",
            "the all-reduce runs through each worker's engine, which only its own node reaches",
            "`argus --slurm-run RUN_ID doctor` checks the run's nodes; run the collective on a Docker-hosts cluster",
        ));
    }
    match &cli.command {
        Commands::Up(args) if args.timeout == Some(0) => Err(refuse(
            "--timeout 0",
            "Ray cannot be ready in 0 seconds",
            "--timeout SECONDS with SECONDS ≥ 1, or leave it out for the profile's ray.ready_timeout_s",
        )),
        Commands::Run(args) if args.lock.is_some() && args.jobspec.is_some() => Err(refuse(
            "--lock",
            "a replay uses the JobSpec recorded in the lock; the JOBSPEC given would be ignored",
            "argus run JOBSPEC (a new run) or argus run --lock FILE (a replay), not both",
        )),
        Commands::Prepare(args) => {
            if args.model.is_empty()
                && !args.dataset.is_empty()
                && let Some(flag) = model_only_flag(args)
            {
                return Err(refuse(
                    flag,
                    "it filters model files, and only datasets are asked for",
                    "add --model REPO, or drop the flag",
                ));
            }
            if args.from.is_some() && args.dataset.is_empty() && !args.model.is_empty() {
                return Err(refuse(
                    "--from",
                    "it is where raw datasets are read from, and only models are asked for",
                    "add --dataset gsm8k, or drop --from",
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn model_only_flag(args: &PrepareArgs) -> Option<&'static str> {
    if !args.include.is_empty() {
        Some("--include")
    } else if !args.exclude.is_empty() {
        Some("--exclude")
    } else {
        None
    }
}

/// `argus prepare` without --model / --dataset prepares the profile's `prepare:` lists:
/// the model-only and dataset-only flags must have something to apply to there too.
fn check_prepare_flags(args: &PrepareArgs, loaded: &LoadedProfile) -> Result<(), FlagError> {
    if !args.model.is_empty() || !args.dataset.is_empty() {
        return Ok(());
    }
    let listed = &loaded.profile.prepare;
    let refuse = |flag: &'static str, what: &str, hint: &str| FlagError {
        flag,
        command: "prepare".into(),
        why: format!(
            "no {what} is asked for (no flag names one, and the profile's prepare: lists none)"
        ),
        hint: hint.into(),
    };
    if listed.models.is_empty()
        && let Some(flag) = model_only_flag(args)
    {
        return Err(refuse(flag, "model", "add --model REPO, or drop the flag"));
    }
    if listed.datasets.is_empty() && args.from.is_some() {
        return Err(refuse(
            "--from",
            "dataset",
            "add --dataset gsm8k, or drop --from",
        ));
    }
    Ok(())
}
