//! The triage of a failure bundle: across every log collected from every node, the FIRST
//! line that says why the job failed, by time, matched against the known signatures
//! ([`super::signatures`]), and the containers' own ends (OOM-killed, exited) placed on
//! the same timeline. Pure: values in, one finding out.
//!
//! Ordering: lines that carry a timestamp (Ray's `[YYYY-MM-DD HH:MM:SS,mmm ...]`,
//! Python logging's `YYYY-MM-DD HH:MM:SS,mmm`, Docker's RFC 3339) are ordered by it, and
//! only those inside the job's window count (Ray's logs hold every job of the session);
//! lines without one come after them, in the order of the files (the bundle gives the
//! workers' own logs of every node first and the driver's last, so an error raised on a
//! worker is named where it was raised, not where the driver re-raised it). When no line matches a signature, the
//! first Python exception line is named as [`Cause::Unknown`].

use serde::{Deserialize, Serialize};

use super::signatures::{self, Cause};

/// One log of the bundle: its path in the bundle and its text.
#[derive(Debug, Clone, Copy)]
pub struct Log<'a> {
    pub path: &'a str,
    pub text: &'a str,
}

/// A container's end as its engine reported it.
#[derive(Debug, Clone)]
pub struct ContainerEnd {
    pub container: String,
    pub host: String,
    /// The bundle file that records it (`nodes/<name>/state.json`).
    pub path: String,
    pub what: EndKind,
    /// Milliseconds since the epoch, when known.
    pub at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndKind {
    /// The kernel killed a process of the container for memory (`oom` event, OOMKilled).
    OomKilled { limit: Option<u64> },
    /// The container exited with this code.
    Exited { code: i64 },
}

/// Which timestamps count: the job's lifetime, with some slack (milliseconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub from_ms: Option<u64>,
    pub to_ms: Option<u64>,
}

impl Window {
    fn holds(&self, at: u64) -> bool {
        self.from_ms.is_none_or(|from| at >= from) && self.to_ms.is_none_or(|to| at <= to)
    }
}

/// What the triage found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Triage {
    pub cause: Cause,
    /// What was seen, one line (the log line trimmed, or the container's end).
    pub summary: String,
    /// The file of the bundle that holds it.
    pub file: String,
    /// Its line in that file (1-based), when it is a log line.
    #[serde(default)]
    pub line: Option<u64>,
    /// When it happened (RFC 3339), when known.
    #[serde(default)]
    pub at: Option<String>,
}

impl Triage {
    /// `cause: summary (file:line)`: how `job status` and `run` show it.
    pub fn one_line(&self) -> String {
        let place = match self.line {
            Some(n) => format!("{}:{n}", self.file),
            None => self.file.clone(),
        };
        format!("{}: {} ({place})", self.cause.label(), self.summary)
    }
}

/// The longest summary kept from a log line.
const SUMMARY_CHARS: usize = 240;

struct Candidate {
    cause: Cause,
    summary: String,
    file: String,
    line: Option<u64>,
    at_ms: Option<u64>,
    /// Files' order (the containers' ends first), then the line.
    order: (usize, u64),
}

