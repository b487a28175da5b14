//! One file's bytes from the hub into its `.incomplete` file: resume with `Range` when
//! the server honours it, start over when it does not, retry while each attempt gets
//! further, and verify the size and (for LFS files) the sha256 before the caller moves
//! the file into place.

use std::time::Duration;

use reqwest::{StatusCode, Url, header};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{HubClient, HubError, without_credentials};
use crate::data::hf_cache::Incomplete;
use crate::hf::{FileMeta, RepoId, RepoKind, RepoPath};

/// How many attempts a download makes in all, whatever progress each one makes.
const MAX_ATTEMPTS: u32 = 50;

/// The file being downloaded: what the hub says it is and where its bytes go.
struct Partial<'a> {
    file: &'a RepoPath,
    meta: &'a FileMeta,
    incomplete: &'a Incomplete<'a>,
}

/// What one GET left in the partial file.
struct Fetched {
    written: u64,
    /// The body stopped before its end (the connection broke).
    broken: bool,
    hasher: Sha256,
}

impl HubClient {
    /// Downloads `file` into `incomplete`, resuming from what it already holds when the
    /// server honours `Range` and starting over when it does not; verifies the size and,
    /// for LFS files, the sha256. Calls `progress(bytes so far)` as bytes arrive.
    /// Returns the number of bytes transferred.
    ///
    /// A transfer that breaks is tried again as long as each attempt gets further; after
    /// `retries` attempts without progress, or when the bytes are proven wrong, the
    /// partial file is removed. It is kept (for the next run to resume) only when the
    /// server stopped answering at all.
    pub async fn download(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        meta: &FileMeta,
        file: &RepoPath,
        incomplete: &Incomplete<'_>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, HubError> {
        let url = self.resolve_url(kind, repo, meta.commit.as_str(), file)?;
        let part = Partial {
            file,
            meta,
            incomplete,
        };
        let mut transferred = 0u64;
        let mut best = 0u64;
        let mut stalled = 0u32;
        let mut total_attempts = 0u32;
        loop {
            total_attempts += 1;
            let fetched = self
                .attempt(&url, repo, &part, &mut transferred, &mut progress)
                .await?;
            let written = fetched.written;
            let short = meta.size.is_some_and(|size| written < size);
            if !(fetched.broken || short) {
                return part.verify(fetched).await.map(|()| transferred);
            }
            if written > best {
                best = written;
                stalled = 0;
            } else {
                stalled += 1;
            }
            if stalled < self.retries && total_attempts < MAX_ATTEMPTS {
                tracing::info!("{file}: transfer broke at {written} bytes; resuming");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(stalled.max(1)))).await;
                continue;
            }
            part.discard().await;
            return Err(HubError::Interrupted {
                file: file.to_string(),
                got: written,
                expected: meta
                    .size
                    .map_or_else(|| "an unknown number of".into(), |s| s.to_string()),
                attempts: stalled.max(1),
                what: "the partial download was discarded".into(),
            });
        }
    }

    /// One GET from what the partial file holds: appends to it (206), keeps it as it is
    /// (416: already whole, checked by the caller) or rewrites it (200).
    async fn attempt(
        &self,
        url: &Url,
        repo: &RepoId,
        part: &Partial<'_>,
        transferred: &mut u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Fetched, HubError> {
        let have = part.held().await;
        let (final_url, response) = self.get(url.clone(), Some(have)).await?;
        let status = response.status();
        if status != StatusCode::RANGE_NOT_SATISFIABLE && !status.is_success() {
            let what = format!("{} in {repo}@{}", part.file, part.meta.commit);
            return Err(self.not_found_or_error(what, &final_url, response).await);
        }
        // 206: append to what we hold (from exactly there); 416: what we hold is
        // already whole (checked below); 200: the whole file again (the server
        // ignored Range, or we asked from 0).
        if status == StatusCode::RANGE_NOT_SATISFIABLE && have == 0 {
            return Err(HubError::Protocol {
                url: without_credentials(&final_url),
                detail: "answered 416 to a request without a range".into(),
            });
        }
        let keep = (status == StatusCode::PARTIAL_CONTENT && have > 0)
            || status == StatusCode::RANGE_NOT_SATISFIABLE;
        if status == StatusCode::PARTIAL_CONTENT && have > 0 && range_start(&response) != Some(have)
        {
            part.discard().await;
            return Err(HubError::Protocol {
                url: without_credentials(&final_url),
                detail: format!(
                    "asked for bytes from {have}, got a range that does not start there"
                ),
            });
        }
        let mut out = part.open(keep).await?;
        let mut fetched = Fetched {
            written: if keep { have } else { 0 },
            broken: false,
            hasher: Sha256::new(),
        };
        // Hash as the bytes arrive (what a resume keeps is hashed first): no second read.
        if keep && part.meta.etag.sha256().is_some() {
            hash_prefix(part.incomplete, &mut fetched.hasher)
                .await
                .map_err(part.io("cannot read"))?;
        }
        progress(fetched.written);
        if status != StatusCode::RANGE_NOT_SATISFIABLE {
            let received = part
                .receive(response, &mut out, &mut fetched, transferred, progress)
                .await;
            if let Err(e) = received {
                drop(out);
                part.discard().await;
                return Err(e);
            }
        }
        if let Err(e) = async {
            out.flush().await?;
            out.sync_all().await
        }
        .await
        {
            drop(out);
            part.discard().await;
            return Err(part.io("cannot write")(e));
        }
        Ok(fetched)
    }
}

