//! The verl a job's code is, against the verl its image's dependencies are for. verl's
//! code comes from a snapshot, its dependencies (torch, transformers, TransferQueue, ...)
//! from the image, and a release runs only on its own: verl 0.9.1's code on 0.8.0's image
//! dies at its first import of `transfer_queue`, minutes into the job.
//!
//! The code's release is `verl/version/version` in the snapshot (verl ships it); a snapshot
//! argus made from PyPI (`code.source: pypi:verl==X`) is that release exactly, and a
//! mismatch is refused; a checkout may be a development tree between releases, so a
//! mismatch only warns. The image's release is its `argus.verl.version` label, or what an
//! argus tag (`argus/verl:<version>-cpu`) says; an image that says neither is not judged.

use std::path::Path;

use crate::fsx::Dir;

/// The verl release an image's dependencies are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageVerl {
    pub image: String,
    pub version: String,
}

impl ImageVerl {
    /// What an argus tag says.
    pub fn from_tag(image: &str) -> Option<ImageVerl> {
        let tag = crate::cluster::image::VerlTag::parse(image)?;
        Some(ImageVerl {
            image: image.to_string(),
            version: tag.release.version.to_string(),
        })
    }
}

/// The verl release of a code snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeVerl {
    pub version: String,
    /// Made from a PyPI release (`pypi:verl==<version>`), not a checkout.
    pub released: bool,
}

/// Where verl keeps its version, in its source tree and wheel.
const VERSION_FILE: (&str, &str) = ("verl/version", "version");

/// The snapshot's verl release, when it is verl and says; read through handles below the
/// snapshot, at most 64 bytes, a version word only.
pub fn code_verl(snapshot: &Path) -> Option<CodeVerl> {
    let root = Dir::root(snapshot).ok()?;
    let bytes = root
        .open_dir(VERSION_FILE.0)
        .ok()?
        .read(VERSION_FILE.1, 64)
        .ok()?;
    let version = String::from_utf8(bytes).ok()?.trim().to_string();
    if !crate::cluster::image::valid_version_word(&version) {
        return None;
    }
    // argus's own cache of a PyPI release is `<cache>/argus/pypi/verl==<version>`.
    let released = crate::snapshot::manifest::Manifest::read_in(&root)
        .ok()
        .is_some_and(|m| {
            Path::new(&m.source)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == format!("verl=={version}"))
                && m.source.contains("argus/pypi/")
        });
    Some(CodeVerl { version, released })
}

/// The refusal of a job whose code and image are different verl releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub code: String,
    pub image: String,
    pub image_verl: String,
    /// How to get an image for the code's release.
    pub fix: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the job's code is verl {}, but the image {} holds verl {}'s dependencies",
            self.code, self.image, self.image_verl
        )
    }
}

/// What builds an image for `version`, or pins the code to the image's `image_version`
/// (for the hint).
fn fix_for(version: &str, image_version: &str) -> String {
    match crate::cluster::image::verl_release(version) {
        Some(_) => format!(
            "build the image for verl {version} with `argus image build --verl --verl-version {version}` (`--gpu` for GPU hosts) and set `image: argus/verl:{version}-cpu` (or -gpu) in the profile, or pin the code to verl {image_version} (code.source: pypi:verl==<version>)"
        ),
        None => format!(
            "argus has locks for verl {}: build an image for {version} from your own lock (`argus image build --verl --verl-version {version} --lock FILE`), or use a supported release",
            crate::cluster::image::verl_versions()
        ),
    }
}

/// The release a JobSpec pins its code to (`code.source: pypi:verl==<version>`).
pub fn pinned_release(spec: &crate::config::jobspec::JobSpec) -> Option<String> {
    let crate::config::jobspec::Code::Source(source) = &spec.code else {
        return None;
    };
    let release = crate::ids::PinnedRelease::parse(source.source.strip_prefix("pypi:")?).ok()?;
    (release.normalized_name() == "verl").then_some(release.version)
}

/// `argus run`'s image for a JobSpec pinned to a verl release, before anything starts: on
/// the built-in profile, argus's CPU image of that release (a note says so); on any other
/// profile, its image, refused when its tag or label says another release.
pub fn image_for_run(
    profile: &mut crate::config::profile::Profile,
    builtin: bool,
    spec: &crate::config::jobspec::JobSpec,
    label: Option<String>,
) -> Result<Option<String>, Mismatch> {
    use crate::cluster::image::{Flavour, VerlTag, verl_release, verl_tag_for};
    let Some(version) = pinned_release(spec) else {
        return Ok(None);
    };
    let tag = VerlTag::parse(&profile.image);
    if builtin
        && verl_release(&version).is_some()
        && let Some(tag) = tag.as_ref().filter(|t| t.flavour == Flavour::Cpu)
        && tag.release.version != version
    {
        let image = verl_tag_for(&version, Flavour::Cpu, &tag.ray_version);
        let note = format!(
            "the JobSpec pins verl {version}: the built-in profile runs it on {image} (not {})",
            profile.image
        );
        profile.image = image;
        return Ok(Some(note));
    }
    let image = match label {
        Some(version) => ImageVerl {
            image: profile.image.clone(),
            version,
        },
        None => match ImageVerl::from_tag(&profile.image) {
            Some(image) => image,
            None => return Ok(None),
        },
    };
    let code = CodeVerl {
        version,
        released: true,
    };
    judge(&code, &image).map(|_| None)
}

