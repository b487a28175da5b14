//! Ray token auth end to end (Ray >= 2.52; argus's image `argus/ray:2.60.0`): `up` makes
//! the token on this machine only, Ray refuses requests without it, argus's own requests
//! carry it, and it never reaches the shared storage or a printed plan.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::harness::{TestContext, free_port, test_profile};

const IMAGE_260: &str = "argus/ray:2.60.0";

/// Builds (or finds, by its inputs' label) argus's image with Ray 2.60.0.
pub(crate) fn ensure_image_260(ctx: &TestContext) {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        ctx.argus()
            .args(["image", "build", "--ray-version", "2.60.0", "--no-progress"])
            .run()
            .code(0);
    });
}

/// The status code Ray gives a raw HTTP/1.1 request on loopback `port`.
fn status_of(port: u16, method: &str, path: &str, token: Option<&str>) -> u16 {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let body = if method == "POST" {
        r#"{"entrypoint": "echo should-never-run"}"#
    } else {
        ""
    };
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: argus-test\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

/// Every file under `root` that contains `needle`.
pub(crate) fn files_containing(root: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file()
                && std::fs::read(&path)
                    .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn token_auth_on_ray_2_60_refuses_strangers_and_lets_argus_in() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    ensure_image_260(&ctx);
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let port = free_port();
    // A variable nobody sets: the token comes from the file `up` makes.
    let text = test_profile(&name, &shared, port, 1, "")
        .replace("image: argus/ray:2.51.1", &format!("image: {IMAGE_260}"))
        .replace(
            "ray:\n",
            "ray:\n  auth: token\n  token_env: ARGUS_TEST_UNSET_AUTH_TOKEN\n",
        );
    let profile = ctx.write("p.yaml", &text);
    let config = ctx.path("config");
    let argus = || {
        ctx.argus()
            .env("XDG_CONFIG_HOME", &config)
            .profile(&profile)
    };

    // A dry run makes nothing, not even the token.
    let token_file = config.join(format!("argus/tokens/{name}.token"));
    argus().args(["up", "--dry-run"]).run().code(0);
    assert!(!token_file.exists(), "a dry run made the token file");
    argus().args(["up"]).run().code(0);
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(mode(token_file.parent().expect("dir")), 0o700);
    let token = std::fs::read_to_string(&token_file).expect("token file");
    let token = token.trim();
    assert_eq!(token.len(), 64);
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");

    // Strangers: no token is 401, a wrong one 403 (Ray 2.60); argus's token is let in.
    for (method, path) in [("GET", "/api/jobs/"), ("POST", "/api/jobs/")] {
        assert_eq!(status_of(port, method, path, None), 401, "{method} {path}");
        let wrong = "0".repeat(64);
        assert_eq!(
            status_of(port, method, path, Some(&wrong)),
            403,
            "{method} {path}"
        );
    }
    assert_eq!(status_of(port, "GET", "/api/jobs/", Some(token)), 200);
    assert_eq!(status_of(port, "GET", "/api/version", None), 401);

    // argus's own requests: status, submit --wait, job logs, and the websocket tail.
    let status = argus().args(["status", "--json"]).run().code(0).json();
    let alive = status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["state"] == "ALIVE")
        .count();
    assert_eq!(alive, 2, "{status:#}");
    let src = ctx.path("code");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("marker.py"), "MARKER = 'auth-ok'\n").expect("write");
    argus()
        .args(["snapshot", "--code-id", "codeA"])
        .arg_path(&src)
        .run()
        .code(0);
    let print = "python3 -c \"import marker; print('MARKER=' + marker.MARKER)\"";
    for (id, flag) in [("job-wait", "--wait"), ("job-follow", "--follow")] {
        let spec = ctx.write(
            &format!("{id}.yaml"),
            &format!(
                "workload: custom\nsubmission_id: {id}\ncode_id: codeA\nentrypoint: {print}\n"
            ),
        );
        let run = argus()
            .args(["submit", flag])
            .arg_path(&spec)
            .run()
            .code(0)
            .stderr_has(&format!("job {id} SUCCEEDED"));
        if flag == "--follow" {
            assert!(run.stdout.contains("MARKER=auth-ok"), "{}", run.stdout);
        }
        argus()
            .args(["job", "logs", id])
            .run()
            .code(0)
            .stdout_has("MARKER=auth-ok");
    }

    // Printed plans never show it, in text or JSON.
    for args in [&["up", "--dry-run"][..], &["up", "--dry-run", "--json"]] {
        let run = argus().args(args).run().code(0);
        assert!(
            !run.stdout.contains(token) && !run.stderr.contains(token),
            "{args:?} printed the token"
        );
    }
    let plan = argus().args(["up", "--dry-run", "--json"]).run().json();
    assert!(
        plan.to_string().contains("RAY_AUTH_TOKEN"),
        "the plan still says the containers get a token: {plan:#}"
    );
    // Nothing under the shared storage holds it.
    let leaks = files_containing(&shared, token);
    assert!(
        leaks.is_empty(),
        "the token is on the shared storage: {leaks:?}"
    );

    // With the variable set, the variable wins (here: a wrong token, refused by Ray; the
    // list then falls back to argus's records).
    ctx.argus()
        .env("XDG_CONFIG_HOME", &config)
        .env("ARGUS_TEST_UNSET_AUTH_TOKEN", "f".repeat(64))
        .profile(&profile)
        .args(["job", "list"])
        .run()
        .stderr_has("(403): token auth is on and the token is missing or wrong");

    argus().args(["down"]).run().code(0);
}

