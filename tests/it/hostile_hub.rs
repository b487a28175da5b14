//! `argus prepare` against a hostile HF-protocol server of the test's own: traversal
//! commits, etags and file names, lying sizes, truncated bodies, redirects to another
//! origin, error bodies that echo the token. A real mirror will not produce these on
//! demand (olah hashes and names what it serves), so a small fake on loopback does.
//!
//! Every case asserts the exit code, one clear message, that the token never shows, and
//! that nothing was written outside the cache and nothing new inside it (a full listing
//! of the test's directory before and after).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{Profile, Run, TestContext};
use crate::hub::{bytes, sha256_hex};

const TOKEN: &str = "hf_s3cr3t_t0ken_value";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const OTHER: &str = "89abcdef0123456789abcdef0123456789abcdef";
const SIZE: usize = 4096;

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// `(org/name, what)`: `what` is `revision`, or `resolve <rev> <file>`.
    fn route(&self) -> (String, String) {
        let parts: Vec<&str> = self.path.trim_start_matches('/').split('/').collect();
        if parts.first() == Some(&"api") && parts.len() >= 6 {
            return (format!("{}/{}", parts[2], parts[3]), "revision".into());
        }
        if parts.len() >= 5 && parts[2] == "resolve" {
            return (
                format!("{}/{}", parts[0], parts[1]),
                format!("resolve {} {}", parts[3], parts[4..].join("/")),
            );
        }
        (String::new(), String::new())
    }
}

/// What the fake server answers. `content-length` is computed unless a header sets it
/// (to lie); `cut_at` closes the connection after that many body bytes.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    cut_at: Option<usize>,
}

impl Reply {
    pub fn new(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            cut_at: None,
        }
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
    pub fn cut_at(mut self, n: usize) -> Self {
        self.cut_at = Some(n);
        self
    }
    pub fn redirect(to: &str) -> Self {
        Reply::new(302).header("location", to)
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A tiny HTTP/1.1 server on loopback: one request per connection, every request recorded.
pub struct FakeHub {
    pub endpoint: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    port: u16,
}

impl FakeHub {
    pub fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Handler = Arc::new(handler);
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (handler, seen) = (handler.clone(), seen2.clone());
                std::thread::spawn(move || serve(stream, &*handler, &seen));
            }
        });
        FakeHub {
            endpoint: format!("http://127.0.0.1:{port}"),
            seen,
            stop,
            port,
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    pub fn clear(&self) {
        self.seen.lock().expect("lock").clear();
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    mut stream: TcpStream,
    handler: &(dyn Fn(&Seen) -> Reply + Send + Sync),
    seen: &Mutex<Vec<Seen>>,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let path = first.next().unwrap_or_default().to_string();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let request = Seen {
        method,
        path,
        headers,
    };
    seen.lock().expect("lock").push(request.clone());
    let reply = handler(&request);
    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    if !reply
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("content-length: {}\r\n", reply.body.len()));
    }
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    if request.method != "HEAD" {
        let end = reply
            .cut_at
            .unwrap_or(reply.body.len())
            .min(reply.body.len());
        let _ = stream.write_all(&reply.body[..end]);
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// The one-file repo every case starts from: a 4 KiB LFS-style file (sha256 etag).
struct Fixture {
    bytes: Vec<u8>,
    etag: String,
}

impl Fixture {
    fn new() -> Self {
        let bytes = bytes(SIZE, 11);
        let etag = sha256_hex(&bytes);
        Fixture { bytes, etag }
    }

    fn revision(&self, sha: &str, files: &[&str]) -> Reply {
        let siblings: Vec<serde_json::Value> = files
            .iter()
            .map(|f| serde_json::json!({ "rfilename": f }))
            .collect();
        Reply::new(200)
            .header("content-type", "application/json")
            .body(serde_json::json!({ "sha": sha, "siblings": siblings }).to_string())
    }

    fn head(&self) -> Reply {
        Reply::new(200)
            .header("content-length", &SIZE.to_string())
            .header("x-repo-commit", COMMIT)
            .header("etag", &format!("\"{}\"", self.etag))
    }

    /// The well-behaved answer to any request.
    fn good(&self, seen: &Seen) -> Reply {
        let (_, what) = seen.route();
        if what == "revision" {
            self.revision(COMMIT, &["model.safetensors"])
        } else if what.starts_with("resolve") && seen.method == "HEAD" {
            self.head()
        } else if what.starts_with("resolve") {
            Reply::new(200).body(self.bytes.clone())
        } else {
            Reply::new(404)
        }
    }
}

fn profile(ctx: &TestContext, endpoint: &str) -> (PathBuf, PathBuf) {
    let shared = ctx.path("shared");
    let profile = Profile::new("hostile")
        .image("i")
        .shared(&shared)
        .env("HF_ENDPOINT", endpoint)
        .write(ctx, "p.yaml");
    (profile, shared)
}

/// argus with HF_TOKEN set, killed if it runs longer than a minute.
fn argus(profile: &Path, args: &[&str]) -> Run {
    argus_env(profile, args, &[])
}

fn argus_env(profile: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_argus"))
        .envs(env.iter().copied())
        .env_remove("ARGUS_PROFILE")
        .env_remove("HF_ENDPOINT")
        .env("NO_COLOR", "1")
        .env("HF_TOKEN", TOKEN)
        .arg("-p")
        .arg(profile)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn argus");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("argus {args:?} hung for a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Run::from(child.wait_with_output().expect("output"))
}

/// Every entry under `root`: relative path, kind, size, link target, and a content hash
/// for files. Symlinks are not followed.
pub fn listing(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let what = if meta.file_type().is_symlink() {
                format!(
                    "link -> {}",
                    std::fs::read_link(&path).expect("link").display()
                )
            } else if meta.is_dir() {
                walk(root, &path, out);
                "dir".to_string()
            } else if meta.is_file() {
                format!(
                    "file {} {}",
                    meta.len(),
                    sha256_hex(&std::fs::read(&path).unwrap_or_default())
                )
            } else {
                "special".to_string()
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Whether each path exists, and when it last changed (a test elsewhere may have left one).
fn outside_state(paths: &[&str]) -> Vec<Option<std::time::SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// What changed between two listings, for a failure message.
fn diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> String {
    let mut lines = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => lines.push(format!("+ {k} {v}")),
            Some(old) if old != v => lines.push(format!("~ {k} {old} -> {v}")),
            _ => {}
        }
    }
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        lines.push(format!("- {k}"));
    }
    lines.join("\n")
}

