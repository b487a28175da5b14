//! The table of step × metric a driver log holds, and its text forms (CSV, JSON, a table
//! for humans). Pure: lines or readers in, values and strings out.
//!
//! Linear in the log and bounded whatever it holds:
//!
//! - steps are kept in a `BTreeMap` keyed by step, so a step costs O(log n) in any order
//!   (a log written backwards reads as fast as one written forwards);
//! - a metric name is interned once (at most [`MAX_KEYS`] of them, each at most
//!   [`MAX_KEY_LEN`] bytes; the values of any other are dropped and counted in
//!   [`Dropped`]) and a step keeps only what it logged: its columns, shared with the steps
//!   before it that logged the same ones (verl logs the same keys every step), and one
//!   `f64` each. So memory follows the values logged, never steps × names: 20,000 steps ×
//!   100 metrics take about 16 MB, and a log whose every step logs new names stays at
//!   what its first [`MAX_KEYS`] names hold;
//! - a line longer than [`MAX_LINE`] bytes is skipped without being held whole;
//! - CSV and JSON are written row by row to the writer, never built whole in memory.
//!
//! A step logged twice (verl logs the validation before training at step 0 on its own
//! line, a resumed job logs its first validation at the checkpoint's step) merges, later
//! values winning.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::sync::Arc;

use globset::{Glob, GlobMatcher};

use super::log::{Line, parse_line};

mod write;
pub use write::{format_number, human_number};

/// Distinct metric names a table keeps (verl logs about 100; a few thousand leave room for
/// every per-dataset validation key). The values of names beyond are dropped.
pub const MAX_KEYS: usize = 4096;
/// Bytes of a metric name (verl's longest are about 60).
pub const MAX_KEY_LEN: usize = 256;
/// Bytes of a line: [`MAX_KEYS`] metrics of the longest names fit; a longer line is skipped.
pub const MAX_LINE: usize = 4 << 20;

/// What a log held that the table left out, so a caller can say so once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Values of metrics first named after [`MAX_KEYS`] others.
    pub over_key_limit: u64,
    /// Values of metrics whose name is longer than [`MAX_KEY_LEN`] bytes.
    pub long_names: u64,
    /// Lines longer than [`MAX_LINE`] bytes.
    pub long_lines: u64,
}

impl Dropped {
    pub fn is_empty(&self) -> bool {
        *self == Dropped::default()
    }

    fn add(&mut self, other: Dropped) {
        self.over_key_limit += other.over_key_limit;
        self.long_names += other.long_names;
        self.long_lines += other.long_lines;
    }

    /// One sentence for a warning, or None when nothing was left out.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.over_key_limit > 0 {
            parts.push(format!(
                "{} value(s) of metrics named after the first {MAX_KEYS} names",
                self.over_key_limit
            ));
        }
        if self.long_names > 0 {
            parts.push(format!(
                "{} value(s) of metrics with names longer than {MAX_KEY_LEN} bytes",
                self.long_names
            ));
        }
        if self.long_lines > 0 {
            parts.push(format!(
                "{} line(s) longer than {} MiB",
                self.long_lines,
                MAX_LINE >> 20
            ));
        }
        (!parts.is_empty()).then(|| format!("left out {}", parts.join(", ")))
    }
}

/// Columns logged together, shared by the rows that logged them.
type Layout = Arc<Vec<u32>>;

/// One logged step.
#[derive(Debug, Clone)]
pub struct Row {
    pub step: u64,
    /// Index into [`Table::jobs`] of the job that logged it (0 for a single log).
    pub job: usize,
    /// The columns this step logged, ascending; shared with earlier steps that logged the
    /// same ones (an `Arc` of a `Vec`: one word in the row, not two).
    columns: Layout,
    /// The value of each of `columns`.
    values: Box<[f64]>,
}

