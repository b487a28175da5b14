//! A JobSpec resolved against a target: the submission id, the code snapshot, the
//! datasets and model as the containers see them, the entrypoint and the checked
//! overrides. Reads the shared storage (snapshots, HF cache) but writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::entrypoint::{self, EntrypointInputs};
use super::override_check::{self, Outcome};
use super::target::Target;
use super::{Error, payload};
use crate::config::jobspec::{Code, JobSpec, LoadedJobSpec, Workload};
use crate::config::{ContainerLayout, Layout};
use crate::records;

/// A job ready to submit: everything decided, nothing written.
#[derive(Debug, Clone, Serialize)]
pub struct Prepared {
    pub submission_id: String,
    pub workload: Workload,
    pub code_id: Option<String>,
    pub code_path: String,
    /// What Ray runs: secrets in clear. Never printed or recorded: see
    /// [`Prepared::shown_entrypoint`] and [`Prepared::shown_payload`].
    pub entrypoint: String,
    pub payload: serde_json::Value,
    /// The entrypoint built the same way from overrides whose secret values were
    /// replaced before quoting: what is printed and recorded.
    #[serde(skip)]
    pub shown_entrypoint: String,
    pub checked_overrides_against: Option<String>,
    pub notes: Vec<String>,
    #[serde(skip)]
    pub time_limit_s: Option<u64>,
    #[serde(skip)]
    pub jobspec_record: String,
    /// The job this one continues (`--resume`); recorded in its job.json.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes: Option<String>,
    /// What a verl job asks of the cluster (`trainer.nnodes` workers with
    /// `trainer.n_gpus_per_node` GPUs each), checked against Ray's nodes before submitting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand: Option<GpuDemand>,
}

impl Prepared {
    /// The payload as printed and recorded: the shown entrypoint in place of the real
    /// one, then secrets redacted by name and by value (env vars, metadata).
    pub fn shown_payload(&self) -> serde_json::Value {
        let mut payload = self.payload.clone();
        if let Some(map) = payload.as_object_mut() {
            map.insert("entrypoint".into(), self.shown_entrypoint.clone().into());
        }
        crate::secrets::redact_json(payload)
    }
}

pub use super::pools::GpuDemand;

/// What the job's pools ask of the cluster ([`super::pools`]): the module the workload
/// runs, its values from the overrides, verl's composed config, or an experimental
/// module's own config in the snapshot.
fn gpu_demand(
    spec: &JobSpec,
    inputs: &EntrypointInputs,
    composed: Option<&override_check::Composed>,
    snapshot_on_host: Option<&std::path::Path>,
) -> Option<GpuDemand> {
    use super::pools;
    if spec.workload != Workload::Custom {
        if spec.workload == Workload::Sft {
            return None;
        }
        let (implied, user) = entrypoint::effective_parts(inputs);
        let all: Vec<_> = implied.into_iter().chain(user).collect();
        return pools::main_ppo(&pools::Values::new(&all, composed));
    }
    let words = shlex::split(inputs.custom.as_deref()?)?;
    let (module, rest) = pools::python_module(&words)?;
    let (_, config) = pools::SEPARATE_ROLLOUT_MODULES
        .iter()
        .find(|(m, _)| *m == module)?;
    // The module's own defaults, read below the snapshot through handles (never a link).
    let module_config = snapshot_on_host.and_then(|root| {
        let (dir, file) = config.rsplit_once('/')?;
        let bytes = crate::fsx::Dir::root(root)
            .and_then(|d| d.open_dir(dir))
            .and_then(|d| d.read(file, 1 << 20))
            .ok()?;
        serde_yaml::from_slice(&bytes).ok()
    });
    pools::separate_rollout(&pools::Values::from_words(rest, module_config))
}

