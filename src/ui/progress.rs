//! Reporter traits for library code, and their indicatif implementation.
//!
//! A [`Task`] is one unit of slow work (a container starting, a download, debootstrap).
//! With bars it is a spinner on stderr; without (not a terminal, `--no-progress`, `-v`)
//! only its final line is printed, so logs stay readable.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How library code announces slow work.
pub trait Reporter: Send + Sync {
    fn task(&self, label: &str) -> Box<dyn Task>;
    /// A line for the user now, bars or not (e.g. who holds a lock being waited for).
    fn note(&self, message: &str) {
        let _ = message;
    }
}

/// One unit of slow work.
pub trait Task: Send + Sync {
    /// What it is doing now.
    fn update(&self, message: &str);
    /// Byte or item progress, when the total is known.
    fn progress(&self, done: u64, total: Option<u64>) {
        let _ = (done, total);
    }
    fn done(&self, message: &str);
    fn fail(&self, message: &str);
}

pub struct ProgressReporter {
    multi: MultiProgress,
    bars: bool,
    quiet: bool,
}

impl ProgressReporter {
    pub fn new(bars: bool, quiet: bool) -> Self {
        let target = if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Self {
            multi: MultiProgress::with_draw_target(target),
            bars,
            quiet,
        }
    }
}

impl Reporter for ProgressReporter {
    fn note(&self, message: &str) {
        if self.quiet {
            return;
        }
        let message = super::safe(message);
        if self.bars {
            let _ = self.multi.println(message);
        } else {
            eprintln!("{message}");
        }
    }

    fn task(&self, label: &str) -> Box<dyn Task> {
        let bar = if self.bars {
            let bar = self.multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix}: {wide_msg} {elapsed:>4}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            Some(bar)
        } else {
            None
        };
        Box::new(IndicatifTask {
            label: label.to_string(),
            bar,
            quiet: self.quiet,
            started: Instant::now(),
        })
    }
}

struct IndicatifTask {
    label: String,
    bar: Option<ProgressBar>,
    quiet: bool,
    started: Instant,
}

impl IndicatifTask {
    fn finish(&self, mark: &str, message: &str) {
        let line = format!(
            "{mark} {}: {message} ({:.1}s)",
            self.label,
            self.started.elapsed().as_secs_f64()
        );
        let line = super::safe(&line).into_owned();
        match &self.bar {
            Some(bar) => {
                bar.set_style(
                    ProgressStyle::with_template("{msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.finish_with_message(line);
            }
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }
}

impl Task for IndicatifTask {
    fn update(&self, message: &str) {
        tracing::debug!(task = %self.label, "{message}");
        if let Some(bar) = &self.bar {
            bar.set_message(super::safe(&truncate(message, 100)).into_owned());
        }
    }

    fn progress(&self, done: u64, total: Option<u64>) {
        if let Some(bar) = &self.bar {
            let text = match total {
                Some(total) => format!("{} / {}", human_bytes(done), human_bytes(total)),
                None => human_bytes(done),
            };
            bar.set_message(text);
        }
    }

    fn done(&self, message: &str) {
        self.finish("✓", message);
    }

    fn fail(&self, message: &str) {
        self.finish("✗", message);
    }
}

fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    let line = text.lines().last().unwrap_or("").trim();
    if line.chars().count() <= max {
        Cow::Borrowed(line)
    } else {
        Cow::Owned(line.chars().take(max).chain("…".chars()).collect())
    }
}

pub fn human_bytes(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}
