//! `image_tools`: what argus runs inside the cluster's image is there, whoever built it.
//! argus's own image has Ray in a venv at /opt/ray; verl's images and most others have it
//! in the system Python. argus assumes neither: it runs programs by name, through the
//! image's `PATH`, and this check says whether those names resolve:
//!
//! - `/bin/sh`: the job's entrypoint (Ray runs it through `/bin/sh`: `mkdir -p <work dir>
//!   && cd <work dir> && <command>`), and every shell probe;
//! - `python3`: the job's entrypoint (`python3 -m verl...`), the tunnel to the dashboard,
//!   the Python probes, `job diagnose`'s listing of Ray's logs, `doctor --collective`;
//! - `ray`: every node's command (`ray start ... --block`);
//! - `mkdir`: the job's entrypoint, and the shared layout made inside the head (NFS);
//! - and `python3` must find the `ray` package: the job's driver is that `python3`.
//!
//! One short-lived probe container ([`docker::confined`]: root without any capability, no
//! network, read-only root file system, `/bin/sh` as its explicit entrypoint) lists them with
//! `command -v`, then `python3 -I -S` looks for the `ray` package where that interpreter
//! would (its site directories, a venv's too, their `.pth` path lines and the image's
//! `PYTHONPATH`, read as files, never run) and reads Ray's version from its `dist-info`. An image
//! without `/bin/sh` is seen as such: the engine cannot start the probe.
//!
//! The answer depends on the image's file system and environment alone, so it is kept in
//! this user's cache directory (`argus/image-tools/<hash of its layers and ENV>.json`):
//! `up` asks every time, and only an image this machine has not seen costs a container (a
//! retag or a new label is not one). A label cannot carry it: labelling an image makes
//! another image.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use serde::{Deserialize, Serialize};

use super::{Check, Status};
use crate::cluster::docker;
use crate::cluster::plan::{LABEL_CLUSTER, LABEL_ROLE};
use crate::ui::Reporter;

/// The probe: each tool's path (empty when absent), then the Python part, handed the
/// script as `$1` (constant text; nothing from outside goes into either).
const SCRIPT: &str = r#"
echo '@@ sh'
for t in python3 ray mkdir; do echo "@@ tool $t $(command -v "$t" 2>/dev/null)"; done
command -v python3 >/dev/null 2>&1 || exit 0
exec python3 -I -S -c "$1"
"#;

/// Where `python3` would find `ray`, without running anything of the image's packages
/// (`-S`: `site` is imported below only for its paths; `site.main` never runs).
const PYTHON: &str = r##"
import json, os, site, sys
from importlib.machinery import PathFinder
dirs = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + sys.path[:]
# A venv (argus's own /opt/ray): `site` would find its pyvenv.cfg and site-packages.
bin_dir = os.path.dirname(os.path.abspath(sys.executable))
for venv in (bin_dir, os.path.dirname(bin_dir)):
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        for lib in ("lib", "lib64"):
            dirs.append(os.path.join(venv, lib, "python%d.%d" % sys.version_info[:2], "site-packages"))
        break
try:
    dirs += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
