//! Command-line definitions only: what can be typed, and the help that teaches it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::jobspec::RestartFlags;
use crate::exit::EXIT_CODES_HELP;

mod slurm;
pub use slurm::{SlurmCommand, SlurmSubmitArgs};

/// `argus --help`'s text; what the built-in profile has is read from it.
fn long_about() -> String {
    format!(
        "From GPU hosts to a running verl (RL for LLMs) training job on a Ray cluster \
         made of Docker containers, and back, reproducibly.\n\n\
         Pipeline: `argus image build` (once) -> `argus up` -> `argus prepare` -> \
         `argus snapshot SRC` -> `argus submit JOBSPEC` -> `argus job ...` -> `argus down`; \
         `argus run JOBSPEC` does all of it from scratch.\n\
         Without -p, the built-in profile (profiles/local.yaml) is used: {}, on this machine.",
        crate::config::profile::builtin_summary()
    )
}

/// From GPU hosts to a running verl job on a Ray cluster of Docker containers, and back.
#[derive(Debug, Parser)]
#[command(
    name = "argus",
    version,
    about,
    long_about = long_about(),
    after_help = EXIT_CODES_HELP,
    max_term_width = 100
)]
pub struct Cli {
    /// Cluster profile (YAML); default: the built-in local profile.
    #[arg(
        short = 'p',
        long,
        global = true,
        env = "ARGUS_PROFILE",
        value_name = "FILE"
    )]
    pub profile: Option<PathBuf>,

    /// The old submitter's RayConfig YAML (address, shared_root, ...) instead of a profile,
    /// for `submit` and `job`.
    #[arg(long, global = true, value_name = "FILE", conflicts_with = "profile")]
    pub config: Option<PathBuf>,

    /// For `submit`, `job` and `doctor`: the cluster of this Slurm run (`argus slurm
    /// submit` printed its id), reached from the login node through `srun` into its
    /// allocation while it lives; once it has ended, `job` reads argus's records.
    #[arg(long, global = true, value_name = "RUN_ID", conflicts_with = "config")]
    pub slurm_run: Option<String>,

    /// Print machine-readable JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// More detail on stderr (-v: debug logs, -vv: trace). Hides progress bars.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors and warnings on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// No progress bars (they are also off when stderr is not a terminal).
    #[arg(long, global = true)]
    pub no_progress: bool,

    #[command(subcommand)]
    pub command: Commands,
}

