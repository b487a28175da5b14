//! The cluster's hosts: one Docker Engine each, all dialled at once, each under its own
//! deadline, so one dead host costs one timeout, not one per host, and is named.

use std::time::Duration;

use bollard::Docker;
use futures_util::future::join_all;
use serde::Serialize;

use super::Error;
use super::docker;
use crate::config::LoadedProfile;
use crate::config::profile::ClusterHost;

/// How long one engine may take to answer `GET /version` before its host counts as
/// unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A host whose engine answered.
#[derive(Clone)]
pub struct Engine {
    pub name: String,
    pub endpoint: String,
    pub docker: Docker,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// A host whose engine did not answer, and why.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Unreachable {
    pub host: String,
    pub endpoint: String,
    pub reason: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host {} ({}): {}", self.host, self.endpoint, self.reason)
    }
}

/// Every engine of the cluster, dialled in parallel: those that answered (in the hosts'
/// order, the head's first) and those that did not.
pub async fn connect_all(
    hosts: &[ClusterHost],
    timeout: Duration,
) -> (Vec<Engine>, Vec<Unreachable>) {
    let attempts = join_all(hosts.iter().map(|host| async move {
        let outcome = tokio::time::timeout(timeout, docker::connect_host(host)).await;
        let unreachable = |reason: String| Unreachable {
            host: host.name.clone(),
            endpoint: host.endpoint.to_string(),
            reason,
        };
        match outcome {
            Ok(Ok(docker)) => Ok(Engine {
                name: host.name.clone(),
                endpoint: host.endpoint.to_string(),
                docker,
            }),
            Ok(Err(e)) => Err(unreachable(crate::exit::one_line(&e))),
            Err(_) => Err(unreachable(format!(
                "no answer within {}s",
                timeout.as_secs()
            ))),
        }
    }))
    .await;
    let mut engines = Vec::new();
    let mut unreachable = Vec::new();
    for attempt in attempts {
        match attempt {
            Ok(engine) => engines.push(engine),
            Err(u) => unreachable.push(u),
        }
    }
    (engines, unreachable)
}

/// Every engine, or an error naming each host that did not answer (exit 4).
pub async fn connect_every(loaded: &LoadedProfile) -> Result<Vec<Engine>, Error> {
    let hosts = cluster_hosts(loaded)?;
    if !loaded.has_hosts()
        && let [only] = hosts.as_slice()
    {
        // One engine, no `hosts:`: its own error and hint, as on a single host.
        let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker::connect_host(only))
            .await
            .map_err(|_| {
                Error::HostsUnreachable(vec![Unreachable {
                    host: only.name.clone(),
                    endpoint: only.endpoint.to_string(),
                    reason: format!("no answer within {}s", CONNECT_TIMEOUT.as_secs()),
                }])
            })??;
        return Ok(vec![Engine {
            name: only.name.clone(),
            endpoint: only.endpoint.to_string(),
            docker,
        }]);
    }
    let (engines, unreachable) = connect_all(&hosts, CONNECT_TIMEOUT).await;
    if !unreachable.is_empty() {
        return Err(Error::HostsUnreachable(unreachable));
    }
    Ok(engines)
}

/// The profile's hosts with their endpoints resolved (a malformed `DOCKER_HOST` was
/// refused when the profile loaded; this repeats the check for library callers).
pub fn cluster_hosts(loaded: &LoadedProfile) -> Result<Vec<ClusterHost>, Error> {
    loaded
        .cluster_hosts()
        .map_err(|e| Error::BadEndpoint(e.message))
}

/// The engine of `host` among `engines`.
pub fn engine<'a>(engines: &'a [Engine], host: &str) -> Option<&'a Engine> {
    engines.iter().find(|e| e.name == host)
}

/// Refuses two hosts that are one engine under two spellings of its endpoint
/// (`tcp://h:2375` and `http://h:2375`, a socket and its TCP port): their containers
/// would land on one machine while Ray is told they are on two. Compares the engines' IDs.
pub async fn check_distinct(engines: &[Engine]) -> Result<(), Error> {
    if engines.len() < 2 {
        return Ok(());
    }
    let ids = join_all(engines.iter().map(|e| e.docker.info())).await;
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (engine, info) in engines.iter().zip(ids) {
        let Some(id) = info.ok().and_then(|i| i.id).filter(|id| !id.is_empty()) else {
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(seen_id, _)| *seen_id == id) {
            return Err(Error::BadEndpoint(format!(
                "hosts {first} and {} are one Docker Engine (ID {id}) under two endpoints: one engine is one host",
                engine.name
            )));
        }
        seen.push((id, &engine.name));
    }
    Ok(())
}
