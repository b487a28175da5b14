//! The Slurm back end: one `sbatch` runs argus's cluster on the allocation's nodes.
//!
//! On the login node `submit` does what needs no GPU, as `argus run` does it (inputs
//! prepared and code snapshotted by `crate::inputs`, the image archived on the shared
//! storage), writes the run's files under `<shared>/runs/<run_id>/` and the batch script
//! (`script`, pure), and calls `sbatch`. In the allocation the batch step (`run`) reads
//! the allocation (`alloc`), claims a port slot on its nodes (`ports`), turns the
//! allocation into a multi-host profile in memory (`cluster_profile`, so `cluster::plan`
//! is reused unchanged), starts one node step per node (`node`: that node's containers
//! through its own engine, `cluster::NodeEngine`, removed when Slurm ends the step), waits
//! for Ray, submits the JobSpec's job as `argus run` does, follows it, and exits with its
//! code. `epilog` removes what a killed step left.

pub mod alloc;
pub mod attach;
pub mod collect;
pub mod doctor;
pub mod epilog;
pub mod node;
pub mod ports;
pub mod record;
pub mod relay;
pub mod run;
pub mod script;
pub mod submit;
pub mod supervise;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::profile::{GpuMode, HostCounts, HostSpec, NetworkMode, NodeSpec, WorkerGroup};
use crate::config::{Layout, LoadedProfile};
use crate::exit::{Classify, Exit};
use crate::fsx::Dir;

