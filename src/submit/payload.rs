//! The Ray Jobs `POST /api/jobs/` body for a resolved job. Pure: values in, JSON out
//! (Ray 2.51 rejects unknown fields with 400, so only the fields it knows are sent).

use std::collections::BTreeMap;

/// Everything the payload says.
#[derive(Debug, Clone)]
pub struct Payload<'a> {
    pub submission_id: &'a str,
    pub entrypoint: &'a str,
    pub env_vars: &'a BTreeMap<String, String>,
    pub metadata: &'a BTreeMap<String, String>,
    pub entrypoint_num_cpus: Option<f64>,
    pub entrypoint_num_gpus: Option<f64>,
    pub entrypoint_resources: &'a BTreeMap<String, f64>,
    /// Ray's `runtime_env.worker_process_setup_hook`, `module.function`.
    pub setup_hook: Option<&'a str>,
}

pub fn build(p: &Payload<'_>) -> serde_json::Value {
    let mut payload = serde_json::json!({
        "entrypoint": p.entrypoint,
        "submission_id": p.submission_id,
        "runtime_env": {"env_vars": p.env_vars},
        "metadata": p.metadata,
        "entrypoint_resources": p.entrypoint_resources,
    });
    if let Some(hook) = p.setup_hook {
        payload["runtime_env"]["worker_process_setup_hook"] = serde_json::json!(hook);
    }
    if let Some(cpus) = p.entrypoint_num_cpus {
        payload["entrypoint_num_cpus"] = serde_json::json!(cpus);
    }
    if let Some(gpus) = p.entrypoint_num_gpus {
        payload["entrypoint_num_gpus"] = serde_json::json!(gpus);
    }
    payload
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::submit::target::Target;

    #[test]
    fn only_fields_ray_knows_and_optional_ones_only_when_set() {
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let meta = BTreeMap::new();
        let res = BTreeMap::from([("worker_node".to_string(), 1.0)]);
        let p = Payload {
            submission_id: "j1",
            entrypoint: "python3 x.py",
            env_vars: &env,
            metadata: &meta,
            entrypoint_num_cpus: None,
            entrypoint_num_gpus: Some(0.5),
            entrypoint_resources: &res,
            setup_hook: None,
        };
        let v = build(&p);
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "entrypoint",
                "entrypoint_num_gpus",
                "entrypoint_resources",
                "metadata",
                "runtime_env",
                "submission_id"
            ]
        );
        assert_eq!(v["runtime_env"]["env_vars"]["A"], "1");
        assert_eq!(v["entrypoint_resources"]["worker_node"], 1.0);
    }

    /// A target on no cluster (nothing is sent), its shared storage seen at `host_shared`.
    fn target(host_shared: Option<crate::config::Layout>, hub_offline_ok: bool) -> Target {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Target {
            ray: crate::ray::RayClient::new("http://127.0.0.1:1", None),
            cluster: "c".into(),
            mount: crate::config::ContainerLayout::in_containers("/mnt/shared"),
            host_shared,
            user_code_path: None,
            env_vars: BTreeMap::new(),
            entrypoint_num_cpus: None,
            entrypoint_num_gpus: None,
            entrypoint_resources: BTreeMap::new(),
            setup_hook: None,
            config_record: (String::new(), String::new()),
            hub_offline_ok,
            image_verl: None,
        }
    }

    /// The JobSpec `text` prepared for `target` (nothing checked on the storage).
    fn prepared(target: &Target, text: String) -> crate::submit::resolve::Prepared {
        let loaded = crate::config::jobspec::LoadedJobSpec::from_source(
            crate::config::yaml::Source::new("j.yaml", text),
            &[],
        )
        .unwrap();
        crate::submit::resolve::prepare(target, &loaded, false).unwrap()
    }

    /// The JobSpec's `restart` section is argus's supervision policy: the payload and the
    /// entrypoint Ray gets are the same with it or without it; only argus's record of the
    /// JobSpec (config/jobspec.yaml) keeps it.
    #[test]
    fn the_restart_section_never_reaches_ray() {
        let target = target(None, true);
        let prepare = |extra: &str| {
            prepared(
                &target,
                format!(
                    "workload: ppo\nsubmission_id: r1\ncode_path: /mnt/shared/common/code/verl/x\nmetadata: {{team: a}}\n{extra}"
                ),
            )
        };
        let plain = prepare("");
        let supervised = prepare("restart: {max: 3, on: [hang], hang_after: 20m}\n");
        assert_eq!(plain.payload, supervised.payload);
        assert_eq!(plain.entrypoint, supervised.entrypoint);
        let sent = serde_json::to_string(&supervised.payload).unwrap();
        assert!(!sent.contains("restart"), "{sent}");
        assert!(!plain.jobspec_record.contains("restart"));
        assert!(
            supervised.jobspec_record.contains("restart:"),
            "{}",
            supervised.jobspec_record
        );
    }

    /// A model complete in the shared cache: the job is told `HF_HUB_OFFLINE=1`; a JobSpec
    /// that says otherwise, a profile whose nodes set it, or a model not cached: nothing.
    #[test]
    fn a_cached_model_turns_the_hub_off_for_the_job() {
        let root = std::env::temp_dir().join(format!("argus-offline-{}", std::process::id()));
        let repo = root.join("common/hf/hub/models--org--tiny");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(commit)).unwrap();
        std::fs::write(repo.join("refs/main"), commit).unwrap();
        let cached = |ok: bool| target(Some(crate::config::Layout::new(&root)), ok);
        let offline = |target: &Target, extra: &str| {
            let text = format!(
                "workload: custom\nsubmission_id: r1\ncode_path: /mnt/shared/common/code/x\nentrypoint: python3 -m x\n{extra}"
            );
            prepared(target, text).payload["runtime_env"]["env_vars"]["HF_HUB_OFFLINE"].clone()
        };
        assert_eq!(offline(&cached(true), "model_id: org/tiny\n"), "1");
        assert_eq!(
            offline(
                &cached(true),
                "model_id: org/tiny\nenv_vars: {HF_HUB_OFFLINE: '0'}\n"
            ),
            "0"
        );
        assert_eq!(
            offline(&cached(false), "model_id: org/tiny\n"),
            serde_json::Value::Null
        );
        assert_eq!(
            offline(&cached(true), "model_id: org/other\n"),
            serde_json::Value::Null
        );
        assert_eq!(offline(&cached(true), ""), serde_json::Value::Null);
        let _ = std::fs::remove_dir_all(&root);
    }
}
