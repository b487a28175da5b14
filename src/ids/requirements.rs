//! A requirements lock (`argus image build --lock FILE`): exact pins only, read as pip
//! reads the file, so what pip installs is what was checked. pip would also take options
//! (`--index-url`, `--trusted-host`, `-e`, `-r`, `-c`, ...), URLs, paths and ranges from
//! such a file, each of which changes where code comes from or which code it is: a lock
//! holds none of them.

use super::versions::{pep440_version, pep508_name};

/// One `name==version` line, with the hashes pip is to check, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedPin {
    pub name: String,
    pub version: String,
    /// `sha256:<64 hex>` each.
    pub hashes: Vec<String>,
    /// The line it starts on (1-based).
    pub line: usize,
}

/// A lock's text (given to pip as it is) and the pins it holds; built only by
/// [`RequirementsLock::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequirementsLock {
    text: String,
    pins: Vec<LockedPin>,
}

/// What a line of a lock may not carry, and where (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LockError {
    pub line: usize,
    pub message: String,
}

impl RequirementsLock {
    /// Reads `text` as pip reads a requirements file (lines ending in `\` joined to the
    /// next, `#` at a line's start or after a blank starting a comment) and accepts only
    /// `name==version` (PEP 508 name, PEP 440 version), each optionally followed by
    /// `--hash=sha256:<hex>`.
    pub fn parse(text: &str) -> Result<Self, LockError> {
        let mut pins = Vec::new();
        for (line, logical) in logical_lines(text) {
            let bad = |message: String| LockError { line, message };
            let content = strip_comment(&logical);
            let mut words = content.split_whitespace();
            let Some(first) = words.next() else { continue };
            let pin = pin(first).map_err(bad)?;
            let mut hashes = Vec::new();
            for word in words {
                match word.strip_prefix("--hash=sha256:") {
                    Some(hex) if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) => {
                        hashes.push(format!("sha256:{hex}"));
                    }
                    _ if word.starts_with(';') || word.contains(';') => {
                        return Err(bad(format!(
                            "{first}: an environment marker ({word:?}...): a lock pins what one image installs, without conditions"
                        )));
                    }
                    _ => {
                        return Err(bad(format!(
                            "{first}: {word:?} after the pin: only --hash=sha256:<64 hex digits> may follow it"
                        )));
                    }
                }
            }
            let (name, version) = pin;
            pins.push(LockedPin {
                name,
                version,
                hashes,
                line,
            });
        }
        Ok(Self {
            text: text.to_string(),
            pins,
        })
    }

    /// The text pip is given: every line of it was checked.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn pins(&self) -> &[LockedPin] {
        &self.pins
    }
}

/// `name==version`, or why the word is not one.
fn pin(word: &str) -> Result<(String, String), String> {
    if word.starts_with('-') {
        return Err(format!(
            "{word:?} is a pip option: a lock holds name==version pins only (indexes, hosts and other files belong in pip's own configuration)"
        ));
    }
    if word.contains(';') {
        return Err(format!(
            "{word:?}: an environment marker: a lock pins what one image installs, without conditions"
        ));
    }
    if word.contains("://") || word.contains('/') || word.contains('@') {
        return Err(format!(
            "{word:?} is a URL or a path: a lock holds name==version pins from the index only"
        ));
    }
    let Some((name, version)) = word.split_once("==") else {
        return Err(format!(
            "{word:?} is not pinned: write name==version (an exact version)"
        ));
    };
    let name = name.split_once('[').map_or(name, |(name, _)| name);
    if name.len() != word.split_once("==").map_or(0, |(n, _)| n.len()) {
        return Err(format!(
            "{word:?}: extras ([...]) are not carried: pin each package they would bring"
        ));
    }
    if !pep508_name(name) {
        return Err(format!(
            "{word:?}: {name:?} is not a package name (PEP 508)"
        ));
    }
    if version.starts_with('=') || !pep440_version(version) {
        return Err(format!(
            "{word:?}: {version:?} is not an exact version (PEP 440, such as 1.2.3)"
        ));
    }
    Ok((name.to_string(), version.to_string()))
}

/// pip's joining of lines: one ending in `\` (and not a comment) continues on the next;
/// each logical line with the number of its first.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in python_lines(text).into_iter().enumerate() {
        let comment = line.trim_start().starts_with('#');
        match (line.strip_suffix('\\'), comment) {
            (Some(head), false) => {
                let entry = pending.get_or_insert_with(|| (i + 1, String::new()));
                entry.1.push_str(head);
            }
            _ => match pending.take() {
                Some((first, mut joined)) => {
                    // pip makes a comment line that ends a continuation a comment still.
                    if comment {
                        joined.push(' ');
                    }
                    joined.push_str(line);
                    out.push((first, joined));
                }
                None => out.push((i + 1, line.to_string())),
            },
        }
    }
    out.extend(pending);
    out
}