impl Row {
    /// The value of column `column`, if this step logged it.
    pub fn get(&self, column: usize) -> Option<f64> {
        let column = u32::try_from(column).ok()?;
        self.columns
            .binary_search(&column)
            .ok()
            .map(|i| self.values[i])
    }

    /// `(column, value)` of every metric this step logged, by column.
    fn pairs(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        self.columns
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }
}

/// Steps × metrics of one log, or of a chain of resumed jobs.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Job ids, oldest first (one for a single log).
    pub jobs: Vec<String>,
    /// Metric names in the order they were first logged (at most [`MAX_KEYS`]).
    keys: Vec<String>,
    index: HashMap<String, u32>,
    rows: BTreeMap<u64, Row>,
    /// `Total training steps: N`, the last one logged.
    pub total_steps: Option<u64>,
    /// What the log held that the table left out.
    pub dropped: Dropped,
    /// Column of each position of the previous step line (None: a dropped name): verl
    /// logs the same keys in the same order every step, so a key is usually found without
    /// hashing.
    recent: Vec<Option<u32>>,
    /// The columns of the last row made, for the next row to share.
    layout: Option<Layout>,
    /// Per column, its value at the last step that logged it (asked at every step by a
    /// follower of a streamed log: never a scan of the steps).
    latest: Vec<Option<(u64, f64)>>,
}

impl Table {
    /// An empty table for the log of `job`.
    pub fn new(job: impl Into<String>) -> Self {
        Table {
            jobs: vec![job.into()],
            ..Default::default()
        }
    }

    /// Parses a whole log held in memory.
    pub fn from_text(job: impl Into<String>, text: &str) -> Self {
        let mut table = Table::new(job);
        for line in text.lines() {
            table.push_line(line);
        }
        table
    }

    /// Parses a log from a reader, a line at a time: the log is never held whole, nor a
    /// line longer than [`MAX_LINE`].
    pub fn from_reader(job: impl Into<String>, mut reader: impl BufRead) -> std::io::Result<Self> {
        let mut table = Table::new(job);
        let mut buf = Vec::with_capacity(8192);
        while let Some(whole) = read_line_capped(&mut reader, &mut buf, MAX_LINE)? {
            if !whole {
                table.dropped.long_lines += 1;
                continue;
            }
            let _ = match std::str::from_utf8(&buf) {
                Ok(line) => table.push_line(line),
                Err(_) => table.push_line(&String::from_utf8_lossy(&buf)),
            };
        }
        Ok(table)
    }

    /// Takes one line of a log; returns what it was.
    pub fn push_line(&mut self, line: &str) -> LineKind {
        if line.len() > MAX_LINE {
            self.dropped.long_lines += 1;
            return LineKind::Other;
        }
        match parse_line(line) {
            Line::Total(n) => {
                self.total_steps = Some(n);
                LineKind::Total
            }
            Line::Step { step, metrics } => {
                self.push_step(step, &metrics);
                LineKind::Step(step)
            }
            Line::Other => LineKind::Other,
        }
    }

    /// Records the metrics of one step line.
    pub fn push_step(&mut self, step: u64, metrics: &[(&str, f64)]) {
        let mut pairs = Vec::with_capacity(metrics.len());
        let mut recent = std::mem::take(&mut self.recent);
        recent.resize(metrics.len(), None);
        for (position, (key, value)) in metrics.iter().enumerate() {
            let column = match recent[position] {
                Some(c) if self.keys[c as usize] == *key => Some(c),
                _ => self.column(key),
            };
            recent[position] = column;
            if let Some(c) = column {
                pairs.push((c, *value));
            }
        }
        self.recent = recent;
        let job = self.jobs.len().saturating_sub(1);
        self.insert(step, job, pairs);
    }

    /// The column of `key`, made when new; None (and the value counted as dropped) for a
    /// name too long or beyond [`MAX_KEYS`].
    fn column(&mut self, key: &str) -> Option<u32> {
        let column = self.intern(key);
        if column.is_none() {
            if key.len() > MAX_KEY_LEN {
                self.dropped.long_names += 1;
            } else {
                self.dropped.over_key_limit += 1;
            }
        }
        column
    }

