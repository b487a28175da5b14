//! The check of a job's Hydra overrides against the configs its verl snapshot carries:
//! Hydra's own verdict, before anything is submitted. verl's entrypoints run Hydra in
//! struct mode, so a key a mapping does not declare is refused unless written `+key`,
//! `+key` is refused where the key has a value, `++key` sets either way, `~key` deletes a
//! key that has a value; `group=option` switches a defaults-list entry.
//!
//! The primary config (`ppo_trainer`, `sft_trainer_engine`) is composed from its defaults
//! lists as Hydra composes it ([`compose`]), then the overrides are applied in command-line
//! order to that tree as Hydra applies them ([`tree`]). `hydra.*` keys are checked against
//! Hydra 1.3's own config. Not modelled: value types of Hydra's structured `hydra.*`
//! fields, resolvers other than `oc.select` (their values are taken as non-null),
//! defaults entries that leave the config directory (refused), and a defaults entry's
//! interpolation other than `${group}` (not checked; `${model_engine}_actor`, verl 0.8's,
//! is resolved as Hydra does, against the choices of the defaults list and the command line).

mod compose;
mod tree;

use std::path::{Path, PathBuf};

use crate::config::jobspec::Override;
use crate::config::yaml::ConfigError;
use crate::exit::{Classify, Exit};
use crate::hydra::{self, HydraValue, ParsedOverride};
use compose::{Composer, Fail};
use tree::Refusal;

/// Where verl keeps its Hydra configs, relative to the code root.
pub const CONFIG_DIR: &str = "verl/trainer/config";

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every override passed, checked against this primary config file; `config` is what
    /// they composed (for reading the values the job will run with).
    Checked { origin: String, config: Composed },
    /// Nothing could be checked, and why.
    NotChecked { reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read verl's config {}", crate::text::shown(path))]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("verl's config cannot be used: {0}")]
    Invalid(ConfigError),
    #[error("Hydra cannot compose verl's config {origin}: {message}")]
    Composition { origin: String, message: String },
    #[error("{} `{text}` is not in Hydra's override syntax: {message}", who(*.implied))]
    Syntax {
        text: String,
        message: String,
        implied: bool,
    },
    #[error("{} `{key}` is not a key of verl's config (checked against {origin}){}", who(*.implied), suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownOverride {
        key: String,
        origin: String,
        suggestion: Option<String>,
        implied: bool,
    },
    #[error("Hydra would refuse {} `{text}`: {reason} (checked against {origin})", who(*.implied))]
    Refused {
        text: String,
        reason: String,
        origin: String,
        hint: Option<String>,
        implied: bool,
    },
}

fn who(implied: bool) -> &'static str {
    if implied {
        "argus's own override (from the JobSpec's fields)"
    } else {
        "override"
    }
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            // A file refused on the shared storage (a planted link, a FIFO, an oversized
            // file) is bad input (2); any other failure to read is a failure (1).
            Error::Unreadable { source, .. } => crate::fsx::io_exit(source),
            _ => Exit::Usage,
        }
    }

    fn hint(&self) -> Option<String> {
        let implied = matches!(
            self,
            Error::Syntax { implied: true, .. }
                | Error::UnknownOverride { implied: true, .. }
                | Error::Refused { implied: true, .. }
        );
        if implied {
            return Some(
                "this verl snapshot lacks a key argus sets: is code_id a verl checkout of a supported version? (--no-check skips the check)"
                    .into(),
            );
        }
        if let Error::Unreadable { source, .. } = self
            && let Some(hint) = crate::fsx::io_hint(source)
        {
            return Some(hint);
        }
        match self {
            Error::Unreadable { .. } | Error::Invalid(_) | Error::Composition { .. } => Some(
                "fix verl's configs and snapshot the code again, or pass --no-check".into(),
            ),
            Error::Syntax { .. } => Some(
                "quote a value with spaces or special characters ('a b'), or give the override as a map entry under overrides: (argus quotes it)".into(),
            ),
            Error::UnknownOverride { .. } => {
                Some("prefix a new key with + (+my.key=1), or pass --no-check".into())
            }
            Error::Refused { hint, .. } => hint.clone(),
        }
    }
}

