//! The runtime image: found locally, pulled, or built without any registry.
//!
//! The build is a Debian rootfs (debootstrap from this machine's configured mirror, read
//! from apt's sources at run time), a venv at /opt/ray with `ray[default]` pinned, then a
//! `docker import` through the API. The inputs' hash is a label on the image: an image
//! built from the same inputs is found and not rebuilt.
//!
//! `mod.rs` finds or pulls the image (`ensure`); `build` is the build policy and its
//! steps; `apt` reads this machine's Debian mirror; `process` streams a step's output;
//! `import` turns the rootfs into an image through the Docker API; `distribute` brings
//! the image to every host of a cluster, pulling or streaming it between engines;
//! `skip_layers` leaves out of an archive the layers an engine has, `archive` finds which
//! those are in an archive on a file (a Slurm node's load), `tar_header` reads both.

mod apt;
mod archive;
mod build;
mod distribute;
mod import;
mod layer;
mod process;
mod skip_layers;
mod tar_header;

use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;

use super::Error;
use super::docker::{docker_err, is_not_found};
use crate::exit::{Classify, Exit};
use crate::ui::Reporter;

pub use apt::debian_mirror;
pub use archive::load_body as archive_load_body;
pub use build::{BuildReport, BuildSpec, build};
pub use distribute::{
    DistributeError, Distribution, Engine, HostFailure, HostImage, Outcome, distribute,
    names_registry, pull_on,
};
pub use layer::{
    Flavour, LABEL_VERL_LOCK, LABEL_VERL_VERSION, LayerSpec, RELEASES, VERL_VERSION, VerlRelease,
    VerlTag, build_command as verl_build_command, build_layer, default_tag as verl_default_tag,
    is_verl_tag, release as verl_release, supported_versions as verl_versions,
    tag_for as verl_tag_for,
};

/// The Ray version argus's images pin unless told otherwise.
pub const DEFAULT_RAY_VERSION: &str = "2.51.1";
/// Bumped whenever the recipe below changes what ends up in the image.
const RECIPE_VERSION: u32 = 2;
/// Installed beside Ray in every image: verl reads its parquet datasets with pyarrow.
pub const BASE_PIP: [&str; 1] = ["pyarrow"];
pub const LABEL_INPUTS: &str = "argus.image.inputs";
/// The Ray version an argus image was built with.
pub const LABEL_RAY_VERSION: &str = "argus.ray.version";
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
    let docker = super::docker::connect(docker_host).await?;
    if let Some(tag) = VerlTag::parse(reference) {
        if tag.flavour == Flavour::Gpu {
            // A GPU image downloads about 5 GB: built when asked, never on the way.
            if docker.inspect_image(reference).await.is_ok() {
                return Ok(());
            }
            return Err(BuildError::Input {
                what: "image".into(),
                value: format!(
                    "{reference} is absent: build it on this host with `{}` (about 5 GB from PyPI; see README, GPU hosts)",
                    verl_build_command(&tag)
                ),
            });
        }
        // The layer's inputs are this argus's lock and shim: a layer built from others
        // is rebuilt (pip's download cache makes that quick), one from these is reused.
        let base = format!("argus/ray:{}", tag.ray_version);
        Box::pin(ensure_built(docker_host, &base, reporter)).await?;
        let spec = LayerSpec::of(tag.release, tag.flavour, reference.to_string(), base, false)
            .expect("every release has a CPU lock");
        return build_layer(&docker, &spec, reporter).await.map(|_| ());
    }
    if is_verl_tag(reference) {
        // Another verl image (a GPU host's, from its own lock): used as it is, never
        // rebuilt from the CPU lock.
        if docker.inspect_image(reference).await.is_ok() {
            return Ok(());
        }
        return Err(BuildError::Input {
            what: "image".into(),
            value: format!(
                "{reference} is absent: build it with `argus image build --verl --tag {reference} [--lock FILE] [--no-shim]`"
            ),
        });
    }
    let Some(version) = reference.strip_prefix("argus/ray:") else {
        return Ok(());
    };
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

/// `repo:tag` split as Docker's tag API wants it (`latest` when there is none).
pub fn split_tag(reference: &str) -> (&str, &str) {
    let name = reference.split('@').next().unwrap_or(reference);
    match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (name, "latest"),
    }
}

