//! The runtime image: found locally, pulled, or built without any registry.
//!
//! The build is a Debian rootfs (debootstrap from this machine's configured mirror, read
//! from apt's sources at run time), a venv at /opt/ray with `ray[default]` pinned, then a
//! `docker import` through the API. The inputs' hash is a label on the image: an image
//! built from the same inputs is found and not rebuilt.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::{StreamExt, TryStreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::Error;
use super::docker::{docker_err, is_not_found};
use crate::exit::{Classify, Exit};
use crate::ui::{Reporter, Task};

/// Bumped whenever the recipe below changes what ends up in the image.
const RECIPE_VERSION: u32 = 2;
/// Installed beside Ray in every image: verl reads its parquet datasets with pyarrow.
pub const BASE_PIP: [&str; 1] = ["pyarrow"];
pub const LABEL_INPUTS: &str = "argus.image.inputs";
pub const VENV: &str = "/opt/ray";

/// The image id of `image`, pulling it first if it is absent (not in a dry run).
pub async fn ensure(
    docker: &Docker,
    image: &str,
    dry_run: bool,
    reporter: &dyn Reporter,
) -> Result<String, Error> {
    match docker.inspect_image(image).await {
        Ok(info) => return Ok(info.id.unwrap_or_default()),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(docker_err(format!("inspect image {image}"))(e)),
    }
    if dry_run {
        return Ok(format!("(absent: {image} would be pulled)"));
    }
    let task = reporter.task(&format!("pull {image}"));
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut stream = docker.create_image(Some(options), None, None);
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                let status = [info.id, info.status]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ");
                task.update(&status);
            }
            Err(source) => {
                task.fail("pull failed");
                return Err(Error::ImageUnavailable {
                    image: image.to_string(),
                    source,
                });
            }
        }
    }
    let info = docker
        .inspect_image(image)
        .await
        .map_err(|source| Error::ImageUnavailable {
            image: image.to_string(),
            source,
        })?;
    task.done("pulled");
    Ok(info.id.unwrap_or_default())
}

/// argus's own image (`argus/ray:<version>`), built when absent; other images are left
/// to `up`, which pulls them.
pub async fn ensure_built(
    docker_host: Option<&str>,
    reference: &str,
    reporter: &dyn Reporter,
) -> Result<(), BuildError> {
    let Some(version) = reference.strip_prefix("argus/ray:") else {
        return Ok(());
    };
    let docker = super::docker::connect(docker_host).await?;
    if docker.inspect_image(reference).await.is_ok() {
        return Ok(());
    }
    let spec = BuildSpec {
        tag: reference.to_string(),
        ray_version: version.to_string(),
        pip: Vec::new(),
        suite: "bookworm".into(),
        mirror: None,
        force: false,
    };
    build(&docker, &spec, reporter).await.map(|_| ())
}

/// The registry digest of a local image, when it came from a registry.
pub async fn digest(docker_host: Option<&str>, reference: &str) -> Result<Option<String>, Error> {
    let docker = super::docker::connect(docker_host).await?;
    Ok(docker
        .inspect_image(reference)
        .await
        .ok()
        .and_then(|i| i.repo_digests)
        .and_then(|d| d.first().cloned()))
}

