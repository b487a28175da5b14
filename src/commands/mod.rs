//! Command handlers: resolve the profile, call the library, print the result. The only
//! layer that adds `anyhow` context to library errors.

mod cluster;
mod image;
mod job;
mod prepare;
mod run;
mod snapshot;
mod training;

use anyhow::Result;

use crate::cli::{Cli, Commands, ImageCommand};
use crate::config::LoadedProfile;
use crate::exit::Exit;
use crate::ui::Printer;

pub async fn run(cli: &Cli, printer: &Printer) -> Result<Exit> {
    match &cli.command {
        Commands::Up(args) => cluster::up(&profile(cli)?, args, printer).await,
        Commands::Down(args) => cluster::down(&profile(cli)?, args, printer).await,
        Commands::Status => cluster::status(&profile(cli)?, printer).await,
        Commands::Image(ImageCommand::Build(args)) => image::build(cli, args, printer).await,
        Commands::Snapshot(args) => snapshot::run(&profile(cli)?, args, printer),
        Commands::Prepare(args) => prepare::run(&profile(cli)?, args, printer).await,
        Commands::Submit(args) => job::submit(cli, args, printer).await,
        Commands::Run(args) => run::run(cli, args, printer).await,
        Commands::Job(command) => job::run(cli, command, printer).await,
    }
}

/// The profile named by `-p`, or the built-in one; validated before anything else runs.
fn profile(cli: &Cli) -> Result<LoadedProfile> {
    Ok(LoadedProfile::load(cli.profile.as_deref())?)
}