/// `reference` as `docker save` exports exactly one image by it: with a digest as it is,
/// else `repo:tag` (a bare name would export every tag of the repository, and an archive of
/// several images can share a layer at other places in their stacks than the wanted one's,
/// which leaving out layers the engine has would then break).
pub fn one_image(reference: &str) -> String {
    if reference.contains('@') {
        return reference.to_string();
    }
    let (repo, tag) = split_tag(reference);
    format!("{repo}:{tag}")
}

/// `reference` as Docker resolves it, so two spellings of one image compare equal:
/// `docker.io/` before a name that names no registry ([`names_registry`]),
/// `index.docker.io` as `docker.io`, `library/` before a one-part Docker Hub name, and
/// `:latest` when there is neither a tag nor a digest.
pub fn normalize_reference(reference: &str) -> String {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    let (repo, tag) = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
        _ => (name, None),
    };
    let (registry, path) = match repo.split_once('/') {
        Some((first, rest)) if names_registry(repo) => (first, rest),
        _ => ("docker.io", repo),
    };
    let registry = if registry == "index.docker.io" {
        "docker.io"
    } else {
        registry
    };
    let mut out = if registry == "docker.io" && !path.contains('/') {
        format!("{registry}/library/{path}")
    } else {
        format!("{registry}/{path}")
    };
    match (tag, digest) {
        (Some(tag), _) => {
            out.push(':');
            out.push_str(tag);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
    out
}

/// An image reference Docker takes as a tag: `[registry/]name[:tag]`, a lower-case name of
/// `[a-z0-9._/-]` (a registry may have a port), a tag of `[A-Za-z0-9._-]`, 1 to 128 long.
pub fn valid_tag(reference: &str) -> bool {
    let (name, tag) = match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (reference, None),
    };
    let name_ok = !name.is_empty()
        && reference.len() <= 255
        && !name.starts_with(['/', '.', '-', '_'])
        && !name.ends_with(['/', '.', '-', '_'])
        && !name.contains("//")
        && !name.contains("..")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:".contains(c));
    let tag_ok = tag.is_none_or(|t| {
        !t.is_empty()
            && t.len() <= 128
            && !t.starts_with(['.', '-'])
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    });
    name_ok && tag_ok
}

/// A Ray version or Debian suite as argus passes them on: letters, digits and dots.
pub fn valid_version_word(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 32
        && !word.starts_with('.')
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
}