#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Start the cluster (or converge it to the profile) and wait until Ray is ready.
    ///
    /// Creates the cluster's network, the shared-storage layout, the head container
    /// (`ray start --head --block`) and the worker containers (in parallel), then polls the
    /// dashboard until exactly the expected nodes are ALIVE with their GPUs and resources.
    /// Idempotent: a converged cluster is left alone; a container whose spec changed, or
    /// that is missing or exited, is recreated; nothing else is touched.
    ///
    /// With `hosts:` in the profile (several Docker Engines: unix://, tcp:// with or
    /// without TLS, ssh://), every engine is dialled first and nothing changes anywhere if
    /// one does not answer (exit 4); the image is copied to the hosts that lack it; the
    /// shared storage is proven the same on every host before Ray starts.
    Up(UpArgs),

    /// Remove the cluster's containers and network; the shared data is kept.
    ///
    /// Only containers and networks labelled as this cluster's are removed. With
    /// `hosts:`, on every host that answers; the others are named (exit 4).
    Down(DownArgs),

    /// Show each host's engine, the cluster's containers (state, restarts) and Ray nodes
    /// (alive, address, resources).
    ///
    /// Exit 4 when a host does not answer, 1 when the cluster has containers but Ray does
    /// not answer.
    Status,

    /// Check every host of the profile before it fails a cluster or a job, and say why.
    ///
    /// Per host, each check with what was seen and, when it is not right, why it matters
    /// and the fix: the engine (reachable, its Docker and API version); for real GPUs the
    /// container runtime (NVIDIA's device driver, AMD's /dev/kfd) and the GPUs the host has
    /// against device_ids; /dev/shm and memlock each node container gets against what Ray's
    /// object store and NCCL need; free disk on the shared storage and the engine's data
    /// root; its clock against this machine's; the profile image's id, the same on every
    /// host, and what argus runs in it (/bin/sh, python3, ray and mkdir on its PATH, the
    /// ray package where that python3 imports from: `up` refuses an image without them);
    /// the shared storage, the same on every host (a file written on the head's host
    /// read back on the others); the ports of each node's block and the network to the
    /// head. With a JOBSPEC, also its model and datasets complete in the shared storage's
    /// HF cache and datasets directory (nothing is downloaded).
    ///
    /// Looks only: short-lived probe containers of the cluster's image on each host (removed
    /// afterwards) and, across hosts, one probe file on the shared storage (removed too);
    /// nothing else is changed. Every check is bounded in time (5 s); the
    /// cheap ones also run first inside `up`. Works before `up` (the image must be on a
    /// host for the checks that look inside it) and on a running cluster. With
    /// `--slurm-run RUN_ID`: a running Slurm run's nodes, each checked on itself by a step
    /// of the run's job.
    ///
    /// Exit 0 when every check is ok or a warning, 1 when a check failed, 4 when a check
    /// could not be made (an engine that does not answer) and none failed.
    Doctor(DoctorArgs),

    /// Build or inspect the runtime image.
    #[command(subcommand)]
    Image(ImageCommand),

    /// Freeze a source tree (verl) into common/code/<name>/<code_id>/ on the shared storage.
    ///
    /// Copies SRC minus .git, __pycache__, *.pyc, what the tree's .gitignore files ignore and
    /// --exclude patterns; keeps symlinks inside the tree and the executable bit; makes the
    /// files read-only and writes a manifest (.argus/manifest.json). The code_id is derived
    /// from the content (prefixed with the git commit, and -dirty, for a git checkout): an
    /// unchanged tree gives the same id and copies nothing. Atomic: an interrupted snapshot
    /// leaves nothing under a final name. Needs no running cluster.
    Snapshot(SnapshotArgs),

    /// Put datasets (GSM8K in verl's format) and models (the HF cache) on the shared storage.
    ///
    /// Through the profile's HF_ENDPOINT (the hub, or a mirror), from this host; no cluster
    /// needed. Models land in <shared>/common/hf/hub (the standard HF cache layout,
    /// readable offline); the printed path is the model path for jobs. Datasets are
    /// transformed exactly as verl's preprocessing does and written atomically to
    /// <shared>/common/datasets/<name>/ with a manifest. What is complete is not fetched
    /// again. Without flags, prepares what the profile's `prepare:` section lists.
    Prepare(PrepareArgs),

    /// Submit a JobSpec as a Ray job: a verl entrypoint with Hydra overrides, or a custom command.
    ///
    /// The driver runs on a worker (entrypoint_resources {worker_node: 1} by default). Records
    /// go to <shared>/jobs/<id>/ (config with secrets redacted, logs, debug, checkpoints).
    /// Overrides are checked against the verl configs in the code snapshot. Exit code with
    /// --wait/--follow: 0 SUCCEEDED, 1 FAILED, 3 STOPPED.
    Submit(SubmitArgs),

    /// The whole pipeline from scratch, recorded: up, prepare, snapshot, submit, wait, collect.
    ///
    /// Prepares what the JobSpec names (its datasets, its model), snapshots its `code.source`,
    /// submits, follows the logs to the end and writes <shared>/runs/<run_id>/run.lock.yaml
    /// (image, Ray version, profile and JobSpec as used, code tree hash, dataset sha256s,
    /// model commit and etags) and report.json (stage timings, job status, where logs and
    /// checkpoints are). A run is what it runs (the cluster and the JobSpec as loaded): running
    /// the same JobSpec again resumes the run if it stopped anywhere (attaching to its job when
    /// it was submitted, never submitting a second one), and says so and exits with the job's
    /// code if it has ended (--new runs it again). Runs of one JobSpec take turns (a lock on
    /// the shared storage). With --lock, replays a recorded run and refuses when an input
    /// drifted; a replay resumes by the same rule. Exit code: the job's (0/1/3).
    Run(RunArgs),

    /// Inspect and control jobs: status, logs, stop, list, wait, metrics, plot, diagnose.
    #[command(subcommand)]
    Job(JobCommand),

    /// The profile (and a JobSpec) as another engine's objects: `argus export kuberay`.
    #[command(subcommand)]
    Export(ExportCommand),

    /// Run on a Slurm allocation: one `sbatch`, argus's containers on every allocated
    /// node, Ray across them, gone with the allocation.
    #[command(subcommand)]
    Slurm(SlurmCommand),
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// A KubeRay RayJob (with a JOBSPEC) or RayCluster (without one), as YAML.
    ///
    /// The RayJob's rayClusterSpec is the profile's cluster (head and worker groups as pod
    /// templates, the shared storage mounted in every pod); its entrypoint, runtime env,
    /// entrypoint resources and metadata are exactly what `argus submit --dry-run` shows
    /// for the same JobSpec. A RayCluster is one long-lived cluster that `argus submit`
    /// reaches through `kubectl port-forward`. What cannot be carried is refused (exit 2,
    /// naming the profile or JobSpec line; nothing is written) or warned about on stderr.
    /// The same inputs give the same bytes; nothing is written to the shared storage or
    /// sent anywhere. The data, models and code snapshots must already be on the volume the
    /// pods mount (`argus prepare`, `argus snapshot`).
    Kuberay(KubeRayArgs),
}

