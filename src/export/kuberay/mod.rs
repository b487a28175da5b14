//! KubeRay objects from a profile and a resolved job. Pure: values in, objects (and YAML)
//! out, with what could not be carried (refusals) or is carried differently (warnings).
//!
//! With a job: a `RayJob` whose `rayClusterSpec` is the profile's cluster and whose
//! entrypoint, runtime env, resources and metadata are the submission `argus submit` sends
//! (the same strings: the operator sends them to the Jobs API itself, [`SUBMISSION_MODE`]).
//! Without one: a `RayCluster` for one long-lived cluster. The node resources, the
//! environment and the shared-storage mount come from the Docker plan of the same profile
//! ([`crate::cluster::plan`]), so the pods are the containers `argus up` would create.
//! KubeRay v1.7.0's API; `--kuberay-version` 1.5 and 1.6 leave out what they lack.
//!
//! `types` holds KubeRay's objects, `names` the Kubernetes name rules, `pods` the head and
//! worker groups from the Docker plan, `job` the RayJob's job fields from the submission;
//! this file puts them together and checks what the flags and the profile ask for.

mod job;
mod names;
mod pods;
mod types;

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::ids::RayVersion;
pub use names::dns1035;
pub use types::*;

use super::{Finding, Findings, Severity};
use crate::cluster::plan::{self, PlanInputs};
use crate::config::LoadedProfile;
use crate::config::jobspec::JobSpec;
use crate::config::profile::{AuthMode, NetworkMode};
use crate::config::yaml::Source;
use crate::submit::Prepared;
use crate::yaml_path;
use names::{dns1123_label, dns1123_subdomain, label_value, label_value_ok};
use pods::GroupContext;

/// The KubeRay operator the objects are for.
/// The KubeRay operator the objects are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V1_5,
    V1_6,
    V1_7,
}

impl Version {
    pub const NAMES: [&'static str; 3] = ["1.5", "1.6", "1.7"];

    /// `1.7`, `v1.7`, `1.7.0`.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let (major, minor) = (parts.next()?, parts.next()?);
        if parts.next().is_some_and(|p| p.parse::<u32>().is_err()) || parts.next().is_some() {
            return None;
        }
        match (major, minor) {
            ("1", "5") => Some(Version::V1_5),
            ("1", "6") => Some(Version::V1_6),
            ("1", "7") => Some(Version::V1_7),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_5 => "1.5",
            Version::V1_6 => "1.6",
            Version::V1_7 => "1.7",
        }
    }
}

/// What the flags say.
/// What the flags say.
#[derive(Debug, Clone)]
pub struct Options {
    /// The image the cluster pulls (the profile's when None).
    pub image: Option<String>,
    /// A PersistentVolumeClaim for the shared storage, instead of the profile's.
    pub pvc: Option<String>,
    pub namespace: Option<String>,
    /// A Secret whose key `HF_TOKEN` becomes every container's `HF_TOKEN`.
    pub hf_token_secret: Option<String>,
    /// A Secret whose key `auth_token` holds the Ray token (`ray.auth: token`).
    pub auth_secret: Option<String>,
    /// A Kueue LocalQueue.
    pub queue: Option<String>,
    pub version: Version,
    pub backoff_limit: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: None,
            pvc: None,
            namespace: None,
            hf_token_secret: None,
            auth_secret: None,
            queue: None,
            version: Version::V1_7,
            backoff_limit: 0,
        }
    }
}

/// A JobSpec as written (for locations) and as resolved by `submit::prepare`.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub source: &'a Source,
    pub spec: &'a JobSpec,
    pub prepared: &'a Prepared,
}

/// The object (None when anything was refused) and every finding.
#[derive(Debug, Clone)]
pub struct Built {
    pub object: Option<Object>,
    pub findings: Vec<Finding>,
}

