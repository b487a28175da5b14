//! Stopping what is left of a job and seeing it stopped. Ray answers at once when the
//! job's driver lives; when the node the driver ran on died, Ray says RUNNING until its
//! health checks give the node up (half a minute and more), and the job's actors on other
//! nodes live until then: a next attempt must not train beside them.

use std::time::Duration;

use crate::http::{Poll, poll_until};
use crate::ray::jobs::{JobInfo, JobsApi, JobsError};

/// The job did not end by the deadline: its last status as Ray said it.
#[derive(Debug)]
pub struct Stuck {
    pub status: String,
}

/// Asks Ray to stop job `id` and polls until Ray says it ended (its last word) or does
/// not know it (None). Only "not found" counts as gone; other errors are asked again until
/// `deadline`. `on_wait` hears once when the stop was asked and the job still runs.
pub async fn stop_and_wait(
    api: &JobsApi<'_>,
    id: &str,
    deadline: Duration,
    mut on_wait: impl FnMut(&str),
) -> Result<Option<JobInfo>, Stuck> {
    let mut asked = false;
    let mut said = false;
    let until = tokio::time::Instant::now() + deadline;
    poll_until(until, Duration::from_secs(1), async || {
        match api.get(id).await {
            Ok(info) if info.status.is_finished() => Poll::Ready(Some(info)),
            Ok(info) => {
                if !asked {
                    asked = api.stop(id).await.is_ok();
                }
                if asked && !said {
                    on_wait(&info.status.to_string());
                    said = true;
                }
                Poll::Pending(info.status.to_string())
            }
            Err(JobsError::NotFound(_)) => Poll::Ready(None),
            Err(e) => {
                tracing::info!("job {id} cannot be asked about now ({e}): asking again");
                Poll::Pending(format!("unknown ({e})"))
            }
        }
    })
    .await
    .map_err(|status| Stuck { status })
}
