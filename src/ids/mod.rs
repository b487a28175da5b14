//! Ids and user-given paths, validated once at the boundary.
//!
//! Every value from outside that becomes a directory name, a URL segment or a path under
//! the shared storage is one of these types, and each is constructed only through a
//! checking function (`FromStr`, `TryFrom<String>`, serde's `Deserialize` goes through the
//! same check). So an unchecked string cannot reach `Path::join`, a Ray URL or a shell
//! string. A leaf module: it imports nothing of the pipeline.

mod requirements;
mod versions;

pub use requirements::{LockError, LockedPin, RequirementsLock};
pub use versions::{PYPI_PREFIX, PinnedRelease, RayVersion};

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Deserializes a string through `parse`, inside the deserializer's own call, so the
/// format can point its error at the value (serde_yaml locates only errors raised while
/// it is reading the value; a check run after `String::deserialize` returns is reported
/// at 1:1 without its key path).
pub fn deserialize_checked<'de, D, T, E>(
    d: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, E>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: fmt::Display,
{
    struct Checked<T, E> {
        expecting: &'static str,
        parse: fn(&str) -> Result<T, E>,
    }
    impl<T, E: fmt::Display> serde::de::Visitor<'_> for Checked<T, E> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<Er: serde::de::Error>(self, v: &str) -> Result<T, Er> {
            (self.parse)(v).map_err(Er::custom)
        }
    }
    d.deserialize_str(Checked { expecting, parse })
}

/// The rule every id kind shares, as told to the user.
pub const ID_RULE: &str =
    "1-128 characters from A-Z a-z 0-9 . _ -, not starting with - or ., and not . or ..";

const ID_MAX: usize = 128;

/// An id, path or name that is not valid for its kind: what was given and what is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {}: {reason} (valid: {rule})", shown(given))]
pub struct IdError {
    /// What kind of value it was meant to be (`submission id`, `code id`, ...).
    pub kind: &'static str,
    pub given: String,
    /// What is wrong with it.
    pub reason: String,
    pub rule: &'static str,
}

/// The value as printed in errors: quoted and escaped (NUL, control characters and
/// look-alikes become visible), and cut when very long.
fn shown(given: &str) -> String {
    const MAX: usize = 80;
    if given.chars().count() <= MAX {
        format!("{given:?}")
    } else {
        let head: String = given.chars().take(MAX).collect();
        format!("{head:?}… ({} characters)", given.chars().count())
    }
}

/// True when `text` keeps the id rule every kind shares (see [`ID_RULE`]).
pub fn is_valid_id(text: &str) -> bool {
    id_problem(text).is_none()
}