/// The first error of the bundle (see the module's doc), or None when nothing in it
/// looks like one.
pub fn triage(ends: &[ContainerEnd], logs: &[Log<'_>], window: Window) -> Option<Triage> {
    let mut found: Vec<Candidate> = Vec::new();
    let mut first_exception: Option<Candidate> = None;
    for (i, end) in ends.iter().enumerate() {
        if end.at_ms.is_some_and(|at| !window.holds(at)) {
            continue;
        }
        let (cause, summary) = match &end.what {
            EndKind::OomKilled { limit } => (
                Cause::OomKilled,
                format!(
                    "container {} on host {} was OOM-killed{}",
                    end.container,
                    end.host,
                    limit
                        .map(|l| format!(" (memory limit {})", bytes_text(l)))
                        .unwrap_or_default()
                ),
            ),
            EndKind::Exited { code } => (
                Cause::NodeDied,
                format!(
                    "container {} on host {} exited with code {code}",
                    end.container, end.host
                ),
            ),
        };
        found.push(Candidate {
            cause,
            summary,
            file: end.path.clone(),
            line: None,
            at_ms: end.at_ms,
            order: (i, 0),
        });
    }
    for (f, log) in logs.iter().enumerate() {
        let lines: Vec<&str> = log.text.lines().collect();
        for (n, line) in lines.iter().copied().enumerate() {
            let at_ms = line_time(line);
            if at_ms.is_some_and(|at| !window.holds(at)) {
                continue;
            }
            let cause = match signatures::classify(line) {
                Some(cause) => cause,
                None if first_exception.is_none() && signatures::is_exception(line) => {
                    Cause::Unknown
                }
                None => continue,
            };
            // Ray re-raises a task's or actor's error wrapped (`RayTaskError(X): ray::f()`):
            // the wrapped error's own line, further down the same traceback, says what X was.
            let (n, line, cause) = match wrapped_by_ray(line).and_then(|w| inner_line(&lines, n, w))
            {
                Some((i, inner)) => (i, inner, signatures::classify(inner).unwrap_or(cause)),
                None => (n, line, cause),
            };
            let candidate = Candidate {
                cause,
                summary: summary_of(line),
                file: log.path.to_string(),
                line: Some(n as u64 + 1),
                at_ms,
                order: (ends.len() + f, n as u64),
            };
            if cause == Cause::Unknown {
                first_exception = Some(candidate);
            } else {
                found.push(candidate);
            }
        }
    }
    let key = |c: &Candidate| (c.at_ms.is_none(), c.at_ms.unwrap_or(0), c.order);
    let first = found.into_iter().min_by_key(key).or(first_exception)?;
    Some(Triage {
        cause: first.cause,
        summary: first.summary,
        file: first.file,
        line: first.line,
        at: first.at_ms.map(rfc3339_ms),
    })
}

/// The error Ray wrapped, from `...RayTaskError(ModuleNotFoundError): ...` (or
/// `RayActorError(...)`).
fn wrapped_by_ray(line: &str) -> Option<&str> {
    let (_, rest) = line
        .split_once("RayTaskError(")
        .or_else(|| line.split_once("RayActorError("))?;
    let inner = rest.split_once(')')?.0;
    (!inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
    .then_some(inner)
}

/// How far below a wrapping line its traceback's last line is looked for.
const WRAPPED_LINES: usize = 60;

/// The line of the wrapped error itself (`ModuleNotFoundError: No module named ...`)
/// within the traceback below line `n`: its index and text.
fn inner_line<'a>(lines: &[&'a str], n: usize, inner: &str) -> Option<(usize, &'a str)> {
    let prefix = format!("{inner}:");
    lines
        .iter()
        .enumerate()
        .skip(n + 1)
        .take(WRAPPED_LINES)
        .find(|(_, l)| unprefixed(&crate::ui::safe_log(l)).starts_with(&prefix))
        .map(|(i, l)| (i, *l))
}

/// A log line without Ray's `(Actor pid=N, ip=...)` prefix, trimmed.
fn unprefixed(line: &str) -> &str {
    let line = line.trim_start();
    match line
        .strip_prefix('(')
        .and_then(|rest| rest.split_once(") "))
    {
        Some((inside, rest)) if inside.contains("pid=") => rest.trim_start(),
        _ => line,
    }
}

