//! The printer: stdout carries data only (tables or `--json`), stderr carries messages
//! for humans, which `-q` silences. Progress bars show only on an interactive stderr,
//! never with `-q`, `-v` or `--no-progress`.

use std::io::{IsTerminal, Write};

use super::progress::ProgressReporter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

#[derive(Debug, Clone)]
pub struct Printer {
    pub json: bool,
    pub verbosity: Verbosity,
    bars: bool,
}

impl Printer {
    pub fn new(json: bool, verbosity: Verbosity, no_progress: bool) -> Self {
        let bars =
            !no_progress && verbosity == Verbosity::Normal && std::io::stderr().is_terminal();
        Self {
            json,
            verbosity,
            bars,
        }
    }

    /// Data for scripts and pipes (tables, ids, paths).
    pub fn data(&self, text: impl AsRef<str>) {
        let mut out = std::io::stdout().lock();
        stdout_result(writeln!(out, "{}", super::safe(text.as_ref())));
    }

    /// Text on stdout exactly as given, flushed at once (a job's log as it streams).
    pub fn raw(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        stdout_result(out.write_all(text.as_bytes()).and_then(|()| out.flush()));
    }

    /// A buffered writer on stdout, for large data (CSV of a long run).
    pub fn stdout(&self) -> std::io::BufWriter<std::io::StdoutLock<'static>> {
        std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock())
    }

    /// A JSON document on stdout, with every secret value this process knows redacted
    /// (Ray echoes entrypoints and env vars back); terminal-safe by JSON's own escapes
    /// ([`super::json`]), never by text's.
    pub fn json(&self, value: &serde_json::Value) {
        let secrets = crate::secrets::known();
        let value = redact_values(value.clone(), &|text| secrets.redact_str(text).into_owned());
        self.raw(&(super::json::to_string(&value, true) + "\n"));
    }

    /// One JSON value on one line of stdout (what a Slurm node step passes back through
    /// `srun`), written as [`Printer::json`] writes.
    pub fn json_line<T: serde::Serialize + ?Sized>(&self, value: &T) {
        self.raw(&(super::json::to_string(value, false) + "\n"));
    }

    /// A message for humans on stderr; silent with `-q`.
    pub fn info(&self, text: impl AsRef<str>) {
        if self.verbosity != Verbosity::Quiet {
            eprintln!("{}", super::safe(text.as_ref()));
        }
    }

    /// A warning on stderr; shown even with `-q`.
    pub fn warn(&self, text: impl AsRef<str>) {
        eprintln!("warning: {}", super::safe(text.as_ref()));
    }

    /// A failed command's report (`error: ...`, causes, hint) on stderr, shown even with
    /// `-q`; its text (YAML keys, records, remote answers) made safe to print.
    pub fn error(&self, report: &str) {
        eprint!("{}", super::safe(report));
    }

    /// Whether progress bars show (an interactive stderr, not `-q`/`-v`/`--no-progress`).
    pub fn bars(&self) -> bool {
        self.bars
    }

    /// Progress reporting for library code.
    pub fn reporter(&self) -> ProgressReporter {
        ProgressReporter::new(self.bars, self.verbosity == Verbosity::Quiet)
    }
}

/// The reader of our stdout went away (`argus job logs -f ID | head`): nothing more can
/// be delivered, so end quietly with success, as `head` asked, instead of following on.
fn stdout_result(result: std::io::Result<()>) {
    if let Err(e) = result
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Every string of a JSON document through `redact`: by value only (a field named `key`
/// in a metrics table is data, not a secret).
fn redact_values(value: serde_json::Value, redact: &dyn Fn(&str) -> String) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(redact(&s)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| redact_values(v, redact))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, redact_values(v, redact)))
                .collect(),
        ),
        other => other,
    }
}