/// The comment line at the top of the YAML.
pub fn header(profile: &LoadedProfile, jobspec: Option<&Path>, options: &Options) -> String {
    let job = jobspec
        .and_then(Path::file_name)
        .map(|n| format!(", JobSpec {}", n.to_string_lossy()))
        .unwrap_or_default();
    format!(
        "# {} export kuberay (KubeRay {}): profile {}{job}\n",
        crate::http::USER_AGENT,
        options.version.as_str(),
        profile.profile.name
    )
}

/// Builds the RayJob (with a job) or RayCluster of a profile.
pub fn build(loaded: &LoadedProfile, job: Option<&Job>, options: &Options) -> Built {
    let mut f = Findings::default();
    let p = &loaded.profile;
    let src = &loaded.source;
    check_flags(options, &mut f);

    let image = image(loaded, options, &mut f);
    let ray_version = RayVersion::of_image(&image).or_else(|| RayVersion::of_image(&p.image));
    if ray_version.is_none() {
        f.warn(
            src,
            &yaml_path!["image"],
            format!("the Ray version of {image} is not in its tag: rayVersion is left out"),
        );
    }
    let auth_options = auth(loaded, options, ray_version, &mut f);
    let shared = pods::shared_volume(loaded, options, &mut f);
    docker_only(loaded, options, job.is_some(), &mut f);

    let docker_plan = plan::plan(loaded, &PlanInputs::default());
    let Some(head_plan) = docker_plan.containers.first() else {
        f.push(Finding::general(
            Severity::Refusal,
            "head",
            "the profile plans no head",
        ));
        return Built {
            object: None,
            findings: f.into_vec(),
        };
    };

    let name = match job {
        Some(job) => dns1035(&job.prepared.submission_id, MAX_RAYJOB_NAME, "job-"),
        None => dns1035(&p.name, MAX_RAYCLUSTER_NAME, "ray-"),
    };
    let pod_labels = labels(loaded, job);
    let mount = p.container_layout();
    let group_context = GroupContext {
        image: &image,
        hf_secret: options.hf_token_secret.as_deref(),
        shared: shared.as_ref(),
        mount: &mount.mount(),
        labels: &pod_labels,
    };
    let head = pods::head_group(loaded, head_plan, &group_context, &mut f);
    let pod_prefix = match job {
        Some(_) => format!("{name}-abcde"),
        None => name.clone(),
    };
    let workers = pods::worker_groups(
        loaded,
        &docker_plan.containers,
        &group_context,
        &pod_prefix,
        &mut f,
    );
    let cluster_spec = RayClusterSpec {
        ray_version: ray_version.map(|v| v.to_string()),
        auth_options,
        head_group_spec: head,
        worker_group_specs: workers,
    };

    let mut object_labels = pod_labels.clone();
    if let Some(queue) = &options.queue {
        object_labels.insert("kueue.x-k8s.io/queue-name".into(), queue.clone());
    }
    let metadata = ObjectMeta {
        name: Some(name),
        namespace: options.namespace.clone(),
        labels: Some(object_labels),
        ..Default::default()
    };
    let object = match job {
        Some(job) => {
            let spec = job::job_spec(
                loaded,
                job,
                options,
                cluster_spec,
                &docker_plan.containers,
                &mut f,
            );
            Object::RayJob(Box::new(RayJob {
                api_version: API_VERSION.into(),
                kind: "RayJob".into(),
                metadata,
                spec,
            }))
        }
        None => Object::RayCluster(Box::new(RayCluster {
            api_version: API_VERSION.into(),
            kind: "RayCluster".into(),
            metadata,
            spec: cluster_spec,
        })),
    };
    Built {
        object: (!f.has_refusals()).then_some(object),
        findings: f.into_vec(),
    }
}

/// A flag, its value, the rule it must meet, and what would be valid.
type FlagCheck<'a> = (
    &'static str,
    Option<&'a String>,
    fn(&str) -> bool,
    &'static str,
);

