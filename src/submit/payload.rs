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
}
