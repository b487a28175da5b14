//! A repo snapshot into the HF cache, planned before it acts:
//!
//! 1. the revision's file list (every name checked; one bad name refuses the repo);
//! 2. HEAD for each wanted file not yet in the cache (several at once): etag, size, and
//!    the same commit, all checked. Nothing is written until every answer is good;
//! 3. each missing blob downloaded once (even when several files share it) into
//!    `blobs/<etag>.incomplete`, verified, renamed to `blobs/<etag>`;
//! 4. `snapshots/<commit>/` linked once every blob is there, `refs/<revision>` last.
//!
//! A complete snapshot costs one revision request and no file transfer. A failed one
//! takes away the directories it created (when they are empty).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

use super::hf::{FileMeta, HubClient, HubError, RepoKind};
use super::hf_cache::{HubCache, Incomplete, RepoCache};
use crate::fsx::{Dir, Dirs};
use crate::hf::{Commit, Etag, RepoId, RepoPath, Revision};
use crate::ui::Reporter;

/// Files downloaded at the same time.
pub const PARALLEL_FILES: usize = 4;
/// HEAD requests at the same time.
const PARALLEL_HEADS: usize = 8;

#[derive(Debug, Clone)]
pub struct SnapshotSpec {
    pub kind: RepoKind,
    pub repo: RepoId,
    pub revision: Revision,
    pub filter: Filter,
}

/// `--include` / `--exclude` globs, compiled (a bad one is the user's error).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, HubError> {
        Ok(Self {
            include: globs(include)?,
            exclude: globs(exclude)?,
        })
    }

    pub fn matches(&self, file: &RepoPath) -> bool {
        self.include
            .as_ref()
            .is_none_or(|g| g.is_match(file.as_str()))
            && self
                .exclude
                .as_ref()
                .is_none_or(|g| !g.is_match(file.as_str()))
    }
}

fn globs(patterns: &[String]) -> Result<Option<GlobSet>, HubError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        builder.add(Glob::new(p).map_err(|e| HubError::BadPattern {
            pattern: format!("{p:?}"),
            reason: e.kind().to_string(),
        })?);
    }
    builder.build().map(Some).map_err(|e| HubError::BadPattern {
        pattern: format!("{patterns:?}"),
        reason: e.to_string(),
    })
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

