//! The rule of a supervised run: after an attempt ended, whether to restart, to stop, or
//! to give up; and what of the attempts read back from a report can be trusted. Pure.

use super::attempt::{Attempt, submission_id};
use crate::config::jobspec::Restart;
use crate::ray::jobs::JobStatus;

/// The detail of an attempt stopped by Ctrl-C.
pub const INTERRUPTED: &str = "interrupted (Ctrl-C)";

/// Whether an attempt's end was decided (a cause seen, or Ctrl-C) though its job's end
/// was not recorded yet.
pub fn decided(attempt: &Attempt) -> bool {
    attempt.cause.is_some() || attempt.detail.as_deref() == Some(INTERRUPTED)
}

/// The attempts read back from the report (on the shared storage, which others can
/// write) are the ones this run makes: numbered from 1, each with its own id, the
/// first one this run's job. And the last attempt the policy allows has an id that can
/// be.
pub fn check_attempts(attempts: &[Attempt], first: &str, policy: &Restart) -> Result<(), String> {
    for (i, a) in attempts.iter().enumerate() {
        let n = i as u32 + 1;
        if a.n != n || a.submission_id != submission_id(first, n) {
            return Err(format!(
                "attempt {} names job {:?}; attempt {n} of this run is {}",
                a.n,
                a.submission_id,
                submission_id(first, n)
            ));
        }
    }
    let last = submission_id(first, policy.max.saturating_add(1));
    last.parse::<crate::ids::SubmissionId>()
        .map_err(|e| format!("the id of its last possible attempt, {last}, is not an id: {e}"))?;
    Ok(())
}

/// What the attempts so far call for.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Done,
    Restart,
    GiveUp(String),
}

/// The rule, on the recorded attempts (the last one has ended). Pure.
pub fn verdict(attempts: &[Attempt], policy: &Restart) -> Verdict {
    let Some(last) = attempts.last() else {
        return Verdict::Done;
    };
    if last.status == Some(JobStatus::Succeeded) {
        return Verdict::Done;
    }
    let Some(cause) = last.cause else {
        // Interrupted (Ctrl-C): the run goes on when it is run again, uncounted.
        return match last.detail.as_deref() {
            Some(INTERRUPTED) => Verdict::Restart,
            _ => Verdict::Done,
        };
    };
    if !policy.restarts_on(cause) {
        return Verdict::Done;
    }
    let counted = attempts.iter().filter(|a| a.cause.is_some()).count();
    if counted > policy.max as usize {
        return Verdict::GiveUp(format!(
            "giving up: attempt {} ended by {cause} and the policy allows {} restart{}",
            last.n,
            policy.max,
            if policy.max == 1 { "" } else { "s" }
        ));
    }
    Verdict::Restart
}

#[cfg(test)]
mod tests;
