//! The GPUs a verl job asks of the cluster: every resource pool it places, each
//! `nnodes` placement groups of `n_gpus_per_node` GPUs (one group per node, packed on one
//! Ray node, several groups may share a node), and whether the live workers can hold them
//! all at once. A job that cannot be placed waits forever: it is refused before it is sent.
//!
//! Pools, as verl 0.9.1 builds them (checked in its source):
//! - `verl.trainer.main_ppo` (ppo, grpo): `trainer.nnodes` x `trainer.n_gpus_per_node`
//!   (actor, rollout, ref, critic); with `trainer.v1.trainer_mode=separate_async` also the
//!   rollout's own `actor_rollout_ref.rollout.{nnodes,n_gpus_per_node}`; with
//!   `reward.reward_model.enable_resource_pool=true` the reward model's
//!   `reward.reward_model.{nnodes,n_gpus_per_node}`.
//! - `verl.experimental.one_step_off_policy.main_ppo` and
//!   `verl.experimental.fully_async_policy.fully_async_main` (a custom entrypoint): the
//!   trainer's and the rollout's `rollout.{nnodes,n_gpus_per_node}`, defaults from the
//!   module's own config in the snapshot.
//!
//! A value is the last override of it, else what verl's config composed to (when the
//! override check ran), else the module config's; a pool whose size is unknown is left out
//! (never guessed). Pure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::jobspec::{Override, OverrideValue};
use crate::submit::override_check::Composed;

/// One pool: `nnodes` groups of `gpus_per_node` GPUs; `keys` name where they come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pool {
    pub name: &'static str,
    pub nnodes: u32,
    pub gpus_per_node: u32,
    #[serde(skip)]
    pub keys: (String, String),
}

/// Every pool of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDemand {
    pub pools: Vec<Pool>,
}

/// The experimental entrypoints with a rollout pool of their own, and their configs.
pub const SEPARATE_ROLLOUT_MODULES: [(&str, &str); 2] = [
    (
        "verl.experimental.one_step_off_policy.main_ppo",
        "verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml",
    ),
    (
        "verl.experimental.fully_async_policy.fully_async_main",
        "verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml",
    ),
];

/// Where a job's values come from, first match wins.
pub struct Values<'a> {
    /// The last override of each key (`+`/`++` stripped), as text.
    explicit: BTreeMap<String, String>,
    composed: Option<&'a Composed>,
    /// A module's own config (a YAML mapping), for the experimental entrypoints.
    module_config: Option<serde_yaml::Value>,
}

impl<'a> Values<'a> {
    pub fn new(overrides: &[Override], composed: Option<&'a Composed>) -> Self {
        let mut explicit = BTreeMap::new();
        for o in overrides {
            if let Some(text) = scalar_text(&o.value) {
                explicit.insert(o.key.trim_start_matches('+').to_string(), text);
            }
        }
        Values {
            explicit,
            composed,
            module_config: None,
        }
    }

    /// `key=value` words of a command line as overrides (a custom entrypoint's).
    pub fn from_words(words: &[String], module_config: Option<serde_yaml::Value>) -> Self {
        let mut explicit = BTreeMap::new();
        for word in words {
            if word.starts_with('-') || word.starts_with('~') {
                continue;
            }
            if let Some((key, value)) = word.split_once('=') {
                let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
                explicit.insert(key.trim_start_matches('+').to_string(), value.to_string());
            }
        }
        Values {
            explicit,
            composed: None,
            module_config,
        }
    }

    pub fn get(&self, key: &str) -> Option<String> {
        if let Some(v) = self.explicit.get(key) {
            return Some(v.clone());
        }
        if let Some(v) = self.composed.and_then(|c| c.scalar(key)) {
            return Some(v);
        }
        let mut node = self.module_config.as_ref()?;
        for seg in key.split('.') {
            node = node.get(seg)?;
        }
        match node {
            serde_yaml::Value::Number(n) => Some(n.to_string()),
            serde_yaml::Value::Bool(b) => Some(b.to_string()),
            serde_yaml::Value::String(s) if !s.contains("${") => Some(s.clone()),
            _ => None,
        }
    }

    fn count(&self, key: &str) -> Option<u32> {
        self.get(key)?.trim().parse().ok()
    }

