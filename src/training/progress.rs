//! How far a job is: the current step of the total, elapsed time, an ETA from the recent
//! step times, and the few metrics researchers look at first. Pure: a table and times in,
//! a summary out; [`Follower`] turns a streamed log into step updates for a progress bar.

use std::time::Duration;

use serde::Serialize;

use super::metrics::{KeyPattern, LineKind, MAX_LINE, Table, format_number};

/// The metrics shown at a glance, by label, each the first of its candidates present.
/// `*` in a candidate is a glob (the first matching key in log order).
const KEY_METRICS: &[(&str, &[&str])] = &[
    ("score", &["critic/score/mean", "critic/rewards/mean"]),
    (
        "val",
        &[
            "val-core/*/reward/mean@*",
            "val-core/*/acc/mean@*",
            "val-core/*",
            "val/loss",
        ],
    ),
    ("resp_len", &["response_length/mean"]),
    ("loss", &["train/loss"]),
];

/// Steps whose `timing_s/step` the ETA averages.
const ETA_WINDOW: usize = 10;
/// Steps looked back at for them (a follower asks at every step: a bounded look, never a
/// scan of the whole log).
const ETA_LOOKBACK: usize = 1000;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyMetric {
    pub label: String,
    pub key: String,
    pub step: u64,
    /// A number, or `"nan"` / `"inf"` (JSON has neither).
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Progress {
    /// The last step logged.
    pub step: Option<u64>,
    /// `Total training steps`, or `trainer.total_training_steps` from the entrypoint.
    pub total_steps: Option<u64>,
    /// Percent of the total done.
    pub percent: Option<f64>,
    pub elapsed_s: Option<f64>,
    /// Seconds left (running jobs only).
    pub eta_s: Option<f64>,
    /// How the ETA was reckoned: `timing_s/step` (mean of the last steps' own timing) or
    /// `elapsed` (elapsed time over the steps this job has done).
    pub eta_from: Option<String>,
    pub metrics: Vec<KeyMetric>,
}

/// The latest value of each key metric present.
pub fn key_metrics(table: &Table) -> Vec<KeyMetric> {
    KeyColumns::new().of(table)
}

/// A key metric's pattern and the first column it matches.
type Candidate = (KeyPattern, Option<usize>);

/// Where the key metrics are in a table, found once per name: a table's names only grow,
/// so a follower looks at each new name once, not at every name at every step.
#[derive(Debug)]
struct KeyColumns {
    /// Per label, its candidates in order, each with its first matching column.
    candidates: Vec<(&'static str, Vec<Candidate>)>,
    /// Names of the table already looked at.
    seen: usize,
}

impl KeyColumns {
    fn new() -> Self {
        KeyColumns {
            candidates: KEY_METRICS
                .iter()
                .map(|(label, candidates)| {
                    let patterns = candidates
                        .iter()
                        .filter_map(|p| KeyPattern::parse(p).ok())
                        .map(|p| (p, None))
                        .collect();
                    (*label, patterns)
                })
                .collect(),
            seen: 0,
        }
    }

    fn of(&mut self, table: &Table) -> Vec<KeyMetric> {
        let keys = table.keys();
        for (c, key) in keys.iter().enumerate().skip(self.seen) {
            for (_, patterns) in &mut self.candidates {
                for (pattern, found) in patterns.iter_mut() {
                    if found.is_none() && pattern.is_match(key) {
                        *found = Some(c);
                    }
                }
            }
        }
        self.seen = keys.len();
        let mut out = Vec::new();
        for (label, patterns) in &self.candidates {
            let found = patterns.iter().find_map(|(_, column)| {
                column.and_then(|c| table.latest(c).map(|(step, v)| (c, step, v)))
            });
            if let Some((column, step, value)) = found {
                out.push(KeyMetric {
                    label: label.to_string(),
                    key: keys[column].clone(),
                    step,
                    value: if value.is_finite() {
                        serde_json::Value::from(value)
                    } else {
                        serde_json::Value::from(format_number(value))
                    },
                });
            }
        }
        out
    }
}

/// The summary of a job's progress. `elapsed` is the job's run time so far (or in all,
/// once ended); `running` enables the ETA. None when the log has no verl lines.
pub fn summarize(
    table: &Table,
    total_fallback: Option<u64>,
    elapsed: Option<Duration>,
    running: bool,
) -> Option<Progress> {
    let total = table.total_steps.or(total_fallback);
    if table.is_empty() && table.total_steps.is_none() {
        return None;
    }
    let step = table.last_step();
    let percent = match (step, total) {
        (Some(s), Some(t)) if t > 0 => Some((s as f64 / t as f64 * 100.0).min(100.0)),
        _ => None,
    };
    let (eta_s, eta_from) = match (running, step, total) {
        (true, Some(s), Some(t)) if t > s => eta(table, t - s, elapsed),
        _ => (None, None),
    };
    Some(Progress {
        step,
        total_steps: total,
        percent,
        elapsed_s: elapsed.map(|d| d.as_secs_f64()),
        eta_s,
        eta_from,
        metrics: key_metrics(table),
    })
}

fn eta(table: &Table, remaining: u64, elapsed: Option<Duration>) -> (Option<f64>, Option<String>) {
    if let Some(c) = table.column_of("timing_s/step") {
        let recent: Vec<f64> = table
            .rows()
            .rev()
            .take(ETA_LOOKBACK)
            .filter_map(|r| r.get(c))
            .filter(|v| v.is_finite() && *v >= 0.0)
            .take(ETA_WINDOW)
            .collect();
        if !recent.is_empty() {
            let mean = recent.iter().sum::<f64>() / recent.len() as f64;
            return (Some(mean * remaining as f64), Some("timing_s/step".into()));
        }
    }
    let Some(elapsed) = elapsed else {
        return (None, None);
    };
    // Steps this log trained (a resumed job starts at its checkpoint's step).
    let step_zero = table.rows().next().is_some_and(|r| r.step == 0);
    let done = table.rows().len() - usize::from(step_zero);
    if done == 0 {
        return (None, None);
    }
    (
        Some(elapsed.as_secs_f64() / done as f64 * remaining as f64),
        Some("elapsed".into()),
    )
}

/// `trainer.total_training_steps=N` in an entrypoint (the last one wins, as in Hydra).
pub fn total_from_entrypoint(entrypoint: &str) -> Option<u64> {
    shlex::split(entrypoint)?
        .iter()
        .rev()
        .find_map(|w| w.strip_prefix("trainer.total_training_steps="))
        .and_then(|v| v.trim_matches(['\'', '"']).parse().ok())
}

/// One change a progress bar shows.
#[derive(Debug, Clone, PartialEq)]
pub struct StepUpdate {
    pub step: u64,
    pub total: Option<u64>,
    /// Seconds left, from the recent steps' `timing_s/step` (None without it).
    pub eta_s: Option<f64>,
    /// The key metrics, short: `score 0.42 · val 0.51`.
    pub summary: String,
}

/// Follows a log as it streams (frames cut anywhere) and says when the step changes.
/// Linear in the log and bounded: a line is held only until its end (at most
/// [`MAX_LINE`] bytes of it; a longer one is skipped), each line is looked at once.
#[derive(Debug)]
pub struct Follower {
    /// The start of a line whose end has not come yet.
    partial: String,
    /// The line being received is longer than [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    table: Table,
    seen_step: bool,
    keys: KeyColumns,
}

impl Default for Follower {
    fn default() -> Self {
        Follower {
            partial: String::new(),
            skipping: false,
            table: Table::default(),
            seen_step: false,
            keys: KeyColumns::new(),
        }
    }
}

impl Follower {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes a piece of the log; returns the new state when a step or the total appeared.
    pub fn feed(&mut self, text: &str) -> Option<StepUpdate> {
        let mut changed = false;
        let mut rest = text;
        while let Some(end) = rest.find('\n') {
            let piece = &rest[..end];
            rest = &rest[end + 1..];
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let kind = if self.partial.is_empty() {
                self.table.push_line(piece)
            } else {
                self.partial.push_str(piece);
                let kind = self.table.push_line(&self.partial);
                self.partial.clear();
                kind
            };
            match kind {
                LineKind::Step(_) => {
                    self.seen_step = true;
                    changed = true;
                }
                LineKind::Total => changed = true,
                LineKind::Other => {}
            }
        }
        if !self.skipping {
            if self.partial.len() + rest.len() > MAX_LINE {
                self.partial = String::new();
                self.skipping = true;
                self.table.dropped.long_lines += 1;
            } else {
                self.partial.push_str(rest);
            }
        }
        if !changed {
            return None;
        }
        let step = self.table.last_step().unwrap_or(0);
        let eta_s = match self.table.total_steps {
            Some(total) if total > step => eta(&self.table, total - step, None).0,
            _ => None,
        };
        Some(StepUpdate {
            step,
            total: self.table.total_steps,
            eta_s,
            summary: self
                .keys
                .of(&self.table)
                .iter()
                .map(|m| format!("{} {}", m.label, short(&m.value)))
                .collect::<Vec<_>>()
                .join(" · "),
        })
    }

    /// Whether any verl line was seen (a custom job's log has none: no bar).
    pub fn is_verl(&self) -> bool {
        self.seen_step || self.table.total_steps.is_some()
    }
}

fn short(value: &serde_json::Value) -> String {
    match value.as_f64() {
        Some(v) if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) => format!("{v:.3e}"),
        Some(v) => {
            let text = format!("{v:.4}");
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        None => value.as_str().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
(TaskRunner pid=1) Total training steps: 10
(TaskRunner pid=1) step:0 - val-core/openai/gsm8k/reward/mean@1:0.1
(TaskRunner pid=1) step:1 - critic/score/mean:0.2 - response_length/mean:100 - timing_s/step:3.0
(TaskRunner pid=1) step:2 - critic/score/mean:0.3 - response_length/mean:110 - timing_s/step:5.0
(TaskRunner pid=1) step:3 - critic/score/mean:nan - response_length/mean:120 - timing_s/step:4.0 - val-core/openai/gsm8k/reward/mean@1:0.4
";

    #[test]
    fn summary_of_a_running_job() {
        let t = Table::from_text("j", LOG);
        let p = summarize(&t, None, Some(Duration::from_secs(60)), true).unwrap();
        assert_eq!(p.step, Some(3));
        assert_eq!(p.total_steps, Some(10));
        assert_eq!(p.percent, Some(30.0));
        assert_eq!(p.eta_s, Some(4.0 * 7.0));
        assert_eq!(p.eta_from.as_deref(), Some("timing_s/step"));
        let m: Vec<(&str, &str, u64, serde_json::Value)> = p
            .metrics
            .iter()
            .map(|m| (m.label.as_str(), m.key.as_str(), m.step, m.value.clone()))
            .collect();
        assert_eq!(
            m,
            [
                ("score", "critic/score/mean", 3, "nan".into()),
                ("val", "val-core/openai/gsm8k/reward/mean@1", 3, 0.4.into()),
                ("resp_len", "response_length/mean", 3, 120.0.into()),
            ]
        );
        // Ended: no ETA.
        let p = summarize(&t, None, Some(Duration::from_secs(60)), false).unwrap();
        assert_eq!(p.eta_s, None);
    }

    #[test]
    fn eta_falls_back_to_elapsed_and_total_to_the_entrypoint() {
        let t = Table::from_text("j", "step:5 - a:1\nstep:6 - a:2\n");
        let p = summarize(&t, Some(10), Some(Duration::from_secs(20)), true).unwrap();
        assert_eq!(p.total_steps, Some(10));
        assert_eq!(
            (p.eta_s, p.eta_from.as_deref()),
            (Some(40.0), Some("elapsed"))
        );
        assert_eq!(
            total_from_entrypoint(
                "python3 -m verl.trainer.main_ppo trainer.total_training_steps=5 'trainer.total_training_steps=7'"
            ),
            Some(7)
        );
        assert!(summarize(&Table::from_text("j", "hello\n"), Some(3), None, true).is_none());
    }

    #[test]
    fn a_follower_sees_steps_across_frame_boundaries() {
        let mut f = Follower::new();
        assert_eq!(f.feed("hello\nTotal training st"), None);
        assert!(!f.is_verl());
        let u = f.feed("eps: 4\nstep:1 - critic/score/mean:0.25").unwrap();
        assert_eq!((u.step, u.total), (0, Some(4)));
        let u = f
            .feed(" - response_length/mean:12 - timing_s/step:2.5\n")
            .unwrap();
        assert_eq!(u.step, 1);
        assert_eq!(u.eta_s, Some(7.5));
        assert_eq!(u.summary, "score 0.25 · resp_len 12");
        assert!(f.is_verl());
    }

    #[test]
    fn a_follower_holds_no_more_than_a_line_and_skips_longer_ones() {
        let mut f = Follower::new();
        let chunk = "x".repeat(1 << 20);
        for _ in 0..6 {
            assert_eq!(f.feed(&chunk), None);
            assert!(f.partial.capacity() <= MAX_LINE, "{}", f.partial.capacity());
        }
        // The end of the long line, then lines as usual, in one frame.
        let u = f
            .feed("tail\nstep:3 - critic/score/mean:0.5\nstep:4 - a:1\n")
            .unwrap();
        assert_eq!(u.step, 4);
        assert_eq!(u.summary, "score 0.5");
        assert_eq!(f.table.dropped.long_lines, 1);
        assert_eq!(f.table.rows().len(), 2);
    }

    #[test]
    fn a_follower_looks_at_each_name_once() {
        // Names only grow: the key metrics are found among the new ones, and the latest
        // value is the table's, whatever step logged it.
        let mut f = Follower::new();
        f.feed("step:0 - val-core/x/reward/mean@1:0.1\n").unwrap();
        for step in 1..50 {
            let u = f
                .feed(&format!("step:{step} - critic/score/mean:{step}\n"))
                .unwrap();
            assert_eq!(u.summary, format!("score {step} \u{b7} val 0.1"));
        }
        assert_eq!(f.keys.seen, 2);
        assert_eq!(key_metrics(&f.table).len(), 2);
    }
}
