//! Exit codes and how an error chain is shown to the user.
//!
//! Library errors know what kind of failure they are ([`Exit`]) and may carry a hint
//! that tells the user what to do next; `report` walks the chain to find both.

use std::fmt::Write as _;

/// The process exit codes (documented in `argus --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything worked.
    Success = 0,
    /// The operation ran and failed (a node never came up, a job FAILED).
    Failed = 1,
    /// The user's input is wrong (bad YAML, unknown key, bad id).
    Usage = 2,
    /// A job was STOPPED.
    Stopped = 3,
    /// An external system is unreachable (Docker, Ray, a registry, the hub).
    Unreachable = 4,
}

pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the operation ran and failed (a node never came up, a job FAILED)
  2  the input is wrong (bad YAML, unknown key, invalid value); nothing was changed
  3  a job was STOPPED
  4  an external system is unreachable or refused (Docker, Ray, an image registry)";

/// Implemented by every module's error type.
pub trait Classify {
    fn exit(&self) -> Exit;
    fn hint(&self) -> Option<String> {
        None
    }
}

/// The exit code and hint of the first error in the chain that knows them.
pub fn classify(err: &anyhow::Error) -> (Exit, Option<String>) {
    for cause in err.chain() {
        if cause
            .downcast_ref::<crate::config::profile::NoHostPath>()
            .is_some()
        {
            return (Exit::Usage, Some("prepare, snapshot and run write from this host: use shared.host_path (the NFS export mounted on the host)".into()));
        }
        // A config error's "valid:" line is part of its own text.
        if cause.downcast_ref::<crate::config::ConfigError>().is_some() {
            return (Exit::Usage, None);
        }
        if let Some(e) = cause.downcast_ref::<crate::cluster::Error>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::cluster::ray::RayError>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::run::Error>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::data::Error>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::submit::Error>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::snapshot::Error>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::cluster::image::BuildError>() {
            return (e.exit(), e.hint());
        }
        if let Some(e) = cause.downcast_ref::<crate::training::Error>() {
            return (e.exit(), e.hint());
        }
    }
    (Exit::Failed, None)
}

/// `error: ...`, then each cause, then a hint: the text printed for a failed command.
pub fn report(err: &anyhow::Error) -> (Exit, String) {
    let (exit, hint) = classify(err);
    let mut out = format!("error: {err}\n");
    for cause in err.chain().skip(1) {
        let _ = writeln!(out, "  caused by: {cause}");
    }
    if let Some(hint) = hint {
        let _ = writeln!(out, "hint: {hint}");
    }
    (exit, out)
}