/// A log line as a summary: its colours dropped (Ray colours its prefixes), any other
/// control character escaped, trimmed and cut.
fn summary_of(line: &str) -> String {
    let line = crate::ui::safe_log(line);
    let line = line.trim();
    match line.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

fn bytes_text(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// The time a log line starts with, in milliseconds since the epoch (read as UTC: the
/// containers' clocks): Ray's `[2026-01-02 03:04:05,678 E ...]`, Python logging's
/// `2026-01-02 03:04:05,678`, Docker's `2026-01-02T03:04:05.678901234Z`. None otherwise.
pub fn line_time(line: &str) -> Option<u64> {
    let b = line.as_bytes();
    let b = b.strip_prefix(b"[").unwrap_or(b);
    if b.len() < 19 {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u64> {
        let mut v = 0u64;
        for &c in &b[range] {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
        }
        Some(v)
    };
    if b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b' ' || b[10] == b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut millis = 0;
    if b.len() > 20 && (b[19] == b',' || b[19] == b'.') {
        let frac: Vec<u8> = b[20..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .copied()
            .collect();
        let mut ms = 0u64;
        for i in 0..3 {
            ms = ms * 10 + frac.get(i).map_or(0, |c| u64::from(c - b'0'));
        }
        millis = ms;
    }
    let days = days_from_civil(year as i64, month as i64, day as i64);
    let secs = days * 86_400 + (hour * 3600 + minute * 60 + second) as i64;
    u64::try_from(secs).ok().map(|s| s * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ray_wrapped_error_is_named_by_its_own_line() {
        let text = "Traceback (most recent call last):\n  File \"x.py\", line 9\nray.exceptions.RayTaskError(ModuleNotFoundError): ray::load() (pid=3, ip=10.0.0.3)\n  File \"fail.py\", line 8, in load\n    import nothere\nModuleNotFoundError: No module named 'nothere'\n";
        let logs = [Log {
            path: "driver.log",
            text,
        }];
        let found = triage(&[], &logs, Window::default()).expect("found");
        assert_eq!(found.cause, Cause::Import);
        assert_eq!(
            found.summary,
            "ModuleNotFoundError: No module named 'nothere'"
        );
        assert_eq!(found.line, Some(6));
        assert_eq!(wrapped_by_ray("RayActorError(a b): x"), None);
        // Ray's prefix on the wrapped line, and its cause read from that line.
        let text = "RayTaskError(ImportError): ray::f() NCCL\n(Worker pid=9, ip=1.2.3.4) ImportError: cannot import name 'x'\n";
        let logs = [Log {
            path: "driver.log",
            text,
        }];
        let found = triage(&[], &logs, Window::default()).expect("found");
        assert_eq!(found.cause, Cause::Import);
        assert_eq!(found.line, Some(2));
    }

    fn ms(text: &str) -> u64 {
        humantime::parse_rfc3339(text)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    #[test]
    fn the_time_of_rays_pythons_and_dockers_lines() {
        let at = ms("2026-11-26T06:52:55.123Z");
        assert_eq!(
            line_time("[2026-11-26 06:52:55,123 E 12 34] core_worker.cc:1: x"),
            Some(at)
        );
        assert_eq!(
            line_time("2026-11-26 06:52:55,123\tINFO worker.py:1 -- x"),
            Some(at)
        );
        assert_eq!(
            line_time("2026-11-26T06:52:55.123456789Z Ray runtime started."),
            Some(at)
        );
        assert_eq!(
            line_time("2000-02-29 00:00:00 x"),
            Some(ms("2000-02-29T00:00:00Z"))
        );
        for none in [
            "",
            "Traceback (most recent call last):",
            "2026-13-01 00:00:00",
            "[x] 2026",
        ] {
            assert_eq!(line_time(none), None, "{none}");
        }
    }

    #[test]
    fn the_first_error_by_time_wins_across_nodes() {
        let worker = "[2026-11-26 06:00:05,000 I 1 1] fine\n[2026-11-26 06:00:09,000 E 1 1] torch.distributed.DistBackendError: NCCL error: unhandled system error\n";
        let head = "[2026-11-26 06:00:07,000 W 1 1] gcs: Node abc is dead because the health check failed.\n";
        // Before the job: an older job's error does not count.
        let old = "[2026-11-26 05:00:00,000 E 1 1] ModuleNotFoundError: No module named 'x'\n";
        let logs = [
            Log {
                path: "nodes/w/ray/raylet.out",
                text: worker,
            },
            Log {
                path: "nodes/h/ray/gcs_server.out",
                text: head,
            },
            Log {
                path: "nodes/h/ray/old.log",
                text: old,
            },
        ];
        let window = Window {
            from_ms: Some(ms("2026-11-26T06:00:00Z")),
            to_ms: None,
        };
        let t = triage(&[], &logs, window).unwrap();
        assert_eq!(t.cause, Cause::NodeDied);
        assert_eq!(
            (t.file.as_str(), t.line),
            ("nodes/h/ray/gcs_server.out", Some(1))
        );
        assert_eq!(t.at.as_deref(), Some("2026-11-26T06:00:07.000Z"));
        assert!(
            t.one_line()
                .starts_with("node died: [2026-11-26 06:00:07,000 W 1 1] gcs: Node abc is dead"),
            "{}",
            t.one_line()
        );
        assert!(t.one_line().ends_with("(nodes/h/ray/gcs_server.out:1)"));
    }

    #[test]
    fn lines_without_a_time_come_after_timed_ones_in_file_order() {
        let worker_err = "Traceback (most recent call last):\n  File \"t.py\", line 3\nModuleNotFoundError: No module named 'argus_nope'\n";
        let driver = "ray.exceptions.RayTaskError(ModuleNotFoundError): ray::f()\nModuleNotFoundError: No module named 'argus_nope'\n";
        let logs = [
            Log {
                path: "nodes/w/ray/worker-1.err",
                text: worker_err,
            },
            Log {
                path: "driver.log",
                text: driver,
            },
        ];
        let t = triage(&[], &logs, Window::default()).unwrap();
        assert_eq!(t.cause, Cause::Import);
        assert_eq!(
            (t.file.as_str(), t.line),
            ("nodes/w/ray/worker-1.err", Some(3))
        );
        assert_eq!(
            t.summary,
            "ModuleNotFoundError: No module named 'argus_nope'"
        );
        assert!(t.at.is_none());
        // A timed line of any file wins over them.
        let timed = "[2026-11-26 06:00:09,000 E 1 1] OSError: [Errno 28] No space left on device\n";
        let logs = [
            logs[0],
            logs[1],
            Log {
                path: "nodes/h/ray/raylet.out",
                text: timed,
            },
        ];
        assert_eq!(
            triage(&[], &logs, Window::default()).unwrap().cause,
            Cause::DiskFull
        );
    }

    #[test]
    fn an_oom_kill_is_placed_on_the_timeline_and_named_with_its_container() {
        let worker = "[2026-11-26 06:00:09,000 W 1 1] Worker exits with a connection error code 2. (1) SIGKILL by OOM killer\n";
        let driver = "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task.\n";
        let ends = [ContainerEnd {
            container: "c-gpu-1".into(),
            host: "local".into(),
            path: "nodes/c-gpu-1/state.json".into(),
            what: EndKind::OomKilled {
                limit: Some(1 << 30),
            },
            at_ms: Some(ms("2026-11-26T06:00:08.500Z")),
        }];
        let logs = [
            Log {
                path: "nodes/c-gpu-1/ray/raylet.out",
                text: worker,
            },
            Log {
                path: "driver.log",
                text: driver,
            },
        ];
        let t = triage(&ends, &logs, Window::default()).unwrap();
        assert_eq!(t.cause, Cause::OomKilled);
        assert_eq!(
            t.summary,
            "container c-gpu-1 on host local was OOM-killed (memory limit 1 GiB)"
        );
        assert_eq!(
            (t.file.as_str(), t.line),
            ("nodes/c-gpu-1/state.json", None)
        );
        // An OOM flag without a time still beats lines without one.
        let ends = [ContainerEnd {
            at_ms: None,
            ..ends[0].clone()
        }];
        assert_eq!(
            triage(&ends, &logs[1..], Window::default()).unwrap().cause,
            Cause::OomKilled
        );
    }

    #[test]
    fn a_summary_has_no_colours_or_control_characters() {
        let line = "\x1b[36m(Worker pid=4)\x1b[0m ModuleNotFoundError: No module named 'x'\x07\r";
        let t = triage(
            &[],
            &[Log {
                path: "driver.log",
                text: line,
            }],
            Window::default(),
        )
        .unwrap();
        assert_eq!(
            t.summary,
            "(Worker pid=4) ModuleNotFoundError: No module named 'x'\\u{7}"
        );
    }

    #[test]
    fn without_a_signature_the_first_exception_is_named_and_without_one_nothing() {
        let driver =
            "step:1\nValueError: FAKE_FAIL_AT: the batch of step 3 is bad\nRuntimeError: later\n";
        let t = triage(
            &[],
            &[Log {
                path: "driver.log",
                text: driver,
            }],
            Window::default(),
        )
        .unwrap();
        assert_eq!(t.cause, Cause::Unknown);
        assert_eq!(t.line, Some(2));
        assert!(t.one_line().starts_with("error: ValueError: FAKE_FAIL_AT"));
        assert!(
            triage(
                &[],
                &[Log {
                    path: "driver.log",
                    text: "all fine\n"
                }],
                Window::default()
            )
            .is_none()
        );
    }
}
