//! The Ray Jobs REST API (DESIGN.md): submit, get, list, logs, stop, and the websocket
//! log tail, on top of the dashboard client (User-Agent and token handled there).

use std::collections::BTreeMap;

use futures_util::StreamExt;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{RayClient, RayError, USER_AGENT};
use crate::exit::Exit;

/// A job's status. Ray's five, and anything else a newer Ray may send, in one type with
/// one rule for "finished" and one for the exit code; every command uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum JobStatus {
    #[default]
    Pending,
    Running,
    Stopped,
    Succeeded,
    Failed,
    /// A status this argus does not know: never taken for finished.
    Unknown(String),
}

impl JobStatus {
    pub fn parse(text: &str) -> JobStatus {
        match text {
            "PENDING" => JobStatus::Pending,
            "RUNNING" => JobStatus::Running,
            "STOPPED" => JobStatus::Stopped,
            "SUCCEEDED" => JobStatus::Succeeded,
            "FAILED" => JobStatus::Failed,
            other => JobStatus::Unknown(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Stopped => "STOPPED",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
            JobStatus::Unknown(other) => other,
        }
    }

    /// The job has ended and will not change again.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            JobStatus::Stopped | JobStatus::Succeeded | JobStatus::Failed
        )
    }

    /// The exit code of a command that waited for this status: 0 SUCCEEDED, 1 FAILED,
    /// 3 STOPPED; a job not ended yet is 0 (nothing failed); an unknown status is 1.
    pub fn exit(&self) -> Exit {
        match self {
            JobStatus::Succeeded | JobStatus::Pending | JobStatus::Running => Exit::Success,
            JobStatus::Stopped => Exit::Stopped,
            JobStatus::Failed | JobStatus::Unknown(_) => Exit::Failed,
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JobStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for JobStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(JobStatus::parse(&String::deserialize(d)?))
    }
}

/// A job as `GET /api/jobs/{id}` describes it (fields argus uses; others ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobInfo {
    #[serde(default)]
    pub submission_id: Option<String>,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub status: JobStatus,
    #[serde(default)]
    pub entrypoint: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub start_time: Option<u64>,
    #[serde(default)]
    pub end_time: Option<u64>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub driver_node_id: Option<String>,
    #[serde(default)]
    pub driver_exit_code: Option<i64>,
    /// The job's runtime env as Ray echoes it (its env vars, secrets included): read to
    /// know which values to redact, never written or printed.
    #[serde(default, skip_serializing)]
    pub runtime_env: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error(transparent)]
    Ray(#[from] RayError),
    #[error("a job with submission id {0} already exists on the cluster")]
    Duplicate(String),
    #[error("the cluster has no job {0}")]
    NotFound(String),
}

pub struct JobsApi<'a> {
    pub ray: &'a RayClient,
}

fn decode<T: serde::de::DeserializeOwned>(path: &str, body: &str) -> Result<T, RayError> {
    serde_json::from_str(body).map_err(|e| RayError::Decode {
        path: path.to_string(),
        detail: format!("{e}: {}", crate::ray::summarize_body(body)),
    })
}

