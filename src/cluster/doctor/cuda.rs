//! `cuda_driver`: on a host with NVIDIA workers, the CUDA the image's libraries were built
//! for against the newest CUDA that host's NVIDIA driver supports. A CUDA 13 build (verl
//! 0.9's torch 2.11 and vLLM wheels) on an R570 driver starts every container and Ray node
//! fine, then fails the job at its first CUDA call ("The NVIDIA driver on your system is too
//! old", `cudaErrorInsufficientDriver`): this says so before.
//!
//! The image's CUDA comes from its config, read through the engine's API (no container):
//! the label [`LABEL_CUDA`] (`argus.cuda=<major.minor>`, torch's `torch.version.cuda`), else
//! the environment variable `CUDA_VERSION` that NVIDIA's own images set (`12.4.1`), else
//! argus's lock label when it names a GPU lock argus ships (whose `nvidia-cuda-runtime` pin
//! says the CUDA). The driver's comes from a probe container of the image on that host that
//! asks Docker for the GPUs (so NVIDIA's hook puts `nvidia-smi` in it) and reads
//! `nvidia-smi -q` (its `CUDA Version` is the driver's own answer) and
//! `/proc/driver/nvidia/version` (the kernel module's version, mapped through
//! [`TOOLKIT_DRIVERS`]); when the engine refuses the GPUs, a second probe reads the latter
//! alone. A host without NVIDIA's driver is said to be one (unknown, never a failure).

use std::collections::HashMap;
use std::fmt;

use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig};
use sha2::{Digest, Sha256};

use super::{Check, HostContext, Status};
use crate::cluster::docker;
use crate::cluster::plan::{LABEL_CLUSTER, LABEL_ROLE};

/// The label naming the CUDA (`major.minor`) the image's libraries were built for.
pub const LABEL_CUDA: &str = "argus.cuda";
/// The label `argus image build --verl` writes: `sha256:<hex>` of the lock it installed.
const LABEL_LOCK: &str = "argus.verl.lock";
/// The GPU locks argus ships: an image labelled with one's hash has that lock's CUDA.
const SHIPPED_GPU_LOCKS: &[&str] = &[include_str!(
    "../../../assets/verl/0.9.1/requirements-gpu.lock"
)];

/// A CUDA release, `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cuda {
    pub major: u32,
    pub minor: u32,
}

impl Cuda {
    /// `13.0`, `12.4.1`, `13.0.96` (a wheel's version): the first two numbers.
    pub fn parse(text: &str) -> Option<Cuda> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Cuda { major, minor })
    }
}

impl fmt::Display for Cuda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// An NVIDIA driver version (`580.65.06`), compared number by number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Driver(Vec<u32>);

impl Driver {
    pub fn parse(text: &str) -> Option<Driver> {
        let parts: Option<Vec<u32>> = text.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| (2..=3).contains(&p.len())).map(Driver)
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [first, rest @ ..] = self.0.as_slice() else {
            return Ok(());
        };
        // NVIDIA writes the third number with two digits (580.65.06, 535.104.05).
        match rest {
            [second] => write!(f, "{first}.{second}"),
            [second, third, ..] => write!(f, "{first}.{second}.{third:02}"),
            [] => write!(f, "{first}"),
        }
    }
}

/// The oldest Linux x86_64 driver of each CUDA release (its GA), from NVIDIA's CUDA Toolkit
/// Release Notes, "CUDA Toolkit and Corresponding Driver Versions" (Table 3). A driver
/// supports every CUDA whose minimum it reaches; newest first.
pub const TOOLKIT_DRIVERS: &[(&str, &str)] = &[
    ("13.1", "590.44.01"),
    ("13.0", "580.65.06"),
    ("12.9", "575.51.03"),
    ("12.8", "570.26"),
    ("12.6", "560.28.03"),
    ("12.5", "555.42.02"),
    ("12.4", "550.54.14"),
    ("12.3", "545.23.06"),
    ("12.2", "535.54.03"),
    ("12.1", "530.30.02"),
    ("12.0", "525.60.13"),
    ("11.8", "520.61.05"),
    ("11.7", "515.43.04"),
    ("11.6", "510.39.01"),
    ("11.5", "495.29.05"),
    ("11.4", "470.42.01"),
    ("11.3", "465.19.01"),
    ("11.2", "460.27.03"),
    ("11.1", "455.23"),
    ("11.0", "450.51.05"),
];

