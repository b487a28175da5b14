//! A Hugging Face hub client over reqwest: the revision API for the file list, HEAD on
//! `resolve/` for a file's commit, etag and size, GET for its bytes.
//!
//! Mirrors differ (DESIGN.md): some ignore `Range` (then a download restarts cleanly),
//! some send no Content-Length on GET (the HEAD's size is used), some answer 401 for a
//! missing file (reported as "not found"). ETags may be quoted, weak, or not: normalised.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{StatusCode, header};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::http::USER_AGENT;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    Model,
    Dataset,
}

impl RepoKind {
    /// `models` / `datasets`, as in API paths and cache folder names.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }
    fn resolve_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("cannot reach the Hugging Face endpoint {endpoint}")]
    Unreachable {
        endpoint: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what} not found on {endpoint} (it answered {status})")]
    NotFound {
        what: String,
        endpoint: String,
        status: u16,
    },
    #[error("{url} answered {status}: {body}")]
    Http {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url}: {detail}")]
    Protocol { url: String, detail: String },
    #[error(
        "{file}: downloaded bytes do not match (expected {expected}, got {actual}); the blob was discarded"
    )]
    Corrupt {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What HEAD says about one file at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub commit: String,
    /// Git blob sha1, or the sha256 of an LFS file.
    pub etag: String,
    pub size: Option<u64>,
}

