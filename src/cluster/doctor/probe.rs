//! The probe: one short-lived container per host that reads, in one go, the host-side facts
//! doctor needs and the engine's API does not give (the `/dev/shm` and memlock limit a
//! container gets, free space on the shared storage as the host mounts it and on the
//! engine's data root, the GPU device nodes), then is removed whatever happened.
//!
//! It runs the cluster's image (the only image a host of the cluster is sure to have) with
//! the cluster's shared mount, the engine's data root and (real GPUs) the host's `/dev`
//! read-only, and the cluster's labels with role `probe`, as storage_check's probes do. It
//! is given nothing else ([`docker::confined`]): no network, no capability (`stat -f`, `ls`
//! and `/proc/self/limits` need none), no-new-privileges, `sh` as its explicit entrypoint
//! (an image's ENTRYPOINT never wraps it) with `LD_PRELOAD`, `LD_LIBRARY_PATH`, `BASH_ENV`
//! and `ENV` emptied, a read-only root file system except when it asks for NVIDIA's GPUs
//! (NVIDIA's hook writes the linker cache into it). Its script is constant text: every
//! value (a path) reaches it through the environment, never inside the script.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, Mount, MountType};

use crate::cluster::docker;
use crate::cluster::plan::{LABEL_CLUSTER, LABEL_ROLE, SharedMount};

/// Where the probe sees the engine's data root and the host's `/dev`.
const DATA_ROOT_AT: &str = "/run/argus-probe/data-root";
const HOST_DEV_AT: &str = "/run/argus-probe/dev";

/// Each section starts with a line `@@ <name>`; a missing path prints nothing.
const SCRIPT: &str = r#"
fs() { [ -e "$1" ] && stat -f -c '%b %a %S' "$1" 2>/dev/null; }
echo '@@ shm'; fs /dev/shm
echo '@@ memlock'; grep '^Max locked memory' /proc/self/limits
echo '@@ shared'; fs "$ARGUS_PROBE_SHARED"
echo '@@ data_root'; fs "$ARGUS_PROBE_DATA_ROOT"
echo '@@ host_dev'; [ -d "$ARGUS_PROBE_DEV" ] && ls -1 "$ARGUS_PROBE_DEV" "$ARGUS_PROBE_DEV/dri" 2>/dev/null
echo '@@ dev'; ls -1 /dev 2>/dev/null
echo '@@ end'
"#;

/// What a probe is asked to look at on one host.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    pub cluster: String,
    /// The cluster's image as this host has it (by id).
    pub image_id: String,
    /// The shared storage as the nodes mount it.
    pub mount: SharedMount,
    /// The engine's data root (`DockerRootDir`), when the engine said.
    pub data_root: Option<String>,
    /// The host's `/dev` is listed (real GPUs on this host).
    pub host_dev: bool,
    /// Ask Docker for every NVIDIA GPU (NVIDIA workers on this host): the container starts
    /// only when the engine's `nvidia` device driver is there and its hook succeeds.
    pub nvidia: bool,
}

/// A file system's size and what is free on it for an unprivileged user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub total: u64,
    pub available: u64,
}

/// RLIMIT_MEMLOCK as a container gets it (None: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memlock {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// What the probe saw.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// `/dev/shm` of a container created without `shm_size` (the engine's default).
    pub shm: Option<Space>,
    pub memlock: Option<Memlock>,
    pub shared: Option<Space>,
    pub data_root: Option<Space>,
    /// Names in the host's `/dev` and `/dev/dri` (only when asked for).
    pub host_dev: Vec<String>,
    /// Names in the probe's own `/dev` (what the NVIDIA hook put there).
    pub dev: Vec<String>,
    /// The engine could not mount the shared storage (its message): the facts are those of
    /// a probe without it.
    pub shared_missing: Option<String>,
}

/// How the probe ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ran(Facts),
    /// The engine refused to start it with the NVIDIA request (the message); the facts are
    /// those of a second probe without it.
    NvidiaRefused {
        error: String,
        facts: Option<Facts>,
    },
    /// It could not run (the message).
    Failed(String),
}