fn check_flags(options: &Options, f: &mut Findings) {
    let checks: [FlagCheck; 5] = [
        (
            "--pvc",
            options.pvc.as_ref(),
            dns1123_subdomain,
            "a PersistentVolumeClaim name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--namespace",
            options.namespace.as_ref(),
            dns1123_label,
            "a namespace: lower-case letters, digits and '-', at most 63",
        ),
        (
            "--hf-token-secret",
            options.hf_token_secret.as_ref(),
            dns1123_subdomain,
            "a Secret name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--auth-secret",
            options.auth_secret.as_ref(),
            dns1123_subdomain,
            "a Secret name: lower-case letters, digits, '-' and '.'",
        ),
        (
            "--queue",
            options.queue.as_ref(),
            label_value_ok,
            "a LocalQueue name usable as a label value",
        ),
    ];
    for (flag, value, ok, valid) in checks {
        if let Some(value) = value
            && !ok(value)
        {
            f.push(
                Finding::general(
                    Severity::Refusal,
                    flag,
                    format!("{value:?} is not a valid name"),
                )
                .hint(valid),
            );
        }
    }
    if let Some(image) = &options.image
        && (image.trim().is_empty() || image.contains(char::is_whitespace))
    {
        f.push(
            Finding::general(
                Severity::Refusal,
                "--image",
                format!("{image:?} is not an image reference"),
            )
            .hint("registry.example/argus/ray:2.51.1 or registry.example/argus/ray@sha256:..."),
        );
    }
    if i32::try_from(options.backoff_limit).is_err() {
        f.push(Finding::general(
            Severity::Refusal,
            "--backoff-limit",
            "too large",
        ));
    }
}

/// The image every container runs: `--image`, else the profile's unless only this host
/// has it (argus builds `argus/ray:<version>` locally, without a registry).
fn image(loaded: &LoadedProfile, options: &Options, f: &mut Findings) -> String {
    let p = &loaded.profile;
    if let Some(image) = &options.image {
        return image.clone();
    }
    if p.image.starts_with("argus/") || p.image.starts_with("localhost/") {
        f.refuse(&loaded.source, &yaml_path!["image"], format!("{} is built on this host by `argus image build`: no Kubernetes node can pull it", p.image))
            .set_hint("push it to a registry the cluster pulls from and pass --image REF (a digest, repo@sha256:..., as a run lock records it, pins it)");
    }
    p.image.clone()
}

/// `ray.auth: token` as `authOptions` with the token in a Secret of the user's.
fn auth(
    loaded: &LoadedProfile,
    options: &Options,
    ray: Option<RayVersion>,
    f: &mut Findings,
) -> Option<AuthOptions> {
    let src = &loaded.source;
    let at = yaml_path!["ray", "auth"];
    if loaded.profile.ray.auth == AuthMode::Disabled {
        if options.auth_secret.is_some() {
            f.push(Finding::general(
                Severity::Warning,
                "--auth-secret",
                "ignored: the profile's ray.auth is disabled",
            ));
        }
        return None;
    }
    if options.version < Version::V1_6 {
        f.refuse(src, &at, format!("KubeRay {} cannot take the token from a Secret (authOptions.secretName is KubeRay 1.6+)", options.version.as_str()))
            .set_hint("--kuberay-version 1.6 or later, or ray.auth: disabled");
    }
    match ray {
        Some(v) if v < RayVersion(2, 52, 0) => {
            f.refuse(src, &at, format!("token auth needs Ray 2.52 or later; the image has Ray {v}"))
                .set_hint("an image with Ray ≥ 2.52 (argus image build --ray-version 2.52.0, pushed, then --image), or ray.auth: disabled");
        }
        Some(_) => {}
        None => {
            f.refuse(
                src,
                &at,
                "token auth needs Ray 2.52 or later, and the image's Ray version is not in its tag",
            )
            .set_hint(
                "an image tag that carries the Ray version, e.g. registry.example/argus/ray:2.52.0",
            );
        }
    }
    if options.auth_secret.is_none() {
        f.refuse(src, &at, "token auth needs --auth-secret NAME: the Secret whose key auth_token holds the cluster's token")
            .set_hint(format!("kubectl create secret generic ray-token --from-literal={AUTH_TOKEN_KEY}=\"${}\"; --auth-secret ray-token", loaded.profile.ray.token_env));
    }
    Some(AuthOptions {
        mode: "token".into(),
        secret_name: options.auth_secret.clone(),
    })
}

