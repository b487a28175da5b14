//! Names that cross the Hugging Face boundary, as types that can only hold safe values.
//!
//! A mirror's answers (the revision API's `sha` and `siblings`, `X-Repo-Commit`, `ETag` /
//! `X-Linked-Etag`, sizes) and the user's `--model REPO[@REV]` become path components in
//! the HF cache and segments of URLs. Each kind of name has a type here, built only by a
//! checking function, so an unchecked string cannot reach `Path::join` or a URL:
//!
//! - [`RepoId`]: `org/name` (or a bare legacy `name`), Hugging Face's charset, no `--`/`..`;
//! - [`Revision`]: a branch, tag or commit, safe as a relative path under `refs/` and
//!   percent-encoded whole as a URL segment;
//! - [`Commit`]: exactly 40 lowercase hex;
//! - [`Etag`]: a git sha1 (40 hex) or an LFS sha256 (64 hex), after `W/` and quotes;
//! - [`RepoPath`]: a relative `/`-separated file name with no empty, `.` or `..` segment,
//!   nothing that decodes to one (`%2e%2e`), no backslash, NUL or control character.
//!
//! The response parsers ([`parse_revision_info`], [`parse_file_meta`]) turn a mirror's
//! answers into these types or a [`ProtocolError`]; they are pure and fuzzed.
//!
//! A leaf module: std, serde and thiserror only (the fuzz target compiles this file alone).

// `fuzzing` is the cfg cargo fuzz sets (see `properties`).
#![allow(unexpected_cfgs)]

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Models or datasets: the URL prefix and the cache folder name differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepoKind {
    Model,
    Dataset,
}

impl RepoKind {
    /// `models` / `datasets`, as in API paths and cache folder names.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }
    /// `model` / `dataset`, for messages.
    pub fn singular(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
    /// The prefix of `resolve/` URLs: models have none.
    pub fn resolve_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

/// A name that failed its check. `value` is already escaped and shortened for display
/// (a hostile server's bytes never reach the terminal raw).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value} is not valid: {reason}")]
pub struct BadName {
    pub what: &'static str,
    pub value: String,
    pub reason: String,
}

/// `value` as a quoted, escaped Rust string, cut to a readable length.
pub fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.chars().count() <= MAX {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(MAX).collect();
        format!("{head:?}...")
    }
}

fn bad(what: &'static str, value: &str, reason: impl Into<String>) -> BadName {
    BadName {
        what,
        value: shown(value),
        reason: reason.into(),
    }
}

/// A repository id: `org/name`, or a bare `name` (legacy hub repos such as `gpt2`).
/// Each part: ASCII letters, digits, `-`, `_`, `.`; no `--` or `..`; does not start or
/// end with `-` or `.`; at most 96 characters (the hub's rules).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId(String);

impl RepoId {
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        const WHAT: &str = "repo id";
        if raw.is_empty() {
            return Err(bad(WHAT, raw, "it is empty (expected org/name)"));
        }
        let parts: Vec<&str> = raw.split('/').collect();
        if parts.len() > 2 {
            return Err(bad(WHAT, raw, "at most one `/` (expected org/name)"));
        }
        for part in &parts {
            if part.is_empty() {
                return Err(bad(WHAT, raw, "an empty org or name (expected org/name)"));
            }
            if part.len() > 96 {
                return Err(bad(WHAT, raw, "a part is longer than 96 characters"));
            }
            if let Some(c) = part
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            {
                return Err(bad(
                    WHAT,
                    raw,
                    format!("{c:?} is not allowed (letters, digits, `-`, `_`, `.`)"),
                ));
            }
            if part.contains("--") || part.contains("..") {
                return Err(bad(WHAT, raw, "`--` and `..` are not allowed"));
            }
            if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
                return Err(bad(WHAT, raw, "a part starts or ends with `-` or `.`"));
            }
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `models--org--name`: one path component (no `/` survives, parts have no `--`).
    pub fn folder_name(&self, kind: RepoKind) -> String {
        format!("{}--{}", kind.plural(), self.0.replace('/', "--"))
    }

