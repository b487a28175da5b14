//! The old submitter's standalone RayConfig YAML, accepted with `--config` in place of a
//! profile: `address`, `shared_root`, `entrypoint_num_cpus`, `entrypoint_resources`,
//! `runtime_env.env_vars`, `user_code_path`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile::{RuntimeEnvSection, check_entrypoint_resources, check_job_env};
use super::yaml::{self, ConfigError, Source};
use crate::secrets::Secrets;
use crate::yaml_path;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RayConfig {
    /// The Jobs API, e.g. http://127.0.0.1:8265.
    pub address: String,
    /// The shared storage; the same path on this host and in the containers.
    pub shared_root: String,
    pub entrypoint_num_cpus: Option<f64>,
    pub entrypoint_num_gpus: Option<f64>,
    pub entrypoint_resources: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    pub runtime_env: RuntimeEnvSection,
    pub user_code_path: Option<String>,
}

impl RayConfig {
    pub fn load(path: &Path) -> Result<(Self, Source), ConfigError> {
        let source = Source::read(path)?;
        let config: RayConfig = yaml::parse(&source)?;
        if !(config.address.starts_with("http://") || config.address.starts_with("https://")) {
            return Err(source
                .error_at(
                    &yaml_path!["address"],
                    format!("{:?} is not an http(s) URL", config.address),
                )
                .with_hint("http://127.0.0.1:8265"));
        }
        for (key, value) in [
            ("shared_root", Some(&config.shared_root)),
            ("user_code_path", config.user_code_path.as_ref()),
        ] {
            if let Some(path) = value
                && let Err(e) = crate::ids::ContainerPath::parse_as("path", path)
            {
                return Err(source
                    .error_at(&yaml_path![key], format!("{path:?}: {}", e.reason))
                    .with_hint(e.rule));
            }
        }
        check_entrypoint_resources(
            &source,
            &[],
            config.entrypoint_num_cpus,
            config.entrypoint_num_gpus,
            config.entrypoint_resources.as_ref(),
        )?;
        check_job_env(
            &source,
            &yaml_path!["runtime_env", "env_vars"],
            config.runtime_env.env_vars.keys(),
        )?;
        let mut secrets = Secrets::new();
        secrets.add_vars(
            config
                .runtime_env
                .env_vars
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        crate::secrets::remember(&secrets);
        Ok((config, source))
    }
}