    fn is_true(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    fn pool(&self, name: &'static str, prefix: &str) -> Option<Pool> {
        let keys = (
            format!("{prefix}.nnodes"),
            format!("{prefix}.n_gpus_per_node"),
        );
        Some(Pool {
            name,
            nnodes: self.count(&keys.0)?,
            gpus_per_node: self.count(&keys.1)?,
            keys,
        })
    }
}

fn scalar_text(value: &OverrideValue) -> Option<String> {
    match value {
        OverrideValue::Yaml(serde_yaml::Value::Number(n)) => Some(n.to_string()),
        OverrideValue::Yaml(serde_yaml::Value::Bool(b)) => Some(b.to_string()),
        OverrideValue::Yaml(serde_yaml::Value::String(s)) => Some(s.trim().to_string()),
        OverrideValue::Raw(s) => Some(s.trim().to_string()),
        _ => None,
    }
}

/// The pools of `verl.trainer.main_ppo` (ppo, grpo); None when the trainer's own size is
/// not known.
pub fn main_ppo(values: &Values<'_>) -> Option<GpuDemand> {
    let mut pools = vec![values.pool("trainer", "trainer")?];
    if values
        .get("trainer.v1.trainer_mode")
        .is_some_and(|m| m.trim() == "separate_async")
        && values
            .get("trainer.use_v1")
            .is_none_or(|v| v.trim() != "false")
    {
        pools.extend(values.pool("rollout", "actor_rollout_ref.rollout"));
    }
    if values.is_true("reward.reward_model.enable_resource_pool") {
        pools.extend(values.pool("reward model", "reward.reward_model"));
    }
    Some(GpuDemand { pools })
}

/// The pools of an experimental entrypoint with a separate rollout.
pub fn separate_rollout(values: &Values<'_>) -> Option<GpuDemand> {
    let mut pools = vec![values.pool("trainer", "trainer")?];
    pools.extend(values.pool("rollout", "rollout"));
    Some(GpuDemand { pools })
}

/// The module a custom entrypoint runs with `python3 -m`, and the words after it.
pub fn python_module(words: &[String]) -> Option<(&str, &[String])> {
    let program = words.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    if !(name == "python" || name.starts_with("python3")) {
        return None;
    }
    let at = words.iter().position(|w| w == "-m")?;
    let module = words.get(at + 1)?;
    Some((module.as_str(), &words[at + 2..]))
}

impl GpuDemand {
    /// `trainer.nnodes=2 x trainer.n_gpus_per_node=4 + actor_rollout_ref.rollout.nnodes=1 x ...`
    pub fn describe(&self) -> String {
        self.pools
            .iter()
            .map(|p| {
                format!(
                    "{}={} x {}={}",
                    p.keys.0, p.nnodes, p.keys.1, p.gpus_per_node
                )
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// Whether groups of these sizes fit the workers' GPUs, each group on one worker.
    pub fn fits(&self, workers: &[u32]) -> bool {
        let mut groups: Vec<u32> = self
            .pools
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.gpus_per_node, p.nnodes as usize))
            .filter(|g| *g > 0)
            .collect();
        groups.sort_unstable_by(|a, b| b.cmp(a));
        let total: u64 = groups.iter().map(|g| u64::from(*g)).sum();
        if total > workers.iter().map(|w| u64::from(*w)).sum() {
            return false;
        }
        let mut free = workers.to_vec();
        let mut budget = 200_000u32;
        // Too many ways to try (None): not refused on a guess.
        place(&groups, &mut free, &mut budget).unwrap_or(true)
    }
}

/// Depth-first placement of the (descending) groups; None when the budget ran out.
fn place(groups: &[u32], free: &mut [u32], budget: &mut u32) -> Option<bool> {
    let Some((&group, rest)) = groups.split_first() else {
        return Some(true);
    };
    let mut tried = Vec::new();
    for i in 0..free.len() {
        if free[i] < group || tried.contains(&free[i]) {
            continue;
        }
        *budget = budget.checked_sub(1)?;
        tried.push(free[i]);
        free[i] -= group;
        let placed = place(rest, free, budget);
        free[i] += group;
        if placed != Some(false) {
            return placed;
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    fn overrides(pairs: &[(&str, &str)]) -> Vec<Override> {
        pairs
            .iter()
            .map(|(k, v)| Override {
                key: (*k).to_string(),
                value: OverrideValue::Raw((*v).to_string()),
            })
            .collect()
    }

    #[test]
    fn main_ppo_counts_the_trainer_and_a_separate_rollout() {
        let sync = overrides(&[("trainer.nnodes", "1"), ("trainer.n_gpus_per_node", "4")]);
        let d = main_ppo(&Values::new(&sync, None)).unwrap();
        assert_eq!(d.describe(), "trainer.nnodes=1 x trainer.n_gpus_per_node=4");
        assert!(d.fits(&[4]) && !d.fits(&[2, 2]));

        let separate = overrides(&[
            ("trainer.nnodes", "1"),
            ("trainer.n_gpus_per_node", "4"),
            ("trainer.v1.trainer_mode", "separate_async"),
            ("actor_rollout_ref.rollout.nnodes", "1"),
            ("actor_rollout_ref.rollout.n_gpus_per_node", "4"),
        ]);
        let d = main_ppo(&Values::new(&separate, None)).unwrap();
        assert_eq!(
            d.describe(),
            "trainer.nnodes=1 x trainer.n_gpus_per_node=4 + actor_rollout_ref.rollout.nnodes=1 x actor_rollout_ref.rollout.n_gpus_per_node=4"
        );
        // Two groups of 4: one 8-GPU node holds both, one 4-GPU node does not.
        assert!(d.fits(&[8]) && d.fits(&[4, 4]) && !d.fits(&[4]) && !d.fits(&[6, 2]));
        // The last override wins, as in Hydra; `colocate_async` has no rollout pool.
        let mut colocate = separate.clone();
        colocate.extend(overrides(&[("trainer.v1.trainer_mode", "colocate_async")]));
        assert_eq!(
            main_ppo(&Values::new(&colocate, None)).unwrap().pools.len(),
            1
        );
        // The trainer's size unknown: no demand at all (never guessed).
        assert_eq!(main_ppo(&Values::new(&overrides(&[]), None)), None);
    }

    #[test]
    fn a_reward_model_pool_counts_when_it_has_one() {
        let o = overrides(&[
            ("trainer.nnodes", "2"),
            ("trainer.n_gpus_per_node", "2"),
            ("reward.reward_model.enable_resource_pool", "true"),
            ("reward.reward_model.nnodes", "1"),
            ("reward.reward_model.n_gpus_per_node", "1"),
        ]);
        let d = main_ppo(&Values::new(&o, None)).unwrap();
        assert_eq!(d.pools.len(), 2);
        assert!(d.fits(&[2, 2, 1]) && d.fits(&[3, 2]) && !d.fits(&[2, 2]));
    }

    #[test]
    fn an_experimental_entrypoint_reads_its_words_then_its_module_config() {
        let cmd = words(
            "python3 -m verl.experimental.one_step_off_policy.main_ppo trainer.nnodes=1 trainer.n_gpus_per_node=2 rollout.n_gpus_per_node=2",
        );
        let (module, rest) = python_module(&cmd).unwrap();
        assert_eq!(module, SEPARATE_ROLLOUT_MODULES[0].0);
        let config: serde_yaml::Value =
            serde_yaml::from_str("rollout:\n  nnodes: 1\n  n_gpus_per_node: 8\n").unwrap();
        let d = separate_rollout(&Values::from_words(rest, Some(config))).unwrap();
        assert_eq!(
            d.describe(),
            "trainer.nnodes=1 x trainer.n_gpus_per_node=2 + rollout.nnodes=1 x rollout.n_gpus_per_node=2"
        );
        assert!(d.fits(&[2, 2]) && !d.fits(&[2]));
        assert_eq!(python_module(&words("bash run.sh")), None);
    }

    #[test]
    fn placement_is_exact_not_greedy() {
        // First fit of [3, 2, 2, 1] into [4, 4] puts 3+1 and 2+2: fits; a greedy
        // best-fit-by-order that put 3 and 2 apart would still fit; [3,3,2] into [4,4]
        // does not (8 GPUs, but no node takes 3+2).
        let demand = |sizes: &[u32]| GpuDemand {
            pools: sizes
                .iter()
                .map(|s| Pool {
                    name: "p",
                    nnodes: 1,
                    gpus_per_node: *s,
                    keys: Default::default(),
                })
                .collect(),
        };
        assert!(demand(&[3, 2, 2, 1]).fits(&[4, 4]));
        assert!(!demand(&[3, 3, 2]).fits(&[4, 4]));
        assert!(demand(&[2, 2, 2, 2]).fits(&[8]));
        assert!(demand(&[0]).fits(&[]));
    }
}
