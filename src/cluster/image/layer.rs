//! The verl image: verl's dependencies, pinned by a lock kept in the repository per
//! supported release (`assets/verl/<version>/requirements.lock`, and
//! `requirements-gpu.lock` for GPU hosts), installed with pip on top of argus's Ray image and
//! committed as a layer of it. verl's own code is not in the image: it comes from a code
//! snapshot on the shared storage, as on real clusters.
//!
//! The CPU flavour also carries `argus_verl_cpu` (`assets/verl/argus_verl_cpu/`), the
//! small shim that stands in for a GPU on hosts without one (Ray's
//! `worker_process_setup_hook`); a GPU host's image holds vLLM instead and no shim.
//!
//! pip runs in a container of the base image on the host's network (so it reaches PyPI as
//! this host does, with this host's CA bundle and pip configuration, mounted read-only and
//! never committed). The layer is labelled with the hash of its inputs (base image id,
//! lock, shim): an image from the same inputs is found and not rebuilt.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptions,
};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::super::docker::docker_err;
use crate::ids::RequirementsLock;

use super::build::{BuildReport, built, existing, host_ca_bundle, host_pip_config, lock_inputs};
use super::{BuildError, LABEL_INPUTS, VENV, io_err, short_id};
use crate::ui::{Reporter, Task};

/// A verl release argus has locks for: its CPU lock (with the shim, for hosts without a
/// GPU) and, where there is one, its GPU lock (CUDA torch, vLLM; no shim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerlRelease {
    pub version: &'static str,
    pub cpu_lock: &'static str,
    pub gpu_lock: Option<&'static str>,
}

/// The releases argus supports, oldest first. verl's code comes from a snapshot of the
/// same release (`code.source: pypi:verl==<version>`); the image holds its dependencies.
pub const RELEASES: [VerlRelease; 2] = [
    VerlRelease {
        version: "0.8.0",
        cpu_lock: include_str!("../../../assets/verl/0.8.0/requirements.lock"),
        gpu_lock: None,
    },
    VerlRelease {
        version: "0.9.1",
        cpu_lock: include_str!("../../../assets/verl/0.9.1/requirements.lock"),
        gpu_lock: Some(include_str!(
            "../../../assets/verl/0.9.1/requirements-gpu.lock"
        )),
    },
];

/// The release of the built-in profile and the shipped JobSpecs.
pub const VERL_VERSION: &str = "0.9.1";

/// The supported release `version`, if it is one.
pub fn release(version: &str) -> Option<&'static VerlRelease> {
    RELEASES.iter().find(|r| r.version == version)
}

/// The supported versions, for messages: `0.8.0, 0.9.1`.
pub fn supported_versions() -> String {
    RELEASES
        .iter()
        .map(|r| r.version)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a verl image is for: hosts without a GPU (the shim) or with NVIDIA GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Cpu,
    Gpu,
}

impl Flavour {
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Cpu => "cpu",
            Flavour::Gpu => "gpu",
        }
    }
}

/// An argus verl tag read back: `argus/verl:<version>-<cpu|gpu>[-ray<ray version>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerlTag {
    pub release: &'static VerlRelease,
    pub flavour: Flavour,
    /// The Ray version of the base image (argus's default when the tag names none).
    pub ray_version: String,
}

impl VerlTag {
    pub fn parse(reference: &str) -> Option<VerlTag> {
        let rest = reference
            .strip_prefix("docker.io/")
            .unwrap_or(reference)
            .strip_prefix("argus/verl:")?;
        let (version, rest) = rest.split_once('-')?;
        let release = release(version)?;
        let (flavour, ray) = match rest.split_once("-ray") {
            Some((flavour, ray)) => (flavour, Some(ray)),
            None => (rest, None),
        };
        let flavour = match flavour {
            "cpu" => Flavour::Cpu,
            "gpu" => Flavour::Gpu,
            _ => return None,
        };
        let ray_version = match ray {
            Some(v) if super::valid_version_word(v) => v.to_string(),
            Some(_) => return None,
            None => super::DEFAULT_RAY_VERSION.to_string(),
        };
        Some(VerlTag {
            release,
            flavour,
            ray_version,
        })
    }
}

/// The tag argus gives the `flavour` image of `version` on `argus/ray:<ray_version>`.
pub fn tag_for(version: &str, flavour: Flavour, ray_version: &str) -> String {
    let mut tag = format!("argus/verl:{version}-{}", flavour.as_str());
    if ray_version != super::DEFAULT_RAY_VERSION {
        tag.push_str(&format!("-ray{ray_version}"));
    }
    tag
}

