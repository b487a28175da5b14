//! The manifest inside every snapshot (`.argus/manifest.json`): where it came from and
//! every file with its size, executable bit and sha256.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::walk::{Entry, GitState, Kind};
use super::{Error, io};

pub const MANIFEST: &str = ".argus/manifest.json";

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
    /// For files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For symlinks: the (relative) target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
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
            format: 1,
            name: name.to_string(),
            code_id: code_id.to_string(),
            source: source.display().to_string(),
            git_commit: git.map(|g| g.commit.clone()),
            git_dirty: git.is_some_and(|g| g.dirty),
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            argus_version: env!("CARGO_PKG_VERSION").to_string(),
            tree_hash: tree_hash.to_string(),
            files: entries.iter().map(FileRecord::from).collect(),
        }
    }

    pub fn read(snapshot: &Path) -> Result<Self, Error> {
        let path = snapshot.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(io("cannot read the manifest", &path))?;
        serde_json::from_str(&text).map_err(|e| Error::Io {
            action: "corrupt manifest",
            path,
            source: std::io::Error::other(e),
        })
    }
}

impl From<&Entry> for FileRecord {
    fn from(entry: &Entry) -> Self {
        match &entry.kind {
            Kind::File { executable } => FileRecord {
                path: entry.rel.clone(),
                size: entry.size,
                executable: *executable,
                sha256: Some(entry.sha256.clone()),
                link: None,
            },
            Kind::Symlink { target } => FileRecord {
                path: entry.rel.clone(),
                size: 0,
                executable: false,
                sha256: None,
                link: Some(target.clone()),
            },
        }
    }
}
