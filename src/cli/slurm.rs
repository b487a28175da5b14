//! `argus slurm ...`: what can be typed, and the help that teaches it.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::RestartArgs;

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// From a login node: prepare the JobSpec's inputs as `argus run` does, write the
    /// batch script (kept as `<shared>/runs/<run_id>/slurm.sbatch`) and submit it with
    /// `sbatch`, which reads it from argus on stdin.
    ///
    /// The allocation's defaults come from the profile's `slurm:` section; flags win.
    /// Argus's binary must be on a path every node sees (checked with one `srun` first).
    /// With --follow: Slurm's state, the batch step's stages and the job's log, and the
    /// job's exit code (0/1/3; 3 also when Slurm cancelled the job or it timed out).
    Submit(Box<SlurmSubmitArgs>),
    /// A Slurm run: Slurm's state, its nodes, the batch step's stage, the job.
    Status { run_id: String },
    /// Cancel a Slurm run (`scancel`): every node removes its containers.
    Cancel { run_id: String },
    /// Remove every argus container on this node whose Slurm job no longer runs. For
    /// Slurm's `Epilog=` (e.g. `Epilog=/shared/bin/argus slurm epilog`).
    Epilog {
        /// The engine's socket (default: DOCKER_HOST, then the local Docker socket).
        #[arg(long, value_name = "URL")]
        engine: Option<String>,
    },
    /// The batch step (run by the batch script inside the allocation).
    #[command(hide = true)]
    Run { run_id: String },
    /// One node's step (started by the batch step with srun).
    #[command(hide = true)]
    Node { run_id: String },
    /// One connection to 127.0.0.1:PORT over stdin/stdout (started with srun by the login
    /// node to reach the head's dashboard).
    #[command(hide = true)]
    Relay { port: u16 },
    /// This node's containers of a run's Slurm job, as one JSON line (started with srun by
    /// `argus slurm status`).
    #[command(hide = true)]
    Containers { run_id: String },
    /// This node's part of a job's failure bundle, as one JSON line (started with srun by
    /// `argus --slurm-run RUN_ID job diagnose ID` and by the batch step).
    #[command(hide = true)]
    CollectNode {
        run_id: String,
        /// What to gather (JSON: the bundle's window, caps and deadline).
        #[arg(long)]
        params: String,
    },
    /// This node's doctor checks for a run's cluster, as JSON lines (started with srun by
    /// `argus --slurm-run RUN_ID doctor`).
    #[command(hide = true)]
    DoctorNode {
        run_id: String,
        /// The name of the file the login node wrote in the run's directory.
        #[arg(long)]
        token: String,
    },
}

#[derive(Debug, Args)]
pub struct SlurmSubmitArgs {
    /// The JobSpec (YAML).
    pub jobspec: PathBuf,
    /// Set a JobSpec field (KEY=VALUE, dotted keys). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Nodes to allocate (default: slurm.nodes, else 1).
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// GPUs per node, as Slurm GRES (default: slurm.gpus_per_node, else 0).
    #[arg(long, value_name = "G")]
    pub gpus_per_node: Option<u32>,
    /// Slurm's time limit, e.g. 2:00:00.
    #[arg(long, value_name = "T")]
    pub time: Option<String>,
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    #[arg(long, value_name = "A")]
    pub account: Option<String>,
    #[arg(long, value_name = "Q")]
    pub qos: Option<String>,
    /// One more sbatch option (one word, e.g. --exclusive). Repeatable. Options argus
    /// writes itself (--nodes/-N, --output/-o, --job-name/-J, --ntasks, --error, --gres,
    /// --gpus, --partition, --account, --qos, --time) are refused: use argus's own flags.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// argus's binary as the nodes see it (default: this binary's path).
    #[arg(long, value_name = "PATH")]
    pub argus: Option<PathBuf>,
    /// Print the batch script; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Follow the run to its end and exit with the job's code.
    #[arg(long)]
    pub follow: bool,

    #[command(flatten)]
    pub restart: RestartArgs,
}
