//! What the two supervisors of a run share (`argus run`'s, `run::supervise`, and the
//! Slurm batch step's, `slurm::supervise`): the attempts as recorded, the rule that says
//! whether to restart, the watch of an attempt's steps (for hangs), the next attempt's
//! JobSpec from the newest complete checkpoint, and stopping what is left of a job.

pub mod attempt;
pub mod failure;
pub mod next;
pub mod rule;
pub mod steps;
pub mod stop;

pub use attempt::{Attempt, RecoveryTimes, ResumedFrom, submission_id};
pub use next::next_job;
pub use rule::{INTERRUPTED, Verdict, verdict};
pub use steps::Steps;

use crate::exit::{Classify, Exit};

/// What can stop a restart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Live(#[from] crate::submit::live::Error),
    #[error(transparent)]
    Training(#[from] crate::training::Error),
    #[error(transparent)]
    Id(#[from] crate::ids::IdError),
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Live(e) => e.exit(),
            Error::Training(e) => e.exit(),
            Error::Id(_) => Exit::Usage,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Live(e) => e.hint(),
            Error::Training(e) => e.hint(),
            Error::Id(_) => None,
        }
    }
}