/// The default engine socket on a node.
pub const DEFAULT_ENGINE_SOCKET: &str = "unix:///var/run/docker.sock";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed (exit {code}): {stderr}")]
    Command {
        command: String,
        code: i32,
        stderr: String,
    },
    #[error("the allocation: {0}")]
    Allocation(String),
    #[error(
        "no free port slot on nodes {nodes}: {} Slurm jobs of argus already share one of them",
        ports::SLOTS
    )]
    NoPortSlot { nodes: String },
    #[error("argus's binary {path} is not visible on the compute nodes: {detail}")]
    BinaryNotVisible { path: String, detail: String },
    #[error("{0}")]
    Invalid(String),
    #[error("Slurm run {run_id} has no cluster to reach: {why}")]
    NoCluster { run_id: String, why: String },
    #[error("no Slurm run {run_id} under {}", crate::text::shown(dir))]
    UnknownRun { run_id: String, dir: PathBuf },
    #[error("cannot read or write {}", crate::text::shown(path))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Script(#[from] script::ScriptError),
    #[error(transparent)]
    Inputs(#[from] crate::inputs::Error),
    #[error(transparent)]
    Image(#[from] crate::cluster::image::BuildError),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::Error),
    #[error(transparent)]
    Submit(#[from] crate::submit::Error),
    #[error(transparent)]
    Live(#[from] crate::submit::live::Error),
    #[error(transparent)]
    Restart(#[from] crate::config::jobspec::restart::RestartFlagError),
    #[error(transparent)]
    Training(#[from] crate::training::Error),
    #[error(transparent)]
    Attempt(#[from] crate::restart::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    NoHostPath(#[from] crate::config::profile::NoHostPath),
    #[error(transparent)]
    Id(#[from] crate::ids::IdError),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Spawn { .. } => Exit::Unreachable,
            Error::Command { .. } | Error::Allocation(_) | Error::NoPortSlot { .. } => Exit::Failed,
            Error::NoCluster { .. } => Exit::Unreachable,
            Error::Io { source, .. } => crate::fsx::io_exit(source),
            Error::BinaryNotVisible { .. } | Error::Invalid(_) | Error::UnknownRun { .. } => {
                Exit::Usage
            }
            Error::Script(_) | Error::Config(_) | Error::NoHostPath(_) | Error::Id(_) => {
                Exit::Usage
            }
            Error::Inputs(e) => e.exit(),
            Error::Image(e) => e.exit(),
            Error::Cluster(e) => e.exit(),
            Error::Submit(e) => e.exit(),
            Error::Live(e) => e.exit(),
            Error::Restart(e) => e.exit(),
            Error::Training(e) => e.exit(),
            Error::Attempt(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Spawn { .. } => {
                Some("argus slurm needs Slurm's commands (sbatch, srun, scontrol) on PATH".into())
            }
            Error::BinaryNotVisible { .. } => Some(
                "put argus on a path every node mounts (the shared storage) and run it from there"
                    .into(),
            ),
            Error::NoHostPath(_) => Some(
                "argus slurm needs shared.host_path: the nodes and this host share that path"
                    .into(),
            ),
            Error::UnknownRun { .. } => Some("`ls <shared>/runs` shows the runs".into()),
            Error::Io { source, .. } => crate::fsx::io_hint(source),
            Error::Inputs(e) => e.hint(),
            Error::Image(e) => e.hint(),
            Error::Cluster(e) => e.hint(),
            Error::Submit(e) => e.hint(),
            Error::Live(e) => e.hint(),
            Error::Restart(e) => e.hint(),
            Error::Training(e) => e.hint(),
            Error::Attempt(e) => e.hint(),
            _ => None,
        }
    }
}

/// Runs a Slurm command and returns its stdout; a non-zero exit is an error with stderr.
pub fn slurm_command(program: &str, args: &[&str]) -> Result<String, Error> {
    slurm_command_with(program, args, &[])
}

/// `slurm_command` with variables added to its environment (sbatch and srun export their
/// environment to the job: how a secret reaches the allocation without the shared storage).
pub fn slurm_command_with(
    program: &str,
    args: &[&str],
    env: &[(String, String)],
) -> Result<String, Error> {
    slurm_command_input(program, args, env, None)
}

/// `slurm_command_with`, `input` written to its stdin (`sbatch` reads the script there:
/// given a path on the shared storage, it would read whatever a link there leads to).
pub fn slurm_command_input(
    program: &str,
    args: &[&str],
    env: &[(String, String)],
    input: Option<&[u8]>,
) -> Result<String, Error> {
    use std::io::Write;
    let spawn = |source| Error::Spawn {
        program: program.into(),
        source,
    };
    let mut child = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(match input {
            Some(_) => std::process::Stdio::piped(),
            None => std::process::Stdio::null(),
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A program that exits without reading it all says why on stderr.
        let _ = stdin.write_all(bytes);
    }
    let output = child.wait_with_output().map_err(spawn)?;
    if !output.status.success() {
        return Err(Error::Command {
            command: format!("{program} {}", args.join(" ")),
            code: output.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// An `srun` that starts a step of its own sizes: inside a step (`argus run --slurm`, or
/// a shell in an allocation) the step's variables must not narrow it.
pub fn srun() -> tokio::process::Command {
    let mut srun = tokio::process::Command::new("srun");
    if std::env::var_os("SLURM_STEP_ID").is_some() {
        for var in [
            "SLURM_NTASKS",
            "SLURM_NPROCS",
            "SLURM_NNODES",
            "SLURM_NODELIST",
            "SLURM_TASKS_PER_NODE",
            "SLURM_STEP_NODELIST",
            "SLURM_STEP_NUM_NODES",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_STEP_TASKS_PER_NODE",
        ] {
            srun.env_remove(var);
        }
    }
    srun
}

/// The most argus reads of a run's JSON or YAML file: they are on storage others write.
pub const FILE_CAP: u64 = 16 << 20;

/// Where image archives live on the shared storage, relative to its root.
pub const IMAGES: &str = "common/images";

/// Where port-slot claims live on the shared storage, relative to its root.
pub const SLOTS_DIR: &str = ".argus/slurm-slots";

/// The files of one Slurm run, under `<shared>/runs/<run_id>/`, read and written through
/// the handles of that directory and of its `slurm/` subdirectory (held once reached:
/// a directory on the way swapped for a link afterwards does not move the run's reads or
/// writes), never by path. Its paths are for messages, and for the few that another
/// program must be given (see [`RunFiles::profile_path`]).
#[derive(Debug)]
pub struct RunFiles {
    /// `<shared>`: the profile's mount, the one path opened as named.
    shared: PathBuf,
    run_id: String,
    run: Option<Dir>,
    slurm: Option<Dir>,
}

/// The subdirectory of a run's directory with the files only argus reads.
const SLURM: &str = "slurm";

impl RunFiles {
    /// The run's files, nothing opened yet (a dry run names them only): what is read or
    /// written through it reaches the run's directory afresh from the shared root.
    pub fn new(layout: &Layout, run_id: &str) -> RunFiles {
        RunFiles {
            shared: layout.root().to_path_buf(),
            run_id: run_id.to_string(),
            run: None,
            slurm: None,
        }
    }

    /// The run's existing directory, reached from the shared root through handles and
    /// held (its `slurm/` too when it is there).
    pub fn open(layout: &Layout, run_id: &str) -> std::io::Result<RunFiles> {
        let mut files = RunFiles::new(layout, run_id);
        let run = files.reach()?;
        files.slurm = match run.open_dir(SLURM) {
            Ok(dir) => Some(dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        files.run = Some(run);
        Ok(files)
    }

    /// The run's directory and its `slurm/`, made (with `runs/`) when missing, held.
    pub fn create(layout: &Layout, run_id: &str) -> std::io::Result<RunFiles> {
        let mut files = RunFiles::new(layout, run_id);
        let id = files.checked_id()?;
        let run = layout.create_dirs("runs")?.create_dirs(id, &mut |_| {})?;
        files.slurm = Some(run.create_dirs(SLURM, &mut |_| {})?);
        files.run = Some(run);
        Ok(files)
    }

    /// The run id, refused unless it is a plain id (`../x` would lead elsewhere).
    fn checked_id(&self) -> std::io::Result<&str> {
        if crate::ids::is_valid_id(&self.run_id) {
            Ok(&self.run_id)
        } else {
            Err(crate::fsx::Unsafe::Escapes {
                root: self.shared.join("runs"),
                rel: PathBuf::from(&self.run_id),
            }
            .into())
        }
    }

    /// The run's directory reached afresh from the shared root.
    fn reach(&self) -> std::io::Result<Dir> {
        let id = self.checked_id()?;
        Dir::root(&self.shared)?.open_dir("runs")?.open_dir(id)
    }

    /// A handle on the run's directory (the held one when there is one).
    pub fn run_dir(&self) -> std::io::Result<Dir> {
        match &self.run {
            Some(dir) => dir.try_clone(),
            None => self.reach(),
        }
    }

    /// A handle on the run's `slurm/` (the held one when there is one).
    fn slurm_dir(&self) -> std::io::Result<Dir> {
        match &self.slurm {
            Some(dir) => dir.try_clone(),
            None => self.run_dir()?.open_dir(SLURM),
        }
    }

    /// `<shared>/runs/<run_id>`, for messages.
    pub fn path(&self) -> PathBuf {
        self.shared.join("runs").join(&self.run_id)
    }

    fn file(&self, in_slurm: bool, name: impl Into<String>) -> RunFile<'_> {
        let name = name.into();
        let mut shown = self.path();
        if in_slurm {
            shown.push(SLURM);
        }
        shown.push(&name);
        RunFile {
            files: self,
            in_slurm,
            name,
            shown,
        }
    }

    /// The profile as submitted (the nodes read this copy).
    pub fn profile(&self) -> RunFile<'_> {
        self.file(true, "profile.yaml")
    }
    /// The JobSpec as resolved on the login node (code pinned), secrets redacted.
    pub fn jobspec(&self) -> RunFile<'_> {
        self.file(true, "jobspec.yaml")
    }
    /// The batch script.
    pub fn script(&self) -> RunFile<'_> {
        self.file(false, "slurm.sbatch")
    }
    /// What submit recorded, and how the Slurm job ended.
    pub fn record(&self) -> RunFile<'_> {
        self.file(false, "slurm.json")
    }
    /// The allocation as the batch step read it (the node steps plan from it).
    pub fn alloc(&self) -> RunFile<'_> {
        self.file(true, "alloc.json")
    }
    /// The batch step's report: stages, the job's end.
    pub fn batch(&self) -> RunFile<'_> {
        self.file(true, "batch.json")
    }
    /// Written by the batch step when the node steps are to end (srun, told SIGTERM,
    /// kills its tasks outright: they would leave their containers).
    pub fn stop(&self) -> RunFile<'_> {
        self.file(true, "stop")
    }
    /// A file `argus --slurm-run RUN_ID doctor` writes for the nodes to read back (the
    /// shared storage the same everywhere); `name` is `doctor-<token>`.
    pub fn doctor_probe(&self, name: &str) -> RunFile<'_> {
        self.file(true, name)
    }
    /// The batch step's output of Slurm job `job_id`, as Slurm writes it
    /// ([`RunFiles::output_pattern`]).
    pub fn output(&self, job_id: u64) -> RunFile<'_> {
        self.file(false, format!("slurm-{job_id}.out"))
    }

    /// Checks that `loaded` (this step's `-p`) is the run's profile as submitted: loaded
    /// from [`RunFiles::profile_path`] and holding what that file holds when read
    /// through the run's handles. The config loader reads `-p` by path: had a directory
    /// on the way been swapped for a link while it read, the step would run a profile
    /// the run was not submitted with (another engine, other mounts); it refuses to.
    pub fn check_profile(&self, loaded: &LoadedProfile) -> Result<(), Error> {
        let file = self.profile();
        let bytes = file.read(FILE_CAP).map_err(file.io())?;
        let held = crate::config::yaml::Source::new(file.path(), String::from_utf8_lossy(&bytes));
        if loaded.source.origin != file.path() || loaded.source.text != held.text {
            return Err(Error::Invalid(format!(
                "the profile {} is not run {}'s as submitted ({}): run the step with -p {}",
                loaded.source.origin.display(),
                self.run_id,
                file.display(),
                file.display()
            )));
        }
        Ok(())
    }

    // The paths below are given to other programs (sbatch, srun, argus on the nodes):
    // they open them by path on other machines, where no handle of this process reaches.

    /// The profile's path, for `argus -p <path>` on the nodes.
    pub fn profile_path(&self) -> PathBuf {
        self.profile().shown
    }
    /// The batch script's path, for `sbatch`.
    pub fn script_path(&self) -> PathBuf {
        self.script().shown
    }
    /// The batch step's output, for `sbatch --output` (`%j`: the job id).
    pub fn output_pattern(&self) -> PathBuf {
        self.path().join("slurm-%j.out")
    }
}

/// One file of a run, reached through the run's handles ([`RunFiles`]); its path is for
/// messages.
#[derive(Debug)]
pub struct RunFile<'a> {
    files: &'a RunFiles,
    in_slurm: bool,
    name: String,
    shown: PathBuf,
}

impl RunFile<'_> {
    fn dir(&self) -> std::io::Result<Dir> {
        if self.in_slurm {
            self.files.slurm_dir()
        } else {
            self.files.run_dir()
        }
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The file's path, for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.shown.display()
    }

    /// Whether anything is at the file's name (a link there counts: it is refused when
    /// read).
    pub fn exists(&self) -> bool {
        self.dir()
            .and_then(|dir| dir.kind(&self.name))
            .is_ok_and(|kind| kind.is_some())
    }

    /// Opens the file for reading (a regular file, no link: see [`Dir::open_file`]).
    pub fn open(&self) -> std::io::Result<std::fs::File> {
        self.dir()?.open_file(&self.name)
    }

    /// The file whole, refused over `cap` bytes (see [`Dir::read`]).
    pub fn read(&self, cap: u64) -> std::io::Result<Vec<u8>> {
        self.dir()?.read(&self.name, cap)
    }

    /// Writes the file atomically in its directory (a link at its name is replaced,
    /// never followed).
    pub fn write_atomic(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.dir()?.write_atomic(&self.name, bytes)
    }

    /// Removes the file (not what a link there points to); nothing there is fine.
    pub fn remove(&self) -> std::io::Result<()> {
        match self.dir()?.remove_file(&self.name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            result => result,
        }
    }

    /// An I/O error on this file.
    pub fn io(&self) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: self.shown.clone(),
            source,
        }
    }
}

