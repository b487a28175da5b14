//! An attempt's steps as its driver's log streams: the last step, when it last changed
//! (what a hang is judged by), when the first came, and the log's end (what is saved as
//! the job's log when Ray's copy is gone with the node its driver ran on).

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use crate::training::progress::Follower;

/// What the attempt's log showed, shared with the log's reader.
#[derive(Debug)]
pub struct Steps {
    pub last_step: Option<u64>,
    /// When the step last changed (or the watch began; before the first step, when the
    /// log last said anything: verl loading a model or a checkpoint is not a hang).
    pub changed: Instant,
    pub first_step_at: Option<SystemTime>,
    /// The log as it streamed, its last [`LOG_CAP`] bytes: what is saved as the job's
    /// log when Ray's copy is gone with the node its driver ran on.
    log: String,
    /// Bytes dropped from the log's start.
    dropped: usize,
    follower: Follower,
}

/// The most of a streamed log kept in memory (its end: where the error and the last
/// steps are).
pub const LOG_CAP: usize = 32 << 20;

/// The newest step a whole log shows (a log read at once: Ray's copy, or the stream
/// extended by the dead node's copy), if any.
pub fn newest_step(log: &str) -> Option<u64> {
    Follower::new().feed(&format!("{log}\n")).map(|u| u.step)
}

impl Steps {
    pub fn new() -> Arc<Mutex<Steps>> {
        Arc::new(Mutex::new(Steps {
            last_step: None,
            changed: Instant::now(),
            first_step_at: None,
            log: String::new(),
            dropped: 0,
            follower: Follower::new(),
        }))
    }

    /// The log kept, marked where its start was dropped.
    pub fn take_log(&mut self) -> String {
        let log = std::mem::take(&mut self.log);
        match self.dropped {
            0 => log,
            n => format!("[argus: the first {n} bytes of the streamed log were not kept]\n{log}"),
        }
    }

    fn keep(&mut self, text: &str) {
        self.log.push_str(text);
        if self.log.len() > LOG_CAP {
            let mut cut = self.log.len() - LOG_CAP / 2;
            while !self.log.is_char_boundary(cut) {
                cut += 1;
            }
            self.log.drain(..cut);
            self.dropped += cut;
        }
    }

    pub fn feed(&mut self, text: &str) {
        self.keep(text);
        if self.last_step.is_none() && !text.trim().is_empty() {
            self.changed = Instant::now();
        }
        let Some(update) = self.follower.feed(text) else {
            return;
        };
        self.saw(update.step);
    }

    /// The log showed `step`.
    pub fn saw(&mut self, step: u64) {
        if self.last_step != Some(step) {
            self.last_step = Some(step);
            self.changed = Instant::now();
            if step >= 1 && self.first_step_at.is_none() {
                self.first_step_at = Some(SystemTime::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn output_before_the_first_step_is_a_sign_of_life_and_after_it_only_steps_are() {
        let steps = Steps::new();
        let mut s = steps.lock().unwrap();
        let start = s.changed;
        std::thread::sleep(Duration::from_millis(5));
        s.feed("Loading checkpoint shards: 50%\n");
        assert!(s.changed > start, "loading is not a hang");
        s.feed("(TaskRunner pid=1) step:3 - actor/pg_loss:0.1\n");
        assert_eq!(s.last_step, Some(3));
        assert!(s.first_step_at.is_some());
        let at = s.changed;
        std::thread::sleep(Duration::from_millis(5));
        s.feed("a warning that is not a step\n");
        assert_eq!(s.changed, at, "after the first step only a new step counts");
    }

    #[test]
    fn the_kept_log_is_its_end_and_says_what_was_dropped() {
        let steps = Steps::new();
        let mut s = steps.lock().unwrap();
        let line = format!("{}\n", "é".repeat(1000));
        for _ in 0..(LOG_CAP / line.len() + 10) {
            s.feed(&line);
        }
        let log = s.take_log();
        assert!(log.len() <= LOG_CAP + 200);
        assert!(log.starts_with("[argus: the first "));
        assert!(log.ends_with(&line));
    }
}
