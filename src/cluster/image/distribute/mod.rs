//! The runtime image on every host of a cluster, with or without a registry.
//!
//! Observe first, every engine in parallel: the wanted image id is the one the reference
//! has on argus's own engine, else on the first host that has it. A host whose reference
//! already resolves to that id is left alone; one that holds the id under another name
//! only gets the tag. A host that lacks it pulls when the reference names a registry;
//! otherwise (or when the pull fails or brings another id) argus streams the image from an
//! engine that has it: one `GET /images/{name}/get`, teed into every lacking host's
//! `POST /images/load` through bounded channels, so the slowest host paces the export and
//! memory stays bounded, and a host whose load fails is dropped without stopping the
//! others. The id is verified on every host afterwards.
//!
//! `docker load` unpacks the whole archive before it registers the image and sets the tag,
//! so a transfer cut short leaves no tag behind; whatever a failed attempt did tag (a pull
//! that brought another id) is untagged, and the next run simply tries again.

mod observe;
mod transfer;

use std::fmt;
use std::time::Instant;

use bollard::Docker;
use futures_util::future::join_all;
use serde::Serialize;

use super::short_id;
use crate::exit::{Classify, Exit};
use crate::ui::Reporter;
use observe::{Found, Source};
pub use transfer::pull_on;

/// One Docker Engine and the name argus knows it by.
#[derive(Clone, Copy)]
pub struct Engine<'a> {
    pub host: &'a str,
    pub docker: &'a Docker,
}

impl<'a> Engine<'a> {
    pub fn new(host: &'a str, docker: &'a Docker) -> Self {
        Self { host, docker }
    }
}

/// What happened (or, in a dry run, would happen) on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Outcome {
    /// The reference already named the wanted image.
    Present,
    /// The image was there under another name: only tagged.
    Tagged,
    /// Pulled from the registry the reference names.
    Pulled,
    /// Streamed from another engine (`from`), `bytes` sent (estimated in a dry run); the
    /// layers the host had already were left out: `skipped` bytes of them.
    Streamed {
        from: String,
        bytes: u64,
        #[serde(skip_serializing_if = "is_zero")]
        skipped: u64,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize)]
pub struct HostImage {
    pub host: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub image_id: String,
    /// The id the reference named on this host before, when it was another image (the old
    /// image stays on the host, untagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Distribution {
    pub image: String,
    /// The id every host now has; empty in a dry run where only a pull would tell.
    pub image_id: String,
    pub dry_run: bool,
    pub hosts: Vec<HostImage>,
}

/// One host and what went wrong there.
#[derive(Debug, Clone, Serialize)]
pub struct HostFailure {
    pub host: String,
    pub reason: String,
}

impl fmt::Display for HostFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.host, self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DistributeError {
    #[error("cannot look for image {image} on {}", list(hosts))]
    Unreachable {
        image: String,
        hosts: Vec<HostFailure>,
    },
    #[error("image {image} is on no engine (looked on {}){}", tried.join(", "), pulls_text(pulls))]
    ImageUnavailable {
        image: String,
        tried: Vec<String>,
        /// The hosts that tried to pull it, and why each failed.
        pulls: Vec<HostFailure>,
    },
    #[error("image {image} did not reach {}", list(failures))]
    Transfer {
        image: String,
        failures: Vec<HostFailure>,
        /// The hosts that do have it now.
        done: Vec<HostImage>,
    },
}

