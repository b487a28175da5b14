//! The text forms of a metrics table: CSV and JSON written a row at a time to a writer
//! (never built whole in memory), cells for a human table, and numbers as Python writes
//! them.

use std::borrow::Cow;
use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::{Layout, Row, Table};

impl Table {
    /// The rows that logged at least one of `columns` (a step that logged none of the
    /// chosen metrics is left out, as validation-only steps are when training keys are
    /// chosen).
    fn visible<'a>(&'a self, columns: &'a [usize]) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows()
            .filter(move |row| columns.iter().any(|&c| row.get(c).is_some()))
    }

    /// CSV: `step,<keys>`; an empty cell where a step did not log a metric; numbers as
    /// Python writes them (`0.5`, `1e-06`, `nan`, `inf`). Written a row at a time.
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
        let mut cells = Cells::new(columns);
        for row in self.rows() {
            let positions = cells.of(row);
            if positions.iter().all(Option::is_none) {
                continue;
            }
            line.clear();
            line.push_str(itoa::Buffer::new().format(row.step));
            for position in positions {
                line.push(',');
                if let Some(i) = *position {
                    push_number(&mut line, row.values[i]);
                }
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        Ok(())
    }

    /// JSON for scripts, written to `out` a row at a time (pretty, as `--json` prints
    /// everything): the jobs, the total, the keys and one object per step whose
    /// `metrics` hold the values logged (`"nan"`, `"inf"`, `"-inf"` as strings: JSON has
    /// no such numbers). `redact` is applied to every string value (job ids, names).
    pub fn write_json(
        &self,
        columns: &[usize],
        redact: &dyn Fn(&str) -> Cow<'_, str>,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        // Each step's `metrics` by name, as a JSON object's keys are printed elsewhere.
        let mut by_name = columns.to_vec();
        by_name.sort_by(|&a, &b| self.keys[a].cmp(&self.keys[b]));
        let document = JsonTable {
            table: self,
            columns,
            by_name: &by_name,
            redact,
        };
        crate::ui::json::to_writer(&mut *out, &document, true)?;
        out.write_all(b"\n")
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

/// Where each chosen column sits in a row's values, found again only when the row's
/// columns differ from the previous row's (verl's rows share them).
struct Cells<'a> {
    columns: &'a [usize],
    layout: Option<Layout>,
    positions: Vec<Option<usize>>,
}

impl<'a> Cells<'a> {
    fn new(columns: &'a [usize]) -> Self {
        Cells {
            columns,
            layout: None,
            positions: Vec::with_capacity(columns.len()),
        }
    }

    fn of(&mut self, row: &Row) -> &[Option<usize>] {
        if !self
            .layout
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, &row.columns))
        {
            self.positions.clear();
            self.positions.extend(self.columns.iter().map(|&c| {
                u32::try_from(c)
                    .ok()
                    .and_then(|c| row.columns.binary_search(&c).ok())
            }));
            self.layout = Some(row.columns.clone());
        }
        &self.positions
    }
}

/// The `--json` document, serialized as it is written (no tree of values in between).
/// Object keys in name order, as `serde_json::Map` prints them.
struct JsonTable<'a> {
    table: &'a Table,
    columns: &'a [usize],
    by_name: &'a [usize],
    redact: &'a dyn Fn(&str) -> Cow<'_, str>,
}

impl Serialize for JsonTable<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let table = self.table;
        let redact = self.redact;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry(
            "jobs",
            &Strings(table.jobs.iter().map(String::as_str), redact),
        )?;
        map.serialize_entry(
            "keys",
            &Strings(self.columns.iter().map(|&c| table.keys[c].as_str()), redact),
        )?;
        map.serialize_entry("rows", &JsonRows(self))?;
        map.serialize_entry("total_steps", &table.total_steps)?;
        map.end()
    }
}

/// A sequence of strings, each redacted, from an iterator that can be cloned.
struct Strings<'a, I>(I, &'a dyn Fn(&str) -> Cow<'_, str>);

impl<'s, I: Iterator<Item = &'s str> + Clone> Serialize for Strings<'_, I> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for text in self.0.clone() {
            seq.serialize_element(&*(self.1)(text))?;
        }
        seq.end()
    }
}

struct JsonRows<'a>(&'a JsonTable<'a>);

impl Serialize for JsonRows<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let doc = self.0;
        let mut seq = serializer.serialize_seq(None)?;
        let mut cells = Cells::new(doc.by_name);
        for row in doc.table.rows() {
            let positions = cells.of(row);
            if positions.iter().all(Option::is_none) {
                continue;
            }
            seq.serialize_element(&JsonRow {
                doc,
                row,
                positions,
            })?;
        }
        seq.end()
    }
}

struct JsonRow<'a> {
    doc: &'a JsonTable<'a>,
    row: &'a Row,
    /// Of `doc.by_name`.
    positions: &'a [Option<usize>],
}

impl Serialize for JsonRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let table = self.doc.table;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry(
            "job",
            &table.jobs.get(self.row.job).map(|j| (self.doc.redact)(j)),
        )?;
        map.serialize_entry("metrics", &JsonMetrics(self))?;
        map.serialize_entry("step", &self.row.step)?;
        map.end()
    }
}

struct JsonMetrics<'a>(&'a JsonRow<'a>);

impl Serialize for JsonMetrics<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let JsonRow {
            doc,
            row,
            positions,
        } = self.0;
        let mut map = serializer.serialize_map(None)?;
        for (&c, position) in doc.by_name.iter().zip(positions.iter()) {
            if let Some(i) = *position {
                let v = row.values[i];
                let key = doc.table.keys[c].as_str();
                if v.is_finite() {
                    map.serialize_entry(key, &v)?;
                } else {
                    map.serialize_entry(key, &format_number(v))?;
                }
            }
        }
        map.end()
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
