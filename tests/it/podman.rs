//! `argus slurm` on a node whose engine is Podman, through its Docker-compatible API
//! (`podman system service`), on the real Slurm fixture.
//!
//! What runs here (Debian's Podman 4.3): the API answers argus's calls (version, image
//! load from the run's archive on the shared storage, verified by image id, labelled
//! container create, list, remove). What cannot: no container starts on this machine kind
//! (runc is refused a resource limit: "error setting rlimit ... operation not permitted"),
//! so the test proves that argus says so in one clear error, leaves no container on the
//! engine, and that the epilog removes a dead job's container through Podman's API.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{IMAGE, Profile, TestContext, poll};
use crate::slurm_hosts::Slurm;

/// `podman system service` on a socket of the test's own, with its own storage and run
/// directories (nothing of a user's Podman is touched). Stopped and removed on drop.
struct Podman {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Podman {
    fn start(dir: &Path) -> Podman {
        let found = Command::new("podman").arg("--version").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "podman is not installed: .ci/run installs Debian's podman for this test"
        );
        std::fs::create_dir_all(dir).expect("podman dir");
        let socket = dir.join("podman.sock");
        let child = Command::new("podman")
            .args(Self::globals(dir))
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("podman system service");
        let podman = Podman {
            child,
            dir: dir.to_path_buf(),
            socket,
        };
        poll("podman's API", Duration::from_secs(30), || {
            podman.docker(&["version"]).status.success().then_some(())
        });
        podman
    }

    fn globals(dir: &Path) -> Vec<String> {
        vec![
            format!("--root={}", dir.join("storage").display()),
            format!("--runroot={}", dir.join("run").display()),
            format!("--tmpdir={}", dir.join("tmp").display()),
            "--storage-driver=overlay".into(),
            "--events-backend=file".into(),
        ]
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The docker CLI against Podman's API.
    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .arg("-H")
            .arg(self.endpoint())
            .args(args)
            .output()
            .expect("docker CLI")
    }

    fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(
            out.status.success(),
            "docker {args:?} on podman: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Podman's own cleanup: every container, image and mount of this storage.
        let _ = Command::new("podman")
            .args(Self::globals(&self.dir))
            .args(["system", "reset", "--force"])
            .stdin(Stdio::null())
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_podman_node_loads_the_image_by_id_and_says_plainly_why_nothing_starts() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let slurm = Slurm::up_with_kill_wait(&ctx, &["a"], 1, 30);
    let podman = Podman::start(&ctx.path("podman"));
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("code")).expect("shared");
    std::fs::write(shared.join("code/hello.py"), "print('hello')\n").expect("code");
    let name = ctx.cluster("pm");
    let profile = Profile::small(&name)
        .shared(&shared)
        .ray("ready_timeout_s", "120")
        .worker("gpus", "1")
        .yaml(&format!(
            "slurm: {{nodes: 1, gpus_per_node: 1, engine_socket: \"{}\"}}\n",
            podman.endpoint()
        ))
        .write(&ctx, "profile.yaml");
    let spec = ctx.write(
        "job.yaml",
        "workload: custom\ncode_path: /mnt/shared/code\nentrypoint: python3 /mnt/shared/code/hello.py\n",
    );
    let argus = || crate::slurm::argus(&ctx, &slurm, &profile);

    let run = argus()
        .args(["slurm", "submit", "--follow"])
        .arg_path(&spec)
        .run()
        .code(1);
    let out = format!("{}\n{}", run.stdout, run.stderr);
    // One clear error: the engine refused to start the container, and why.
    assert!(out.contains("Docker refused to start container"), "{out}");
    assert!(out.contains("operation not permitted"), "{out}");
    assert!(out.contains("FAILED"), "{out}");
    // The image came from the run's archive, with the id it was archived under.
    let local_id = crate::harness::docker(&["image", "inspect", IMAGE, "--format", "{{.Id}}"]);
    let on_podman = podman.docker_ok(&["image", "inspect", IMAGE, "--format", "{{.Id}}"]);
    assert_eq!(on_podman.trim(), local_id.trim());
    assert!(out.contains("image loaded from"), "{out}");
    // Nothing is left on the engine.
    let left = podman.docker_ok(&["ps", "-a", "--filter", "label=argus.cluster", "-q"]);
    assert_eq!(left.trim(), "", "{out}");

    // The epilog through Podman's API: a container of a Slurm job that no longer runs goes,
    // one of no Slurm job stays.
    let dead = format!("{}-dead", ctx.prefix);
    podman.docker_ok(&[
        "create",
        "--name",
        &dead,
        "--label",
        &format!("argus.cluster={name}"),
        "--label",
        "argus.slurm.job=999999",
        IMAGE,
        "true",
    ]);
    let other = format!("{}-other", ctx.prefix);
    podman.docker_ok(&["create", "--name", &other, IMAGE, "true"]);
    let epilog = argus()
        .args(["--json", "slurm", "epilog", "--engine", &podman.endpoint()])
        .run()
        .code(0)
        .json();
    assert_eq!(epilog["removed"], serde_json::json!([dead]), "{epilog}");
    let names = podman.docker_ok(&["ps", "-a", "--format", "{{.Names}}"]);
    assert_eq!(names.trim(), other, "{names}");
}