/// The payload's `entrypoint_resources` (custom resources the driver asks for), as numbers.
pub fn entrypoint_resources(payload: &serde_json::Value) -> BTreeMap<String, f64> {
    payload["entrypoint_resources"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// What the driver asks of the one node it runs on, read from the payload:
/// `entrypoint_resources`, with `entrypoint_num_cpus` / `_gpus` as Ray's CPU and GPU.
pub fn driver_asks(payload: &serde_json::Value) -> BTreeMap<String, f64> {
    let mut asks = entrypoint_resources(payload);
    for (key, name) in [
        ("entrypoint_num_cpus", "CPU"),
        ("entrypoint_num_gpus", "GPU"),
    ] {
        if let Some(n) = payload[key].as_f64().filter(|n| *n > 0.0) {
            asks.insert(name.to_string(), n);
        }
    }
    asks
}

/// Ray keeps a job PENDING for as long as no node has every resource its driver asks for:
/// checked against the live cluster's nodes before submitting (as [`GpuDemand`] is), and
/// refused naming what the nodes do have. What the profile alone can tell was refused when
/// it loaded; this catches a RayConfig's target, `node:<address>` and a cluster changed
/// since. No live node at all is left to Ray (the cluster may be coming up).
pub fn check_driver_fits(
    payload: &serde_json::Value,
    nodes: &[crate::ray::RayNode],
) -> Result<(), Error> {
    let asks = driver_asks(payload);
    let live: Vec<&crate::ray::RayNode> = nodes.iter().filter(|n| n.alive()).collect();
    if asks.is_empty() || live.is_empty() {
        return Ok(());
    }
    let fits = live.iter().any(|n| {
        asks.iter()
            .all(|(k, v)| n.resources_total.get(k).is_some_and(|have| have >= v))
    });
    if fits {
        return Ok(());
    }
    let text = |m: &BTreeMap<String, f64>| {
        m.iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let have = live
        .iter()
        .map(|n| {
            // Ray's own per-node names say nothing a user asks for.
            let own: BTreeMap<String, f64> = n
                .resources_total
                .iter()
                .filter(|(k, _)| {
                    asks.contains_key(*k)
                        || !(k.starts_with("node:")
                            || k.contains("memory")
                            || k.starts_with("accelerator_type:"))
                })
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let name = if n.node_name.is_empty() {
                n.node_ip.as_str()
            } else {
                n.node_name.as_str()
            };
            format!("{name} {{{}}}", text(&own))
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::DriverInfeasible {
        demand: format!("a driver node with {{{}}}", text(&asks)),
        cluster: format!("no live node with all of it: {have}"),
    })
}

/// `<prefix>-<yyyymmdd-hhmmss>-<4 hex>`; the generator lives in [`crate::ids`].
pub fn generate_id(prefix: &str) -> String {
    crate::ids::generate(prefix)
}

/// Resolves the JobSpec against the target and builds the payload. Reads the shared
/// storage (snapshots, HF cache) but writes nothing.
pub fn prepare(target: &Target, loaded: &LoadedJobSpec, check: bool) -> Result<Prepared, Error> {
    let spec = &loaded.spec;
    let submission_id = submission_id_of(spec)?;
    let mut notes = Vec::new();
    for (before, again) in entrypoint::repeated(&spec.overrides.0) {
        notes.push(repeated_note(loaded, before, again));
    }
    let layout = &target.mount;
    let in_job = |rest: &str| records::container_path(&layout.jobs(), &submission_id, rest);
    let (code_path, code_id) = resolve_code(target, spec, layout)?;
    let model = spec
        .model_id
        .as_ref()
        .map(|m| resolve_model(target, m, &mut notes))
        .transpose()?;
    let offline = model.as_ref().is_some_and(|(_, cached)| *cached);
    let model_path = model.map(|(path, _)| path);
    let (train_file, val_file) = data_files(spec, layout);

    // A custom entrypoint's relative script is the snapshot's (looked for when checking).
    let snapshot_on_host = target
        .host_path_of(&code_path)
        .filter(|dir| check && dir.is_dir());
    let snapshot_has = |rel: &str| snapshot_on_host.as_ref().map(|dir| dir.join(rel).is_file());
    let inputs = EntrypointInputs {
        workload: spec.workload,
        model_path,
        train_file,
        val_file,
        nnodes: spec.nnodes,
        n_gpus_per_node: spec.n_gpus_per_node,
        total_training_steps: spec.total_training_steps,
        save_freq: spec.save_freq,
        test_freq: spec.test_freq,
        checkpoint_dir: in_job(records::CHECKPOINTS),
        hydra_run_dir: in_job(records::HYDRA),
        user_overrides: spec.overrides.0.clone(),
        custom: spec
            .entrypoint
            .as_deref()
            .map(|e| entrypoint::script_in_snapshot(e, &code_path, &snapshot_has))
            .transpose()?,
    };
    let work_dir = in_job(records::WORK);
    let entrypoint = entrypoint::in_work_dir(&work_dir, &entrypoint::build(&inputs)?)?;
    let shown_entrypoint = entrypoint::in_work_dir(
        &work_dir,
        &entrypoint::build(&entrypoint::redacted(&inputs))?,
    )?;
    // verl's code and the image's dependencies are one release (checks need the snapshot).
    if let (Some(image), Some(code)) = (
        &target.image_verl,
        snapshot_on_host
            .as_deref()
            .filter(|_| spec.workload != Workload::Custom)
            .and_then(super::verl_match::code_verl),
    ) {
        match super::verl_match::judge(&code, image) {
            Ok(Some(warning)) => notes.push(warning),
            Ok(None) => {}
            Err(mismatch) => return Err(Error::VerlMismatch(mismatch)),
        }
    }
    let (checked_overrides_against, composed) =
        check_overrides(target, spec, &inputs, &code_path, check, &mut notes)?;
    let demand = gpu_demand(
        spec,
        &inputs,
        composed.as_ref(),
        snapshot_on_host.as_deref(),
    );

    let job_dir = in_job("");
    let env_vars = job_env(target, spec, &inputs, &code_path, job_dir, offline);
    let metadata = job_metadata(spec, &code_path, code_id.as_deref());
    let payload = payload::build(&payload::Payload {
        submission_id: &submission_id,
        entrypoint: &entrypoint,
        env_vars: &env_vars,
        metadata: &metadata,
        entrypoint_num_cpus: target.entrypoint_num_cpus,
        entrypoint_num_gpus: target.entrypoint_num_gpus,
        entrypoint_resources: &target.entrypoint_resources,
        setup_hook: spec
            .runtime_env
            .worker_process_setup_hook
            .as_ref()
            .map(|h| h.as_str())
            .or(target.setup_hook.as_deref()),
    });
    Ok(Prepared {
        submission_id,
        workload: spec.workload,
        code_id,
        code_path,
        entrypoint,
        payload,
        shown_entrypoint,
        checked_overrides_against,
        notes,
        time_limit_s: spec.time_limit.map(|t| t.0.as_secs()),
        jobspec_record: crate::inputs::recorded::to_text(spec),
        resumes: None,
        demand,
    })
}

/// The JobSpec's `submission_id`, else a fresh `<workload>-<time>-<hex>`.
fn submission_id_of(spec: &JobSpec) -> Result<String, Error> {
    let submission_id = spec
        .submission_id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_else(|| generate_id(spec.workload.as_str()));
    if !crate::config::jobspec::valid_id(&submission_id) {
        return Err(Error::BadId(submission_id));
    }
    Ok(submission_id)
}

/// The code as the containers see it, and its id: a path as given, or a snapshot (found
/// on the shared storage when this host sees it, under whatever name it was published).
fn resolve_code(
    target: &Target,
    spec: &JobSpec,
    layout: &ContainerLayout,
) -> Result<(String, Option<String>), Error> {
    match &spec.code {
        Code::Source(_) => Err(Error::NeedsRun),
        Code::Path(path) => Ok((
            path.to_string(),
            Path::new(path.as_str())
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
        )),
        Code::Snapshot(code_ref) => {
            let id = &code_ref.to_string();
            let name = code_ref.name.as_ref().map_or("verl", |n| n.as_str());
            let code_id = code_ref.id.as_str();
            let Some(host) = &target.host_shared else {
                let path = format!("{}/{name}/{code_id}", layout.code().display());
                return Ok((path, Some(code_id.to_string())));
            };
            let code_root = host.code();
            let found = crate::snapshot::find(&code_root, id).map_err(|_| Error::CodeNotFound {
                code_id: id.clone(),
                root: code_root.clone(),
            })?;
            let found_name = found
                .parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok((
                format!("{}/{found_name}/{code_id}", layout.code().display()),
                Some(code_id.to_string()),
            ))
        }
    }
}

/// The train and validation files as the containers see them: an absolute path as
/// given, a dataset name's split, a path under the datasets, or (for verl) GSM8K's.
fn data_files(spec: &JobSpec, layout: &ContainerLayout) -> (Option<String>, Option<String>) {
    let verl = spec.workload != Workload::Custom;
    let dataset = if spec.workload == Workload::Sft {
        "gsm8k_sft"
    } else {
        "gsm8k"
    };
    let resolve_data = |value: &Option<String>, split: &str| -> Option<String> {
        let datasets = layout.datasets();
        match value {
            Some(v) if v.starts_with('/') => Some(v.clone()),
            Some(v) if !v.contains('/') && !v.contains('.') => {
                Some(format!("{}/{v}/{split}.parquet", datasets.display()))
            }
            Some(v) => Some(format!("{}/{v}", datasets.display())),
            None if verl => Some(format!("{}/{dataset}/{split}.parquet", datasets.display())),
            None => None,
        }
    };
    (
        resolve_data(&spec.train_file.as_ref().map(ToString::to_string), "train"),
        resolve_data(&spec.val_file.as_ref().map(ToString::to_string), "test"),
    )
}

/// Hydra's verdict on the whole command line (argus's implied overrides, then the
/// user's), against the configs inside the code snapshot: where they were checked, or a
/// note saying why they were not.
fn check_overrides(
    target: &Target,
    spec: &JobSpec,
    inputs: &EntrypointInputs,
    code_path: &str,
    check: bool,
    notes: &mut Vec<String>,
) -> Result<(Option<String>, Option<override_check::Composed>), Error> {
    let (Some(config), true) = (entrypoint::config_name(spec.workload), check) else {
        return Ok((None, None));
    };
    let outcome = match target.host_path_of(code_path) {
        Some(host) => {
            let (implied, user) = entrypoint::effective_parts(inputs);
            let first_user = implied.len();
            let all: Vec<_> = implied.into_iter().chain(user).collect();
            override_check::check(&host, config, &all, first_user)?
        }
        None => Outcome::NotChecked {
            reason: format!("{code_path} is not on the shared storage seen from this host"),
        },
    };
    match outcome {
        Outcome::Checked { origin, config } => return Ok((Some(origin), Some(config))),
        Outcome::NotChecked { reason } if !spec.overrides.0.is_empty() => {
            notes.push(format!("overrides not checked: {reason}"));
        }
        Outcome::NotChecked { .. } => {}
    }
    Ok((None, None))
}

/// The job's environment: the target's, what argus resolved (`ARGUS_*`, for any
/// workload's own use: a custom script reads its data here), the JobSpec's, then a
/// PYTHONPATH that puts the code first. With the model complete in the shared cache
/// (`offline`), `HF_HUB_OFFLINE=1` unless the profile or the JobSpec says otherwise: no
/// worker asks the hub for what every node already reads from the cache.
fn job_env(
    target: &Target,
    spec: &JobSpec,
    inputs: &EntrypointInputs,
    code_path: &str,
    job_dir: String,
    offline: bool,
) -> BTreeMap<String, String> {
    let mut env_vars = target.env_vars.clone();
    if offline && target.hub_offline_ok {
        env_vars
            .entry(super::target::HUB_OFFLINE.to_string())
            .or_insert_with(|| "1".to_string());
    }
    let resolved = [
        ("ARGUS_CODE_PATH", Some(code_path.to_string())),
        ("ARGUS_TRAIN_FILE", inputs.train_file.clone()),
        ("ARGUS_VAL_FILE", inputs.val_file.clone()),
        ("ARGUS_MODEL_PATH", inputs.model_path.clone()),
        ("ARGUS_JOB_DIR", Some(job_dir)),
        ("ARGUS_CHECKPOINT_DIR", Some(inputs.checkpoint_dir.clone())),
    ];
    env_vars.extend(
        resolved
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v))),
    );
    env_vars.extend(spec.env_vars.iter().map(|(k, v)| (k.clone(), v.0.clone())));
    let mut python_path = vec![code_path.to_string()];
    python_path.extend(target.user_code_path.clone());
    python_path.push("${PYTHONPATH}".to_string());
    env_vars.insert("PYTHONPATH".to_string(), python_path.join(":"));
    env_vars
}

/// The JobSpec's metadata plus what argus adds: workload, code, and who submitted it.
fn job_metadata(
    spec: &JobSpec,
    code_path: &str,
    code_id: Option<&str>,
) -> BTreeMap<String, String> {
    let mut metadata: BTreeMap<String, String> = spec
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    metadata.insert("workload".into(), spec.workload.as_str().into());
    metadata.insert("code_path".into(), code_path.to_string());
    if let Some(id) = code_id {
        metadata.insert("code_id".into(), id.to_string());
    }
    metadata.insert("submitted_by".into(), ray_user_agent());
    metadata
}

/// A key the JobSpec's overrides give twice, both named where they are written: Hydra
/// applies both, in order, so the later value wins.
fn repeated_note(loaded: &LoadedJobSpec, before: usize, again: usize) -> String {
    use crate::config::yaml::Place;
    let overrides = &loaded.spec.overrides.0;
    let at = |i: usize| {
        let o = &overrides[i];
        let path = [
            crate::yaml_path!["overrides", o.key.as_str()].to_vec(),
            crate::yaml_path!["overrides", i].to_vec(),
        ]
        .into_iter()
        .find_map(|path| loaded.source.place(&path));
        let place = match path {
            Some(Place::At(line, column)) => {
                format!("{}:{line}:{column}", loaded.source.origin.display())
            }
            Some(Place::Set(arg)) => format!("--set {arg}"),
            None => format!("overrides[{i}]"),
        };
        format!("`{o}` ({place})")
    };
    format!(
        "overrides give `{}` twice: {} and then {}; Hydra applies both in order, so the last value wins",
        overrides[again].key.trim_start_matches(['+', '~']),
        at(before),
        at(again)
    )
}

fn ray_user_agent() -> String {
    crate::http::USER_AGENT.to_string()
}

/// A model id present in the shared HF cache becomes its snapshot directory (as the
/// containers see it); a path stays a path; anything else is left for verl to download.
///
/// The id is parsed into a checked repo id and revision before it comes near a path: a
/// JobSpec's `model_id` of `../../x` or `org/name@../../y` cannot point the job, or this
/// lookup, outside the cache.
/// The model as verl is given it, and whether it comes from the shared HF cache complete.
fn resolve_model(
    target: &Target,
    model: &str,
    notes: &mut Vec<String>,
) -> Result<(String, bool), Error> {
    use crate::data::hf_cache::HubCache;
    use crate::hf::{ModelSpec, RepoKind};
    if model.starts_with('/') {
        // The one check doctor makes too: lexically clean, and on the shared storage a
        // directory holding a model, reached without following a link.
        let host = target.host_shared.as_ref().map(Layout::root);
        crate::inputs::check_model_path(model, &target.mount.mount(), host).map_err(|e| {
            Error::BadModel {
                model: model.to_string(),
                reason: e.to_string(),
            }
        })?;
        return Ok((model.to_string(), false));
    }
    let spec = ModelSpec::parse(model).map_err(|e| Error::BadModel {
        model: model.to_string(),
        reason: e.to_string(),
    })?;
    if let Some(host) = &target.host_shared {
        let cache = HubCache::of(host);
        if let Some(commit) = cache.cached_snapshot(RepoKind::Model, &spec.repo, &spec.revision) {
            let inside = HubCache::new(target.mount.hf_home().join("hub"));
            let path = inside
                .snapshot_dir(RepoKind::Model, &spec.repo, &commit)
                .display()
                .to_string();
            return Ok((path, true));
        }
    }
    // verl takes a repo id or a path, never a revision: one that is not cached cannot be
    // passed on without silently becoming `main`.
    if spec.revision != crate::hf::Revision::main() {
        return Err(Error::BadModel {
            model: model.to_string(),
            reason: format!(
                "revision {} is not in the shared HF cache, and verl would load {} at main: `argus prepare --model {model}` puts it there",
                spec.revision, spec.repo
            ),
        });
    }
    notes.push(format!("model {model} is not in the shared HF cache: verl will fetch it through HF_ENDPOINT (`argus prepare --model {model}` caches it)"));
    Ok((spec.repo.to_string(), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, resources: &[(&str, f64)]) -> crate::ray::RayNode {
        crate::ray::RayNode {
            node_id: name.into(),
            node_name: name.into(),
            state: "ALIVE".into(),
            node_ip: String::new(),
            is_head_node: false,
            resources_total: resources.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            start_time_ms: None,
        }
    }

    #[test]
    fn a_driver_no_live_node_can_hold_is_refused_with_what_the_nodes_have() {
        let nodes = [
            node(
                "c-head",
                &[("CPU", 1.0), ("head_node", 1.0), ("memory", 1e9)],
            ),
            node(
                "c-gpu-0",
                &[
                    ("CPU", 4.0),
                    ("GPU", 2.0),
                    ("worker_node", 1.0),
                    ("node:10.0.0.2", 1.0),
                ],
            ),
        ];
        let payload = |resources: serde_json::Value, gpus: f64| serde_json::json!({"entrypoint_resources": resources, "entrypoint_num_gpus": gpus});
        check_driver_fits(&payload(serde_json::json!({"worker_node": 1}), 2.0), &nodes).unwrap();
        check_driver_fits(
            &payload(serde_json::json!({"node:10.0.0.2": 0.01}), 0.0),
            &nodes,
        )
        .unwrap();
        let err = check_driver_fits(
            &payload(
                serde_json::json!({"worker_node": 1, "accelerator_h20": 1}),
                0.0,
            ),
            &nodes,
        )
        .unwrap_err();
        assert_eq!(crate::exit::Classify::exit(&err), crate::exit::Exit::Usage);
        let text = err.to_string();
        assert!(text.contains("accelerator_h20: 1"), "{text}");
        assert!(
            text.contains("c-gpu-0 {CPU: 4, GPU: 2, worker_node: 1}"),
            "{text}"
        );
        let err = check_driver_fits(&payload(serde_json::json!({"worker_node": 1}), 4.0), &nodes)
            .unwrap_err();
        assert!(err.to_string().contains("GPU: 4"), "{err}");
        // No live node: the cluster may be coming up; Ray decides.
        check_driver_fits(&payload(serde_json::json!({"x": 1}), 0.0), &[]).unwrap();
    }
}