    /// The column of `key`, made when new and there is room (nothing counted).
    fn intern(&mut self, key: &str) -> Option<u32> {
        if let Some(&c) = self.index.get(key) {
            return Some(c);
        }
        if key.len() > MAX_KEY_LEN || self.keys.len() >= MAX_KEYS {
            return None;
        }
        let c = self.keys.len() as u32;
        self.latest.push(None);
        self.keys.push(key.to_string());
        self.index.insert(key.to_string(), c);
        Some(c)
    }

    /// Stores `(column, value)`s at `step`: a new row, or merged into the step's row (the
    /// new values win). O(log steps + values) whatever the order of steps.
    fn insert(&mut self, step: u64, job: usize, mut pairs: Vec<(u32, f64)>) {
        // Stable, and linear on the usual already-sorted line; of a key logged twice on
        // one line the last stays.
        pairs.sort_by_key(|&(c, _)| c);
        pairs.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = later.1;
            }
            same
        });
        match self.rows.get(&step) {
            Some(row) => pairs = merge(row.pairs(), pairs),
            // Every name of the line was left out: no step to show, nothing to hold.
            None if pairs.is_empty() => return,
            None => {}
        }
        let columns: Vec<u32> = pairs.iter().map(|&(c, _)| c).collect();
        let columns = match &self.layout {
            Some(shared) if **shared == columns => shared.clone(),
            _ => {
                let made = Arc::new(columns);
                self.layout = Some(made.clone());
                made
            }
        };
        for &(c, v) in &pairs {
            let latest = &mut self.latest[c as usize];
            if latest.is_none_or(|(at, _)| at <= step) {
                *latest = Some((step, v));
            }
        }
        let values = pairs.iter().map(|&(_, v)| v).collect();
        self.rows.insert(
            step,
            Row {
                step,
                job,
                columns,
                values,
            },
        );
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The steps, in order.
    pub fn rows(&self) -> impl DoubleEndedIterator<Item = &Row> + ExactSizeIterator + '_ {
        self.rows.values()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn column_of(&self, key: &str) -> Option<usize> {
        self.index.get(key).map(|&c| c as usize)
    }

    /// The last step logged.
    pub fn last_step(&self) -> Option<u64> {
        self.rows.last_key_value().map(|(&step, _)| step)
    }

    /// The most recent value of a metric, with its step.
    pub fn latest(&self, column: usize) -> Option<(u64, f64)> {
        self.latest.get(column).copied().flatten()
    }

    /// `(step, value)` of every step that logged the metric.
    pub fn series(&self, column: usize) -> Vec<(u64, f64)> {
        self.rows()
            .filter_map(|r| r.get(column).map(|v| (r.step, v)))
            .collect()
    }

    /// The logs of a chain of resumed jobs as one table, oldest first. A resumed job
    /// starts again from its checkpoint, so the steps an earlier job logged after the
    /// point where the next one starts are replaced by the next one's; at that first
    /// step both merge (the later values win).
    pub fn chain(tables: Vec<Table>) -> Table {
        let mut tables = tables.into_iter();
        let Some(mut out) = tables.next() else {
            return Table::default();
        };
        for next in tables {
            let job = out.jobs.len();
            out.jobs.extend(next.jobs.iter().cloned());
            if let Some(&first) = next.rows.keys().next() {
                // Keeps the steps up to `first`, inclusive.
                if let Some(after) = first.checked_add(1)
                    && !out.rows.split_off(&after).is_empty()
                {
                    out.latest.iter_mut().for_each(|l| *l = None);
                    for row in out.rows.values() {
                        for (c, v) in row.pairs() {
                            out.latest[c as usize] = Some((row.step, v));
                        }
                    }
                }
            }
            out.total_steps = next.total_steps.or(out.total_steps);
            out.dropped.add(next.dropped);
            let columns: Vec<Option<u32>> = next.keys.iter().map(|k| out.intern(k)).collect();
            out.recent.clear();
            for row in next.rows.into_values() {
                let mut lost = 0;
                let pairs: Vec<(u32, f64)> = row
                    .pairs()
                    .filter_map(|(c, v)| {
                        let mapped = columns[c as usize].map(|c| (c, v));
                        lost += u64::from(mapped.is_none());
                        mapped
                    })
                    .collect();
                // A name this table had no room for: counted once per value, as in a log.
                out.dropped.over_key_limit += lost;
                out.insert(row.step, job + row.job, pairs);
            }
        }
        out
    }

    /// The columns chosen by `patterns` (globs; `*` also matches `/`), in the order of the
    /// patterns, each pattern's matches in the order the log has them. No patterns: all.
    pub fn select(&self, patterns: &[KeyPattern]) -> Result<Vec<usize>, String> {
        if patterns.is_empty() {
            return Ok((0..self.keys.len()).collect());
        }
        let mut out = Vec::new();
        let mut chosen = vec![false; self.keys.len()];
        for pattern in patterns {
            let mut matched = false;
            for (c, key) in self.keys.iter().enumerate() {
                if pattern.is_match(key) {
                    matched = true;
                    if !chosen[c] {
                        chosen[c] = true;
                        out.push(c);
                    }
                }
            }
            if !matched {
                return Err(pattern.text.clone());
            }
        }
        Ok(out)
    }
}

