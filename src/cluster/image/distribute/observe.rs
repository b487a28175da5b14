//! Observing: what the image reference names on every engine, all of them at once.

use bollard::Docker;
use futures_util::future::join_all;

use super::super::super::docker::is_not_found;
use super::super::short_id;
use super::{DistributeError, Engine, HostFailure};
use crate::exit::one_line;

#[derive(Debug, Clone)]
pub(super) struct Found {
    pub(super) id: String,
    pub(super) size: Option<u64>,
    /// Its layers' diff ids, bottom first.
    pub(super) layers: Vec<String>,
}

pub(super) struct Source<'a> {
    pub(super) engine: Engine<'a>,
    pub(super) found: Found,
}

/// What the reference names on argus's own engine and on each host.
pub(super) struct Observed {
    pub(super) local: Option<Found>,
    pub(super) hosts: Vec<Option<Found>>,
}

impl Observed {
    /// argus's own engine when it has the image, else the first host that does.
    pub(super) fn source<'a>(
        &self,
        local: Option<Engine<'a>>,
        hosts: &[Engine<'a>],
    ) -> Option<Source<'a>> {
        match (local, &self.local) {
            (Some(engine), Some(found)) => Some(Source {
                engine,
                found: found.clone(),
            }),
            _ => hosts
                .iter()
                .zip(&self.hosts)
                .find_map(|(h, f)| f.clone().map(|found| Source { engine: *h, found })),
        }
    }
}

/// Looks at every engine in parallel. argus's own engine failing to answer only costs it
/// its role as a source; a host failing to answer fails the distribution.
pub(super) async fn observe(
    image: &str,
    local: Option<Engine<'_>>,
    hosts: &[Engine<'_>],
) -> Result<Observed, DistributeError> {
    let local_seen = async {
        match local {
            Some(engine) => match look(engine.docker, image).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(
                        host = engine.host,
                        "cannot inspect {image}: {}",
                        one_line(&e)
                    );
                    None
                }
            },
            None => None,
        }
    };
    let (local_seen, seen) = futures_util::join!(
        local_seen,
        join_all(hosts.iter().map(|h| look(h.docker, image)))
    );
    let mut unreachable = Vec::new();
    let mut before = Vec::with_capacity(hosts.len());
    for (host, seen) in hosts.iter().zip(seen) {
        match seen {
            Ok(found) => before.push(found),
            Err(e) => unreachable.push(HostFailure {
                host: host.host.to_string(),
                reason: one_line(&e),
            }),
        }
    }
    if !unreachable.is_empty() {
        return Err(DistributeError::Unreachable {
            image: image.to_string(),
            hosts: unreachable,
        });
    }
    tracing::debug!(
        image,
        local = ?local_seen.as_ref().map(|f| short_id(&f.id)),
        hosts = ?hosts.iter().zip(&before).map(|(h, f)| (h.host, f.as_ref().map(|f| short_id(&f.id)))).collect::<Vec<_>>(),
        "observed"
    );
    Ok(Observed {
        local: local_seen,
        hosts: before,
    })
}

/// The image `reference` names on one engine; None when it has none.
pub(super) async fn look(
    docker: &Docker,
    reference: &str,
) -> Result<Option<Found>, bollard::errors::Error> {
    match docker.inspect_image(reference).await {
        Ok(info) => Ok(info.id.map(|id| Found {
            id,
            size: info.size.and_then(|s| u64::try_from(s).ok()),
            layers: info.root_fs.and_then(|r| r.layers).unwrap_or_default(),
        })),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// True when the engine has the image `id` (under any name or none).
pub(super) async fn has_id(docker: &Docker, id: &str) -> bool {
    matches!(docker.inspect_image(id).await, Ok(info) if info.id.as_deref() == Some(id))
}
