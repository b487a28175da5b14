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
pub mod epilog;
pub mod node;
pub mod ports;
pub mod record;
pub mod relay;
pub mod run;
pub mod script;
pub mod submit;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::profile::{GpuMode, HostCounts, HostSpec, NetworkMode, NodeSpec, WorkerGroup};
use crate::config::{Layout, LoadedProfile};
use crate::exit::{Classify, Exit};

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
    #[error("no Slurm run {run_id} under {}", dir.display())]
    UnknownRun { run_id: String, dir: PathBuf },
    #[error("cannot read or write {}", path.display())]
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
            Error::Io { .. } => Exit::Failed,
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
            Error::Inputs(e) => e.hint(),
            Error::Image(e) => e.hint(),
            Error::Cluster(e) => e.hint(),
            Error::Submit(e) => e.hint(),
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
    let output = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: program.into(),
            source,
        })?;
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

/// The files of one Slurm run, under `<shared>/runs/<run_id>/`.
#[derive(Debug, Clone)]
pub struct RunFiles {
    pub dir: PathBuf,
}

impl RunFiles {
    pub fn new(layout: &Layout, run_id: &str) -> RunFiles {
        RunFiles {
            dir: layout.runs().join(run_id),
        }
    }
    /// The profile as submitted (the nodes read this copy).
    pub fn profile(&self) -> PathBuf {
        self.dir.join("slurm/profile.yaml")
    }
    /// The JobSpec as resolved on the login node (code pinned), secrets redacted.
    pub fn jobspec(&self) -> PathBuf {
        self.dir.join("slurm/jobspec.yaml")
    }
    pub fn script(&self) -> PathBuf {
        self.dir.join("slurm.sbatch")
    }
    /// What submit recorded, and how the Slurm job ended.
    pub fn record(&self) -> PathBuf {
        self.dir.join("slurm.json")
    }
    /// The allocation as the batch step read it (the node steps plan from it).
    pub fn alloc(&self) -> PathBuf {
        self.dir.join("slurm/alloc.json")
    }
    /// The batch step's report: stages, the job's end.
    pub fn batch(&self) -> PathBuf {
        self.dir.join("slurm/batch.json")
    }
    /// Written by the batch step when the node steps are to end (srun, told SIGTERM,
    /// kills its tasks outright: they would leave their containers).
    pub fn stop(&self) -> PathBuf {
        self.dir.join("slurm/stop")
    }
    /// The batch step's output (`%j`: the job id).
    pub fn output(&self) -> PathBuf {
        self.dir.join("slurm-%j.out")
    }
}

/// Where port-slot claims live on the shared storage.
pub fn slots_dir(layout: &Layout) -> PathBuf {
    layout.root().join(".argus/slurm-slots")
}

/// The image archive on the shared storage, named by the image id.
pub fn image_archive(layout: &Layout, image_id: &str) -> PathBuf {
    let hex = image_id.trim_start_matches("sha256:");
    layout
        .root()
        .join("common/images")
        .join(format!("{hex}.tar"))
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
    }
}

/// Reads a JSON file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

/// Writes a JSON file atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    crate::fsx::write_atomic(path, &bytes).map_err(io)
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
}
