//! Data and models on the shared storage: a Hugging Face client and cache (`hf`,
//! `hf_cache`, `download`) over checked names (`crate::hf`), GSM8K in verl's format
//! (`gsm8k`, pure) and its parquet files (`parquet`). Everything is written from this
//! host, atomically: a dataset is published as a whole (both splits and the manifest,
//! or nothing), a model file only once its bytes are verified.

pub mod download;
pub mod fsutil;
pub mod gsm8k;
pub mod hf;
pub mod hf_cache;
pub mod local_model;
pub mod parquet;
mod publish;
mod raw;
mod request;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{ContainerLayout, Layout};
use crate::exit::{Classify, Exit};
use crate::fsx::Dir;
use crate::hf::{BadName, ModelSpec};
use crate::ui::Reporter;
use download::{CachedFile, Filter, SnapshotSpec};
use fsutil::NotRegular;
use hf::{HubClient, HubError, RepoKind};
use hf_cache::HubCache;
pub use raw::check_from;
use raw::{RawFile, digest_raw, fetch_raw};
pub use request::Request;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(transparent)]
    Transform(#[from] gsm8k::MissingSolution),
    #[error(transparent)]
    Parquet(#[from] parquet::ParquetError),
    #[error(
        "no raw {split} split under {dir} (expected {dir}/main/{split}-*.parquet, the hub repo's layout)"
    )]
    NoRawSplit { split: String, dir: String },
    #[error("unknown dataset {0:?}")]
    UnknownDataset(String),
    #[error("{0}")]
    BadInput(BadName),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error("in --from: {0}")]
    NotRegular(#[source] NotRegular),
    #[error("model_from: {0}")]
    LocalModel(String),
    #[error(transparent)]
    Io(#[from] crate::fsx::IoAt),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Hub(
                HubError::NotFound { .. }
                | HubError::BadEndpoint { .. }
                | HubError::BadPattern { .. },
            )
            | Error::Transform(_)
            | Error::NoRawSplit { .. }
            | Error::UnknownDataset(_)
            | Error::BadInput(_)
            | Error::Usage(_)
            | Error::NotRegular(_)
            | Error::LocalModel(_) => Exit::Usage,
            Error::Lock(e) => e.exit(),
            Error::Io(e) => crate::fsx::io_exit(&e.source),
            // A refused path in the cache (a planted link) is bad input, like anywhere on
            // the shared storage.
            Error::Hub(HubError::Io { source, .. }) => crate::fsx::io_exit(source),
            Error::Hub(
                HubError::Unreachable { .. } | HubError::Http { .. } | HubError::Interrupted { .. },
            ) => Exit::Unreachable,
            _ => Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Hub(HubError::NotFound { .. }) => Some("check the repo id and revision; a mirror may also answer 401 for a missing file".into()),
            Error::Hub(HubError::Unreachable { .. }) => Some("set HF_ENDPOINT (in the profile's env, or the environment) to a reachable hub or mirror; an interrupted download resumes on the next run".into()),
            Error::Hub(HubError::BadEndpoint { .. }) => Some("HF_ENDPOINT is a URL such as https://huggingface.co or http://mirror.internal:8090".into()),
            Error::Hub(HubError::Interrupted { .. }) => Some("the mirror keeps cutting the transfer: try again later, or another HF_ENDPOINT".into()),
            Error::Hub(HubError::Mirror { .. } | HubError::Corrupt { .. }) => Some("the mirror's answer was refused and nothing of it was kept; check the mirror (HF_ENDPOINT)".into()),
            Error::BadInput(_) => Some("a model is ORG/NAME or ORG/NAME@REVISION (a branch, tag or 40-hex commit), e.g. Qwen/Qwen2.5-0.5B-Instruct@main".into()),
            Error::NotRegular(_) => Some("--from reads regular files only: remove or move the special file".into()),
            Error::Transform(_) => Some("the raw data is not GSM8K-shaped: every answer ends with a `#### <number>` line".into()),
            Error::UnknownDataset(_) => Some("--dataset gsm8k or --dataset gsm8k-sft".into()),
            Error::Lock(e) => e.hint(),
            Error::Io(e) => crate::fsx::io_hint(&e.source),
            Error::Hub(HubError::Io { source, .. }) => crate::fsx::io_hint(source),
            _ => None,
        }
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io(crate::fsx::io_at(action, path)(source))
}

