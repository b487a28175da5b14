//! The table of step × metric a driver log holds, and its text forms (CSV, JSON, a table
//! for humans). Pure: lines or readers in, values and strings out.
//!
//! Memory stays proportional to the numbers, not the log: a log is read line by line,
//! each step keeps one `f64` per metric (a missing value is a reserved NaN payload that
//! no parsed number can have), so 20,000 steps × 100 metrics take about 16 MB however
//! long the log's lines are.
//!
//! Steps of one log are kept sorted; a step logged twice (verl logs the validation before
//! training at step 0 on its own line, a resumed job logs its first validation at the
//! checkpoint's step) merges, later values winning.

use std::collections::HashMap;
use std::io::BufRead;

use globset::{Glob, GlobMatcher};

use super::log::{Line, parse_line};

/// A NaN whose payload marks "not logged at this step" (parsing `nan` gives the canonical NaN).
const MISSING: u64 = 0x7ff8_dead_beef_0001;

fn missing() -> f64 {
    f64::from_bits(MISSING)
}

fn is_missing(v: f64) -> bool {
    v.to_bits() == MISSING
}

/// One logged step.
#[derive(Debug, Clone)]
pub struct Row {
    pub step: u64,
    /// Index into [`Table::jobs`] of the job that logged it (0 for a single log).
    pub job: usize,
    values: Vec<f64>,
}

impl Row {
    /// The value of column `column`, if this step logged it.
    pub fn get(&self, column: usize) -> Option<f64> {
        self.values.get(column).copied().filter(|v| !is_missing(*v))
    }

    fn set(&mut self, column: usize, value: f64) {
        if self.values.len() <= column {
            self.values.resize(column + 1, missing());
        }
        self.values[column] = value;
    }
}

