//! The runtime image on every host (`cluster::image::distribute`), against the emulated hosts'
//! real engines: streamed from the local engine or a host, pulled from a real registry,
//! verified by id, nothing left behind by an interrupted transfer.
//!
//! Most tests use a tiny image made here (a few files, unique per test); the interruption test
//! moves argus's 650 MB runtime image, which is long enough to cut in the middle.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argus::cluster::NodeEngine;
use argus::cluster::docker::connect;
use argus::cluster::image::{DistributeError, Distribution, Engine, Outcome, distribute};
use argus::exit::{Classify, Exit};
use argus::ui::{Reporter, Task};
use bollard::Docker;

use crate::harness::{TestContext, ensure_image, inspect};
use crate::hosts::{Hosts, NEWER_DOCKERD, Options};

const RAY_IMAGE: &str = "argus/ray:2.51.1";

/// Every task the code opened, with the bytes it last reported and how it ended.
#[derive(Default)]
struct Recorder {
    tasks: Mutex<Vec<Arc<Recorded>>>,
}

#[derive(Default)]
struct Recorded {
    label: String,
    done: AtomicU64,
    end: Mutex<Option<String>>,
}

impl Reporter for Recorder {
    fn task(&self, label: &str) -> Box<dyn Task> {
        let task = Arc::new(Recorded {
            label: label.to_string(),
            ..Default::default()
        });
        self.tasks.lock().unwrap().push(task.clone());
        Box::new(RecordedTask(task))
    }
}

struct RecordedTask(Arc<Recorded>);

impl Task for RecordedTask {
    fn update(&self, _: &str) {}
    fn progress(&self, done: u64, _: Option<u64>) {
        self.0.done.fetch_max(done, Ordering::Relaxed);
    }
    fn done(&self, message: &str) {
        *self.0.end.lock().unwrap() = Some(format!("done: {message}"));
    }
    fn fail(&self, message: &str) {
        *self.0.end.lock().unwrap() = Some(format!("failed: {message}"));
    }
}

impl Recorder {
    /// The bytes reported so far by the task about `host`.
    fn bytes(&self, host: &str) -> u64 {
        let label = format!("image on {host}");
        self.tasks
            .lock()
            .unwrap()
            .iter()
            .filter(|t| t.label == label)
            .map(|t| t.done.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    fn labels(&self) -> Vec<String> {
        self.tasks
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.label.clone())
            .collect()
    }
}

/// Images made on the machine's own engine, removed when dropped.
struct LocalImages(Vec<String>);

impl Drop for LocalImages {
    fn drop(&mut self) {
        for image in &self.0 {
            let _ = Command::new("docker")
                .args(["rmi", "-f", image])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Imports a tiny image (one file holding `content`) as `name`, into the machine's engine or
/// (`endpoint`) another one. Returns its id.
#[track_caller]
fn tiny_image(endpoint: Option<&str>, name: &str, content: &str) -> String {
    let root = tempfile::tempdir().expect("temp dir");
    std::fs::write(root.path().join("content"), content).expect("write");
    std::fs::create_dir(root.path().join("etc")).expect("mkdir");
    std::fs::write(root.path().join("etc/hostname"), "tiny\n").expect("write");
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(root.path())
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run tar");
    let mut docker = Command::new("docker");
    if let Some(endpoint) = endpoint {
        docker.args(["-H", endpoint]);
    }
    let import = docker
        .args(["import", "-", name])
        .stdin(tar.stdout.take().expect("tar's stdout"))
        .output()
        .expect("run docker import");
    assert!(tar.wait().expect("tar").success());
    assert!(
        import.status.success(),
        "docker import {name}: {}",
        String::from_utf8_lossy(&import.stderr)
    );
    String::from_utf8_lossy(&import.stdout).trim().to_string()
}

async fn engine(endpoint: Option<&str>) -> Docker {
    connect(endpoint).await.expect("connect to the engine")
}

/// A connection to the engine of each named host.
async fn connect_hosts(hosts: &Hosts, names: &[&str]) -> Vec<Docker> {
    let mut engines = Vec::new();
    for name in names {
        engines.push(engine(Some(&hosts.host(name).unix)).await);
    }
    engines
}

/// The hosts as `distribute` takes them.
fn as_engines<'a>(names: &[&'a str], engines: &'a [Docker]) -> Vec<Engine<'a>> {
    names
        .iter()
        .zip(engines)
        .map(|(name, docker)| Engine::new(name, docker))
        .collect()
}

/// Where the host's image was streamed from, if it was.
fn streamed_from<'a>(d: &'a Distribution, host: &str) -> Option<&'a str> {
    match outcome(d, host) {
        Outcome::Streamed { from, .. } => Some(from),
        _ => None,
    }
}

fn outcome<'a>(d: &'a Distribution, host: &str) -> &'a Outcome {
    &d.hosts
        .iter()
        .find(|h| h.host == host)
        .unwrap_or_else(|| panic!("no host {host} in {d:?}"))
        .outcome
}

