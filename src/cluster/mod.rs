//! The cluster: containers running Ray, converged to a profile through the Docker API.
//!
//! The only module that talks to Docker (bollard). `plan` is pure (profile -> desired
//! containers); `reconcile` observes, diffs and acts; `ready` waits for Ray; `image`
//! builds or pulls the runtime image; `status` reports what is running; `health` watches
//! a running cluster for lost nodes.

pub mod access;
pub mod auth;
pub mod collect;
pub mod docker;
pub mod doctor;
pub mod health;
pub mod held;
pub mod hosts;
pub mod image;
pub mod local_route;
pub mod node;
pub mod observe;
pub mod plan;
pub mod ready;
pub mod reconcile;
pub mod route;
pub mod status;
pub mod storage_check;
pub mod tunnel;

use crate::exit::{Classify, Exit};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "worker group {group} asks for {gpus} real GPU(s) a worker ({mode}) but names no device_ids: on Docker hosts argus must be told which GPUs each worker gets"
    )]
    NoDeviceIds {
        group: String,
        gpus: u32,
        mode: String,
        workers: u32,
    },
    #[error(transparent)]
    Ports(Box<plan::PortClash>),
    #[error("cannot reach the Docker Engine at {endpoint}")]
    DockerUnreachable {
        endpoint: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("Docker refused to {action}")]
    Docker {
        action: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("image {image} is not present and could not be pulled")]
    ImageUnavailable {
        image: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("a container named {name} exists but does not belong to cluster {cluster}")]
    NameTaken { name: String, cluster: String },
    #[error("cannot prepare the shared storage at {path}")]
    SharedStorage {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error("Ray was not ready after {seconds}s: {detail}")]
    NotReady { seconds: u64, detail: String },
    #[error("{}", unreachable_hosts(.0))]
    HostsUnreachable(Vec<hosts::Unreachable>),
    #[error("{0}")]
    BadEndpoint(String),
    #[error(
        "image {image} has Ray {version}, which has no token auth (ray.auth: token): the cluster would start open to anyone"
    )]
    NoTokenAuth { image: String, version: String },
    #[error("image {image} lacks what argus runs in it: {}", doctor::image_tools::list(.missing))]
    ImageLacks {
        image: String,
        missing: Vec<doctor::image_tools::Missing>,
    },
    #[error("refusing to dial {endpoint}: {detail}")]
    SshHostKey { endpoint: String, detail: String },
    #[error("cannot learn which interface host {host} reaches the head through: {detail}")]
    RouteProbe { host: String, detail: String },
    #[error("{}", doctor::findings_text(.0))]
    Preflight(Vec<doctor::Finding>),
    #[error("host {host} does not see the shared storage the head's host sees: {detail}")]
    SharedStorageDiffers { host: String, detail: String },
    #[error("container {name} stopped while starting Ray (exit code {exit_code}):\n{logs}")]
    NodeExited {
        name: String,
        exit_code: i64,
        logs: String,
    },
    #[error(transparent)]
    Tunnel(#[from] tunnel::TunnelError),
    #[error(transparent)]
    Distribute(#[from] image::DistributeError),
    #[error(
        "cluster {cluster} has ray.auth: token, but {var} is not set and there is no token file {path}"
    )]
    TokenNotFound {
        cluster: String,
        var: String,
        path: String,
    },
    #[error("refusing the Ray auth token file {path}: {problem}")]
    TokenFile { path: String, problem: String },
    #[error("cannot read or write the Ray auth token file {path}")]
    TokenIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn unreachable_hosts(hosts: &[hosts::Unreachable]) -> String {
    let mut text = match hosts {
        [one] => format!("cannot reach the Docker Engine of host {}", one.host),
        _ => format!("cannot reach the Docker Engines of {} hosts", hosts.len()),
    };
    for host in hosts {
        text.push_str(&format!("\n  {host}"));
    }
    text
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::NoDeviceIds { .. } | Error::Ports(_) => Exit::Usage,
            Error::DockerUnreachable { .. }
            | Error::ImageUnavailable { .. }
            | Error::HostsUnreachable(_)
            | Error::SshHostKey { .. } => Exit::Unreachable,
            Error::BadEndpoint(_)
            | Error::NoTokenAuth { .. }
            | Error::ImageLacks { .. }
            | Error::TokenNotFound { .. }
            | Error::TokenFile { .. } => Exit::Usage,
            Error::TokenIo { .. } => Exit::Failed,
            Error::Tunnel(e) => e.exit(),
            Error::Distribute(e) => e.exit(),
            Error::Lock(e) => e.exit(),
            Error::Docker { .. }
            | Error::NameTaken { .. }
            | Error::SharedStorage { .. }
            | Error::SharedStorageDiffers { .. }
            | Error::Preflight(_)
            | Error::RouteProbe { .. }
            | Error::NotReady { .. }
            | Error::NodeExited { .. } => Exit::Failed,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            Error::NoDeviceIds { gpus, workers, .. } => Some(format!(
                "device_ids: a list of {workers} lists of {gpus} GPU ids (e.g. [[0, 1], [2, 3]]); a profile without them is for `argus slurm submit` or `argus export kuberay`, where Slurm or the device plugin chooses"
            )),
            Error::Ports(clash) => Some(match &**clash {
                plan::PortClash::Taken { key, holder, .. } => format!("give ray.{key} a port cluster {holder} does not use, or take that cluster down first (`argus down` with its profile)"),
                plan::PortClash::NoBlocks { .. } => "fewer workers on that host, or take a cluster down there first: each Ray node of a host-mode cluster takes a block of 1000 ports from 20000".into(),
            }),
            Error::DockerUnreachable { .. } => Some("is the Docker daemon running? The endpoint comes from the profile's docker.host, else DOCKER_HOST, else /var/run/docker.sock".into()),
            Error::ImageUnavailable { image, .. } => Some(format!("build it here without a registry: argus image build{}", image::build_flags_for(image))),
            Error::NameTaken { name, .. } => Some(format!("remove or rename that container (docker rm -f {name}), or give the profile another name")),
            Error::SshHostKey { .. } => Some("argus never trusts a host key it is shown for the first time: check the host's key fingerprint and add it to known_hosts (connect once with ssh, or ssh-keyscan HOST >> ~/.ssh/known_hosts after checking it)".into()),
            Error::HostsUnreachable(_) => Some("each host's Docker Engine must answer at its endpoint (hosts[].docker): is it running, and can this machine reach it (ssh keys and known hosts, TLS certificates, firewall)? Nothing was changed on any host".into()),
            Error::RouteProbe { .. } => Some("argus runs a short-lived container of the cluster's image with host networking on each host to find the interface NCCL and Gloo must use; see that it runs there, or set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in the profile's env (then argus does not probe)".into()),
            Error::SharedStorageDiffers { .. } => Some("mount the same storage (e.g. the NFS export) at shared.host_path on every host, or use shared.nfs so that Docker mounts it everywhere".into()),
            Error::Preflight(findings) => Some(doctor::findings_fix(findings)),
            Error::ImageLacks { image, .. } => Some(format!(
                "{}; nothing was created (what argus needs from an image: README, \"What argus needs from an image\")",
                doctor::image_tools::fix(image)
            )),
            Error::NotReady { .. } => Some("`argus status` shows the containers and nodes; `docker logs <container>` shows Ray's output".into()),
            Error::Lock(e) => e.hint(),
            Error::Tunnel(e) => e.hint(),
            Error::Distribute(e) => e.hint(),
            Error::TokenNotFound { var, .. } => Some(format!("run `argus up` on the machine that made the cluster (it keeps the token there), or export {var}=<the cluster's token>")),
            Error::TokenFile { path, .. } => Some(format!("the token file must be a regular file of yours that only you can read: chmod 600 {path}, or remove it and run `argus up` to make a new one (then `argus up` recreates the containers with it)")),
            _ => None,
        }
    }
}

// The engine of one host as the Slurm back end drives it, without bollard.
pub mod engine;
pub use engine::NodeEngine;
