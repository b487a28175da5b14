//! The Ray auth token of a cluster (`ray.auth: token`), kept on the user's machine only.
//!
//! Where it comes from, first match wins: the variable `ray.token_env` names (when set and
//! not empty); else the token file `<config dir>/argus/tokens/<cluster>.token`
//! (`$XDG_CONFIG_HOME` or `~/.config`), which `up` makes when absent: 32 random bytes from
//! the OS, hex-encoded, created with mode 0600 from the start in a 0700 directory, and
//! linked into place so that two `up`s racing agree on one token. A token file that is not
//! a regular file, is readable by group or others, or belongs to someone else is refused.
//!
//! The token never goes to the shared storage: it travels to the containers in their
//! environment and to Ray in the `Authorization` header. Whatever this module returns is
//! registered as a secret value, so every printed plan, record and error redacts it.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Error;
use crate::config::LoadedProfile;
use crate::config::profile::AuthMode;
use crate::fsx;
use crate::secrets::{self, Secrets};

/// Random bytes in a token made here (64 hex characters).
const TOKEN_BYTES: usize = 32;

/// The token of the profile's cluster, or None when `ray.auth` is not `token`. With
/// `create`, a missing token file is made (`up`); without, a missing token is an error.
pub fn cluster_token(loaded: &LoadedProfile, create: bool) -> Result<Option<String>, Error> {
    let ray = &loaded.profile.ray;
    if ray.auth != AuthMode::Token {
        return Ok(None);
    }
    let token = match std::env::var(&ray.token_env) {
        Ok(token) if !token.trim().is_empty() => token,
        _ => {
            let Some(config) = dirs::config_dir() else {
                return Err(Error::TokenFile {
                    path: "(no configuration directory)".into(),
                    problem: "neither XDG_CONFIG_HOME nor HOME is set".into(),
                });
            };
            let path = token_path(&config, &loaded.profile.name)?;
            match read_or_make(&path, create)? {
                Some(token) => token,
                None => {
                    return Err(Error::TokenNotFound {
                        cluster: loaded.profile.name.clone(),
                        var: ray.token_env.clone(),
                        path: path.display().to_string(),
                    });
                }
            }
        }
    };
    let mut known = Secrets::new();
    known.add(&token);
    secrets::remember(&known);
    Ok(Some(token))
}

/// What a dry run of `up` plans with when the token does not exist yet (a dry run makes
/// nothing; the real `up` will make it).
pub const PLANNED_TOKEN: &str = "(made by argus up)";

/// `up`'s token: made when absent, except in a dry run, which only looks and plans with
/// [`PLANNED_TOKEN`] instead.
pub fn token_for_up(loaded: &LoadedProfile, dry_run: bool) -> Result<Option<String>, Error> {
    match cluster_token(loaded, !dry_run) {
        Err(Error::TokenNotFound { .. }) if dry_run => Ok(Some(PLANNED_TOKEN.to_string())),
        other => other,
    }
}

/// `<config>/argus/tokens/<cluster>.token`. Cluster names are validated ids; this checks
/// again that the name cannot leave the directory (a RayConfig names no cluster).
pub fn token_path(config: &Path, cluster: &str) -> Result<PathBuf, Error> {
    let safe = !cluster.is_empty()
        && !cluster.starts_with('.')
        && cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !safe {
        return Err(Error::TokenFile {
            path: config.join("argus/tokens").display().to_string(),
            problem: format!("cluster name {cluster:?} cannot name a token file"),
        });
    }
    Ok(config
        .join("argus")
        .join("tokens")
        .join(format!("{cluster}.token")))
}

/// The token in `path`; when absent, a new one if `create`, else None.
fn read_or_make(path: &Path, create: bool) -> Result<Option<String>, Error> {
    match read(path)? {
        Some(token) => Ok(Some(token)),
        None if create => make(path).map(Some),
        None => Ok(None),
    }
}

fn refuse(path: &Path, problem: impl Into<String>) -> Error {
    Error::TokenFile {
        path: path.display().to_string(),
        problem: problem.into(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::TokenIo {
        path: path.display().to_string(),
        source,
    }
}

/// Reads the token file, checking what it is on the opened file itself (no symlink is
/// followed, so the checks and the read are about the same file). None when absent.
fn read(path: &Path) -> Result<Option<String>, Error> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(path, "it is a symbolic link, not a regular file"));
        }
        Err(e) => return Err(io(path)(e)),
    };
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(refuse(path, "it is not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refuse(
            path,
            format!(
                "it belongs to uid {}, not to this user (uid {me})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refuse(
            path,
            format!("its mode is {mode:04o}: group or others may read it"),
        ));
    }
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(io(path))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse(
            path,
            "it does not hold one token (one line, no spaces)",
        ));
    }
    Ok(Some(token.to_string()))
}

/// Makes a new token file: a temporary file created 0600, written and synced, then
/// hard-linked to the final name (which never replaces an existing file: a concurrent
/// `up` that won the race wins, and its token is read back).
fn make(path: &Path) -> Result<String, Error> {
    let dir = path
        .parent()
        .ok_or_else(|| refuse(path, "it has no parent directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let token = random_hex(TOKEN_BYTES).map_err(io(Path::new("/dev/urandom")))?;
    let tmp = dir.join(fsx::temp_name("token"));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        // The umask may only remove bits; make sure of 0600 whatever it is.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(format!("{token}\n").as_bytes())?;
        file.sync_all()?;
        drop(file);
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        linked?;
        fsx::fsync_dir(dir)
    })();
    match written {
        Ok(()) => {
            tracing::info!("made the Ray auth token file {}", path.display());
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&tmp);
            read(path)?.ok_or_else(|| refuse(path, "it vanished while being made"))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(io(path)(e))
        }
    }
}

/// `n` bytes from the OS's random source, hex-encoded.
fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_token_is_made_once_with_mode_0600_in_a_0700_directory_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = token_path(dir.path(), "c1").unwrap();
        assert!(path.ends_with("argus/tokens/c1.token"));
        assert_eq!(
            read_or_make(&path, false).unwrap(),
            None,
            "not made without create"
        );
        assert!(!path.exists());
        let token = read_or_make(&path, true).unwrap().unwrap();
        assert_eq!(token.len(), 2 * TOKEN_BYTES);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(read_or_make(&path, true).unwrap().unwrap(), token, "kept");
        assert_eq!(read_or_make(&path, false).unwrap().unwrap(), token);
        let other = read_or_make(&token_path(dir.path(), "c2").unwrap(), true).unwrap();
        assert_ne!(other.unwrap(), token, "each cluster has its own");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(fsx::TMP_PREFIX))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_readable_linked_or_odd_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = token_path(dir.path(), "c").unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();

        std::fs::write(&path, "abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_or_make(&path, true).unwrap_err();
        assert!(err.to_string().contains("0644"), "{err}");
        assert_eq!(crate::exit::Classify::exit(&err), crate::exit::Exit::Usage);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_or_make(&path, false).unwrap().unwrap(), "abcdef0123");

        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&path, Some(4321), None).unwrap();
            let err = read_or_make(&path, false).unwrap_err();
            assert!(err.to_string().contains("uid 4321"), "{err}");
            std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        }

        std::fs::write(&path, "two words\n").unwrap();
        assert!(read_or_make(&path, false).is_err());

        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "abcdef0123").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = read_or_make(&path, true).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");

        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(read_or_make(&path, true).is_err(), "a directory");

        for bad in ["", "../x", ".hidden", "a/b"] {
            assert!(token_path(dir.path(), bad).is_err(), "{bad}");
        }
    }
}