for d in list(dirs):
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".pth"))
    except OSError:
        continue
    for n in names:
        try:
            with open(os.path.join(d, n), encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith(("#", "import ", "import\t")):
                        dirs.append(os.path.join(d, line))
        except OSError:
            pass
spec = PathFinder.find_spec("ray", dirs)
where = version = None
if spec is not None and spec.origin:
    where = os.path.dirname(os.path.dirname(spec.origin))
    try:
        for n in sorted(os.listdir(where)):
            for suffix in (".dist-info", ".egg-info"):
                if n.startswith("ray-") and n.endswith(suffix):
                    version = n[len("ray-"):-len(suffix)]
    except OSError:
        pass
print("@@ python " + json.dumps({"executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3], "ray_package": where, "ray_version": version}))
"##;

/// Bumped whenever what the probe reads changes: answers kept by another are asked again.
const CACHE_VERSION: u32 = 1;

/// How long `up` gives the probe: on a busy host a container is slow to start, which is
/// no reason to refuse the image (a probe that does not end leaves the image unchecked).
pub const UP_TIMEOUT: Duration = Duration::from_secs(60);

/// What the probe saw in an image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tools {
    /// `/bin/sh` ran (the probe's own entrypoint).
    pub sh: bool,
    /// Each tool's path on the image's `PATH`, None when absent.
    pub python3: Option<String>,
    pub ray: Option<String>,
    pub mkdir: Option<String>,
    /// `python3`'s version (`3.11.2`).
    pub python_version: Option<String>,
    /// The directory in which `python3` finds the `ray` package.
    pub ray_package: Option<String>,
    /// Ray's version, from its `dist-info`.
    pub ray_version: Option<String>,
}

impl Tools {
    /// What argus cannot do without, in the order it is needed: `up` refuses the image.
    pub fn missing(&self) -> Vec<Missing> {
        let mut missing = Vec::new();
        if !self.sh {
            missing.push(Missing::Sh);
        }
        if self.sh && self.ray.is_none() {
            missing.push(Missing::Ray);
        }
        if self.sh && self.python3.is_none() {
            missing.push(Missing::Python3);
        }
        if self.sh && self.mkdir.is_none() {
            missing.push(Missing::Mkdir);
        }
        missing
    }

    /// `python3` is there but does not find `ray` where it looks: `ray start` runs another
    /// Python than the job's driver. A warning: the package may be reached in a way the
    /// probe does not read (a `.pth` file's code, a sitecustomize).
    fn python_without_ray(&self) -> bool {
        self.python3.is_some() && self.ray.is_some() && self.ray_package.is_none()
    }
}

/// One thing an image lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Sh,
    Ray,
    Python3,
    Mkdir,
}

impl Missing {
    /// What is missing and what needs it.
    pub fn text(self) -> &'static str {
        match self {
            Missing::Sh => {
                "no /bin/sh (Ray runs each job's entrypoint through it; argus's probes are shell scripts)"
            }
            Missing::Ray => "no `ray` on its PATH (every node runs `ray start`)",
            Missing::Python3 => {
                "no `python3` on its PATH (each job's entrypoint, the tunnel to the dashboard and job diagnose run it)"
            }
            Missing::Mkdir => {
                "no `mkdir` on its PATH (each job's entrypoint makes its working directory)"
            }
        }
    }
}

/// The probe's answer for `image_id` on this engine, from the cache when it was seen
/// before. An error: the probe could not say (the engine, the time limit).
pub async fn inspect(
    docker: &Docker,
    cluster: &str,
    image_id: &str,
    limit: Duration,
) -> Result<Tools, String> {
    let cache = cache_key(docker, image_id, limit)
        .await
        .map(|key| cache_path(&key));
    if let Some(tools) = cache.as_ref().and_then(|path| read_cache(path)) {
        return Ok(tools);
    }
    let tools = probe(docker, cluster, image_id, limit).await?;
    if let Some(path) = &cache {
        write_cache(path, &tools);
    }
    Ok(tools)
}

/// `up`'s (and `slurm submit`'s) check before anything is made: an image that lacks what
/// argus runs is refused, naming what it lacks and the image (exit 2, as a bad input);
/// one that ran another Python than `ray`'s is a warning; one the probe could not look
/// into (a slow engine) is a note, and the caller goes on. What was seen, when it was.
pub async fn require(
    docker: &Docker,
    cluster: &str,
    reference: &str,
    image_id: &str,
    reporter: &dyn Reporter,
) -> Result<Option<Tools>, crate::cluster::Error> {
    if !image_id.starts_with("sha256:") {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let seen = inspect(docker, cluster, image_id, UP_TIMEOUT).await;
    tracing::debug!(
        "image tools of {reference} in {:.2}s: {seen:?}",
        started.elapsed().as_secs_f64()
    );
    let tools = match seen {
        Ok(tools) => tools,
        Err(e) => {
            reporter.note(&format!(
                "warning: could not check what {reference} holds ({e}): going on"
            ));
            return Ok(None);
        }
    };
    let missing = tools.missing();
    if !missing.is_empty() {
        return Err(crate::cluster::Error::ImageLacks {
            image: reference.to_string(),
            missing,
        });
    }
    let check = check(reference, &Ok(tools.clone()));
    if check.status == Status::Warn {
        reporter.note(&format!(
            "warning: {}: {} ({})",
            check.name, check.seen, check.why
        ));
    }
    Ok(Some(tools))
}

/// Runs the probe (no cache).
async fn probe(
    docker: &Docker,
    cluster: &str,
    image_id: &str,
    limit: Duration,
) -> Result<Tools, String> {
    match docker::run_to_end_within(docker, body(cluster, image_id), limit).await {
        Ok(Some((_, output))) if output.contains("@@ sh") => Ok(parse(&output)),
        Ok(Some((code, output))) => Err(format!(
            "the probe exited with {code} before it began: {}",
            output.trim()
        )),
        Ok(None) => Err(format!("the probe took more than {}s", limit.as_secs())),
        // The engine could not start `/bin/sh`: the image has none.
        Err(e) if no_executable(&crate::exit::one_line(&e)) => Ok(Tools::default()),
        Err(e) => Err(crate::exit::one_line(&e)),
    }
}

/// The engine's words when a container's entrypoint is not in the image (runc's, through
/// Docker and Podman).
fn no_executable(error: &str) -> bool {
    error.contains("executable file not found") || error.contains("no such file or directory")
}

/// The probe's create request: confined, as root (a tool under /root, mode 0700, is found
/// as the nodes, root, find it) with no capability, no network.
pub fn body(cluster: &str, image_id: &str) -> ContainerCreateBody {
    let body = ContainerCreateBody {
        image: Some(image_id.to_string()),
        cmd: Some(vec![
            "-c".into(),
            SCRIPT.into(),
            "image_tools".into(),
            PYTHON.into(),
        ]),
        user: Some("0:0".into()),
        working_dir: Some("/".into()),
        labels: Some(HashMap::from([
            (LABEL_CLUSTER.to_string(), cluster.to_string()),
            (LABEL_ROLE.to_string(), "probe".to_string()),
        ])),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_string()),
            ..Default::default()
        }),
        ..Default::default()
    };
    docker::confined(body, &["/bin/sh"], &[])
}

