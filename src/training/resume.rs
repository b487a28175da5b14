//! Continuing a job from its checkpoints: a new submission whose
//! `trainer.default_local_dir` is the old job's checkpoint directory, with
//! `trainer.resume_mode=auto`, built from the old job's JobSpec as recorded (or one the
//! user gives) so the code snapshot, datasets and model stay the same unless overridden.
//!
//! verl saves `global_step_<n>/` directories in `trainer.default_local_dir` and names the
//! last one in `latest_checkpointed_iteration.txt`; `resume_mode: auto` resumes from it.
//! A custom workload gets the same directory as `ARGUS_CHECKPOINT_DIR`. Every resumed job
//! gets `ARGUS_RESUMES=<old id>` and `metadata.resumes`, and its record names the job it
//! continues, which is how `job metrics` and `job plot` join the chain.
//!
//! Pure except [`latest_checkpoint`] (reads a directory held open, following no link).

use std::io::Read as _;

use crate::fsx::{Dir, Kind};

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

/// What verl writes next to its `global_step_<n>/` directories: the last one saved.
const MARKER: &str = "latest_checkpointed_iteration.txt";

/// The step of the newest checkpoint in the directory `dir` (held open on this host):
/// what `latest_checkpointed_iteration.txt` says, else the highest `global_step_<n>/`.
/// Nothing is followed through a link (the directory is on storage others write): a
/// marker or a `global_step_<n>` that is a link is left out, and a warning names it.
pub fn latest_checkpoint(dir: &Dir) -> Option<u64> {
    match dir.open_file(MARKER) {
        Ok(file) => {
            let mut text = String::new();
            if file.take(4096).read_to_string(&mut text).is_ok()
                && let Ok(step) = text.trim().parse::<u64>()
            {
                return Some(step);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(
            "cannot read {}, looking for global_step_<n>/ instead: {e}",
            dir.display(MARKER).display()
        ),
    }
    let entries = match dir.entries() {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!("cannot list {}: {e}", dir.path().display());
            return None;
        }
    };
    let mut newest = None;
    for (name, kind) in entries {
        let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix("global_step_"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        match kind {
            Kind::Dir => newest = newest.max(Some(step)),
            Kind::Link => tracing::warn!(
                "{} is a symbolic link, not taken as a checkpoint: argus does not follow links on the shared storage",
                dir.display(&name).display()
            ),
            Kind::File | Kind::Special => {}
        }
    }
    newest
}

/// The JobSpec of the resumed job, as YAML: `base` (the old job's recorded JobSpec, or the
/// user's) without its submission id, with redacted secrets taken back from the
/// environment (`env`), and the resume settings added. The user's `--set` flags are
/// applied after this, so they still win.
pub fn resumed_jobspec(
    mut base: Value,
    old_id: &str,
    checkpoint_dir: &str,
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
        let ours = [
            ("trainer.default_local_dir", checkpoint_dir.to_string()),
            ("trainer.resume_mode", "auto".to_string()),
        ];
        match map.get_mut("overrides") {
            Some(Value::Mapping(overrides)) => {
                for (key, value) in &ours {
                    overrides.remove(format!("+{key}"));
                    overrides.remove(format!("++{key}"));
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
                    !ours.iter().any(|(k, _)| *k == key)
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
    fn latest_checkpoint_reads_verls_marker_then_the_directories() {
        let dir = tempfile::tempdir().unwrap();
        let held = Dir::root(dir.path()).unwrap();
        assert_eq!(latest_checkpoint(&held), None);
        std::fs::create_dir(dir.path().join("global_step_2")).unwrap();
        std::fs::create_dir(dir.path().join("global_step_10")).unwrap();
        std::fs::write(
            dir.path().join("global_step_99"),
            "a file, not a checkpoint",
        )
        .unwrap();
        assert_eq!(latest_checkpoint(&held), Some(10));
        std::fs::write(dir.path().join(MARKER), "4").unwrap();
        assert_eq!(latest_checkpoint(&held), Some(4));
    }

    #[test]
    fn links_among_the_checkpoints_are_left_out_with_a_warning_that_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("checkpoints");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ckpt.join("global_step_3")).unwrap();
        std::fs::create_dir_all(outside.join("global_step_900")).unwrap();
        std::fs::write(outside.join(MARKER), "900").unwrap();
        std::os::unix::fs::symlink(
            outside.join("global_step_900"),
            ckpt.join("global_step_900"),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.join(MARKER), ckpt.join(MARKER)).unwrap();
        let held = Dir::root(&ckpt).unwrap();
        let mut step = None;
        let warnings = crate::training::warnings_of(|| step = latest_checkpoint(&held));
        assert_eq!(step, Some(3));
        let link = ckpt.join("global_step_900").display().to_string();
        assert!(
            warnings.contains(&format!(
                "{link} is a symbolic link, not taken as a checkpoint"
            )),
            "{warnings}"
        );
        assert!(
            warnings.contains(&ckpt.join(MARKER).display().to_string()),
            "{warnings}"
        );
    }

    #[test]
    fn a_checkpoint_directory_swapped_after_it_was_opened_is_read_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("checkpoints");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ckpt.join("global_step_3")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join(MARKER), "900").unwrap();
        let held = Dir::root(&ckpt).unwrap();
        std::fs::rename(&ckpt, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, &ckpt).unwrap();
        assert_eq!(latest_checkpoint(&held), Some(3));
    }

    #[test]
    fn a_recorded_verl_jobspec_becomes_the_resumed_one() {
        let base = yaml(
            "workload: ppo\nsubmission_id: old-1\ncode_id: abc\noverrides:\n- trainer.default_local_dir=/elsewhere\n- trainer.logger=[console]\nenv_vars:\n  API_TOKEN: <redacted>\n  NCCL_DEBUG: WARN\n",
        );
        let out = resumed_jobspec(base, "old-1", "/mnt/shared/jobs/old-1/checkpoints", |k| {
            (k == "API_TOKEN").then(|| "t0k".to_string())
        })
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
            |_| None,
        )
        .unwrap_err();
        assert_eq!(err, ResumeSpecError::MissingSecret("HF_TOKEN".into()));
    }

    #[test]
    fn map_overrides_and_custom_workloads() {
        let out = resumed_jobspec(
            yaml("workload: grpo\ncode_id: a\noverrides: {trainer.resume_mode: disable, +trainer.default_local_dir: /x}\n"),
            "o",
            "/d",
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
            |_| None,
        )
        .unwrap();
        assert!(out.get("overrides").is_none());
        assert_eq!(out["env_vars"]["ARGUS_CHECKPOINT_DIR"], "/d");
        assert_eq!(out["entrypoint"], "python3 t.py");
    }
}