/// Everything the host's engine holds, dangling layers' images included.
fn all_images(hosts: &Hosts, host: &str) -> String {
    hosts
        .docker_ok(
            host,
            &[
                "images",
                "-a",
                "--format",
                "{{.Repository}}:{{.Tag}} {{.ID}}",
            ],
        )
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_image_reaches_every_host_once() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let image = format!("{}-tiny:1", ctx.prefix);
    let _images = LocalImages(vec![image.clone()]);
    let local_id = tiny_image(None, &image, &ctx.prefix);
    let (local, engines) = (engine(None).await, connect_hosts(&hosts, &["a", "b"]).await);
    let local = Engine::new("local", &local);
    let targets = as_engines(&["a", "b"], &engines);

    // A dry run says what would happen and changes nothing.
    let recorder = Recorder::default();
    let dry = distribute(&image, Some(local), &targets, true, &recorder)
        .await
        .expect("dry run");
    assert!(dry.dry_run);
    assert_eq!(dry.image_id, local_id);
    for h in ["a", "b"] {
        assert_eq!(streamed_from(&dry, h), Some("local"), "{dry:?}");
        assert_eq!(
            hosts.image_id(h, &image),
            None,
            "a dry run brought the image to {h}"
        );
    }

    let recorder = Recorder::default();
    let done = distribute(&image, Some(local), &targets, false, &recorder)
        .await
        .expect("distribute");
    assert_eq!(done.image_id, local_id);
    for h in ["a", "b"] {
        match outcome(&done, h) {
            Outcome::Streamed {
                from,
                bytes,
                skipped,
            } => {
                assert_eq!(from, "local");
                assert!(*bytes > 0, "no bytes sent to {h}");
                assert_eq!(*skipped, 0, "{h} had no layer of the image");
            }
            other => panic!("host {h}: {other:?}"),
        }
        assert_eq!(
            hosts.image_id(h, &image).as_deref(),
            Some(local_id.as_str()),
            "{h}"
        );
        assert!(recorder.bytes(h) > 0, "no byte progress reported for {h}");
    }

    // Again: every host has it, nothing moves.
    let recorder = Recorder::default();
    let again = distribute(&image, Some(local), &targets, false, &recorder)
        .await
        .expect("second distribute");
    for h in ["a", "b"] {
        assert_eq!(outcome(&again, h), &Outcome::Present, "{again:?}");
    }
    assert_eq!(
        recorder.labels(),
        Vec::<String>::new(),
        "a transfer ran for present hosts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_another_image_under_the_name_gets_the_right_one() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b", "c"], Options::default());
    let image = format!("{}-tiny:1", ctx.prefix);
    let _images = LocalImages(vec![image.clone()]);
    let wanted = tiny_image(None, &image, "the cluster's");
    // a: another image under the same name; b: the right image under another name only;
    // c: nothing, and no local engine: the source is the first host that has the right id.
    let stale = tiny_image(Some(&hosts.host("a").unix), &image, "stale");
    assert_ne!(stale, wanted);
    hosts.load_image("b", &image);
    hosts.docker_ok("b", &["tag", &image, "elsewhere:1"]);
    hosts.docker_ok("b", &["rmi", &image]);
    assert_eq!(hosts.image_id("b", &image), None);

    let (local, engines) = (
        engine(None).await,
        connect_hosts(&hosts, &["a", "b", "c"]).await,
    );
    let targets = as_engines(&["a", "b", "c"], &engines);
    let recorder = Recorder::default();
    let done = distribute(
        &image,
        Some(Engine::new("local", &local)),
        &targets,
        false,
        &recorder,
    )
    .await
    .expect("distribute");
    assert_eq!(done.image_id, wanted);
    let a_report = done.hosts.iter().find(|h| h.host == "a").expect("a");
    assert!(
        matches!(a_report.outcome, Outcome::Streamed { .. }),
        "{done:?}"
    );
    assert_eq!(
        a_report.replaced.as_deref(),
        Some(stale.as_str()),
        "the report says a was replaced"
    );
    assert_eq!(
        outcome(&done, "b"),
        &Outcome::Tagged,
        "b had the image: a tag is enough"
    );
    assert!(matches!(outcome(&done, "c"), Outcome::Streamed { .. }));
    for h in ["a", "b", "c"] {
        assert_eq!(
            hosts.image_id(h, &image).as_deref(),
            Some(wanted.as_str()),
            "{h}"
        );
    }

    // Without the local engine, a host that has the image is the source.
    hosts.docker_ok("c", &["rmi", &image]);
    let done = distribute(&image, None, &targets, false, &Recorder::default())
        .await
        .expect("distribute from a host");
    assert_eq!(streamed_from(&done, "c"), Some("a"), "{done:?}");
    assert_eq!(
        hosts.image_id("c", &image).as_deref(),
        Some(wanted.as_str())
    );
}

