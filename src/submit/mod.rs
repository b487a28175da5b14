//! Job submission: a JobSpec resolved against a target cluster (profile or RayConfig)
//! into one value, the submission (`resolve`), turned into a Ray Jobs payload
//! (`payload`, pure), submitted and recorded under `jobs/<id>/` (`send`), watched to its
//! end (`watch`). `run`, Slurm and the KubeRay export consume the same resolved value.

pub mod entrypoint;
pub mod live;
pub mod override_check;
pub mod payload;
pub mod pools;
pub mod resolve;
pub mod send;
pub mod target;
pub mod verl_match;
pub mod watch;

use std::path::PathBuf;

use crate::exit::{Classify, Exit};
use crate::ray::jobs::JobsError;

pub use resolve::{Prepared, generate_id, prepare};
pub use send::{SubmitReport, submit};
pub use target::Target;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Jobs(#[from] JobsError),
    #[error(
        "submission id {id} is already used: argus has a record of it at {}",
        crate::text::shown(path)
    )]
    DuplicateRecord { id: String, path: PathBuf },
    #[error(transparent)]
    Overrides(#[from] override_check::Error),
    #[error(transparent)]
    Entrypoint(#[from] entrypoint::Error),
    #[error("invalid model_id {model:?}: {reason}")]
    BadModel { model: String, reason: String },
    #[error("no snapshot {code_id} under {}", crate::text::shown(root))]
    CodeNotFound { code_id: String, root: PathBuf },
    #[error("no job {0}: neither the cluster nor argus's records know it")]
    UnknownJob(String),
    #[error("invalid submission id {0:?}")]
    BadId(String),
    #[error("cannot write the job records at {}", crate::text::shown(path))]
    Records {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Record(#[from] crate::records::Error),
    #[error("code.source is snapshotted by `argus run`; `argus submit` needs code_id or code_path")]
    NeedsRun,
    #[error("{0}")]
    VerlMismatch(verl_match::Mismatch),
    #[error("the job asks for {demand}, but the cluster has {cluster}: it would wait forever")]
    Infeasible { demand: String, cluster: String },
    #[error(
        "the job asks for {demand}, but the cluster has {cluster}: its driver would wait forever"
    )]
    DriverInfeasible { demand: String, cluster: String },
    #[error("job {id} is still {status} after waiting {seconds}s")]
    WaitTimeout {
        id: String,
        status: crate::ray::jobs::JobStatus,
        seconds: u64,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Jobs(JobsError::Ray(e)) => e.exit(),
            Error::Jobs(JobsError::Duplicate(_) | JobsError::NotFound(_)) => Exit::Usage,
            Error::Overrides(e) => e.exit(),
            Error::Entrypoint(e) => e.exit(),
            Error::DuplicateRecord { .. }
            | Error::BadModel { .. }
            | Error::CodeNotFound { .. }
            | Error::UnknownJob(_)
            | Error::BadId(_)
            | Error::NeedsRun
            | Error::Infeasible { .. }
            | Error::VerlMismatch(_)
            | Error::DriverInfeasible { .. } => Exit::Usage,
            Error::Record(e) => e.exit(),
            Error::Records { source, .. } => crate::fsx::io_exit(source),
            Error::WaitTimeout { .. } => Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Jobs(JobsError::Ray(e)) => e.hint(),
            Error::Jobs(JobsError::Duplicate(_)) | Error::DuplicateRecord { .. } => {
                Some("choose another submission_id, or leave it out to get a fresh one".into())
            }
            Error::Overrides(e) => e.hint(),
            Error::Entrypoint(e) => e.hint(),
            Error::Record(e) => e.hint(),
            Error::Records { source, .. } => crate::fsx::io_hint(source),
            Error::CodeNotFound { .. } => Some(
                "`argus snapshot list` shows the snapshots; `argus snapshot SRC` makes one".into(),
            ),
            Error::UnknownJob(_) => Some("`argus job list` shows the jobs".into()),
            Error::DriverInfeasible { .. } => Some("entrypoint_resources (JobSpec or profile submit:) must name resources one live node has: worker_node: 1 is on every worker; a resource of your own must be in a worker group's `resources`".into()),
            Error::VerlMismatch(m) => Some(m.fix.clone()),
            Error::Infeasible { .. } => Some("lower nnodes / n_gpus_per_node in the JobSpec (or --set them), or give the profile's workers more GPUs (`argus up`)".into()),
            _ => None,
        }
    }
}
