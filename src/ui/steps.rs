//! The training progress bar: steps of the total, elapsed, ETA and the key metrics, on
//! stderr above the streamed log. Drawn only where the [`super::Printer`] allows bars
//! (an interactive stderr, not `-q`/`-v`/`--no-progress`), and only once the log showed a
//! verl line, so a custom job's log streams exactly as before.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A lazily shown bar of training steps.
pub struct StepBar {
    enabled: bool,
    label: String,
    bar: Option<ProgressBar>,
}

impl StepBar {
    pub fn new(enabled: bool, label: impl Into<String>) -> Self {
        Self {
            enabled,
            label: label.into(),
            bar: None,
        }
    }

    /// Runs `print` (which writes the log) with the bar cleared, then redraws it.
    pub fn suspend(&self, print: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Shows step `step` of `total` (unknown total: a counter), the time left when known
    /// (else indicatif's estimate from the steps seen so far) and a short summary.
    pub fn update(&mut self, step: u64, total: Option<u64>, eta_s: Option<f64>, summary: &str) {
        if !self.enabled {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_prefix(self.label.clone());
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        if let Some(total) = total
            && bar.length() != Some(total)
        {
            bar.set_length(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} steps · {elapsed} · {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
        } else if total.is_none() && bar.length().is_none() {
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} step {pos} · {elapsed} · {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
        }
        let moved = bar.position() != step && bar.position() > 0;
        bar.set_position(step);
        let left = match (total, eta_s) {
            (Some(t), _) if step >= t => None,
            (Some(_), Some(s)) => Some(Duration::from_secs(s.round() as u64)),
            (Some(_), None) if moved => Some(bar.eta()),
            _ => None,
        };
        let message = match left {
            Some(d) => format!("eta {} · {summary}", indicatif::HumanDuration(d)),
            None => summary.to_string(),
        };
        bar.set_message(message);
    }

    /// Leaves the last state on screen.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.abandon();
        }
    }
}