/// The name of image `image_id`'s archive in [`IMAGES`]; an id that is not a digest is
/// refused (the id comes from a record on the shared storage).
pub fn image_archive_name(image_id: &str) -> Result<String, Error> {
    let hex = image_id.trim_start_matches("sha256:");
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Invalid(format!(
            "image id {image_id:?} is not a sha256 digest"
        )));
    }
    Ok(format!("{hex}.tar"))
}

/// The image archive on the shared storage, named by the image id, for messages.
pub fn image_archive(layout: &Layout, image_id: &str) -> PathBuf {
    let hex = image_id.trim_start_matches("sha256:");
    layout.root().join(IMAGES).join(format!("{hex}.tar"))
}

/// The cluster of Slurm job `job_id`: one per job, so names never clash between jobs.
pub fn cluster_name(profile: &str, job_id: u64) -> String {
    format!("{profile}-j{job_id}")
}

/// The allocation as a multi-host profile in memory: one host per node (its engine the
/// profile's `slurm.engine_socket`, its address the node's), the head on the first node,
/// one worker per node with that node's Slurm GPUs (device ids = their absolute indexes;
/// simulated GPUs of the same count when the profile's worker group is simulated), host
/// networking with the job's port slot. The first worker group of the profile is the
/// template for the workers' resources.
pub fn cluster_profile(
    loaded: &LoadedProfile,
    alloc: &alloc::Alloc,
) -> Result<LoadedProfile, Error> {
    let mut p = loaded.profile.clone();
    let engine = match p.slurm.as_ref().and_then(|s| s.engine_socket.clone()) {
        Some(engine) => engine,
        None => crate::config::docker::DockerEndpoint::parse(DEFAULT_ENGINE_SOCKET)
            .map_err(Error::Invalid)?,
    };
    p.name = cluster_name(&p.name, alloc.job_id);
    p.hosts = alloc
        .nodes
        .iter()
        .map(|n| HostSpec {
            name: n.name.clone(),
            docker: engine.clone(),
            address: n.address,
            tls: None,
        })
        .collect();
    p.network.mode = NetworkMode::Host;
    p.network.head_address = None;
    let head_host = alloc.nodes.first().map(|n| n.name.clone());
    p.head = NodeSpec {
        host: head_host,
        ..p.head.clone()
    };
    let template = p.workers.first().cloned();
    let simulated = template
        .as_ref()
        .is_none_or(|g| g.gpu_mode == GpuMode::Simulated);
    p.workers = alloc
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let gpus = u32::try_from(n.gpus.len()).unwrap_or(u32::MAX);
            let t = template.clone();
            WorkerGroup {
                name: format!("node{i}"),
                count: None,
                host: None,
                hosts: Some(HostCounts(vec![(n.name.clone(), 1)])),
                gpus,
                gpu_mode: if simulated {
                    GpuMode::Simulated
                } else {
                    t.as_ref().map_or(GpuMode::Nvidia, |g| g.gpu_mode)
                },
                device_ids: (!simulated).then(|| vec![n.gpus.clone()]),
                cpus: t.as_ref().and_then(|g| g.cpus),
                ray_cpus: t.as_ref().and_then(|g| g.ray_cpus),
                env: t.as_ref().map(|g| g.env.clone()).unwrap_or_default(),
                memory: t.as_ref().and_then(|g| g.memory),
                shm_size: t.as_ref().and_then(|g| g.shm_size),
                object_store_memory: t.as_ref().and_then(|g| g.object_store_memory),
                resources: t.map(|g| g.resources).unwrap_or_default(),
            }
        })
        .collect();
    let (gcs, dashboard) = ports::head_ports(alloc.slot);
    p.ray.gcs_port = gcs;
    p.ray.dashboard_port = dashboard;
    p.ray.dashboard_bind = "127.0.0.1".into();
    // The batch step runs on the head's node: the dashboard is on its loopback.
    p.submit.address = Some(format!("http://127.0.0.1:{dashboard}"));
    Ok(LoadedProfile {
        profile: p,
        source: loaded.source.clone(),
    })
}