impl Partial<'_> {
    fn io(&self, action: &'static str) -> impl Fn(std::io::Error) -> HubError + '_ {
        move |source| HubError::Io {
            action,
            path: self.incomplete.path().display().to_string(),
            source,
        }
    }

    async fn discard(&self) {
        self.incomplete.discard();
    }

    /// How many bytes the partial file holds that are worth resuming from. Only a
    /// regular file of its own counts (a link planted in the cache must not make argus
    /// write through it: it is removed); one longer than the file is started over.
    async fn held(&self) -> u64 {
        let have = self.incomplete.held();
        if self.meta.size.is_some_and(|size| have > size) {
            0
        } else {
            have
        }
    }

    /// Opens the partial file to append to (`keep`) or makes it anew, through the
    /// handle of `blobs/` and never through a link.
    async fn open(&self, keep: bool) -> Result<tokio::fs::File, HubError> {
        let file = if keep {
            self.incomplete.append().map_err(self.io("cannot open"))?
        } else {
            self.incomplete.create().map_err(self.io("cannot create"))?
        };
        Ok(tokio::fs::File::from_std(file))
    }

    /// Writes the body into `out` as it arrives, hashing it; a broken connection ends
    /// the body (`fetched.broken`), a body longer than the file or a failed write is an
    /// error (the caller discards the partial file).
    async fn receive(
        &self,
        mut response: reqwest::Response,
        out: &mut tokio::fs::File,
        fetched: &mut Fetched,
        transferred: &mut u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), HubError> {
        loop {
            let bytes = match response.chunk().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return Ok(()),
                Err(e) => {
                    tracing::debug!("{}: the transfer broke: {}", self.file, e.without_url());
                    fetched.broken = true;
                    return Ok(());
                }
            };
            if let Some(size) = self.meta.size
                && fetched.written + bytes.len() as u64 > size
            {
                return Err(HubError::Corrupt {
                    file: self.file.to_string(),
                    expected: format!("{size} bytes"),
                    actual: "more bytes than that".into(),
                });
            }
            out.write_all(&bytes)
                .await
                .map_err(self.io("cannot write"))?;
            if self.meta.etag.sha256().is_some() {
                fetched.hasher.update(&bytes);
            }
            fetched.written += bytes.len() as u64;
            *transferred += bytes.len() as u64;
            progress(fetched.written);
        }
    }

    /// Checks a whole download's size and sha256; a wrong one discards the partial file.
    async fn verify(&self, fetched: Fetched) -> Result<(), HubError> {
        let written = fetched.written;
        if let Some(size) = self.meta.size
            && written != size
        {
            self.discard().await;
            return Err(HubError::Corrupt {
                file: self.file.to_string(),
                expected: format!("{size} bytes"),
                actual: format!("{written} bytes"),
            });
        }
        if let Some(expected) = self.meta.etag.sha256() {
            let actual = crate::digest::hex(&fetched.hasher.finalize());
            if actual != expected {
                self.discard().await;
                return Err(HubError::Corrupt {
                    file: self.file.to_string(),
                    expected: format!("sha256 {expected}"),
                    actual: format!("sha256 {actual}"),
                });
            }
        }
        Ok(())
    }
}

/// The first byte of a 206's `Content-Range: bytes <start>-<end>/<size>`.
fn range_start(response: &reqwest::Response) -> Option<u64> {
    let value = response
        .headers()
        .get(header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    let range = value.trim().strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

/// Feeds what a partial download already holds into `hasher`.
async fn hash_prefix(incomplete: &Incomplete<'_>, hasher: &mut Sha256) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::File::from_std(incomplete.read()?);
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buffer[..n]);
    }
}
