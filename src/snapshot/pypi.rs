//! A released package's sources from PyPI as a source tree to snapshot: `code.source:
//! pypi:verl==0.8.0` in a JobSpec. The wheel holds the package's Python sources (verl's
//! `verl/` with its Hydra configs), the same files a checkout of that release has under
//! the package; argus snapshots them like any other tree, so a job runs that release's
//! code from the shared storage, pinned by its tree hash.
//!
//! The wheel is fetched by this host's pip (`python3 -m pip download`, so pip's own
//! index, mirror and certificate settings apply) into argus's cache, unpacked beside it,
//! and only then renamed to its final name: a reader finds the whole tree or none.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::ids::{PYPI_PREFIX as PREFIX, PinnedRelease};
use crate::ui::Reporter;

#[derive(Debug, thiserror::Error)]
pub enum PypiError {
    #[error("invalid code.source: {0}")]
    Invalid(String),
    #[error("pip could not download {requirement} ({status}):\n{output}")]
    Download {
        requirement: String,
        status: String,
        output: String,
    },
    #[error("the index has no wheel of {requirement} (versions with a wheel there: {versions})")]
    NoSuchRelease {
        requirement: String,
        versions: String,
    },
    #[error("the index has no project named {name} (it answered 404 for {url})")]
    NoSuchProject { name: String, url: String },
    #[error("{requirement}: pip downloaded no wheel (only a source distribution?)")]
    NoWheel { requirement: String },
    #[error("cannot unpack {wheel}:\n{output}")]
    Unpack { wheel: String, output: String },
    #[error(transparent)]
    Io(#[from] crate::fsx::IoAt),
}

impl crate::exit::Classify for PypiError {
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit;
        match self {
            PypiError::Invalid(_)
            | PypiError::NoWheel { .. }
            | PypiError::NoSuchRelease { .. }
            | PypiError::NoSuchProject { .. } => Exit::Usage,
            PypiError::Download { .. } => Exit::Unreachable,
            PypiError::Unpack { .. } | PypiError::Io(_) => Exit::Failed,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            PypiError::NoSuchRelease { .. } => Some("pin one of the versions the index has (pypi:<name>==<version>)".into()),
            PypiError::NoSuchProject { .. } => Some("check the name's spelling against the index (pip index versions <name>)".into()),
            PypiError::Download { .. } | PypiError::NoWheel { .. } => Some("argus fetches a pypi: code.source with this host's `python3 -m pip download`: check that it reaches your index (pip config, PIP_INDEX_URL), or unpack the wheel yourself and give its directory as code.source".into()),
            _ => None,
        }
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PypiError + 'a {
    move |source| PypiError::Io(crate::fsx::io_at(action, path)(source))
}

/// A `code.source` of `pypi:<name>==<version>` becomes that release's sources on this host
/// (downloaded and unpacked once into argus's cache), to be snapshotted like any other
/// tree; any other code is left as it is.
pub async fn localize(
    code: &mut crate::config::jobspec::Code,
    reporter: &dyn Reporter,
) -> Result<(), PypiError> {
    if let crate::config::jobspec::Code::Source(source) = code
        && source.source.starts_with(PREFIX)
    {
        let release = PinnedRelease::parse(&source.source).map_err(PypiError::Invalid)?;
        let tree = local_tree(&release, reporter).await?;
        source.source = tree.display().to_string();
    }
    Ok(())
}

/// Where the release's unpacked sources are kept on this host.
pub fn cache_dir(release: &PinnedRelease) -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("argus/pypi")
        // `==` cannot occur in a normalized name or a version: two releases never share it.
        .join(format!(
            "{}=={}",
            release.normalized_name(),
            release.version
        ))
}

