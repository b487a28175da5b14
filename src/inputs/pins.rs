//! What a run's inputs are pinned at (the run lock and a Slurm run record them): each
//! dataset's files by sha256, the model by commit and file etags, the code by snapshot id
//! and tree hash.

use serde::{Deserialize, Serialize};

use crate::data::FileDigest;
use crate::data::download::CachedFile;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodePin {
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::CodeName>")]
    pub name: String,
    #[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::CodeId>")]
    pub code_id: String,
    pub tree_hash: String,
    #[serde(default)]
    pub source: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetPin {
    pub name: String,
    pub source: String,
    pub files: Vec<FileDigest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelPin {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    pub files: Vec<PinnedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedFile {
    pub path: String,
    pub etag: String,
}

impl From<&CachedFile> for PinnedFile {
    fn from(f: &CachedFile) -> Self {
        PinnedFile {
            path: f.path.clone(),
            etag: f.etag.clone(),
        }
    }
}