/// Runs the probe on one engine, within `limit`; the container is removed in every case.
pub async fn probe(docker: &Docker, spec: &ProbeSpec, limit: Duration) -> Outcome {
    // Docker would create a missing named volume as a plain local one, which `up` would
    // then take for the NFS volume: a volume is only mounted when it is there.
    if let SharedMount::Volume { name, .. } = &spec.mount {
        match tokio::time::timeout(limit, docker.inspect_volume(name)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if docker::is_not_found(&e) => {
                return match run_once(docker, spec, spec.nvidia, false, limit).await {
                    Ok(facts) => Outcome::Ran(Facts {
                        shared_missing: Some(format!(
                            "volume {name} is not created yet: `argus up` creates it with the NFS options"
                        )),
                        ..facts
                    }),
                    Err(e) => Outcome::Failed(e),
                };
            }
            Ok(Err(e)) => return Outcome::Failed(crate::exit::one_line(&e)),
            Err(_) => return Outcome::Failed("inspecting the volume took too long".into()),
        }
    }
    match run_once(docker, spec, spec.nvidia, true, limit).await {
        // A bind mount of a path the host lacks: the rest is still worth seeing.
        Err(error) if error.contains("bind source path does not exist") => {
            match run_once(docker, spec, spec.nvidia, false, limit).await {
                Ok(facts) => Outcome::Ran(Facts {
                    shared_missing: Some(error),
                    ..facts
                }),
                Err(e) => Outcome::Failed(e),
            }
        }
        Ok(facts) => Outcome::Ran(facts),
        Err(error) if spec.nvidia => {
            let facts = run_once(docker, spec, false, true, limit).await.ok();
            Outcome::NvidiaRefused { error, facts }
        }
        Err(error) => Outcome::Failed(error),
    }
}

async fn run_once(
    docker: &Docker,
    spec: &ProbeSpec,
    nvidia: bool,
    shared: bool,
    limit: Duration,
) -> Result<Facts, String> {
    let body = body(spec, nvidia, shared);
    match docker::run_to_end_within(docker, body, limit).await {
        Ok(Some((0, output))) => Ok(parse(&output)),
        Ok(Some((code, output))) => Err(format!(
            "the probe container exited with {code}: {}",
            output.trim()
        )),
        Ok(None) => Err(format!("the probe took more than {}s", limit.as_secs())),
        Err(e) => Err(crate::exit::one_line(&e)),
    }
}

/// The probe's create request.
pub fn body(spec: &ProbeSpec, nvidia: bool, shared: bool) -> ContainerCreateBody {
    let mut mounts = Vec::new();
    let mut env = Vec::new();
    if shared {
        mounts.push(docker::mount_of(&spec.mount));
        env.push(format!("ARGUS_PROBE_SHARED={}", spec.mount.target()));
    }
    if let Some(root) = &spec.data_root {
        mounts.push(bind_ro(root, DATA_ROOT_AT));
        env.push(format!("ARGUS_PROBE_DATA_ROOT={DATA_ROOT_AT}"));
    }
    if spec.host_dev {
        mounts.push(bind_ro("/dev", HOST_DEV_AT));
        env.push(format!("ARGUS_PROBE_DEV={HOST_DEV_AT}"));
    }
    let device_requests = nvidia.then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".to_string()),
            count: Some(-1),
            capabilities: Some(vec![vec!["gpu".to_string()]]),
            ..Default::default()
        }]
    });
    let body = ContainerCreateBody {
        image: Some(spec.image_id.clone()),
        cmd: Some(vec!["-c".into(), SCRIPT.into()]),
        env: Some(env),
        labels: Some(HashMap::from([
            (LABEL_CLUSTER.to_string(), spec.cluster.clone()),
            (LABEL_ROLE.to_string(), "probe".to_string()),
        ])),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some("none".to_string()),
            device_requests,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut body = docker::confined(body, &["sh"], &[]);
    if let Some(host) = body.host_config.as_mut() {
        host.readonly_rootfs = Some(!nvidia);
    }
    body
}

fn bind_ro(source: &str, target: &str) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(source.to_string()),
        target: Some(target.to_string()),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The probe's output, section by section.