/// The command that builds the image `tag` names (for hints).
pub fn build_command(tag: &VerlTag) -> String {
    let mut cmd = format!(
        "argus image build --verl --verl-version {}",
        tag.release.version
    );
    if tag.flavour == Flavour::Gpu {
        cmd.push_str(" --gpu");
    }
    if tag.ray_version != super::DEFAULT_RAY_VERSION {
        cmd.push_str(&format!(" --ray-version {}", tag.ray_version));
    }
    cmd
}

/// The CPU shim's files, installed as the package `argus_verl_cpu`.
pub const CPU_SHIM: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../assets/verl/argus_verl_cpu/__init__.py"),
    ),
    (
        "patches.py",
        include_str!("../../../assets/verl/argus_verl_cpu/patches.py"),
    ),
    (
        "rollout.py",
        include_str!("../../../assets/verl/argus_verl_cpu/rollout.py"),
    ),
    (
        "run_module.py",
        include_str!("../../../assets/verl/argus_verl_cpu/run_module.py"),
    ),
    // verl 0.9's `cpu` platform, loaded through the `verl.plugins` entry point below.
    (
        "platform.py",
        include_str!("../../../assets/verl/argus_verl_cpu/platform.py"),
    ),
    // The shaped GSM8K reward (a random model never solves GSM8K): verl loads it as
    // `reward.custom_reward_function.path=pkg://argus_verl_cpu.reward`.
    ("reward.py", include_str!("../../../assets/verl/reward.py")),
];
/// The shim's distribution metadata, installed beside it: its `entry_points.txt` makes
/// verl 0.9 load the `cpu` platform in every process (`verl.plugins`), the driver included.
pub const CPU_SHIM_DIST_INFO: (&str, &[(&str, &str)]) = (
    "argus_verl_cpu-0.2.0.dist-info",
    &[
        (
            "METADATA",
            include_str!("../../../assets/verl/argus_verl_cpu-0.2.0.dist-info/METADATA"),
        ),
        (
            "entry_points.txt",
            include_str!("../../../assets/verl/argus_verl_cpu-0.2.0.dist-info/entry_points.txt"),
        ),
        (
            "top_level.txt",
            include_str!("../../../assets/verl/argus_verl_cpu-0.2.0.dist-info/top_level.txt"),
        ),
        (
            "RECORD",
            include_str!("../../../assets/verl/argus_verl_cpu-0.2.0.dist-info/RECORD"),
        ),
    ],
);

/// The label naming the lock's hash, so a job's record can say which deps it ran on.
pub const LABEL_VERL_LOCK: &str = "argus.verl.lock";
/// The label naming the verl release the image's lock is for (`0.9.1`), when known.
pub const LABEL_VERL_VERSION: &str = "argus.verl.version";
/// Bumped whenever the steps below change what ends up in the layer.
const LAYER_RECIPE: u32 = 2;

/// The default tag of the CPU verl image (the built-in profile's).
pub fn default_tag() -> String {
    tag_for(VERL_VERSION, Flavour::Cpu, super::DEFAULT_RAY_VERSION)
}

/// True for a reference argus builds as a verl layer (`argus/verl:...`).
pub fn is_verl_tag(reference: &str) -> bool {
    reference.starts_with("argus/verl:")
}

#[derive(Debug, Clone)]
pub struct LayerSpec {
    pub tag: String,
    /// The image it is built on (argus's Ray image), by reference.
    pub base: String,
    pub force: bool,
    /// The requirements pip installs: a release's lock ([`RELEASES`]), or a lock of the user's (a GPU host's,
    /// with vLLM).
    pub lock: RequirementsLock,
    /// Whether the CPU shim goes in (not on GPU hosts).
    pub shim: bool,
    /// The verl release the lock is for (labelled on the image), when known.
    pub verl_version: Option<String>,
}