/// A release's code on another release's image: refused; a checkout's: a warning.
pub fn judge(code: &CodeVerl, image: &ImageVerl) -> Result<Option<String>, Mismatch> {
    if code.version == image.version {
        return Ok(None);
    }
    let mismatch = Mismatch {
        code: code.version.clone(),
        image: image.image.clone(),
        image_verl: image.version.clone(),
        fix: fix_for(&code.version, &image.version),
    };
    if code.released {
        return Err(mismatch);
    }
    Ok(Some(format!(
        "{mismatch} (a checkout: it may still work; if it fails at an import, {})",
        mismatch.fix
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(version: &str, source: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("verl/version")).unwrap();
        std::fs::write(dir.path().join("verl/version/version"), version).unwrap();
        let manifest = crate::snapshot::manifest::Manifest::new(
            Path::new(source),
            "c1",
            "verl",
            "0000",
            None,
            &[],
        );
        std::fs::create_dir_all(dir.path().join(".argus")).unwrap();
        std::fs::write(
            dir.path().join(crate::snapshot::manifest::MANIFEST),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        dir
    }

    #[test]
    fn a_release_on_another_releases_image_is_refused_a_checkout_warned() {
        let image = ImageVerl::from_tag("argus/verl:0.8.0-cpu").unwrap();
        let released = snapshot("0.9.1\n", "/root/.cache/argus/pypi/verl==0.9.1");
        let code = code_verl(released.path()).unwrap();
        assert_eq!(
            code,
            CodeVerl {
                version: "0.9.1".into(),
                released: true
            }
        );
        let refused = judge(&code, &image).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the job's code is verl 0.9.1, but the image argus/verl:0.8.0-cpu holds verl 0.8.0's dependencies"
        );
        assert!(
            refused
                .fix
                .contains("argus image build --verl --verl-version 0.9.1")
        );
        assert!(refused.fix.contains("pypi:verl==<version>") && refused.fix.contains("verl 0.8.0"));

        let checkout = snapshot("0.9.1\n", "/home/me/src/verl");
        let code = code_verl(checkout.path()).unwrap();
        assert!(!code.released);
        let warning = judge(&code, &image).unwrap().unwrap();
        assert!(warning.contains("a checkout"), "{warning}");

        // Same release: nothing to say; an image argus cannot read is not judged.
        let same = ImageVerl::from_tag("argus/verl:0.9.1-cpu").unwrap();
        assert_eq!(judge(&code, &same), Ok(None));
        assert_eq!(ImageVerl::from_tag("my/verl:latest"), None);
    }

    #[test]
    fn run_gives_the_builtin_profile_the_pinned_releases_image_and_refuses_on_others() {
        let spec = |source: &str| {
            let text = format!("workload: grpo\ncode:\n  source: {source}\n");
            let source = crate::config::yaml::Source::new("/j/s.yaml", &text);
            crate::config::jobspec::LoadedJobSpec::from_source(source, &[])
                .unwrap()
                .spec
        };
        let mut builtin = crate::config::LoadedProfile::load(None).unwrap().profile;
        assert_eq!(builtin.image, "argus/verl:0.9.1-cpu");
        let note = image_for_run(&mut builtin, true, &spec("pypi:verl==0.8.0"), None).unwrap();
        assert_eq!(builtin.image, "argus/verl:0.8.0-cpu");
        assert!(note.unwrap().contains("runs it on argus/verl:0.8.0-cpu"));
        // Not pinned to verl: nothing to choose.
        assert_eq!(
            image_for_run(&mut builtin, true, &spec("../code"), None),
            Ok(None)
        );
        // A profile of the user's keeps its image and is refused on another release.
        let mut own = crate::config::LoadedProfile::load(None).unwrap().profile;
        let refused = image_for_run(&mut own, false, &spec("pypi:verl==0.8.0"), None).unwrap_err();
        assert_eq!(
            (refused.code.as_str(), refused.image_verl.as_str()),
            ("0.8.0", "0.9.1")
        );
        assert_eq!(own.image, "argus/verl:0.9.1-cpu");
        // The label wins over what a tag of the user's cannot say.
        own.image = "registry.example/team/verl:gpu".into();
        assert_eq!(
            image_for_run(
                &mut own,
                false,
                &spec("pypi:verl==0.9.1"),
                Some("0.9.1".into())
            ),
            Ok(None)
        );
        assert!(
            image_for_run(
                &mut own,
                false,
                &spec("pypi:verl==0.8.0"),
                Some("0.9.1".into())
            )
            .is_err()
        );
        assert_eq!(
            image_for_run(&mut own, false, &spec("pypi:verl==0.8.0"), None),
            Ok(None)
        );
    }

    #[test]
    fn a_version_file_that_is_not_a_version_is_no_version() {
        for bad in ["0.9.1; rm -rf /", "", &"9".repeat(100)] {
            let dir = snapshot(bad, "/x");
            assert_eq!(code_verl(dir.path()), None, "{bad:?}");
        }
        let none = tempfile::tempdir().unwrap();
        assert_eq!(code_verl(none.path()), None);
    }
}