/// The oldest driver that runs any minor release of a CUDA major through CUDA minor version
/// compatibility (NVIDIA's release notes, Table 2; the data center driver matrix: R580 for
/// CUDA 13.x, R525 for 12.x, R450 for 11.x).
const MINOR_COMPAT: &[(u32, &str)] = &[(13, "580.65.06"), (12, "525.60.13"), (11, "450.80.02")];

/// [`TOOLKIT_DRIVERS`] as versions, newest first.
fn table() -> impl Iterator<Item = (Cuda, Driver)> {
    TOOLKIT_DRIVERS
        .iter()
        .filter_map(|(cuda, driver)| Some((Cuda::parse(cuda)?, Driver::parse(driver)?)))
}

/// The newest CUDA `driver` supports by the table (None: older than CUDA 11.0's), and
/// whether the driver is newer than the table's newest release (then it is a lower bound).
pub fn max_cuda(driver: &Driver) -> Option<(Cuda, bool)> {
    let newest = table().next().map(|(_, d)| d);
    let (cuda, _) = table().find(|(_, min)| driver >= min)?;
    Some((cuda, newest.is_some_and(|n| *driver > n)))
}

/// The oldest driver that runs `cuda` as a release of its own (its GA's minimum), when the
/// table has it.
pub fn minimum_driver(cuda: Cuda) -> Option<Driver> {
    table().find(|(c, _)| *c == cuda).map(|(_, d)| d)
}

fn minor_compat_floor(major: u32) -> Option<Driver> {
    MINOR_COMPAT
        .iter()
        .find(|(m, _)| *m == major)
        .and_then(|(_, d)| Driver::parse(d))
}

/// The CUDA a requirements lock's wheels bring: its CUDA runtime pin
/// (`nvidia-cuda-runtime==13.0.96`, or `nvidia-cuda-runtime-cu12==12.8.90`).
pub fn cuda_of_lock(text: &str) -> Option<Cuda> {
    text.lines().find_map(|line| {
        let line = line.split('#').next()?.trim();
        let (name, version) = line.split_once("==")?;
        let name = name.trim().to_ascii_lowercase().replace('_', "-");
        let runtime = name == "nvidia-cuda-runtime"
            || name
                .strip_prefix("nvidia-cuda-runtime-cu")
                .is_some_and(|m| m.chars().all(|c| c.is_ascii_digit()));
        runtime.then(|| Cuda::parse(version.split_whitespace().next()?))?
    })
}

/// The image's CUDA and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageCuda {
    pub cuda: Cuda,
    pub source: String,
}

/// The image's CUDA from its labels and environment (see the module's doc), if it says.
pub fn image_cuda(labels: &HashMap<String, String>, env: &[String]) -> Option<ImageCuda> {
    if let Some(cuda) = labels.get(LABEL_CUDA).and_then(|v| Cuda::parse(v)) {
        return Some(ImageCuda {
            cuda,
            source: format!("label {LABEL_CUDA}"),
        });
    }
    let from_env = env
        .iter()
        .find_map(|e| e.strip_prefix("CUDA_VERSION="))
        .and_then(Cuda::parse);
    if let Some(cuda) = from_env {
        return Some(ImageCuda {
            cuda,
            source: "its CUDA_VERSION".into(),
        });
    }
    let lock = labels.get(LABEL_LOCK)?.strip_prefix("sha256:")?;
    SHIPPED_GPU_LOCKS.iter().find_map(|text| {
        let hash: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (hash == lock).then_some(())?;
        Some(ImageCuda {
            cuda: cuda_of_lock(text)?,
            source: format!("its lock ({LABEL_LOCK}), argus's GPU lock"),
        })
    })
}

/// What the probe read of the host's driver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDriver {
    /// The kernel module's version (`/proc/driver/nvidia/version`, else nvidia-smi's).
    pub driver: Option<Driver>,
    /// The newest CUDA the driver says it supports (`nvidia-smi -q`'s `CUDA Version`).
    pub cuda: Option<Cuda>,
}