/// An image of two layers made here: a base (4 MB that do not compress away, the file
/// `content`) and a small upper layer (the file `upper`): (the base, the image, its id).
fn two_layer_image(ctx: &TestContext) -> (String, String, String, LocalImages) {
    let base = format!("{}-base:1", ctx.prefix);
    let image = format!("{}-two-layers:1", ctx.prefix);
    let images = LocalImages(vec![base.clone(), image.clone()]);
    let noise: String = (0..4u32 << 20)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    tiny_image(None, &base, &noise);
    let work = tempfile::tempdir().expect("temp dir");
    std::fs::write(work.path().join("upper"), "the upper layer\n").expect("write");
    let container = crate::harness::docker(&["create", "--entrypoint", "/none", &base]);
    let container = container.trim();
    assert!(!container.is_empty(), "docker create {base} failed");
    let upper = work.path().join("upper");
    crate::harness::docker(&[
        "cp",
        &upper.display().to_string(),
        &format!("{container}:/upper"),
    ]);
    let wanted = crate::harness::docker(&["commit", container, &image]);
    crate::harness::docker(&["rm", container]);
    let wanted = wanted.trim().to_string();
    assert!(wanted.starts_with("sha256:"), "docker commit: {wanted:?}");
    (base, image, wanted, images)
}

/// Host `h` holds image `wanted` as `image`, both layers really there: a container's
/// filesystem holds both files.
fn has_both_layers(hosts: &Hosts, h: &str, image: &str, wanted: &str) {
    assert_eq!(hosts.image_id(h, image).as_deref(), Some(wanted), "{h}");
    let c = hosts.docker_ok(h, &["create", "--entrypoint", "/none", image]);
    let c = c.trim();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker -H {} export {c} | tar -t",
            hosts.host(h).unix
        ))
        .output()
        .expect("export");
    hosts.docker_ok(h, &["rm", c]);
    let files = String::from_utf8_lossy(&out.stdout);
    assert!(files.lines().any(|f| f == "content"), "{h}: {files}");
    assert!(files.lines().any(|f| f == "upper"), "{h}: {files}");
}

