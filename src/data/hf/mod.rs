//! A Hugging Face hub client over reqwest: the revision API for the file list, HEAD on
//! `resolve/` for a file's commit, etag and size, GET for its bytes.
//!
//! Every answer is parsed into checked types ([`crate::hf`]) before anything is
//! done with it. Redirects are followed by hand, so the token (`HF_TOKEN`) is sent only
//! to the configured endpoint's origin (scheme, host and port), as huggingface_hub does:
//! a redirect to a CDN or any other host gets no `Authorization` header. The token never
//! appears in errors or logs (error bodies are redacted by value).
//!
//! Mirrors differ (DESIGN.md): some ignore `Range` (then a download restarts cleanly),
//! some send no Content-Length on GET (the HEAD's size is used), some answer 401 for a
//! missing file (reported as "not found"). ETags may be quoted, weak, or not: normalised.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url, header};

use crate::hf::{
    Commit, ProtocolError, RepoId, RepoPath, Revision, RevisionInfo, parse_file_meta,
    parse_revision_info, shown,
};
pub use crate::hf::{FileMeta, RepoKind};
use crate::http::Retry;

mod transfer;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("HF_ENDPOINT {endpoint} is not usable: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
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
    #[error("refused the answer of {url}")]
    Mirror {
        url: String,
        #[source]
        source: ProtocolError,
    },
    #[error(
        "{file}: downloaded bytes do not match (expected {expected}, got {actual}); the blob was discarded"
    )]
    Corrupt {
        file: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{file}: the transfer stopped at {got} of {expected} bytes {attempts} times in a row; {what}"
    )]
    Interrupted {
        file: String,
        got: u64,
        expected: String,
        attempts: u32,
        what: String,
    },
    #[error("invalid glob {pattern}: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    /// The endpoint as configured; `Err` (reported on first use) when it is not a URL.
    base: Result<Url, String>,
    /// The endpoint for messages: no user name or password.
    shown_endpoint: String,
    token: Option<String>,
    /// Attempts per request on connection errors and 5xx; transfers that make no
    /// progress are given up after this many attempts.
    pub retries: u32,
}

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Redirects followed per request.
const MAX_REDIRECTS: usize = 10;
/// The revision API's answer is read up to this size (a model repo's file list is KBs).
const MAX_JSON: usize = 32 << 20;
/// Of an error body, this much is read and 300 characters shown.
const MAX_ERROR_BODY: usize = 64 << 10;

/// Parses and checks HF_ENDPOINT: http(s), a host, no query or fragment.
fn parse_endpoint(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim_end_matches('/')).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "scheme {:?} (expected http or https)",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a query or fragment".into());
    }
    Ok(url)
}

/// The URL without user name and password, for messages.
fn without_credentials(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.as_str().trim_end_matches('/').to_string()
}