    /// `org/name` in a URL path: the charset needs no escaping.
    pub fn url_path(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A branch, tag or commit. Git's ref rules (no `..`, no segment starting with `.`, no
/// `.lock` suffix, no `//`) over a conservative charset (ASCII letters, digits and
/// `. _ - / + = , @`), so it is safe as a relative path under `refs/` and is sent
/// percent-encoded as a single URL segment (as huggingface_hub does).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        const WHAT: &str = "revision";
        if raw.is_empty() {
            return Err(bad(WHAT, raw, "it is empty"));
        }
        if raw.len() > 255 {
            return Err(bad(WHAT, raw, "longer than 255 characters"));
        }
        if let Some(c) = raw.chars().find(|c| {
            !(c.is_ascii_alphanumeric()
                || matches!(c, '.' | '_' | '-' | '/' | '+' | '=' | ',' | '@'))
        }) {
            return Err(bad(
                WHAT,
                raw,
                format!("{c:?} is not allowed (letters, digits and . _ - / + = , @)"),
            ));
        }
        if raw.contains("..") {
            return Err(bad(WHAT, raw, "`..` is not allowed"));
        }
        if raw.starts_with(['/', '-']) || raw.ends_with(['/', '.']) {
            return Err(bad(
                WHAT,
                raw,
                "it starts with `/` or `-`, or ends with `/` or `.`",
            ));
        }
        if raw == "@" {
            return Err(bad(WHAT, raw, "`@` alone is not a revision"));
        }
        for segment in raw.split('/') {
            if segment.is_empty() {
                return Err(bad(WHAT, raw, "an empty segment (`//`)"));
            }
            if segment.starts_with('.') {
                return Err(bad(WHAT, raw, "a segment starts with `.`"));
            }
            if segment.ends_with(".lock") {
                return Err(bad(WHAT, raw, "a segment ends with `.lock`"));
            }
        }
        Ok(Self(raw.to_string()))
    }

