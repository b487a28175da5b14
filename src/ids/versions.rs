//! Versions named in inputs: a release pinned on PyPI (`pypi:verl==0.8.0`) and the Ray
//! version an image's tag carries.

use std::fmt;

/// The prefix of a `code.source` that names a release on PyPI.
pub const PYPI_PREFIX: &str = "pypi:";

/// `name==version`, each in the charset of PyPI's names and versions (so both are safe as
/// a path segment and as one argument of pip).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedRelease {
    pub name: String,
    pub version: String,
}

impl PinnedRelease {
    /// Parses `pypi:name==version` (the prefix is optional).
    pub fn parse(text: &str) -> Result<Self, String> {
        let body = text.strip_prefix(PYPI_PREFIX).unwrap_or(text);
        let Some((name, version)) = body.split_once("==") else {
            return Err(format!(
                "{text:?} does not pin a version: write pypi:<name>==<version>, e.g. pypi:verl==0.8.0"
            ));
        };
        let name_ok = !name.is_empty()
            && name.len() <= 100
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        let version_ok = !version.is_empty()
            && version.len() <= 64
            && version.starts_with(|c: char| c.is_ascii_digit())
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!' | '-' | '_'));
        if !name_ok || !version_ok || name.contains("..") || version.contains("..") {
            return Err(format!(
                "{text:?} is not pypi:<name>==<version> (letters, digits, '.', '_', '-'; an exact version such as 0.8.0)"
            ));
        }
        Ok(PinnedRelease {
            name: name.to_string(),
            version: version.to_string(),
        })
    }

    pub fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// The name as PyPI compares names (PEP 503: lower case, runs of `-`, `_`, `.` as
    /// one `-`), so `VERL` and `verl` are one release and one cache entry.
    pub fn normalized_name(&self) -> String {
        let mut out = String::new();
        let mut sep = false;
        for c in self.name.chars() {
            if matches!(c, '-' | '_' | '.') {
                sep = true;
            } else {
                if sep && !out.is_empty() {
                    out.push('-');
                }
                sep = false;
                out.push(c.to_ascii_lowercase());
            }
        }
        out
    }
}

/// A Ray version as an image's tag carries it (`2.51.1`; a missing patch is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RayVersion(pub u32, pub u32, pub u32);

impl RayVersion {
    /// The Ray version in an image's tag: `argus/ray:2.51.1`,
    /// `rayproject/ray:2.51.1-py311-gpu`; None for a digest or a tag such as `latest`.
    pub fn of_image(image: &str) -> Option<Self> {
        let name = image.split('@').next()?;
        let last = name.rsplit('/').next()?;
        let (_, tag) = last.split_once(':')?;
        Self::from_tag(tag)
    }

    /// The version a tag starts with: `2.51.1`, `2.60.0-py311-gpu`, `2.52`.
    pub fn from_tag(tag: &str) -> Option<Self> {
        let end = tag
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tag.len());
        let mut parts = tag[..end].split('.').filter(|p| !p.is_empty());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(RayVersion(major, minor, patch))
    }
}

impl fmt::Display for RayVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ray_versions_come_from_tags() {
        assert_eq!(
            RayVersion::of_image("argus/ray:2.51.1"),
            Some(RayVersion(2, 51, 1))
        );
        assert_eq!(
            RayVersion::of_image("reg.example:5000/ray:2.60.0-py311-gpu"),
            Some(RayVersion(2, 60, 0))
        );
        assert_eq!(
            RayVersion::of_image("rayproject/ray:2.52"),
            Some(RayVersion(2, 52, 0))
        );
        assert_eq!(
            RayVersion::of_image("reg.example:5000/ray@sha256:abc"),
            None
        );
        assert_eq!(RayVersion::of_image("reg.example/ray:latest"), None);
        assert_eq!(RayVersion::from_tag("nightly"), None);
        assert_eq!(RayVersion(2, 51, 1).to_string(), "2.51.1");
    }
}
