//! The rootfs as an image: a tar stream imported through the Docker API, labelled with
//! the inputs' hash.

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::{StreamExt, TryStreamExt};
use tokio::process::Command;

use super::super::docker::docker_err;
use crate::ui::Task;

use super::{BuildError, BuildSpec, LABEL_INPUTS, LABEL_RAY_VERSION, VENV};

/// Streams the rootfs as a tar into `POST /images/create?fromSrc=-`.
pub(super) async fn import(
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
        format!("LABEL {LABEL_RAY_VERSION}={}", spec.ray_version),
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