/// The probe's output read.
pub fn parse(output: &str) -> Tools {
    let mut tools = Tools::default();
    #[derive(Deserialize)]
    struct Python {
        version: Option<String>,
        ray_package: Option<String>,
        ray_version: Option<String>,
    }
    for line in output.lines() {
        let Some(rest) = line.strip_prefix("@@ ") else {
            continue;
        };
        if rest.trim() == "sh" {
            tools.sh = true;
        } else if let Some(tool) = rest.strip_prefix("tool ") {
            let (name, path) = tool.split_once(' ').unwrap_or((tool, ""));
            let path = Some(path.trim().to_string()).filter(|p| !p.is_empty());
            match name {
                "python3" => tools.python3 = path,
                "ray" => tools.ray = path,
                "mkdir" => tools.mkdir = path,
                _ => {}
            }
        } else if let Some(json) = rest.strip_prefix("python ")
            && let Ok(python) = serde_json::from_str::<Python>(json)
        {
            tools.python_version = python.version;
            tools.ray_package = python.ray_package;
            tools.ray_version = python.ray_version;
        }
    }
    tools
}

/// The check of one host's image (`reference` as the profile names it).
pub fn check(reference: &str, seen: &Result<Tools, String>) -> Check {
    let name = "image_tools";
    let tools = match seen {
        Ok(tools) => tools,
        Err(e) => {
            return Check::unknown(
                name,
                e.clone(),
                "argus runs /bin/sh, python3 and ray inside the image: whether it has them is not known",
            );
        }
    };
    let missing = tools.missing();
    if !missing.is_empty() {
        return Check {
            name,
            status: Status::Fail,
            seen: format!("{reference} has {}", list(&missing)),
            why: "argus starts Ray and runs jobs in the image with these programs, found on the image's PATH: `argus up` refuses it".into(),
            fix: fix(reference),
        };
    }
    let seen = summary(tools);
    if tools.python_without_ray() {
        return Check {
            name,
            status: Status::Warn,
            seen: format!("{seen}; that python3 does not find the ray package"),
            why: "the job's driver runs `python3`, which then cannot `import ray`: the `ray` command runs another Python".into(),
            fix: "install Ray into the Python that `python3` is on the image's PATH (or put that Python's bin first on PATH)".into(),
        };
    }
    Check::ok(name, seen)
}