#[derive(Debug, Args)]
pub struct KubeRayArgs {
    /// The JobSpec (YAML); without it, a RayCluster.
    pub jobspec: Option<PathBuf>,

    /// The image the cluster pulls (needed when the profile's is built locally by argus);
    /// a digest (repo@sha256:...) pins it.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,

    /// A PersistentVolumeClaim for the shared storage (needed with shared.host_path; the way
    /// to carry NFS mount options).
    #[arg(long, value_name = "CLAIM")]
    pub pvc: Option<String>,

    /// The namespace of the object (and of the Secrets and claim it names).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,

    /// A Secret whose key HF_TOKEN becomes HF_TOKEN in every pod.
    #[arg(long, value_name = "NAME")]
    pub hf_token_secret: Option<String>,

    /// With ray.auth: token, the Secret whose key auth_token holds the Ray token.
    #[arg(long, value_name = "NAME")]
    pub auth_secret: Option<String>,

    /// A Kueue LocalQueue (the kueue.x-k8s.io/queue-name label).
    #[arg(long, value_name = "NAME")]
    pub queue: Option<String>,

    /// The KubeRay operator's version; 1.5 and 1.6 leave out the fields they lack.
    #[arg(long, value_name = "VERSION", default_value = "1.7", value_parser = ["1.5", "1.6", "1.7"])]
    pub kuberay_version: String,

    /// How many times KubeRay retries a failed job on a new cluster (RayJob backoffLimit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub backoff_limit: u32,

    /// Write the YAML to FILE (atomically) instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// A model repo, optionally at a revision: Qwen/Qwen2.5-0.5B-Instruct[@main]. Repeatable.
    #[arg(long, value_name = "REPO[@REV]")]
    pub model: Vec<String>,

    /// Only model files matching this glob (repeatable), e.g. --include '*.json'.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,

    /// Leave out model files matching this glob (repeatable), e.g. --exclude '*.bin'.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// gsm8k (RL: prompt, reward_model, ...) or gsm8k-sft (messages). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub dataset: Vec<String>,

    /// Read the raw dataset from this directory (the hub repo's layout: main/train-*.parquet,
    /// main/test-*.parquet) instead of downloading it.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,