impl JobsApi<'_> {
    /// `POST /api/jobs/` (the trailing slash matters).
    pub async fn submit(&self, payload: &serde_json::Value) -> Result<String, JobsError> {
        let id = payload["submission_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match self
            .ray
            .send(Method::POST, "/api/jobs/", Some(payload))
            .await
        {
            Ok(body) => {
                let value: serde_json::Value = decode("/api/jobs/", &body)?;
                Ok(value["submission_id"].as_str().unwrap_or(&id).to_string())
            }
            Err(RayError::Http { body, .. }) if body.contains("already exists") => {
                Err(JobsError::Duplicate(id))
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn get(&self, id: &str) -> Result<JobInfo, JobsError> {
        let path = format!("/api/jobs/{id}");
        match self.ray.get_text(&path).await {
            Ok(body) => Ok(decode(&path, &body)?),
            Err(RayError::Http { status: 404, .. }) => Err(JobsError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// True when the cluster knows a job with this submission id.
    pub async fn exists(&self, id: &str) -> Result<bool, JobsError> {
        match self.get(id).await {
            Ok(_) => Ok(true),
            Err(JobsError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn list(&self) -> Result<Vec<JobInfo>, JobsError> {
        let body = self.ray.get_text("/api/jobs/").await?;
        Ok(decode("/api/jobs/", &body)?)
    }

    /// The raw list, for the debug record.
    pub async fn list_raw(&self) -> Result<serde_json::Value, JobsError> {
        let body = self.ray.get_text("/api/jobs/").await?;
        Ok(decode("/api/jobs/", &body)?)
    }

    pub async fn logs(&self, id: &str) -> Result<String, JobsError> {
        let path = format!("/api/jobs/{id}/logs");
        match self.ray.get_text(&path).await {
            Ok(body) => {
                let value: serde_json::Value = decode(&path, &body)?;
                Ok(value["logs"].as_str().unwrap_or_default().to_string())
            }
            Err(RayError::Http { status: 404, .. }) => Err(JobsError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// `POST /api/jobs/{id}/stop`: whether a stop was sent.
    pub async fn stop(&self, id: &str) -> Result<bool, JobsError> {
        let path = format!("/api/jobs/{id}/stop");
        match self.ray.send(Method::POST, &path, None).await {
            Ok(body) => {
                let value: serde_json::Value = decode(&path, &body)?;
                Ok(value["stopped"].as_bool().unwrap_or(false))
            }
            Err(RayError::Http { status: 404, .. }) => Err(JobsError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// Streams the job's log through the websocket tail; `on_text` sees each frame.
    /// Returns when the server closes the stream (the job ended).
    pub async fn tail(&self, id: &str, mut on_text: impl FnMut(&str)) -> Result<(), String> {
        let base = self.ray.base_url();
        let url = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else {
            format!("ws://{}", base.trim_start_matches("http://"))
        };
        let mut request = format!("{url}/api/jobs/{id}/logs/tail")
            .into_client_request()
            .map_err(|e| e.to_string())?;
        let headers = request.headers_mut();
        headers.insert(
            "User-Agent",
            USER_AGENT.parse().map_err(|_| "user agent".to_string())?,
        );
        if let Some(token) = self.ray.token() {
            headers.insert(
                "Authorization",
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| "token is not a valid header".to_string())?,
            );
        }
        let mut stream = match self.ray.socket() {
            Some(socket) => {
                let unix = tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(|e| format!("{}: {e}", self.ray.endpoint()))?;
                let stream = tokio_tungstenite::client_async(request, unix)
                    .await
                    .map_err(|e| e.to_string())?
                    .0;
                futures_util::future::Either::Left(stream)
            }
            None => futures_util::future::Either::Right(
                tokio_tungstenite::connect_async(request)
                    .await
                    .map_err(|e| e.to_string())?
                    .0,
            ),
        };
        while let Some(message) = stream.next().await {
            match message.map_err(|e| e.to_string())? {
                Message::Text(text) => on_text(text.as_str()),
                Message::Binary(bytes) => on_text(&String::from_utf8_lossy(&bytes)),
                Message::Close(_) => break,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::JobStatus;
    use crate::exit::Exit;

    #[test]
    fn one_rule_for_finished_and_exit_codes_including_unknown_statuses() {
        let table = [
            ("PENDING", false, Exit::Success),
            ("RUNNING", false, Exit::Success),
            ("SUCCEEDED", true, Exit::Success),
            ("FAILED", true, Exit::Failed),
            ("STOPPED", true, Exit::Stopped),
            ("STOPPING", false, Exit::Failed),
            ("", false, Exit::Failed),
        ];
        for (text, finished, exit) in table {
            let status = JobStatus::parse(text);
            assert_eq!(status.is_finished(), finished, "{text}");
            assert_eq!(status.exit(), exit, "{text}");
            assert_eq!(status.as_str(), text);
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(serde_json::from_str::<JobStatus>(&json).unwrap(), status);
        }
    }
}