/// What was found, on one line.
pub fn summary(tools: &Tools) -> String {
    let path = |p: &Option<String>| p.clone().unwrap_or_default();
    let mut text = format!("python3 {}", path(&tools.python3));
    if let Some(version) = &tools.python_version {
        text.push_str(&format!(" ({version})"));
    }
    text.push_str(&format!(", ray {}", path(&tools.ray)));
    match (&tools.ray_version, &tools.ray_package) {
        (Some(version), Some(at)) => text.push_str(&format!(" (Ray {version} in {at})")),
        (None, Some(at)) => text.push_str(&format!(" (in {at})")),
        _ => {}
    }
    text
}

/// The things missing, as one sentence part.
pub fn list(missing: &[Missing]) -> String {
    missing
        .iter()
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What to do about an image that lacks them.
pub fn fix(reference: &str) -> String {
    format!(
        "use an image with /bin/sh and Ray installed in its Python, so that `ray` and `python3` are on its PATH (pip install 'ray[default]' into the image {reference} is built from), or argus's own (argus image build)"
    )
}

/// What the answer depends on, hashed: the image's file system (its layers' digests, in
/// order) and its environment (`PATH`, `PYTHONPATH`, ...), never its labels or name, so a
/// retagged or relabelled image is not probed again. None when the engine does not say.
async fn cache_key(docker: &Docker, image_id: &str, limit: Duration) -> Option<String> {
    let info = tokio::time::timeout(limit, docker.inspect_image(image_id))
        .await
        .ok()?
        .ok()?;
    let layers = info
        .root_fs
        .and_then(|r| r.layers)
        .filter(|l| !l.is_empty())?;
    let env = info.config.and_then(|c| c.env).unwrap_or_default();
    Some(key_of(&layers, &env))
}

fn key_of(layers: &[String], env: &[String]) -> String {
    let both = serde_json::json!({"layers": layers, "env": env});
    crate::digest::sha256_hex(both.to_string().as_bytes())
}

/// Where the answer for `key` (a sha256 hex) is kept.
fn cache_path(key: &str) -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("argus/image-tools")
        .join(format!("{key}.json"))
}

#[derive(Serialize, Deserialize)]
struct Cached {
    version: u32,
    tools: Tools,
}

fn read_cache(path: &std::path::Path) -> Option<Tools> {
    use std::io::Read;
    let mut text = String::new();
    crate::fsx::open_regular(path)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut text)
        .ok()?;
    let cached: Cached = serde_json::from_str(&text).ok()?;
    (cached.version == CACHE_VERSION).then_some(cached.tools)
}

