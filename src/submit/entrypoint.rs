//! verl workloads turned into a command line: the entrypoint module and the Hydra
//! overrides the JobSpec's fields imply, then the user's overrides (last, so they win).
//! Every token is quoted for Hydra (values) and for the shell (whole tokens). Pure.

use crate::config::jobspec::{Override, OverrideValue, Workload};

/// Everything the entrypoint depends on, resolved to paths inside the containers.
#[derive(Debug, Clone)]
pub struct EntrypointInputs {
    pub workload: Workload,
    pub model_path: Option<String>,
    pub train_file: Option<String>,
    pub val_file: Option<String>,
    pub nnodes: Option<u32>,
    pub n_gpus_per_node: Option<u32>,
    pub total_training_steps: Option<u64>,
    pub save_freq: Option<i64>,
    pub test_freq: Option<i64>,
    pub checkpoint_dir: String,
    /// Hydra's run directory (`.hydra/`, the trainer's log): on the shared storage, not in
    /// the worker container where it would be lost with it.
    pub hydra_run_dir: String,
    pub user_overrides: Vec<Override>,
    /// Workload `custom`: the command as written.
    pub custom: Option<String>,
}

pub const PPO_MODULE: &str = "verl.trainer.main_ppo";
pub const SFT_MODULE: &str = "verl.trainer.sft_trainer_ray";
/// GRPO samples several responses per prompt; 1 would make every advantage zero.
pub const GRPO_DEFAULT_N: u32 = 5;

/// The overrides argus derives from the JobSpec fields (before the user's).
pub fn implied_overrides(i: &EntrypointInputs) -> Vec<Override> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| out.push((k.to_string(), v));
    match i.workload {
        Workload::Ppo | Workload::Grpo => {
            if i.workload == Workload::Grpo {
                set("algorithm.adv_estimator", "grpo".into());
            }
            if let Some(f) = &i.train_file {
                set("data.train_files", f.clone());
            }
            if let Some(f) = &i.val_file {
                set("data.val_files", f.clone());
            }
            if let Some(m) = &i.model_path {
                set("actor_rollout_ref.model.path", m.clone());
                if i.workload == Workload::Ppo {
                    set("critic.model.path", m.clone());
                }
            }
            set("actor_rollout_ref.rollout.name", "vllm".into());
            if i.workload == Workload::Grpo {
                set("actor_rollout_ref.rollout.n", GRPO_DEFAULT_N.to_string());
            }
        }
        Workload::Sft => {
            if let Some(f) = &i.train_file {
                set("data.train_files", f.clone());
            }
            if let Some(f) = &i.val_file {
                set("data.val_files", f.clone());
            }
            set("data.messages_key", "messages".into());
            if let Some(m) = &i.model_path {
                set("model.path", m.clone());
            }
            // The driver runs on a worker without a GPU of its own.
            set("trainer.device", "cpu".into());
        }
        Workload::Custom => return Vec::new(),
    }
    for (key, value) in [
        ("trainer.nnodes", i.nnodes.map(|v| v.to_string())),
        (
            "trainer.n_gpus_per_node",
            i.n_gpus_per_node.map(|v| v.to_string()),
        ),
        (
            "trainer.total_training_steps",
            i.total_training_steps.map(|v| v.to_string()),
        ),
        ("trainer.save_freq", i.save_freq.map(|v| v.to_string())),
        ("trainer.test_freq", i.test_freq.map(|v| v.to_string())),
    ] {
        if let Some(value) = value {
            set(key, value);
        }
    }
    set("trainer.default_local_dir", i.checkpoint_dir.clone());
    set("hydra.run.dir", i.hydra_run_dir.clone());
    set("trainer.logger", "[console]".into());
    out.into_iter()
        .map(|(key, value)| {
            let yaml = if value.starts_with('[') {
                serde_yaml::from_str(&value).unwrap_or(serde_yaml::Value::String(value))
            } else {
                plain_value(&value)
            };
            Override {
                key,
                value: OverrideValue::Yaml(yaml),
            }
        })
        .collect()
}

/// Numbers stay numbers; everything else is a string.
fn plain_value(text: &str) -> serde_yaml::Value {
    match text.parse::<i64>() {
        Ok(n) => serde_yaml::Value::Number(n.into()),
        Err(_) => serde_yaml::Value::String(text.to_string()),
    }
}