/// The `argus image build` flags that produce `image` (for hints).
pub fn build_flags_for(image: &str) -> String {
    match image.strip_prefix("argus/ray:") {
        Some(version) if version.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            if version == "2.51.1" {
                String::new()
            } else {
                format!(" --ray-version {version}")
            }
        }
        _ => format!(" --tag {image}"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("image build needs {0}")]
    Missing(String),
    #[error("no Debian mirror for suite {suite} in {searched}")]
    NoMirror { suite: String, searched: String },
    #[error("{step} failed (exit status {status}):\n{output}")]
    Step {
        step: String,
        status: String,
        output: String,
    },
    #[error("I/O error during image build at {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid {what} {value:?}")]
    Input { what: String, value: String },
    #[error(transparent)]
    Cluster(#[from] Error),
}

impl Classify for BuildError {
    fn exit(&self) -> Exit {
        match self {
            BuildError::Missing(_) | BuildError::NoMirror { .. } | BuildError::Input { .. } => {
                Exit::Usage
            }
            BuildError::Step { .. } | BuildError::Io { .. } => Exit::Failed,
            BuildError::Cluster(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            BuildError::Missing(what) if what.contains("debootstrap") => {
                Some("apt-get install -y debootstrap".into())
            }
            BuildError::Missing(_) => Some("run as root (debootstrap and chroot need it)".into()),
            BuildError::NoMirror { .. } => {
                Some("pass --mirror http://your.debian.mirror/debian".into())
            }
            BuildError::Cluster(e) => e.hint(),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.display().to_string(),
        source,
    }
}

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
    let cache = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("argus/image-build");
    std::fs::create_dir_all(&cache).map_err(io_err(&cache))?;
    // Concurrent builds of the same inputs wait for each other, then find the image.
    let lock_path = cache.join(format!("{inputs}.lock"));
    let lock = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    let lock = tokio::task::spawn_blocking(move || lock.lock().map(|_| lock))
        .await
        .map_err(|e| BuildError::Io {
            path: lock_path.display().to_string(),
            source: std::io::Error::other(e),
        })?
        .map_err(io_err(&cache))?;

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
    let info = docker
        .inspect_image(&spec.tag)
        .await
        .map_err(docker_err(format!("inspect image {}", spec.tag)))?;
    Ok(BuildReport {
        tag: spec.tag.clone(),
        image_id,
        inputs,
        reused: false,
        size_bytes: info.size.unwrap_or(0).max(0) as u64,
        mirror: Some(mirror),
        seconds: started.elapsed().as_secs_f64(),
    })
}

async fn existing(
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

/// The first Debian mirror in apt's sources that serves `suite` (not the security one).
pub fn debian_mirror(suite: &str) -> Result<String, BuildError> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut extra: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        extra.sort();
        files.extend(extra);
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let entries = match file.extension().and_then(|e| e.to_str()) {
            Some("sources") => parse_deb822(&text),
            Some("list") | None => parse_one_line(&text),
            _ => continue,
        };
        if let Some(uri) = entries
            .into_iter()
            .find(|(uri, suites)| suites.iter().any(|s| s == suite) && !uri.contains("security"))
            .map(|(uri, _)| uri)
        {
            return Ok(uri);
        }
    }
    Err(BuildError::NoMirror {
        suite: suite.to_string(),
        searched: "/etc/apt/sources.list and /etc/apt/sources.list.d/".into(),
    })
}

/// `Types: deb` / `URIs:` / `Suites:` stanzas -> (uri, suites).
fn parse_deb822(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            })
        };
        let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let enabled = field("Enabled").is_none_or(|e| e != "no");
        if let (true, true, Some(uris), Some(suites)) =
            (is_deb, enabled, field("URIs"), field("Suites"))
        {
            let suites: Vec<String> = suites.split_whitespace().map(str::to_string).collect();
            for uri in uris.split_whitespace() {
                out.push((uri.to_string(), suites.clone()));
            }
        }
    }
    out
}

/// `deb [opts] URI suite components...` lines -> (uri, [suite]).
fn parse_one_line(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("deb ")?;
            let rest = match rest.trim_start().strip_prefix('[') {
                Some(r) => r.split_once(']')?.1,
                None => rest,
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.to_string();
            let suite = words.next()?.to_string();
            Some((uri, vec![suite]))
        })
        .collect()
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

fn chroot(rootfs: &Path, env: &[(String, String)]) -> Command {
    let mut command = Command::new("chroot");
    command.arg(rootfs).env("HOME", "/root").env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Runs a build step, showing its output as it goes; keeps the tail for the error.
async fn run_step(task: &dyn Task, step: &str, command: &mut Command) -> Result<(), BuildError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BuildError::Io {
            path: step.to_string(),
            source,
        })?;
    let stdout = child.stdout.take().map(|s| BufReader::new(s).lines());
    let stderr = child.stderr.take().map(|s| BufReader::new(s).lines());
    let mut tail: Vec<String> = Vec::new();
    let push = |line: String, tail: &mut Vec<String>| {
        task.update(&line);
        tail.push(line);
        if tail.len() > 30 {
            tail.remove(0);
        }
    };
    if let (Some(mut out), Some(mut err)) = (stdout, stderr) {
        let (mut out_done, mut err_done) = (false, false);
        while !(out_done && err_done) {
            tokio::select! {
                line = out.next_line(), if !out_done => match line { Ok(Some(l)) => push(l, &mut tail), _ => out_done = true },
                line = err.next_line(), if !err_done => match line { Ok(Some(l)) => push(l, &mut tail), _ => err_done = true },
            }
        }
    }
    let status = child.wait().await.map_err(|source| BuildError::Io {
        path: step.to_string(),
        source,
    })?;
    if !status.success() {
        task.fail(&format!("{step} failed"));
        return Err(BuildError::Step {
            step: step.to_string(),
            status: status.to_string(),
            output: tail.join("\n"),
        });
    }
    Ok(())
}