/// Why `text` breaks the id rule, or None when it keeps it.
fn id_problem(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("it is empty".into());
    }
    if text == "." || text == ".." {
        return Some(format!("{text:?} names a directory, not an id"));
    }
    if let Some(c) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Some(format!("{c:?} is not allowed"));
    }
    if text.starts_with(['-', '.']) {
        return Some("it starts with - or .".into());
    }
    if text.len() > ID_MAX {
        return Some(format!("it is {} characters long", text.len()));
    }
    None
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// What this kind of id is called in messages.
            pub const KIND: &'static str = $kind;

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(text: &str) -> Result<Self, IdError> {
                match id_problem(text) {
                    None => Ok(Self(text.to_string())),
                    Some(reason) => Err(IdError {
                        kind: $kind,
                        given: text.to_string(),
                        reason,
                        rule: ID_RULE,
                    }),
                }
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(text: String) -> Result<Self, IdError> {
                text.parse()
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(text: &str) -> Result<Self, IdError> {
                text.parse()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<Path> for $name {
            fn as_ref(&self) -> &Path {
                Path::new(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                deserialize_checked(d, $kind, <$name as FromStr>::from_str)
            }
        }
    };
}

/// Serde's `deserialize_with` for a `String` field that holds an id of kind `T` read back
/// from the shared storage (a run's report, its lock): the value goes through `T`'s own
/// check at the read, so a planted `../../x` is an error of the file that holds it, never a
/// string on its way to a path, a URL or a job to stop.
/// `#[serde(deserialize_with = "crate::ids::checked::<_, crate::ids::SubmissionId>")]`.
pub fn checked<'de, D, T>(d: D) -> Result<String, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Into<String>,
{
    T::deserialize(d).map(Into::into)
}

/// [`checked`] for an optional field (give it `#[serde(default)]` too).
pub fn checked_opt<'de, D, T>(d: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Into<String>,
{
    Option::<T>::deserialize(d).map(|id| id.map(Into::into))
}

id_type!(
    /// A Ray job's submission id, also the directory `jobs/<id>/` and a segment of Ray's
    /// job URLs.
    SubmissionId,
    "submission id"
);
id_type!(
    /// A code snapshot's id: the directory `common/code/<name>/<code_id>/`.
    CodeId,
    "code id"
);
id_type!(
    /// A snapshot family: the directory `common/code/<name>/` (`verl` by default).
    CodeName,
    "snapshot name"
);
id_type!(
    /// An `argus run`'s id: the directory `runs/<run_id>/`.
    RunId,
    "run id"
);

/// A snapshot as a JobSpec or a command names it: `code_id`, or `name/code_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodeRef {
    pub name: Option<CodeName>,
    pub id: CodeId,
}

impl FromStr for CodeRef {
    type Err = IdError;
    fn from_str(text: &str) -> Result<Self, IdError> {
        let wrap = |mut e: IdError| {
            e.kind = "code id";
            e.given = text.to_string();
            e.rule = "a code_id (1-128 characters from A-Z a-z 0-9 . _ -, not starting with - or .), or name/code_id";
            e
        };
        match text.split_once('/') {
            Some((name, id)) => Ok(CodeRef {
                name: Some(name.parse().map_err(wrap)?),
                id: id.parse().map_err(wrap)?,
            }),
            None => Ok(CodeRef {
                name: None,
                id: text.parse().map_err(wrap)?,
            }),
        }
    }
}

impl fmt::Display for CodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name}/{}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

impl Serialize for CodeRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CodeRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_checked(
            d,
            "a code id or name/code_id",
            <CodeRef as FromStr>::from_str,
        )
    }
}

