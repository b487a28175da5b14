//! The shared storage: a host path bind-mounted into every container, OR an NFS export
//! Docker mounts as a volume. One enum, so "both" and "neither" cannot be represented;
//! every string that reaches a mount option is parsed against a strict charset.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::expand::expand_path;

/// `shared:` as written: the storage and where containers see it.
#[derive(Debug, Clone, Serialize)]
#[serde(into = "RawShared")]
pub struct SharedSection {
    pub storage: SharedStorage,
    /// Where the shared storage appears inside the containers.
    pub mount: String,
}

#[derive(Debug, Clone)]
pub enum SharedStorage {
    /// A directory already mounted on the host (e.g. an NFS mount), bind-mounted.
    HostPath(HostPath),
    /// An NFS export mounted by Docker as a volume on every host.
    Nfs(NfsVolume),
}

/// The ONE rule for where the jobs see the shared storage: `shared.mount`, the path every
/// container of the profile mounts it at (`cluster::plan` mounts it there, and sets
/// `HF_HOME` and `ARGUS_SHARED` below it). `submit.shared_root` is the old RayConfig's
/// name for the same thing (the shared root as the job sees it); a profile may keep it
/// only when it names `shared.mount`, since the containers have nothing at any other path
/// (validation refuses the rest: `validate::submit`). So submit, run, prepare, Slurm,
/// doctor and the export all ask this function, and none reads either field itself.
impl super::Profile {
    pub fn container_layout(&self) -> crate::config::ContainerLayout {
        crate::config::ContainerLayout::in_containers(&self.shared.mount)
    }
}

impl SharedSection {
    /// The storage as this host sees it: `Some` for a host path, `None` for an NFS volume.
    pub fn host_path(&self) -> Option<&Path> {
        match &self.storage {
            SharedStorage::HostPath(h) => Some(h.path()),
            SharedStorage::Nfs(_) => None,
        }
    }

    pub fn nfs(&self) -> Option<&NfsVolume> {
        match &self.storage {
            SharedStorage::Nfs(nfs) => Some(nfs),
            SharedStorage::HostPath(_) => None,
        }
    }
}

#[derive(Serialize)]
struct RawShared {
    /// `~` and `${VAR}` / `${VAR:-default}` are expanded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_path: Option<HostPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nfs: Option<NfsVolume>,
    #[serde(default = "default_mount")]
    mount: String,
}

fn default_mount() -> String {
    "/mnt/shared".to_string()
}

pub const SHARED_HINT: &str = "shared: {host_path: /mnt/nfs/argus} or shared: {nfs: {server: 10.0.0.5, export: /export/argus}}";

/// Read field by field inside the deserializer's own call, so that "both" or "neither"
/// is reported at the `shared:` mapping (a `try_from` error would lose its location).
impl<'de> Deserialize<'de> for SharedSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SharedSection;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping with host_path or nfs, and mount")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<SharedSection, A::Error> {
                const FIELDS: &[&str] = &["host_path", "nfs", "mount"];
                let mut raw = RawShared {
                    host_path: None,
                    nfs: None,
                    mount: default_mount(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "host_path" => raw.host_path = Some(map.next_value()?),
                        "nfs" => raw.nfs = Some(map.next_value()?),
                        "mount" => raw.mount = map.next_value()?,
                        other => return Err(A::Error::unknown_field(other, FIELDS)),
                    }
                }
                SharedSection::try_from(raw).map_err(A::Error::custom)
            }
        }
        d.deserialize_map(V)
    }
}

impl TryFrom<RawShared> for SharedSection {
    type Error = String;
    fn try_from(raw: RawShared) -> Result<Self, String> {
        let storage = match (raw.host_path, raw.nfs) {
            (Some(h), None) => SharedStorage::HostPath(h),
            (None, Some(n)) => SharedStorage::Nfs(n),
            _ => {
                return Err(format!(
                    "give exactly one of `host_path` and `nfs` (valid: {SHARED_HINT})"
                ));
            }
        };
        let mount = raw.mount;
        let clean = crate::ids::ContainerPath::parse_as("shared.mount", &mount)
            .map_err(|e| e.to_string())?;
        if clean.as_str() == "/" || clean.as_str() != mount {
            return Err(format!(
                "mount {mount:?} must be a normalised absolute path other than / (valid: /mnt/shared)"
            ));
        }
        Ok(SharedSection { storage, mount })
    }
}