/// Streams the rootfs as a tar into `POST /images/create?fromSrc=-`.
async fn import(
    docker: &Docker,
    spec: &BuildSpec,
    inputs: &str,
    rootfs: &Path,
    task: &dyn Task,
) -> Result<String, BuildError> {
    let mut tar = Command::new("tar")
        .args([
            "--numeric-owner",
            "--xattrs",
            "--exclude=./dev/*",
            "--exclude=./proc/*",
            "--exclude=./sys/*",
            "-C",
        ])
        .arg(rootfs)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BuildError::Io {
            path: "tar".into(),
            source,
        })?;
    let Some(stdout) = tar.stdout.take() else {
        return Err(BuildError::Io {
            path: "tar".into(),
            source: std::io::Error::other("no stdout"),
        });
    };
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    let body =
        tokio_util::io::ReaderStream::with_capacity(stdout, 1 << 20).inspect_ok(move |chunk| {
            counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        });
    let (repo, tag) = match spec.tag.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (spec.tag.clone(), "latest".to_string()),
    };
    let changes = vec![
        format!("ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        format!("ENV VIRTUAL_ENV={VENV}"),
        "ENV LANG=C.UTF-8".to_string(),
        "WORKDIR /root".to_string(),
        r#"CMD ["bash"]"#.to_string(),
        format!("LABEL {LABEL_INPUTS}={inputs}"),
        format!("LABEL argus.ray.version={}", spec.ray_version),
    ];
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(&repo)
        .tag(&tag)
        .changes(changes)
        .build();
    let mut stream = docker.create_image(Some(options), Some(bollard::body_try_stream(body)), None);
    let mut last_progress = Instant::now();
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(docker_err("import the image")(e).into()),
                None => break,
            },
            _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
        }
        if last_progress.elapsed().as_millis() >= 250 {
            task.progress(sent.load(std::sync::atomic::Ordering::Relaxed), None);
            last_progress = Instant::now();
        }
    }
    let status = tar.wait().await.map_err(|source| BuildError::Io {
        path: "tar".into(),
        source,
    })?;
    if !status.success() {
        return Err(BuildError::Step {
            step: "tar".into(),
            status: status.to_string(),
            output: String::new(),
        });
    }
    let info = docker
        .inspect_image(&spec.tag)
        .await
        .map_err(docker_err(format!("inspect image {}", spec.tag)))?;
    Ok(info.id.unwrap_or_default())
}

fn host_ca_bundle() -> Option<PathBuf> {
    ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain([PathBuf::from("/etc/ssl/certs/ca-certificates.crt")])
        .find(|p| p.is_file())
}

fn host_pip_config() -> Option<PathBuf> {
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

pub fn short_id(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mirrors_in_both_apt_formats() {
        let deb822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            parse_deb822(deb822),
            vec![
                (
                    "http://deb.example/debian".to_string(),
                    vec!["bookworm".to_string(), "bookworm-updates".to_string()]
                ),
                (
                    "http://deb.example/debian-security".to_string(),
                    vec!["bookworm-security".to_string()]
                )
            ]
        );
        let list = "# c\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\ndeb-src http://m.example/debian bookworm main\n";
        assert_eq!(
            parse_one_line(list),
            vec![(
                "http://m.example/debian".to_string(),
                vec!["bookworm".to_string()]
            )]
        );
    }

    #[test]
    fn inputs_hash_ignores_the_mirror_and_follows_the_pins() {
        let a = BuildSpec {
            tag: "t".into(),
            ray_version: "2.51.1".into(),
            pip: vec![],
            suite: "bookworm".into(),
            mirror: None,
            force: false,
        };
        let b = BuildSpec {
            mirror: Some("http://elsewhere/debian".into()),
            ..a.clone()
        };
        let c = BuildSpec {
            ray_version: "2.52.0".into(),
            ..a.clone()
        };
        assert_eq!(a.inputs_hash(), b.inputs_hash());
        assert_ne!(a.inputs_hash(), c.inputs_hash());
    }

    #[test]
    fn build_hint_matches_the_image() {
        assert_eq!(build_flags_for("argus/ray:2.51.1"), "");
        assert_eq!(build_flags_for("argus/ray:2.52.0"), " --ray-version 2.52.0");
        assert_eq!(build_flags_for("my/img:1"), " --tag my/img:1");
    }
}