pub async fn snapshot(
    client: &HubClient,
    cache: &HubCache,
    spec: &SnapshotSpec,
    reporter: &dyn Reporter,
) -> Result<SnapshotResult, HubError> {
    let (kind, repo) = (spec.kind, &spec.repo);
    let info = client.revision(kind, repo, &spec.revision).await?;
    let commit = info.commit;
    let wanted: Vec<RepoPath> = info
        .files
        .into_iter()
        .filter(|f| spec.filter.matches(f))
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
    let overall = reporter.task(repo.as_str());
    overall.update(&format!("{} files at {}", wanted.len(), commit.short()));

    // What the cache holds, read through handles (nothing is made before the plan is good).
    let held = cache
        .open_repo(kind, repo)
        .map_err(cache_io(cache, kind, repo))?;
    let planned = plan(client, held.as_ref(), kind, repo, &commit, wanted).await?;
    let to_fetch = missing_blobs(held.as_ref(), &planned);
    drop(held);

    // Act, in the repo's directory held open from here on.
    let dirs = Dirs::new();
    let repo_cache = cache
        .create_repo(kind, repo, &dirs)
        .map_err(cache_io(cache, kind, repo))?;
    let blobs = if to_fetch.is_empty() {
        None
    } else {
        Some(
            repo_cache
                .create_blobs(&dirs)
                .map_err(|source| HubError::Io {
                    action: "cannot create",
                    path: repo_cache.dir().display("blobs").display().to_string(),
                    source,
                })?,
        )
    };
    crate::testpoint::reach("prepare:blobs");
    let bytes = AtomicU64::new(0);
    let count = AtomicUsize::new(0);
    stream::iter(to_fetch.into_values())
        .map(|(file, meta)| {
            let (bytes, count, blobs) = (&bytes, &count, blobs.as_ref());
            async move {
                let Some(blobs) = blobs else {
                    return Ok(());
                };
                let sent = fetch_blob(client, blobs, kind, repo, &file, &meta, reporter).await?;
                bytes.fetch_add(sent, Ordering::Relaxed);
                count.fetch_add(1, Ordering::Relaxed);
                Ok::<_, HubError>(())
            }
        })
        .buffer_unordered(PARALLEL_FILES)
        .try_collect::<Vec<()>>()
        .await?;
    let mut files = Vec::with_capacity(planned.len());
    for (file, etag, _) in planned {
        repo_cache
            .link(&commit, &file, &etag, &dirs)
            .map_err(|source| HubError::Io {
                action: "cannot link",
                path: file.to_string(),
                source,
            })?;
        files.push(CachedFile {
            path: file.to_string(),
            etag: etag.to_string(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if spec.revision.as_commit().is_none() {
        repo_cache
            .write_ref(&spec.revision, &commit, &dirs)
            .map_err(|source| HubError::Io {
                action: "cannot write the ref of",
                path: repo.to_string(),
                source,
            })?;
    }
    dirs.keep();
    let result = SnapshotResult {
        repo: repo.to_string(),
        revision: spec.revision.to_string(),
        commit: commit.to_string(),
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

/// Where each wanted file's bytes are: its etag from the cache's link, else from the
/// mirror's HEAD (whose metadata the download then needs), all checked.
async fn plan(
    client: &HubClient,
    cache: Option<&RepoCache>,
    kind: RepoKind,
    repo: &RepoId,
    commit: &Commit,
    wanted: Vec<RepoPath>,
) -> Result<Vec<Planned>, HubError> {
    stream::iter(wanted)
        .map(|file| async move {
            if let Some(etag) = cache.and_then(|c| c.linked_etag(commit, &file)) {
                return Ok((file, etag, None));
            }
            let meta = client.head(kind, repo, commit, &file).await?;
            Ok::<_, HubError>((file, meta.etag.clone(), Some(meta)))
        })
        .buffered(PARALLEL_HEADS)
        .try_collect()
        .await
}

/// A file, its etag, and the mirror's metadata when the cache did not know it.
type Planned = (RepoPath, Etag, Option<FileMeta>);

/// Each blob the cache lacks, once, even when several files have the same bytes.
fn missing_blobs(
    cache: Option<&RepoCache>,
    planned: &[Planned],
) -> BTreeMap<Etag, (RepoPath, FileMeta)> {
    let mut to_fetch = BTreeMap::new();
    for (file, etag, meta) in planned {
        if let Some(meta) = meta
            && !cache.is_some_and(|c| c.has_blob(etag))
        {
            to_fetch
                .entry(etag.clone())
                .or_insert_with(|| (file.clone(), meta.clone()));
        }
    }
    to_fetch
}

/// Downloads one blob through `blobs/<etag>.incomplete` and renames it into place once
/// its bytes are verified, all through the handle of `blobs/`.
async fn fetch_blob(
    client: &HubClient,
    blobs: &Dir,
    kind: RepoKind,
    repo: &RepoId,
    file: &RepoPath,
    meta: &FileMeta,
    reporter: &dyn Reporter,
) -> Result<u64, HubError> {
    let blob = blobs.display(meta.etag.as_str());
    let io = |action: &'static str| {
        let path = blob.display().to_string();
        move |source| HubError::Io {
            action,
            path,
            source,
        }
    };
    let incomplete = Incomplete::new(blobs, &meta.etag);
    // Removed if this future is dropped half-way (another file failed) or fails for a
    // reason other than the server going away (then the next run resumes from it).
    let mut partial = Partial {
        incomplete: &incomplete,
        keep: false,
    };
    let task = reporter.task(file.as_str());
    let result = client
        .download(kind, repo, meta, file, &incomplete, |done| {
            task.progress(done, meta.size)
        })
        .await;
    match result {
        Ok(sent) => {
            incomplete.publish().map_err(io("cannot publish"))?;
            partial.keep = true;
            task.done(&crate::ui::human_bytes(meta.size.unwrap_or(sent)));
            Ok(sent)
        }
        Err(e) => {
            partial.keep = matches!(e, HubError::Unreachable { .. });
            task.fail("failed");
            Err(e)
        }
    }
}

/// A download's `.incomplete` file, removed on drop unless kept.
struct Partial<'a> {
    incomplete: &'a Incomplete<'a>,
    keep: bool,
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        if !self.keep {
            self.incomplete.discard();
        }
    }
}

/// An I/O error on the repository's directory in the cache.
fn cache_io(
    cache: &HubCache,
    kind: RepoKind,
    repo: &RepoId,
) -> impl FnOnce(std::io::Error) -> HubError {
    let path = cache.repo_dir(kind, repo).display().to_string();
    move |source| HubError::Io {
        action: "cannot use",
        path,
        source,
    }
}