impl HubClient {
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        // Redirects are followed by hand: the token must not follow one to another origin.
        let http = crate::http::client(
            Duration::from_secs(10),
            None,
            reqwest::redirect::Policy::none(),
        );
        let base = parse_endpoint(endpoint);
        let shown_endpoint = match &base {
            Ok(url) => without_credentials(url),
            Err(_) => shown(endpoint),
        };
        Self {
            http,
            base,
            shown_endpoint,
            token: token.filter(|t| !t.is_empty()),
            retries: 4,
        }
    }

    /// The endpoint for messages (credentials left out).
    pub fn endpoint(&self) -> &str {
        &self.shown_endpoint
    }

    /// An unusable HF_ENDPOINT as an error, before anything is sent or written.
    pub fn check_endpoint(&self) -> Result<(), HubError> {
        self.base().map(|_| ())
    }

    fn base(&self) -> Result<&Url, HubError> {
        self.base.as_ref().map_err(|reason| HubError::BadEndpoint {
            endpoint: self.shown_endpoint.clone(),
            reason: reason.clone(),
        })
    }

    /// `{endpoint}/{path}`: `path` is built from checked, encoded parts only.
    fn url(&self, path: &str) -> Result<Url, HubError> {
        let base = self.base()?;
        let joined = format!("{}/{path}", base.as_str().trim_end_matches('/'));
        Url::parse(&joined).map_err(|e| HubError::Protocol {
            url: joined.clone(),
            detail: e.to_string(),
        })
    }

    /// True when `url` is on the endpoint's origin: the only place the token goes.
    pub fn may_send_token(&self, url: &Url) -> bool {
        self.base
            .as_ref()
            .is_ok_and(|base| base.origin() == url.origin())
    }

    /// The text with the token's value blotted out (error bodies may echo headers).
    fn redact(&self, text: &str) -> String {
        match &self.token {
            Some(token) => text.replace(token.as_str(), "[HF_TOKEN]"),
            None => text.to_string(),
        }
    }

    pub fn resolve_url(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        revision: &str,
        file: &RepoPath,
    ) -> Result<Url, HubError> {
        self.url(&format!(
            "{}{}/resolve/{revision}/{}",
            kind.resolve_prefix(),
            repo.url_path(),
            file.url_path()
        ))
    }

    /// One request, with retries: connection errors and 5xx wait and try again. The
    /// token is attached only on the endpoint's origin.
    async fn send_once(
        &self,
        method: &Method,
        url: &Url,
        range_from: Option<u64>,
    ) -> Result<reqwest::Response, HubError> {
        // A 5xx answer is retried like a failed connection; the last one is returned.
        enum Sent {
            Answer(reqwest::Response),
            Failed(reqwest::Error),
        }
        let send = |_attempt: u32| {
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(token) = &self.token
                && self.may_send_token(url)
            {
                request = request.bearer_auth(token);
            }
            if let Some(from) = range_from.filter(|&f| f > 0) {
                request = request.header(header::RANGE, format!("bytes={from}-"));
            }
            async move {
                match request.send().await {
                    Ok(response) if response.status().is_server_error() => {
                        tracing::debug!("{url} answered {}", response.status());
                        Err(Sent::Answer(response))
                    }
                    Ok(response) => Ok(response),
                    Err(e) => {
                        tracing::debug!("request failed ({e})");
                        Err(Sent::Failed(e))
                    }
                }
            }
        };
        let retryable = |sent: &Sent| match sent {
            Sent::Answer(_) => true,
            Sent::Failed(e) => e.is_connect() || e.is_timeout() || e.is_request(),
        };
        match Retry::new(self.retries, Duration::from_millis(500))
            .run(send, retryable)
            .await
        {
            Ok(response) | Err(Sent::Answer(response)) => Ok(response),
            Err(Sent::Failed(source)) => Err(HubError::Unreachable {
                endpoint: self.shown_endpoint.clone(),
                source: source.without_url(),
            }),
        }
    }

    /// Where a redirect points, resolved against the URL that answered; http(s) only.
    fn redirect_target(
        &self,
        from: &Url,
        response: &reqwest::Response,
    ) -> Result<Option<Url>, HubError> {
        if !response.status().is_redirection() {
            return Ok(None);
        }
        let Some(location) = response.headers().get(header::LOCATION) else {
            return Ok(None);
        };
        let location = location.to_str().map_err(|_| HubError::Protocol {
            url: without_credentials(from),
            detail: "a redirect whose Location is not text".into(),
        })?;
        let next = from.join(location).map_err(|e| HubError::Protocol {
            url: without_credentials(from),
            detail: format!("a redirect to {}: {e}", shown(location)),
        })?;
        if !matches!(next.scheme(), "http" | "https") {
            return Err(HubError::Protocol {
                url: without_credentials(from),
                detail: format!("a redirect to a non-HTTP URL {}", shown(location)),
            });
        }
        Ok(Some(next))
    }

    /// GET, following redirects (the token stays on the endpoint's origin). Returns the
    /// final URL (for messages) and its response.
    async fn get(
        &self,
        url: Url,
        range_from: Option<u64>,
    ) -> Result<(Url, reqwest::Response), HubError> {
        let mut url = url;
        for _ in 0..=MAX_REDIRECTS {
            let response = self.send_once(&Method::GET, &url, range_from).await?;
            match self.redirect_target(&url, &response)? {
                Some(next) => {
                    tracing::debug!("{url} redirects to {next}");
                    url = next;
                }
                None => return Ok((url, response)),
            }
        }
        Err(HubError::Protocol {
            url: without_credentials(&url),
            detail: "too many redirects".into(),
        })
    }

    /// Reads a body up to `cap` bytes; `None` when it is longer.
    async fn body_capped(
        &self,
        mut response: reqwest::Response,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, HubError> {
        let mut body = Vec::new();
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|source| HubError::Unreachable {
                    endpoint: self.shown_endpoint.clone(),
                    source: source.without_url(),
                })?;
            let Some(chunk) = chunk else {
                return Ok(Some(body));
            };
            if body.len() + chunk.len() > cap {
                return Ok(None);
            }
            body.extend_from_slice(&chunk);
        }
    }

    /// An error body for a message: capped, redacted, without control characters.
    async fn error_body(&self, response: reqwest::Response) -> String {
        let body = match self.body_capped(response, MAX_ERROR_BODY).await {
            Ok(Some(body)) => body,
            _ => return String::from("(body unreadable or too long)"),
        };
        let text = self.redact(&String::from_utf8_lossy(&body));
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(300)
            .collect::<String>()
            .trim()
            .to_string()
    }

    async fn not_found_or_error(
        &self,
        what: String,
        url: &Url,
        response: reqwest::Response,
    ) -> HubError {
        let status = response.status();
        match status {
            // Mirrors (olah) answer 401 for a missing repo or file; the hub answers 401
            // for gated repos without a token, 404 otherwise.
            StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                HubError::NotFound {
                    what,
                    endpoint: self.shown_endpoint.clone(),
                    status: status.as_u16(),
                }
            }
            _ => HubError::Http {
                url: without_credentials(url),
                status: status.as_u16(),
                body: self.error_body(response).await,
            },
        }
    }

    /// `GET /api/{models|datasets}/{repo}/revision/{rev}`: the commit and its files,
    /// every name checked.
    pub async fn revision(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        revision: &Revision,
    ) -> Result<RevisionInfo, HubError> {
        let url = self.url(&format!(
            "api/{}/{}/revision/{}",
            kind.plural(),
            repo.url_path(),
            revision.url_segment()
        ))?;
        let (url, response) = self.get(url, None).await?;
        if !response.status().is_success() {
            let what = format!("{} {repo}@{revision}", kind.singular());
            return Err(self.not_found_or_error(what, &url, response).await);
        }
        let body =
            self.body_capped(response, MAX_JSON)
                .await?
                .ok_or_else(|| HubError::Protocol {
                    url: without_credentials(&url),
                    detail: format!("the revision answer is larger than {} MiB", MAX_JSON >> 20),
                })?;
        let info = parse_revision_info(&body).map_err(|source| HubError::Mirror {
            url: without_credentials(&url),
            source,
        })?;
        if let Some(asked) = revision.as_commit()
            && asked != info.commit
        {
            return Err(HubError::Mirror {
                url: without_credentials(&url),
                source: ProtocolError::OtherCommit {
                    asked,
                    answered: info.commit,
                },
            });
        }
        Ok(info)
    }

    /// `HEAD .../resolve/{commit}/{file}`: etag and size, from the first answer that has
    /// them (a redirect to a CDN carries them as X-Linked-*). The answer must be for
    /// `commit`.
    pub async fn head(
        &self,
        kind: RepoKind,
        repo: &RepoId,
        commit: &Commit,
        file: &RepoPath,
    ) -> Result<FileMeta, HubError> {
        let mut url = self.resolve_url(kind, repo, commit.as_str(), file)?;
        for _ in 0..=MAX_REDIRECTS {
            let response = self.send_once(&Method::HEAD, &url, None).await?;
            let headers = response.headers();
            let meta = parse_file_meta(|name| headers.get(name).map(|v| v.as_bytes())).map_err(
                |source| HubError::Mirror {
                    url: without_credentials(&url),
                    source,
                },
            )?;
            let status = response.status();
            if status.is_redirection()
                && let Some(meta) = &meta
            {
                return self.same_commit(&url, commit, meta.clone());
            }
            if let Some(next) = self.redirect_target(&url, &response)? {
                url = next;
                continue;
            }
            if !status.is_success() {
                let what = format!("{file} in {repo}@{commit}");
                return Err(self.not_found_or_error(what, &url, response).await);
            }
            return match meta {
                Some(meta) => self.same_commit(&url, commit, meta),
                None => Err(HubError::Mirror {
                    url: without_credentials(&url),
                    source: ProtocolError::MissingHeaders,
                }),
            };
        }
        Err(HubError::Protocol {
            url: without_credentials(&url),
            detail: "too many redirects".into(),
        })
    }

    fn same_commit(&self, url: &Url, asked: &Commit, meta: FileMeta) -> Result<FileMeta, HubError> {
        if &meta.commit != asked {
            return Err(HubError::Mirror {
                url: without_credentials(url),
                source: ProtocolError::OtherCommit {
                    asked: asked.clone(),
                    answered: meta.commit,
                },
            });
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }

    #[test]
    fn the_token_goes_only_to_the_endpoints_origin() {
        tls();
        let client = HubClient::new("https://hf-mirror.example/sub/", Some("hf_x".into()));
        let yes = [
            "https://hf-mirror.example/x",
            "https://hf-mirror.example:443/y",
        ];
        let no = [
            "http://hf-mirror.example/x",
            "https://hf-mirror.example:8443/x",
            "https://cdn.hf-mirror.example/x",
            "https://hf-mirror.example.evil/x",
            "https://evil@hf-mirror.example.evil/x",
        ];
        for url in yes {
            assert!(client.may_send_token(&Url::parse(url).unwrap()), "{url}");
        }
        for url in no {
            assert!(!client.may_send_token(&Url::parse(url).unwrap()), "{url}");
        }
        assert_eq!(
            client.redact("echo: Bearer hf_x"),
            "echo: Bearer [HF_TOKEN]"
        );
    }

    #[test]
    fn bad_endpoints_are_reported_without_credentials() {
        tls();
        for bad in ["hf-mirror", "ftp://x", "http://", "https://x/?q=1"] {
            assert!(HubClient::new(bad, None).check_endpoint().is_err(), "{bad}");
        }
        let client = HubClient::new("https://user:secret@mirror.example", None);
        assert!(client.check_endpoint().is_ok());
        assert!(!client.endpoint().contains("secret"));
    }
}
