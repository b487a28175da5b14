//! Continuing a job from its checkpoints: a new submission whose
//! `trainer.default_local_dir` is the old job's checkpoint directory, built from the old
//! job's JobSpec as recorded (or one the user gives) so the code snapshot, datasets and
//! model stay the same unless overridden.
//!
//! verl saves `global_step_<n>/` directories in `trainer.default_local_dir` and names the
//! last one in `latest_checkpointed_iteration.txt`; `resume_mode: auto` resumes from it.
//! When that one is incomplete ([`super::checkpoint::choose`]), the newest complete one is
//! named instead (`resume_mode: resume_path`, `resume_from_path`). A custom workload gets
//! the same directory as `ARGUS_CHECKPOINT_DIR`. Every resumed job gets
//! `ARGUS_RESUMES=<old id>` and `metadata.resumes`, and its record names the job it
//! continues, which is how `job metrics` and `job plot` join the chain.
//!
//! Pure.

use serde_yaml::{Mapping, Value};

/// The checkpoint directory a job used, as the containers see it: the last
/// `trainer.default_local_dir=` of its entrypoint (verl), else the `ARGUS_CHECKPOINT_DIR`
/// it was given (a resumed custom job), else `default` (`<mount>/jobs/<id>/checkpoints`).
pub fn checkpoint_dir(entrypoint: &str, env_dir: Option<&str>, default: &str) -> String {
    let from_entrypoint = shlex::split(entrypoint).and_then(|words| {
        words.iter().rev().find_map(|w| {
            w.trim_start_matches('+')
                .strip_prefix("trainer.default_local_dir=")
                .map(|v| v.trim_matches(['\'', '"']).to_string())
        })
    });
    from_entrypoint
        .or_else(|| env_dir.map(str::to_string))
        .unwrap_or_else(|| default.to_string())
}

