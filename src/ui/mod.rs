//! Everything the user sees: data on stdout, humans on stderr.
//!
//! Library code reports through the small [`Reporter`] / [`Task`] traits and knows nothing
//! of indicatif; commands get a [`Printer`] that decides where each kind of output goes.

mod printer;
mod progress;
mod steps;

pub use printer::{Printer, Verbosity};
pub use progress::{Reporter, Task};
pub use steps::StepBar;

pub use progress::human_bytes;

/// Left-aligned columns separated by two spaces; the first row is the header.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = widths[i]))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