/// The probe's output: `@@ proc` then `/proc/driver/nvidia/version`, `@@ smi` then the
/// head of `nvidia-smi -q`.
pub fn parse_probe(output: &str) -> HostDriver {
    let mut section = "";
    let mut host = HostDriver::default();
    let mut smi_driver = None;
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("@@ ") {
            section = match name.trim() {
                "proc" => "proc",
                "smi" => "smi",
                _ => "",
            };
            continue;
        }
        match section {
            "proc" if line.starts_with("NVRM version:") && host.driver.is_none() => {
                host.driver = line.split_whitespace().find_map(Driver::parse);
            }
            "smi" => {
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                match key.trim() {
                    "Driver Version" => smi_driver = Driver::parse(value.trim()),
                    "CUDA Version" => host.cuda = Cuda::parse(value),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    host.driver = host.driver.or(smi_driver);
    host
}

const NAME: &str = "cuda_driver";

/// The verdict on one host: the image's CUDA (None: it does not say) against the driver.
pub fn verdict(image: Option<&ImageCuda>, host: &HostDriver) -> Check {
    let (supports, from) = match (&host.cuda, &host.driver) {
        (Some(cuda), _) => ((*cuda, false), "nvidia-smi"),
        (None, Some(driver)) => match max_cuda(driver) {
            Some(found) => (found, "NVIDIA's table"),
            None => {
                return Check {
                    name: NAME,
                    status: Status::Fail,
                    seen: format!("NVIDIA driver {driver}: older than CUDA 11.0's (450.51.05)"),
                    why: "no CUDA build argus or verl uses runs on it".into(),
                    fix: upgrade_fix(image.map(|i| i.cuda)),
                };
            }
        },
        (None, None) => {
            let wants = image
                .map(|i| format!("the image's CUDA {} ({})", i.cuda, i.source))
                .unwrap_or_else(|| "the image's CUDA".into());
            return Check {
                name: NAME,
                status: Status::Unknown,
                seen:
                    "no NVIDIA driver on this host: no /proc/driver/nvidia/version, no nvidia-smi"
                        .into(),
                why: format!(
                    "{wants} cannot be compared with a driver: this host has no NVIDIA GPU, or its driver is not loaded"
                ),
                fix: "on a GPU host, install NVIDIA's driver; `nvidia-smi` there must answer"
                    .into(),
            };
        }
    };
    let (max, lower_bound) = supports;
    let driver = host
        .driver
        .as_ref()
        .map(|d| format!("driver {d}"))
        .unwrap_or_else(|| "the driver".into());
    let up_to = if lower_bound {
        format!("at least CUDA {max} (newer than argus's table)")
    } else {
        format!("CUDA up to {max}")
    };
    let Some(image) = image else {
        return Check {
            name: NAME,
            status: Status::Warn,
            seen: format!("{driver} supports {up_to} ({from}); the image declares no CUDA version (no label {LABEL_CUDA}, no CUDA_VERSION)"),
            why: "a CUDA build newer than the driver fails at its first CUDA call, after the cluster and the job have started; without the image's CUDA this cannot be checked before".into(),
            fix: format!("label the image with its torch's CUDA (`LABEL {LABEL_CUDA}=<torch.version.cuda>`; argus image build writes it)"),
        };
    };
    let seen = format!(
        "{driver} supports {up_to} ({from}); the image is built for CUDA {} ({})",
        image.cuda, image.source
    );
    let wanted = image.cuda;
    if wanted <= max || (lower_bound && wanted.major == max.major) {
        return Check::ok(NAME, seen);
    }
    let compat = minor_compat_floor(wanted.major);
    let by_compat = wanted.major == max.major
        && compat
            .zip(host.driver.as_ref())
            .is_some_and(|(floor, d)| *d >= floor);
    if by_compat {
        return Check {
            name: NAME,
            status: Status::Warn,
            seen,
            why: format!(
                "it runs through CUDA minor version compatibility: most of CUDA {wanted} works, but a kernel shipped only as PTX newer than the driver cannot be compiled (`cudaErrorUnsupportedPtxVersion`)"
            ),
            fix: upgrade_fix(Some(wanted)),
        };
    }
    Check {
        name: NAME,
        status: Status::Fail,
        seen,
        why: format!(
            "CUDA {wanted} does not run on a driver for CUDA {max}: the cluster starts, then every worker of the job fails at its first CUDA call (\"The NVIDIA driver on your system is too old\", cudaErrorInsufficientDriver)"
        ),
        fix: upgrade_fix(Some(wanted)),
    }
}

fn upgrade_fix(cuda: Option<Cuda>) -> String {
    match cuda {
        Some(cuda) => {
            let min = minimum_driver(cuda)
                .map(|d| format!(" {d} or newer"))
                .or_else(|| minor_compat_floor(cuda.major).map(|d| format!(" {d} or newer")))
                .unwrap_or_default();
            format!(
                "upgrade the host's NVIDIA driver to one for CUDA {cuda}{min}; or run an image built for the CUDA the driver has (a lock whose torch wheels are for it)"
            )
        }
        None => "upgrade the host's NVIDIA driver".into(),
    }
}

/// Reads the driver: `/proc/driver/nvidia/version` (the kernel's, any container sees it)
/// and, where NVIDIA's hook put it, the head of `nvidia-smi -q`. Constant text.
const SCRIPT: &str = r#"
echo '@@ proc'; cat /proc/driver/nvidia/version 2>/dev/null
echo '@@ smi'; command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -q 2>/dev/null | head -n 12
echo '@@ end'
"#;

/// The probe's create request: the image, no network, nothing mounted, every capability
/// dropped; with `gpus`, every GPU with the `utility` capability (nvidia-smi and NVML).
pub fn probe_body(cluster: &str, image_id: &str, gpus: bool) -> ContainerCreateBody {
    let device_requests = gpus.then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".to_string()),
            count: Some(-1),
            capabilities: Some(vec![vec!["gpu".to_string(), "utility".to_string()]]),
            ..Default::default()
        }]
    });
    let body = ContainerCreateBody {
        image: Some(image_id.to_string()),
        cmd: Some(vec!["-c".into(), SCRIPT.into()]),
        labels: Some(HashMap::from([
            (LABEL_CLUSTER.to_string(), cluster.to_string()),
            (LABEL_ROLE.to_string(), "probe".to_string()),
        ])),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_string()),
            device_requests,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut body = docker::confined(body, &["sh"], &[]);
    if let Some(host) = body.host_config.as_mut() {
        // NVIDIA's hook writes the linker cache into the root file system.
        host.readonly_rootfs = Some(!gpus);
    }
    body
}