/// A hub client for the profile: its HF_ENDPOINT (else the environment's, else the hub)
/// and HF_TOKEN (the environment's, else the profile's; never printed or written).
pub fn hub_client(loaded: &crate::config::LoadedProfile) -> HubClient {
    let env = &loaded.profile.env;
    let endpoint = env
        .get("HF_ENDPOINT")
        .cloned()
        .or_else(|| std::env::var("HF_ENDPOINT").ok())
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| hf::DEFAULT_ENDPOINT.to_string());
    let token = std::env::var("HF_TOKEN")
        .ok()
        .or_else(|| env.get("HF_TOKEN").cloned())
        .filter(|t| !t.is_empty());
    HubClient::new(&endpoint, token)
}

/// Where prepare reads from and writes to.
/// Takes the lock `<shared>/.argus/locks/prepare-<key>`, saying whom it waits for.
fn lock(p: &Prepare, key: &str, reporter: &dyn Reporter) -> Result<crate::lock::Lock, Error> {
    let what = format!("prepare of {key}");
    let rel = Path::new(crate::config::layout::LOCKS).join(format!("prepare-{key}"));
    let options = crate::lock::Acquire {
        what: &what,
        timeout: None,
    };
    let lock = tokio::task::block_in_place(|| {
        crate::lock::acquire_under(p.host.root(), &rel, &options, |holder| {
            reporter.note(&crate::lock::waiting_message(&what, holder));
        })
    })?;
    crate::testpoint::reach("prepare:locked");
    Ok(lock)
}

pub struct Prepare {
    pub client: HubClient,
    /// The shared storage on this host.
    pub host: Layout,
    /// The same storage inside the containers (for the paths jobs use).
    pub mount: ContainerLayout,
}

impl Prepare {
    /// The hub cache on the shared storage, reached through handles from its root.
    pub fn cache(&self) -> HubCache {
        HubCache::of(&self.host)
    }

    /// The storage's top-level directories, checked before anything is written: a link
    /// planted at any of them is refused, never followed.
    fn check_storage(&self) -> Result<(), Error> {
        self.host
            .check()
            .map_err(io("cannot use the shared storage at", self.host.root()))
    }

    /// The hub cache's root, made when missing, each component opened without following
    /// a link (the cache then works through handles from the root).
    fn create_cache(&self) -> Result<(), Error> {
        self.host
            .create_dirs("common/hf/hub")
            .map(drop)
            .map_err(io("cannot create", &self.host.hf_home().join("hub")))
    }