/// Keeps the answer; a cache that cannot be written costs a probe next time, nothing else.
fn write_cache(path: &std::path::Path, tools: &Tools) {
    let cached = Cached {
        version: CACHE_VERSION,
        tools: tools.clone(),
    };
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            let bytes = serde_json::to_vec(&cached).map_err(std::io::Error::other)?;
            crate::fsx::write_atomic(path, &bytes)
        });
    if let Err(e) = written {
        tracing::debug!("image tools not kept at {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_output_is_read_and_what_is_missing_named() {
        let system = parse(
            "@@ sh\n@@ tool python3 /usr/bin/python3\n@@ tool ray /usr/local/bin/ray\n@@ tool mkdir /bin/mkdir\n@@ python {\"executable\": \"/usr/bin/python3\", \"version\": \"3.11.2\", \"ray_package\": \"/usr/local/lib/python3.11/dist-packages\", \"ray_version\": \"2.51.1\"}\n",
        );
        assert!(system.missing().is_empty());
        let c = check("verl:x", &Ok(system.clone()));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert_eq!(
            c.seen,
            "python3 /usr/bin/python3 (3.11.2), ray /usr/local/bin/ray (Ray 2.51.1 in /usr/local/lib/python3.11/dist-packages)"
        );

        let no_ray = parse(
            "@@ sh\n@@ tool python3 /usr/bin/python3\n@@ tool ray \n@@ tool mkdir /bin/mkdir\n@@ python {\"version\": \"3.11.2\", \"ray_package\": null, \"ray_version\": null}\n",
        );
        assert_eq!(no_ray.missing(), [Missing::Ray]);
        let c = check("plain:1", &Ok(no_ray));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.seen.starts_with("plain:1 has no `ray` on its PATH"),
            "{}",
            c.seen
        );

        // No /bin/sh: nothing else can be known, and that alone is named.
        assert_eq!(Tools::default().missing(), [Missing::Sh]);
        assert!(no_executable(
            "Docker refused to start container 1: OCI runtime create failed: exec: \"/bin/sh\": stat /bin/sh: no such file or directory"
        ));

        let other_python = Tools {
            ray_package: None,
            ..system
        };
        assert_eq!(check("x", &Ok(other_python)).status, Status::Warn);
        assert_eq!(check("x", &Err("slow".into())).status, Status::Unknown);
    }

    /// The Python part finds `ray` where `python3` would import it from: a venv's
    /// site-packages (argus's own image) and a directory a `.pth` file names, read only.
    #[test]
    fn the_python_part_finds_ray_in_a_venv_and_through_a_pth_line() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let host = std::process::Command::new("python3")
            .args([
                "-I",
                "-S",
                "-c",
                "import sys; print(sys.executable, '%d.%d' % sys.version_info[:2])",
            ])
            .output()
            .expect("python3 on this machine");
        let text = String::from_utf8_lossy(&host.stdout).to_string();
        let (exe, version) = text.trim().split_once(' ').unwrap();
        std::os::unix::fs::symlink(exe, venv.join("bin/python3")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        let site = venv.join(format!("lib/python{version}/site-packages"));
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("ray")).unwrap();
        std::fs::create_dir_all(elsewhere.join("ray-9.9.9.dist-info")).unwrap();
        std::fs::write(
            elsewhere.join("ray/__init__.py"),
            "raise SystemExit('run')\n",
        )
        .unwrap();
        std::fs::create_dir_all(&site).unwrap();
        let marker = dir.path().join("ran");
        std::fs::write(
            site.join("x.pth"),
            format!(
                "{}\nimport pathlib; pathlib.Path({:?}).touch()\n",
                elsewhere.display(),
                marker.display()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(venv.join("bin/python3"))
            .args(["-I", "-S", "-c", PYTHON])
            .output()
            .unwrap();
        let tools = parse(&format!("@@ sh\n{}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(tools.ray_package.as_deref(), elsewhere.to_str(), "{out:?}");
        assert_eq!(tools.ray_version.as_deref(), Some("9.9.9"));
        assert!(!marker.exists(), "the .pth file's code ran");
    }

    #[test]
    fn the_probe_runs_confined_as_root_without_network() {
        let body = body("c", "sha256:1");
        assert_eq!(body.entrypoint.clone().unwrap_or_default(), ["/bin/sh"]);
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let host = body.host_config.clone().unwrap_or_default();
        assert_eq!(host.cap_drop.unwrap_or_default(), ["ALL"]);
        assert!(host.cap_add.unwrap_or_default().is_empty());
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert!(host.mounts.is_none() && host.binds.is_none());
        let labels = body.labels.unwrap_or_default();
        assert_eq!(labels.get(LABEL_ROLE).map(String::as_str), Some("probe"));
    }

    #[test]
    fn an_answer_is_kept_by_file_system_and_environment_and_read_back() {
        let layers = ["sha256:a".to_string(), "sha256:b".to_string()];
        let env = ["PATH=/usr/bin".to_string()];
        let key = key_of(&layers, &env);
        assert_eq!(key.len(), 64);
        assert_ne!(key, key_of(&layers[..1], &env));
        assert_ne!(
            key,
            key_of(&layers, &["PATH=/opt/ray/bin:/usr/bin".to_string()])
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d/x.json");
        let tools = Tools {
            sh: true,
            ray_version: Some("2.51.1".into()),
            ..Default::default()
        };
        write_cache(&path, &tools);
        assert_eq!(read_cache(&path), Some(tools));
        std::fs::write(&path, "{\"version\": 0, \"tools\": {}}").unwrap();
        assert_eq!(read_cache(&path), None);
    }
}
