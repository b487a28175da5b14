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
        if !pep508_name(name) {
            return Err(format!(
                "{text:?}: {name:?} is not a package name (PEP 508: letters, digits, '.', '_', '-', starting and ending with a letter or digit, at most 100)"
            ));
        }
        if version.len() > 64
            || !version.starts_with(|c: char| c.is_ascii_digit())
            || !pep440_version(version)
        {
            return Err(format!(
                "{text:?}: {version:?} is not an exact version (PEP 440, such as 0.8.0, 1.0rc1, 2.1.post1)"
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

/// A project name as PEP 508 allows it: `[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?`.
pub(super) fn pep508_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !name.is_empty()
        && name.len() <= 100
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '.' | '_' | '-'))
}

/// A version as PEP 440 writes it (packaging's `VERSION_PATTERN`, without a leading `v`,
/// and a separator only before a number): `[N!]N(.N)*[{a|b|rc}N][.postN][.devN][+local]`.
pub(super) fn pep440_version(version: &str) -> bool {
    let lower = version.to_ascii_lowercase();
    let mut p = Cursor(lower.as_bytes());
    // The epoch.
    let before = p.0;
    if !(p.digits() && p.eat("!")) {
        p.0 = before;
    }
    // The release: numbers joined by dots.
    if !p.digits() {
        return false;
    }
    while p.0.starts_with(b".") && p.0.get(1).is_some_and(u8::is_ascii_digit) {
        p.eat(".");
        p.digits();
    }
    p.labelled(&["alpha", "a", "beta", "b", "preview", "pre", "c", "rc"]);
    let before = p.0;
    if !(p.eat("-") && p.digits()) {
        p.0 = before;
        p.labelled(&["post", "rev", "r"]);
    }
    p.labelled(&["dev"]);
    if p.eat("+") {
        loop {
            if !p.take_while(|b| b.is_ascii_alphanumeric()) {
                return false;
            }
            if !(p.eat(".") || p.eat("-") || p.eat("_")) {
                break;
            }
        }
    }
    p.0.is_empty()
}

/// What is left of a version being read.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn eat(&mut self, word: &str) -> bool {
        match self.0.strip_prefix(word.as_bytes()) {
            Some(rest) => {
                self.0 = rest;
                true
            }
            None => false,
        }
    }

    fn take_while(&mut self, f: impl Fn(&u8) -> bool) -> bool {
        let n = self.0.iter().take_while(|b| f(b)).count();
        self.0 = &self.0[n..];
        n > 0
    }

    fn digits(&mut self) -> bool {
        self.take_while(u8::is_ascii_digit)
    }

    /// `[-_.]?label([-_.]?N)?`: nothing is taken unless a label is there.
    fn labelled(&mut self, labels: &[&str]) {
        let before = self.0;
        let _ = self.eat("-") || self.eat("_") || self.eat(".");
        if !labels.iter().any(|l| self.eat(l)) {
            self.0 = before;
            return;
        }
        let label_end = self.0;
        let _ = self.eat("-") || self.eat("_") || self.eat(".");
        if !self.digits() {
            self.0 = label_end;
        }
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

    #[test]
    fn names_and_versions_are_pep_508_and_pep_440() {
        for good in [
            "verl==0.8.0",
            "a==1",
            "A.b_c-d==1!2.0.1rc2.post3.dev4+local.7-x",
            "six==1.16.0",
            "x==1.0a",
            "x==1.0-1",
            "x==1.0.post",
            "x==1.0.dev",
            "x==2.0b1",
        ] {
            assert!(PinnedRelease::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "six-==1.16.0",
            "-six==1",
            "six.==1",
            "_six==1",
            "si x==1",
            "x==1.",
            "x==1..0",
            "x==1.0-",
            "x==1.0+",
            "x==1.0+a..b",
            "x==1.0foo",
            "x==1.0.*",
            "x==v1.0",
            "x==1.0 ",
        ] {
            assert!(PinnedRelease::parse(bad).is_err(), "{bad} parsed");
        }
        let err = PinnedRelease::parse("pypi:six-==1.16.0").unwrap_err();
        assert!(err.contains("\"six-\" is not a package name"), "{err}");
    }
}