/// A host that has the image's lower layer (its base image) is sent only the layer it
/// lacks, and ends with the whole image: the same id, both layers' files in a container's
/// filesystem. A host without the base is sent everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_is_not_sent_the_layers_it_has() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let (base, image, wanted, _images) = two_layer_image(&ctx);
    // b has the base (as a host that ran argus's Ray image has the verl image's base).
    hosts.load_image("b", &base);

    let (local, engines) = (engine(None).await, connect_hosts(&hosts, &["a", "b"]).await);
    let targets = as_engines(&["a", "b"], &engines);
    let recorder = Recorder::default();
    let done = distribute(
        &image,
        Some(Engine::new("local", &local)),
        &targets,
        false,
        &recorder,
    )
    .await
    .expect("distribute");
    let sent = |h: &str| match outcome(&done, h) {
        Outcome::Streamed { bytes, skipped, .. } => (*bytes, *skipped),
        other => panic!("host {h}: {other:?}"),
    };
    let ((a_sent, a_skipped), (b_sent, b_skipped)) = (sent("a"), sent("b"));
    assert_eq!(a_skipped, 0, "a has no layer of it: {done:?}");
    assert!(a_sent > 4 << 20, "a was sent the whole image: {done:?}");
    assert!(b_skipped > 4 << 20, "b was spared the base layer: {done:?}");
    assert!(
        b_sent < 1 << 20,
        "b was sent only the upper layer: {done:?}"
    );
    // The base's layer.tar (a tar itself: whole blocks, no padding) and its header block.
    assert_eq!(
        a_sent - b_sent,
        b_skipped + 512,
        "only the base's layer.tar was left out"
    );
    let b_task = recorder
        .tasks
        .lock()
        .unwrap()
        .iter()
        .find(|t| t.label == "image on b")
        .and_then(|t| t.end.lock().unwrap().clone());
    assert!(
        b_task
            .as_deref()
            .is_some_and(|m| m.starts_with("done:") && m.contains("already there")),
        "{b_task:?}"
    );
    for h in ["a", "b"] {
        has_both_layers(&hosts, h, &image, &wanted);
    }
}

/// A node step loading the run's archive from the shared storage (`load_archive`) reads
/// past the layers its engine has, finds them by the image's own config in the archive, and
/// ends with the same image as a node that loaded all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_loading_the_archive_skips_the_layers_it_has() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let (base, image, wanted, _images) = two_layer_image(&ctx);
    hosts.load_image("b", &base);
    let work = tempfile::tempdir().expect("temp dir");
    let archive = work.path().join("image.tar");
    crate::harness::docker(&["save", "-o", &archive.display().to_string(), &image]);
    let size = std::fs::metadata(&archive).expect("archive").len();

    let mut skipped = Vec::new();
    for h in ["a", "b"] {
        let node = NodeEngine::connect(Some(&hosts.host(h).unix))
            .await
            .expect("connect");
        let loaded = node.load_archive(&image, &wanted, &archive).await;
        skipped.push(loaded.unwrap_or_else(|e| panic!("{h}: {e}")));
        has_both_layers(&hosts, h, &image, &wanted);
        // Loaded once: a second call finds the image and reads nothing.
        let again = node.load_archive(&image, &wanted, &archive).await;
        assert_eq!(again.ok(), Some(None), "{h}");
    }
    assert_eq!(skipped[0], Some(0), "a has no layer of it");
    let b = skipped[1].expect("b loaded it");
    assert!(
        b > 4 << 20 && b < size,
        "b read past the base layer: {b} of {size}"
    );
    // The archive of another image (the base's) does not hold the id: refused, not loaded.
    let other = work.path().join("other.tar");
    crate::harness::docker(&["save", "-o", &other.display().to_string(), &base]);
    let node = NodeEngine::connect(Some(&hosts.host("a").unix))
        .await
        .expect("connect");
    hosts.docker_ok("a", &["rmi", &image]);
    let refused = node.load_archive(&image, &wanted, &other).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("did not hold image")),
        "{refused:?}"
    );
}