/// `<prefix>-<yyyymmdd-hhmmss>-<4 hex>`: readable, sortable, unique enough. The prefix is
/// argus's own (a workload name, `run`).
pub fn generate(prefix: &str) -> String {
    let now = std::time::SystemTime::now();
    let stamp = humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let random = (nanos ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{prefix}-{stamp}-{random:04x}")
}

impl SubmissionId {
    /// A fresh id for a job of `workload` (`ppo-20260101-120000-1a2b`).
    pub fn generate(workload: &str) -> Self {
        Self::from_str(&generate(workload)).unwrap_or_else(|_| Self(generate("job")))
    }
}

impl CodeName {
    /// `verl`, the default snapshot family.
    pub fn verl() -> Self {
        Self("verl".to_string())
    }
}

impl RunId {
    /// A fresh run id (`run-20260101-120000-1a2b`).
    pub fn generate() -> Self {
        Self(generate("run"))
    }
}

// ---------------------------------------------------------------------------------------
// Paths that must stay under a root.

const PATH_MAX: usize = 4096;

fn path_error(
    kind: &'static str,
    given: &str,
    reason: impl Into<String>,
    rule: &'static str,
) -> IdError {
    IdError {
        kind,
        given: given.to_string(),
        reason: reason.into(),
        rule,
    }
}

const UNDER_ROOT_RULE: &str = "a relative path without .. components, NUL or control characters";

/// The lexically normal components of `text` (`.` dropped), refusing `..`, NUL and control
/// characters. Checked without touching the filesystem.
fn normal_components<'a>(
    kind: &'static str,
    given: &str,
    text: &'a str,
    rule: &'static str,
) -> Result<Vec<&'a str>, IdError> {
    if text.len() > PATH_MAX {
        return Err(path_error(
            kind,
            given,
            format!("it is {} bytes long", text.len()),
            rule,
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(path_error(kind, given, format!("it contains {c:?}"), rule));
    }
    let mut out = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(path_error(
                    kind,
                    given,
                    ".. would leave its directory",
                    rule,
                ));
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// A relative path that cannot leave the directory it is joined to: no `..`, not
/// absolute, no NUL or control characters, not empty. Normalised (`a/./b` is `a/b`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnderRoot(String);

impl UnderRoot {
    /// Parses `given` as a path under some root; `kind` names it in the error.
    pub fn parse_as(kind: &'static str, given: &str) -> Result<Self, IdError> {
        if given.starts_with('/') {
            return Err(path_error(kind, given, "it is absolute", UNDER_ROOT_RULE));
        }
        let parts = normal_components(kind, given, given, UNDER_ROOT_RULE)?;
        if parts.is_empty() {
            return Err(path_error(kind, given, "it names no file", UNDER_ROOT_RULE));
        }
        Ok(UnderRoot(parts.join("/")))
    }

    /// `root/<self>`: stays under `root` by construction.
    pub fn join_to(&self, root: &Path) -> PathBuf {
        root.join(&self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl FromStr for UnderRoot {
    type Err = IdError;
    fn from_str(text: &str) -> Result<Self, IdError> {
        Self::parse_as("relative path", text)
    }
}

impl fmt::Display for UnderRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<Path> for UnderRoot {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

const ABSOLUTE_RULE: &str = "an absolute path without .. components, NUL or control characters";

/// An absolute path, lexically clean (no `..`, NUL or control characters; `.` and repeated
/// slashes dropped). Where it must live (the shared storage) is checked with
/// [`ContainerPath::under`] once the mount is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerPath(String);

impl ContainerPath {
    pub fn parse_as(kind: &'static str, given: &str) -> Result<Self, IdError> {
        if !given.starts_with('/') {
            return Err(path_error(kind, given, "it is not absolute", ABSOLUTE_RULE));
        }
        let parts = normal_components(kind, given, given, ABSOLUTE_RULE)?;
        Ok(ContainerPath(format!("/{}", parts.join("/"))))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part of this path below `mount` (itself a clean absolute path), or None when the
    /// path is not under it (component-wise: `/mnt/sharedX` is not under `/mnt/shared`).
    pub fn under(&self, mount: &str) -> Option<SharedPath> {
        let mount = mount.trim_end_matches('/');
        let rest = self.0.strip_prefix(mount)?;
        let rest = match rest {
            "" => "",
            r if r.starts_with('/') => &r[1..],
            _ => return None,
        };
        Some(SharedPath {
            mount: mount.to_string(),
            rel: rest.to_string(),
        })
    }
}

impl FromStr for ContainerPath {
    type Err = IdError;
    fn from_str(text: &str) -> Result<Self, IdError> {
        Self::parse_as("absolute path", text)
    }
}

impl fmt::Display for ContainerPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ContainerPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ContainerPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_checked(d, "an absolute path", <ContainerPath as FromStr>::from_str)
    }
}

impl Serialize for UnderRoot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for UnderRoot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_checked(d, "a relative path", <UnderRoot as FromStr>::from_str)
    }
}

/// A Python dotted name, `module.function` (Ray's `worker_process_setup_hook`): ASCII
/// identifiers joined by dots, at least two of them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PythonName(String);

impl PythonName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for PythonName {
    type Err = IdError;
    fn from_str(text: &str) -> Result<Self, IdError> {
        let identifier = |part: &str| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() >= 2 && text.len() <= 200 && parts.iter().all(|p| identifier(p)) {
            Ok(PythonName(text.to_string()))
        } else {
            Err(IdError {
                kind: "Python name",
                given: text.to_string(),
                reason: "it is not a dotted Python name".into(),
                rule: "module.function, e.g. argus_verl_cpu.setup (ASCII identifiers joined by dots)",
            })
        }
    }
}

impl fmt::Display for PythonName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PythonName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PythonName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_checked(d, "module.function", <PythonName as FromStr>::from_str)
    }
}

/// A path on the shared storage: the mount as the containers see it, and the part below
/// it. The same file on this host is [`SharedPath::on_host`]; neither can leave the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedPath {
    mount: String,
    /// Relative, lexically clean; empty for the mount itself.
    rel: String,
}