/// Two `(column, value)` lists sorted by column as one, `newer` winning on a tie.
fn merge(older: impl Iterator<Item = (u32, f64)>, newer: Vec<(u32, f64)>) -> Vec<(u32, f64)> {
    let mut out = Vec::with_capacity(newer.len());
    let mut older = older.peekable();
    for (c, v) in newer {
        while let Some(&(o, ov)) = older.peek() {
            if o > c {
                break;
            }
            if o < c {
                out.push((o, ov));
            }
            older.next();
        }
        out.push((c, v));
    }
    out.extend(older);
    out
}

/// Reads one line (its newline included) into `buf`, holding at most `max` bytes of it:
/// Some(true) a whole line, Some(false) a longer one (read past, `buf` left empty), None
/// at the end.
pub fn read_line_capped(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut read_any = false;
    let mut whole = true;
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(read_any.then_some(whole));
        }
        read_any = true;
        let (used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if whole && buf.len() + used > max {
            whole = false;
            buf.clear();
            buf.shrink_to(8192);
        }
        if whole {
            buf.extend_from_slice(&available[..used]);
        }
        reader.consume(used);
        if done {
            return Ok(Some(whole));
        }
    }
}

/// What a line turned out to be (for live followers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Total,
    Step(u64),
    Other,
}

/// A `--keys` glob.
#[derive(Debug, Clone)]
pub struct KeyPattern {
    pub text: String,
    matcher: GlobMatcher,
}