    pub fn main() -> Self {
        Self("main".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The revision is itself a commit (then no ref is written for it).
    pub fn as_commit(&self) -> Option<Commit> {
        Commit::parse(&self.0).ok()
    }

    /// One URL path segment: everything but unreserved characters is percent-encoded
    /// (`refs/pr/1` -> `refs%2Fpr%2F1`).
    pub fn url_segment(&self) -> String {
        percent_encode(&self.0)
    }

    /// `refs/<revision>` below a repo folder: relative, every segment a plain name.
    pub fn ref_path(&self) -> PathBuf {
        let mut path = PathBuf::from("refs");
        for segment in self.0.split('/') {
            path.push(segment);
        }
        path
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A git commit: exactly 40 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Commit(String);

impl Commit {
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        if raw.len() != 40 || !raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("commit", raw, "a commit is 40 lowercase hex digits"));
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 10 digits, for messages.
    pub fn short(&self) -> &str {
        &self.0[..10]
    }
}

impl fmt::Display for Commit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A file's etag: the git blob sha1 (40 hex) or, for LFS files, the sha256 of its bytes
/// (64 hex). Stored lowercase; it names the blob in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Etag(String);

impl Etag {
    /// From a header value: `W/"abc"`, `"abc"` and `abc` are the same etag.
    pub fn from_header(raw: &str) -> Result<Self, BadName> {
        let trimmed = raw.trim();
        let unweak = trimmed.strip_prefix("W/").unwrap_or(trimmed);
        let bare = unweak
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(unweak);
        Self::parse(bare).map_err(|e| BadName {
            value: shown(raw),
            ..e
        })
    }

    /// A bare etag (as a blob's file name).
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        if !matches!(raw.len(), 40 | 64) || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(
                "etag",
                raw,
                "an etag is a git sha1 (40 hex digits) or a sha256 (64 hex digits)",
            ));
        }
        Ok(Self(raw.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// LFS etags are sha256 digests: the bytes can be verified against them.
    pub fn sha256(&self) -> Option<&str> {
        (self.0.len() == 64).then_some(self.0.as_str())
    }
}

impl fmt::Display for Etag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A file's path inside a repo: relative, `/`-separated, every segment a plain name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoPath(String);

impl RepoPath {
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        const WHAT: &str = "repo file name";
        if raw.is_empty() {
            return Err(bad(WHAT, raw, "it is empty"));
        }
        if raw.len() > 1024 {
            return Err(bad(WHAT, raw, "longer than 1024 bytes"));
        }
        if raw.starts_with('/') {
            return Err(bad(WHAT, raw, "an absolute path"));
        }
        if let Some(c) = raw.chars().find(|c| c.is_control()) {
            return Err(bad(
                WHAT,
                raw,
                format!("a control character ({c:?}) is not allowed"),
            ));
        }
        if raw.contains('\\') {
            return Err(bad(WHAT, raw, "a backslash is not allowed"));
        }
        for segment in raw.split('/') {
            if segment.is_empty() {
                return Err(bad(WHAT, raw, "an empty segment"));
            }
            if segment.len() > 255 {
                return Err(bad(WHAT, raw, "a segment is longer than 255 bytes"));
            }
            if segment == "." || segment == ".." {
                return Err(bad(WHAT, raw, "`.` and `..` segments are not allowed"));
            }
            // What a server or proxy that decodes once would see.
            let decoded = percent_decode(segment);
            if decoded == b"." || decoded == b".." {
                return Err(bad(WHAT, raw, "a segment decodes to `.` or `..`"));
            }
            if decoded.iter().any(|b| matches!(b, b'/' | b'\\' | 0)) {
                return Err(bad(WHAT, raw, "a segment decodes to `/`, `\\` or NUL"));
            }
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The relative path on disk (only normal components, by construction).
    pub fn to_path(&self) -> PathBuf {
        self.0.split('/').collect()
    }

    /// How many directories deep the file is (0 for a top-level file).
    pub fn depth(&self) -> usize {
        self.0.matches('/').count()
    }

    /// The URL path: each segment percent-encoded, `/` kept (as huggingface_hub does).
    pub fn url_path(&self) -> String {
        self.0
            .split('/')
            .map(percent_encode)
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `--model REPO[@REV]`: a repo id and a revision (default `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub repo: RepoId,
    pub revision: Revision,
}

impl ModelSpec {
    pub fn parse(raw: &str) -> Result<Self, BadName> {
        let (repo, revision) = match raw.split_once('@') {
            Some((repo, revision)) => (repo, Revision::parse(revision)?),
            None => (raw, Revision::main()),
        };
        Ok(Self {
            repo: RepoId::parse(repo)?,
            revision,
        })
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision)
    }
}

/// `root` joined with relative parts that must stay below it: true when `path` is `root`
/// followed only by normal components (no `..`, no root, no prefix). Lexical: the caller
/// also checks the real directory once it exists (symlinks).
pub fn lexically_under(root: &Path, path: &Path) -> bool {
    path.strip_prefix(root)
        .is_ok_and(|rest| rest.components().all(|c| matches!(c, Component::Normal(_))))
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_value(bytes[i + 1]), hex_value(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// What a mirror's answers become.

/// A mirror's answer that is not what the protocol promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error(transparent)]
    BadName(#[from] BadName),
    #[error("not a revision answer: {0}")]
    NotRevisionJson(String),
    #[error("the file list names {0} twice")]
    DuplicateFile(String),
    #[error("no X-Repo-Commit or ETag header: is this a Hugging Face endpoint?")]
    MissingHeaders,
    #[error("a {name} header that is not a size: {value}")]
    BadSize { name: &'static str, value: String },
    #[error("a {name} header that is not text")]
    NotText { name: &'static str },
    #[error("it answered for commit {answered}, not the {asked} asked for")]
    OtherCommit { asked: Commit, answered: Commit },
}

/// `GET /api/{models|datasets}/{repo}/revision/{rev}`, checked: the commit and every file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionInfo {
    pub commit: Commit,
    pub files: Vec<RepoPath>,
}

/// Parses the revision API's JSON. Every name is checked; one bad name refuses the
/// whole answer (nothing is downloaded from a mirror that sent one).
pub fn parse_revision_info(body: &[u8]) -> Result<RevisionInfo, ProtocolError> {
    #[derive(serde::Deserialize)]
    struct Raw {
        sha: String,
        #[serde(default)]
        siblings: Vec<RawSibling>,
    }
    #[derive(serde::Deserialize)]
    struct RawSibling {
        rfilename: String,
    }
    let raw: Raw = serde_json::from_slice(body).map_err(|e| {
        let mut text = e.to_string();
        text.truncate(200);
        ProtocolError::NotRevisionJson(text)
    })?;
    let commit = Commit::parse(&raw.sha)?;
    let mut files = Vec::with_capacity(raw.siblings.len());
    let mut seen = std::collections::HashSet::new();
    for sibling in raw.siblings {
        let file = RepoPath::parse(&sibling.rfilename)?;
        if !seen.insert(file.clone()) {
            return Err(ProtocolError::DuplicateFile(shown(file.as_str())));
        }
        files.push(file);
    }
    Ok(RevisionInfo { commit, files })
}

/// What HEAD says about one file at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub commit: Commit,
    pub etag: Etag,
    pub size: Option<u64>,
}

/// A HEAD answer's headers -> [`FileMeta`]: `X-Repo-Commit`, `X-Linked-Etag` else `ETag`,
/// `X-Linked-Size` else `Content-Length`. `get` looks a header up by lowercase name.
/// `Ok(None)` when commit or etag is absent (a redirect without them is followed).
pub fn parse_file_meta<'a>(
    get: impl Fn(&str) -> Option<&'a [u8]>,
) -> Result<Option<FileMeta>, ProtocolError> {
    let text = |name: &'static str| -> Result<Option<&'a str>, ProtocolError> {
        match get(name) {
            None => Ok(None),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(|s| Some(s.trim()))
                .map_err(|_| ProtocolError::NotText { name }),
        }
    };
    let commit = text("x-repo-commit")?;
    let etag = match text("x-linked-etag")? {
        Some(etag) => Some(etag),
        None => text("etag")?,
    };
    let size = match text("x-linked-size")? {
        Some(size) => Some(("X-Linked-Size", size)),
        None => text("content-length")?.map(|s| ("Content-Length", s)),
    };
    let (Some(commit), Some(etag)) = (commit, etag) else {
        return Ok(None);
    };
    let size = match size {
        None => None,
        Some((name, value)) => Some(parse_size(value).ok_or_else(|| ProtocolError::BadSize {
            name,
            value: shown(value),
        })?),
    };
    Ok(Some(FileMeta {
        commit: Commit::parse(commit)?,
        etag: Etag::from_header(etag)?,
        size,
    }))
}

/// Digits only (no sign, no spaces inside), as HTTP sizes are written.
fn parse_size(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// The properties every accepted value has, checked on arbitrary bytes: by the fuzz
/// target (`fuzz/fuzz_targets/hub_responses.rs`, nightly) and by a seeded generator in the
/// unit tests (stable). Panics when a property does not hold.
#[cfg(any(test, fuzzing))]
pub mod properties {
    use super::*;

    fn plain_below(root: &Path, rel: &Path) {
        assert!(
            rel.components().all(|c| matches!(c, Component::Normal(_))),
            "{rel:?}"
        );
        assert!(lexically_under(root, &root.join(rel)), "{rel:?}");
    }

    fn url_safe(segment: &str, slash_ok: bool) {
        for b in segment.bytes() {
            assert!(
                b.is_ascii_alphanumeric() || b"-._~%".contains(&b) || (slash_ok && b == b'/'),
                "{segment:?}"
            );
        }
        for part in segment.split('/') {
            assert!(
                part != "." && part != ".." && !part.is_empty(),
                "{segment:?}"
            );
        }
    }

    fn check_path(p: &RepoPath) {
        plain_below(Path::new("/cache/snapshots/c"), &p.to_path());
        assert_eq!(p.to_path().components().count(), p.depth() + 1);
        url_safe(&p.url_path(), true);
        assert_eq!(RepoPath::parse(p.as_str()).as_ref(), Ok(p));
    }

    /// Every parser on `data`: as a name of each kind, as a revision answer, and as HEAD
    /// headers (`name: value` lines).
    pub fn check(data: &[u8]) {
        let root = Path::new("/cache");
        let text = String::from_utf8_lossy(data);
        if let Ok(repo) = RepoId::parse(&text) {
            for kind in [RepoKind::Model, RepoKind::Dataset] {
                plain_below(root, Path::new(&repo.folder_name(kind)));
                assert_eq!(Path::new(&repo.folder_name(kind)).components().count(), 1);
            }
            url_safe(repo.url_path(), true);
        }
        if let Ok(revision) = Revision::parse(&text) {
            plain_below(root, &revision.ref_path());
            url_safe(&revision.url_segment(), false);
            if let Some(commit) = revision.as_commit() {
                assert_eq!(commit.as_str(), revision.as_str());
            }
        }
        if let Ok(commit) = Commit::parse(&text) {
            assert_eq!(commit.as_str().len(), 40);
            plain_below(root, Path::new(commit.as_str()));
        }
        if let Ok(etag) = Etag::from_header(&text) {
            assert!(matches!(etag.as_str().len(), 40 | 64));
            assert!(
                etag.as_str()
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            );
            plain_below(root, Path::new(&format!("{etag}.incomplete")));
        }
        if let Ok(path) = RepoPath::parse(&text) {
            check_path(&path);
        }
        if let Ok(spec) = ModelSpec::parse(&text) {
            assert_eq!(ModelSpec::parse(&spec.to_string()).as_ref(), Ok(&spec));
        }
        if let Ok(info) = parse_revision_info(data) {
            plain_below(root, Path::new(info.commit.as_str()));
            for file in &info.files {
                check_path(file);
            }
        }
        let headers: Vec<(String, &[u8])> = data
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let at = line.iter().position(|&b| b == b':')?;
                let name = String::from_utf8_lossy(&line[..at])
                    .trim()
                    .to_ascii_lowercase();
                Some((name, &line[at + 1..]))
            })
            .collect();
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        if let Ok(Some(meta)) = parse_file_meta(get) {
            plain_below(root, Path::new(meta.commit.as_str()));
            plain_below(root, Path::new(meta.etag.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn repo_ids_follow_the_hubs_rules() {
        for ok in ["acme/tiny", "gpt2", "Qwen/Qwen2.5-0.5B-Instruct", "a_b/c.d"] {
            assert_eq!(RepoId::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "", "/", "a/", "/a", "a/b/c", "../x", "a/..", "a/.b", "a--b/c", "a/b..c", "a b/c",
            "a/b\0", "a/b%2e", "a/-b", "a/b.", "a\\b", "ünï/x",
        ] {
            assert!(RepoId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            RepoId::parse("acme/tiny")
                .unwrap()
                .folder_name(RepoKind::Dataset),
            "datasets--acme--tiny"
        );
    }

    #[test]
    fn revisions_are_safe_under_refs_and_in_urls() {
        for ok in ["main", "v1.0", "refs/pr/1", "feature/x-y", C, "release@2"] {
            let r = Revision::parse(ok).unwrap();
            assert!(lexically_under(
                Path::new("/c"),
                &Path::new("/c").join(r.ref_path())
            ));
        }
        assert_eq!(
            Revision::parse("refs/pr/1").unwrap().url_segment(),
            "refs%2Fpr%2F1"
        );
        for bad in [
            "", "..", "../x", "a/../b", "/main", "a//b", "a/", ".hidden", "a/.b", "x.lock", "a\0b",
            "a b", "a%2e", "a\\b", "a:b", "a?b", "a#b", "-x", "@", "a/.", "ma\nin",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(Revision::parse(C).unwrap().as_commit().unwrap().as_str(), C);
        assert!(Revision::main().as_commit().is_none());
    }

    #[test]
    fn commits_and_etags_are_hex_of_the_right_length() {
        assert!(Commit::parse(C).is_ok());
        for bad in [
            "c0ffee",
            &C.to_uppercase(),
            &format!("{C}0"),
            &format!("../{}", &C[3..]),
        ] {
            assert!(Commit::parse(bad).is_err(), "{bad:?} accepted");
        }
        let sha = "ab".repeat(32);
        for raw in [
            format!("W/\"{sha}\""),
            format!("\"{sha}\""),
            sha.clone(),
            sha.to_uppercase(),
        ] {
            let etag = Etag::from_header(&raw).unwrap();
            assert_eq!(etag.as_str(), sha);
            assert_eq!(etag.sha256(), Some(sha.as_str()));
        }
        assert!(Etag::from_header(C).unwrap().sha256().is_none());
        for bad in [
            "abc",
            "../../x",
            "\"\"",
            &format!("{C}/x"),
            &format!("{}g", &C[1..]),
        ] {
            assert!(Etag::from_header(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn repo_paths_are_relative_plain_names() {
        for ok in [
            "config.json",
            "extra/nested/g.json",
            "a b/ü.txt",
            ".gitattributes",
            "x/%41",
            "..x",
        ] {
            let p = RepoPath::parse(ok).unwrap();
            assert!(lexically_under(
                Path::new("/c"),
                &Path::new("/c").join(p.to_path())
            ));
        }
        for bad in [
            "",
            "/etc/passwd",
            "../../x",
            "a/../b",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "a\\..\\b",
            "%2e%2e/x",
            "a/%2E%2e",
            "a%2fb",
            "a%00",
            "%2e",
            "a\nb",
            "..",
        ] {
            assert!(RepoPath::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            RepoPath::parse("a b/%x?.json").unwrap().url_path(),
            "a%20b/%25x%3F.json"
        );
    }

    #[test]
    fn model_specs_split_at_the_first_at() {
        let spec = ModelSpec::parse("acme/tiny@v1").unwrap();
        assert_eq!(
            (spec.repo.as_str(), spec.revision.as_str()),
            ("acme/tiny", "v1")
        );
        assert_eq!(
            ModelSpec::parse("acme/tiny").unwrap().revision.as_str(),
            "main"
        );
        for bad in [
            "acme/tiny@",
            "acme/tiny@../x",
            "../x@main",
            "@main",
            "a/b@c d",
        ] {
            assert!(ModelSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn revision_answers_are_checked_whole() {
        let ok = format!(r#"{{"sha": "{C}", "siblings": [{{"rfilename": "a/b.json"}}], "x": 1}}"#);
        let info = parse_revision_info(ok.as_bytes()).unwrap();
        assert_eq!(info.commit.as_str(), C);
        assert_eq!(info.files[0].as_str(), "a/b.json");
        for bad in [
            r#"{"sha": "c0ffee", "siblings": []}"#.to_string(),
            format!(r#"{{"sha": "{C}", "siblings": [{{"rfilename": "../../x"}}]}}"#),
            format!(
                r#"{{"sha": "{C}", "siblings": [{{"rfilename": "ok"}}, {{"rfilename": "ok"}}]}}"#
            ),
            format!(r#"{{"sha": "{C}", "siblings": [{{"rfilename": 3}}]}}"#),
            "[]".to_string(),
            "not json".to_string(),
        ] {
            assert!(
                parse_revision_info(bad.as_bytes()).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn head_headers_become_file_meta() {
        let etag = "ab".repeat(32);
        let headers = |pairs: Vec<(&'static str, String)>| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.clone().into_bytes())
            }
        };
        let get = headers(vec![
            ("x-repo-commit", C.into()),
            ("etag", "\"0123\"".into()),
            ("x-linked-etag", format!("\"{etag}\"")),
            ("content-length", "12".into()),
            ("x-linked-size", "4096".into()),
        ]);
        let values: Vec<(String, Vec<u8>)> = [
            "x-repo-commit",
            "etag",
            "x-linked-etag",
            "content-length",
            "x-linked-size",
        ]
        .iter()
        .filter_map(|n| get(n).map(|v| (n.to_string(), v)))
        .collect();
        let lookup = |name: &str| {
            values
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_slice())
        };
        let meta = parse_file_meta(lookup).unwrap().unwrap();
        assert_eq!(meta.etag.as_str(), etag);
        assert_eq!(meta.size, Some(4096));
        assert_eq!(parse_file_meta(|_| None).unwrap(), None);
        let bad_size = |name: &str| match name {
            "x-repo-commit" => Some(C.as_bytes()),
            "etag" => Some(etag.as_bytes()),
            "content-length" => Some(b"-1".as_slice()),
            _ => None,
        };
        assert!(matches!(
            parse_file_meta(bad_size),
            Err(ProtocolError::BadSize { .. })
        ));
        let traversal = |name: &str| match name {
            "x-repo-commit" => Some(C.as_bytes()),
            "etag" => Some(b"../../x".as_slice()),
            _ => None,
        };
        assert!(matches!(
            parse_file_meta(traversal),
            Err(ProtocolError::BadName(_))
        ));
    }

    /// A bounded, seeded generator over the pieces hostile names are made of; every
    /// input goes through [`properties::check`] (the fuzz target's check, on stable).
    #[test]
    fn generated_hostile_inputs_are_refused_or_safe() {
        const PIECES: &[&str] = &[
            "..",
            ".",
            "/",
            "//",
            "\\",
            "%2e",
            "%2E",
            "%2f",
            "%5c",
            "%00",
            "%",
            "\0",
            "\n",
            " ",
            "a",
            "Z",
            "9",
            "-",
            "_",
            "~",
            "@",
            "--",
            ".lock",
            "refs",
            "main",
            "W/",
            "\"",
            ":",
            "é",
            "0123456789abcdef",
            "0123456789",
            "abcdef0123456789abcdef01",
            C,
            "{",
            "}",
            "[",
            "\"sha\": ",
            "\"siblings\": [",
            "{\"rfilename\": ",
            "etag: ",
            "x-repo-commit: ",
            "x-linked-size: ",
            "content-length: ",
            "4096",
            "-1",
            ",",
        ];
        let mut state: u64 = 0x243f_6a88_85a3_08d3;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut accepted = 0;
        for _ in 0..20_000 {
            let len = 1 + next(10);
            let input: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            properties::check(input.as_bytes());
            accepted +=
                usize::from(RepoPath::parse(&input).is_ok() || Revision::parse(&input).is_ok());
        }
        // The generator reaches both sides of the parsers.
        assert!(accepted > 1000, "{accepted}");
    }
}
