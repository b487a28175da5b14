//! What every HTTP client of argus shares: the user agent (Ray 2.51 answers 500 without
//! one, and must never see one starting with "Mozilla"), client construction, one retry
//! policy (exponential backoff with jitter), and `poll_until`, the one way argus waits for
//! a condition under a deadline that the caller owns.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

pub const USER_AGENT: &str = concat!("argus/", env!("CARGO_PKG_VERSION"));

/// A client builder with argus's user agent and the given timeouts; a caller adds what
/// only it needs (a redirect policy, a Unix socket) and calls [`build`].
pub fn builder(connect_timeout: Duration, timeout: Option<Duration>) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(connect_timeout);
    match timeout {
        Some(timeout) => builder.timeout(timeout),
        None => builder.read_timeout(Duration::from_secs(60)),
    }
}

/// The client of a [`builder`].
pub fn build(builder: reqwest::ClientBuilder) -> reqwest::Client {
    builder
        .build()
        // Building only fails when no TLS provider is installed, which `argus::run` does
        // first thing; tests that build clients install it too.
        .unwrap_or_else(|e| panic!("HTTP client: {e}"))
}

/// A client with argus's user agent and the given timeouts and redirect policy.
pub fn client(
    connect_timeout: Duration,
    timeout: Option<Duration>,
    redirects: reqwest::redirect::Policy,
) -> reqwest::Client {
    build(builder(connect_timeout, timeout).redirect(redirects))
}

/// How often and how patiently a request is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all (1: no retry).
    pub attempts: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Retry {
    pub const NONE: Retry = Retry {
        attempts: 1,
        first_delay: Duration::ZERO,
        max_delay: Duration::ZERO,
    };

    pub fn new(attempts: u32, first_delay: Duration) -> Retry {
        Retry {
            attempts: attempts.max(1),
            first_delay,
            max_delay: first_delay * 16,
        }
    }

    /// The wait before attempt `attempt + 1` (attempt counts from 1): doubling from the
    /// first delay, capped, with up to 50% random jitter so that many clients retrying at
    /// once spread out.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .first_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_delay);
        let jitter = base.mul_f64(jitter_fraction() * 0.5);
        base + jitter
    }

    /// Runs `op` until it succeeds, `retryable` says no, or the attempts are used up.
    pub async fn run<T, E, F, Fut>(&self, mut op: F, retryable: impl Fn(&E) -> bool) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt = 1;
        loop {
            match op(attempt).await {
                Ok(value) => return Ok(value),
                Err(e) if attempt < self.attempts && retryable(&e) => {
                    tokio::time::sleep(self.delay(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A number in [0, 1) that differs between calls and processes (not for cryptography).
fn jitter_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// What a poll saw: done with a value, or not yet (with what is still missing).
pub enum Poll<T, P> {
    Ready(T),
    Pending(P),
}

/// Calls `check` until it is ready or `deadline` passes, waiting `interval` between calls
/// (never past the deadline). On timeout, returns the last pending observation.
/// `check` runs at least once, even with a deadline already past. With no deadline it
/// waits as long as it takes (for a condition raced against others, e.g. a signal).
pub async fn poll_until<T, P>(
    deadline: impl Into<Option<Instant>>,
    interval: Duration,
    mut check: impl AsyncFnMut() -> Poll<T, P>,
) -> Result<T, P> {
    let deadline = deadline.into();
    loop {
        let last = match check().await {
            Poll::Ready(value) => return Ok(value),
            Poll::Pending(p) => p,
        };
        let now = Instant::now();
        let wait = match deadline {
            Some(deadline) if now >= deadline => return Err(last),
            Some(deadline) => interval.min(deadline - now),
            None => interval,
        };
        tokio::time::sleep(wait).await;
    }
}

/// [`poll_until`] without a deadline, for a wait whose check can fail: calls `check`
/// every `interval` until it returns a value (`Ok(Some)`) or an error.
pub async fn poll_fallible<T, E>(
    interval: Duration,
    mut check: impl AsyncFnMut() -> Result<Option<T>, E>,
) -> Result<T, E> {
    let polled = poll_until(None, interval, async || match check().await {
        Ok(Some(value)) => Poll::Ready(Ok(value)),
        Ok(None) => Poll::Pending(()),
        Err(e) => Poll::Ready(Err(e)),
    })
    .await;
    match polled {
        Ok(result) => result,
        // Without a deadline a poll only ends when it is ready.
        Err(()) => unreachable!("poll_until without a deadline returned pending"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_with_bounded_jitter() {
        let retry = Retry::new(6, Duration::from_millis(100));
        for (attempt, base) in [(1, 100), (2, 200), (3, 400), (6, 1600), (9, 1600)] {
            let d = retry.delay(attempt).as_millis() as u64;
            assert!(d >= base && d <= base * 3 / 2, "attempt {attempt}: {d}");
        }
    }

    #[tokio::test]
    async fn retries_stop_at_the_limit_and_on_final_errors() {
        let retry = Retry::new(3, Duration::from_millis(1));
        let mut calls = 0;
        let r: Result<(), &str> = retry
            .run(
                |_| {
                    calls += 1;
                    async { Err("transient") }
                },
                |_| true,
            )
            .await;
        assert_eq!((r, calls), (Err("transient"), 3));
        let mut calls = 0;
        let _: Result<(), &str> = retry
            .run(
                |_| {
                    calls += 1;
                    async { Err("final") }
                },
                |_| false,
            )
            .await;
        assert_eq!(calls, 1);
    }

    #[tokio::test]
    async fn poll_until_returns_the_value_or_the_last_observation() {
        let mut n = 0;
        let got = poll_until(
            Instant::now() + Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                let n = n;
                async move {
                    if n == 3 {
                        Poll::Ready(n)
                    } else {
                        Poll::Pending(n)
                    }
                }
            },
        )
        .await;
        assert_eq!(got.ok(), Some(3));
        let late: Result<(), &str> = poll_until(
            Instant::now() + Duration::from_millis(20),
            Duration::from_millis(5),
            || async { Poll::Pending("still missing") },
        )
        .await;
        assert_eq!(late.err(), Some("still missing"));
    }
}
