//! Where the raw GSM8K files come from: a `--from` directory (the hub repo's layout,
//! checked before anything is read), or the hub's snapshot in the shared cache (read as
//! its blobs, through handles); each file opened once and hashed as it is read.

use std::path::{Path, PathBuf};

use super::download::{self, CachedFile, Filter, SnapshotSpec};
use super::fsutil::{self, NotRegular};
use super::hf::RepoKind;
use super::hf_cache::HubCache;
use super::{Error, FileDigest, Prepare, RAW_REPO, SPLITS, io};
use crate::hf::{RepoId, Revision};
use crate::ui::Reporter;

/// Checks a `--from` directory before anything is read: it and its `main/` are
/// directories, and no entry of either is a FIFO, socket or device node (each is named;
/// none is ever opened).
pub fn check_from(dir: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| Error::Usage(format!("--from {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "--from {} is not a directory (expected the hub repo's layout: main/train-*.parquet, main/test-*.parquet)",
            dir.display()
        )));
    }
    for d in [dir.to_path_buf(), dir.join("main")] {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // Follows symlinks (a link to a FIFO is a FIFO here); stat never blocks.
            if let Ok(meta) = std::fs::metadata(&path)
                && let Some(kind) = crate::fsx::special_kind(meta.file_type())
            {
                return Err(Error::NotRegular(NotRegular::Special { path, kind }));
            }
        }
    }
    Ok(())
}

/// Raw split files: `<dir>/main/<split>-*.parquet`, sorted (shards in order).
fn raw_files(dir: &Path, split: &str) -> Result<Vec<PathBuf>, Error> {
    let main = dir.join("main");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&main)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{split}-")) && n.ends_with(".parquet"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::NoRawSplit {
            split: split.to_string(),
            dir: dir.display().to_string(),
        });
    }
    Ok(files)
}

/// One raw split file, opened once (only if it is a regular file) and hashed.
pub(super) struct RawFile {
    pub(super) split: &'static str,
    pub(super) path: PathBuf,
    pub(super) file: std::fs::File,
    pub(super) digest: FileDigest,
}

/// Where the raw GSM8K files came from: a local `--from` directory or the hub.
pub(super) struct RawSource {
    /// Each split's files, opened.
    pub(super) files: Vec<OpenedRaw>,
    /// `local:<dir>` or `<repo>@<commit>`, as the manifest records it.
    pub(super) name: String,
    pub(super) commit: Option<String>,
}

/// One raw split file, opened (a regular file) but not yet read.
pub(super) struct OpenedRaw {
    split: &'static str,
    /// Its name in the source (`main/train-00000-of-00001.parquet`), as the manifest
    /// records it.
    name: String,
    /// Where it is, for messages.
    path: PathBuf,
    file: std::fs::File,
}

/// The raw files: the `--from` directory as it is, or the hub's snapshot in the cache.
pub(super) async fn fetch_raw(
    p: &Prepare,
    from: Option<&Path>,
    reporter: &dyn Reporter,
) -> Result<RawSource, Error> {
    if let Some(dir) = from {
        check_from(dir)?;
        return Ok(RawSource {
            files: open_local(dir)?,
            name: format!("local:{}", dir.display()),
            commit: None,
        });
    }
    p.client.check_endpoint()?;
    p.create_cache()?;
    let spec = SnapshotSpec {
        kind: RepoKind::Dataset,
        repo: RepoId::parse(RAW_REPO).map_err(Error::BadInput)?,
        revision: Revision::main(),
        filter: Filter::new(
            &[
                "main/train-*.parquet".into(),
                "main/test-*.parquet".into(),
                "README.md".into(),
            ],
            &[],
        )?,
    };
    let cache = p.cache();
    let result = download::snapshot(&p.client, &cache, &spec, reporter).await?;
    let commit = result.commit.clone();
    Ok(RawSource {
        files: open_cached(&cache, &spec.repo, &result)?,
        name: format!("{RAW_REPO}@{commit}"),
        commit: Some(commit),
    })
}

/// Whether `name` is a file of `split` in the hub repo's layout (`main/<split>-*.parquet`).
fn is_split_file(name: &str, split: &str) -> bool {
    name.strip_prefix("main/")
        .is_some_and(|n| n.starts_with(&format!("{split}-")) && n.ends_with(".parquet"))
}

/// The raw split files of a `--from` directory (the user's own, read by path), opened:
/// regular files only.
fn open_local(dir: &Path) -> Result<Vec<OpenedRaw>, Error> {
    let mut opened = Vec::new();
    for split in SPLITS {
        for path in raw_files(dir, split)? {
            let file = fsutil::open_regular(&path).map_err(Error::NotRegular)?;
            let name = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            opened.push(OpenedRaw {
                split,
                name,
                path,
                file,
            });
        }
    }
    Ok(opened)
}

/// The raw split files of the hub's snapshot, opened as the blobs the snapshot's files
/// are (through the cache's handles, never through the snapshot's links, which anyone
/// who can write the storage could point elsewhere).
fn open_cached(
    cache: &HubCache,
    repo: &RepoId,
    result: &download::SnapshotResult,
) -> Result<Vec<OpenedRaw>, Error> {
    let repo_dir = cache.repo_dir(RepoKind::Dataset, repo);
    let held = cache
        .open_repo(RepoKind::Dataset, repo)
        .map_err(io("cannot use", &repo_dir))?
        .ok_or_else(|| io("cannot use", &repo_dir)(std::io::ErrorKind::NotFound.into()))?;
    let mut opened = Vec::new();
    for split in SPLITS {
        let mut files: Vec<&CachedFile> = result
            .files
            .iter()
            .filter(|f| is_split_file(&f.path, split))
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.is_empty() {
            return Err(Error::NoRawSplit {
                split: split.to_string(),
                dir: result.dir.display().to_string(),
            });
        }
        for f in files {
            let path = result.dir.join(&f.path);
            let etag = crate::hf::Etag::parse(&f.etag).map_err(Error::BadInput)?;
            let file = held.open_blob(&etag).map_err(io(
                "cannot read",
                &held.dir().display(Path::new("blobs").join(etag.as_str())),
            ))?;
            opened.push(OpenedRaw {
                split,
                name: f.path.clone(),
                path,
                file,
            });
        }
    }
    Ok(opened)
}

/// Digests every opened raw split file.
pub(super) fn digest_raw(opened: Vec<OpenedRaw>) -> Result<Vec<RawFile>, Error> {
    let mut raw = Vec::new();
    for o in opened {
        let sha256 = fsutil::sha256_of(&o.file).map_err(io("cannot read", &o.path))?;
        raw.push(RawFile {
            split: o.split,
            digest: FileDigest {
                file: o.name,
                sha256,
                rows: 0,
            },
            path: o.path,
            file: o.file,
        });
    }
    Ok(raw)
}
