//! A repo snapshot into the HF cache: the revision's file list, then each missing file
//! HEADed and downloaded (several at once) into `blobs/<etag>.incomplete`, verified,
//! renamed to `blobs/<etag>` and linked from `snapshots/<commit>/`. `refs/<revision>` is
//! written last. A complete snapshot costs one revision request and no file transfer.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

use super::hf::{FileMeta, HubClient, HubError, RepoKind};
use super::hf_cache::HubCache;
use crate::ui::Reporter;

/// Files downloaded at the same time.
pub const PARALLEL_FILES: usize = 4;

#[derive(Debug, Clone)]
pub struct SnapshotSpec {
    pub kind: RepoKind,
    pub repo: String,
    pub revision: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CachedFile {
    pub path: String,
    pub etag: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotResult {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    /// `snapshots/<commit>/` on this host.
    pub dir: PathBuf,
    pub files: Vec<CachedFile>,
    pub files_downloaded: usize,
    pub bytes_downloaded: u64,
}

fn globs(patterns: &[String]) -> Result<Option<GlobSet>, HubError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        builder.add(Glob::new(p).map_err(|e| HubError::Protocol {
            url: String::new(),
            detail: format!("invalid glob {p:?}: {e}"),
        })?);
    }
    builder.build().map(Some).map_err(|e| HubError::Protocol {
        url: String::new(),
        detail: e.to_string(),
    })
}

pub async fn snapshot(
    client: &HubClient,
    cache: &HubCache,
    spec: &SnapshotSpec,
    reporter: &dyn Reporter,
) -> Result<SnapshotResult, HubError> {
    let (include, exclude) = (globs(&spec.include)?, globs(&spec.exclude)?);
    let (kind, repo) = (spec.kind, spec.repo.as_str());
    let info = client.revision(kind, repo, &spec.revision).await?;
    let commit = info.sha.clone();
    let wanted: Vec<String> = info
        .siblings
        .iter()
        .map(|s| s.rfilename.clone())
        .filter(|f| include.as_ref().is_none_or(|g| g.is_match(f)))
        .filter(|f| exclude.as_ref().is_none_or(|g| !g.is_match(f)))
        .collect();
    if wanted.is_empty() {
        return Err(HubError::NotFound {
            what: format!(
                "files matching the include/exclude patterns in {repo}@{}",
                spec.revision
            ),
            endpoint: client.endpoint().to_string(),
            status: 200,
        });
    }
    let bytes = AtomicU64::new(0);
    let count = AtomicUsize::new(0);
    let overall = reporter.task(repo);
    overall.update(&format!(
        "{} files at {}",
        wanted.len(),
        &commit[..commit.len().min(10)]
    ));
    let files: Vec<CachedFile> = stream::iter(wanted.iter().cloned())
        .map(|file| {
            let (bytes, count, commit) = (&bytes, &count, &commit);
            async move {
                if let Some(etag) = cache.linked_etag(kind, repo, commit, &file) {
                    return Ok(CachedFile { path: file, etag });
                }
                let meta = client.head(kind, repo, commit, &file).await?;
                let blob = cache.blob(kind, repo, &meta.etag);
                if !blob.is_file() {
                    let sent =
                        fetch_blob(client, kind, repo, &file, &meta, &blob, reporter).await?;
                    bytes.fetch_add(sent, Ordering::Relaxed);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                cache
                    .link(kind, repo, commit, &file, &meta.etag)
                    .map_err(|source| HubError::Io {
                        action: "cannot link",
                        path: file.clone(),
                        source,
                    })?;
                Ok::<_, HubError>(CachedFile {
                    path: file,
                    etag: meta.etag,
                })
            }
        })
        .buffer_unordered(PARALLEL_FILES)
        .try_collect()
        .await?;
    let mut files = files;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if spec.revision != commit {
        cache
            .write_ref(kind, repo, &spec.revision, &commit)
            .map_err(|source| HubError::Io {
                action: "cannot write the ref of",
                path: repo.to_string(),
                source,
            })?;
    }
    let result = SnapshotResult {
        repo: repo.to_string(),
        revision: spec.revision.clone(),
        commit: commit.clone(),
        dir: cache.snapshot_dir(kind, repo, &commit),
        files,
        files_downloaded: count.into_inner(),
        bytes_downloaded: bytes.into_inner(),
    };
    if result.files_downloaded == 0 {
        overall.done(&format!(
            "complete in the cache ({} files)",
            result.files.len()
        ));
    } else {
        overall.done(&format!(
            "{} files, {}",
            result.files_downloaded,
            crate::ui::human_bytes(result.bytes_downloaded)
        ));
    }
    Ok(result)
}

/// Downloads one blob through `<etag>.incomplete` (kept for resuming on failure,
/// removed when the bytes are wrong) and renames it into place.
async fn fetch_blob(
    client: &HubClient,
    kind: RepoKind,
    repo: &str,
    file: &str,
    meta: &FileMeta,
    blob: &std::path::Path,
    reporter: &dyn Reporter,
) -> Result<u64, HubError> {
    let io = |action: &'static str| {
        move |source| HubError::Io {
            action,
            path: blob.display().to_string(),
            source,
        }
    };
    if let Some(parent) = blob.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(io("cannot create"))?;
    }
    let incomplete = blob.with_file_name(format!("{}.incomplete", meta.etag));
    let task = reporter.task(file);
    let result = client
        .download(kind, repo, meta, file, &incomplete, |done| {
            task.progress(done, meta.size)
        })
        .await;
    match result {
        Ok(sent) => {
            tokio::fs::rename(&incomplete, blob)
                .await
                .map_err(io("cannot publish"))?;
            task.done(&crate::ui::human_bytes(meta.size.unwrap_or(sent)));
            Ok(sent)
        }
        Err(e) => {
            task.fail("failed");
            Err(e)
        }
    }
}