impl FileMeta {
    /// LFS etags are sha256 digests: the bytes can be verified against them.
    pub fn sha256(&self) -> Option<&str> {
        (self.etag.len() == 64 && self.etag.chars().all(|c| c.is_ascii_hexdigit()))
            .then_some(self.etag.as_str())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct RepoInfo {
    pub sha: String,
    #[serde(default)]
    pub siblings: Vec<Sibling>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Sibling {
    pub rfilename: String,
}

#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    /// HEAD must see the first answer (a CDN redirect carries X-Linked-Etag / -Size).
    head_http: reqwest::Client,
    endpoint: String,
    token: Option<String>,
    /// Attempts per request on connection errors, 5xx and broken streams.
    pub retries: u32,
}

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// `"abc"`, `W/"abc"`, `abc` -> `abc`.
pub fn normalize_etag(raw: &str) -> String {
    raw.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

impl HubClient {
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        let build = |redirects| {
            reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(60))
                .redirect(redirects)
                .build()
                // Only fails without a TLS provider, which main installs.
                .unwrap_or_else(|e| panic!("HTTP client: {e}"))
        };
        Self {
            http: build(reqwest::redirect::Policy::limited(10)),
            head_http: build(reqwest::redirect::Policy::none()),
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token,
            retries: 4,
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn authed(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub fn resolve_url(&self, kind: RepoKind, repo: &str, revision: &str, file: &str) -> String {
        format!(
            "{}/{}{repo}/resolve/{revision}/{file}",
            self.endpoint,
            kind.resolve_prefix()
        )
    }

    /// Sends with retries: connection errors and 5xx wait and try again.
    async fn send(
        &self,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HubError> {
        let mut delay = Duration::from_millis(500);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match build().send().await {
                Ok(response) if response.status().is_server_error() && attempt < self.retries => {
                    tracing::debug!(
                        "{} answered {}; retrying",
                        response.url(),
                        response.status()
                    );
                }
                Ok(response) => return Ok(response),
                Err(e)
                    if (e.is_connect() || e.is_timeout() || e.is_request())
                        && attempt < self.retries =>
                {
                    tracing::debug!("request failed ({e}); retrying");
                }
                Err(source) => {
                    return Err(HubError::Unreachable {
                        endpoint: self.endpoint.clone(),
                        source,
                    });
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(8));
        }
    }

    fn not_found_or_error(
        &self,
        what: String,
        url: &str,
        status: StatusCode,
        body: String,
    ) -> HubError {
        match status {
            // Mirrors (olah) answer 401 for a missing repo or file; the hub answers 401
            // for gated repos without a token, 404 otherwise.
            StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                HubError::NotFound {
                    what,
                    endpoint: self.endpoint.clone(),
                    status: status.as_u16(),
                }
            }
            _ => HubError::Http {
                url: url.to_string(),
                status: status.as_u16(),
                body: body.chars().take(300).collect(),
            },
        }
    }

    /// `GET /api/{models|datasets}/{repo}/revision/{rev}`: the commit and its files.
    pub async fn revision(
        &self,
        kind: RepoKind,
        repo: &str,
        revision: &str,
    ) -> Result<RepoInfo, HubError> {
        let url = format!(
            "{}/api/{}/{repo}/revision/{revision}",
            self.endpoint,
            kind.plural()
        );
        let response = self.send(|| self.authed(self.http.get(&url))).await?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|source| HubError::Unreachable {
                endpoint: self.endpoint.clone(),
                source,
            })?;
        if !status.is_success() {
            return Err(self.not_found_or_error(
                format!("{} {repo}@{revision}", kind.plural().trim_end_matches('s')),
                &url,
                status,
                body,
            ));
        }
        serde_json::from_str(&body).map_err(|e| HubError::Protocol {
            url,
            detail: format!("not a revision answer: {e}"),
        })
    }

    /// `HEAD .../resolve/{rev}/{file}`: commit, etag and size, from the first answer
    /// (a redirect to a CDN carries them as X-Linked-*), following same-host redirects.
    pub async fn head(
        &self,
        kind: RepoKind,
        repo: &str,
        revision: &str,
        file: &str,
    ) -> Result<FileMeta, HubError> {
        let mut url = self.resolve_url(kind, repo, revision, file);
        for _ in 0..5 {
            let response = self.send(|| self.authed(self.head_http.head(&url))).await?;
            let status = response.status();
            let headers = response.headers();
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let commit = get("x-repo-commit");
            let etag = get("x-linked-etag")
                .or_else(|| get(header::ETAG.as_str()))
                .map(|e| normalize_etag(&e));
            let size = get("x-linked-size")
                .or_else(|| get(header::CONTENT_LENGTH.as_str()))
                .and_then(|s| s.parse().ok());
            if status.is_redirection() {
                if let (Some(commit), Some(etag)) = (commit.clone(), etag.clone()) {
                    return Ok(FileMeta { commit, etag, size });
                }
                // A relative redirect (a renamed repo): follow it.
                let Some(location) = get(header::LOCATION.as_str()) else {
                    break;
                };
                url = if location.starts_with('/') {
                    format!("{}{location}", self.endpoint)
                } else {
                    location
                };
                continue;
            }
            if !status.is_success() {
                return Err(self.not_found_or_error(
                    format!("{file} in {repo}@{revision}"),
                    &url,
                    status,
                    String::new(),
                ));
            }
            return match (commit, etag) {
                (Some(commit), Some(etag)) => Ok(FileMeta { commit, etag, size }),
                _ => Err(HubError::Protocol {
                    url,
                    detail: "no X-Repo-Commit or ETag header: is this a Hugging Face endpoint?"
                        .into(),
                }),
            };
        }
        Err(HubError::Protocol {
            url,
            detail: "too many redirects".into(),
        })
    }

    /// Downloads `file` into `incomplete`, resuming from what it already holds when the
    /// server honours `Range` and starting over when it does not; verifies the size and,
    /// for LFS files, the sha256. Calls `progress(bytes so far)` as bytes arrive.
    /// Returns the number of bytes transferred.
    pub async fn download(
        &self,
        kind: RepoKind,
        repo: &str,
        meta: &FileMeta,
        file: &str,
        incomplete: &Path,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, HubError> {
        let url = self.resolve_url(kind, repo, &meta.commit, file);
        let io = |action: &'static str| {
            move |source| HubError::Io {
                action,
                path: incomplete.display().to_string(),
                source,
            }
        };
        let mut transferred = 0u64;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let have = tokio::fs::metadata(incomplete)
                .await
                .map(|m| m.len())
                .unwrap_or(0);
            let have = if meta.size.is_some_and(|size| have > size) {
                0
            } else {
                have
            };
            let response = self
                .send(|| {
                    let request = self.authed(self.http.get(&url));
                    if have > 0 {
                        request.header(header::RANGE, format!("bytes={have}-"))
                    } else {
                        request
                    }
                })
                .await?;
            let status = response.status();
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                // What we hold is already whole (or wrong): check it below.
            } else if !status.is_success() {
                return Err(self.not_found_or_error(
                    format!("{file} in {repo}@{}", meta.commit),
                    &url,
                    status,
                    String::new(),
                ));
            }
            // 206: append to what we hold; 416: what we hold is already whole (checked
            // below); 200: the whole file again (the server ignored Range, or we asked from 0).
            let keep = (status == StatusCode::PARTIAL_CONTENT && have > 0)
                || status == StatusCode::RANGE_NOT_SATISFIABLE;
            let mut out = if keep {
                tokio::fs::OpenOptions::new()
                    .append(true)
                    .open(incomplete)
                    .await
                    .map_err(io("cannot open"))?
            } else {
                tokio::fs::File::create(incomplete)
                    .await
                    .map_err(io("cannot create"))?
            };
            let mut written = if keep { have } else { 0 };
            // Hash as the bytes arrive (what a resume keeps is hashed first): no second read.
            let mut hasher = Sha256::new();
            if keep && meta.sha256().is_some() {
                hash_prefix(incomplete, &mut hasher)
                    .await
                    .map_err(io("cannot read"))?;
            }
            progress(written);
            let mut stream = response.bytes_stream();
            let mut broken = None;
            if status != StatusCode::RANGE_NOT_SATISFIABLE {
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(bytes) => {
                            out.write_all(&bytes).await.map_err(io("cannot write"))?;
                            if meta.sha256().is_some() {
                                hasher.update(&bytes);
                            }
                            written += bytes.len() as u64;
                            transferred += bytes.len() as u64;
                            progress(written);
                        }
                        Err(e) => {
                            broken = Some(e);
                            break;
                        }
                    }
                }
            }
            out.flush().await.map_err(io("cannot write"))?;
            out.sync_all().await.map_err(io("cannot sync"))?;
            drop(out);
            let short = meta.size.is_some_and(|size| written < size);
            if broken.is_some() || short {
                if attempt < self.retries {
                    tracing::info!("{file}: transfer broke at {written} bytes; resuming");
                    tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                    continue;
                }
                return match broken {
                    Some(source) => Err(HubError::Unreachable {
                        endpoint: self.endpoint.clone(),
                        source,
                    }),
                    None => Err(HubError::Protocol {
                        url,
                        detail: format!("the transfer ended at {written} of {:?} bytes", meta.size),
                    }),
                };
            }
            if let Some(size) = meta.size
                && written != size
            {
                let _ = tokio::fs::remove_file(incomplete).await;
                return Err(HubError::Corrupt {
                    file: file.to_string(),
                    expected: format!("{size} bytes"),
                    actual: format!("{written} bytes"),
                });
            }
            if let Some(expected) = meta.sha256() {
                let actual = crate::digest::hex(&hasher.finalize());
                if actual != expected {
                    let _ = tokio::fs::remove_file(incomplete).await;
                    return Err(HubError::Corrupt {
                        file: file.to_string(),
                        expected: format!("sha256 {expected}"),
                        actual: format!("sha256 {actual}"),
                    });
                }
            }
            return Ok(transferred);
        }
    }
}

/// Feeds what a partial download already holds into `hasher`.
async fn hash_prefix(path: &Path, hasher: &mut Sha256) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::File::open(path).await?;
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buffer[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_normalised_and_lfs_ones_recognised() {
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert_eq!(normalize_etag("abc"), "abc");
        let lfs = FileMeta {
            commit: "c".into(),
            etag: "a".repeat(64),
            size: None,
        };
        assert!(lfs.sha256().is_some());
        let git = FileMeta {
            commit: "c".into(),
            etag: "a".repeat(40),
            size: None,
        };
        assert!(git.sha256().is_none());
    }
}