/// Steps × metrics of one log, or of a chain of resumed jobs.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Job ids, oldest first (one for a single log).
    pub jobs: Vec<String>,
    /// Metric names in the order they were first logged.
    keys: Vec<String>,
    index: HashMap<String, usize>,
    /// Sorted by step.
    rows: Vec<Row>,
    /// `Total training steps: N`, the last one logged.
    pub total_steps: Option<u64>,
    /// Column of each position of the previous step line: verl logs the same keys in the
    /// same order every step, so a key is usually found without hashing.
    recent: Vec<usize>,
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

    /// Parses a log from a reader, a line at a time (the log is never held whole).
    pub fn from_reader(job: impl Into<String>, mut reader: impl BufRead) -> std::io::Result<Self> {
        let mut table = Table::new(job);
        let mut buf = Vec::with_capacity(8192);
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
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
        let row = self.row_for(step);
        let mut columns = Vec::with_capacity(metrics.len());
        for (position, (key, _)) in metrics.iter().enumerate() {
            let column = match self.recent.get(position) {
                Some(&c) if self.keys[c] == *key => c,
                _ => self.column(key),
            };
            columns.push(column);
        }
        let row = &mut self.rows[row];
        if row.values.capacity() == 0 {
            row.values
                .reserve_exact(columns.iter().max().map_or(0, |m| m + 1));
        }
        for (column, (_, value)) in columns.iter().zip(metrics) {
            row.set(*column, *value);
        }
        self.recent = columns;
    }

    fn column(&mut self, key: &str) -> usize {
        if let Some(&c) = self.index.get(key) {
            return c;
        }
        let c = self.keys.len();
        self.keys.push(key.to_string());
        self.index.insert(key.to_string(), c);
        c
    }

    /// The index of the row for `step`, made when new (rows stay sorted).
    fn row_for(&mut self, step: u64) -> usize {
        let job = self.jobs.len().saturating_sub(1);
        match self.rows.last() {
            Some(last) if last.step == step => return self.rows.len() - 1,
            Some(last) if last.step < step => {}
            None => {}
            Some(_) => {
                return match self.rows.binary_search_by_key(&step, |r| r.step) {
                    Ok(i) => i,
                    Err(i) => {
                        self.rows.insert(
                            i,
                            Row {
                                step,
                                job,
                                values: Vec::new(),
                            },
                        );
                        i
                    }
                };
            }
        }
        self.rows.push(Row {
            step,
            job,
            values: Vec::new(),
        });
        self.rows.len() - 1
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn column_of(&self, key: &str) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// The last step logged.
    pub fn last_step(&self) -> Option<u64> {
        self.rows.last().map(|r| r.step)
    }

    /// The most recent value of a metric, with its step.
    pub fn latest(&self, column: usize) -> Option<(u64, f64)> {
        self.rows
            .iter()
            .rev()
            .find_map(|r| r.get(column).map(|v| (r.step, v)))
    }

    /// `(step, value)` of every step that logged the metric.
    pub fn series(&self, column: usize) -> Vec<(u64, f64)> {
        self.rows
            .iter()
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
            if let Some(first) = next.rows.first().map(|r| r.step) {
                out.rows.retain(|r| r.step <= first);
            }
            out.total_steps = next.total_steps.or(out.total_steps);
            let columns: Vec<usize> = next.keys.iter().map(|k| out.column(k)).collect();
            out.recent.clear();
            for row in &next.rows {
                let at = out.row_for(row.step);
                out.rows[at].job = job + row.job;
                for (c, column) in columns.iter().enumerate() {
                    if let Some(v) = row.get(c) {
                        out.rows[at].set(*column, v);
                    }
                }
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
        for pattern in patterns {
            let before = out.len();
            for (c, key) in self.keys.iter().enumerate() {
                if pattern.is_match(key) && !out.contains(&c) {
                    out.push(c);
                }
            }
            if out.len() == before && !self.keys.iter().any(|k| pattern.is_match(k)) {
                return Err(pattern.text.clone());
            }
        }
        Ok(out)
    }

    /// The rows that logged at least one of `columns` (a step that logged none of the
    /// chosen metrics is left out, as validation-only steps are when training keys are
    /// chosen).
    fn visible<'a>(&'a self, columns: &'a [usize]) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows
            .iter()
            .filter(move |row| columns.iter().any(|&c| row.get(c).is_some()))
    }

    /// CSV: `step,<keys>`; an empty cell where a step did not log a metric; numbers as
    /// Python writes them (`0.5`, `1e-06`, `nan`, `inf`).
    pub fn write_csv(
        &self,
        columns: &[usize],
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        out.write_all(b"step")?;
        for &c in columns {
            out.write_all(b",")?;
            out.write_all(csv_field(&self.keys[c]).as_bytes())?;
        }
        out.write_all(b"\n")?;
        let mut line = String::with_capacity(16 * (columns.len() + 1));
        for row in self.visible(columns) {
            line.clear();
            line.push_str(itoa::Buffer::new().format(row.step));
            for &c in columns {
                line.push(',');
                if let Some(v) = row.get(c) {
                    push_number(&mut line, v);
                }
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        Ok(())
    }

    /// JSON for scripts: the jobs, the total, the keys and one object per step whose
    /// `metrics` hold the values logged (`"nan"`, `"inf"`, `"-inf"` as strings: JSON has
    /// no such numbers).
    pub fn to_json(&self, columns: &[usize]) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .visible(columns)
            .map(|row| {
                let metrics: serde_json::Map<String, serde_json::Value> = columns
                    .iter()
                    .filter_map(|&c| row.get(c).map(|v| (self.keys[c].clone(), json_number(v))))
                    .collect();
                serde_json::json!({
                    "step": row.step,
                    "job": self.jobs.get(row.job),
                    "metrics": metrics,
                })
            })
            .collect();
        serde_json::json!({
            "jobs": self.jobs,
            "total_steps": self.total_steps,
            "keys": columns.iter().map(|&c| &self.keys[c]).collect::<Vec<_>>(),
            "rows": rows,
        })
    }

    /// Rows of cells for a human table: a header, then one row per step.
    pub fn to_cells(&self, columns: &[usize]) -> Vec<Vec<String>> {
        let mut header = vec!["STEP".to_string()];
        header.extend(columns.iter().map(|&c| self.keys[c].clone()));
        let mut cells = vec![header];
        for row in self.visible(columns) {
            let mut line = vec![row.step.to_string()];
            line.extend(columns.iter().map(|&c| match row.get(c) {
                Some(v) => human_number(v),
                None => "-".to_string(),
            }));
            cells.push(line);
        }
        cells
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

/// A text cell (a metric name, from the job's log) per RFC 4180, safe to open in a
/// spreadsheet (OWASP's CSV injection advice): a cell a spreadsheet would read as a
/// formula (starting with `=`, `+`, `-`, `@`, tab or CR) gets a leading `'` and is quoted;
/// a cell with a comma, quote, CR or LF is quoted, quotes doubled. Numbers are written
/// by [`push_number`], never through here.
fn csv_field(text: &str) -> String {
    let formula = text.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if formula {
        format!("\"'{}\"", text.replace('"', "\"\""))
    } else if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// A number as Python's `repr` would write it, except that integral values lose the
/// `.0` (`5`, not `5.0`): shortest text that reads back to the same `f64`.
pub fn format_number(v: f64) -> String {
    let mut s = String::new();
    push_number(&mut s, v);
    s
}

/// A number for people: six significant digits (exact values are in `--csv`/`--json`).
pub fn human_number(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() || a == 0.0 {
        return format_number(v);
    }
    if !(1e-4..1e9).contains(&a) {
        return format!("{v:.4e}");
    }
    let decimals = (5 - a.log10().floor() as i32).clamp(0, 9) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn push_number(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("nan");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "inf" } else { "-inf" });
        return;
    }
    // ryu (already serde_json's) gives the shortest round-trip digits, several times
    // faster than `{}`; its `1.0` and `1e-6` become Python's `1` and `1e-06`.
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(v);
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exponent),
            };
            out.push_str(mantissa.strip_suffix(".0").unwrap_or(mantissa));
            out.push('e');
            out.push(sign);
            if digits.len() < 2 {
                out.push('0');
            }
            out.push_str(digits);
        }
        None => out.push_str(text.strip_suffix(".0").unwrap_or(text)),
    }
}

fn json_number(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::Value::from(v)
    } else {
        serde_json::Value::from(format_number(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let steps: Vec<u64> = t.rows().iter().map(|r| r.step).collect();
        assert_eq!(steps, [0, 1, 2]);
        assert_eq!(t.rows()[2].get(col(&t, "critic/score/mean")), Some(0.5));
        assert!(t.rows()[2].get(col(&t, "actor/entropy")).unwrap().is_nan());
        assert_eq!(t.rows()[1].get(col(&t, "actor/entropy")), None);
        assert_eq!(t.rows()[0].get(col(&t, "critic/score/mean")), None);
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
        let steps: Vec<u64> = t.rows().iter().map(|r| r.step).collect();
        assert_eq!(steps, [1, 2, 3]);
        assert_eq!(t.rows()[2].get(col(&t, "a")), Some(3.0));
        assert_eq!(t.rows()[2].get(col(&t, "b")), Some(30.0));
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
            t.rows().iter().map(|r| (r.step, r.job, r.get(a))).collect();
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
        assert_eq!(t.rows()[3].get(col(&t, "v")), Some(0.4));
        assert_eq!(t.rows()[2].get(col(&t, "b")), Some(3.0));
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
        let j = t.to_json(&t.select(&[]).unwrap());
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
}
