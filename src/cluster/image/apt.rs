//! This machine's Debian mirror, read from apt's sources (one-line and deb822 formats)
//! at run time, never written into the code.

use std::path::PathBuf;

use super::BuildError;

/// The first Debian mirror in apt's sources that serves `suite` (not the security one).
pub fn debian_mirror(suite: &str) -> Result<String, BuildError> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut extra: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        extra.sort();
        files.extend(extra);
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let entries = match file.extension().and_then(|e| e.to_str()) {
            Some("sources") => parse_deb822(&text),
            Some("list") | None => parse_one_line(&text),
            _ => continue,
        };
        if let Some(uri) = entries
            .into_iter()
            .find(|(uri, suites)| suites.iter().any(|s| s == suite) && !uri.contains("security"))
            .map(|(uri, _)| uri)
        {
            return Ok(uri);
        }
    }
    Err(BuildError::NoMirror {
        suite: suite.to_string(),
        searched: "/etc/apt/sources.list and /etc/apt/sources.list.d/".into(),
    })
}

/// `Types: deb` / `URIs:` / `Suites:` stanzas -> (uri, suites).
fn parse_deb822(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            })
        };
        let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let enabled = field("Enabled").is_none_or(|e| e != "no");
        if let (true, true, Some(uris), Some(suites)) =
            (is_deb, enabled, field("URIs"), field("Suites"))
        {
            let suites: Vec<String> = suites.split_whitespace().map(str::to_string).collect();
            for uri in uris.split_whitespace() {
                out.push((uri.to_string(), suites.clone()));
            }
        }
    }
    out
}

/// `deb [opts] URI suite components...` lines -> (uri, [suite]).
fn parse_one_line(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("deb ")?;
            let rest = match rest.trim_start().strip_prefix('[') {
                Some(r) => r.split_once(']')?.1,
                None => rest,
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.to_string();
            let suite = words.next()?.to_string();
            Some((uri, vec![suite]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mirrors_in_both_apt_formats() {
        let deb822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            parse_deb822(deb822),
            vec![
                (
                    "http://deb.example/debian".to_string(),
                    vec!["bookworm".to_string(), "bookworm-updates".to_string()]
                ),
                (
                    "http://deb.example/debian-security".to_string(),
                    vec!["bookworm-security".to_string()]
                )
            ]
        );
        let list = "# c\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\ndeb-src http://m.example/debian bookworm main\n";
        assert_eq!(
            parse_one_line(list),
            vec![(
                "http://m.example/debian".to_string(),
                vec!["bookworm".to_string()]
            )]
        );
    }
}
