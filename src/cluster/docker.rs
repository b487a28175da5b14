//! Connecting to the Docker Engine, and turning a planned container into Docker's
//! create-container request.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, EndpointSettings, HostConfig, Mount,
    MountType, NetworkingConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt;

use super::Error;
use super::plan::{ContainerPlan, GpuAttach, NetworkAttach, SharedMount};
use crate::config::docker::{DockerEndpoint, EndpointKind};
use crate::config::profile::{ClusterHost, TlsPaths};

pub const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

/// The endpoint argus talks to: the profile's, else `DOCKER_HOST`, else the local socket.
pub fn endpoint(profile_host: Option<&str>) -> String {
    profile_host
        .map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string())
}

/// Connects to this machine's engine (the profile's `docker.host`, else `DOCKER_HOST`,
/// else the local socket) and agrees on an API version with it.
pub async fn connect(profile_host: Option<&str>) -> Result<Docker, Error> {
    let endpoint = endpoint(profile_host);
    let parsed = DockerEndpoint::parse(&endpoint).map_err(Error::BadEndpoint)?;
    let host = ClusterHost {
        name: crate::config::profile::LOCAL_HOST.to_string(),
        tls: TlsPaths::resolve(&parsed, None),
        endpoint: parsed,
        address: None,
    };
    connect_host(&host).await
}

/// Connects to one host's engine (unix, tcp with or without TLS, ssh) and agrees on an
/// API version with it (old engines speak 1.41).
pub async fn connect_host(host: &ClusterHost) -> Result<Docker, Error> {
    let endpoint = host.endpoint.as_str();
    let unreachable = |source| Error::DockerUnreachable {
        endpoint: endpoint.to_string(),
        source,
    };
    const TIMEOUT_S: u64 = 600;
    if let EndpointKind::Ssh { user, host: name } = host.endpoint.kind() {
        ssh_host_key_known(endpoint, user.as_deref(), name).await?;
    }
    if let Some(tls) = &host.tls {
        for file in [&tls.ca, &tls.cert, &tls.key] {
            if !file.is_file() {
                return Err(Error::BadEndpoint(format!(
                    "{endpoint}: TLS file {} does not exist (from tls: in the profile, else DOCKER_CERT_PATH or ~/.docker)",
                    file.display()
                )));
            }
        }
    }
    // Docker's own default ports: tcp://HOST means HOST:2375, or HOST:2376 with TLS.
    let with_port;
    let endpoint = match host.endpoint.kind() {
        EndpointKind::Tcp { port: None, .. } => {
            let port = if host.tls.is_some() { 2376 } else { 2375 };
            with_port = format!("{}:{port}", endpoint.trim_end_matches('/'));
            with_port.as_str()
        }
        _ => endpoint,
    };
    let docker = match (host.endpoint.kind(), &host.tls) {
        (EndpointKind::Ssh { .. }, _) => {
            Docker::connect_with_ssh(endpoint, TIMEOUT_S, bollard::API_DEFAULT_VERSION, None)
        }
        (EndpointKind::Tcp { .. }, Some(tls)) => Docker::connect_with_ssl(
            endpoint,
            &tls.key,
            &tls.cert,
            &tls.ca,
            TIMEOUT_S,
            bollard::API_DEFAULT_VERSION,
        ),
        _ => Docker::connect_with_host(endpoint),
    }
    .map_err(unreachable)?
    .with_timeout(Duration::from_secs(TIMEOUT_S));
    docker.negotiate_version().await.map_err(unreachable)
}