/// Checks `overrides` (in command-line order; those from `first_user` on are the user's)
/// against the config `config_name` of the snapshot at `code_root`.
pub fn check(
    code_root: &Path,
    config_name: &str,
    overrides: &[Override],
    first_user: usize,
) -> Result<Outcome, Error> {
    let parsed = parse_all(overrides, first_user)?;
    let composer = Composer::open(code_root, CONFIG_DIR).map_err(|f| config_error(f, ""))?;
    let Some(primary) = composer.primary_file(config_name) else {
        return Ok(Outcome::NotChecked {
            reason: format!("no {config_name}.yaml under {}", composer.path().display()),
        });
    };
    let origin = primary.display().to_string();

    // As Hydra splits them: `group=option` where the key names a config group (and the
    // value is not a mapping) changes the defaults list; everything else is a config key.
    let (groups, keys): (Vec<_>, Vec<_>) = parsed.into_iter().partition(|(_, p, _)| {
        !matches!(p.value, Some(HydraValue::Dict(_))) && composer.group_exists(&p.key)
    });
    let mut tree = match compose(&composer, config_name, &groups, &origin)? {
        Ok(tree) => tree,
        Err(reason) => return Ok(Outcome::NotChecked { reason }),
    };
    apply_keys(&mut tree, keys, &origin)?;
    Ok(Outcome::Checked {
        origin,
        config: Composed(tree),
    })
}

/// verl's config as composed with a job's overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed(tree::Node);

impl Composed {
    /// The scalar at a dotted key as text (`8`, `true`, `sync`), its interpolations
    /// followed (`${a.b}`, `${oc.select:a.b,8}`); None when absent, null, `???`, not a
    /// scalar, or computed by a resolver argus does not run.
    pub fn scalar(&self, key: &str) -> Option<String> {
        tree::scalar(&self.0, key)
    }
}

/// One override as written, parsed, and whether argus implied it (not the user).
type Parsed = (String, ParsedOverride, bool);

/// Every override parsed as Hydra parses it; a sweep is refused (a job is one run).
fn parse_all(overrides: &[Override], first_user: usize) -> Result<Vec<Parsed>, Error> {
    let mut parsed = Vec::with_capacity(overrides.len());
    for (i, o) in overrides.iter().enumerate() {
        let text = o.to_string();
        let implied = i < first_user;
        let p = hydra::parse_override(&text).map_err(|e| Error::Syntax {
            text: text.clone(),
            message: e.to_string(),
            implied,
        })?;
        if let Some(v) = &p.value
            && is_sweep(v)
        {
            return Err(Error::Refused {
                reason: "a sweep (several values) needs --multirun; a job is a single run".into(),
                text,
                origin: "Hydra's override syntax".into(),
                hint: Some(
                    "quote a string that has commas ('a,b'), or write a list as [a,b]".into(),
                ),
                implied,
            });
        }
        parsed.push((text, p, implied));
    }
    Ok(parsed)
}

/// The config composed with the group overrides; `Ok(Err(reason))` when argus does not
/// model something it needs (the check is then skipped, saying why).
fn compose(
    composer: &Composer,
    config_name: &str,
    groups: &[Parsed],
    origin: &str,
) -> Result<Result<tree::Node, String>, Error> {
    let origin = origin.to_string();
    // The snapshot's own config first: if that fails, the snapshot is at fault.
    let fresh = || composer.fresh().map_err(|f| config_error(f, &origin));
    let composed = match fresh()?.compose(config_name, &[]) {
        Ok(c) => c,
        Err(Fail::Unsupported(reason)) => return Ok(Err(reason)),
        Err(fail) => return Err(config_error(fail, &origin)),
    };
    let tree = if groups.is_empty() {
        composed.tree
    } else {
        let group_overrides: Vec<ParsedOverride> =
            groups.iter().map(|(_, p, _)| p.clone()).collect();
        match fresh()?.compose(config_name, &group_overrides) {
            Ok(c) => c.tree,
            Err(Fail::Unsupported(reason)) => return Ok(Err(reason)),
            Err(Fail::Refused(reason)) => {
                let texts: Vec<&str> = groups.iter().map(|(t, _, _)| t.as_str()).collect();
                return Err(Error::Refused {
                    text: texts.join(" "),
                    reason,
                    origin,
                    hint: Some(
                        "a config group override names an option of a group in the defaults list (group=option); + appends a group, ~ removes one".into(),
                    ),
                    implied: groups.iter().any(|(_, _, implied)| *implied),
                });
            }
            Err(fail) => return Err(config_error(fail, &origin)),
        }
    };
    Ok(Ok(tree))
}