    /// The handle of `common/datasets/<name>` when it exists: a link or a file there (or
    /// on the way) is refused, never followed.
    fn existing_dataset(&self, dataset: Dataset) -> Result<Option<Dir>, Error> {
        let rel = Path::new(DATASETS_REL).join(dataset.dir_name());
        match self.host.open(&rel) {
            Ok(dir) => Ok(Some(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot use", &self.host.root().join(&rel))(e)),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    /// The snapshot directory as the containers see it: the model path for jobs.
    pub path: String,
    pub host_path: PathBuf,
    pub files: Vec<CachedFile>,
    pub files_downloaded: usize,
    pub bytes_downloaded: u64,
}

/// `REPO[@REV]` -> (repo, revision), unchecked (for names already checked, or shown).
pub fn split_revision(spec: &str) -> (&str, &str) {
    spec.split_once('@').unwrap_or((spec, "main"))
}

/// `--model REPO[@REV]`, checked: a malformed id is the user's error and never leaves
/// the machine.
pub fn parse_model(spec: &str) -> Result<ModelSpec, Error> {
    ModelSpec::parse(spec).map_err(Error::BadInput)
}

pub async fn prepare_model(
    p: &Prepare,
    model: &str,
    include: &[String],
    exclude: &[String],
    reporter: &dyn Reporter,
) -> Result<ModelReport, Error> {
    let model = parse_model(model)?;
    let filter = Filter::new(include, exclude)?;
    p.client.check_endpoint()?;
    p.check_storage()?;
    p.create_cache()?;
    // One download of a repository at a time, on any host: a second one waits, then finds
    // every blob in place and transfers nothing.
    let _lock = lock(
        p,
        &format!("model-{}", model.repo.folder_name(RepoKind::Model)),
        reporter,
    )?;
    let spec = SnapshotSpec {
        kind: RepoKind::Model,
        repo: model.repo,
        revision: model.revision,
        filter,
    };
    let result = download::snapshot(&p.client, &p.cache(), &spec, reporter).await?;
    let relative = result
        .dir
        .strip_prefix(p.host.root())
        .unwrap_or(&result.dir)
        .to_path_buf();
    Ok(ModelReport {
        repo: result.repo,
        revision: result.revision,
        commit: result.commit,
        path: p.mount.root().join(relative).display().to_string(),
        host_path: result.dir,
        files: result.files,
        files_downloaded: result.files_downloaded,
        bytes_downloaded: result.bytes_downloaded,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dataset {
    Gsm8k,
    Gsm8kSft,
}

impl Dataset {
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name {
            "gsm8k" => Ok(Dataset::Gsm8k),
            "gsm8k-sft" | "gsm8k_sft" => Ok(Dataset::Gsm8kSft),
            other => Err(Error::UnknownDataset(other.to_string())),
        }
    }
    /// The directory under common/datasets/.
    pub fn dir_name(self) -> &'static str {
        match self {
            Dataset::Gsm8k => "gsm8k",
            Dataset::Gsm8kSft => "gsm8k_sft",
        }
    }
}

/// Bumped when the transform's output changes.
const TRANSFORM_VERSION: u32 = 1;
pub const RAW_REPO: &str = "openai/gsm8k";
const SPLITS: [&str; 2] = ["train", "test"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub file: String,
    pub sha256: String,
    #[serde(default)]
    pub rows: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatasetManifest {
    pub dataset: Dataset,
    pub transform_version: u32,
    /// `openai/gsm8k@<commit>` from the hub, or `local:<dir>`.
    pub source: String,
    pub source_commit: Option<String>,
    pub raw_files: Vec<FileDigest>,
    pub outputs: Vec<FileDigest>,
    pub argus_version: String,
    pub created: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatasetReport {
    pub dataset: Dataset,
    /// As the containers see it.
    pub path: String,
    pub host_path: PathBuf,
    pub source: String,
    pub outputs: Vec<FileDigest>,
    /// False when the existing files already matched the source (nothing written).
    pub written: bool,
}

pub async fn prepare_dataset(
    p: &Prepare,
    dataset: Dataset,
    from: Option<&Path>,
    reporter: &dyn Reporter,
) -> Result<DatasetReport, Error> {
    if let Some(dir) = from {
        check_from(dir)?;
    }
    p.check_storage()?;
    // `common/datasets/<name>`, opened: a planted link there is refused before anything
    // is read through it or written next to it.
    p.existing_dataset(dataset)?;
    let out_dir = p.host.datasets().join(dataset.dir_name());
    let _lock = lock(p, &format!("dataset-{}", dataset.dir_name()), reporter)?;
    let raw_source = fetch_raw(p, from, reporter).await?;
    let report = |outputs, written| DatasetReport {
        dataset,
        path: p
            .mount
            .datasets()
            .join(dataset.dir_name())
            .display()
            .to_string(),
        host_path: out_dir.clone(),
        source: raw_source.name.clone(),
        outputs,
        written,
    };

    let task = reporter.task(dataset.dir_name());
    let raw = digest_raw(raw_source.files)?;
    let raw_digests: Vec<FileDigest> = raw.iter().map(|r| r.digest.clone()).collect();
    // Up to date: same transform of the same raw bytes, outputs untouched since (read
    // under the lock, through the dataset directory's handle).
    if let Some(existing_dir) = p.existing_dataset(dataset)?
        && let Some(existing) = read_manifest(&existing_dir)
        && existing.transform_version == TRANSFORM_VERSION
        && existing.dataset == dataset
        && existing.raw_files == raw_digests
        && outputs_intact(&existing_dir, &existing.outputs)
    {
        task.done("up to date");
        return Ok(report(existing.outputs, false));
    }

    task.update("reading the raw splits");
    let batches = transform(dataset, raw)?;
    let manifest = DatasetManifest {
        dataset,
        transform_version: TRANSFORM_VERSION,
        source: raw_source.name.clone(),
        source_commit: raw_source.commit.clone(),
        raw_files: raw_digests,
        outputs: Vec::new(),
        argus_version: env!("CARGO_PKG_VERSION").into(),
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    };
    let outputs = publish_dataset(p, &batches, manifest, &*task)?;
    task.done(
        &outputs
            .iter()
            .map(|o| format!("{} {} rows", o.file, o.rows))
            .collect::<Vec<_>>()
            .join(", "),
    );
    Ok(report(outputs, true))
}

/// Where datasets live, under the storage root.
const DATASETS_REL: &str = "common/datasets";

/// Reads and transforms every split before anything is written: a bad row leaves no
/// half dataset.
fn transform(
    dataset: Dataset,
    raw: Vec<RawFile>,
) -> Result<Vec<(&'static str, arrow_array::RecordBatch)>, Error> {
    let mut batches = Vec::new();
    for split in SPLITS {
        let mut rows = Vec::new();
        for r in raw.iter().filter(|r| r.split == split) {
            let file = r.file.try_clone().map_err(io("cannot read", &r.path))?;
            rows.extend(parquet::read_raw_file(file, &r.path)?);
        }
        let batch = match dataset {
            Dataset::Gsm8k => parquet::rl_batch(&gsm8k::to_rl(split, &rows)?),
            Dataset::Gsm8kSft => parquet::sft_batch(&gsm8k::to_sft(split, &rows)?),
        }
        .map_err(|e| parquet::ParquetError {
            path: split.to_string(),
            detail: e.to_string(),
        })?;
        batches.push((split, batch));
    }
    Ok(batches)
}

/// Writes the splits and the manifest (its outputs filled in) into a fresh staging
/// directory made in the handle of `common/datasets`, synced, then swaps it in there:
/// readers see the old dataset, the new one, or none; never a part. Returns the outputs
/// written.
fn publish_dataset(
    p: &Prepare,
    batches: &[(&'static str, arrow_array::RecordBatch)],
    mut manifest: DatasetManifest,
    task: &dyn crate::ui::Task,
) -> Result<Vec<FileDigest>, Error> {
    let name = manifest.dataset.dir_name();
    let dirs = crate::fsx::Dirs::new();
    let datasets = p
        .host
        .create_in(&dirs, DATASETS_REL)
        .map_err(io("cannot create", &p.host.datasets()))?;
    let staging = publish::Staging::new(&datasets, name)
        .map_err(io("cannot create a staging directory in", datasets.path()))?;
    crate::testpoint::reach("prepare:staged");
    for (split, batch) in batches {
        let file_name = format!("{split}.parquet");
        let shown = staging.dir().display(&file_name);
        task.update(&format!(
            "writing {}",
            datasets.display(Path::new(name).join(&file_name)).display()
        ));
        let file = staging
            .dir()
            .create_new(&file_name, 0o644)
            .map_err(io("cannot create", &shown))?;
        parquet::write_to(file, &shown, batch)?;
        let written = staging
            .dir()
            .open_file(&file_name)
            .map_err(io("cannot read", &shown))?;
        manifest.outputs.push(FileDigest {
            file: file_name,
            sha256: fsutil::sha256_of(&written).map_err(io("cannot read", &shown))?,
            rows: parquet::rows(batch),
        });
    }
    let manifest_path = staging.dir().display("manifest.json");
    staging
        .dir()
        .write_new(
            "manifest.json",
            &serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
        )
        .map_err(io("cannot write", &manifest_path))?;
    let out_dir = datasets.display(name);
    staging
        .publish(0o755)
        .map_err(io("cannot publish", &out_dir))?;
    dirs.keep();
    Ok(manifest.outputs)
}

/// At most this many bytes of a manifest are read (it lists a few files).
const MAX_MANIFEST: u64 = 1 << 20;

/// The outputs a manifest lists are the dataset's own files, each still with its sha256
/// (read through the dataset directory's handle).
pub fn outputs_intact(dir: &Dir, outputs: &[FileDigest]) -> bool {
    let expected: Vec<String> = SPLITS.iter().map(|s| format!("{s}.parquet")).collect();
    outputs.len() == expected.len()
        && outputs.iter().zip(&expected).all(|(o, name)| {
            o.file == *name
                && dir
                    .open_file(name)
                    .ok()
                    .and_then(|f| fsutil::sha256_of(&f).ok())
                    .as_deref()
                    == Some(o.sha256.as_str())
        })
}

/// The manifest of the dataset whose directory `dir` is, if it has a readable one.
pub fn read_manifest(dir: &Dir) -> Option<DatasetManifest> {
    serde_json::from_slice(&dir.read("manifest.json", MAX_MANIFEST).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An existing dataset's manifest and outputs are read through the handle of its
    /// directory: swapped for a link to a forged copy after it was opened, the real one
    /// is still what is read.
    #[test]
    fn an_existing_dataset_is_read_through_its_handle_not_a_swapped_in_link() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("shared"));
        let write = |at: &Path, source: &str, bytes: &[u8]| {
            std::fs::create_dir_all(at).unwrap();
            for split in SPLITS {
                std::fs::write(at.join(format!("{split}.parquet")), bytes).unwrap();
            }
            let digest = crate::digest::hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes));
            let manifest = DatasetManifest {
                dataset: Dataset::Gsm8k,
                transform_version: TRANSFORM_VERSION,
                source: source.into(),
                source_commit: None,
                raw_files: Vec::new(),
                outputs: SPLITS
                    .iter()
                    .map(|s| FileDigest {
                        file: format!("{s}.parquet"),
                        sha256: digest.clone(),
                        rows: 1,
                    })
                    .collect(),
                argus_version: "t".into(),
                created: "t".into(),
            };
            std::fs::write(
                at.join("manifest.json"),
                serde_json::to_vec(&manifest).unwrap(),
            )
            .unwrap();
        };
        let real = layout.datasets().join("gsm8k");
        write(&real, "real", b"real bytes");
        let forged = dir.path().join("forged");
        write(&forged, "forged", b"forged bytes");
        let held = layout.open("common/datasets/gsm8k").unwrap();
        std::fs::rename(&real, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&forged, &real).unwrap();
        let manifest = read_manifest(&held).unwrap();
        assert_eq!(manifest.source, "real");
        assert!(outputs_intact(&held, &manifest.outputs));
        // Opened again now, the link is refused.
        let err = layout.open("common/datasets/gsm8k").unwrap_err();
        assert!(matches!(
            crate::fsx::Unsafe::of(&err),
            Some(crate::fsx::Unsafe::Link { .. })
        ));
    }
}