/// From Docker 25 `docker save` writes an OCI image layout (each layer the blob of its
/// diff id, the config the blob of the image id): a Docker 26 engine's archive skips the
/// layers the receiving engine has too, both streamed from that engine to hosts and loaded
/// by a node from a file, on Docker 20.10 and on Docker 26.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_of_a_newer_engine_skips_the_layers_too() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    assert!(
        Path::new(NEWER_DOCKERD).is_file(),
        "{NEWER_DOCKERD} is missing: tests/setup.sh fetches it"
    );
    let options = Options {
        newer_engine: Some("n"),
        ..Options::default()
    };
    let hosts = Hosts::up(&ctx, &["a", "b", "n"], options);
    let version = hosts.docker_ok("n", &["version", "--format", "{{.Server.Version}}"]);
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(major >= 25, "n runs Docker {version}, not 25 or later");
    let (base, image, wanted, _images) = two_layer_image(&ctx);
    hosts.load_image("n", &image);
    hosts.load_image("b", &base);
    let work = tempfile::tempdir().expect("temp dir");
    let archive = work.path().join("image.tar");
    hosts.docker_ok("n", &["save", "-o", &archive.display().to_string(), &image]);
    let listing = Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .expect("tar");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.lines().any(|l| l == "oci-layout") && !listing.contains("layer.tar"),
        "Docker 26 wrote the OCI layout: {listing}"
    );

    // Streamed from n (as `argus up` does from the local engine) to a and b.
    let n = connect(Some(&hosts.host("n").unix))
        .await
        .expect("connect n");
    let engines = connect_hosts(&hosts, &["a", "b"]).await;
    let targets = as_engines(&["a", "b"], &engines);
    let recorder = Recorder::default();
    let source = Some(Engine::new("n", &n));
    let done = distribute(&image, source, &targets, false, &recorder)
        .await
        .expect("distribute");
    let skipped = |h: &str| match outcome(&done, h) {
        Outcome::Streamed { skipped, .. } => *skipped,
        other => panic!("host {h}: {other:?}"),
    };
    assert_eq!(skipped("a"), 0, "a has no layer of it: {done:?}");
    assert!(skipped("b") > 4 << 20, "b was spared the base: {done:?}");
    for h in ["a", "b"] {
        has_both_layers(&hosts, h, &image, &wanted);
        hosts.docker_ok(h, &["rmi", &image]);
    }

    // Loaded from the file by a node holding the base, on Docker 20.10 (b) and 26 (n).
    hosts.docker_ok("n", &["rmi", &image]);
    hosts.load_image("n", &base);
    for h in ["a", "b", "n"] {
        let node = NodeEngine::connect(Some(&hosts.host(h).unix))
            .await
            .expect("connect");
        let loaded = node.load_archive(&image, &wanted, &archive).await;
        let skipped = loaded.unwrap_or_else(|e| panic!("{h}: {e}"));
        match h {
            "a" => assert_eq!(skipped, Some(0), "a has no layer of it"),
            _ => assert!(
                skipped.is_some_and(|s| s > 4 << 20),
                "{h} read past the base: {skipped:?}"
            ),
        }
        has_both_layers(&hosts, h, &image, &wanted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_transfer_leaves_nothing_and_is_retried() {
    let Some(ctx) = TestContext::docker() else {
        return;
    };
    let local_id = inspect(RAY_IMAGE)["Id"].as_str().expect("id").to_string();
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let (local, engines) = (engine(None).await, connect_hosts(&hosts, &["a", "b"]).await);
    let local = Engine::new("local", &local);
    let targets = as_engines(&["a", "b"], &engines);
    let midway = 100 << 20;

    // 1. argus interrupted (its future dropped, as on Ctrl-C) once both loads are well under way.
    let recorder = Recorder::default();
    tokio::select! {
        result = distribute(RAY_IMAGE, Some(local), &targets, false, &recorder) => {
            panic!("the transfer ended before it was interrupted: {result:?}")
        }
        () = until(&recorder, &["a", "b"], midway) => {}
    }
    for h in ["a", "b"] {
        assert_eq!(
            hosts.image_id(h, RAY_IMAGE),
            None,
            "{h} has the image after a cut transfer"
        );
        assert_eq!(all_images(&hosts, h), "", "{h} kept part of the image");
    }

    // 2. Host b's engine stops in the middle: b fails (named), a is not held back.
    let recorder = Recorder::default();
    let (result, ()) = tokio::join!(
        distribute(RAY_IMAGE, Some(local), &targets, false, &recorder),
        async {
            until(&recorder, &["b"], midway).await;
            tokio::task::block_in_place(|| hosts.stop_engine("b"));
        }
    );
    let err = result.expect_err("b's engine stopped during its load");
    match &err {
        DistributeError::Transfer { failures, done, .. } => {
            assert_eq!(failures.len(), 1, "{err}");
            assert_eq!(failures[0].host, "b", "{err}");
            assert_eq!(done.len(), 1, "{err}");
            assert_eq!(done[0].host, "a");
            assert_eq!(done[0].image_id, local_id);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("host b"), "{err}");
    assert_eq!(err.exit(), Exit::Failed);
    assert_eq!(
        hosts.image_id("a", RAY_IMAGE).as_deref(),
        Some(local_id.as_str())
    );
    hosts.start_engine("b");
    assert_eq!(
        hosts.image_id("b", RAY_IMAGE),
        None,
        "b has a tag after a cut load"
    );
    assert_eq!(all_images(&hosts, "b"), "", "b kept part of the image");

    // 3. The next run brings it to b only.
    let engines = connect_hosts(&hosts, &["a", "b"]).await;
    let targets = as_engines(&["a", "b"], &engines);
    let done = distribute(
        RAY_IMAGE,
        Some(local),
        &targets,
        false,
        &Recorder::default(),
    )
    .await
    .expect("the retry");
    assert_eq!(outcome(&done, "a"), &Outcome::Present);
    assert!(matches!(outcome(&done, "b"), Outcome::Streamed { bytes, .. } if *bytes > 600_000_000));
    assert_eq!(
        hosts.image_id("b", RAY_IMAGE).as_deref(),
        Some(local_id.as_str())
    );
}

/// Returns once every host's task has reported at least `bytes` (panics after 5 minutes).
async fn until(recorder: &Recorder, hosts: &[&str], bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !hosts.iter().all(|h| recorder.bytes(h) >= bytes) {
        assert!(
            Instant::now() < deadline,
            "no transfer reached {bytes} bytes on {hosts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_the_hosts_reach_is_pulled_from() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let (hosts, registry) = Hosts::up_with_registry(&ctx, &["a", "b"]);
    let pushed = format!("{registry}/{}/tiny:test", ctx.prefix);
    let id = tiny_image(Some(&hosts.host("a").unix), &pushed, &ctx.prefix);
    hosts.docker_ok("a", &["push", &pushed]);
    let engines = connect_hosts(&hosts, &["a", "b"]).await;
    let targets = as_engines(&["a", "b"], &engines);

    let recorder = Recorder::default();
    let done = distribute(&pushed, None, &targets, false, &recorder)
        .await
        .expect("distribute");
    assert_eq!(outcome(&done, "a"), &Outcome::Present);
    assert_eq!(outcome(&done, "b"), &Outcome::Pulled, "{done:?}");
    assert_eq!(done.image_id, id);
    assert_eq!(hosts.image_id("b", &pushed).as_deref(), Some(id.as_str()));

    // A registry that lacks the image: the pull fails, the image is streamed from a.
    let unpushed = format!("{registry}/{}/tiny:unpushed", ctx.prefix);
    let other = tiny_image(Some(&hosts.host("a").unix), &unpushed, "never pushed");
    let done = distribute(&unpushed, None, &targets, false, &Recorder::default())
        .await
        .expect("distribute after a failed pull");
    assert_eq!(streamed_from(&done, "b"), Some("a"), "{done:?}");
    assert_eq!(
        hosts.image_id("b", &unpushed).as_deref(),
        Some(other.as_str())
    );

    // Nobody has it and the registry has not either: exit 4, naming the image and the pulls.
    let absent = format!("{registry}/{}/absent:1", ctx.prefix);
    let err = distribute(&absent, None, &targets, false, &Recorder::default())
        .await
        .expect_err("nobody has it");
    assert!(
        matches!(err, DistributeError::ImageUnavailable { ref pulls, .. } if pulls.len() == 2),
        "{err}"
    );
    assert!(
        err.to_string().contains(&absent) && err.to_string().contains("host b"),
        "{err}"
    );
    assert_eq!(err.exit(), Exit::Unreachable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_nobody_has_is_refused_with_exit_4() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let image = format!("{}-nowhere:1", ctx.prefix);
    let (local, engines) = (engine(None).await, connect_hosts(&hosts, &["a", "b"]).await);
    let local = Engine::new("local", &local);
    let targets = as_engines(&["a", "b"], &engines);
    for dry_run in [true, false] {
        let err = distribute(&image, Some(local), &targets, dry_run, &Recorder::default())
            .await
            .expect_err("nobody has it");
        assert!(
            matches!(err, DistributeError::ImageUnavailable { .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("image {image} is on no engine (looked on local, a, b)")
        );
        assert_eq!(err.exit(), Exit::Unreachable);
        assert!(
            err.hint().is_some_and(|h| h.contains("argus image build")),
            "{:?}",
            err.hint()
        );
    }

    // A host whose engine does not answer is named before anything moves.
    hosts.stop_engine("b");
    let err = distribute(&image, Some(local), &targets, false, &Recorder::default())
        .await
        .expect_err("b is down");
    assert!(
        matches!(&err, DistributeError::Unreachable { hosts, .. } if hosts.len() == 1 && hosts[0].host == "b"),
        "{err}"
    );
    assert_eq!(err.exit(), Exit::Unreachable);
}

/// Not a test: the image benchmark of issue 11 (`cargo nextest run --run-ignored only -E
/// 'test(image_distribution_benchmark)' --no-capture`). Distributes argus's runtime image to 2
/// fresh hosts the naive way (`docker save | docker -H <host> load`, one host after the other)
/// and through `distribute`, `ARGUS_BENCH_RUNS` times each (default 1), alternating which goes
/// first, and prints each run's ratio and their median (target <= 0.6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run on demand"]
async fn image_distribution_benchmark() {
    ensure_image();
    let runs: usize = std::env::var("ARGUS_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let ctx = TestContext::new("imgbench");
    let hosts = Hosts::up(&ctx, &["a", "b"], Options::default());
    let (local, engines) = (engine(None).await, connect_hosts(&hosts, &["a", "b"]).await);
    let local = Engine::new("local", &local);
    let targets = as_engines(&["a", "b"], &engines);
    let clear = || {
        for h in ["a", "b"] {
            hosts.docker_ok(h, &["rmi", RAY_IMAGE]);
            assert_eq!(all_images(&hosts, h), "");
        }
    };
    let naive = || {
        let started = Instant::now();
        for h in ["a", "b"] {
            hosts.load_image(h, RAY_IMAGE);
        }
        started.elapsed().as_secs_f64()
    };
    let mut ratios = Vec::new();
    for run in 0..runs {
        let (mut naive_s, mut argus_s) = (0.0, 0.0);
        for first_naive in [run % 2 == 0, run % 2 != 0] {
            if first_naive {
                naive_s = naive();
            } else {
                let started = Instant::now();
                let done = distribute(
                    RAY_IMAGE,
                    Some(local),
                    &targets,
                    false,
                    &Recorder::default(),
                )
                .await
                .expect("distribute");
                argus_s = started.elapsed().as_secs_f64();
                assert!(
                    done.hosts
                        .iter()
                        .all(|h| matches!(h.outcome, Outcome::Streamed { .. }))
                );
            }
            clear();
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "run {run}: naive {naive_s:.1} s, argus {argus_s:.1} s, ratio {:.2} (load average {})",
            argus_s / naive_s,
            load.split_whitespace().next().unwrap_or("?")
        );
        ratios.push(argus_s / naive_s);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!("median ratio argus/naive: {median:.2} (target <= 0.6)");
}

/// A Slurm node step's image (`slurm::node::bring_image`): pulled when the reference names a
/// registry that has the run's very image, else loaded from the run's archive (verified by
/// id); a tag that moved since the login node archived the image is not trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_node_pulls_the_runs_image_only_when_it_is_that_image() {
    use argus::slurm::node::{ImageSource, bring_image};
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let (hosts, registry) = Hosts::up_with_registry(&ctx, &["a", "b"]);
    let engines = connect_hosts(&hosts, &["a", "b"]).await;
    let (a, b) = (&engines[0], &engines[1]);
    let a_unix = hosts.host("a").unix.clone();
    let recorder = Recorder::default();

    // The registry has the run's image: b pulls it, and needs no archive (there is none).
    let pushed = format!("{registry}/{}/tiny:node", ctx.prefix);
    let id = tiny_image(Some(&a_unix), &pushed, &ctx.prefix);
    hosts.docker_ok("a", &["push", &pushed]);
    let no_archive = ctx.path("images/none.tar");
    let got = bring_image(b, "b", &pushed, &id, &no_archive, &recorder)
        .await
        .expect("pulled");
    assert_eq!(got, ImageSource::Pulled);
    assert_eq!(hosts.image_id("b", &pushed).as_deref(), Some(id.as_str()));
    let again = bring_image(b, "b", &pushed, &id, &no_archive, &recorder)
        .await
        .expect("present");
    assert_eq!(again, ImageSource::Present);

    // The tag moved after the run archived its image: the pull brings another image, so
    // the archive's is loaded and the tag points at the run's image on b.
    let moved = format!("{registry}/{}/tiny:moved", ctx.prefix);
    let runs = tiny_image(Some(&a_unix), &moved, "the run's");
    let archive = ctx.path("images/moved.tar");
    std::fs::create_dir_all(archive.parent().expect("dir")).expect("mkdir");
    argus::cluster::node::save_archive(a, &moved, &archive)
        .await
        .expect("archive");
    let newer = tiny_image(Some(&a_unix), &moved, "pushed since");
    assert_ne!(newer, runs);
    hosts.docker_ok("a", &["push", &moved]);
    let got = bring_image(b, "b", &moved, &runs, &archive, &recorder)
        .await
        .expect("loaded");
    assert_eq!(got, ImageSource::Loaded);
    assert_eq!(hosts.image_id("b", &moved).as_deref(), Some(runs.as_str()));

    // The registry lacks it: the archive, again.
    let unpushed = format!("{registry}/{}/tiny:unpushed", ctx.prefix);
    let id = tiny_image(Some(&a_unix), &unpushed, "never pushed");
    let archive = ctx.path("images/unpushed.tar");
    argus::cluster::node::save_archive(a, &unpushed, &archive)
        .await
        .expect("archive");
    let got = bring_image(b, "b", &unpushed, &id, &archive, &recorder)
        .await
        .expect("loaded");
    assert_eq!(got, ImageSource::Loaded);
    assert_eq!(hosts.image_id("b", &unpushed).as_deref(), Some(id.as_str()));
}
