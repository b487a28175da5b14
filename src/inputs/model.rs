//! A JobSpec's `model_id` given as a path, checked one way for every reader: `submit`
//! refuses what [`check_model_path`] refuses, and `doctor` reports the same finding.
//!
//! The path is lexically clean (no `..`, no control character); on the shared storage, as
//! this machine mounts it, it is a directory reached from the shared root through handles
//! (no link at any component: a model directory linked out of the storage is refused) that
//! holds `config.json`: a regular file, or a relative link to one that stays under the
//! shared root (a Hugging Face snapshot's files link to its blobs).

use std::path::{Component, Path, PathBuf};

use crate::fsx::{Dir, Kind, Unsafe};
use crate::ids::{ContainerPath, IdError};

/// Why a model path is refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelPathError {
    #[error(transparent)]
    Invalid(#[from] IdError),
    #[error("{model} holds no config.json (seen from this host at {})", .seen.display())]
    NoConfig { model: String, seen: PathBuf },
    #[error("{model} is refused as a model directory: {source}")]
    Refused {
        model: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where a model path is, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelPath {
    /// On the shared storage: a directory holding `config.json` (this host's path).
    Shared(PathBuf),
    /// Outside the shared storage, or the storage is not mounted here: not looked at.
    Elsewhere,
}

/// Checks `model` (as the containers see it) against the shared storage mounted at `mount`
/// in the containers and at `host_root` on this machine (None: not mounted here).
pub fn check_model_path(
    model: &str,
    mount: &str,
    host_root: Option<&Path>,
) -> Result<ModelPath, ModelPathError> {
    let path = ContainerPath::parse_as("model path", model)?;
    let (Some(shared), Some(root)) = (path.under(mount), host_root) else {
        return Ok(ModelPath::Elsewhere);
    };
    let seen = shared.on_host(root);
    let refused = |source: std::io::Error| ModelPathError::Refused {
        model: model.to_string(),
        source,
    };
    let no_config = || ModelPathError::NoConfig {
        model: model.to_string(),
        seen: seen.clone(),
    };
    let root_dir = Dir::root(root).map_err(refused)?;
    let dir = match root_dir.open_dir(shared.relative()) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_config()),
        Err(e) => return Err(refused(e)),
    };
    match dir.kind("config.json").map_err(refused)? {
        Some(Kind::File) => Ok(ModelPath::Shared(seen)),
        Some(Kind::Link) => {
            let target = dir.read_link("config.json").map_err(refused)?;
            let config = seen.join("config.json");
            let escapes = || {
                refused(
                    Unsafe::Escapes {
                        root: root.to_path_buf(),
                        rel: config.strip_prefix(root).unwrap_or(&config).join(&target),
                    }
                    .into(),
                )
            };
            let within =
                lexically_within(Path::new(shared.relative()), &target).ok_or_else(escapes)?;
            let (parent, name) = match (within.parent(), within.file_name()) {
                (Some(parent), Some(name)) => (parent, name),
                _ => return Err(escapes()),
            };
            match root_dir.open_dir(parent).and_then(|d| d.kind(name)) {
                Ok(Some(Kind::File)) => Ok(ModelPath::Shared(seen)),
                Ok(Some(Kind::Link)) => Err(refused(Unsafe::Link { path: config }.into())),
                Ok(_) => Err(no_config()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(no_config()),
                Err(e) => Err(refused(e)),
            }
        }
        Some(_) | None => Err(no_config()),
    }
}

/// `target` (a link's text) read from the directory `dir` (relative to the shared root),
/// as a path relative to that root: None when it is absolute or climbs out of the root.
fn lexically_within(dir: &Path, target: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    for c in target.components() {
        match c {
            Component::Normal(name) => parts.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir(root: &Path, rel: &str) -> PathBuf {
        let dir = root.join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_model_path_is_checked_one_way_for_submit_and_doctor() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("shared");
        let outside = model_dir(tmp.path(), "outside/m");
        std::fs::write(outside.join("config.json"), "{}").unwrap();
        let check = |model: &str| check_model_path(model, "/mnt/shared", Some(&root));

        // A directory with its config.json; one without; one absent.
        let whole = model_dir(&root, "models/whole");
        std::fs::write(whole.join("config.json"), "{}").unwrap();
        assert_eq!(
            check("/mnt/shared/models/whole").unwrap(),
            ModelPath::Shared(whole)
        );
        model_dir(&root, "models/empty");
        for model in ["/mnt/shared/models/empty", "/mnt/shared/models/absent"] {
            let err = check(model).unwrap_err().to_string();
            assert!(err.contains("holds no config.json"), "{err}");
        }
        // `..` is refused, wherever it would lead.
        let err = check("/mnt/shared/models/../../../outside/m").unwrap_err();
        assert!(matches!(err, ModelPathError::Invalid(_)), "{err}");
        // A model directory linked out of the shared storage, or a component on the way.
        std::os::unix::fs::symlink(&outside, root.join("models/linked")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside"), root.join("elsewhere")).unwrap();
        for model in ["/mnt/shared/models/linked", "/mnt/shared/elsewhere/m"] {
            let err = check(model).unwrap_err().to_string();
            assert!(err.contains("symbolic link"), "{model}: {err}");
        }
        // config.json linked out: refused; linked to a blob under the root (HF's layout): ok.
        let out = model_dir(&root, "models/config-out");
        std::os::unix::fs::symlink(outside.join("config.json"), out.join("config.json")).unwrap();
        let up = model_dir(&root, "models/config-up");
        std::os::unix::fs::symlink("../../../outside/m/config.json", up.join("config.json"))
            .unwrap();
        for model in [
            "/mnt/shared/models/config-out",
            "/mnt/shared/models/config-up",
        ] {
            assert!(check(model).is_err(), "{model}");
        }
        let snapshot = model_dir(&root, "hub/models--a--b/snapshots/c0");
        model_dir(&root, "hub/models--a--b/blobs");
        std::fs::write(root.join("hub/models--a--b/blobs/e1"), "{}").unwrap();
        std::os::unix::fs::symlink("../../blobs/e1", snapshot.join("config.json")).unwrap();
        assert!(check("/mnt/shared/hub/models--a--b/snapshots/c0").is_ok());
        // Off the shared storage, or not mounted here: not looked at.
        assert_eq!(check("/opt/models/m").unwrap(), ModelPath::Elsewhere);
        assert_eq!(
            check_model_path("/mnt/shared/models/linked", "/mnt/shared", None).unwrap(),
            ModelPath::Elsewhere
        );
    }
}