/// Applies the config-key overrides in order, as Hydra does, refusing the first that
/// Hydra would refuse (an unknown key with the closest known one suggested).
fn apply_keys(config: &mut tree::Node, keys: Vec<Parsed>, origin: &str) -> Result<(), Error> {
    let origin = origin.to_string();
    let mut suggestions: Option<Vec<String>> = None;
    for (text, p, implied) in keys {
        if p.package.is_some() {
            return Err(Error::Refused {
                reason: format!(
                    "it looks like a config group override, but config group '{}' does not exist",
                    p.key
                ),
                text,
                origin,
                hint: None,
                implied,
            });
        }
        let before = config.clone();
        if let Err(refusal) = tree::apply(config, p.action, &p.key, p.value.as_ref()) {
            return Err(match refusal {
                Refusal::NotAKey => {
                    let keys = suggestions.get_or_insert_with(|| {
                        let mut keys = Vec::new();
                        before.keys("", &mut keys);
                        keys
                    });
                    Error::UnknownOverride {
                        suggestion: closest(keys, &p.key),
                        key: p.key,
                        origin,
                        implied,
                    }
                }
                Refusal::AlreadyThere => Error::Refused {
                    reason: format!("an item is already at `{}`", p.key),
                    hint: Some(format!(
                        "drop the + to change it ({}), or write ++ to add or change it",
                        text.trim_start_matches('+')
                    )),
                    text,
                    origin,
                    implied,
                },
                Refusal::NothingToDelete => Error::Refused {
                    reason: format!(
                        "`{}` does not exist (or is null or ???), so there is nothing to delete",
                        p.key
                    ),
                    text,
                    origin,
                    hint: None,
                    implied,
                },
                Refusal::DifferentValue(actual) => Error::Refused {
                    reason: format!("the value of `{}` is {actual}", p.key),
                    text,
                    origin,
                    hint: Some(format!("write ~{} to delete it whatever its value", p.key)),
                    implied,
                },
                Refusal::Other(reason) => Error::Refused {
                    reason,
                    text,
                    origin,
                    hint: None,
                    implied,
                },
            });
        }
    }
    Ok(())
}

fn is_sweep(v: &HydraValue) -> bool {
    match v {
        HydraValue::Sweep(_) => true,
        HydraValue::Call { name, args } => {
            name == "tag"
                || (matches!(name.as_str(), "sort" | "shuffle")
                    && (args.len() != 1 || args.iter().any(is_sweep)))
        }
        _ => false,
    }
}

fn config_error(fail: Fail, origin: &str) -> Error {
    match fail {
        Fail::Io { path, source } => Error::Unreadable { path, source },
        Fail::Invalid(e) => Error::Invalid(e),
        Fail::Refused(message) | Fail::Unsupported(message) => Error::Composition {
            origin: origin.to_string(),
            message,
        },
    }
}