/// One hostile case: the repo whose answers are bent, how, and how argus must end.
struct Case {
    repo: &'static str,
    /// Extra to `--model acme/<repo>` (e.g. `@<commit>`).
    revision: &'static str,
    code: i32,
    message: &'static str,
    bend: Bend,
}

/// How a case bends the well-behaved answer (`None`: answer as a good mirror would).
type Bend = fn(&Fixture, &Seen, &str) -> Option<Reply>;

fn is_head(seen: &Seen) -> bool {
    seen.method == "HEAD" && seen.route().1.starts_with("resolve")
}
fn is_get(seen: &Seen) -> bool {
    seen.method == "GET" && seen.route().1.starts_with("resolve")
}
fn is_revision(seen: &Seen) -> bool {
    seen.route().1 == "revision"
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            repo: "sha-traversal",
            revision: "",
            code: 1,
            message: "commit \"../../../../../../tmp/argus-pwned\" is not valid",
            bend: |f, s, _| {
                is_revision(s).then(|| {
                    f.revision("../../../../../../tmp/argus-pwned", &["model.safetensors"])
                })
            },
        },
        Case {
            repo: "sha-nul",
            revision: "",
            code: 1,
            message: "a commit is 40 lowercase hex digits",
            bend: |f, s, _| {
                is_revision(s).then(|| {
                    f.revision(
                        "0123456789abcdef0123456789abcdef0123456\0",
                        &["model.safetensors"],
                    )
                })
            },
        },
        Case {
            repo: "file-traversal",
            revision: "",
            code: 1,
            message: "repo file name \"../../../../../../../tmp/argus-pwned\" is not valid: `.` and `..` segments are not allowed",
            bend: |f, s, _| {
                is_revision(s).then(|| {
                    f.revision(
                        COMMIT,
                        &["model.safetensors", "../../../../../../../tmp/argus-pwned"],
                    )
                })
            },
        },
        Case {
            repo: "file-absolute",
            revision: "",
            code: 1,
            message: "an absolute path",
            bend: |f, s, _| is_revision(s).then(|| f.revision(COMMIT, &["/tmp/argus-pwned"])),
        },
        Case {
            repo: "file-nul",
            revision: "",
            code: 1,
            message: "a control character ('\\0') is not allowed",
            bend: |f, s, _| {
                is_revision(s).then(|| f.revision(COMMIT, &["model.safetensors\0../../x"]))
            },
        },
        Case {
            repo: "file-encoded",
            revision: "",
            code: 1,
            message: "a segment decodes to `.` or `..`",
            bend: |f, s, _| {
                is_revision(s).then(|| f.revision(COMMIT, &["%2e%2e/%2E%2e/tmp/argus-pwned"]))
            },
        },
        Case {
            repo: "file-backslash",
            revision: "",
            code: 1,
            message: "a backslash is not allowed",
            bend: |f, s, _| is_revision(s).then(|| f.revision(COMMIT, &["..\\..\\argus-pwned"])),
        },
        Case {
            repo: "file-twice",
            revision: "",
            code: 1,
            message: "the file list names \"model.safetensors\" twice",
            bend: |f, s, _| {
                is_revision(s)
                    .then(|| f.revision(COMMIT, &["model.safetensors", "model.safetensors"]))
            },
        },
        Case {
            repo: "not-json",
            revision: "",
            code: 1,
            message: "not a revision answer",
            bend: |_, s, _| {
                is_revision(s).then(|| Reply::new(200).body("<html>mirror maintenance</html>"))
            },
        },
        Case {
            repo: "other-sha",
            revision: "@0123456789abcdef0123456789abcdef01234567",
            code: 1,
            message: "it answered for commit 89abcdef0123456789abcdef0123456789abcdef, not the 0123456789abcdef0123456789abcdef01234567 asked for",
            bend: |f, s, _| is_revision(s).then(|| f.revision(OTHER, &["model.safetensors"])),
        },
        Case {
            repo: "etag-traversal",
            revision: "",
            code: 1,
            message: "etag \"\\\"../../../../../../tmp/argus-pwned\\\"\" is not valid",
            bend: |_, s, _| {
                is_head(s).then(|| {
                    Reply::new(200)
                        .header("content-length", "4096")
                        .header("x-repo-commit", COMMIT)
                        .header("etag", "\"../../../../../../tmp/argus-pwned\"")
                })
            },
        },
        Case {
            repo: "etag-absolute",
            revision: "",
            code: 1,
            message: "etag \"/tmp/argus-pwned\" is not valid",
            bend: |f, s, _| {
                is_head(s).then(|| f.head().header("x-linked-etag", "/tmp/argus-pwned"))
            },
        },
        Case {
            repo: "etag-encoded",
            revision: "",
            code: 1,
            message: "is not valid: an etag is a git sha1",
            bend: |_, s, _| {
                is_head(s).then(|| {
                    Reply::new(200)
                        .header("content-length", "4096")
                        .header("x-repo-commit", COMMIT)
                        .header("etag", "W/\"%2e%2e%2f%2e%2e%2fargus-pwned\"")
                })
            },
        },
        Case {
            repo: "commit-traversal",
            revision: "",
            code: 1,
            message: "commit \"../../argus-pwned\" is not valid",
            bend: |f, s, _| {
                is_head(s).then(|| {
                    Reply::new(200)
                        .header("content-length", "4096")
                        .header("x-repo-commit", "../../argus-pwned")
                        .header("etag", &f.etag)
                })
            },
        },
        Case {
            repo: "commit-other",
            revision: "",
            code: 1,
            message: "it answered for commit 89abcdef0123456789abcdef0123456789abcdef",
            bend: |f, s, _| {
                is_head(s).then(|| {
                    Reply::new(200)
                        .header("content-length", "4096")
                        .header("x-repo-commit", OTHER)
                        .header("etag", &f.etag)
                })
            },
        },
        Case {
            repo: "size-negative",
            revision: "",
            code: 1,
            message: "a X-Linked-Size header that is not a size: \"-1\"",
            bend: |f, s, _| is_head(s).then(|| f.head().header("x-linked-size", "-1")),
        },
        Case {
            repo: "truncated",
            revision: "",
            code: 4,
            message: "model.safetensors: the transfer stopped at 1000 of 4096 bytes",
            bend: |f, s, _| is_get(s).then(|| Reply::new(200).body(f.bytes.clone()).cut_at(1000)),
        },
        Case {
            repo: "short",
            revision: "",
            code: 4,
            message: "model.safetensors: the transfer stopped at 3000 of 4096 bytes",
            bend: |f, s, _| is_get(s).then(|| Reply::new(200).body(f.bytes[..3000].to_vec())),
        },
        Case {
            repo: "long",
            revision: "",
            code: 1,
            message: "downloaded bytes do not match (expected 4096 bytes, got more bytes than that)",
            bend: |f, s, _| {
                is_get(s).then(|| {
                    let mut body = f.bytes.clone();
                    body.extend_from_slice(&[0u8; 904]);
                    Reply::new(200).body(body)
                })
            },
        },
        Case {
            repo: "corrupt",
            revision: "",
            code: 1,
            message: "downloaded bytes do not match (expected sha256",
            bend: |_, s, _| is_get(s).then(|| Reply::new(200).body(bytes(SIZE, 12))),
        },
        Case {
            repo: "range-lie",
            revision: "",
            code: 1,
            message: "asked for bytes from 1000, got a range that does not start there",
            // Cut once, then a 206 from the wrong offset: never appended.
            bend: |f, s, _| {
                is_get(s).then(|| match s.header("range") {
                    None => Reply::new(200).body(f.bytes.clone()).cut_at(1000),
                    Some(_) => Reply::new(206)
                        .header("content-range", "bytes 0-4095/4096")
                        .body(f.bytes.clone()),
                })
            },
        },
        Case {
            repo: "redirect-file",
            revision: "",
            code: 1,
            message: "a redirect to a non-HTTP URL \"file:///etc/passwd\"",
            bend: |_, s, _| is_get(s).then(|| Reply::redirect("file:///etc/passwd")),
        },
        Case {
            repo: "redirect-loop",
            revision: "",
            code: 1,
            message: "too many redirects",
            bend: |_, s, _| is_revision(s).then(|| Reply::redirect(&s.path)),
        },
        Case {
            repo: "echo-token",
            revision: "",
            code: 4,
            message: "answered 500: Traceback: bad request from Bearer [HF_TOKEN]",
            bend: |_, s, _| {
                is_revision(s).then(|| {
                    Reply::new(500).body(format!(
                        "Traceback: bad request from {}\n\x1b[31mred\x1b[0m",
                        s.header("authorization").unwrap_or("nobody")
                    ))
                })
            },
        },
    ]
}

