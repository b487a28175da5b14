//! The engine of one host as its API shows it, read once per doctor: its versions, its
//! `/info` (data root, runtimes, memory, and its clock, timed against this machine's), and
//! the id the profile's image has there. Each request bounded in time.

use std::time::{Duration, SystemTime};

use bollard::Docker;
use bollard::models::{SystemInfo, SystemVersion};

use super::clock::Reading;
use super::{Check, Status};

/// What one engine answered (each part on its own: one that timed out is an error here,
/// the others still count).
#[derive(Debug, Clone)]
pub struct EngineFacts {
    pub version: Result<SystemVersion, String>,
    pub info: Result<SystemInfo, String>,
    /// Its clock against this machine's, when `/info` answered with a time.
    pub clock: Option<Reading>,
    /// The profile image's id on this engine (None: absent).
    pub image_id: Result<Option<String>, String>,
}

impl EngineFacts {
    pub fn info(&self) -> Option<&SystemInfo> {
        self.info.as_ref().ok()
    }
}

/// Reads one engine, every request in parallel, each within `limit`.
pub async fn read(docker: &Docker, image: &str, limit: Duration) -> EngineFacts {
    let info = async {
        let sent = SystemTime::now();
        let answer = tokio::time::timeout(limit, docker.info()).await;
        (sent, SystemTime::now(), answer)
    };
    let version = tokio::time::timeout(limit, docker.version());
    let image_id = tokio::time::timeout(limit, docker.inspect_image(image));
    let ((sent, received, info), version, image_id) = tokio::join!(info, version, image_id);
    let info = bounded("GET /info", info, limit);
    let clock = info
        .as_ref()
        .ok()
        .and_then(|i| i.system_time.as_deref())
        .and_then(|t| Reading::new(t, sent, received));
    let image_id = match image_id {
        Ok(Err(e)) if crate::cluster::docker::is_not_found(&e) => Ok(None),
        other => bounded("GET /images/{name}/json", other, limit).map(|i| i.id),
    };
    EngineFacts {
        version: bounded("GET /version", version, limit),
        info,
        clock,
        image_id,
    }
}

/// One request's answer within its bound, or what went wrong.
fn bounded<T>(
    what: &str,
    answer: Result<Result<T, bollard::errors::Error>, tokio::time::error::Elapsed>,
    limit: Duration,
) -> Result<T, String> {
    match answer {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {}", crate::exit::one_line(&e))),
        Err(_) => Err(format!("{what}: no answer within {}s", limit.as_secs())),
    }
}

/// `engine`: it answered, and which Docker and API it is.
pub fn check(facts: &EngineFacts) -> Check {
    match (&facts.version, &facts.info) {
        (Ok(v), Ok(info)) => {
            let os = info.operating_system.as_deref().unwrap_or("unknown OS");
            Check::ok(
                "engine",
                format!(
                    "Docker {} (API {}), {os}",
                    v.version.as_deref().unwrap_or("?"),
                    v.api_version.as_deref().unwrap_or("?")
                ),
            )
        }
        (Err(e), _) | (_, Err(e)) => Check {
            name: "engine",
            status: Status::Unknown,
            seen: e.clone(),
            why: "the engine answered the connection but not this request in time: what it runs cannot be checked".into(),
            fix: "is the engine overloaded or stuck? `docker info` on that host shows it".into(),
        },
    }
}

/// `engine` for a host whose engine did not answer at all.
pub fn unreachable(endpoint: &str, reason: &str) -> Check {
    Check {
        name: "engine",
        status: Status::Unknown,
        seen: format!("{endpoint}: {reason}"),
        why: "nothing on this host can be checked, and `up` changes nothing anywhere while one engine does not answer".into(),
        fix: "is dockerd running on that host, and can this machine reach it (ssh keys and known hosts, TLS certificates, firewall)?".into(),
    }
}
