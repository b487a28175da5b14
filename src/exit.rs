//! Exit codes, and the trait by which each module's errors say which one they are.
//!
//! Library errors know what kind of failure they are ([`Exit`]) and may carry a hint
//! that tells the user what to do next; the crate error type matches them all.

/// The process exit codes (documented in `argus --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything worked.
    Success = 0,
    /// The operation ran and failed (a node never came up, a job FAILED).
    Failed = 1,
    /// The user's input is wrong (bad YAML, unknown key, bad id). The shared storage is
    /// input too: a corrupt record (`job.json` cut short, a `resumes` that is a path) and
    /// a path argus refused there (a planted symbolic link, see `fsx::Unsafe`) are this
    /// code, and nothing was changed.
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
  2  the input is wrong (bad YAML, unknown key, invalid value, a corrupt record or a
     symbolic link on the shared storage); nothing was changed
  3  a job was STOPPED
  4  an external system is unreachable or refused (Docker, Ray, an image registry)";

/// Implemented by every module's error type.
pub trait Classify {
    fn exit(&self) -> Exit;
    fn hint(&self) -> Option<String> {
        None
    }
}

/// An error and its causes on one line (`a: b: c`), a cause that repeats what came before
/// left out: for reports that list several failures (one per host).
pub fn one_line(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}
