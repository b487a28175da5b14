//! A run's inputs, as `argus run` and `argus slurm submit` both put them on the shared
//! storage before anything is submitted: the JobSpec checked, its datasets and model
//! prepared, its code snapshotted, each pinned (`pins`); and the recorded JobSpec, written
//! redacted and read back by one codec (`recorded`).
//!
//! ```text
//! stage.rs     prepare (datasets, model) and snapshot (code), pinned; converging
//! model.rs     a model path checked one way for submit and doctor (no `..`, no link)
//! pins.rs      DatasetPin, ModelPin, CodePin                                     pure
//! recorded.rs  the recorded JobSpec: redacted out, secrets back in               pure
//! ```

mod model;
mod pins;
pub mod recorded;
mod stage;

use std::path::{Path, PathBuf};

use crate::config::jobspec::{Code, LoadedJobSpec};
use crate::config::{ContainerLayout, Layout, LoadedProfile};
use crate::exit::{Classify, Exit};
use crate::records::Records;
use crate::ui::Reporter;
pub use model::{ModelPath, ModelPathError, check_model_path};
pub use pins::{CodePin, DatasetPin, ModelPin, PinnedFile};
pub use stage::{PATH_REVISION, datasets_needed, model_dir_on_host, prepare, snapshot};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("--new makes a new job, but the JobSpec fixes submission_id {id}, which exists")]
    SubmissionTaken { id: String },
    #[error("the lock redacted {0}; set it in the environment to replay")]
    MissingSecret(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    NoHostPath(#[from] crate::config::profile::NoHostPath),
    #[error(transparent)]
    Data(#[from] crate::data::Error),
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::Error),
    #[error("no snapshot {code_id} under {}", crate::text::shown(root))]
    CodeNotFound { code_id: String, root: PathBuf },
    #[error(transparent)]
    Id(#[from] crate::ids::IdError),
    #[error(transparent)]
    Pypi(#[from] crate::snapshot::pypi::PypiError),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::MissingSecret(_) | Error::Invalid(_) | Error::SubmissionTaken { .. } => {
                Exit::Usage
            }
            Error::CodeNotFound { .. } => Exit::Usage,
            Error::Config(_) | Error::NoHostPath(_) | Error::Id(_) => Exit::Usage,
            Error::Data(e) => e.exit(),
            Error::Snapshot(e) => e.exit(),
            Error::Pypi(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::SubmissionTaken { .. } => Some(
                "remove submission_id from the JobSpec (each run then gets its own), or change it"
                    .into(),
            ),
            Error::NoHostPath(_) => Some(
                "argus run writes the shared storage from this host: use shared.host_path".into(),
            ),
            Error::Data(e) => e.hint(),
            Error::Snapshot(e) => e.hint(),
            Error::CodeNotFound { .. } => Some(
                "`argus snapshot list` shows the snapshots; `argus snapshot SRC` makes one".into(),
            ),
            Error::Pypi(e) => e.hint(),
            _ => None,
        }
    }
}

/// Where the inputs go and who hears about it.
pub struct Ctx<'a> {
    pub loaded: &'a LoadedProfile,
    /// The shared storage on this host, and inside the containers.
    pub host: Layout,
    pub mount: ContainerLayout,
    pub reporter: &'a dyn Reporter,
}

/// Everything about a JobSpec's inputs that can be checked before anything is written
/// (`new`: the job must not exist yet).
pub fn check(host: &Layout, job: &LoadedJobSpec, new: bool) -> Result<(), Error> {
    let origin = job.source.origin.display();
    let spec = &job.spec;
    if let Code::Source(code) = &spec.code
        && !Path::new(&code.source).is_dir()
    {
        return Err(Error::Invalid(format!(
            "{origin}: code.source {} is not a directory",
            code.source
        )));
    }
    if let Some(from) = &spec.data_from
        && !Path::new(from).is_dir()
    {
        return Err(Error::Invalid(format!(
            "{origin}: data_from {from} is not a directory"
        )));
    }
    if let (Some(from), Some(model)) = (&spec.model_from, &spec.model_id) {
        // The check `prepare --model-from` makes before it writes, made before the run is.
        crate::data::local_model::check(model, Path::new(from))
            .map_err(|e| Error::Invalid(format!("{origin}: {e}")))?;
    }
    if let Code::Snapshot(id) = &spec.code {
        crate::snapshot::find(&host.code(), &id.to_string()).map_err(|_| Error::CodeNotFound {
            code_id: id.to_string(),
            root: host.code(),
        })?;
    }
    if new
        && let Some(id) = &spec.submission_id
        && Records::new(host.jobs()).exists(id.as_str())
    {
        return Err(Error::SubmissionTaken { id: id.to_string() });
    }
    Ok(())
}

/// Makes the JobSpec's paths absolute and its pip packages local, then checks it.
pub async fn load(
    host: &Layout,
    job: &mut LoadedJobSpec,
    new: bool,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    job.absolutize();
    crate::snapshot::pypi::localize(&mut job.spec.code, reporter).await?;
    check(host, job, new)
}

/// What a run does before it needs a cluster, as `argus run` does it: everything checked,
/// the JobSpec's datasets and model prepared, its code snapshotted (the JobSpec then names
/// the snapshot). For `argus slurm submit`, on the login node.
pub async fn prepare_all(
    loaded: &LoadedProfile,
    job: &mut LoadedJobSpec,
    reporter: &dyn Reporter,
) -> Result<(Vec<DatasetPin>, Option<ModelPin>, CodePin), Error> {
    let host = loaded.host_layout()?;
    load(&host, job, true, reporter).await?;
    let ctx = Ctx {
        loaded,
        mount: loaded.profile.container_layout(),
        host,
        reporter,
    };
    let (datasets, model) = prepare(&ctx, &job.spec, None).await?;
    let code = snapshot(&ctx, &mut job.spec)?;
    Ok((datasets, model, code))
}
