//! Expansion of what a profile may abbreviate: a leading `~` and `${VAR}` /
//! `${VAR:-default}` references in `shared.host_path`.

use std::path::PathBuf;

/// Expands a leading `~` and `${VAR}` / `${VAR:-default}` references.
pub fn expand_path(raw: &str) -> Result<PathBuf, String> {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {raw:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (std::env::var(name).ok().filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "environment variable {name} is not set (write ${{{name}:-default}} for a fallback)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if out.contains('\0') {
        return Err(format!("{raw:?} expands to a path with a NUL byte"));
    }
    if out == "~" || out.starts_with("~/") {
        let home = dirs::home_dir().ok_or("cannot expand ~: no home directory")?;
        return Ok(home.join(out.trim_start_matches('~').trim_start_matches('/')));
    }
    Ok(PathBuf::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_env_and_home() {
        // SAFETY: single-threaded use of a variable no other test reads.
        unsafe { std::env::set_var("ARGUS_TEST_EXPAND", "/data") };
        assert_eq!(
            expand_path("${ARGUS_TEST_EXPAND}/a").unwrap(),
            PathBuf::from("/data/a")
        );
        assert_eq!(
            expand_path("${ARGUS_TEST_UNSET_X:-/d}/a").unwrap(),
            PathBuf::from("/d/a")
        );
        assert!(expand_path("${ARGUS_TEST_UNSET_X}/a").is_err());
        assert!(expand_path("${ARGUS_TEST_UNSET_X").is_err());
        assert!(expand_path("~/a").unwrap().is_absolute());
    }
}
