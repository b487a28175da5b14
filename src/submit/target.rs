//! Where jobs go and how: the cluster's Jobs API and the shared storage seen from both
//! sides, from a profile or from the old submitter's RayConfig.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::ray_config::RayConfig;
use crate::config::{ContainerLayout, Layout, LoadedProfile};
use crate::ray::RayClient;
use crate::records::Records;
use crate::secrets::redact_json;

/// The variable that keeps `huggingface_hub` (and transformers, datasets) off the network.
pub const HUB_OFFLINE: &str = "HF_HUB_OFFLINE";

#[derive(Debug, Clone)]
pub struct Target {
    pub ray: RayClient,
    pub cluster: String,
    /// The shared storage inside the containers (what the job is told).
    pub mount: ContainerLayout,
    /// The same storage on this host (records, snapshot and model resolution).
    pub host_shared: Option<Layout>,
    pub user_code_path: Option<String>,
    pub env_vars: BTreeMap<String, String>,
    pub entrypoint_num_cpus: Option<f64>,
    pub entrypoint_num_gpus: Option<f64>,
    pub entrypoint_resources: BTreeMap<String, f64>,
    /// `runtime_env.worker_process_setup_hook` (a JobSpec's own wins).
    pub setup_hook: Option<String>,
    /// The configuration as used, secrets redacted: (file name, YAML).
    pub config_record: (String, String),
    /// The nodes' own environment leaves `HF_HUB_OFFLINE` to argus (a profile's `env`
    /// that sets it wins over what a job would be given; an old RayConfig's cluster is
    /// not known, so nothing is added there).
    pub hub_offline_ok: bool,
    /// The verl release the cluster's image is for, when it says
    /// ([`super::verl_match`]): a job's code of another release is refused.
    pub image_verl: Option<super::verl_match::ImageVerl>,
}

fn default_resources(given: Option<&BTreeMap<String, f64>>) -> BTreeMap<String, f64> {
    given
        .cloned()
        .unwrap_or_else(|| BTreeMap::from([("worker_node".to_string(), 1.0)]))
}

fn hook(env: &crate::config::profile::RuntimeEnvSection) -> Option<String> {
    env.worker_process_setup_hook
        .as_ref()
        .map(ToString::to_string)
}

pub(crate) fn redacted_yaml<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_value(value).unwrap_or_default();
    crate::config::yaml::to_string(&redact_json(json))
}

impl Target {
    pub fn from_profile(loaded: &LoadedProfile, ray: RayClient) -> Self {
        let p = &loaded.profile;
        let submit = &p.submit;
        Target {
            ray,
            cluster: p.name.clone(),
            mount: p.container_layout(),
            host_shared: loaded.host_layout().ok(),
            user_code_path: submit.user_code_path.clone(),
            env_vars: submit.runtime_env.env_vars.clone(),
            entrypoint_num_cpus: submit.entrypoint_num_cpus,
            entrypoint_num_gpus: submit.entrypoint_num_gpus,
            entrypoint_resources: default_resources(submit.entrypoint_resources.as_ref()),
            setup_hook: hook(&submit.runtime_env),
            config_record: ("profile.yaml".into(), redacted_yaml(p)),
            hub_offline_ok: !p.env.contains_key(HUB_OFFLINE)
                && !p.head.env.contains_key(HUB_OFFLINE)
                && p.workers.iter().all(|w| !w.env.contains_key(HUB_OFFLINE)),
            image_verl: super::verl_match::ImageVerl::from_tag(&p.image),
        }
    }

    /// [`Target::from_profile`], then [`Target::read_image_verl`].
    pub async fn of_profile(loaded: &LoadedProfile, ray: RayClient) -> Self {
        Self::from_profile(loaded, ray)
            .read_image_verl(loaded)
            .await
    }

    /// [`Target::image_verl`] from the image's own label when it has one (an image built
    /// with `--lock` under a tag of the user's), else what its tag says.
    pub async fn read_image_verl(mut self, loaded: &LoadedProfile) -> Self {
        let image = &loaded.profile.image;
        if let Some(version) =
            crate::cluster::image::verl_version_label(loaded.profile.docker.host.as_deref(), image)
                .await
        {
            self.image_verl = Some(super::verl_match::ImageVerl {
                image: image.clone(),
                version,
            });
        }
        self
    }

    pub fn from_ray_config(config: &RayConfig, token: Option<String>) -> Self {
        Target {
            ray: RayClient::new(&config.address, token),
            cluster: config.address.clone(),
            // The old submitter ran where the jobs' shared root is mounted at the same path.
            mount: ContainerLayout::in_containers(&config.shared_root),
            host_shared: Some(Layout::new(&config.shared_root)),
            user_code_path: config.user_code_path.clone(),
            env_vars: config.runtime_env.env_vars.clone(),
            entrypoint_num_cpus: config.entrypoint_num_cpus,
            entrypoint_num_gpus: config.entrypoint_num_gpus,
            entrypoint_resources: default_resources(config.entrypoint_resources.as_ref()),
            setup_hook: hook(&config.runtime_env),
            config_record: ("ray_config.yaml".into(), redacted_yaml(config)),
            hub_offline_ok: false,
            image_verl: None,
        }
    }

    pub fn records(&self) -> Option<Records> {
        self.host_shared
            .as_ref()
            .map(|host| Records::new(host.jobs()))
    }

    /// A path inside the containers, as seen from this host (when it is on the shared storage).
    pub fn host_path_of(&self, container_path: &str) -> Option<PathBuf> {
        // Component-wise and lexically clean: `/mnt/shared2` is not under `/mnt/shared`.
        let path = crate::ids::ContainerPath::parse_as("path", container_path).ok()?;
        let shared = path.under(&self.mount.mount())?;
        Some(shared.on_host(self.host_shared.as_ref()?.root()))
    }
}