impl KeyPattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        let glob = Glob::new(text).map_err(|e| e.kind().to_string())?;
        Ok(KeyPattern {
            text: text.to_string(),
            matcher: glob.compile_matcher(),
        })
    }

    pub fn is_match(&self, key: &str) -> bool {
        self.matcher.is_match(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    const LOG: &str = "\
Total training steps: 4
step:0 - val-core/openai/gsm8k/reward/mean@1:0.1
step:1 - critic/score/mean:0.25 - actor/lr:1e-06 - timing_s/step:2.0
step:2 - critic/score/mean:9.9 - note:noise
step:2 - critic/score/mean:0.5 - actor/lr:1e-06 - timing_s/step:2.5 - actor/entropy:nan
";

    fn col(t: &Table, key: &str) -> usize {
        t.column_of(key).unwrap()
    }

    fn row(t: &Table, i: usize) -> &Row {
        t.rows().nth(i).unwrap()
    }

    fn json(t: &Table, columns: &[usize]) -> serde_json::Value {
        let mut out = Vec::new();
        t.write_json(columns, &|s| Cow::Borrowed(s), &mut out)
            .unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn steps_and_keys_in_log_order_missing_and_nan_kept_apart() {
        let t = Table::from_text("j", LOG);
        assert_eq!(t.total_steps, Some(4));
        assert_eq!(
            t.keys(),
            [
                "val-core/openai/gsm8k/reward/mean@1",
                "critic/score/mean",
                "actor/lr",
                "timing_s/step",
                "actor/entropy"
            ]
        );
        let steps: Vec<u64> = t.rows().map(|r| r.step).collect();
        assert_eq!(steps, [0, 1, 2]);
        assert_eq!(row(&t, 2).get(col(&t, "critic/score/mean")), Some(0.5));
        assert!(row(&t, 2).get(col(&t, "actor/entropy")).unwrap().is_nan());
        assert_eq!(row(&t, 1).get(col(&t, "actor/entropy")), None);
        assert_eq!(row(&t, 0).get(col(&t, "critic/score/mean")), None);
        assert_eq!(
            t.latest(col(&t, "val-core/openai/gsm8k/reward/mean@1")),
            Some((0, 0.1))
        );
    }

    #[test]
    fn reader_and_text_agree() {
        let a = Table::from_text("j", LOG);
        let b = Table::from_reader("j", LOG.as_bytes()).unwrap();
        let mut x = Vec::new();
        let mut y = Vec::new();
        a.write_csv(&a.select(&[]).unwrap(), &mut x).unwrap();
        b.write_csv(&b.select(&[]).unwrap(), &mut y).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn csv_is_python_flavoured() {
        let t = Table::from_text("j", LOG);
        let mut out = Vec::new();
        t.write_csv(&t.select(&[]).unwrap(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "step,val-core/openai/gsm8k/reward/mean@1,critic/score/mean,actor/lr,timing_s/step,actor/entropy\n\
             0,0.1,,,,\n\
             1,,0.25,1e-06,2,\n\
             2,,0.5,1e-06,2.5,nan\n"
        );
        for (v, text) in [
            (1e-6, "1e-06"),
            (1.5e16, "1.5e+16"),
            (-2.5e-7, "-2.5e-07"),
            (0.0001, "0.0001"),
            (123.0, "123"),
            (f64::NEG_INFINITY, "-inf"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(format_number(v), text);
            if v.is_finite() {
                assert_eq!(text.parse::<f64>().unwrap(), v);
            }
        }
    }

    #[test]
    fn numbers_for_people_are_short() {
        for (v, text) in [
            (0.19357677841133097, "0.193577"),
            (124.34130318696806, "124.341"),
            (1e-6, "1.0000e-6"),
            (-0.0123, "-0.0123"),
            (5.0, "5"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(human_number(v), text);
        }
    }

    #[test]
    fn out_of_order_and_repeated_steps_merge() {
        let t = Table::from_text(
            "j",
            "step:3 - a:3\nstep:1 - a:1\nstep:3 - b:30\nstep:2 - a:2\n",
        );
        let steps: Vec<u64> = t.rows().map(|r| r.step).collect();
        assert_eq!(steps, [1, 2, 3]);
        assert_eq!(row(&t, 2).get(col(&t, "a")), Some(3.0));
        assert_eq!(row(&t, 2).get(col(&t, "b")), Some(30.0));
    }

    #[test]
    fn a_chain_replaces_what_the_resumed_job_redid() {
        let old = Table::from_text(
            "old",
            "Total training steps: 6\nstep:1 - a:1\nstep:2 - a:2\nstep:3 - a:3 - b:3\nstep:4 - a:4\nstep:5 - a:5\n",
        );
        // Resumed from the step-4 checkpoint: validates at 4, trains from 5.
        let new = Table::from_text("new", "step:4 - v:0.4\nstep:5 - a:50\nstep:6 - a:60\n");
        let t = Table::chain(vec![old, new]);
        assert_eq!(t.jobs, ["old", "new"]);
        assert_eq!(t.total_steps, Some(6));
        let a = col(&t, "a");
        let got: Vec<(u64, usize, Option<f64>)> =
            t.rows().map(|r| (r.step, r.job, r.get(a))).collect();
        assert_eq!(
            got,
            [
                (1, 0, Some(1.0)),
                (2, 0, Some(2.0)),
                (3, 0, Some(3.0)),
                (4, 1, Some(4.0)),
                (5, 1, Some(50.0)),
                (6, 1, Some(60.0))
            ]
        );
        assert_eq!(row(&t, 3).get(col(&t, "v")), Some(0.4));
        assert_eq!(row(&t, 2).get(col(&t, "b")), Some(3.0));
    }

    #[test]
    fn globs_select_in_pattern_order_and_unmatched_patterns_are_named() {
        let t = Table::from_text("j", LOG);
        let p = |s: &str| KeyPattern::parse(s).unwrap();
        let cols = t.select(&[p("critic/*"), p("val-core/*")]).unwrap();
        assert_eq!(
            cols,
            [
                col(&t, "critic/score/mean"),
                col(&t, "val-core/openai/gsm8k/reward/mean@1")
            ]
        );
        assert_eq!(t.select(&[p("nope/*")]).unwrap_err(), "nope/*");
        assert!(KeyPattern::parse("a[").is_err());
    }

    #[test]
    fn steps_without_any_chosen_metric_are_left_out() {
        let t = Table::from_text("j", LOG);
        let mut out = Vec::new();
        t.write_csv(&[col(&t, "critic/score/mean")], &mut out)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "step,critic/score/mean\n1,0.25\n2,0.5\n"
        );
    }

    #[test]
    fn json_marks_non_finite_values() {
        let t = Table::from_text("j", LOG);
        let j = json(&t, &t.select(&[]).unwrap());
        assert_eq!(j["rows"][2]["metrics"]["actor/entropy"], "nan");
        assert_eq!(j["rows"][2]["metrics"]["critic/score/mean"], 0.5);
        assert_eq!(j["rows"][2]["job"], "j");
        assert!(j["rows"][1]["metrics"].get("actor/entropy").is_none());
    }
    #[test]
    fn metric_names_cannot_inject_formulas_into_csv() {
        let mut t = Table::new("j");
        t.push_step(
            1,
            &[
                ("=HYPERLINK(\"http://x\",\"y\")", 1.0),
                ("+1", 2.0),
                ("-2", 3.0),
                ("@SUM(A1)", 4.0),
                ("a,b", 5.0),
                ("plain/key", -6.0),
            ],
        );
        let mut out = Vec::new();
        t.write_csv(&t.select(&[]).unwrap(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "step,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",\"'+1\",\"'-2\",\"'@SUM(A1)\",\"a,b\",plain/key\n\
             1,1,2,3,4,5,-6\n"
        );
    }

    #[test]
    fn a_step_logged_before_the_others_moves_no_row() {
        // Steps in descending order: each new step sorts before every row held. A sorted
        // Vec shifts them all at each step (quadratic); the table must not. Where the
        // first row lives is observed at every step: it may move a few times (a B-tree
        // leaf splitting), never once per step.
        let n = 100_000u64;
        let mut t = Table::new("j");
        t.push_step(n, &[("a", 0.0), ("b", 1.0)]);
        let mut at = t.rows().last().unwrap() as *const Row;
        let mut moves = 0;
        for step in (1..n).rev() {
            t.push_step(step, &[("a", step as f64), ("b", 1.0)]);
            let now = t.rows().last().unwrap() as *const Row;
            if now != at {
                moves += 1;
                at = now;
            }
        }
        assert!(
            moves <= 64,
            "the first row moved {moves} times in {n} steps"
        );
        // And the table is the one the same lines give in ascending order.
        let mut up = Table::new("j");
        for step in 1..=n {
            up.push_step(
                step,
                &[("a", if step == n { 0.0 } else { step as f64 }), ("b", 1.0)],
            );
        }
        let (mut x, mut y) = (Vec::new(), Vec::new());
        t.write_csv(&t.select(&[]).unwrap(), &mut x).unwrap();
        up.write_csv(&up.select(&[]).unwrap(), &mut y).unwrap();
        assert!(x == y);
        assert_eq!(t.rows().len(), n as usize);
        assert_eq!(t.last_step(), Some(n));
    }

    /// Values the table holds: its memory, whatever the steps × names.
    fn stored(t: &Table) -> usize {
        t.rows().map(|r| r.values.len()).sum()
    }

    #[test]
    fn a_log_whose_every_step_logs_new_names_is_bounded() {
        let mut t = Table::new("j");
        let steps = 5000;
        for step in 0..steps {
            let names: Vec<String> = (0..10).map(|i| format!("s{step}/k{i}")).collect();
            let metrics: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), 1.0)).collect();
            t.push_step(step, &metrics);
        }
        assert_eq!(t.keys().len(), MAX_KEYS);
        // Each value kept once (not one slot per name known at its step), the rest counted;
        // a step none of whose names was kept holds nothing.
        assert_eq!(stored(&t), MAX_KEYS);
        assert_eq!(t.rows().len(), MAX_KEYS.div_ceil(10));
        assert_eq!(
            t.dropped,
            Dropped {
                over_key_limit: steps * 10 - MAX_KEYS as u64,
                ..Dropped::default()
            }
        );
        assert!(
            t.dropped
                .describe()
                .unwrap()
                .contains("after the first 4096 names"),
            "{:?}",
            t.dropped.describe()
        );
        // Names too long are never interned either.
        let long = "x".repeat(MAX_KEY_LEN + 1);
        let mut t = Table::new("j");
        t.push_step(1, &[(long.as_str(), 1.0), ("a", 2.0)]);
        assert_eq!(t.keys(), ["a"]);
        assert_eq!(t.dropped.long_names, 1);
    }

    #[test]
    fn steps_with_the_same_names_share_their_columns() {
        let t = Table::from_text("j", LOG);
        let values: usize = LOG
            .lines()
            .filter(|l| l.starts_with("step:") && !l.contains("noise"))
            .map(|l| l.matches(" - ").count())
            .sum();
        assert_eq!(stored(&t), values);
        let mut u = Table::new("j");
        for step in 0..1000 {
            u.push_step(step, &[("a", 1.0), ("b", 2.0)]);
        }
        let first = &u.rows().next().unwrap().columns;
        assert!(u.rows().all(|r| Arc::ptr_eq(&r.columns, first)));
    }

    #[test]
    fn a_chain_past_the_name_limit_counts_what_it_drops() {
        let names = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("{prefix}{i}")).collect()
        };
        let (a, b) = (names("a", MAX_KEYS), names("b", 100));
        let mut old = Table::new("old");
        old.push_step(1, &a.iter().map(|n| (n.as_str(), 1.0)).collect::<Vec<_>>());
        let mut new = Table::new("new");
        new.push_step(2, &b.iter().map(|n| (n.as_str(), 2.0)).collect::<Vec<_>>());
        new.push_step(3, &[("a0", 3.0)]);
        let t = Table::chain(vec![old, new]);
        assert_eq!(t.keys().len(), MAX_KEYS);
        assert_eq!(t.dropped.over_key_limit, 100);
        assert_eq!(t.latest(col(&t, "a0")), Some((3, 3.0)));
        // Step 2 logged only names there was no room for.
        let steps: Vec<u64> = t.rows().map(|r| r.step).collect();
        assert_eq!(steps, [1, 3]);
    }

    #[test]
    fn latest_values_survive_merges_and_chains() {
        let t = Table::from_text("j", "step:5 - a:5\nstep:3 - a:3 - b:3\nstep:5 - b:50\n");
        assert_eq!(t.latest(col(&t, "a")), Some((5, 5.0)));
        assert_eq!(t.latest(col(&t, "b")), Some((5, 50.0)));
        let old = Table::from_text("old", "step:1 - a:1\nstep:2 - a:2 - c:2\n");
        let new = Table::from_text("new", "step:1 - b:10\n");
        let t = Table::chain(vec![old, new]);
        assert_eq!(t.latest(col(&t, "a")), Some((1, 1.0)));
        assert_eq!(t.latest(col(&t, "c")), None);
        assert_eq!(t.last_step(), Some(1));
    }

    #[test]
    fn a_line_longer_than_the_limit_is_skipped_without_being_held() {
        use std::io::Read;
        let long = std::io::repeat(b'x').take(3 * MAX_LINE as u64);
        let log = long
            .chain(&b"\nstep:1 - a:1\n"[..])
            .chain(std::io::repeat(b'y').take(MAX_LINE as u64 + 1));
        let mut reader = std::io::BufReader::new(log);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, MAX_LINE).unwrap(),
            Some(false)
        );
        assert!(buf.is_empty() && buf.capacity() <= MAX_LINE + (64 << 10));
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, MAX_LINE).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"step:1 - a:1\n");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, MAX_LINE).unwrap(),
            Some(false)
        );
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, MAX_LINE).unwrap(),
            None
        );
        let log = std::io::repeat(b'x')
            .take(2 * MAX_LINE as u64)
            .chain(&b"\nstep:1 - a:1\nstep:2 - a:2"[..]);
        let t = Table::from_reader("j", std::io::BufReader::new(log)).unwrap();
        assert_eq!(t.rows().len(), 2);
        assert_eq!(t.dropped.long_lines, 1);
        let mut t = Table::new("j");
        assert_eq!(t.push_line(&"y".repeat(MAX_LINE + 1)), LineKind::Other);
        assert_eq!(t.dropped.long_lines, 1);
    }

    /// A writer that counts its writes.
    struct Counting(Vec<u8>, usize);

    impl std::io::Write for Counting {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.1 += 1;
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_is_streamed_and_reads_as_before() {
        // Written as it is serialized: many writes, not one document built first.
        let mut t = Table::new("j");
        for step in 0..2000 {
            t.push_step(step, &[("b", step as f64), ("a", 0.5)]);
        }
        let mut out = Counting(Vec::new(), 0);
        t.write_json(&t.select(&[]).unwrap(), &|s| Cow::Borrowed(s), &mut out)
            .unwrap();
        assert!(out.1 > 2000, "{} writes", out.1);
        // The same text as the pretty printing of the document as a value.
        let t = Table::from_text("j", LOG);
        let columns = t.select(&[KeyPattern::parse("*").unwrap()]).unwrap();
        let mut out = Vec::new();
        t.write_json(&columns, &|s| s.replace('j', "[REDACTED]").into(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(text, serde_json::to_string_pretty(&value).unwrap() + "\n");
        assert_eq!(value["jobs"], serde_json::json!(["[REDACTED]"]));
        assert_eq!(value["rows"][0]["job"], "[REDACTED]");
        assert_eq!(value["total_steps"], 4);
        assert_eq!(value["keys"].as_array().unwrap().len(), 5);
        assert_eq!(
            value["rows"][1],
            serde_json::json!({"job": "[REDACTED]", "step": 1, "metrics": {
                "critic/score/mean": 0.25, "actor/lr": 1e-06, "timing_s/step": 2.0}})
        );
        // No step: an empty list, as before.
        let mut out = Vec::new();
        Table::new("j")
            .write_json(&[], &|s| Cow::Borrowed(s), &mut out)
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["rows"], serde_json::json!([]));
        assert_eq!(value["total_steps"], serde_json::Value::Null);
    }
}