/// `cuda_driver` of one host (None: no NVIDIA worker there).
pub async fn check(cx: &HostContext<'_>) -> Option<Check> {
    let (nvidia, _) = super::gpus::needs(&cx.nodes);
    if !nvidia {
        return None;
    }
    let Some(image_id) = cx.image_id else {
        return Some(Check::unknown(
            NAME,
            format!("{} is not on this host", cx.loaded.profile.image),
            "the image's CUDA and the host's driver are read with the image: `argus up` brings it",
        ));
    };
    let docker = &cx.engine.docker;
    let inspect = tokio::time::timeout(cx.deadline, docker.inspect_image(image_id)).await;
    let config = match inspect {
        Ok(Ok(image)) => image.config.unwrap_or_default(),
        Ok(Err(e)) => {
            return Some(Check::unknown(
                NAME,
                crate::exit::one_line(&e),
                "the image's CUDA could not be read",
            ));
        }
        Err(_) => {
            return Some(Check::unknown(
                NAME,
                format!(
                    "inspecting the image took more than {}s",
                    cx.deadline.as_secs()
                ),
                "the image's CUDA could not be read",
            ));
        }
    };
    let image = image_cuda(
        &config.labels.unwrap_or_default(),
        &config.env.unwrap_or_default(),
    );
    let mut ran = run(cx, image_id, true).await;
    if ran.is_err() {
        // The engine refused the GPUs (`gpu_runtime` says why): the kernel's file still tells.
        ran = run(cx, image_id, false).await;
    }
    Some(match ran {
        Ok(host) => verdict(image.as_ref(), &host),
        Err(e) => Check::unknown(NAME, e, "the probe reading the driver did not run"),
    })
}