/// Warnings for what a Kubernetes cluster does its own way.
fn docker_only(loaded: &LoadedProfile, options: &Options, job: bool, f: &mut Findings) {
    let p = &loaded.profile;
    let src = &loaded.source;
    if p.network.mode == NetworkMode::Host {
        f.warn(src, &yaml_path!["network", "mode"], "host networking is not carried: each pod has its own network, and KubeRay connects the workers to the head through its Service");
    }
    if p.docker.host.is_some() {
        f.warn(
            src,
            &yaml_path!["docker", "host"],
            "not carried: Kubernetes decides where the pods run",
        );
    }
    if !p.hosts.is_empty() {
        f.warn(
            src,
            &yaml_path!["hosts"],
            "not carried: Kubernetes decides where the pods run (head.host and the groups' hosts too)",
        );
    }
    f.warn(src, &yaml_path!["ray", "dashboard_bind"], format!(
        "not carried: the dashboard and Jobs API (which run code for anyone who reaches them) are served by the head's Service to the whole cluster network, not on {} of one host",
        p.ray.dashboard_bind
    ))
    .set_hint("reach them with `kubectl port-forward`; keep other pods away with a NetworkPolicy");
    for (key, port, default) in [
        ("gcs_port", p.ray.gcs_port, 6379),
        ("dashboard_port", p.ray.dashboard_port, 8265),
    ] {
        if port != default {
            f.warn(
                src,
                &yaml_path!["ray", key],
                format!("not carried: KubeRay serves it on {default} behind the head's Service"),
            );
        }
    }
    let retries = match job {
        true => format!(
            ", and a RayJob whose job fails is retried {} time(s) on a new cluster (--backoff-limit)",
            options.backoff_limit
        ),
        false => String::new(),
    };
    f.push(Finding::general(Severity::Warning, "restart policy", format!(
        "Docker restarts a dead Ray container in place (unless-stopped); KubeRay replaces a failed pod with a new Ray node{retries}"
    )));
    if !p.prepare.datasets.is_empty() || !p.prepare.models.is_empty() {
        f.warn(
            src,
            &yaml_path!["prepare"],
            "not carried: the datasets and models must already be on the volume the pods mount",
        )
        .set_hint("argus prepare, from a machine that mounts the shared storage");
    }
}

/// Labels on the object and on every pod: who made it, from what.
fn labels(loaded: &LoadedProfile, job: Option<&Job>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "argus".to_string(),
        ),
        (
            "argus/profile".to_string(),
            label_value(&loaded.profile.name),
        ),
    ]);
    if let Some(job) = job {
        let stem = job
            .source
            .origin
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        labels.insert("argus/jobspec".into(), label_value(&stem));
        labels.insert("argus/workload".into(), job.spec.workload.as_str().into());
        labels.insert(
            "argus/submission-id".into(),
            label_value(&job.prepared.submission_id),
        );
        if let Some(code_id) = &job.prepared.code_id {
            labels.insert("argus/code-id".into(), label_value(code_id));
        }
    }
    labels.retain(|_, v| !v.is_empty());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kuberay_versions() {
        assert_eq!(Version::parse("1.7"), Some(Version::V1_7));
        assert_eq!(Version::parse("v1.5.2"), Some(Version::V1_5));
        assert_eq!(Version::parse("1.4"), None);
        assert_eq!(Version::parse("1.7.x"), None);
        assert!(Version::V1_5 < Version::V1_6);
    }
}
