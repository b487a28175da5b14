//! Failure bundles: when a job fails or a node is lost under `argus run`, and on demand
//! (`argus job diagnose ID`), everything needed to say why is collected into
//! `jobs/<id>/diagnostics/<attempt>/` on the shared storage, and triaged to one line.
//!
//! ```text
//! jobs/<id>/diagnostics/<attempt>/
//!   manifest.json            what was collected (sizes, sources), what could not be and why,
//!                            the limits and how long it took
//!   triage.json              the first error across all nodes by time, and the file holding it
//!   driver.log               the driver's log (its tail)
//!   profile.yaml             the resolved profile, secrets redacted
//!   jobspec.yaml             the job's recorded JobSpec, secrets redacted
//!   nodes/<container>/state.json     Docker's state: exit code, OOM-killed, restarts, die/oom events
//!   nodes/<container>/env.txt        its environment, secrets redacted by name and by value
//!   nodes/<container>/output.log     the tail of its own output (`ray start`)
//!   nodes/<container>/nvidia-smi.txt where it has NVIDIA GPUs
//!   nodes/<container>/ray/<file>     the tails of Ray's logs: raylet, gcs_server, the job's
//!                                    workers' .out/.err and their python-core-worker logs
//! ```
//!
//! Bounded: the tail of each file, a cap per node and for the whole bundle (under 50 MB by
//! default), and a deadline (25 s for the containers' part by default) after which what
//! is missing is named in the manifest. Every file is redacted by value (every secret argus knows, the secret-named
//! variables of the job's runtime env and of each container's env: the Ray auth token
//! among them) before it is written. Written through [`crate::records`]' job directory
//! handle, staged under a temporary name and renamed into place.

pub mod bundle;
pub mod driver_log;
pub mod signatures;
pub mod triage;

use std::path::PathBuf;
use std::time::Duration;

use crate::exit::{Classify, Exit};

pub use bundle::{Bundle, Job, Limits, collect, latest};
pub use signatures::Cause;
pub use triage::Triage;

/// The directory of a job's bundles, in its job directory (named by records).
pub const DIR: &str = crate::records::DIAGNOSTICS;
pub const TRIAGE: &str = "triage.json";
pub const MANIFEST: &str = "manifest.json";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("argus has no record of job {0}")]
    UnknownJob(String),
    #[error("the records of job {0} are not on this machine (no shared storage: --config)")]
    NoRecords(String),
    #[error(transparent)]
    Record(#[from] crate::records::Error),
    #[error("cannot write the bundle {}", crate::text::shown(path))]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Cluster(#[from] crate::cluster::Error),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::UnknownJob(_) | Error::NoRecords(_) => Exit::Usage,
            Error::Record(e) => e.exit(),
            Error::Write { source, .. } => crate::fsx::io_exit(source),
            Error::Cluster(e) => e.exit(),
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            Error::UnknownJob(_) => Some("`argus job list` shows the jobs argus knows".into()),
            Error::NoRecords(_) => Some(
                "run it with the profile (-p) whose shared storage holds the job's records".into(),
            ),
            Error::Record(e) => e.hint(),
            Error::Write { source, .. } => crate::fsx::io_hint(source),
            Error::Cluster(e) => e.hint(),
        }
    }
}

/// Collects the bundle of attempt `attempt` of a job that just failed or lost a node, for
/// a run: bounded by `limits` (plus a few seconds), never an error (a warning says why it
/// could not be made). The triage's one line, when it found something.
pub async fn after_failure(job: &Job<'_>, limits: &Limits) -> Option<String> {
    let bound = limits.time + Duration::from_secs(15);
    match tokio::time::timeout(bound, collect(job, limits)).await {
        Ok(Ok(bundle)) => {
            tracing::info!(
                "failure bundle of job {} in {}",
                job.id,
                bundle.path.display()
            );
            bundle.triage.map(|t| t.one_line())
        }
        Ok(Err(e)) => {
            tracing::warn!(
                "cannot collect the failure bundle of job {}: {}",
                job.id,
                crate::exit::one_line(&e)
            );
            None
        }
        Err(_) => {
            tracing::warn!(
                "the failure bundle of job {} took over {}s: left unfinished",
                job.id,
                bound.as_secs()
            );
            None
        }
    }
}