pub fn parse(output: &str) -> Facts {
    let mut sections: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut current = None;
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("@@ ") {
            current = Some(name.trim());
            sections.entry(name.trim()).or_default();
        } else if let Some(name) = current {
            sections.entry(name).or_default().push(line);
        }
    }
    let lines = |name: &str| sections.get(name).cloned().unwrap_or_default();
    let space = |name: &str| lines(name).first().and_then(|l| parse_space(l));
    let names = |name: &str| {
        lines(name)
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.ends_with(':'))
            .map(str::to_string)
            .collect()
    };
    Facts {
        shm: space("shm"),
        memlock: lines("memlock").first().and_then(|l| parse_memlock(l)),
        shared: space("shared"),
        data_root: space("data_root"),
        host_dev: names("host_dev"),
        dev: names("dev"),
        shared_missing: None,
    }
}

/// `stat -f -c '%b %a %S'`: total blocks, blocks available, block size.
fn parse_space(line: &str) -> Option<Space> {
    let mut words = line.split_whitespace().map(|w| w.parse::<u64>().ok());
    let (total, available, size) = (words.next()??, words.next()??, words.next()??);
    Some(Space {
        total: total.saturating_mul(size),
        available: available.saturating_mul(size),
    })
}

/// `Max locked memory  8388608  8388608  bytes` (or `unlimited`).
fn parse_memlock(line: &str) -> Option<Memlock> {
    let rest = line.strip_prefix("Max locked memory")?;
    let mut words = rest.split_whitespace();
    let value = |w: Option<&str>| -> Option<Option<u64>> {
        match w? {
            "unlimited" => Some(None),
            n => n.parse().ok().map(Some),
        }
    };
    Some(Memlock {
        soft: value(words.next())?,
        hard: value(words.next())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_sections_are_read_back() {
        let out = "@@ shm\n16384 16380 4096\n@@ memlock\nMax locked memory         8388608              unlimited            bytes\n@@ shared\n100 50 1024\n@@ data_root\n@@ host_dev\n/run/argus-probe/dev:\nkfd\nnvidia0\nnvidia1\nnvidiactl\n\n/run/argus-probe/dev/dri:\nrenderD128\n@@ dev\nnull\n@@ end\n";
        let facts = parse(out);
        assert_eq!(
            facts.shm,
            Some(Space {
                total: 64 << 20,
                available: 16380 * 4096
            })
        );
        assert_eq!(
            facts.memlock,
            Some(Memlock {
                soft: Some(8 << 20),
                hard: None
            })
        );
        assert_eq!(
            facts.shared,
            Some(Space {
                total: 102400,
                available: 51200
            })
        );
        assert_eq!(facts.data_root, None);
        assert_eq!(
            facts.host_dev,
            ["kfd", "nvidia0", "nvidia1", "nvidiactl", "renderD128"]
        );
        assert_eq!(facts.dev, ["null"]);
    }

    #[test]
    fn values_reach_the_probe_through_its_environment_only() {
        let spec = ProbeSpec {
            cluster: "c".into(),
            image_id: "sha256:1".into(),
            mount: SharedMount::Bind {
                source: "/srv/$(reboot)".into(),
                target: "/mnt/shared".into(),
            },
            data_root: Some("/var/lib/docker".into()),
            host_dev: false,
            nvidia: true,
        };
        let body = body(&spec, true, true);
        let cmd = body.cmd.unwrap_or_default();
        assert_eq!(cmd[1], SCRIPT);
        assert!(!SCRIPT.contains("reboot"));
        assert_eq!(body.entrypoint.unwrap_or_default(), ["sh"]);
        let host = body.host_config.unwrap_or_default();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_drop.unwrap_or_default(), ["ALL"]);
        assert_eq!(host.cap_add.unwrap_or_default(), Vec::<String>::new());
        assert_eq!(host.security_opt.unwrap_or_default(), ["no-new-privileges"]);
        assert_eq!(host.pid_mode, None);
        assert_eq!(host.device_requests.map(|r| r.len()), Some(1));
        assert_eq!(body.labels.unwrap_or_default()["argus.role"], "probe");
    }
}