fn list(failures: &[HostFailure]) -> String {
    failures
        .iter()
        .map(|f| format!("host {f}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn pulls_text(pulls: &[HostFailure]) -> String {
    if pulls.is_empty() {
        String::new()
    } else {
        format!(" and could not be pulled: {}", list(pulls))
    }
}

impl Classify for DistributeError {
    fn exit(&self) -> Exit {
        match self {
            DistributeError::Unreachable { .. } | DistributeError::ImageUnavailable { .. } => {
                Exit::Unreachable
            }
            DistributeError::Transfer { .. } => Exit::Failed,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            DistributeError::Unreachable { hosts, .. } => Some(format!(
                "is the Docker Engine of {} running and reachable?",
                hosts
                    .iter()
                    .map(|h| h.host.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            DistributeError::ImageUnavailable { image, .. } if !names_registry(image) => {
                Some(format!(
                    "build it here: argus image build{} (an image on Docker Hub is pulled only when named in full, e.g. docker.io/{image})",
                    super::build_flags_for(image)
                ))
            }
            DistributeError::ImageUnavailable { image, .. } => Some(format!(
                "check that the registry serves {image}, or build it here: argus image build{}",
                super::build_flags_for(image)
            )),
            DistributeError::Transfer { .. } => {
                Some("run it again: a failed transfer leaves nothing behind and is retried".into())
            }
        }
    }
}

/// True when `reference` names its registry (`registry.example.com/ray:1`,
/// `localhost:5000/ray:1`), as Docker decides it: a first path component with a `.` or a
/// `:`, `localhost`, or an upper-case letter. A bare `argus/ray:2.51.1` means Docker Hub
/// implicitly and is never pulled here: a locally built image must not be swapped for a
/// stranger's of the same name.
pub fn names_registry(reference: &str) -> bool {
    match reference.split_once('/') {
        Some((first, _)) => {
            first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase())
        }
        None => false,
    }
}

/// Brings `image` to every host, with the same image id everywhere: observe every
/// engine, decide each host's way (present, tag, pull, stream), then transfer.
///
/// `local`: argus's own engine, which may hold the image without being a cluster host
/// (None when it is unreachable or absent). `hosts`: every host of the cluster.
/// `dry_run`: look only, and say what would happen.
pub async fn distribute(
    image: &str,
    local: Option<Engine<'_>>,
    hosts: &[Engine<'_>],
    dry_run: bool,
    reporter: &dyn Reporter,
) -> Result<Distribution, DistributeError> {
    let started = Instant::now();
    let seen = observe::observe(image, local, hosts).await?;
    // The source: argus's own engine when it has the image, else the first host that does.
    let mut source = seen.source(local, hosts);
    let tried = || {
        local
            .iter()
            .chain(hosts)
            .map(|e| e.host.to_string())
            .collect::<Vec<_>>()
    };
    let registry = names_registry(image);
    if source.is_none() && !registry {
        return Err(DistributeError::ImageUnavailable {
            image: image.to_string(),
            tried: tried(),
            pulls: Vec::new(),
        });
    }
    let mut run = Run {
        image,
        hosts,
        before: seen.hosts,
        results: vec![None; hosts.len()],
        started,
    };
    let wanted_id = source.as_ref().map(|s| s.found.id.clone());
    let mut lacking = run.present(wanted_id.as_deref());
    if let Some(wanted) = &wanted_id {
        lacking = run.tag_where_known(lacking, wanted, dry_run).await;
    }
    if dry_run {
        return Ok(run.dry_run(&lacking, source.as_ref(), registry, wanted_id));
    }
    // A registry the hosts may reach: every lacking host pulls, in parallel.
    let (to_stream, pull_failures) = if registry && !lacking.is_empty() {
        run.pull_all(&lacking, &mut source, wanted_id, reporter)
            .await
    } else {
        (lacking, Vec::new())
    };
    let Some(source) = source else {
        return Err(DistributeError::ImageUnavailable {
            image: image.to_string(),
            tried: tried(),
            pulls: pull_failures,
        });
    };
    if !pull_failures.is_empty() {
        tracing::debug!(?pull_failures, "pull failed: streaming instead");
    }
    let failures = run.stream_all(&to_stream, &source, reporter).await;
    let hosts_done: Vec<HostImage> = run.results.into_iter().flatten().collect();
    if !failures.is_empty() {
        return Err(DistributeError::Transfer {
            image: image.to_string(),
            failures,
            done: hosts_done,
        });
    }
    Ok(Distribution {
        image: image.to_string(),
        image_id: source.found.id,
        dry_run,
        hosts: hosts_done,
    })
}

/// One distribution under way: what each host had, and what each one has got.
struct Run<'r, 'e> {
    image: &'r str,
    hosts: &'r [Engine<'e>],
    /// What the reference named on each host before.
    before: Vec<Option<Found>>,
    results: Vec<Option<HostImage>>,
    started: Instant,
}

impl<'e> Run<'_, 'e> {
    fn done(&mut self, i: usize, outcome: Outcome, id: &str) {
        let replaced = self.before[i].as_ref().map(|f| f.id.clone());
        let replaced = match outcome {
            Outcome::Present => None,
            _ => replaced,
        };
        self.results[i] = Some(host_image(
            self.hosts[i],
            outcome,
            id,
            replaced,
            self.started,
        ));
    }

    /// Marks the hosts whose reference already names `wanted`; returns the others.
    fn present(&mut self, wanted: Option<&str>) -> Vec<usize> {
        let mut lacking = Vec::new();
        for i in 0..self.hosts.len() {
            match (&self.before[i], wanted) {
                (Some(f), Some(wanted)) if f.id == wanted => self.done(i, Outcome::Present, wanted),
                _ => lacking.push(i),
            }
        }
        lacking
    }

    /// The id may be there under another name (an image switched back to): a tag will do.
    /// Returns the hosts still lacking it.
    async fn tag_where_known(
        &mut self,
        lacking: Vec<usize>,
        wanted: &str,
        dry_run: bool,
    ) -> Vec<usize> {
        let (hosts, image) = (self.hosts, self.image);
        let tagged = join_all(lacking.iter().map(|&i| async move {
            observe::has_id(hosts[i].docker, wanted).await
                && (dry_run || transfer::retag(hosts[i], image, wanted).await)
        }))
        .await;
        let mut still = Vec::new();
        for (i, tagged) in lacking.into_iter().zip(tagged) {
            if tagged {
                self.done(i, Outcome::Tagged, wanted);
            } else {
                still.push(i);
            }
        }
        still
    }

    /// What would happen to each lacking host.
    fn dry_run(
        mut self,
        lacking: &[usize],
        source: Option<&Source>,
        registry: bool,
        wanted_id: Option<String>,
    ) -> Distribution {
        for &i in lacking {
            let outcome = match source {
                _ if registry => Outcome::Pulled,
                Some(s) => Outcome::Streamed {
                    from: s.engine.host.to_string(),
                    bytes: s.found.size.unwrap_or(0),
                    skipped: 0,
                },
                None => continue, // no source and no registry was refused above
            };
            let id = wanted_id.clone().unwrap_or_default();
            self.done(i, outcome, &id);
        }
        Distribution {
            image: self.image.to_string(),
            image_id: wanted_id.unwrap_or_default(),
            dry_run: true,
            hosts: self.results.into_iter().flatten().collect(),
        }
    }

    /// Every lacking host pulls, in parallel. Returns the hosts to stream to instead (the
    /// pull failed, or brought another id than the cluster's) and the failed pulls.
    async fn pull_all(
        &mut self,
        lacking: &[usize],
        source: &mut Option<Source<'e>>,
        mut wanted: Option<String>,
        reporter: &dyn Reporter,
    ) -> (Vec<usize>, Vec<HostFailure>) {
        let (hosts, image) = (self.hosts, self.image);
        let pulled = join_all(
            lacking
                .iter()
                .map(|&i| transfer::pull(hosts[i], image, reporter)),
        )
        .await;
        let mut to_stream = Vec::new();
        let mut failures = Vec::new();
        for (&i, result) in lacking.iter().zip(pulled) {
            match result {
                Ok(found) => {
                    // Nobody had it before: the first host (in order) that pulled it decides.
                    let wanted = wanted.get_or_insert_with(|| found.id.clone());
                    if source.is_none() {
                        *source = Some(Source {
                            engine: hosts[i],
                            found: found.clone(),
                        });
                    }
                    if &found.id == wanted {
                        let wanted = wanted.clone();
                        self.done(i, Outcome::Pulled, &wanted);
                    } else {
                        reporter.note(&format!(
                            "host {}: the registry's {image} is {}, the cluster's is {}: streaming the cluster's",
                            hosts[i].host,
                            short_id(&found.id),
                            short_id(wanted)
                        ));
                        to_stream.push(i);
                    }
                }
                Err(reason) => {
                    failures.push(HostFailure {
                        host: hosts[i].host.to_string(),
                        reason,
                    });
                    to_stream.push(i);
                }
            }
        }
        (to_stream, failures)
    }

    /// Streams the image from `source` to the hosts `to_stream`; returns those it did not
    /// reach (after untagging whatever the failed attempt left there).
    async fn stream_all(
        &mut self,
        to_stream: &[usize],
        source: &Source<'_>,
        reporter: &dyn Reporter,
    ) -> Vec<HostFailure> {
        let mut failures = Vec::new();
        if to_stream.is_empty() {
            return failures;
        }
        let targets: Vec<Engine<'_>> = to_stream.iter().map(|&i| self.hosts[i]).collect();
        let streamed = transfer::stream(self.image, source, &targets, reporter).await;
        for (&i, result) in to_stream.iter().zip(streamed) {
            let host = self.hosts[i];
            match result {
                Ok(streamed) => {
                    let outcome = Outcome::Streamed {
                        from: source.engine.host.to_string(),
                        bytes: streamed.sent,
                        skipped: streamed.skipped,
                    };
                    self.done(i, outcome, &source.found.id);
                }
                Err(reason) => {
                    let previous = self.before[i].as_ref().map(|f| f.id.as_str());
                    transfer::clean_up(host, self.image, &source.found.id, previous).await;
                    failures.push(HostFailure {
                        host: host.host.to_string(),
                        reason,
                    });
                }
            }
        }
        failures
    }
}

fn host_image(
    engine: Engine<'_>,
    outcome: Outcome,
    id: &str,
    replaced: Option<String>,
    started: Instant,
) -> HostImage {
    HostImage {
        host: engine.host.to_string(),
        outcome,
        image_id: id.to_string(),
        replaced: replaced.filter(|old| old != id),
        seconds: started.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_is_named_by_the_first_component() {
        for named in [
            "registry.example.com/ray:1",
            "localhost:5000/argus/ray:test",
            "localhost/ray",
            "10.251.3.1:5000/ray:2.51.1",
            "docker.io/rayproject/ray:2.51.1",
            "Registry/ray",
            "[::1]:5000/ray:1",
        ] {
            assert!(names_registry(named), "{named}");
        }
        for bare in [
            "argus/ray:2.51.1",
            "ray:2.51.1",
            "ubuntu",
            "rayproject/ray@sha256:abc",
            "a/b/c:1",
        ] {
            assert!(!names_registry(bare), "{bare}");
        }
    }

    #[test]
    fn errors_name_the_hosts_and_classify() {
        let failure = |host: &str, reason: &str| HostFailure {
            host: host.into(),
            reason: reason.into(),
        };
        let e = DistributeError::Transfer {
            image: "argus/ray:2.51.1".into(),
            failures: vec![failure("b", "load: connection reset")],
            done: Vec::new(),
        };
        assert_eq!(
            e.to_string(),
            "image argus/ray:2.51.1 did not reach host b: load: connection reset"
        );
        assert_eq!(e.exit(), Exit::Failed);
        let e = DistributeError::ImageUnavailable {
            image: "argus/ray:9.9.9".into(),
            tried: vec!["local".into(), "a".into(), "b".into()],
            pulls: Vec::new(),
        };
        assert_eq!(
            e.to_string(),
            "image argus/ray:9.9.9 is on no engine (looked on local, a, b)"
        );
        assert_eq!(e.exit(), Exit::Unreachable);
        assert!(
            e.hint()
                .is_some_and(|h| h.contains("argus image build --ray-version 9.9.9"))
        );
        let e = DistributeError::ImageUnavailable {
            image: "localhost:5000/ray:1".into(),
            tried: vec!["a".into()],
            pulls: vec![failure("a", "pull: connection refused")],
        };
        assert_eq!(
            e.to_string(),
            "image localhost:5000/ray:1 is on no engine (looked on a) and could not be pulled: host a: pull: connection refused"
        );
    }
}