/// The closest known key, if close enough to be a typo.
fn closest(keys: &[String], key: &str) -> Option<String> {
    keys.iter()
        .map(|k| (strsim::damerau_levenshtein(k, key), k))
        .min()
        .filter(|(distance, _)| *distance <= key.len().max(4) / 3 + 2)
        .map(|(_, k)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::jobspec::OverrideValue;

    fn raw(text: &str) -> Override {
        Override::parse(text).expect("override")
    }

    /// A config tree with verl's constructs: defaults with packages (`x@a.b`, `../g@p`),
    /// `_self_`, a plain config entry, `_target_`, interpolations, empty mappings, lists.
    fn snapshot() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = dir.path().join(CONFIG_DIR);
        for (path, text) in [
            (
                "ppo_trainer.yaml",
                "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - data@data: legacy_data\n  - reward_manager@reward_manager\n  - _self_\nactor_rollout_ref:\n  hybrid_engine: true\ntrainer:\n  nnodes: 1\n  total_training_steps: null\n  logger: [console, wandb]\n  default_local_dir: checkpoints/${trainer.nnodes}\nalgorithm:\n  _target_: verl.trainer.config.AlgoConfig\n  kl_ctrl: {type: fixed}\n",
            ),
            (
                "actor/dp_actor.yaml",
                "defaults:\n  - ../optim@optim: fsdp\n  - actor\n  - _self_\nstrategy: fsdp\n",
            ),
            (
                "actor/actor.yaml",
                "strategy: ???\nrollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}\nprofiler:\n  tool: ${oc.select:global_profiler.tool,null}\n",
            ),
            ("actor/megatron_actor.yaml", "megatron: {tp: 1}\n"),
            ("optim/fsdp.yaml", "lr: 1e-6\n"),
            (
                "data/legacy_data.yaml",
                "train_files: x\napply_chat_template_kwargs: {}\n",
            ),
            ("reward_manager.yaml", "name: naive\n"),
        ] {
            let file = c.join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(file, text).expect("write");
        }
        dir
    }

    fn verdict(dir: &Path, overrides: &[&str]) -> Result<Outcome, Error> {
        let o: Vec<Override> = overrides.iter().map(|t| raw(t)).collect();
        check(dir, "ppo_trainer", &o, 0)
    }

    #[test]
    fn composed_keys_follow_packages_and_defaults() {
        let dir = snapshot();
        for ok in [
            "actor_rollout_ref.actor.optim.lr=1",
            "actor_rollout_ref.actor.strategy=x",
            "actor_rollout_ref.actor.profiler.tool=x",
            "reward_manager.name=x",
            "data.train_files=y",
            "algorithm._target_=x",
            "+algorithm.kl_ctrl.new=1",
            "+actor_rollout_ref.actor.profiler.tool=x",
            "+trainer.total_training_steps=3",
            "~trainer.nnodes",
            "~actor_rollout_ref.actor.strategy",
            "++trainer.nnodes=2",
            "+data.apply_chat_template_kwargs.x=1",
            "trainer.logger.0=x",
            "actor@actor_rollout_ref.actor=megatron_actor",
            "hydra.run.dir=/x",
            "hydra/job_logging=disabled",
            "+hydra.job.env_set.X=1",
        ] {
            assert!(
                verdict(dir.path(), &[ok]).is_ok(),
                "{ok}: {:?}",
                verdict(dir.path(), &[ok])
            );
        }
        assert!(
            verdict(
                dir.path(),
                &[
                    "actor@actor_rollout_ref.actor=megatron_actor",
                    "actor_rollout_ref.actor.megatron.tp=2"
                ]
            )
            .is_ok()
        );
        for bad in [
            "trainer.nnodez=2",
            "+trainer.nnodes=2",
            "~trainer.nope",
            "~trainer.total_training_steps",
            "data.apply_chat_template_kwargs.x=1",
            "+actor_rollout_ref.actor.rollout_n=3",
            "+trainer.default_local_dir=x",
            "trainer.logger.5=x",
            "trainer.nnodes=1,2",
            "actor=megatron_actor",
            "data@data=legacy_data",
            "actor@actor_rollout_ref.actor=nope",
            "++actor@actor_rollout_ref.actor=megatron_actor",
            "trainer.nnodes@foo=1",
            "hydra.nope=1",
            "hydra/job_logging=nope",
            "hydra.job.env_set.X=1",
        ] {
            assert!(
                verdict(dir.path(), &[bad]).is_err(),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn typos_get_a_suggestion_and_broken_configs_are_their_own_error() {
        let dir = snapshot();
        match verdict(dir.path(), &["trainer.nnodez=2"]) {
            Err(Error::UnknownOverride { suggestion, .. }) => {
                assert_eq!(suggestion.as_deref(), Some("trainer.nnodes"));
            }
            other => panic!("{other:?}"),
        }
        let file = dir.path().join(CONFIG_DIR).join("optim/fsdp.yaml");
        std::fs::write(&file, "lr: [1\n").expect("write");
        let e = verdict(dir.path(), &["trainer.nnodes=2"]).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains("optim/fsdp.yaml:"), "{e}");
        assert_eq!(e.exit(), Exit::Usage);
        std::fs::remove_file(&file).expect("rm");
        let e = verdict(dir.path(), &["trainer.nnodes=2"]).unwrap_err();
        assert!(
            matches!(&e, Error::Composition { message, .. } if message.contains("Could not find")),
            "{e}"
        );
    }

    #[test]
    fn an_unreadable_config_is_a_failure_not_bad_input() {
        // Root reads any file here, so the I/O failure (EACCES on root-squashed NFS, EIO)
        // is built by hand: the operation ran and failed (1), the input may be fine.
        let e = Error::Unreadable {
            path: PathBuf::from("/s/verl/trainer/config/ppo_trainer.yaml"),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(e.exit(), Exit::Failed);
        assert!(e.to_string().contains("ppo_trainer.yaml"), "{e}");
    }

    #[test]
    fn yaml_values_are_checked_as_the_text_hydra_sees() {
        let dir = snapshot();
        let o = Override {
            key: "trainer.logger".into(),
            value: OverrideValue::Yaml(serde_yaml::from_str("[console, 'a b']").expect("yaml")),
        };
        assert!(check(dir.path(), "ppo_trainer", &[o], 0).is_ok());
        let e = check(dir.path(), "ppo_trainer", &[raw("trainer.nnodes=a=b")], 0).unwrap_err();
        assert!(matches!(e, Error::Syntax { .. }), "{e}");
        let none = check(dir.path(), "sft_trainer_engine", &[raw("a=1")], 0).expect("ok");
        assert!(matches!(none, Outcome::NotChecked { .. }));
    }

    /// verl 0.8.0's own configs (tests/fixtures/verl-0.8.0-config, see its NOTICE): its
    /// PPO defaults choose the actor, ref and critic by `${model_engine}`.
    fn verl_0_8_0() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verl-0.8.0-config")
    }

    fn verl_verdict(config: &str, overrides: &[&str]) -> Result<Outcome, Error> {
        let o: Vec<Override> = overrides.iter().map(|t| raw(t)).collect();
        check(&verl_0_8_0(), config, &o, 0)
    }

    #[test]
    fn the_composed_config_gives_the_values_the_job_runs_with() {
        // verl's rollout.n_gpus_per_node is `${oc.select:trainer.n_gpus_per_node,8}`.
        let value = |overrides: &[&str], key: &str| match verl_verdict("ppo_trainer", overrides) {
            Ok(Outcome::Checked { config, .. }) => config.scalar(key),
            other => panic!("{other:?}"),
        };
        let key = "actor_rollout_ref.rollout.n_gpus_per_node";
        assert_eq!(value(&[], key).as_deref(), Some("8"));
        assert_eq!(
            value(&["trainer.n_gpus_per_node=2"], key).as_deref(),
            Some("2")
        );
        assert_eq!(
            value(&["trainer.n_gpus_per_node=2", &format!("{key}=1")], key).as_deref(),
            Some("1")
        );
        assert_eq!(value(&[], "trainer.nnodes").as_deref(), Some("1"));
        assert_eq!(value(&[], "actor_rollout_ref.rollout.name"), None);
    }

    #[test]
    fn verl_0_8_0_interpolated_defaults_follow_model_engine() {
        for ok in [
            &["trainer.total_training_steps=3"][..],
            &["actor_rollout_ref.rollout.name=vllm"],
            &["algorithm.adv_estimator=grpo"],
            &[
                "critic.optim.lr=1e-5",
                "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            ],
            &[
                "model_engine=megatron",
                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            ],
            &["actor@actor_rollout_ref.actor=megatron_actor"],
        ] {
            let verdict = verl_verdict("ppo_trainer", ok);
            assert!(
                matches!(verdict, Ok(Outcome::Checked { .. })),
                "{ok:?}: {verdict:?}"
            );
        }
        match verl_verdict("ppo_trainer", &["trainer.save_frq=1"]) {
            Err(Error::UnknownOverride { suggestion, .. }) => {
                assert_eq!(suggestion.as_deref(), Some("trainer.save_freq"));
            }
            other => panic!("{other:?}"),
        }
        // dp's actor has no megatron section: the interpolation chose dp_actor.
        assert!(matches!(
            verl_verdict(
                "ppo_trainer",
                &["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"]
            ),
            Err(Error::UnknownOverride { .. })
        ));
        // An engine without an actor of its name: Hydra's `Could not find`.
        let e = verl_verdict("ppo_trainer", &["model_engine=nope"]).unwrap_err();
        assert!(e.to_string().contains("model_engine/nope"), "{e}");
        let sft = verl_verdict("sft_trainer_engine", &["optim.lr=1e-5", "model.path=/m"]);
        assert!(matches!(sft, Ok(Outcome::Checked { .. })), "{sft:?}");
    }

    #[test]
    fn a_key_given_twice_is_applied_twice_as_hydra_does() {
        let dir = snapshot();
        for twice in [
            &["trainer.nnodes=2", "trainer.nnodes=3"][..],
            &["trainer.nnodes=2", "++trainer.nnodes=3"],
            &["+trainer.a=1", "trainer.a=2"],
        ] {
            let v = verdict(dir.path(), twice);
            assert!(matches!(v, Ok(Outcome::Checked { .. })), "{twice:?}: {v:?}");
        }
        // Each is still judged where it stands: the second `+` finds the key there.
        assert!(verdict(dir.path(), &["+trainer.a=1", "+trainer.a=2"]).is_err());
    }
}
