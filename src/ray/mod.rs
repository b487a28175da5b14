//! A small client for the Ray dashboard's REST API (readiness and node listing here; the
//! Jobs API builds on the same requests).
//!
//! Every request sends `User-Agent: argus/<version>` (Ray 2.51 answers 500 without one)
//! and, with token auth, `Authorization: Bearer <token>`.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::exit::{Classify, Exit};

pub use crate::http::USER_AGENT;

pub mod jobs;

#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error("cannot reach the Ray dashboard at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "Ray refused the request to {path} ({status}): token auth is on and the token is missing or wrong"
    )]
    Unauthorized { path: String, status: u16 },
    #[error("Ray answered {status} to {path}: {body}")]
    Http {
        path: String,
        status: u16,
        body: String,
    },
    #[error("unexpected answer from Ray to {path}: {detail}")]
    Decode { path: String, detail: String },
}

impl Classify for RayError {
    fn exit(&self) -> Exit {
        match self {
            RayError::Unreachable { .. } | RayError::Unauthorized { .. } => Exit::Unreachable,
            RayError::Http { .. } | RayError::Decode { .. } => Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RayError::Unreachable { .. } => Some(
                "is the cluster up? `argus status` shows its containers; `argus up` starts it"
                    .into(),
            ),
            RayError::Unauthorized { .. } => Some(
                "argus sends the token from the variable the profile's ray.token_env names, else from the cluster's token file that `argus up` made on its machine (~/.config/argus/tokens/<cluster>.token): use the one the cluster was started with"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// One node as `/api/v0/nodes` reports it (keys as Ray sends them, not camel-cased).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RayNode {
    pub node_id: String,
    #[serde(default)]
    pub node_ip: String,
    #[serde(default)]
    pub node_name: String,
    pub state: String,
    #[serde(default)]
    pub is_head_node: bool,
    #[serde(default)]
    pub resources_total: BTreeMap<String, f64>,
    /// When the node's raylet started, in ms since the epoch (the host's clock).
    #[serde(default)]
    pub start_time_ms: Option<u64>,
}

impl RayNode {
    pub fn alive(&self) -> bool {
        self.state == "ALIVE"
    }
    pub fn gpus(&self) -> f64 {
        self.resources_total.get("GPU").copied().unwrap_or(0.0)
    }
}

/// One placement group as `/api/v0/placement_groups?detail=true` reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlacementGroup {
    pub placement_group_id: String,
    /// The Jobs API's `job_id` (hex) of the job that made it.
    #[serde(default)]
    pub creator_job_id: String,
    /// PENDING, CREATED, REMOVED, RESCHEDULING.
    pub state: String,
    #[serde(default)]
    pub stats: Option<PlacementGroupStats>,
    #[serde(default)]
    pub bundles: Vec<PlacementBundle>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlacementGroupStats {
    /// INFEASIBLE when no node of the cluster could ever give a bundle what it asks.
    #[serde(default)]
    pub scheduling_state: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlacementBundle {
    #[serde(default)]
    pub unit_resources: BTreeMap<String, f64>,
}

impl PlacementGroup {
    /// Pending and, as Ray's scheduler judged it, never to be placed on this cluster.
    pub fn infeasible(&self) -> bool {
        self.state == "PENDING"
            && self
                .stats
                .as_ref()
                .is_some_and(|s| s.scheduling_state == "INFEASIBLE")
    }
}

#[derive(Debug, Clone)]
pub struct RayClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    connect_retries: u32,
    /// Whatever must live as long as the client: the tunnel its base URL points through.
    /// Opaque, so this module knows nothing of how the dashboard is reached.
    keepalive: Option<Arc<dyn Any + Send + Sync>>,
    /// How to name the dashboard to people and records when `base` is only a local
    /// forward (a tunnel's ephemeral port means nothing later).
    via: Option<String>,
    /// The Unix socket every connection goes through (a private local forward), if any.
    socket: Option<std::path::PathBuf>,
}

impl RayClient {
    pub fn new(base_url: &str, token: Option<String>) -> Self {
        Self::build(base_url.trim_end_matches('/').to_string(), token, None)
    }

    /// A client whose every connection, HTTP or websocket, goes through the Unix socket
    /// `socket` (a local forward only its owner can open); `base` is then only a name.
    pub fn over_socket(socket: &std::path::Path, token: Option<String>) -> Self {
        Self::build(
            "http://localhost".to_string(),
            token,
            Some(socket.to_path_buf()),
        )
    }

    fn build(base: String, token: Option<String>, socket: Option<std::path::PathBuf>) -> Self {
        let mut builder =
            crate::http::builder(Duration::from_secs(3), Some(Duration::from_secs(30)));
        if let Some(socket) = &socket {
            builder = builder.unix_socket(socket.as_path());
        }
        if base.starts_with("http://") {
            // Plain HTTP (Ray's dashboard without TLS, a tunnel, a socket): no TLS roots
            // to load, which reading the system's certificate store would cost every
            // command that talks to Ray (some 10-20 ms).
            builder = builder.tls_certs_only([]);
        }
        let http = crate::http::build(builder);
        Self {
            http,
            base,
            token,
            connect_retries: 0,
            keepalive: None,
            via: None,
            socket,
        }
    }

    /// The Unix socket connections go through, for a client made by `over_socket`.
    pub fn socket(&self) -> Option<&std::path::Path> {
        self.socket.as_deref()
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// GET `path` and return the body of a 2xx answer.
    pub async fn get_text(&self, path: &str) -> Result<String, RayError> {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// Sends a request and returns the body of a 2xx answer. A request that could not be
    /// sent at all (connection refused) is retried twice with backoff: nothing reached Ray.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<String, RayError> {
        // Only a request that could not be sent at all is retried: nothing reached Ray.
        let retry = crate::http::Retry::new(self.connect_retries + 1, Duration::from_millis(300));
        let send = |attempt: u32| {
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.base));
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            if attempt > 1 {
                tracing::debug!("Ray at {} not reachable; retry {}", self.base, attempt - 1);
            }
            request.send()
        };
        let response = retry
            .run(send, reqwest::Error::is_connect)
            .await
            .map_err(|source| RayError::Unreachable {
                url: self.endpoint().to_string(),
                source,
            })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|source| RayError::Unreachable {
                url: self.endpoint().to_string(),
                source,
            })?;
        match status {
            s if s.is_success() => Ok(text),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(RayError::Unauthorized {
                path: path.to_string(),
                status: status.as_u16(),
            }),
            _ => Err(RayError::Http {
                path: path.to_string(),
                status: status.as_u16(),
                body: summarize_body(&text),
            }),
        }
    }

    /// Retries of unsent requests (0 for readiness polling, which has its own loop).
    pub fn with_connect_retries(mut self, retries: u32) -> Self {
        self.connect_retries = retries;
        self
    }

    /// Keeps `value` alive as long as this client or any clone of it (a tunnel that
    /// `base_url` points through).
    pub fn with_keepalive(mut self, value: Arc<dyn Any + Send + Sync>) -> Self {
        self.keepalive = Some(value);
        self
    }

    /// Names the dashboard this client reaches through its (local) base URL.
    pub fn with_via(mut self, via: String) -> Self {
        self.via = Some(via);
        self
    }

    /// The dashboard as people and records should know it: the URL, or what a local
    /// forward leads to.
    pub fn endpoint(&self) -> &str {
        self.via.as_deref().unwrap_or(&self.base)
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// `GET /api/gcs_healthz`: true once the GCS answers.
    pub async fn gcs_healthy(&self) -> Result<bool, RayError> {
        match self.get_text("/api/gcs_healthz").await {
            Ok(_) => Ok(true),
            Err(RayError::Http { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /api/v0/nodes`: every node the GCS knows, alive or dead.
    pub async fn nodes(&self) -> Result<Vec<RayNode>, RayError> {
        self.state_list("/api/v0/nodes?limit=10000&detail=true")
            .await
    }

    /// A list of Ray's state API: `data.result.result[]` (keys as Ray sends them).
    async fn state_list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Vec<T>, RayError> {
        let body = self.get_text(path).await?;
        #[derive(Deserialize)]
        struct Envelope<T> {
            data: Data<T>,
        }
        #[derive(Deserialize)]
        struct Data<T> {
            result: Inner<T>,
        }
        #[derive(Deserialize)]
        struct Inner<T> {
            result: Vec<T>,
        }
        let envelope: Envelope<T> = serde_json::from_str(&body).map_err(|e| RayError::Decode {
            path: path.to_string(),
            detail: e.to_string(),
        })?;
        Ok(envelope.data.result.result)
    }

    /// `GET /api/v0/placement_groups`: the placement groups the GCS knows (detail: their
    /// scheduling state and bundles).
    pub async fn placement_groups(&self) -> Result<Vec<PlacementGroup>, RayError> {
        self.state_list("/api/v0/placement_groups?limit=10000&detail=true")
            .await
    }

    /// `GET /api/version`: the Ray version the cluster runs.
    pub async fn ray_version(&self) -> Result<String, RayError> {
        let body = self.get_text("/api/version").await?;
        let value: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| RayError::Decode {
                path: "/api/version".into(),
                detail: e.to_string(),
            })?;
        Ok(value["ray_version"]
            .as_str()
            .unwrap_or("unknown")
            .to_string())
    }
}

/// Ray's error bodies are often whole Python tracebacks: keep the last meaningful line.
pub fn summarize_body(body: &str) -> String {
    let trimmed = body.trim();
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed)
        && let Some(msg) = value
            .get("msg")
            .or_else(|| value.get("message"))
            .and_then(|m| m.as_str())
    {
        return msg.to_string();
    }
    let line = trimmed
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(empty body)")
        .trim();
    line.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn traceback_bodies_are_cut_to_their_last_line() {
        let body = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: Job with submission_id x already exists.\n";
        assert_eq!(
            super::summarize_body(body),
            "ValueError: Job with submission_id x already exists."
        );
        assert_eq!(super::summarize_body(r#"{"msg": "nope"}"#), "nope");
    }
}
