//! Every error a command can end with: one variant per module, so the exit code and the
//! hint of each are decided by an exhaustive match (a new module's error cannot silently
//! become exit 1: it does not convert until it has a variant here).
//!
//! Command handlers add context (`cannot bring up cluster x`) with [`Context`]; the report
//! prints `error: ...`, each cause, then the hint of the innermost error that has one.

use std::fmt::Write as _;

use crate::exit::{Classify, Exit};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    NoHostPath(#[from] crate::config::profile::NoHostPath),
    #[error(transparent)]
    Id(#[from] crate::ids::IdError),
    #[error(transparent)]
    Flag(#[from] super::FlagError),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::Error),
    #[error(transparent)]
    Image(#[from] crate::cluster::image::BuildError),
    #[error(transparent)]
    Ray(#[from] crate::ray::RayError),
    #[error(transparent)]
    Data(#[from] crate::data::Error),
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::Error),
    #[error(transparent)]
    Pypi(#[from] crate::snapshot::pypi::PypiError),
    #[error(transparent)]
    Submit(#[from] crate::submit::Error),
    #[error(transparent)]
    Run(#[from] crate::run::Error),
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error(transparent)]
    Export(#[from] crate::export::Error),
    #[error(transparent)]
    Training(#[from] crate::training::Error),
    #[error(transparent)]
    Diagnose(#[from] crate::diagnose::Error),
    #[error(transparent)]
    Live(#[from] crate::submit::live::Error),
    #[error(transparent)]
    Records(#[from] crate::records::Error),
    #[error(transparent)]
    Slurm(#[from] crate::slurm::Error),
    #[error(transparent)]
    Restart(#[from] crate::config::jobspec::restart::RestartFlagError),
    #[error("cannot encode the output as JSON")]
    Encode(#[from] serde_json::Error),
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The path on the shared storage that was refused somewhere in `err`'s causes (a planted
/// link, a file where a directory belongs, a name that escapes the root), whichever module
/// met it: one class, one exit code (2, bad input; nothing was changed) and one hint.
fn refused(err: &Error) -> Option<&crate::fsx::Unsafe> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && let Some(refused) = crate::fsx::Unsafe::of(io)
        {
            return Some(refused);
        }
        if let Some(refused) = c.downcast_ref::<crate::fsx::Unsafe>() {
            return Some(refused);
        }
        cause = c.source();
    }
    None
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        if refused(self).is_some() {
            return Exit::Usage;
        }
        match self {
            Error::Config(_) | Error::NoHostPath(_) | Error::Id(_) => Exit::Usage,
            Error::Flag(e) => e.exit(),
            Error::Cluster(e) => e.exit(),
            Error::Image(e) => e.exit(),
            Error::Ray(e) => e.exit(),
            Error::Data(e) => e.exit(),
            Error::Snapshot(e) => e.exit(),
            Error::Pypi(e) => e.exit(),
            Error::Submit(e) => e.exit(),
            Error::Run(e) => e.exit(),
            Error::Lock(e) => e.exit(),
            Error::Export(e) => e.exit(),
            Error::Training(e) => e.exit(),
            Error::Diagnose(e) => e.exit(),
            Error::Live(e) => e.exit(),
            Error::Restart(e) => e.exit(),
            Error::Records(e) => e.exit(),
            Error::Slurm(e) => e.exit(),
            Error::Encode(_) => Exit::Failed,
            Error::Context { source, .. } => source.exit(),
        }
    }

    fn hint(&self) -> Option<String> {
        if let Some(refused) = refused(self) {
            return Some(refused.hint());
        }
        match self {
            // A config error's "valid:" line, and an id error's "(valid: ...)", are part of
            // their own text.
            Error::Config(_) | Error::Id(_) | Error::Encode(_) => None,
            Error::NoHostPath(_) => Some(
                "prepare, snapshot and run write from this host: use shared.host_path (the NFS export mounted on the host)".into(),
            ),
            Error::Flag(e) => e.hint(),
            Error::Cluster(e) => e.hint(),
            Error::Image(e) => e.hint(),
            Error::Ray(e) => e.hint(),
            Error::Data(e) => e.hint(),
            Error::Snapshot(e) => e.hint(),
            Error::Pypi(e) => e.hint(),
            Error::Submit(e) => e.hint(),
            Error::Run(e) => e.hint(),
            Error::Lock(e) => e.hint(),
            Error::Export(e) => e.hint(),
            Error::Training(e) => e.hint(),
            Error::Diagnose(e) => e.hint(),
            Error::Live(e) => e.hint(),
            Error::Restart(e) => e.hint(),
            Error::Records(e) => e.hint(),
            Error::Slurm(e) => e.hint(),
            Error::Context { source, .. } => source.hint(),
        }
    }
}

/// `.context(..)` / `.with_context(|| ..)` on any result whose error converts into [`Error`].
pub trait Context<T> {
    fn context(self, context: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.into(),
            source: Box::new(e.into()),
        })
    }
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f().into(),
            source: Box::new(e.into()),
        })
    }
}

/// The exit code and the text printed for a failed command: `error: ...`, each cause,
/// then a hint.
pub fn report(err: &Error) -> (Exit, String) {
    let mut out = format!("error: {err}\n");
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        let _ = writeln!(out, "  caused by: {c}");
        cause = c.source();
    }
    if let Some(hint) = err.hint() {
        let _ = writeln!(out, "hint: {hint}");
    }
    // Ray's error bodies, a URL with a token, a value echoed back: never in clear.
    (err.exit(), crate::secrets::redact_text(&out))
}