/// Refuses an `ssh://` host whose key this machine does not know yet. bollard's ssh
/// transport runs `ssh -o StrictHostKeyChecking=accept-new`, which would trust (and record)
/// whatever key an unknown host shows: argus dials only hosts already in a known-hosts file
/// that `ssh` itself would read for them (`ssh -G` says which files and which name).
async fn ssh_host_key_known(endpoint: &str, user: Option<&str>, host: &str) -> Result<(), Error> {
    let refused = |detail: String| Error::SshHostKey {
        endpoint: endpoint.to_string(),
        detail,
    };
    let destination = match user {
        Some(user) => format!("{user}@{host}"),
        None => host.to_string(),
    };
    let config = tokio::process::Command::new("ssh")
        .arg("-G")
        .arg("--")
        .arg(&destination)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| refused(format!("cannot run ssh -G: {e}")))?;
    if !config.status.success() {
        return Err(refused(format!(
            "ssh -G {destination} failed: {}",
            String::from_utf8_lossy(&config.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&config.stdout);
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .map(str::to_string)
    };
    let name = value("hostkeyalias")
        .or_else(|| value("hostname"))
        .unwrap_or_else(|| host.to_string());
    let key = match value("port").as_deref() {
        None | Some("22") => name,
        Some(port) => format!("[{name}]:{port}"),
    };
    let home = dirs::home_dir().unwrap_or_default();
    let files: Vec<std::path::PathBuf> = ["userknownhostsfile", "globalknownhostsfile"]
        .iter()
        .filter_map(|k| value(k))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .map(|f| match f.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => std::path::PathBuf::from(f),
        })
        .filter(|f| f.is_file())
        .collect();
    for file in &files {
        let found = tokio::process::Command::new("ssh-keygen")
            .arg("-F")
            .arg(&key)
            .arg("-f")
            .arg(file)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| refused(format!("cannot run ssh-keygen -F: {e}")))?;
        if found.status.success() && !found.stdout.is_empty() {
            return Ok(());
        }
    }
    Err(refused(format!(
        "the host key of {key} is in none of the known-hosts files ssh reads for it ({})",
        if files.is_empty() {
            "none exists".to_string()
        } else {
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    )))
}

/// Every container carrying `label` (`key` or `key=value`), running or not.
pub async fn containers_labelled(
    docker: &Docker,
    label: &str,
) -> Result<Vec<bollard::models::ContainerSummary>, Error> {
    let filters = HashMap::from([("label", vec![label.to_string()])]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .map_err(docker_err("list containers"))
}

/// True when bollard's error is Docker saying 404.
pub fn is_not_found(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub fn is_conflict(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

pub fn docker_err(action: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> Error {
    let action = action.into();
    move |source| Error::Docker { action, source }
}

/// The head's CPU weight (a container's default is 1024; on cgroup v2 the runtime maps it to
/// a `cpu.weight` some 3 to 5 times the default's). Every node waits for the head's GCS and
/// dashboard, and where the head shares cores with workers (one Docker host, the first node
/// of a Slurm allocation) they all start at once: under that contention the head goes
/// first. A weight only counts when CPUs are short, so a worker busy training loses nothing
/// while the head is idle. Decided by the role, not part of the spec hash: a head made
/// without it is not recreated (measured: `bench/slurm`, 19.9 s to 19.2 s).
pub const HEAD_CPU_SHARES: i64 = 8192;

/// True when the engine is Docker's own (its `/version` names an `Engine` component), not
/// another one behind Docker's API (Podman names its own "Podman Engine").
pub async fn is_dockers_engine(docker: &Docker) -> Result<bool, bollard::errors::Error> {
    let version = docker.version().await?;
    Ok(version
        .components
        .iter()
        .flatten()
        .any(|c| c.name == "Engine"))
}

/// The head's CPU weight on this engine: only on Docker's own engine where it says it
/// applies CPU shares (Podman without a delegated `cpu` controller refuses a container that
/// asks for one, and a weight is not worth a head that does not start).
pub async fn head_cpu_shares(docker: &Docker) -> Option<i64> {
    let docker_engine = is_dockers_engine(docker).await.unwrap_or(false);
    let shares = docker_engine
        && docker
            .info()
            .await
            .is_ok_and(|info| info.cpu_shares == Some(true));
    shares.then_some(HEAD_CPU_SHARES)
}

/// The create-container request for a planned container. `network_id` addresses the
/// cluster's network by id: a name can be ambiguous (Docker allows two networks of one name).
/// `cpu_shares`: the container's CPU weight, when it has one.
pub fn create_body(
    c: &ContainerPlan,
    cluster: &str,
    network_id: Option<&str>,
    cpu_shares: Option<i64>,
) -> ContainerCreateBody {
    let mut host = HostConfig {
        shm_size: c.shm_size.map(|b| b as i64),
        memory: c.memory.map(|b| b as i64),
        nano_cpus: c.cpus.map(|cpus| (cpus * 1e9) as i64),
        cpu_shares,
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
            maximum_retry_count: None,
        }),
        init: Some(true),
        ..Default::default()
    };
    host.mounts = Some(vec![mount_of(&c.mount)]);
    match &c.gpu {
        GpuAttach::None | GpuAttach::Simulated { .. } => {}
        GpuAttach::Nvidia { device_ids } => {
            host.device_requests = Some(vec![DeviceRequest {
                driver: Some("nvidia".to_string()),
                device_ids: Some(device_ids.iter().map(u32::to_string).collect()),
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                ..Default::default()
            }]);
        }
        GpuAttach::Amd { device_ids } => {
            let mut devices = vec![device("/dev/kfd")];
            devices.extend(
                device_ids
                    .iter()
                    .map(|id| device(&format!("/dev/dri/renderD{}", 128 + id))),
            );
            host.devices = Some(devices);
            host.group_add = Some(vec!["video".to_string(), "render".to_string()]);
        }
    }
    let mut exposed = Vec::new();
    let mut bindings = HashMap::new();
    for (container_port, host_ip, host_port) in &c.ports {
        let key = format!("{container_port}/tcp");
        exposed.push(key.clone());
        bindings.insert(
            key,
            Some(vec![PortBinding {
                host_ip: Some(host_ip.clone()),
                host_port: Some(host_port.to_string()),
            }]),
        );
    }
    if !bindings.is_empty() {
        host.port_bindings = Some(bindings);
    }
    let networking_config = match &c.network {
        NetworkAttach::Bridge { network } => {
            let network = network_id.unwrap_or(network).to_string();
            host.network_mode = Some(network.clone());
            Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network,
                    EndpointSettings {
                        aliases: Some(vec![c.name.clone()]),
                        ..Default::default()
                    },
                )])),
            })
        }
        NetworkAttach::Host => {
            host.network_mode = Some("host".to_string());
            None
        }
    };
    ContainerCreateBody {
        image: Some(c.image_id.clone()),
        hostname: matches!(c.network, NetworkAttach::Bridge { .. }).then(|| c.name.clone()),
        cmd: Some(c.command.clone()),
        env: Some(c.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(c.labels(cluster).into_iter().collect()),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        host_config: Some(host),
        networking_config,
        ..Default::default()
    }
}

