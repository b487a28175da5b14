//! argus takes GPU hosts from nothing to a running verl (RL for LLMs) training job on a
//! Ray cluster made of Docker containers, and back, reproducibly.
//!
//! The pipeline, one module each:
//!
//! ```text
//! argus image build   the runtime image, without a registry       cluster::image
//! argus up / down     containers + Ray, converged to a profile     cluster::{plan, reconcile, ready}
//! argus status        containers and Ray nodes                     cluster::status
//! argus prepare       GSM8K in verl's format, models in the HF cache data
//! argus snapshot      a source tree frozen under common/code/       snapshot
//! argus submit, job   a JobSpec as a Ray job, watched and recorded  submit
//! argus run           all of the above from scratch, locked         run
//! argus export        the same profile and job as KubeRay objects    export
//! argus job metrics   progress, metrics, plots, resume of a job     training
//! ```
//!
//! Data flows one way: YAML -> validated config (`config`) -> a plan (pure data) ->
//! actions against Docker / Ray / the filesystem -> records on the shared storage.

pub mod cli;
pub mod cluster;
mod commands;
pub mod config;
pub mod data;
pub mod diagnose;
pub mod doctor;
pub mod exit;
pub mod export;
pub mod hydra;
pub mod inputs;
pub mod restart;
pub mod run;
pub mod slurm;
pub mod snapshot;
pub mod submit;
pub mod training;

// Leaf modules: shared by several stages, importing none of them.
pub mod digest;
pub mod fsx;
pub mod hf;
pub mod http;
pub mod ids;
pub mod lock;
pub mod ray;
pub mod records;
pub mod secrets;
pub mod testpoint;
pub mod text;
pub mod ui;

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::cli::Cli;
use crate::ui::{Printer, Verbosity};

/// Runs a parsed command line to completion and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let verbosity = match (cli.quiet, cli.verbose) {
        (true, _) => Verbosity::Quiet,
        (false, 0) => Verbosity::Normal,
        (false, _) => Verbosity::Verbose,
    };
    init_logging(cli.verbose, cli.quiet);
    // One TLS provider for every HTTP client in the process (ring: light to build).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let printer = Printer::new(cli.json, verbosity, cli.no_progress);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::Exit::Failed as u8);
        }
    };
    match runtime.block_on(commands::run(&cli, &printer)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(err) => {
            let (code, text) = commands::error::report(&err);
            printer.error(&text);
            ExitCode::from(code as u8)
        }
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "argus=debug,warn",
        (false, _) => "argus=trace,info",
    };
    let filter = EnvFilter::try_from_env("ARGUS_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::ui::colour_on_stderr())
        .with_target(false)
        .try_init();
}