    /// Put the one --model from this local directory (config.json, weights, tokenizer) into
    /// the shared HF cache instead of downloading it; its commit is its content's hash.
    #[arg(long, value_name = "DIR", requires = "model", conflicts_with_all = ["include", "exclude"])]
    pub model_from: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The JobSpec (not needed with --lock, which carries the one it used, nor with
    /// --resume, which reuses the resumed job's).
    #[arg(required_unless_present_any = ["lock", "resume"])]
    pub jobspec: Option<PathBuf>,

    /// Continue the job of this run from its checkpoints (see `argus submit --resume`).
    #[arg(long, value_name = "RUN_ID", conflicts_with = "lock")]
    pub resume: Option<String>,

    /// Replay the run recorded in this run.lock.yaml, with its pinned inputs.
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,

    /// With --lock: run even if inputs drifted (the drift is recorded in the report).
    #[arg(long, requires = "lock")]
    pub allow_drift: bool,

    /// Take the cluster down when the job has ended (the shared data stays).
    #[arg(long)]
    pub down_after: bool,

    /// Start a new run (a new run id and job) even when this JobSpec's run has ended or
    /// stopped; without it, a stopped run is resumed and an ended one is not run again.
    #[arg(long)]
    pub new: bool,

    /// Change a JobSpec field (--set total_training_steps=5) or add a Hydra override
    /// (--set overrides.trainer.logger=[console]). Repeatable; part of what the run is.
    #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with = "lock")]
    pub sets: Vec<String>,

    /// Run on the Slurm allocation this shell holds (`salloc`): the containers on its
    /// nodes, as `argus slurm submit` would (see `argus slurm submit --help`).
    #[arg(long, conflicts_with_all = ["lock", "resume", "down_after", "new"])]
    pub slurm: bool,

    #[command(flatten)]
    pub restart: RestartArgs,
}

/// Supervision: `argus run` and `argus slurm submit` stay attached and restart the job
/// when it fails, a node is lost or it hangs. Off unless `--restart N` or the JobSpec's
/// `restart:` section asks for it; a flag given replaces that field of the JobSpec's.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Supervision (off by default)")]
pub struct RestartArgs {
    /// Supervise the run: argus stays attached and, when the job fails, a node of the
    /// cluster is lost or training hangs, brings the cluster back and restarts the job
    /// from its newest complete checkpoint, at most N times (0 to 100). Also the JobSpec's
    /// `restart:` section, whose fields these flags replace. Not part of what the run is:
    /// `argus run job.yaml --restart 3` is the same run as without it.
    #[arg(id = "restart", long = "restart", value_name = "N")]
    pub max: Option<u32>,

    /// What to restart on, comma separated: failed (the job ended FAILED), node_lost (a
    /// container died or was OOM-killed, or a host's Docker engine stopped answering),
    /// hang (no new training step for --hang-after while RUNNING). Default: all three.
    #[arg(long, value_name = "LIST")]
    pub restart_on: Option<String>,

    /// How long without a new training step, while the job is RUNNING, is a hang: 10s to
    /// 7d, e.g. 20m or 1h 30m, or seconds. Default: 15m.
    #[arg(long, value_name = "DUR")]
    pub hang_after: Option<String>,

    /// How long to wait before each restart: 0s to 1h. Default: 30s.
    #[arg(long, value_name = "DUR")]
    pub restart_backoff: Option<String>,