/// The shared storage as Docker mounts it.
pub fn mount_of(mount: &SharedMount) -> Mount {
    match mount {
        SharedMount::Bind { source, target } => Mount {
            typ: Some(MountType::BIND),
            source: Some(source.display().to_string()),
            target: Some(target.clone()),
            ..Default::default()
        },
        SharedMount::Volume { name, target } => Mount {
            typ: Some(MountType::VOLUME),
            source: Some(name.clone()),
            target: Some(target.clone()),
            ..Default::default()
        },
    }
}

fn device(path: &str) -> DeviceMapping {
    DeviceMapping {
        path_on_host: Some(path.to_string()),
        path_in_container: Some(path.to_string()),
        cgroup_permissions: Some("rwm".to_string()),
    }
}

/// What `cmd` prints (stdout and stderr) when run in `container` through the exec API;
/// None when it cannot be run.
pub async fn exec_output(docker: &Docker, container: &str, cmd: &[&str]) -> Option<String> {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .ok()?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.ok()?
    {
        while let Some(Ok(chunk)) = output.next().await {
            text.push_str(&chunk.to_string());
        }
    }
    Some(text)
}

/// The last `lines` lines a container printed (stdout and stderr), for error messages.
pub async fn tail_logs(docker: &Docker, name: &str, lines: usize) -> String {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .tail(&lines.to_string())
        .build();
    let mut stream = docker.logs(name, Some(options));
    let mut text = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&chunk.to_string());
    }
    if text.trim().is_empty() {
        return "    (no output)".to_string();
    }
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Variables every probe container gets over the image's own: no library preloaded into
/// its processes or searched before the system's (`LD_PRELOAD`, `LD_LIBRARY_PATH`), no
/// start-up file read by a shell that is bash (`BASH_ENV`) or POSIX sh (`ENV`).
pub const PROBE_ENV: [&str; 4] = ["LD_PRELOAD=", "LD_LIBRARY_PATH=", "BASH_ENV=", "ENV="];