/// The verl release an image's `argus.verl.version` label names, when it is there (on
/// the profile's engine; an engine that cannot be asked says nothing).
pub async fn verl_version_label(docker_host: Option<&str>, reference: &str) -> Option<String> {
    let docker = super::docker::connect(docker_host).await.ok()?;
    let info = docker.inspect_image(reference).await.ok()?;
    info.config?
        .labels?
        .get(LABEL_VERL_VERSION)
        .filter(|v| valid_version_word(v))
        .cloned()
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
    if let Some(tag) = VerlTag::parse(image) {
        let command = verl_build_command(&tag);
        return command
            .strip_prefix("argus image build")
            .unwrap_or(&command)
            .to_string();
    }
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
    /// A `--lock` line that is not a pin.
    #[error("--lock {path}:{}: {}", .error.line, .error.message)]
    Lock {
        path: String,
        error: crate::ids::LockError,
    },
    #[error(transparent)]
    Cluster(#[from] Error),
}

impl Classify for BuildError {
    fn exit(&self) -> Exit {
        match self {
            BuildError::Missing(_)
            | BuildError::NoMirror { .. }
            | BuildError::Input { .. }
            | BuildError::Lock { .. } => Exit::Usage,
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
            BuildError::Lock { .. } => Some("a lock holds name==version lines (each optionally with --hash=sha256:...) and comments; an index, a trusted host or a proxy goes in pip's configuration (pip.conf, PIP_INDEX_URL), which the build uses".into()),
            BuildError::Cluster(e) => e.hint(),
            _ => None,
        }
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.display().to_string(),
        source,
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
    fn references_are_compared_as_docker_resolves_them() {
        let same = |a: &str, b: &str| normalize_reference(a) == normalize_reference(b);
        for spelling in [
            "argus/ray:2.51.1",
            "docker.io/argus/ray:2.51.1",
            "index.docker.io/argus/ray:2.51.1",
        ] {
            assert!(same(spelling, "argus/ray:2.51.1"), "{spelling}");
        }
        assert_eq!(normalize_reference("ray"), "docker.io/library/ray:latest");
        assert!(same("docker.io/library/ray:latest", "ray"));
        assert!(same("library/ray", "ray:latest"));
        assert!(!same("argus/ray:2.51.1", "reg.example/argus/ray:2.51.1"));
        assert!(!same("localhost:5000/ray", "ray"));
        assert_eq!(
            normalize_reference("localhost:5000/ray"),
            "localhost:5000/ray:latest"
        );
        assert_eq!(
            normalize_reference("ray@sha256:abc"),
            "docker.io/library/ray@sha256:abc"
        );
    }

    #[test]
    fn tags_split_after_the_last_path_component() {
        assert_eq!(split_tag("argus/ray:2.51.1"), ("argus/ray", "2.51.1"));
        assert_eq!(
            split_tag("localhost:5000/ray"),
            ("localhost:5000/ray", "latest")
        );
        assert_eq!(
            split_tag("localhost:5000/ray:t@sha256:ab"),
            ("localhost:5000/ray", "t")
        );
        assert_eq!(one_image("localhost:5000/ray"), "localhost:5000/ray:latest");
        assert_eq!(one_image("argus/ray:2.51.1"), "argus/ray:2.51.1");
        assert_eq!(one_image("ray@sha256:ab"), "ray@sha256:ab");
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
    fn tags_and_versions_are_checked_before_anything_is_built() {
        for good in [
            "argus/ray:2.51.1",
            "argus/verl:0.8.0-cpu",
            "reg.example:5000/a/b:v1",
            "x",
        ] {
            assert!(valid_tag(good), "{good}");
        }
        for bad in [
            "a b", "../x", "x:", "UPPER:1", "", "/x", "a//b", "a:b c", "a:-x",
        ] {
            assert!(!valid_tag(bad), "{bad}");
        }
        assert!(valid_version_word("2.51.1") && valid_version_word("bookworm"));
        for bad in ["2.51.1;id", "../x", "", ".x", "a b"] {
            assert!(!valid_version_word(bad), "{bad}");
        }
    }

    #[test]
    fn build_hint_matches_the_image() {
        assert_eq!(build_flags_for("argus/ray:2.51.1"), "");
        assert_eq!(build_flags_for("argus/ray:2.52.0"), " --ray-version 2.52.0");
        assert_eq!(build_flags_for("my/img:1"), " --tag my/img:1");
        assert_eq!(
            build_flags_for("argus/verl:0.8.0-cpu"),
            " --verl --verl-version 0.8.0"
        );
        assert_eq!(
            build_flags_for("argus/verl:0.9.1-gpu"),
            " --verl --verl-version 0.9.1 --gpu"
        );
        assert_eq!(
            build_flags_for("argus/verl:0.9.1-cpu-ray2.60.0"),
            " --verl --verl-version 0.9.1 --ray-version 2.60.0"
        );
        // Not a release argus has a lock for: a tag of the user's.
        assert_eq!(
            build_flags_for("argus/verl:0.7.0-cpu"),
            " --tag argus/verl:0.7.0-cpu"
        );
    }

    #[test]
    fn verl_tags_read_back_as_built() {
        for (version, flavour, ray) in [
            ("0.8.0", Flavour::Cpu, DEFAULT_RAY_VERSION),
            ("0.9.1", Flavour::Gpu, DEFAULT_RAY_VERSION),
            ("0.9.1", Flavour::Cpu, "2.60.0"),
        ] {
            let tag = verl_tag_for(version, flavour, ray);
            let read = VerlTag::parse(&tag).expect(&tag);
            assert_eq!(
                (
                    read.release.version,
                    read.flavour,
                    read.ray_version.as_str()
                ),
                (version, flavour, ray)
            );
        }
        for other in [
            "argus/verl:0.9.1",
            "argus/verl:0.9.1-tpu",
            "argus/verl:0.9.1-cpu-ray2.60;x",
            "argus/ray:2.51.1",
            "my/verl:0.9.1-cpu",
        ] {
            assert_eq!(VerlTag::parse(other), None, "{other}");
        }
        assert_eq!(verl_default_tag(), "argus/verl:0.9.1-cpu");
    }
}