    /// How long a lost host is waited for before argus gives up (it never runs on fewer
    /// nodes than the profile has): 0s to 7d. Default: 10m.
    #[arg(long, value_name = "DUR")]
    pub host_wait: Option<String>,
}

impl RestartArgs {
    /// The flags as typed, for [`crate::config::jobspec::restart::effective`].
    pub fn flags(&self) -> RestartFlags {
        RestartFlags {
            max: self.max,
            on: self.restart_on.clone(),
            hang_after: self.hang_after.clone(),
            backoff: self.restart_backoff.clone(),
            host_wait: self.host_wait.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The JobSpec (YAML). With --resume, optional: the resumed job's own is reused.
    #[arg(required_unless_present = "resume")]
    pub jobspec: Option<PathBuf>,

    /// Continue this stopped, failed or time-limited job from its checkpoints: a new job
    /// with the old one's checkpoint directory as trainer.default_local_dir and
    /// trainer.resume_mode=auto (custom jobs: ARGUS_CHECKPOINT_DIR), the same code,
    /// datasets and model unless the JobSpec or --set change them. Refused (exit 2) when
    /// the old job has no checkpoint or still runs.
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,

    /// Print the exact payload (entrypoint, runtime_env, resources); submit and write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Wait for the job to end; the exit code tells SUCCEEDED / FAILED / STOPPED.
    #[arg(long)]
    pub wait: bool,

    /// Stream the driver's log until the job ends (implies --wait).
    #[arg(long)]
    pub follow: bool,

    /// Change a JobSpec field (--set total_training_steps=5) or add a Hydra override
    /// (--set overrides.trainer.logger=[console]). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// Do not check override keys against the snapshot's verl configs.
    #[arg(long)]
    pub no_check: bool,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// A job's status (from the cluster, or argus's record once the cluster forgot it).
    Status { id: String },
    /// Collect a failure bundle of a job and say why it failed.
    ///
    /// Into jobs/<id>/diagnostics/<attempt>/ on the shared storage: the driver log, each
    /// node's Ray logs (raylet, gcs_server, the job's workers' .out/.err and core-worker
    /// logs, each as its tail) copied out of every container on every host, the
    /// containers' states (exit codes, OOM-killed), `nvidia-smi` where there are NVIDIA
    /// GPUs, their env (secrets redacted by name and by value), the resolved profile and
    /// the job's JobSpec, and a manifest. Then the triage: the first error across all
    /// nodes by time, matched against known causes (OOM-killed, CUDA out of memory,
    /// NCCL/Gloo, ImportError, Hydra config, disk full, a node that died), printed as one
    /// line with the file that holds it. Bounded: the tail of each log, under 50 MB and
    /// about 30 s. `argus run` makes one by itself when a job fails or loses a node.
    /// Exit 0 when the bundle was written, 2 for an unknown job.
    Diagnose {
        id: String,
        /// The attempt the bundle is filed under (default: the job's attempt of its run, else 1).
        #[arg(long)]
        attempt: Option<u32>,
    },
    /// A job's driver log.
    ///
    /// A log is text others wrote, so it is made safe for a terminal, on a terminal or
    /// not: colour sequences are dropped, a carriage return ends a line, and every other
    /// control character, C1 control and bidirectional override is shown as a `\u{..}`
    /// escape. The log as the job wrote it is `jobs/<id>/logs/driver.log` on the shared
    /// storage once the job ended.
    Logs {
        id: String,
        /// Stream until the job ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Stop a job.
    Stop {
        id: String,
        /// Wait until it has stopped.
        #[arg(long)]
        wait: bool,
    },
    /// Every job the cluster or argus's records know.
    List,
    /// Wait for a job to end; exit 0 SUCCEEDED, 1 FAILED, 3 STOPPED.
    Wait {
        id: String,
        /// Give up after this many seconds (exit 1; the job keeps running).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
    },
    /// A verl job's metrics: a table of step × metric from its driver log.
    ///
    /// Read live through Ray's API, or from the saved jobs/<id>/logs/driver.log once the
    /// job has ended (so it works after the cluster is gone). A resumed job's table
    /// continues the jobs it resumes. `nan`/`inf` are kept as logged; an empty cell (CSV),
    /// `-` (table) or an absent key (JSON) means the step did not log the metric. A log
    /// without verl step lines gives an empty table (exit 0). Saved as
    /// jobs/<id>/metrics.csv when the job ends.
    Metrics {
        id: String,
        /// CSV on stdout (step,<keys>), as Python writes numbers.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// Only metrics matching this glob (repeatable; `*` also matches `/`), e.g.
        /// --keys 'critic/*' --keys 'val-core/*'.
        #[arg(long = "keys", value_name = "GLOB")]
        keys: Vec<String>,
    },
    /// Plot metrics against the step: one panel per metric, one line per job.
    ///
    /// Several ids compare runs on the same panels. Default metrics: the reward/score
    /// mean and the validation scores (SFT: the train and validation loss). A resumed
    /// job's line continues the jobs it resumes. The image needs no font on the machine.
    Plot {
        /// One or more job ids.
        #[arg(required = true, num_args = 1..)]
        ids: Vec<String>,
        /// Metrics to draw (globs, repeatable; `*` also matches `/`).
        #[arg(long = "keys", value_name = "GLOB")]
        keys: Vec<String>,
        /// Output file, .png or .svg (default: <first id>.png in this directory).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: Option<SnapshotCommand>,

    /// The source tree to freeze (write ./list for a directory named like a subcommand).
    #[arg(required = true, value_name = "SRC")]
    pub source: Option<PathBuf>,

    /// Snapshot family: common/code/<name>/.
    #[arg(long, default_value = "verl")]
    pub name: String,

    /// Set the code_id by hand ([A-Za-z0-9._-]); an existing id with other content is an error.
    #[arg(long)]
    pub code_id: Option<String>,

    /// Leave out paths matching this gitignore-style glob (repeatable).
    #[arg(long = "exclude", value_name = "GLOB")]
    pub excludes: Vec<String>,

    /// Copy what symlinks pointing outside the tree point to (default: refuse them). A
    /// link that leads to the shared storage (or to a directory holding it) is refused
    /// even then.
    #[arg(long)]
    pub follow_links: bool,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// List the snapshots: id, name, created, size, source commit.
    List,
    /// Re-hash a snapshot; report files changed, missing or added (exit 1 on any).
    Verify {
        /// code_id, or name/code_id.
        id: String,
    },
    /// Remove a snapshot; refused while an unfinished job uses it, unless --force.
    Rm {
        /// code_id, or name/code_id.
        id: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Print what would be created, recreated or removed, and change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Seconds to wait for Ray to be ready (default: the profile's ray.ready_timeout_s).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A JobSpec whose model and datasets must be complete on the shared storage.
    #[arg(value_name = "JOBSPEC")]
    pub jobspec: Option<PathBuf>,
    /// After `up`: an all-reduce between the worker containers (torch.distributed: gloo on
    /// CPU, NCCL on GPUs; needs torch in the image, e.g. the verl image), its latency and
    /// bandwidth per pair of workers, and the worker that does not answer.
    #[arg(long)]
    pub collective: bool,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Print what would be removed, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the runtime image locally, without any container registry.
    ///
    /// A Debian rootfs from this machine's configured Debian mirror (read from apt's
    /// sources) with python3, a venv at /opt/ray with `ray[default]` pinned, imported
    /// through the Docker API. Needs root and debootstrap. An image built from the same
    /// inputs (suite, Ray version, extra packages) is not rebuilt.
    ///
    /// `--verl` then adds verl's dependencies on top, for one supported verl release
    /// (`--verl-version`, default 0.9.1; 0.8.0 also): the exact versions of
    /// assets/verl/<version>/requirements.lock (torch, transformers, hydra-core, ...),
    /// installed from PyPI by pip in a container of the Ray image and committed as a layer
    /// (about 8 GB), and the CPU shim `argus_verl_cpu`: `argus/verl:<version>-cpu`, the
    /// image of the built-in profile. `--gpu` builds a GPU host's image instead from
    /// assets/verl/<version>/requirements-gpu.lock (CUDA torch, vLLM, TransferQueue; no
    /// shim): `argus/verl:<version>-gpu`, about 5 GB to download. verl's own code is not in
    /// either: jobs take it from a code snapshot of the same release.
    Build(ImageBuildArgs),
}

#[derive(Debug, Args)]
pub struct ImageBuildArgs {
    /// Ray version to pin.
    #[arg(long, default_value = "2.51.1")]
    pub ray_version: String,

    /// Image tag; default: argus/ray:<ray-version>.
    #[arg(long)]
    pub tag: Option<String>,

    /// Extra pip requirement to install (repeatable), e.g. --pip verl==0.6.1.
    #[arg(long = "pip", value_name = "REQUIREMENT")]
    pub pip: Vec<String>,

    /// Debian suite of the rootfs.
    #[arg(long, default_value = "bookworm")]
    pub suite: String,

    /// Debian mirror URL; default: the first matching one in /etc/apt/sources.list(.d).
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,

    /// Rebuild even if an image from the same inputs exists (with --verl: the verl layer).
    #[arg(long)]
    pub force: bool,

    /// Build the verl image (verl's pinned dependencies and the CPU shim) on the Ray image;
    /// --tag then names the verl image (default argus/verl:<verl-version>-cpu, with
    /// `-ray<version>` after it on another Ray).
    #[arg(long, conflicts_with = "pip")]
    pub verl: bool,

    /// With --verl: the verl release whose lock is installed (0.8.0 or 0.9.1); with
    /// --lock, the release that lock is for (labelled on the image, checked at submit).
    #[arg(
        long,
        value_name = "VERSION",
        requires = "verl",
        default_value = "0.9.1"
    )]
    pub verl_version: String,

    /// With --verl: the GPU image (argus's GPU lock of that release: CUDA torch, vLLM,
    /// TransferQueue; no shim): argus/verl:<verl-version>-gpu.
    #[arg(long, requires = "verl", conflicts_with_all = ["lock", "no_shim"])]
    pub gpu: bool,

    /// With --verl: install this requirements file instead of argus's lock
    /// (assets/verl/<version>/requirements.lock), e.g. a lock of your own.
    #[arg(long, value_name = "FILE", requires = "verl")]
    pub lock: Option<PathBuf>,

    /// With --verl: leave the CPU shim out (GPU hosts need none).
    #[arg(long, requires = "verl")]
    pub no_shim: bool,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Commands, RestartFlags, SlurmCommand};

    /// The restart flags reach `run` (also with --slurm) and `slurm submit` as typed.
    #[test]
    fn restart_flags_parse_on_run_and_slurm_submit() {
        let cli = Cli::try_parse_from([
            "argus",
            "run",
            "j.yaml",
            "--slurm",
            "--restart",
            "3",
            "--restart-on",
            "hang,failed",
            "--hang-after",
            "20m",
            "--restart-backoff",
            "0",
            "--host-wait",
            "1h",
        ])
        .unwrap();
        let Commands::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(
            args.restart.flags(),
            RestartFlags {
                max: Some(3),
                on: Some("hang,failed".into()),
                hang_after: Some("20m".into()),
                backoff: Some("0".into()),
                host_wait: Some("1h".into()),
            }
        );
        let cli =
            Cli::try_parse_from(["argus", "slurm", "submit", "j.yaml", "--restart", "1"]).unwrap();
        let Commands::Slurm(SlurmCommand::Submit(args)) = cli.command else {
            panic!("not slurm submit");
        };
        assert_eq!(args.restart.flags().max, Some(1));
        let cli = Cli::try_parse_from(["argus", "run", "j.yaml"]).unwrap();
        let Commands::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.restart.flags(), RestartFlags::default());
        assert!(Cli::try_parse_from(["argus", "run", "j.yaml", "--restart", "-1"]).is_err());
    }

    /// Every `argus <command>` that `--help`'s Pipeline line names is a real subcommand.
    #[test]
    fn the_help_pipeline_names_only_real_commands() {
        let cli = super::Cli::command();
        let about = cli
            .get_long_about()
            .map(|s| s.to_string())
            .unwrap_or_default();
        let pipeline = about
            .split("Pipeline:")
            .nth(1)
            .expect("a Pipeline line in --help");
        let pipeline = pipeline.split("\n\n").next().unwrap_or_default();
        let named: Vec<&str> = pipeline
            .split("`argus ")
            .skip(1)
            .filter_map(|rest| rest.split([' ', '`']).next())
            .collect();
        for wanted in ["up", "prepare", "snapshot", "submit", "job", "run", "down"] {
            assert!(named.contains(&wanted), "{wanted} missing from {pipeline}");
        }
        for name in named {
            assert!(
                cli.find_subcommand(name).is_some(),
                "--help names `argus {name}`, which does not exist"
            );
        }
    }
}