impl SharedPath {
    /// Parses a user-given path that must live on the shared storage mounted at `mount`:
    /// absolute paths must start with the mount, relative ones are taken under it.
    pub fn parse(kind: &'static str, given: &str, mount: &str) -> Result<Self, IdError> {
        if given.starts_with('/') {
            ContainerPath::parse_as(kind, given)?
                .under(mount)
                .ok_or_else(|| path_error(kind, given, format!("it is not under the shared storage {mount}"), "an absolute path under the shared storage's mount, or a path relative to it, without .."))
        } else {
            let rel = UnderRoot::parse_as(kind, given)?;
            Ok(SharedPath {
                mount: mount.trim_end_matches('/').to_string(),
                rel: rel.0,
            })
        }
    }

    /// The path inside the containers.
    pub fn in_container(&self) -> String {
        if self.rel.is_empty() {
            self.mount.clone()
        } else {
            format!("{}/{}", self.mount, self.rel)
        }
    }

    /// The same path on a host that sees the shared storage at `host_root`.
    pub fn on_host(&self, host_root: &Path) -> PathBuf {
        if self.rel.is_empty() {
            host_root.to_path_buf()
        } else {
            host_root.join(&self.rel)
        }
    }

    /// The part below the mount (empty for the mount itself).
    pub fn relative(&self) -> &str {
        &self.rel
    }
}

impl fmt::Display for SharedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.in_container())
    }
}