impl From<SharedSection> for RawShared {
    fn from(s: SharedSection) -> Self {
        let (host_path, nfs) = match s.storage {
            SharedStorage::HostPath(h) => (Some(h), None),
            SharedStorage::Nfs(n) => (None, Some(n)),
        };
        RawShared {
            host_path,
            nfs,
            mount: s.mount,
        }
    }
}

/// `shared.host_path`: as written (kept for records) and expanded to an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPath {
    raw: String,
    path: PathBuf,
}

impl HostPath {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let path = expand_path(raw)?;
        if !path.is_absolute() {
            return Err(format!(
                "{} is not an absolute path (valid: an absolute path on the host, e.g. /mnt/nfs/argus or ~/argus-shared)",
                path.display()
            ));
        }
        if !crate::ids::stays_under(path.strip_prefix("/").unwrap_or(&path)) {
            return Err(format!(
                "{} has a .. component (valid: a path without ..)",
                path.display()
            ));
        }
        Ok(HostPath {
            raw: raw.to_string(),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Serialize for HostPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for HostPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::deserialize_checked(d, "an absolute path on the host", HostPath::parse)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfsVolume {
    pub server: NfsServer,
    pub export: NfsExport,
    /// Mount options, e.g. `nfsvers=4.1,rw`.
    #[serde(default)]
    pub options: Option<NfsOptions>,
}

macro_rules! checked_string {
    ($name:ident, $check:path) => {
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<Self, String> {
                $check(text).map(|()| $name(text.to_string()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                crate::ids::deserialize_checked(d, stringify!($name), $name::parse)
            }
        }
    };
}

checked_string!(NfsServer, check_server);
checked_string!(NfsExport, check_export);
checked_string!(NfsOptions, check_options);

/// An IP address or a DNS host name: it becomes `addr=<server>` in the mount options, so a
/// comma, space or `=` would add options of its own.
fn check_server(text: &str) -> Result<(), String> {
    const VALID: &str = "an IP address or a host name (letters, digits, - and .)";
    if text.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let labels_ok = !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if labels_ok {
        Ok(())
    } else {
        Err(format!("{text:?} is not an NFS server (valid: {VALID})"))
    }
}

/// An absolute path on the server: it becomes `device=:<export>`.
fn check_export(text: &str) -> Result<(), String> {
    const VALID: &str = "an absolute path of letters, digits and . _ - + @ /, without ..";
    let ok = text.starts_with('/')
        && text.len() <= 1024
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+@/".contains(c))
        && !text.split('/').any(|part| part == "..");
    if ok {
        Ok(())
    } else {
        Err(format!("{text:?} is not an NFS export (valid: {VALID})"))
    }
}

/// `name` or `name=value` items separated by commas, e.g. `nfsvers=4.1,rw,hard`. `addr` is
/// argus's (from `server`).
fn check_options(text: &str) -> Result<(), String> {
    const VALID: &str = "comma-separated name or name=value items, names of a-z 0-9 _ and values of letters, digits and . _ - : /; not addr";
    for item in text.split(',') {
        let (name, value) = match item.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (item, None),
        };
        let name_ok = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let value_ok = value.is_none_or(|v| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-:/".contains(c))
        });
        if !name_ok || !value_ok {
            return Err(format!(
                "NFS option {item:?} in {text:?} is not valid (valid: {VALID})"
            ));
        }
        if name == "addr" {
            return Err(format!(
                "NFS option addr is set from shared.nfs.server (valid: {VALID})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfs_strings_cannot_inject_mount_options() {
        for good in ["10.0.0.5", "nfs.example.internal", "fd00::5", "nas-1"] {
            assert!(NfsServer::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "10.0.0.5,nolock",
            "10.0.0.5 ",
            "a=b",
            "",
            "-x",
            "host,addr=1.2.3.4",
            "h\0",
        ] {
            assert!(NfsServer::parse(bad).is_err(), "{bad:?}");
        }
        assert!(NfsExport::parse("/export/argus").is_ok());
        for bad in ["export", "/e,x", "/e x", "/a/../b", "/a:b", "/a=b"] {
            assert!(NfsExport::parse(bad).is_err(), "{bad:?}");
        }
        assert!(NfsOptions::parse("nfsvers=4.1,rw,hard,timeo=600").is_ok());
        for bad in [
            "rw,,hard",
            "nfsvers=4.1 ,rw",
            "addr=1.2.3.4",
            "rw,addr=1.2.3.4",
            "o=a=b",
            "x=",
            "Rw",
            "",
        ] {
            assert!(NfsOptions::parse(bad).is_err(), "{bad:?}");
        }
    }
}