/// The overrides in effect: implied first, then the user's; a later key replaces an
/// earlier one (so the command line has each key once and the user's value wins).
pub fn effective_overrides(i: &EntrypointInputs) -> Vec<Override> {
    let mut all = implied_overrides(i);
    for user in &i.user_overrides {
        let bare = user.key.trim_start_matches('+');
        all.retain(|o| o.key.trim_start_matches('+') != bare);
        all.push(user.clone());
    }
    all
}

/// The driver's command run in `work_dir` (made first): every relative path a job writes,
/// and anything a Hydra app puts in its working directory, lands on the shared storage.
pub fn in_work_dir(work_dir: &str, command: &str) -> String {
    let dir = shell_quote(work_dir);
    format!("mkdir -p {dir} && cd {dir} && {command}")
}

/// The shell command Ray runs as the job's driver.
pub fn build(i: &EntrypointInputs) -> String {
    let module = match i.workload {
        Workload::Custom => return i.custom.clone().unwrap_or_default(),
        Workload::Ppo | Workload::Grpo => PPO_MODULE,
        Workload::Sft => SFT_MODULE,
    };
    let mut words = vec!["python3".to_string(), "-m".to_string(), module.to_string()];
    for o in effective_overrides(i) {
        words.push(shell_quote(&o.to_string()));
    }
    words.join(" ")
}

/// As is when the shell reads it back unchanged (no globs, spaces, quotes or `$`).
pub fn shell_quote(token: &str) -> String {
    let safe = !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=,+@%".contains(c));
    if safe {
        return token.to_string();
    }
    // try_quote only refuses NUL bytes, which no YAML or command line can carry.
    shlex::try_quote(token)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| token.replace('\0', ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn inputs(workload: Workload) -> EntrypointInputs {
        EntrypointInputs {
            workload,
            model_path: Some(
                "/mnt/shared/common/hf/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/abc"
                    .into(),
            ),
            train_file: Some("/mnt/shared/common/datasets/gsm8k/train.parquet".into()),
            val_file: Some("/mnt/shared/common/datasets/gsm8k/test.parquet".into()),
            nnodes: Some(1),
            n_gpus_per_node: Some(4),
            total_training_steps: Some(10),
            save_freq: Some(5),
            test_freq: None,
            checkpoint_dir: "/mnt/shared/jobs/j1/checkpoints".into(),
            hydra_run_dir: "/mnt/shared/jobs/j1/hydra".into(),
            user_overrides: Vec::new(),
            custom: None,
        }
    }

    #[test]
    fn user_overrides_come_last_and_win() {
        let mut i = inputs(Workload::Ppo);
        i.user_overrides = vec![
            Override {
                key: "actor_rollout_ref.rollout.name".into(),
                value: OverrideValue::Raw("sglang".into()),
            },
            Override {
                key: "+trainer.extra".into(),
                value: OverrideValue::Yaml(serde_yaml::Value::String("a b".into())),
            },
        ];
        let e = build(&i);
        assert!(!e.contains("rollout.name=vllm"), "{e}");
        assert!(e.ends_with(r#"'trainer.logger=[console]' actor_rollout_ref.rollout.name=sglang "+trainer.extra='a b'""#), "{e}");
        assert!(
            e.contains(" trainer.default_local_dir=/mnt/shared/jobs/j1/checkpoints "),
            "{e}"
        );
    }

    #[test]
    fn grpo_has_no_critic_and_samples_several_responses() {
        let e = build(&inputs(Workload::Grpo));
        assert!(e.contains("algorithm.adv_estimator=grpo"));
        assert!(e.contains("actor_rollout_ref.rollout.n=5"));
        assert!(!e.contains("critic."));
    }

    #[test]
    fn sft_runs_the_ray_trainer_on_cpu_by_default() {
        let e = build(&inputs(Workload::Sft));
        assert!(e.starts_with("python3 -m verl.trainer.sft_trainer_ray "));
        assert!(e.contains("trainer.device=cpu"));
        assert!(e.contains("model.path=/mnt/shared/common/hf/hub/"));
    }
}