/// True when `path` has no component that could leave its root (`..`, a root, a prefix).
pub fn stays_under(path: &Path) -> bool {
    path.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id kind refuses these, each with the value and the rule in the message.
    const BAD_IDS: &[(&str, &str)] = &[
        ("../../x", "'/' is not allowed"),
        ("a/b", "'/' is not allowed"),
        ("..", "names a directory"),
        (".", "names a directory"),
        ("", "it is empty"),
        ("a\0b", "'\\0' is not allowed"),
        ("a b", "' ' is not allowed"),
        (" a", "' ' is not allowed"),
        ("a\nb", "'\\n' is not allowed"),
        ("-rf", "starts with - or ."),
        (".hidden", "starts with - or ."),
        ("pp\u{043e}", "'о' is not allowed"), // Cyrillic o
        ("run\u{2010}1", "is not allowed"),   // Unicode hyphen
        ("ｒｕｎ", "is not allowed"),         // full-width letters
        ("a\u{200b}b", "is not allowed"),     // zero-width space
        ("a%2fb", "'%' is not allowed"),
        ("a\\b", "'\\\\' is not allowed"),
        ("a?b", "'?' is not allowed"),
        ("$(id)", "'$' is not allowed"),
    ];

    #[test]
    fn bad_ids_are_refused_by_every_kind_with_what_was_given_and_what_is_valid() {
        let long = "a".repeat(200);
        let mut cases: Vec<(String, String)> = BAD_IDS
            .iter()
            .map(|(id, why)| (id.to_string(), why.to_string()))
            .collect();
        cases.push((long.clone(), "200 characters long".into()));
        for (id, why) in &cases {
            for err in [
                SubmissionId::from_str(id).unwrap_err(),
                CodeId::from_str(id).unwrap_err(),
                CodeName::from_str(id).unwrap_err(),
                RunId::from_str(id).unwrap_err(),
            ] {
                let text = err.to_string();
                assert!(text.contains(why), "{id:?}: {text}");
                assert!(text.contains("valid: 1-128 characters"), "{text}");
                assert!(!text.contains('\0') && !text.contains('\n'), "{text:?}");
            }
        }
        let err = SubmissionId::from_str(&long).unwrap_err().to_string();
        assert!(err.contains("… (200 characters)"), "{err}");
        assert!(err.starts_with("invalid submission id \"aaaa"), "{err}");
    }

    #[test]
    fn good_ids_round_trip() {
        for id in [
            "a",
            "ppo-20260101-120000-1a2b",
            "x.y_z-1",
            &"a".repeat(128),
            "0",
        ] {
            let parsed: SubmissionId = id.parse().unwrap();
            assert_eq!(parsed.as_str(), id);
            assert_eq!(parsed.to_string(), id);
            let yaml = serde_yaml::to_string(&parsed).unwrap();
            let back: SubmissionId = serde_yaml::from_str(&yaml).unwrap();
            assert_eq!(back, parsed);
        }
        assert!(SubmissionId::from_str(&"a".repeat(129)).is_err());
    }

    #[test]
    fn deserializing_goes_through_the_check() {
        let err = serde_yaml::from_str::<CodeId>("../x").unwrap_err();
        assert!(
            err.to_string().contains("invalid code id \"../x\""),
            "{err}"
        );
        let err = serde_json::from_str::<RunId>("\"a b\"").unwrap_err();
        assert!(err.to_string().contains("invalid run id"), "{err}");
    }

    #[test]
    fn code_refs_are_an_id_or_name_slash_id() {
        let r: CodeRef = "verl/abc-1".parse().unwrap();
        assert_eq!(r.name.as_ref().map(CodeName::as_str), Some("verl"));
        assert_eq!(r.id.as_str(), "abc-1");
        assert_eq!(r.to_string(), "verl/abc-1");
        let r: CodeRef = "abc".parse().unwrap();
        assert!(r.name.is_none());
        for bad in ["../x", "a/b/c", "/abc", "verl/", "a/..", ""] {
            let err = CodeRef::from_str(bad).unwrap_err().to_string();
            assert!(err.contains("name/code_id"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn generated_ids_are_valid() {
        let id = SubmissionId::generate("ppo");
        assert!(id.as_str().starts_with("ppo-"), "{id}");
        let run = RunId::generate();
        assert!(RunId::from_str(run.as_str()).is_ok(), "{run}");
        assert_eq!(generate("run").len(), "run-20260101-120000-abcd".len());
    }

    #[test]
    fn under_root_paths_cannot_escape() {
        assert_eq!(
            UnderRoot::from_str("gsm8k/train.parquet").unwrap().as_str(),
            "gsm8k/train.parquet"
        );
        assert_eq!(UnderRoot::from_str("./a//b/.").unwrap().as_str(), "a/b");
        for bad in [
            "../../etc/passwd",
            "a/../../b",
            "/etc/passwd",
            "",
            ".",
            "a\0b",
            "a/\nb",
            "x/..",
        ] {
            assert!(UnderRoot::from_str(bad).is_err(), "{bad:?}");
        }
        let root = Path::new("/srv/shared/common/datasets");
        let p = UnderRoot::from_str("gsm8k/train.parquet")
            .unwrap()
            .join_to(root);
        assert!(p.starts_with(root));
    }

    #[test]
    fn shared_paths_must_start_with_the_mount() {
        let p = SharedPath::parse(
            "code_path",
            "/mnt/shared/common/code/verl/abc",
            "/mnt/shared",
        )
        .unwrap();
        assert_eq!(p.relative(), "common/code/verl/abc");
        assert_eq!(p.in_container(), "/mnt/shared/common/code/verl/abc");
        assert_eq!(
            p.on_host(Path::new("/data")),
            PathBuf::from("/data/common/code/verl/abc")
        );
        let p = SharedPath::parse("code_path", "user/code", "/mnt/shared/").unwrap();
        assert_eq!(p.in_container(), "/mnt/shared/user/code");
        for bad in [
            "/etc",
            "/mnt/sharedX/a",
            "/mnt/shared/../etc",
            "/mnt/shared/a/../../etc",
            "../x",
            "/mnt/shared/a\0",
        ] {
            let err = SharedPath::parse("code_path", bad, "/mnt/shared").unwrap_err();
            assert!(
                err.to_string().starts_with("invalid code_path"),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            ContainerPath::from_str("/mnt//shared/./a")
                .unwrap()
                .as_str(),
            "/mnt/shared/a"
        );
    }

    #[test]
    fn stays_under_is_lexical() {
        assert!(stays_under(Path::new("a/./b")));
        assert!(!stays_under(Path::new("a/../b")));
        assert!(!stays_under(Path::new("/a")));
    }
}