/// A probe container's create request made as little as it can be: `entrypoint` set
/// explicitly (an image's ENTRYPOINT never wraps the probe's command), [`PROBE_ENV`] before
/// the body's own variables, every capability dropped but `caps`, `no-new-privileges` (a
/// setuid file in the image gains nothing), a read-only root file system. The body says
/// the rest: the command, the namespaces, the mounts, the user.
pub fn confined(
    mut body: ContainerCreateBody,
    entrypoint: &[&str],
    caps: &[&str],
) -> ContainerCreateBody {
    body.entrypoint = Some(entrypoint.iter().map(|s| s.to_string()).collect());
    let mut env: Vec<String> = PROBE_ENV.iter().map(|s| s.to_string()).collect();
    env.extend(body.env.take().unwrap_or_default());
    body.env = Some(env);
    let host = body.host_config.take().unwrap_or_default();
    body.host_config = Some(HostConfig {
        cap_drop: Some(vec!["ALL".to_string()]),
        cap_add: Some(caps.iter().map(|c| c.to_string()).collect()),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        readonly_rootfs: Some(true),
        ..host
    });
    body
}

/// [`run_to_end`] bounded in time: past `limit` the container is removed all the same and
/// the answer is `Ok(None)`. Its removal is bounded too (by `limit` again).
pub async fn run_to_end_within(
    docker: &Docker,
    body: ContainerCreateBody,
    limit: Duration,
) -> Result<Option<(i64, String)>, Error> {
    use bollard::query_parameters::{RemoveContainerOptionsBuilder, WaitContainerOptions};
    let created = tokio::time::timeout(
        limit,
        docker.create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        ),
    )
    .await;
    let id = match created {
        Err(_) => return Ok(None),
        Ok(created) => {
            created
                .map_err(docker_err("create a short-lived container"))?
                .id
        }
    };
    let outcome = tokio::time::timeout(limit, async {
        docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(docker_err(format!("start container {id}")))?;
        let mut waits = docker.wait_container(&id, None::<WaitContainerOptions>);
        let mut code = -1;
        while let Some(item) = waits.next().await {
            match item {
                Ok(response) => code = response.status_code,
                Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => code = c,
                Err(e) => return Err(docker_err(format!("wait for container {id}"))(e)),
            }
        }
        let options = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
        let mut logs = docker.logs(&id, Some(options));
        let mut text = String::new();
        while let Some(Ok(chunk)) = logs.next().await {
            text.push_str(&chunk.to_string());
        }
        Ok((code, text))
    })
    .await;
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = tokio::time::timeout(limit, docker.remove_container(&id, Some(options))).await;
    outcome.map_or(Ok(None), |r| r.map(Some))
}

/// Runs a short-lived container to its end: its exit code and what it printed. The
/// container is created unnamed (Docker names it), so it can never take or remove
/// somebody else's container, and it is removed by its id afterwards, also when waiting
/// for it fails.
pub async fn run_to_end(
    docker: &Docker,
    body: ContainerCreateBody,
) -> Result<(i64, String), Error> {
    // Unbounded: a deadline this far away is never reached.
    let outcome = run_to_end_within(docker, body, Duration::MAX).await?;
    Ok(outcome.unwrap_or((-1, String::new())))
}