async fn run(cx: &HostContext<'_>, image_id: &str, gpus: bool) -> Result<HostDriver, String> {
    let body = probe_body(&cx.plan.cluster, image_id, gpus);
    match docker::run_to_end_within(&cx.engine.docker, body, cx.deadline).await {
        Ok(Some((0, output))) => Ok(parse_probe(&output)),
        Ok(Some((code, output))) => Err(format!(
            "the probe container exited with {code}: {}",
            output.trim()
        )),
        Ok(None) => Err(format!(
            "the probe took more than {}s",
            cx.deadline.as_secs()
        )),
        Err(e) => Err(crate::exit::one_line(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(text: &str) -> Driver {
        Driver::parse(text).expect("driver version")
    }

    fn cuda(text: &str) -> Cuda {
        Cuda::parse(text).expect("cuda version")
    }

    #[test]
    fn a_driver_supports_the_newest_cuda_whose_minimum_it_reaches() {
        let max = |d: &str| max_cuda(&driver(d)).map(|(c, beyond)| (c.to_string(), beyond));
        assert_eq!(max("580.65.06"), Some(("13.0".into(), false)));
        assert_eq!(max("580.95.05"), Some(("13.0".into(), false)));
        assert_eq!(max("580.65.05"), Some(("12.9".into(), false)));
        assert_eq!(max("575.57.08"), Some(("12.9".into(), false)));
        assert_eq!(max("570.133.20"), Some(("12.8".into(), false)));
        assert_eq!(max("565.57.01"), Some(("12.6".into(), false)));
        assert_eq!(max("550.54.14"), Some(("12.4".into(), false)));
        assert_eq!(max("550.54.13"), Some(("12.3".into(), false)));
        assert_eq!(max("535.230.02"), Some(("12.2".into(), false)));
        assert_eq!(max("525.60.13"), Some(("12.0".into(), false)));
        assert_eq!(max("470.256.02"), Some(("11.4".into(), false)));
        assert_eq!(max("590.44.01"), Some(("13.1".into(), false)));
        assert_eq!(max("595.10"), Some(("13.1".into(), true)));
        assert_eq!(max("440.33.01"), None);
        // Every row of the table reads, newest first.
        let rows: Vec<(Cuda, Driver)> = table().collect();
        assert_eq!(rows.len(), TOOLKIT_DRIVERS.len());
        assert!(rows.windows(2).all(|w| w[0].0 > w[1].0 && w[0].1 > w[1].1));
        assert_eq!(minimum_driver(cuda("12.8")).unwrap().to_string(), "570.26");
        // Versions compare as numbers, not text.
        assert!(driver("580.100.1") > driver("580.95.05"));
        assert_eq!(driver("580.65.06").to_string(), "580.65.06");
        assert_eq!(Driver::parse("580"), None);
        assert_eq!(Driver::parse("x.1"), None);
    }

    #[test]
    fn the_images_cuda_comes_from_its_label_its_env_or_a_shipped_lock() {
        let labels = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let env = vec!["PATH=/usr/bin".to_string(), "CUDA_VERSION=12.4.1".into()];
        let found = image_cuda(&labels(&[(LABEL_CUDA, "13.0")]), &env).unwrap();
        assert_eq!(
            (found.cuda, found.source.as_str()),
            (cuda("13.0"), "label argus.cuda")
        );
        let found = image_cuda(&labels(&[]), &env).unwrap();
        assert_eq!(found.cuda, cuda("12.4"));
        assert_eq!(image_cuda(&labels(&[]), &[]), None);
        // argus's GPU lock: the image built from it says its lock's hash.
        let lock = SHIPPED_GPU_LOCKS[0];
        let hash: String = Sha256::digest(lock.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let found = image_cuda(&labels(&[(LABEL_LOCK, &format!("sha256:{hash}"))]), &[]).unwrap();
        assert_eq!(found.cuda, cuda("13.0"));
        assert_eq!(
            image_cuda(&labels(&[(LABEL_LOCK, "sha256:0000")]), &[]),
            None
        );
    }

    #[test]
    fn a_locks_cuda_is_its_cuda_runtime_pin() {
        assert_eq!(
            cuda_of_lock("# x\ntorch==2.11.0\nnvidia-cuda-runtime==13.0.96  # cudart\n"),
            Some(cuda("13.0"))
        );
        assert_eq!(
            cuda_of_lock("nvidia_cuda_runtime_cu12==12.8.90 --hash=sha256:ab\n"),
            Some(cuda("12.8"))
        );
        assert_eq!(cuda_of_lock("nvidia-cuda-runtime-cux==1.2\n"), None);
        assert_eq!(cuda_of_lock("torch==2.11.0\n"), None);
    }

    #[test]
    fn the_probe_reads_the_kernel_modules_version_and_nvidia_smis_cuda() {
        let out = "@@ proc\nNVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n@@ smi\n\n==============NVSMI LOG==============\n\nTimestamp                                 : Sun Nov 29 10:00:00 2026\nDriver Version                            : 580.65.06\nCUDA Version                              : 13.0\n\nAttached GPUs                             : 8\n@@ end\n";
        assert_eq!(
            parse_probe(out),
            HostDriver {
                driver: Some(driver("580.65.06")),
                cuda: Some(cuda("13.0")),
            }
        );
        // The proprietary module's line, and no nvidia-smi.
        let out = "@@ proc\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 2025\n@@ smi\n@@ end\n";
        assert_eq!(
            parse_probe(out),
            HostDriver {
                driver: Some(driver("570.133.20")),
                cuda: None,
            }
        );
        // nvidia-smi alone (a driver whose /proc entry the runtime hid).
        let out = "@@ proc\n@@ smi\nDriver Version : 575.57.08\nCUDA Version : 12.9\n@@ end\n";
        assert_eq!(parse_probe(out).driver, Some(driver("575.57.08")));
        assert_eq!(
            parse_probe("@@ proc\n@@ smi\n@@ end\n"),
            HostDriver::default()
        );
    }

    #[test]
    fn the_verdict_passes_warns_fails_and_says_what_to_do() {
        let image = |v: &str| ImageCuda {
            cuda: cuda(v),
            source: "label argus.cuda".into(),
        };
        let host = |d: &str, c: Option<&str>| HostDriver {
            driver: Some(driver(d)),
            cuda: c.map(cuda),
        };
        // CUDA 13.0 on an R580 driver: ok.
        let c = verdict(Some(&image("13.0")), &host("580.65.06", Some("13.0")));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.seen
                .contains("driver 580.65.06 supports CUDA up to 13.0 (nvidia-smi)")
        );
        assert!(
            c.seen.contains("CUDA 13.0 (label argus.cuda)"),
            "{}",
            c.seen
        );
        // An older build on a newer driver: ok.
        assert_eq!(
            verdict(Some(&image("12.8")), &host("580.65.06", None)).status,
            Status::Ok
        );
        // CUDA 13.0 on an R570 driver: fails, naming the driver it needs.
        let c = verdict(Some(&image("13.0")), &host("570.133.20", Some("12.8")));
        assert_eq!(c.status, Status::Fail);
        assert!(c.why.contains("too old"), "{}", c.why);
        assert!(c.fix.contains("580.65.06 or newer"), "{}", c.fix);
        // By the table alone (no nvidia-smi): the same.
        let c = verdict(Some(&image("13.0")), &host("570.133.20", None));
        assert_eq!(c.status, Status::Fail);
        assert!(c.seen.contains("(NVIDIA's table)"), "{}", c.seen);
        // CUDA 13.1 on an R580 driver: minor version compatibility, a warning.
        let c = verdict(Some(&image("13.1")), &host("580.95.05", Some("13.0")));
        assert_eq!(c.status, Status::Warn);
        assert!(c.why.contains("minor version compatibility"), "{}", c.why);
        assert!(c.fix.contains("590.44.01"), "{}", c.fix);
        // A driver newer than the table: a lower bound, enough for its major's releases.
        assert_eq!(
            verdict(Some(&image("13.2")), &host("600.10.01", None)).status,
            Status::Ok
        );
        // An image that does not say: a warning that says how to make it say.
        let c = verdict(None, &host("580.65.06", Some("13.0")));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.contains("argus.cuda"), "{}", c.fix);
        // No driver at all (a GPU-less host): unknown, said plainly, never a failure.
        let c = verdict(Some(&image("13.0")), &HostDriver::default());
        assert_eq!(c.status, Status::Unknown);
        assert!(
            c.seen.starts_with("no NVIDIA driver on this host"),
            "{}",
            c.seen
        );
        assert!(c.why.contains("CUDA 13.0"), "{}", c.why);
        // A driver older than any CUDA 11: fails.
        assert_eq!(
            verdict(Some(&image("12.4")), &host("440.33.01", None)).status,
            Status::Fail
        );
    }

    #[test]
    fn the_probe_asks_for_every_gpu_with_nvidia_smi_and_nothing_else() {
        let body = probe_body("c", "sha256:1", true);
        assert_eq!(body.entrypoint.clone().unwrap_or_default(), ["sh"]);
        assert_eq!(body.cmd.clone().unwrap_or_default()[1], SCRIPT);
        let host = body.host_config.clone().unwrap_or_default();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_drop.unwrap_or_default(), ["ALL"]);
        assert_eq!(host.readonly_rootfs, Some(false));
        let request = &host.device_requests.unwrap_or_default()[0];
        assert_eq!(request.count, Some(-1));
        assert_eq!(
            request.capabilities,
            Some(vec![vec!["gpu".to_string(), "utility".to_string()]])
        );
        assert_eq!(body.labels.unwrap_or_default()["argus.role"], "probe");
        let host = probe_body("c", "sha256:1", false)
            .host_config
            .unwrap_or_default();
        assert_eq!(host.device_requests, None);
        assert_eq!(host.readonly_rootfs, Some(true));
    }
}
