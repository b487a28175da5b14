//! The build policy (an image from the same inputs is never rebuilt) and its steps:
//! debootstrap, the venv with Ray pinned, the import.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::Docker;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::process::Command;

use super::super::docker::{docker_err, is_not_found};
use crate::ui::Reporter;

use super::apt::debian_mirror;
use super::import::import;
use super::process::{chroot, run_step};
use super::{BASE_PIP, BuildError, LABEL_INPUTS, RECIPE_VERSION, VENV, io_err, short_id};

#[derive(Debug, Clone, Serialize)]
pub struct BuildSpec {
    pub tag: String,
    pub ray_version: String,
    pub pip: Vec<String>,
    pub suite: String,
    pub mirror: Option<String>,
    pub force: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BuildReport {
    pub tag: String,
    pub image_id: String,
    pub inputs: String,
    pub reused: bool,
    pub size_bytes: u64,
    pub mirror: Option<String>,
    pub seconds: f64,
}

impl BuildSpec {
    /// Hash of what decides the image's content (not the mirror: it serves the same suite).
    pub fn inputs_hash(&self) -> String {
        let text = format!(
            "recipe={RECIPE_VERSION}\nsuite={}\nray={}\npip={}\narch={}\n",
            self.suite,
            self.ray_version,
            self.pip.join(" "),
            std::env::consts::ARCH
        );
        let digest = Sha256::digest(text.as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

/// Builds the image unless one from the same inputs exists under the tag.
pub async fn build(
    docker: &Docker,
    spec: &BuildSpec,
    reporter: &dyn Reporter,
) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    let inputs = spec.inputs_hash();
    if !spec
        .ray_version
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.')
    {
        return Err(BuildError::Input {
            what: "Ray version".into(),
            value: spec.ray_version.clone(),
        });
    }
    let (cache, lock) = lock_inputs(&inputs).await?;

    if !spec.force
        && let Some(report) = existing(docker, &spec.tag, &inputs).await?
    {
        return Ok(BuildReport {
            seconds: started.elapsed().as_secs_f64(),
            ..report
        });
    }
    preflight()?;
    let mirror = match &spec.mirror {
        Some(mirror) => mirror.clone(),
        None => debian_mirror(&spec.suite)?,
    };
    let work = cache.join(&inputs);
    if work.exists() {
        // Leftovers of an interrupted build (we hold the lock: nobody else uses them).
        std::fs::remove_dir_all(&work).map_err(io_err(&work))?;
    }
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(&work).map_err(io_err(&work))?;
    let result = build_in(docker, spec, &inputs, &mirror, &rootfs, reporter).await;
    let _ = std::fs::remove_dir_all(&work);
    drop(lock);
    let image_id = result?;
    built(docker, &spec.tag, image_id, inputs, Some(mirror), started).await
}

/// Holds the build lock of `inputs` (in this host's cache directory): concurrent builds
/// of the same inputs wait for each other, then find the image. Returns the directory.
pub(super) async fn lock_inputs(inputs: &str) -> Result<(PathBuf, std::fs::File), BuildError> {
    let cache = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("argus/image-build");
    std::fs::create_dir_all(&cache).map_err(io_err(&cache))?;
    let lock_path = cache.join(format!("{inputs}.lock"));
    let lock = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    let lock = tokio::task::spawn_blocking(move || lock.lock().map(|_| lock))
        .await
        .map_err(|e| BuildError::Io {
            path: lock_path.display().to_string(),
            source: std::io::Error::other(e),
        })?
        .map_err(io_err(&cache))?;
    Ok((cache, lock))
}

/// The report of an image just built under `tag` (its size as the engine counts it).
pub(super) async fn built(
    docker: &Docker,
    tag: &str,
    image_id: String,
    inputs: String,
    mirror: Option<String>,
    started: Instant,
) -> Result<BuildReport, BuildError> {
    let info = docker
        .inspect_image(tag)
        .await
        .map_err(docker_err(format!("inspect image {tag}")))?;
    Ok(BuildReport {
        tag: tag.to_string(),
        image_id,
        inputs,
        reused: false,
        size_bytes: info.size.unwrap_or(0).max(0) as u64,
        mirror,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The image under `tag` when it was built from `inputs` (its label says so).
pub(super) async fn existing(
    docker: &Docker,
    tag: &str,
    inputs: &str,
) -> Result<Option<BuildReport>, BuildError> {
    match docker.inspect_image(tag).await {
        Ok(info) => {
            let labels = info
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default();
            if labels.get(LABEL_INPUTS).map(String::as_str) == Some(inputs) {
                return Ok(Some(BuildReport {
                    tag: tag.to_string(),
                    image_id: info.id.unwrap_or_default(),
                    inputs: inputs.to_string(),
                    reused: true,
                    size_bytes: info.size.unwrap_or(0).max(0) as u64,
                    mirror: None,
                    seconds: 0.0,
                }));
            }
            Ok(None)
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(docker_err(format!("inspect image {tag}"))(e).into()),
    }
}

fn preflight() -> Result<(), BuildError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Err(BuildError::Missing("root privileges".into()));
    }
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .chain([PathBuf::from("/usr/sbin")])
                .any(|p| p.join("debootstrap").is_file())
        })
        .unwrap_or(false);
    if !found {
        return Err(BuildError::Missing(
            "debootstrap (not found on PATH)".into(),
        ));
    }
    Ok(())
}

async fn build_in(
    docker: &Docker,
    spec: &BuildSpec,
    inputs: &str,
    mirror: &str,
    rootfs: &Path,
    reporter: &dyn Reporter,
) -> Result<String, BuildError> {
    let task = reporter.task("debootstrap");
    let rootfs_arg = rootfs.display().to_string();
    run_step(
        &*task,
        "debootstrap",
        Command::new("debootstrap").args([
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            &spec.suite,
            &rootfs_arg,
            mirror,
        ]),
    )
    .await?;
    task.done(&format!("Debian {} from {mirror}", spec.suite));

    let task = reporter.task("python venv");
    let build_dir = rootfs.join("argus-build");
    std::fs::create_dir_all(&build_dir).map_err(io_err(&build_dir))?;
    // The chroot resolves names and trusts CAs as the host does, for this build only.
    copy_if_exists(
        Path::new("/etc/resolv.conf"),
        &rootfs.join("etc/resolv.conf"),
    )?;
    let mut env: Vec<(String, String)> = Vec::new();
    if let Some(ca) = host_ca_bundle() {
        copy_if_exists(&ca, &build_dir.join("ca.crt"))?;
        // requests lets REQUESTS_CA_BUNDLE override pip's --cert: point them all at it.
        for var in [
            "PIP_CERT",
            "REQUESTS_CA_BUNDLE",
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
        ] {
            env.push((var.into(), "/argus-build/ca.crt".into()));
        }
    }
    if let Some(conf) = host_pip_config() {
        copy_if_exists(&conf, &build_dir.join("pip.conf"))?;
        env.push(("PIP_CONFIG_FILE".into(), "/argus-build/pip.conf".into()));
    }
    run_step(
        &*task,
        "python3 -m venv",
        chroot(rootfs, &env).args(["python3", "-m", "venv", VENV]),
    )
    .await?;
    let mut requirements = vec![format!("ray[default]=={}", spec.ray_version)];
    requirements.extend(BASE_PIP.iter().map(|p| p.to_string()));
    requirements.extend(spec.pip.iter().cloned());
    task.update(&format!("pip install {}", requirements.join(" ")));
    let pip = format!("{VENV}/bin/pip");
    run_step(
        &*task,
        "pip install",
        chroot(rootfs, &env)
            .args([
                pip.as_str(),
                "install",
                "--no-cache-dir",
                "--progress-bar",
                "off",
            ])
            .args(&requirements),
    )
    .await?;
    let freeze = chroot(rootfs, &env)
        .args([pip.as_str(), "freeze"])
        .output()
        .await
        .map_err(io_err(rootfs))?;
    task.done(&format!("ray {} in {VENV}", spec.ray_version));

    // Leave nothing of the host behind; record what is inside.
    std::fs::remove_dir_all(&build_dir).map_err(io_err(&build_dir))?;
    std::fs::write(rootfs.join("etc/resolv.conf"), "").map_err(io_err(rootfs))?;
    std::fs::write(
        rootfs.join("etc/hosts"),
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    .map_err(io_err(rootfs))?;
    let record = rootfs.join("etc/argus");
    std::fs::create_dir_all(&record).map_err(io_err(&record))?;
    std::fs::write(record.join("pip-freeze.txt"), &freeze.stdout).map_err(io_err(&record))?;
    std::fs::write(
        record.join("image.json"),
        serde_json::to_vec_pretty(&serde_json::json!({"inputs": inputs, "spec": spec}))
            .unwrap_or_default(),
    )
    .map_err(io_err(&record))?;
    for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        clear_files(&rootfs.join(dir));
    }

    let task = reporter.task("import");
    let image_id = import(docker, spec, inputs, rootfs, &*task).await?;
    task.done(&format!("{} ({})", spec.tag, short_id(&image_id)));
    Ok(image_id)
}

pub(super) fn host_ca_bundle() -> Option<PathBuf> {
    ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain([PathBuf::from("/etc/ssl/certs/ca-certificates.crt")])
        .find(|p| p.is_file())
}

pub(super) fn host_pip_config() -> Option<PathBuf> {
    let home = dirs::home_dir().unwrap_or_default();
    std::env::var_os("PIP_CONFIG_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            home.join(".config/pip/pip.conf"),
            home.join(".pip/pip.conf"),
            PathBuf::from("/etc/pip.conf"),
            PathBuf::from("/etc/xdg/pip/pip.conf"),
        ])
        .find(|p| p.is_file())
}

fn copy_if_exists(from: &Path, to: &Path) -> Result<(), BuildError> {
    if from.is_file() {
        // resolv.conf in the rootfs may be a dangling symlink: replace it.
        let _ = std::fs::remove_file(to);
        std::fs::copy(from, to).map_err(io_err(to))?;
    }
    Ok(())
}

fn clear_files(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