/// `auth: token` on an image whose Ray has none is refused before anything starts: no
/// container, no network, no token file.
#[test]
fn token_auth_with_ray_2_51_is_refused_before_anything_starts() {
    let mut ctx = TestContext::new("auth251");
    let name = ctx.cluster("c");
    let text = test_profile(&name, &ctx.path("shared"), free_port(), 1, "")
        .replace("ray:\n", "ray:\n  auth: token\n");
    let profile = ctx.write("p.yaml", &text);
    let config = ctx.path("config");
    ctx.argus()
        .env("XDG_CONFIG_HOME", &config)
        .profile(&profile)
        .args(["up"])
        .run()
        .code(2)
        .stderr_has("has Ray 2.51, which has no token auth");
    assert!(!config.exists(), "no token file was made");
    assert!(
        !ctx.path("shared").exists(),
        "nothing on the shared storage"
    );
    if !TestContext::skips_docker() {
        assert!(ctx.cluster_containers(&name).is_empty());
        let networks = crate::harness::docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("name={name}-net"),
        ]);
        assert!(networks.trim().is_empty(), "{networks}");
    }
}

/// Ray 2.59+ turns token auth on by itself in `ray start --head` when a token file is at
/// its default path (`~/.ray/auth_token`), as an image of the user's may hold. An image
/// like that, made once from argus's 2.60 image.
const IMAGE_TOKEN_FILE: &str = "argus-test/ray-token-file:2.60.0";

fn ensure_image_with_token_file(ctx: &TestContext) {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        ensure_image_260(ctx);
        if !crate::harness::docker(&["image", "inspect", "-f", "{{.Id}}", IMAGE_TOKEN_FILE])
            .trim()
            .is_empty()
        {
            return;
        }
        let maker = format!("argus-test-token-file-{}", std::process::id());
        let _ = crate::harness::docker(&["rm", "-f", &maker]);
        crate::harness::docker(&[
            "run",
            "--name",
            &maker,
            IMAGE_260,
            "sh",
            "-c",
            "mkdir -p /root/.ray && echo 0123456789abcdef0123456789abcdef > /root/.ray/auth_token",
        ]);
        crate::harness::docker(&["commit", &maker, IMAGE_TOKEN_FILE]);
        crate::harness::docker(&["rm", "-f", &maker]);
        assert!(
            !crate::harness::docker(&["image", "inspect", "-f", "{{.Id}}", IMAGE_TOKEN_FILE])
                .trim()
                .is_empty(),
            "could not make {IMAGE_TOKEN_FILE}"
        );
    });
}

/// `ray.auth: disabled` stays disabled on a Ray that would turn auth on by itself: argus
/// sets `RAY_AUTH_MODE=disabled` in every container (without it, this image's head
/// answers 401, checked by hand: `ray start --head` with the file and no variable).
#[test]
fn auth_disabled_stays_disabled_on_a_ray_that_turns_it_on_by_itself() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    ensure_image_with_token_file(&ctx);
    let name = ctx.cluster("c");
    let port = free_port();
    let text = test_profile(&name, &ctx.path("shared"), port, 1, "").replace(
        "image: argus/ray:2.51.1",
        &format!("image: {IMAGE_TOKEN_FILE}"),
    );
    let profile = ctx.write("p.yaml", &text);
    let config = ctx.path("config");
    let argus = || {
        ctx.argus()
            .env("XDG_CONFIG_HOME", &config)
            .profile(&profile)
    };
    argus().args(["up"]).run().code(0);
    // A request without any token is let in: auth is off, as the profile says.
    assert_eq!(status_of(port, "GET", "/api/jobs/", None), 200);
    let spec = ctx.write(
        "job.yaml",
        "workload: custom\nsubmission_id: no-auth\ncode_path: /mnt/shared\nentrypoint: python3 -c \"print('no auth OK')\"\n",
    );
    argus()
        .args(["submit", "--wait", "--no-check"])
        .arg_path(&spec)
        .run()
        .code(0)
        .stderr_has("job no-auth SUCCEEDED");
    assert!(!config.exists(), "auth disabled made no token file");
    argus().args(["down"]).run().code(0);
}

/// `argus run` with `ray.auth: token` from nothing (no token file, no cluster): the run's
/// `up` makes the token, and the run goes through to SUCCEEDED with it.
#[test]
fn run_with_token_auth_works_from_nothing() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    ensure_image_260(&ctx);
    let olah = crate::hub::Olah::start(&ctx.path("olah"));
    crate::hub::tiny_model(&olah.mirrors, "acme/tiny", 5000);
    let name = ctx.cluster("c");
    let port = free_port();
    let text = format!(
        "{}env: {{HF_ENDPOINT: \"{}\"}}\n",
        test_profile(&name, &ctx.path("shared"), port, 1, "")
            .replace("image: argus/ray:2.51.1", &format!("image: {IMAGE_260}"))
            .replace(
                "ray:\n",
                "ray:\n  auth: token\n  token_env: ARGUS_TEST_UNSET_AUTH_TOKEN\n",
            ),
        olah.endpoint
    );
    let profile = ctx.write("p.yaml", &text);
    let config = ctx.path("config");
    let quickstart = crate::run::quickstart_copy(&ctx);
    let report = ctx
        .argus()
        .env("XDG_CONFIG_HOME", &config)
        .profile(&profile)
        .args(["run", "--json", "--down-after"])
        .arg_path(&quickstart)
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let token_file = config.join(format!("argus/tokens/{name}.token"));
    assert_eq!(mode(&token_file), 0o600);
    // Ray really ran with auth on: the token is not on the shared storage, and the cluster
    // is gone (`--down-after`).
    let token = std::fs::read_to_string(&token_file).expect("token file");
    assert!(files_containing(&ctx.path("shared"), token.trim()).is_empty());
    assert!(ctx.cluster_containers(&name).is_empty());
}
