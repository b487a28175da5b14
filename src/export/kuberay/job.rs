//! The RayJob's job fields: the submission `argus submit` would send (entrypoint, runtime
//! env, metadata, entrypoint resources), as KubeRay's fields, with the deadlines.

use std::collections::BTreeMap;

use super::types::*;
use super::{Job, Options, Version};
use crate::cluster::plan::ContainerPlan;
use crate::config::LoadedProfile;
use crate::export::Findings;
use crate::yaml_path;

/// The job: the submission `argus submit` would send, as KubeRay's fields.
pub(super) fn job_spec(
    loaded: &LoadedProfile,
    job: &Job,
    options: &Options,
    cluster: RayClusterSpec,
    containers: &[ContainerPlan],
    f: &mut Findings,
) -> RayJobSpec {
    let prepared = job.prepared;
    let payload = &prepared.payload;
    let src = job.source;
    let profile_src = &loaded.source;

    let strings = |value: &serde_json::Value| -> BTreeMap<String, String> {
        value
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let metadata = strings(&payload["metadata"]);
    // The payload's runtime env as it is (JSON is YAML): the operator sends it back to the
    // Jobs API unchanged, and Ray expands `${VAR}` in it on the driver's node, as for submit.
    let runtime_env_yaml =
        serde_json::to_string_pretty(&payload["runtime_env"]).unwrap_or_default() + "\n";

    let entrypoint_resources = crate::submit::resolve::entrypoint_resources(payload);
    let resources_at = yaml_path!["submit", "entrypoint_resources"];
    if entrypoint_resources.is_empty() {
        f.warn(profile_src, &resources_at, "empty: the driver may run on the head, which argus keeps for the GCS and the dashboard")
            .set_hint("entrypoint_resources: {worker_node: 1}");
    }
    for (name, amount) in &entrypoint_resources {
        let offered = containers.iter().any(|c| {
            c.expect
                .resources
                .get(name)
                .is_some_and(|have| have >= amount)
        });
        if !offered {
            f.refuse(profile_src, &resources_at, format!("no node offers {name}: {amount}, so the driver would wait forever"))
                .set_hint("worker_node: 1 (every worker has it), or a resource a worker group's `resources` declares");
        }
    }
    let entrypoint_resources = (!entrypoint_resources.is_empty())
        .then(|| crate::cluster::plan::resources_json(&entrypoint_resources));

    let active_deadline_seconds = prepared.time_limit_s.and_then(|s| {
        let seconds = i32::try_from(s).ok();
        match seconds {
            Some(_) => {
                f.warn(src, &yaml_path!["time_limit"], format!("→ activeDeadlineSeconds {s}: Kubernetes counts it from the RayJob's start, the cluster's start-up included"));
            }
            None => {
                f.refuse(src, &yaml_path!["time_limit"], "longer than activeDeadlineSeconds can hold (about 68 years)");
            }
        }
        seconds
    });
    let ready = loaded.profile.ray.ready_timeout_s;
    let pre_running_deadline_seconds = if options.version >= Version::V1_6 {
        i32::try_from(ready).ok()
    } else {
        f.warn(
            profile_src,
            &yaml_path!["ray", "ready_timeout_s"],
            format!(
                "not carried: KubeRay {} has no preRunningDeadlineSeconds",
                options.version.as_str()
            ),
        );
        None
    };

    RayJobSpec {
        entrypoint: prepared.entrypoint.clone(),
        entrypoint_num_cpus: payload["entrypoint_num_cpus"].as_f64(),
        entrypoint_num_gpus: payload["entrypoint_num_gpus"].as_f64(),
        entrypoint_resources,
        runtime_env_yaml,
        job_id: prepared.submission_id.clone(),
        metadata,
        submission_mode: SUBMISSION_MODE.into(),
        shutdown_after_job_finishes: true,
        ttl_seconds_after_finished: TTL_AFTER_FINISHED_S,
        backoff_limit: i32::try_from(options.backoff_limit).unwrap_or(0),
        active_deadline_seconds,
        pre_running_deadline_seconds,
        ray_cluster_spec: cluster,
    }
}
