use std::time::Duration;

use super::*;
use crate::config::jobspec::RestartOn;

fn policy(max: u32, on: &[RestartOn]) -> Restart {
    Restart {
        max,
        on: on.to_vec(),
        hang_after: Restart::DEFAULT_HANG_AFTER,
        backoff: Duration::ZERO,
        host_wait: Restart::DEFAULT_HOST_WAIT,
    }
}

fn ended(n: u32, status: JobStatus, cause: Option<RestartOn>) -> Attempt {
    Attempt {
        n,
        submission_id: submission_id("run-1", n),
        status: Some(status),
        cause,
        ..Default::default()
    }
}

#[test]
fn a_success_ends_the_run_and_a_cause_the_policy_names_restarts_it() {
    let all = policy(2, &RestartOn::ALL);
    assert_eq!(
        verdict(&[ended(1, JobStatus::Succeeded, None)], &all),
        Verdict::Done
    );
    for cause in RestartOn::ALL {
        let status = match cause {
            RestartOn::Failed => JobStatus::Failed,
            _ => JobStatus::Stopped,
        };
        assert_eq!(
            verdict(&[ended(1, status.clone(), Some(cause))], &all),
            Verdict::Restart
        );
        // A cause the policy does not name ends the run.
        let others: Vec<_> = RestartOn::ALL.into_iter().filter(|c| *c != cause).collect();
        assert_eq!(
            verdict(&[ended(1, status, Some(cause))], &policy(2, &others)),
            Verdict::Done
        );
    }
    // Stopped by someone (or its time limit): not a cause, not restarted.
    assert_eq!(
        verdict(&[ended(1, JobStatus::Stopped, None)], &all),
        Verdict::Done
    );
}

#[test]
fn max_counts_restarts_and_an_interrupt_is_not_one() {
    let p = policy(2, &RestartOn::ALL);
    let failed = |n| ended(n, JobStatus::Failed, Some(RestartOn::Failed));
    let mut interrupted = ended(2, JobStatus::Stopped, None);
    interrupted.detail = Some(INTERRUPTED.into());
    assert_eq!(verdict(&[failed(1), failed(2)], &p), Verdict::Restart);
    assert!(matches!(
        verdict(&[failed(1), failed(2), failed(3)], &p),
        Verdict::GiveUp(why) if why.contains("attempt 3 ended by failed") && why.contains("2 restarts")
    ));
    // Run again after Ctrl-C: it goes on, and the interrupted attempt is not counted.
    assert_eq!(
        verdict(&[failed(1), interrupted.clone()], &p),
        Verdict::Restart
    );
    assert_eq!(
        verdict(&[failed(1), interrupted, failed(3)], &p),
        Verdict::Restart
    );
    assert!(matches!(
        verdict(&[failed(1)], &policy(0, &RestartOn::ALL)),
        Verdict::GiveUp(_)
    ));
}

#[test]
fn attempts_read_back_must_be_this_runs() {
    let p = policy(2, &RestartOn::ALL);
    let a = |n, id: &str| Attempt {
        n,
        submission_id: id.into(),
        ..Default::default()
    };
    assert!(check_attempts(&[a(1, "run-1"), a(2, "run-1-attempt-2")], "run-1", &p).is_ok());
    // An edited report naming someone else's job is refused, not acted on.
    for bad in [
        vec![a(1, "other")],
        vec![a(1, "run-1"), a(3, "run-1-attempt-3")],
        vec![a(1, "run-1"), a(2, "victim")],
    ] {
        assert!(check_attempts(&bad, "run-1", &p).is_err());
    }
    // The last attempt's id must be one: a first id near the length limit is refused at once.
    let long = "x".repeat(125);
    assert!(check_attempts(&[a(1, &long)], &long, &p).is_err());
}

#[test]
fn an_end_recorded_before_the_job_stopped_is_acted_on_again() {
    let mut a = Attempt::default();
    assert!(!decided(&a));
    a.detail = Some(INTERRUPTED.into());
    assert!(decided(&a));
    a.detail = None;
    a.cause = Some(RestartOn::Hang);
    assert!(decided(&a));
}