/// The JobSpec of the resumed job, as YAML: `base` (the old job's recorded JobSpec, or the
/// user's) without its submission id, with redacted secrets taken back from the
/// environment (`env`), and the resume settings added: verl's `resume_mode=auto` when the
/// checkpoint to load is the one verl's tracker names (`from_step` None), else
/// `resume_mode=resume_path` with `resume_from_path` naming it (the newer ones are
/// incomplete). The user's `--set` flags are applied after this, so they still win.
pub fn resumed_jobspec(
    mut base: Value,
    old_id: &str,
    checkpoint_dir: &str,
    from_step: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Value, ResumeSpecError> {
    let map = base.as_mapping_mut().ok_or(ResumeSpecError::NotAMapping)?;
    map.remove("submission_id");
    let verl = map
        .get("workload")
        .and_then(Value::as_str)
        .is_some_and(|w| w != "custom");

    entry_mapping(map, "env_vars")?;
    crate::inputs::recorded::restore_secrets(&mut base, env)
        .map_err(ResumeSpecError::MissingSecret)?;
    let map = base.as_mapping_mut().ok_or(ResumeSpecError::NotAMapping)?;
    let env_vars = entry_mapping(map, "env_vars")?;
    env_vars.insert("ARGUS_RESUMES".into(), old_id.into());
    env_vars.insert("ARGUS_CHECKPOINT_DIR".into(), checkpoint_dir.into());
    entry_mapping(map, "metadata")?.insert("resumes".into(), old_id.into());

    if verl {
        let mut ours = vec![("trainer.default_local_dir", checkpoint_dir.to_string())];
        match from_step {
            None => ours.push(("trainer.resume_mode", "auto".to_string())),
            Some(path) => {
                ours.push(("trainer.resume_mode", "resume_path".to_string()));
                ours.push(("trainer.resume_from_path", path.to_string()));
            }
        }
        // A stale resume_from_path of the base goes in either case.
        const REPLACED: [&str; 3] = [
            "trainer.default_local_dir",
            "trainer.resume_mode",
            "trainer.resume_from_path",
        ];
        match map.get_mut("overrides") {
            Some(Value::Mapping(overrides)) => {
                for key in REPLACED {
                    for prefix in ["", "+", "++"] {
                        overrides.remove(format!("{prefix}{key}"));
                    }
                }
                for (key, value) in &ours {
                    overrides.insert(key.to_string().into(), value.clone().into());
                }
            }
            Some(Value::Sequence(list)) => {
                list.retain(|item| {
                    let key = item
                        .as_str()
                        .and_then(|s| s.split_once('='))
                        .map(|(k, _)| k.trim_start_matches('+'))
                        .unwrap_or_default();
                    !REPLACED.contains(&key)
                });
                for (key, value) in &ours {
                    list.push(format!("{key}={}", hydra_quoted(value)).into());
                }
            }
            _ => {
                let overrides: Mapping = ours
                    .iter()
                    .map(|(k, v)| (Value::from(k.to_string()), Value::from(v.clone())))
                    .collect();
                map.insert("overrides".into(), Value::Mapping(overrides));
            }
        }
    }
    Ok(base)
}

/// A value as a `key=value` list item carries it: bare when Hydra reads it back unchanged.
fn hydra_quoted(value: &str) -> String {
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./@:".contains(c))
    {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

fn entry_mapping<'a>(map: &'a mut Mapping, key: &str) -> Result<&'a mut Mapping, ResumeSpecError> {
    let slot = map
        .entry(key.into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if slot.is_null() {
        *slot = Value::Mapping(Mapping::new());
    }
    slot.as_mapping_mut().ok_or(ResumeSpecError::NotAMapping)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeSpecError {
    #[error("the JobSpec is not a mapping")]
    NotAMapping,
    #[error("the recorded JobSpec redacted {0}; set it in the environment to resume")]
    MissingSecret(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn the_checkpoint_dir_comes_from_the_entrypoint_then_the_env_then_the_default() {
        let e = "python3 -m verl.trainer.main_ppo trainer.default_local_dir=/mnt/shared/jobs/a/checkpoints 'trainer.default_local_dir=/mnt/shared/jobs/root/checkpoints' trainer.resume_mode=auto";
        assert_eq!(
            checkpoint_dir(e, None, "/d"),
            "/mnt/shared/jobs/root/checkpoints"
        );
        assert_eq!(checkpoint_dir("python3 train.py", Some("/x"), "/d"), "/x");
        assert_eq!(checkpoint_dir("python3 train.py", None, "/d"), "/d");
    }

    #[test]
    fn a_recorded_verl_jobspec_becomes_the_resumed_one() {
        let base = yaml(
            "workload: ppo\nsubmission_id: old-1\ncode_id: abc\noverrides:\n- trainer.default_local_dir=/elsewhere\n- trainer.logger=[console]\nenv_vars:\n  API_TOKEN: <redacted>\n  NCCL_DEBUG: WARN\n",
        );
        let out = resumed_jobspec(
            base,
            "old-1",
            "/mnt/shared/jobs/old-1/checkpoints",
            None,
            |k| (k == "API_TOKEN").then(|| "t0k".to_string()),
        )
        .unwrap();
        assert!(out.get("submission_id").is_none());
        assert_eq!(out["code_id"], "abc");
        assert_eq!(
            out["overrides"],
            yaml(
                "['trainer.logger=[console]', 'trainer.default_local_dir=/mnt/shared/jobs/old-1/checkpoints', 'trainer.resume_mode=auto']"
            )
        );
        assert_eq!(out["env_vars"]["API_TOKEN"], "t0k");
        assert_eq!(out["env_vars"]["ARGUS_RESUMES"], "old-1");
        assert_eq!(out["metadata"]["resumes"], "old-1");
        let err = resumed_jobspec(
            yaml("workload: ppo\ncode_id: a\nenv_vars: {HF_TOKEN: <redacted>}\n"),
            "o",
            "/d",
            None,
            |_| None,
        )
        .unwrap_err();
        assert_eq!(err, ResumeSpecError::MissingSecret("HF_TOKEN".into()));
    }

    #[test]
    fn a_checkpoint_the_tracker_does_not_name_is_named_by_path() {
        let base = yaml(
            "workload: ppo\ncode_id: a\noverrides:\n- trainer.resume_mode=auto\n- +trainer.resume_from_path=/old\n- trainer.logger=[console]\n",
        );
        let out = resumed_jobspec(base, "o", "/d", Some("/d/global_step_2"), |_| None).unwrap();
        assert_eq!(
            out["overrides"],
            yaml(
                "['trainer.logger=[console]', 'trainer.default_local_dir=/d', 'trainer.resume_mode=resume_path', 'trainer.resume_from_path=/d/global_step_2']"
            )
        );
        let out = resumed_jobspec(
            yaml("workload: grpo\ncode_id: a\noverrides: {++trainer.resume_from_path: /x}\n"),
            "o",
            "/d",
            Some("/d/global_step_2"),
            |_| None,
        )
        .unwrap();
        assert_eq!(
            out["overrides"],
            yaml(
                "{trainer.default_local_dir: /d, trainer.resume_mode: resume_path, trainer.resume_from_path: /d/global_step_2}"
            )
        );
    }

    #[test]
    fn map_overrides_and_custom_workloads() {
        let out = resumed_jobspec(
            yaml("workload: grpo\ncode_id: a\noverrides: {trainer.resume_mode: disable, +trainer.default_local_dir: /x}\n"),
            "o",
            "/d",
            None,
            |_| None,
        )
        .unwrap();
        assert_eq!(
            out["overrides"],
            yaml("{trainer.resume_mode: auto, trainer.default_local_dir: /d}")
        );
        let out = resumed_jobspec(
            yaml("workload: custom\ncode_id: a\nentrypoint: python3 t.py\n"),
            "o",
            "/d",
            None,
            |_| None,
        )
        .unwrap();
        assert!(out.get("overrides").is_none());
        assert_eq!(out["env_vars"]["ARGUS_CHECKPOINT_DIR"], "/d");
        assert_eq!(out["entrypoint"], "python3 t.py");
    }
}