/// A step's view of its run on a node: the run's files (the step's profile checked to be
/// the run's), the allocation the batch step wrote, and the cluster planned from it.
pub struct RunView {
    pub layout: Layout,
    pub files: RunFiles,
    pub alloc: alloc::Alloc,
    pub cluster: LoadedProfile,
}

/// Opens run `run_id` for a step given `-p` the run's profile.
pub fn run_view(loaded: &LoadedProfile, run_id: &str) -> Result<RunView, Error> {
    let (layout, files) = open_run(loaded, run_id)?;
    let alloc: alloc::Alloc = read_json(&files.alloc())?;
    let cluster = cluster_profile(loaded, &alloc)?;
    Ok(RunView {
        layout,
        files,
        alloc,
        cluster,
    })
}

/// The shared storage's layout and run `run_id`'s files, for a step given `-p` the run's
/// profile (checked to be the run's).
pub fn open_run(loaded: &LoadedProfile, run_id: &str) -> Result<(Layout, RunFiles), Error> {
    let layout = loaded.host_layout()?;
    let files = RunFiles::open(&layout, run_id).map_err(|source| Error::Io {
        path: RunFiles::new(&layout, run_id).path(),
        source,
    })?;
    files.check_profile(loaded)?;
    Ok((layout, files))
}