#[test]
fn a_hostile_mirror_gets_one_clear_error_and_changes_nothing() {
    let ctx = TestContext::new("hostile");
    let cases = cases();
    let table: Vec<(&'static str, Bend)> = cases.iter().map(|c| (c.repo, c.bend)).collect();
    let fixture = Fixture::new();
    let hub = FakeHub::start(move |seen| {
        let (repo, _) = seen.route();
        table
            .iter()
            .find(|(name, _)| repo == format!("acme/{name}"))
            .and_then(|(_, bend)| bend(&fixture, seen, &repo))
            .unwrap_or_else(|| fixture.good(seen))
    });
    let (profile, shared) = profile(&ctx, &hub.endpoint);
    // A populated cache first: a well-behaved repo from the same server.
    argus(&profile, &["prepare", "--model", "acme/good"]).code(0);
    assert!(
        shared
            .join("common/hf/hub/models--acme--good/blobs")
            .is_dir()
    );
    let outside = ["/tmp/argus-pwned", "/argus-pwned", "/tmp/pwned"];

    let mut failures = Vec::new();
    for case in &cases {
        let before = listing(ctx.dir.path());
        let outside_before = outside_state(&outside);
        let model = format!("acme/{}{}", case.repo, case.revision);
        let run = argus(&profile, &["prepare", "--model", &model]);
        let after = listing(ctx.dir.path());
        let mut problems = Vec::new();
        if run.code != case.code {
            problems.push(format!("exit {} (want {})", run.code, case.code));
        }
        if !run.stderr.contains(case.message) {
            problems.push(format!("no {:?} in the message", case.message));
        }
        if run.stderr.matches("error:").count() != 1 {
            problems.push("not exactly one error".into());
        }
        if run.stderr.contains(TOKEN) || run.stdout.contains(TOKEN) {
            problems.push("the token shows".into());
        }
        if run.stderr.contains('\x1b') {
            problems.push("raw control characters from the server reach the terminal".into());
        }
        if before != after {
            problems.push(format!("the tree changed:\n{}", diff(&before, &after)));
        }
        if outside_state(&outside) != outside_before {
            problems.push(format!("one of {outside:?} was written"));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{model}: {}\n--- stderr\n{}",
                problems.join("; "),
                run.stderr
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile cases went wrong:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_token_never_follows_a_redirect_to_another_origin() {
    let ctx = TestContext::new("hostileredir");
    // B: another origin (another port), serving the same repo correctly.
    let b = FakeHub::start({
        let fixture = Fixture::new();
        move |seen| fixture.good(seen)
    });
    let b_endpoint = b.endpoint.clone();
    // A: the configured endpoint; it sends every request of `acme/away` to B (as the hub
    // sends LFS files to a CDN), and answers `acme/home` itself via a same-origin redirect.
    let a = FakeHub::start({
        let fixture = Fixture::new();
        move |seen| {
            let (repo, _) = seen.route();
            if repo == "acme/away" {
                Reply::redirect(&format!("{b_endpoint}{}", seen.path))
            } else if repo == "acme/home" && !seen.path.contains("/home2/") {
                Reply::redirect(&seen.path.replace("/home/", "/home2/"))
            } else {
                fixture.good(seen)
            }
        }
    });
    let (profile, shared) = profile(&ctx, &a.endpoint);
    // Logging everything (every crate at trace) shows no token either.
    let run = argus_env(
        &profile,
        &["-vv", "prepare", "--model", "acme/away"],
        &[("ARGUS_LOG", "trace")],
    )
    .code(0)
    .stdout_has("models--acme--away/snapshots/");
    assert!(
        !run.stderr.contains(TOKEN) && run.stderr.contains("redirects to"),
        "{}",
        run.stderr
    );
    let fixture = Fixture::new();
    let blob = shared
        .join("common/hf/hub/models--acme--away/blobs")
        .join(&fixture.etag);
    assert_eq!(std::fs::read(&blob).expect("blob"), fixture.bytes);

    let at_b = b.requests();
    assert_eq!(
        at_b.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(),
        ["GET", "HEAD", "GET"],
        "revision, HEAD and GET were all redirected to B"
    );
    for seen in &at_b {
        assert_eq!(
            seen.header("authorization"),
            None,
            "the token went to another origin: {seen:?}"
        );
    }
    let at_a = a.requests();
    assert!(
        at_a.iter()
            .all(|s| s.header("authorization") == Some(&format!("Bearer {TOKEN}"))),
        "the endpoint itself gets the token: {at_a:?}"
    );

    // A same-origin redirect keeps it.
    a.clear();
    argus(&profile, &["prepare", "--model", "acme/home"]).code(0);
    let home: Vec<Seen> = a.requests();
    assert!(home.iter().any(|s| s.path.contains("/home2/")));
    assert!(
        home.iter()
            .all(|s| s.header("authorization") == Some(&format!("Bearer {TOKEN}")))
    );
}

#[test]
fn malformed_input_is_exit_2_and_never_leaves_the_machine() {
    let ctx = TestContext::new("hostileinput");
    let fixture = Fixture::new();
    let hub = FakeHub::start(move |seen| fixture.good(seen));
    let (profile, _) = profile(&ctx, &hub.endpoint);
    let raw = ctx.path("raw");
    std::fs::create_dir_all(raw.join("main")).expect("raw");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--model", "../x"], "repo id \"../x\" is not valid"),
        (vec!["--model", "acme/../x"], "at most one `/`"),
        (
            vec!["--model", "/etc/passwd"],
            "repo id \"/etc/passwd\" is not valid",
        ),
        (vec!["--model", "a/b/c"], "at most one `/`"),
        (vec!["--model", "acme/ti ny"], "' ' is not allowed"),
        (
            vec!["--model", "acme--x/y"],
            "`--` and `..` are not allowed",
        ),
        (vec!["--model", "acme/tiny@"], "revision \"\" is not valid"),
        (
            vec!["--model", "acme/tiny@../../x"],
            "revision \"../../x\" is not valid",
        ),
        (
            vec!["--model", "acme/tiny@refs/../x"],
            "`..` is not allowed",
        ),
        (vec!["--model", "acme/tiny@/etc"], "starts with `/`"),
        (vec!["--model", "acme/tiny@ma%2fin"], "'%' is not allowed"),
        (vec!["--model", "acme/tiny@main\n"], "'\\n' is not allowed"),
        (
            vec!["--model", "acme/good", "--model", "../x"],
            "repo id \"../x\" is not valid",
        ),
        (
            vec!["--model", "acme/good", "--include", "a[b"],
            "invalid glob \"a[b\"",
        ),
        (
            vec!["--dataset", "gsm8k", "--include", "*.json"],
            "--include does not apply to `argus prepare`",
        ),
        (
            vec!["--model", "acme/good", "--from", "/tmp"],
            "--from does not apply to `argus prepare`",
        ),
        (
            vec!["--dataset", "gsm8k", "--from", "/nonexistent-argus"],
            "--from /nonexistent-argus",
        ),
        (vec!["--dataset", "gsm9k"], "unknown dataset \"gsm9k\""),
    ];
    let mut failures = Vec::new();
    for (args, message) in &cases {
        let before = listing(ctx.dir.path());
        let mut full = vec!["prepare"];
        full.extend(args.iter().copied());
        let run = argus(&profile, &full);
        let after = listing(ctx.dir.path());
        let mut problems = Vec::new();
        if run.code != 2 {
            problems.push(format!("exit {}", run.code));
        }
        if !run.stderr.contains(message) {
            problems.push(format!("no {message:?} in the message"));
        }
        if !hub.requests().is_empty() {
            problems.push(format!(
                "{} requests reached the mirror",
                hub.requests().len()
            ));
        }
        if before != after {
            problems.push(format!("the tree changed:\n{}", diff(&before, &after)));
        }
        if !problems.is_empty() {
            failures.push(format!("{args:?}: {}\n{}", problems.join("; "), run.stderr));
        }
        hub.clear();
    }
    // An HF_ENDPOINT that is not a URL is the user's error too.
    let bad = ctx.write(
        "bad.yaml",
        &format!(
            "name: hostile\nimage: i\nshared: {{host_path: {}}}\nenv: {{HF_ENDPOINT: \"mirror.internal:8090\"}}\nworkers: [{{name: gpu, count: 1}}]\n",
            ctx.path("shared").display()
        ),
    );
    let run = argus(&bad, &["prepare", "--model", "acme/good"]);
    if run.code != 2 || !run.stderr.contains("HF_ENDPOINT") {
        failures.push(format!(
            "bad HF_ENDPOINT: exit {}\n{}",
            run.code, run.stderr
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs went wrong:\n\n{}",
        failures.len(),
        cases.len() + 1,
        failures.join("\n\n")
    );
}

#[test]
fn a_symlink_planted_in_the_cache_cannot_redirect_a_write() {
    let ctx = TestContext::new("hostileplant");
    let fixture = Fixture::new();
    let hub = FakeHub::start(move |seen| fixture.good(seen));
    let (profile, shared) = profile(&ctx, &hub.endpoint);
    let repo_dir = shared.join("common/hf/hub/models--acme--planted");
    std::fs::create_dir_all(&repo_dir).expect("repo dir");
    let outside = ctx.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, repo_dir.join("blobs")).expect("plant");
    let before = listing(ctx.dir.path());
    argus(&profile, &["prepare", "--model", "acme/planted"])
        .code(2)
        .stderr_has("blobs is a symbolic link: argus does not follow links");
    assert_eq!(before, listing(ctx.dir.path()));
    assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
}

#[test]
fn a_planted_incomplete_link_is_replaced_not_written_through() {
    let ctx = TestContext::new("hostilepartial");
    let fixture = Fixture::new();
    let etag = fixture.etag.clone();
    let expected = fixture.bytes.clone();
    let hub = FakeHub::start(move |seen| fixture.good(seen));
    let (profile, shared) = profile(&ctx, &hub.endpoint);
    let blobs = shared.join("common/hf/hub/models--acme--partial/blobs");
    std::fs::create_dir_all(&blobs).expect("blobs");
    let victim = ctx.write("victim.txt", "do not touch");
    std::os::unix::fs::symlink(&victim, blobs.join(format!("{etag}.incomplete"))).expect("plant");
    argus(&profile, &["prepare", "--model", "acme/partial"]).code(0);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "do not touch"
    );
    assert_eq!(std::fs::read(blobs.join(&etag)).expect("blob"), expected);
    assert!(!blobs.join(format!("{etag}.incomplete")).exists());
}
