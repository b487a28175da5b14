//! `argus image build`.

use crate::commands::error::{Context, Result};

use crate::cli::{Cli, ImageBuildArgs};
use crate::cluster::{docker, image};
use crate::config::LoadedProfile;
use crate::exit::Exit;
use crate::ui::Printer;

/// A requirements file of the user's (a GPU host's lock, with vLLM): a regular file of at
/// most 1 MiB holding pins only, read and checked before anything is built.
fn read_lock(path: &std::path::Path) -> Result<crate::ids::RequirementsLock> {
    let bad = |why: String| image::BuildError::Input {
        what: "--lock".into(),
        value: format!("{}: {why}", path.display()),
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(bad("not a regular file of at most 1 MiB".into()).into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    if text.contains('\0') {
        return Err(bad("contains a NUL byte".into()).into());
    }
    crate::ids::RequirementsLock::parse(&text).map_err(|error| {
        image::BuildError::Lock {
            path: path.display().to_string(),
            error,
        }
        .into()
    })
}

pub async fn build(cli: &Cli, args: &ImageBuildArgs, printer: &Printer) -> Result<Exit> {
    // The Docker endpoint comes from the profile when one is given.
    let host = match &cli.profile {
        Some(path) => LoadedProfile::load(Some(path))?.profile.docker.host,
        None => None,
    };
    // Everything given is read and checked before anything is built or dialled.
    let mut user_lock = args.lock.as_deref().map(read_lock).transpose()?;
    let invalid = |what: &str, value: &str| image::BuildError::Input {
        what: what.into(),
        value: value.into(),
    };
    // A release of argus's own: its lock. With --lock, any version the lock is for.
    let release = image::verl_release(&args.verl_version);
    if args.verl
        && (!image::valid_version_word(&args.verl_version)
            || (release.is_none() && user_lock.is_none()))
    {
        return Err(invalid(
            "--verl-version",
            &format!(
                "{} (argus has locks for {}; for another release pass your own --lock)",
                args.verl_version,
                image::verl_versions()
            ),
        )
        .into());
    }
    let flavour = if args.gpu {
        image::Flavour::Gpu
    } else {
        image::Flavour::Cpu
    };
    if !image::valid_version_word(&args.ray_version) {
        return Err(invalid("--ray-version", &args.ray_version).into());
    }
    if !image::valid_version_word(&args.suite) {
        return Err(invalid("--suite", &args.suite).into());
    }
    if let Some(tag) = &args.tag
        && !image::valid_tag(tag)
    {
        return Err(invalid("--tag (a lower-case [registry/]name[:tag])", tag).into());
    }
    let base_tag = format!("argus/ray:{}", args.ray_version);
    // Compared as Docker resolves them: `docker.io/argus/ray:<v>` is the same image.
    if let Some(tag) = &args.tag
        && args.verl
        && image::normalize_reference(tag) == image::normalize_reference(&base_tag)
    {
        return Err(invalid(
            "--tag (the verl image would replace the Ray image it is built on)",
            &format!("{tag} (the Ray image {base_tag})"),
        )
        .into());
    }
    let spec = image::BuildSpec {
        tag: if args.verl {
            base_tag.clone()
        } else {
            args.tag.clone().unwrap_or_else(|| base_tag.clone())
        },
        ray_version: args.ray_version.clone(),
        pip: args.pip.clone(),
        suite: args.suite.clone(),
        mirror: args.mirror.clone(),
        force: args.force && !args.verl,
    };
    let docker = docker::connect(host.as_deref()).await?;
    let reporter = printer.reporter();
    let mut report = image::build(&docker, &spec, &reporter)
        .await
        .with_context(|| format!("cannot build image {}", spec.tag))?;
    if args.verl {
        let layer = verl_layer(args, release, flavour, user_lock.take(), &spec.tag)?;
        let base_seconds = report.seconds;
        report = image::build_layer(&docker, &layer, &reporter)
            .await
            .with_context(|| format!("cannot build image {}", layer.tag))?;
        report.seconds += base_seconds;
    }
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
    } else {
        if report.reused {
            printer.info(format!(
                "image {} is up to date (inputs {}): not rebuilt",
                report.tag, report.inputs
            ));
        } else {
            printer.info(format!(
                "built {} in {:.0}s ({})",
                report.tag,
                report.seconds,
                crate::ui::human_bytes(report.size_bytes)
            ));
        }
        printer.data(format!(
            "{} {}",
            report.tag,
            image::short_id(&report.image_id)
        ));
    }
    Ok(Exit::Success)
}

/// The verl layer `args` ask for: a release's lock (CPU with the shim, or `--gpu`), or a
/// lock of the user's for the release `--verl-version` names.
fn verl_layer(
    args: &ImageBuildArgs,
    release: Option<&'static image::VerlRelease>,
    flavour: image::Flavour,
    user_lock: Option<crate::ids::RequirementsLock>,
    base: &str,
) -> Result<image::LayerSpec> {
    // Another Ray version makes another image: its default tag says so.
    let tag = args
        .tag
        .clone()
        .unwrap_or_else(|| image::verl_tag_for(&args.verl_version, flavour, &args.ray_version));
    let mut layer = match (release, user_lock) {
        (_, Some(lock)) => image::LayerSpec {
            tag,
            base: base.to_string(),
            force: args.force,
            lock,
            shim: true,
            verl_version: Some(args.verl_version.clone()),
        },
        (Some(release), None) => {
            image::LayerSpec::of(release, flavour, tag, base.to_string(), args.force).ok_or_else(
                || image::BuildError::Input {
                    what: "--gpu".into(),
                    value: format!("argus has no GPU lock for verl {}", release.version),
                },
            )?
        }
        (None, None) => {
            return Err(image::BuildError::Input {
                what: "--verl-version".into(),
                value: format!(
                    "{} (argus has locks for {})",
                    args.verl_version,
                    image::verl_versions()
                ),
            }
            .into());
        }
    };
    if args.no_shim {
        layer.shim = false;
    }
    Ok(layer)
}
