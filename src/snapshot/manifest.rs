//! The manifest inside every snapshot (`.argus/manifest.json`): where it came from and
//! every file with its size, permission bits and sha256, and every directory whose mode is
//! not the usual 0755. Its records hash to its `tree_hash` (`hash::records_tree_hash`), so a
//! manifest can be checked against itself.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::walk::{DEFAULT_DIR_MODE, Entry, GitState, Kind};
use super::{Error, io};
use crate::fsx::Dir;

pub const MANIFEST: &str = ".argus/manifest.json";
/// The directory of argus's own files in a snapshot, and the manifest's name in it.
pub const ARGUS_DIR: &str = ".argus";
pub const MANIFEST_NAME: &str = "manifest.json";
/// The modes publish gives the manifest and its directory.
pub const MANIFEST_MODE: u32 = 0o444;
pub const ARGUS_DIR_MODE: u32 = 0o755;

/// The manifest format: 1 before directory modes were kept (a directory's mode then came
/// from the umask), 2 since.
pub const FORMAT: u32 = 2;

/// The largest manifest read: a file others can write must not eat the memory (`list`
/// reads every snapshot's). argus writes it pretty-printed, one record of a file about 185
/// bytes plus its path (`{"path", "size", "executable", "mode", "sha256": 64 hex digits}`,
/// indented), so about 225 bytes with a usual 40-byte path: 45 MB for a tree of 200,000
/// files, and this cap is 5x that (more than a million files).
pub(super) const MAX_MANIFEST_BYTES: u64 = 225 * 200_000 * 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub name: String,
    pub code_id: String,
    pub source: String,
    pub git_commit: Option<String>,
    pub git_dirty: bool,
    pub created: String,
    pub argus_version: String,
    pub tree_hash: String,
    pub files: Vec<FileRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    #[serde(default)]
    pub executable: bool,
    /// For files: the permission bits in the snapshot, in octal ("0444"). Absent in
    /// manifests written before modes were kept: 0555 or 0444 by `executable`.
    #[serde(default, with = "octal", skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// For files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For symlinks: the (relative) target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// A directory (recorded only when its mode is not 0755; the root is `"."`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
}

impl Manifest {
    pub fn new(
        source: &Path,
        code_id: &str,
        name: &str,
        tree_hash: &str,
        git: Option<&GitState>,
        entries: &[Entry],
    ) -> Self {
        Self {
            format: FORMAT,
            name: name.to_string(),
            code_id: code_id.to_string(),
            source: source.display().to_string(),
            git_commit: git.map(|g| g.commit.clone()),
            git_dirty: git.is_some_and(|g| g.dirty),
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            argus_version: env!("CARGO_PKG_VERSION").to_string(),
            tree_hash: tree_hash.to_string(),
            files: entries
                .iter()
                .filter(|e| {
                    e.kind
                        != Kind::Dir {
                            mode: DEFAULT_DIR_MODE,
                        }
                })
                .map(FileRecord::from)
                .collect(),
        }
    }

    /// The manifest of the snapshot at `snapshot` (`<root>/common/code/<name>/<code_id>`),
    /// reached from the storage root without following a link.
    pub fn read(snapshot: &Path) -> Result<Self, Error> {
        Self::read_in(&super::open_snapshot(snapshot)?)
    }

    /// The manifest of the snapshot held open as `snapshot`, read without following a
    /// link planted at `.argus` or at the manifest.
    pub fn read_in(snapshot: &Dir) -> Result<Self, Error> {
        use std::io::Read;
        let path = snapshot.display(MANIFEST);
        let too_large = || {
            crate::fsx::Unsafe::TooLarge {
                path: path.clone(),
                cap: MAX_MANIFEST_BYTES,
            }
            .into()
        };
        let file = snapshot
            .open_file(MANIFEST)
            .map_err(io("cannot read the manifest", &path))?;
        // Its size first: a planted (sparse) giant is refused without reading any of it.
        let size = file
            .metadata()
            .map_err(io("cannot read the manifest", &path))?
            .len();
        if size > MAX_MANIFEST_BYTES {
            return Err(too_large());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io("cannot read the manifest", &path))?;
        // It grew after the size was taken.
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(too_large());
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| io("corrupt manifest", &path)(std::io::Error::other(e)))
    }
}

impl FileRecord {
    /// A file's or directory's permission bits in the snapshot.
    pub fn mode(&self) -> u32 {
        match self.mode {
            Some(mode) => mode,
            None if self.dir => DEFAULT_DIR_MODE,
            None if self.executable => 0o555,
            None => 0o444,
        }
    }
}

impl From<&Entry> for FileRecord {
    fn from(entry: &Entry) -> Self {
        match &entry.kind {
            Kind::File { mode } => FileRecord {
                path: entry.rel.clone(),
                size: entry.size,
                executable: mode & 0o111 != 0,
                mode: Some(*mode),
                sha256: Some(entry.sha256.clone()),
                link: None,
                dir: false,
            },
            Kind::Symlink { target } => FileRecord {
                path: entry.rel.clone(),
                size: 0,
                executable: false,
                mode: None,
                sha256: None,
                link: Some(target.clone()),
                dir: false,
            },
            Kind::Dir { mode } => FileRecord {
                path: entry.rel.clone(),
                size: 0,
                executable: false,
                mode: Some(*mode),
                sha256: None,
                link: None,
                dir: true,
            },
        }
    }
}

/// A mode as an octal string ("0640"), as people read them.
mod octal {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mode: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        match mode {
            Some(m) => s.serialize_str(&format!("{m:04o}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        u32::from_str_radix(&text, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid mode {text:?}")))
    }
}