/// The plan inputs of a Slurm job: its port slot on every node, its label.
pub fn plan_inputs(
    alloc: &alloc::Alloc,
    image_id: &str,
    token: Option<String>,
) -> crate::cluster::plan::PlanInputs {
    crate::cluster::plan::PlanInputs {
        image_id: image_id.to_string(),
        token,
        first_block: alloc
            .nodes
            .iter()
            .map(|n| (n.name.clone(), ports::first_block(alloc.slot)))
            .collect(),
        labels: BTreeMap::from([(
            crate::cluster::node::LABEL_SLURM_JOB.to_string(),
            alloc.job_id.to_string(),
        )]),
        // Each node step adds its own (`node::collective_iface`): only it sees its routes.
        collective_iface: BTreeMap::new(),
    }
}

/// Reads a run's JSON file (at most [`FILE_CAP`] bytes).
pub fn read_json<T: serde::de::DeserializeOwned>(file: &RunFile) -> Result<T, Error> {
    let bytes = file.read(FILE_CAP).map_err(file.io())?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Invalid(format!("{}: {e}", file.display())))
}

/// Writes a run's JSON file atomically.
pub fn write_json<T: serde::Serialize>(file: &RunFile, value: &T) -> Result<(), Error> {
    let bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    file.write_atomic(&bytes).map_err(file.io())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::{GpuAttach, plan};
    use crate::config::profile::NodeAddress;
    use crate::config::yaml::Source;

    fn alloc(slot: u32) -> alloc::Alloc {
        let node = |name: &str, ip: [u8; 4], gpus: Vec<u32>| alloc::Node {
            name: name.into(),
            address: NodeAddress(ip.into()),
            gpus,
        };
        alloc::Alloc {
            job_id: 42,
            nodes: vec![
                node("a", [10, 0, 0, 1], vec![1]),
                node("b", [10, 0, 0, 2], vec![0]),
                node("c", [10, 0, 0, 3], vec![1]),
            ],
            slot,
        }
    }

    fn profile(gpu_mode: &str) -> LoadedProfile {
        let text = format!(
            "name: s\nimage: argus/ray:2.51.1\nshared: {{host_path: /tmp/x}}\nslurm: {{engine_socket: 'unix:///run/e.sock', nodes: 3}}\nworkers: [{{name: gpu, count: 1, gpus: 1, gpu_mode: {gpu_mode}, cpus: 2}}]\n"
        );
        LoadedProfile::from_source(Source::new("p.yaml", text)).unwrap()
    }

    #[test]
    fn the_allocation_becomes_a_cluster_with_the_nodes_gpus() {
        let cluster = cluster_profile(&profile("nvidia"), &alloc(1)).unwrap();
        let plan = plan(&cluster, &plan_inputs(&alloc(1), "sha256:i", None));
        assert_eq!(plan.cluster, "s-j42");
        let hosts: Vec<_> = plan.containers.iter().map(|c| c.host.as_str()).collect();
        assert_eq!(hosts, ["a", "a", "b", "c"]);
        assert_eq!(plan.containers[0].name, "s-j42-head");
        assert_eq!(
            plan.containers[1].gpu,
            GpuAttach::Nvidia {
                device_ids: vec![1]
            }
        );
        assert_eq!(
            plan.containers[2].gpu,
            GpuAttach::Nvidia {
                device_ids: vec![0]
            }
        );
        assert_eq!(
            plan.containers[3].expect.node_ip.as_deref(),
            Some("10.0.0.3")
        );
        assert_eq!(plan.containers[1].cpus, Some(2.0));
        let flag = |i: usize, f: &str| plan.containers[i].command.iter().any(|a| a == f);
        // Slot 1: blocks 2 and 3; the head's GCS and dashboard inside block 2.
        assert!(flag(0, "--port=22010"));
        assert!(flag(0, "--dashboard-port=22011"));
        assert!(flag(0, "--node-manager-port=22000"));
        assert!(flag(0, "--ray-client-server-port=22006"));
        assert!(flag(1, "--node-manager-port=23000"));
        assert!(flag(2, "--node-manager-port=22000"));
        assert!(flag(2, "--address=10.0.0.1:22010"));
        for c in &plan.containers {
            assert_eq!(c.labels("s-j42")["argus.slurm.job"], "42");
        }
        assert_eq!(cluster.dashboard_url(), "http://127.0.0.1:22011");
        assert_eq!(
            cluster.profile.hosts[0].docker.as_str(),
            "unix:///run/e.sock"
        );
    }

    #[test]
    fn simulated_workers_get_as_many_gpus_as_slurm_gave() {
        let cluster = cluster_profile(&profile("simulated"), &alloc(0)).unwrap();
        let plan = plan(&cluster, &plan_inputs(&alloc(0), "sha256:i", None));
        assert_eq!(plan.containers[1].gpu, GpuAttach::Simulated { count: 1 });
        assert_eq!(plan.containers[1].expect.gpus, 1);
    }

    #[test]
    fn two_jobs_on_one_node_differ_in_names_and_ports() {
        let loaded = profile("nvidia");
        let mut other = alloc(1);
        other.job_id = 43;
        let a = plan(
            &cluster_profile(&loaded, &alloc(0)).unwrap(),
            &plan_inputs(&alloc(0), "i", None),
        );
        let b = plan(
            &cluster_profile(&loaded, &other).unwrap(),
            &plan_inputs(&other, "i", None),
        );
        let ports = |p: &crate::cluster::plan::ClusterPlan| -> Vec<String> {
            p.containers
                .iter()
                .filter(|c| c.host == "a")
                .flat_map(|c| c.command.iter())
                .filter(|f| f.contains("port="))
                .map(|f| f.split('=').nth(1).unwrap_or_default().to_string())
                .collect()
        };
        let (pa, pb) = (ports(&a), ports(&b));
        assert!(pa.iter().all(|p| !pb.contains(p)), "{pa:?} / {pb:?}");
        assert!(
            a.containers
                .iter()
                .all(|c| b.containers.iter().all(|d| d.name != c.name))
        );
    }

    /// A shared root with `runs/<id>/slurm`, a run's files opened in it, and an outside
    /// directory.
    fn opened_run(dir: &Path, id: &str) -> (Layout, RunFiles, PathBuf) {
        let outside = dir.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let layout = Layout::new(dir.join("shared"));
        RunFiles::create(&layout, id).unwrap();
        let files = RunFiles::open(&layout, id).unwrap();
        (layout, files, outside)
    }

    #[test]
    fn a_run_directory_swapped_for_a_link_keeps_the_runs_files_inside() {
        let dir = tempfile::tempdir().unwrap();
        let id = "20260101-000000-abcd";
        let (layout, files, outside) = opened_run(dir.path(), id);
        write_json(&files.record(), &serde_json::json!({"run": 1})).unwrap();
        // Swapped after the run's directory was opened (the batch step holds it).
        let moved = dir.path().join("moved");
        crate::fsx::swap_for_link(&layout.runs().join(id), &moved, &outside);
        write_json(&files.alloc(), &serde_json::json!({"a": 1})).unwrap();
        write_json(&files.batch(), &serde_json::json!({"b": 2})).unwrap();
        files.stop().write_atomic(b"stop\n").unwrap();
        write_json(&files.record(), &serde_json::json!({"run": 2})).unwrap();
        assert!(moved.join("slurm/alloc.json").is_file());
        assert!(moved.join("slurm/batch.json").is_file());
        assert!(files.stop().exists());
        assert!(moved.join("slurm/stop").is_file());
        let back: serde_json::Value = read_json(&files.record()).unwrap();
        assert_eq!(back["run"], 2);
        files.stop().remove().unwrap();
        assert!(!moved.join("slurm/stop").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Opened again now, the link is refused (exit 2), nothing read through it.
        let err = RunFiles::open(&layout, id).unwrap_err();
        assert!(
            matches!(
                crate::fsx::Unsafe::of(&err),
                Some(crate::fsx::Unsafe::Link { .. })
            ),
            "{err}"
        );
        let err = read_json::<serde_json::Value>(&RunFiles::new(&layout, id).record()).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
    }

    #[test]
    fn a_slurm_directory_swapped_for_a_link_keeps_the_node_files_inside() {
        let dir = tempfile::tempdir().unwrap();
        let id = "20260101-000000-abce";
        let (layout, files, outside) = opened_run(dir.path(), id);
        let moved = dir.path().join("moved");
        crate::fsx::swap_for_link(&layout.runs().join(id).join("slurm"), &moved, &outside);
        files.profile().write_atomic(b"name: p\n").unwrap();
        files.jobspec().write_atomic(b"job: x\n").unwrap();
        write_json(&files.batch(), &serde_json::json!({"b": 1})).unwrap();
        assert_eq!(files.profile().read(FILE_CAP).unwrap(), b"name: p\n");
        assert!(moved.join("profile.yaml").is_file() && moved.join("jobspec.yaml").is_file());
        assert!(moved.join("batch.json").is_file());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // The paths given to other programs still name the run's own.
        assert_eq!(
            files.profile_path(),
            layout.runs().join(id).join("slurm/profile.yaml")
        );
        assert_eq!(
            files.output_pattern(),
            layout.runs().join(id).join("slurm-%j.out")
        );
    }

    #[test]
    fn a_planted_link_at_a_run_file_is_refused_or_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let id = "20260101-000000-abcf";
        let (layout, files, outside) = opened_run(dir.path(), id);
        let secret = outside.join("secret.json");
        std::fs::write(&secret, br#"{"stolen": true}"#).unwrap();
        let run = layout.runs().join(id);
        std::os::unix::fs::symlink(&secret, run.join("slurm/batch.json")).unwrap();
        std::os::unix::fs::symlink(&secret, run.join("slurm.json")).unwrap();
        let err = read_json::<serde_json::Value>(&files.batch()).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
        assert!(err.hint().is_some());
        // A write replaces the link; the file it pointed at is untouched.
        write_json(&files.record(), &serde_json::json!({"run": 1})).unwrap();
        assert!(run.join("slurm.json").is_file());
        assert_eq!(std::fs::read(&secret).unwrap(), br#"{"stolen": true}"#);
        // An id that is not a plain id names nothing.
        let err = RunFiles::open(&layout, "../outside").unwrap_err();
        assert!(
            matches!(
                crate::fsx::Unsafe::of(&err),
                Some(crate::fsx::Unsafe::Escapes { .. })
            ),
            "{err}"
        );
    }

    #[test]
    fn image_archive_names_are_digests_only() {
        assert_eq!(image_archive_name("sha256:ab12").unwrap(), "ab12.tar");
        for bad in ["sha256:../../etc/x", "", "sha256:", "ab/cd"] {
            assert!(image_archive_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_step_runs_only_the_profile_the_run_was_submitted_with() {
        let dir = tempfile::tempdir().unwrap();
        let id = "20260101-000000-abd0";
        let (layout, files, outside) = opened_run(dir.path(), id);
        let text = profile("nvidia").source.text;
        files.profile().write_atomic(text.as_bytes()).unwrap();
        let loaded = |origin: &Path, text: &str| {
            LoadedProfile::from_source(Source::new(origin, text.to_string())).unwrap()
        };
        files
            .check_profile(&loaded(&files.profile_path(), &text))
            .unwrap();
        // Another file, or what a link swapped in on the way led the loader to: refused.
        let other = outside.join("profile.yaml");
        let err = files.check_profile(&loaded(&other, &text)).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
        let hostile = text.replace("unix:///run/e.sock", "tcp://evil:2375");
        assert_ne!(hostile, text);
        let err = files
            .check_profile(&loaded(&files.profile_path(), &hostile))
            .unwrap_err();
        assert!(err.to_string().contains("not run"), "{err}");
        // The run's slurm/ now a link: its copy is not read through it.
        let moved = dir.path().join("moved");
        crate::fsx::swap_for_link(&layout.runs().join(id).join("slurm"), &moved, &outside);
        std::fs::write(&other, &hostile).unwrap();
        assert!(RunFiles::open(&layout, id).is_err());
        let fresh = RunFiles::new(&layout, id);
        let err = fresh
            .check_profile(&loaded(&fresh.profile_path(), &hostile))
            .unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{err}");
    }
}