impl LayerSpec {
    /// The image of `release` for `flavour`: argus's lock for it, the shim on CPU.
    pub fn of(
        release: &VerlRelease,
        flavour: Flavour,
        tag: String,
        base: String,
        force: bool,
    ) -> Option<Self> {
        let text = match flavour {
            Flavour::Cpu => release.cpu_lock,
            Flavour::Gpu => release.gpu_lock?,
        };
        Some(LayerSpec {
            tag,
            base,
            force,
            lock: RequirementsLock::parse(text).expect("argus's locks hold pins only"),
            shim: flavour == Flavour::Cpu,
            verl_version: Some(release.version.to_string()),
        })
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hash of what decides the layer's content.
fn inputs_hash(base_id: &str, spec: &LayerSpec) -> String {
    let mut text = format!(
        "layer={LAYER_RECIPE}\nbase={base_id}\nlock={}\nverl={}\n",
        sha256_hex(spec.lock.text().as_bytes()),
        spec.verl_version.as_deref().unwrap_or("")
    );
    if spec.shim {
        for (name, body) in CPU_SHIM {
            text.push_str(&format!("shim/{name}={}\n", sha256_hex(body.as_bytes())));
        }
        for (name, body) in CPU_SHIM_DIST_INFO.1 {
            text.push_str(&format!(
                "dist-info/{name}={}\n",
                sha256_hex(body.as_bytes())
            ));
        }
    }
    sha256_hex(text.as_bytes())[..16].to_string()
}

/// Builds the verl layer on `spec.base` unless an image from the same inputs exists.
pub async fn build_layer(
    docker: &Docker,
    spec: &LayerSpec,
    reporter: &dyn Reporter,
) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    let base = docker
        .inspect_image(&spec.base)
        .await
        .map_err(docker_err(format!("inspect base image {}", spec.base)))?;
    let base_id = base.id.clone().unwrap_or_default();
    let inputs = inputs_hash(&base_id, spec);
    // Two builds of one layer (two tests, two users) wait for each other; the second
    // then finds the first's image instead of installing 8 GB again.
    let (_, _lock) = lock_inputs(&inputs).await?;
    if !spec.force
        && let Some(report) = existing(docker, &spec.tag, &inputs).await?
    {
        return Ok(BuildReport {
            seconds: started.elapsed().as_secs_f64(),
            ..report
        });
    }

    // What pip needs from this host, mounted read-only at /argus-build.
    let staging = tempdir_for(&inputs)?;
    let result = async {
        stage(&staging, spec)?;
        let task = reporter.task("pip install (verl's dependencies)");
        let id = install_and_commit(docker, spec, &inputs, &base_id, &staging, &*task).await;
        match &id {
            Ok(id) => task.done(&format!("{} ({})", spec.tag, short_id(id))),
            Err(_) => task.fail("failed"),
        }
        id
    }
    .await;
    let _ = std::fs::remove_dir_all(&staging);
    let image_id = result?;
    built(docker, &spec.tag, image_id, inputs, None, started).await
}

fn pip_cache() -> Result<PathBuf, BuildError> {
    let dir = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("argus/pip-cache");
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    Ok(dir)
}

fn tempdir_for(inputs: &str) -> Result<PathBuf, BuildError> {
    let dir =
        std::env::temp_dir().join(format!("argus-verl-layer-{inputs}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
    }
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    Ok(dir)
}

/// The lock, the shim, this host's CA bundle and pip configuration.
fn stage(dir: &Path, spec: &LayerSpec) -> Result<(), BuildError> {
    let write = |path: PathBuf, body: &[u8]| std::fs::write(&path, body).map_err(io_err(&path));
    write(dir.join("requirements.lock"), spec.lock.text().as_bytes())?;
    if spec.shim {
        std::fs::create_dir_all(dir.join("argus_verl_cpu")).map_err(io_err(dir))?;
        for (name, body) in CPU_SHIM {
            write(dir.join("argus_verl_cpu").join(name), body.as_bytes())?;
        }
        let dist_info = dir.join(CPU_SHIM_DIST_INFO.0);
        std::fs::create_dir_all(&dist_info).map_err(io_err(dir))?;
        for (name, body) in CPU_SHIM_DIST_INFO.1 {
            write(dist_info.join(name), body.as_bytes())?;
        }
    }
    if let Some(ca) = host_ca_bundle() {
        let to = dir.join("ca.crt");
        std::fs::copy(&ca, &to).map_err(io_err(&to))?;
    }
    if let Some(conf) = host_pip_config() {
        let to = dir.join("pip.conf");
        std::fs::copy(&conf, &to).map_err(io_err(&to))?;
    }
    Ok(())
}

/// The build script: fixed text, no value from outside goes into it.
fn script() -> String {
    let dist_info = CPU_SHIM_DIST_INFO.0;
    format!(
        r#"set -eu
if [ -f /argus-build/ca.crt ]; then
  export PIP_CERT=/argus-build/ca.crt REQUESTS_CA_BUNDLE=/argus-build/ca.crt SSL_CERT_FILE=/argus-build/ca.crt
fi
if [ -f /argus-build/pip.conf ]; then export PIP_CONFIG_FILE=/argus-build/pip.conf; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_CACHE_DIR=/argus-pip-cache
{VENV}/bin/pip install --progress-bar off -r /argus-build/requirements.lock
site=$({VENV}/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$site/argus_verl_cpu" "$site"/argus_verl_cpu-*.dist-info
{VENV}/bin/python3 -c 'import torch, transformers, hydra, tensordict'
if [ -d /argus-build/argus_verl_cpu ]; then
  cp -r /argus-build/argus_verl_cpu "$site/argus_verl_cpu"
  cp -r /argus-build/{dist_info} "$site/{dist_info}"
  find "$site/argus_verl_cpu" "$site/{dist_info}" -type f -exec chmod 0644 {{}} +
  {VENV}/bin/python3 -c 'import argus_verl_cpu'
  {VENV}/bin/python3 -c 'import importlib.metadata as m; assert [e for e in m.entry_points(group="verl.plugins") if e.name == "argus_verl_cpu"]'
fi
mkdir -p /etc/argus
{VENV}/bin/pip freeze > /etc/argus/pip-freeze-verl.txt
cp /argus-build/requirements.lock /etc/argus/verl-requirements.lock
find / -xdev -name __pycache__ -path '*/argus_verl_cpu/*' -prune -exec rm -rf {{}} + 2>/dev/null || true
"#
    )
}

async fn install_and_commit(
    docker: &Docker,
    spec: &LayerSpec,
    inputs: &str,
    base_id: &str,
    staging: &Path,
    task: &dyn Task,
) -> Result<String, BuildError> {
    let body = ContainerCreateBody {
        image: Some(base_id.to_string()),
        cmd: Some(vec!["sh".into(), "-c".into(), script()]),
        host_config: Some(HostConfig {
            network_mode: Some("host".into()),
            // pip's download cache on this host (never in the image): a rebuild after a
            // change of the lock downloads only what changed.
            binds: Some(vec![
                format!("{}:/argus-build:ro", staging.display()),
                format!("{}:/argus-pip-cache", pip_cache()?.display()),
            ]),
            ..Default::default()
        }),
        labels: Some(
            [("argus.build".to_string(), "verl-layer".to_string())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    let created = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .map_err(docker_err("create the build container"))?;
    let id = created.id;
    let outcome = run_and_commit(docker, spec, inputs, &id, task).await;
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = docker.remove_container(&id, Some(options)).await;
    outcome
}

async fn run_and_commit(
    docker: &Docker,
    spec: &LayerSpec,
    inputs: &str,
    id: &str,
    task: &dyn Task,
) -> Result<String, BuildError> {
    docker
        .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(docker_err("start the build container"))?;
    // Follow pip's output: the line under way, and how many requirements it has collected.
    let total = spec.lock.pins().len() as u64;
    let mut collected = 0u64;
    let mut tail: Vec<String> = Vec::new();
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .follow(true)
        .build();
    let mut logs = docker.logs(id, Some(options));
    let mut partial = String::new();
    while let Some(chunk) = logs.next().await {
        let Ok(chunk) = chunk else { break };
        partial.push_str(&chunk.to_string());
        while let Some(end) = partial.find('\n') {
            let line: String = partial.drain(..=end).collect();
            let line = line.trim_end().to_string();
            if line.starts_with("Collecting ") {
                collected += 1;
                task.progress(collected.min(total), Some(total));
            }
            if !line.is_empty() {
                task.update(&line);
                tail.push(line);
                if tail.len() > 40 {
                    tail.remove(0);
                }
            }
        }
    }
    let mut code = -1;
    let mut waits = docker.wait_container(id, None::<WaitContainerOptions>);
    while let Some(item) = waits.next().await {
        match item {
            Ok(response) => code = response.status_code,
            Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => code = c,
            Err(e) => return Err(docker_err("wait for the build container")(e).into()),
        }
    }
    if code != 0 {
        return Err(BuildError::Step {
            step: "pip install of the verl lock".into(),
            status: code.to_string(),
            output: tail.join("\n"),
        });
    }
    task.update("commit");
    let (repo, tag) = match spec.tag.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (spec.tag.clone(), "latest".to_string()),
    };
    let lock_hash = sha256_hex(spec.lock.text().as_bytes());
    let changes = [
        r#"CMD ["bash"]"#.to_string(),
        format!("LABEL {LABEL_INPUTS}={inputs}"),
        format!("LABEL {LABEL_VERL_LOCK}=sha256:{lock_hash}"),
        format!(
            "LABEL {LABEL_VERL_VERSION}={}",
            spec.verl_version.as_deref().unwrap_or("")
        ),
        "LABEL argus.build=".to_string(),
    ]
    .join("\n");
    let options = CommitContainerOptionsBuilder::new()
        .container(id)
        .repo(&repo)
        .tag(&tag)
        .comment(
            "argus: verl's dependencies (assets/verl/0.8.0/requirements.lock) and the CPU shim",
        )
        .changes(&changes)
        .build();
    let committed = docker
        .commit_container(options, bollard::models::ContainerConfig::default())
        .await
        .map_err(docker_err(format!("commit {}", spec.tag)))?;
    Ok(committed.id)
}