/// The release's sources on this host, downloaded and unpacked once.
pub async fn local_tree(
    release: &PinnedRelease,
    reporter: &dyn Reporter,
) -> Result<PathBuf, PypiError> {
    let dir = cache_dir(release);
    let tree = dir.join("src");
    // A directory of our own, not a link planted to another tree.
    if std::fs::symlink_metadata(&tree).is_ok_and(|m| m.is_dir()) {
        return Ok(tree);
    }
    let task = reporter.task(&format!("pypi {}", release.requirement()));
    let result = fetch(release, &dir, &tree, &*task).await;
    match &result {
        Ok(_) => task.done(&format!("{} unpacked", release.requirement())),
        Err(_) => task.fail("failed"),
    }
    result.map(|()| tree)
}

async fn fetch(
    release: &PinnedRelease,
    dir: &Path,
    tree: &Path,
    task: &dyn crate::ui::Task,
) -> Result<(), PypiError> {
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let work = dir.join(format!(
        ".tmp-{}-{}",
        crate::fsx::host_name(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io("create", &work))?;
    let outcome = async {
        task.update(&format!("pip download {}", release.requirement()));
        let requirement = release.requirement();
        // -I: isolated, so no module of the current directory (a `pip/` planted in a
        // checkout) or PYTHON* variable is taken for Python's own; run in our work dir.
        let output = tokio::process::Command::new("python3")
            .current_dir(&work)
            .args([
                "-I",
                "-m",
                "pip",
                "download",
                // Debug output: it says which page answered 404 (see `failure`).
                "-vv",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--dest",
            ])
            .arg(&work)
            .arg(&requirement)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(io("run python3 -m pip for", &work))?;
        if !output.status.success() {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return Err(failure(release, &output.status.to_string(), &text));
        }
        let wheel = std::fs::read_dir(&work)
            .map_err(io("list", &work))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .ok_or(PypiError::NoWheel {
                requirement: requirement.clone(),
            })?;
        task.update(&format!("unpack {}", wheel.display()));
        let unpacked = work.join("src");
        // Python's own zipfile: it refuses members that would land outside the target.
        let output = tokio::process::Command::new("python3")
            .current_dir(&work)
            .args(["-I", "-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpacked)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(io("run python3 -m zipfile for", &wheel))?;
        if !output.status.success() {
            return Err(PypiError::Unpack {
                wheel: wheel.display().to_string(),
                output: last_lines(&String::from_utf8_lossy(&output.stderr), 10),
            });
        }
        // The wheel's metadata is not part of the package's sources.
        for entry in std::fs::read_dir(&unpacked)
            .map_err(io("list", &unpacked))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".dist-info") || name.ends_with(".data") {
                std::fs::remove_dir_all(entry.path()).map_err(io("remove", &entry.path()))?;
            }
        }
        std::fs::rename(&unpacked, tree).map_err(io("rename into place", tree))
    }
    .await;
    let _ = std::fs::remove_dir_all(&work);
    // Another process may have put the same tree in place first: that one is as good.
    match outcome {
        Err(PypiError::Io(e)) if e.action == "rename into place" && tree.is_dir() => Ok(()),
        other => other,
    }
}

/// Why pip found nothing, from what it said (`-vv`): the index lists the project's
/// versions without this one, or answered 404 for the project's page (both the user's
/// input, exit 2); anything else (a connection refused, a 5xx, a proxy) is the index's.
fn failure(release: &PinnedRelease, status: &str, output: &str) -> PypiError {
    let requirement = release.requirement();
    let versions = output.lines().find_map(|l| {
        let (_, rest) = l.split_once("(from versions: ")?;
        Some(rest.trim_end().trim_end_matches(')').to_string())
    });
    // pip's line for each index page it could not read: `Could not fetch URL <url>:
    // <why> - skipping`.
    let unread: Vec<(&str, &str)> = output
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("Could not fetch URL ")?
                .split_once(": ")
        })
        .collect();
    let not_found = |why: &str| why.starts_with("404 ");
    match versions.as_deref() {
        Some(versions) if versions != "none" => PypiError::NoSuchRelease {
            requirement,
            versions: versions.to_string(),
        },
        Some(_) if !unread.is_empty() && unread.iter().all(|(_, why)| not_found(why)) => {
            PypiError::NoSuchProject {
                name: release.name.clone(),
                url: unread[0].0.to_string(),
            }
        }
        _ => {
            // What pip said to a user, without its debug lines.
            let said: String = output
                .lines()
                .filter(|l| {
                    l.starts_with("ERROR:")
                        || l.starts_with("WARNING:")
                        || l.trim().starts_with("Could not fetch URL ")
                })
                .collect::<Vec<_>>()
                .join("\n");
            let text = if said.is_empty() { output } else { &said };
            PypiError::Download {
                requirement,
                status: status.to_string(),
                output: last_lines(text, 15),
            }
        }
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_pins_in_the_safe_charset_parse() {
        let r = PinnedRelease::parse("pypi:verl==0.8.0").unwrap();
        assert_eq!((r.name.as_str(), r.version.as_str()), ("verl", "0.8.0"));
        assert_eq!(r.requirement(), "verl==0.8.0");
        // One cache entry per release, whatever the spelling; none shared by two.
        let dir = |s: &str| cache_dir(&PinnedRelease::parse(s).unwrap());
        assert_eq!(dir("pypi:VERL==0.8.0"), dir("pypi:verl==0.8.0"));
        assert_eq!(dir("pypi:a_b.c==1"), dir("pypi:A-B-C==1"));
        assert_ne!(dir("pypi:foo==1-1"), dir("pypi:foo-1==1"));
        for bad in [
            "pypi:verl",
            "pypi:verl>=0.8",
            "pypi:==0.8.0",
            "pypi:verl==",
            "pypi:../x==1",
            "pypi:verl==1/../../x",
            "pypi:verl==1 --index-url=http://evil",
            "pypi:-e==1",
            "pypi:verl==latest",
        ] {
            assert!(PinnedRelease::parse(bad).is_err(), "{bad} parsed");
        }
    }

    /// pip 24's words (`-vv`) for each way a download finds nothing.
    #[test]
    fn a_missing_release_or_project_is_the_users_and_a_dead_index_is_not() {
        use crate::exit::{Classify, Exit};
        let six = PinnedRelease::parse("pypi:six==99.0").unwrap();
        let missing_release = "Looking in links: /opt/wheels\nERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: 1.15.0, 1.16.0, 1.17.0)\nERROR: No matching distribution found for six==99.0\n";
        let e = failure(&six, "exit status: 1", missing_release);
        assert_eq!(e.exit(), Exit::Usage);
        assert_eq!(
            e.to_string(),
            "the index has no wheel of six==99.0 (versions with a wheel there: 1.15.0, 1.16.0, 1.17.0)"
        );
        let missing_project = "Getting page https://pypi.org/simple/six/\nhttps://pypi.org:443 \"GET /simple/six/ HTTP/1.1\" 404 0\nStatus code 404 not in (200, 203, 300, 301, 308)\nCould not fetch URL https://pypi.org/simple/six/: 404 Client Error: Not Found for url: https://pypi.org/simple/six/ - skipping\nERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: none)\n";
        let e = failure(&six, "exit status: 1", missing_project);
        assert_eq!(e.exit(), Exit::Usage);
        assert_eq!(
            e.to_string(),
            "the index has no project named six (it answered 404 for https://pypi.org/simple/six/)"
        );
        let refused = "Could not fetch URL http://127.0.0.1:9/simple/six/: connection error: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded - skipping\nERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: none)\nERROR: No matching distribution found for six==99.0\nTraceback (most recent call last):\n  raise error from e\n";
        let e = failure(&six, "exit status: 1", refused);
        assert_eq!(e.exit(), Exit::Unreachable);
        assert!(!e.to_string().contains("Traceback"), "{e}");
        // No index at all (find-links only) says nothing about the index: not the user's.
        let links_only = "ERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: none)\n";
        assert_eq!(
            failure(&six, "exit status: 1", links_only).exit(),
            Exit::Unreachable
        );
    }
}