/// The lines of `text` as Python's `str.splitlines` (which pip uses) makes them: also at
/// CR, VT, FF, FS, GS, RS, NEL, U+2028 and U+2029, so that no comment here hides a line
/// pip would read.
fn python_lines(text: &str) -> Vec<&str> {
    let breaks = |c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(breaks) {
        out.push(&rest[..at]);
        let after = if rest[at..].starts_with("\r\n") {
            2
        } else {
            rest[at..].chars().next().map_or(1, char::len_utf8)
        };
        rest = &rest[at + after..];
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// The line before a `#` that starts it or follows a blank (pip's comment rule).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let end = (0..bytes.len())
        .find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()))
        .unwrap_or(bytes.len());
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_lock_is_all_pins() {
        let text = include_str!("../../assets/verl/0.8.0/requirements.lock");
        let lock = RequirementsLock::parse(text).unwrap();
        assert!(lock.pins().len() > 50);
        assert_eq!(lock.text(), text);
        assert!(lock.pins().iter().any(|p| p.name == "torch"));
    }

    #[test]
    fn pins_and_hashes_pass() {
        let hash = "a".repeat(64);
        let text = format!(
            "# c\n\nsix==1.16.0  # why\nA_b.c==1.0rc1 \\\n    --hash=sha256:{hash} \\\n    --hash=sha256:{hash}\nx==2\n"
        );
        let lock = RequirementsLock::parse(&text).unwrap();
        let got: Vec<(&str, &str, usize, usize)> = lock
            .pins()
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str(), p.hashes.len(), p.line))
            .collect();
        assert_eq!(
            got,
            [
                ("six", "1.16.0", 0, 3),
                ("A_b.c", "1.0rc1", 2, 4),
                ("x", "2", 0, 7)
            ]
        );
    }

    #[test]
    fn whatever_else_pip_would_take_is_refused_at_its_line() {
        for (text, line, says) in [
            (
                "six==1\n--index-url http://evil/simple\n",
                2,
                "is a pip option",
            ),
            ("-i http://evil/simple\n", 1, "is a pip option"),
            ("--extra-index-url=http://evil\n", 1, "is a pip option"),
            ("--trusted-host evil\n", 1, "is a pip option"),
            ("-e git+https://evil/x.git#egg=x\n", 1, "is a pip option"),
            ("-r other.txt\n", 1, "is a pip option"),
            ("-c constraints.txt\n", 1, "is a pip option"),
            (
                "https://evil/x-1.0-py3-none-any.whl\n",
                1,
                "is a URL or a path",
            ),
            ("./x-1.0-py3-none-any.whl\n", 1, "is a URL or a path"),
            ("x @ https://evil/x.whl\n", 1, "is not pinned"),
            ("x@https://evil/x.whl\n", 1, "is a URL or a path"),
            ("six\n", 1, "is not pinned"),
            ("six>=1.0\n", 1, "is not pinned"),
            ("six==1.*\n", 1, "not an exact version"),
            ("six===1.0\n", 1, "not an exact version"),
            (
                "six==1.0 --index-url=http://evil\n",
                1,
                "only --hash=sha256",
            ),
            ("six==1.0; python_version>'3'\n", 1, "environment marker"),
            ("six==1.0 ; python_version>'3'\n", 1, "environment marker"),
            ("six[x]==1.0\n", 1, "extras"),
            ("six-==1.0\n", 1, "not a package name"),
            ("six==${V}\n", 1, "not an exact version"),
            (
                "six==1.0 \\\n--index-url=http://evil\n",
                1,
                "only --hash=sha256",
            ),
            ("six==1.0 --hash=sha256:abc\n", 1, "only --hash=sha256"),
            ("# c\nsix==1 \\\n\\\n-e .\n", 2, "only --hash=sha256"),
            ("# c\u{2028}--index-url http://evil\n", 2, "is a pip option"),
            ("# c\u{85}-e .\n", 2, "is a pip option"),
            ("# c\r-r x\n", 2, "is a pip option"),
            ("# c\u{1c}-c x\n", 2, "is a pip option"),
        ] {
            let err = RequirementsLock::parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.message.contains(says), "{text:?}: {err}");
        }
    }
}
