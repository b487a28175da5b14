//! verl workloads turned into a command line: the entrypoint module and the Hydra
//! overrides the JobSpec's fields imply, then the user's overrides (last, so they win; a
//! key the user gives twice is passed twice, and Hydra keeps the last value).
//! Values are written in Hydra's syntax (and must read back unchanged), then each word is
//! quoted for the POSIX shell Ray runs the entrypoint with (shlex's checked quoting); a
//! word no shell can carry (a NUL byte) is refused. Pure.

use crate::config::jobspec::{Override, OverrideValue, Overrides, Workload};
use crate::exit::{Classify, Exit};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("override `{key}` cannot be passed to Hydra: {reason}")]
    Unrepresentable { key: String, reason: String },
    #[error("override {key:?} contains a NUL byte, which no shell command line can carry")]
    Nul { key: String },
    #[error("the custom entrypoint contains a NUL byte, which no shell command line can carry")]
    NulInCustom,
    #[error("the entrypoint runs `{script}`, which is not in the code snapshot {code_path}")]
    ScriptNotInSnapshot { script: String, code_path: String },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        Exit::Usage
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Unrepresentable { .. } => Some(
                "Hydra's syntax cannot write that mapping key (no quotes, no `#`, no non-ASCII in keys); pass the value another way".into(),
            ),
            Error::Nul { .. } | Error::NulInCustom => Some("remove the NUL byte".into()),
            Error::ScriptNotInSnapshot { .. } => Some(
                "a job runs in jobs/<id>/work/, so a relative script path is the code snapshot's (argus runs it from there): fix the path, snapshot code that has the script, or give an absolute path (--no-check skips this check)".into(),
            ),
        }
    }
}

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
/// The Hydra primary config each module composes (`@hydra.main(config_name=...)`).
pub const PPO_CONFIG: &str = "ppo_trainer";
pub const SFT_CONFIG: &str = "sft_trainer_engine";
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

/// The overrides in effect: implied first, then the user's; a user's key replaces the
/// implied one of that key (so the user's value wins).
pub fn effective_overrides(i: &EntrypointInputs) -> Vec<Override> {
    let (mut implied, user) = effective_parts(i);
    implied.extend(user);
    implied
}

/// A custom entrypoint whose program is Python or a shell given a relative script path
/// (`python3 my_script.py`, `bash run.sh`): the path is the code snapshot's, so it becomes
/// `<code_path>/<path>` (the job runs in `jobs/<id>/work/`, where the script is not).
/// `in_snapshot` says whether the snapshot has a file (None: it cannot be looked at, and the
/// path is taken as the snapshot's); a `.py` or `.sh` script it does not have is refused.
/// Anything else (`-m module`, an absolute or `$VAR` path, `..`, a command before) is left
/// as written.
pub fn script_in_snapshot(
    custom: &str,
    code_path: &str,
    in_snapshot: &dyn Fn(&str) -> Option<bool>,
) -> Result<String, Error> {
    let mut words = custom
        .split([' ', '\t'])
        .scan(0usize, |at, word| {
            let start = *at;
            *at += word.len() + 1;
            Some((start, word))
        })
        .filter(|(_, w)| !w.is_empty());
    let Some((_, program)) = words.next() else {
        return Ok(custom.to_string());
    };
    let python = program == "python"
        || program.strip_prefix("python3").is_some_and(|v| {
            v.is_empty()
                || v.strip_prefix('.')
                    .is_some_and(|n| n.parse::<u32>().is_ok())
        });
    let shell = matches!(program, "sh" | "bash");
    if !python && !shell {
        return Ok(custom.to_string());
    }
    let mut script = None;
    while let Some((at, word)) = words.next() {
        match word {
            "-m" | "-c" => return Ok(custom.to_string()),
            // Options of python3 that take the next word.
            "-W" | "-X" | "-Q" if python => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => {
                script = Some((at, w));
                break;
            }
        }
    }
    let Some((at, word)) = script else {
        return Ok(custom.to_string());
    };
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    let relative = word.trim_start_matches("./");
    if !plain || word.starts_with('/') || relative.split('/').any(|part| part == "..") {
        return Ok(custom.to_string());
    }
    let script_like = if python {
        relative.ends_with(".py")
    } else {
        relative.ends_with(".sh")
    };
    match in_snapshot(relative) {
        Some(false) if script_like => {
            return Err(Error::ScriptNotInSnapshot {
                script: word.to_string(),
                code_path: code_path.to_string(),
            });
        }
        Some(false) => return Ok(custom.to_string()),
        None if !script_like => return Ok(custom.to_string()),
        Some(true) | None => {}
    }
    let path = shell_quote(&format!("{code_path}/{relative}")).ok_or(Error::NulInCustom)?;
    Ok(format!(
        "{}{path}{}",
        &custom[..at],
        &custom[at + word.len()..]
    ))
}

/// The driver's command run in `work_dir` (made first): every relative path a job writes,
/// and anything a Hydra app puts in its working directory, lands on the shared storage.
pub fn in_work_dir(work_dir: &str, command: &str) -> Result<String, Error> {
    // Made of the validated mount and submission id: unquotable only if those checks broke.
    let dir = shell_quote(work_dir).ok_or(Error::NulInCustom)?;
    Ok(format!("mkdir -p {dir} && cd {dir} && {command}"))
}

/// [`effective_overrides`] in two parts: the implied ones the user's leave, and the user's,
/// every one in its order: a key given twice reaches Hydra twice, which applies both (the
/// last value wins; verl's own example scripts rely on it).
pub fn effective_parts(i: &EntrypointInputs) -> (Vec<Override>, Vec<Override>) {
    let mut implied = implied_overrides(i);
    for o in &i.user_overrides {
        let bare = o.key.trim_start_matches('+');
        implied.retain(|x| x.key.trim_start_matches('+') != bare);
    }
    (implied, i.user_overrides.clone())
}

/// The overrides that give a key again (without its `+`, `++` or `~`): (the position of
/// the previous one, its own), in order.
pub fn repeated(overrides: &[Override]) -> Vec<(usize, usize)> {
    let mut last: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, o) in overrides.iter().enumerate() {
        if let Some(before) = last.insert(o.key.trim_start_matches(['+', '~']), i) {
            out.push((before, i));
        }
    }
    out
}

/// The Hydra config the workload's entrypoint composes (None for custom).
pub fn config_name(workload: Workload) -> Option<&'static str> {
    match workload {
        Workload::Ppo | Workload::Grpo => Some(PPO_CONFIG),
        Workload::Sft => Some(SFT_CONFIG),
        Workload::Custom => None,
    }
}

/// The words of the command line, before shell quoting.
pub fn words(i: &EntrypointInputs) -> Result<Vec<String>, Error> {
    let module = match i.workload {
        Workload::Custom => return Ok(vec![i.custom.clone().unwrap_or_default()]),
        Workload::Ppo | Workload::Grpo => PPO_MODULE,
        Workload::Sft => SFT_MODULE,
    };
    let mut words = vec!["python3".to_string(), "-m".to_string(), module.to_string()];
    for o in effective_overrides(i) {
        words.push(override_word(&o)?);
    }
    Ok(words)
}

/// `key=value` with the value in Hydra's syntax, proven to read back as written.
fn override_word(o: &Override) -> Result<String, Error> {
    match &o.value {
        OverrideValue::Yaml(v) => crate::hydra::try_format_value(v)
            .map(|value| format!("{}={value}", o.key))
            .map_err(|e| Error::Unrepresentable {
                key: o.key.clone(),
                reason: e.to_string(),
            }),
        OverrideValue::Raw(_) | OverrideValue::Delete => Ok(o.to_string()),
    }
}

/// The inputs as shown and recorded: secret override values replaced by `<redacted>`
/// before Hydra formatting and shell quoting ([`Overrides::redacted`]).
pub fn redacted(i: &EntrypointInputs) -> EntrypointInputs {
    EntrypointInputs {
        user_overrides: Overrides(i.user_overrides.clone()).redacted().0,
        ..i.clone()
    }
}

/// The shell command Ray runs as the job's driver.
pub fn build(i: &EntrypointInputs) -> Result<String, Error> {
    if i.workload == Workload::Custom {
        let custom = i.custom.clone().unwrap_or_default();
        if custom.contains('\0') {
            return Err(Error::NulInCustom);
        }
        return Ok(custom);
    }
    let words = words(i)?;
    let mut quoted = Vec::with_capacity(words.len());
    for word in &words {
        quoted.push(shell_quote(word).ok_or_else(|| Error::Nul {
            key: word.split('=').next().unwrap_or(word).to_string(),
        })?);
    }
    Ok(quoted.join(" "))
}

/// A word as the shell reads it back: as is when it holds only characters no POSIX shell
/// treats specially after the command name (letters, digits, `_-./:=,+@%`), else quoted by
/// shlex. None when no quoting can carry it (a NUL byte).
pub fn shell_quote(word: &str) -> Option<String> {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=,+@%".contains(c));
    if plain {
        return Some(word.to_string());
    }
    shlex::try_quote(word).ok().map(|q| q.into_owned())
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
        let e = build(&i).unwrap();
        assert!(!e.contains("rollout.name=vllm"), "{e}");
        assert!(e.ends_with(r#"'trainer.logger=[console]' actor_rollout_ref.rollout.name=sglang "+trainer.extra='a b'""#), "{e}");
        assert!(
            e.contains(" trainer.default_local_dir=/mnt/shared/jobs/j1/checkpoints "),
            "{e}"
        );
    }

    #[test]
    fn grpo_has_no_critic_and_samples_several_responses() {
        let e = build(&inputs(Workload::Grpo)).unwrap();
        assert!(e.contains("algorithm.adv_estimator=grpo"));
        assert!(e.contains("actor_rollout_ref.rollout.n=5"));
        assert!(!e.contains("critic."));
    }

    #[test]
    fn sft_runs_the_ray_trainer_on_cpu_by_default() {
        let e = build(&inputs(Workload::Sft)).unwrap();
        assert!(e.starts_with("python3 -m verl.trainer.sft_trainer_ray "));
        assert!(e.contains("trainer.device=cpu"));
        assert!(e.contains("model.path=/mnt/shared/common/hf/hub/"));
    }

    #[test]
    fn values_no_shell_can_carry_are_refused_naming_the_key() {
        let mut i = inputs(Workload::Ppo);
        i.user_overrides = vec![Override {
            key: "trainer.experiment_name".into(),
            value: OverrideValue::Yaml(serde_yaml::Value::String("a\0; rm -rf /".into())),
        }];
        let e = build(&i).unwrap_err();
        assert!(
            matches!(&e, Error::Nul { key } if key == "trainer.experiment_name"),
            "{e}"
        );
        assert_eq!(e.exit(), Exit::Usage);
        i.user_overrides = vec![Override::parse("trainer.x=a\0b").unwrap()];
        assert!(matches!(build(&i), Err(Error::Nul { .. })));
        i.user_overrides = vec![Override {
            key: "data.kwargs".into(),
            value: OverrideValue::Yaml(serde_yaml::from_str("{\"it's\": 1}").unwrap()),
        }];
        assert!(matches!(build(&i), Err(Error::Unrepresentable { .. })));
        let mut c = inputs(Workload::Custom);
        c.custom = Some("echo a\0b".into());
        assert!(matches!(build(&c), Err(Error::NulInCustom)));
    }

    #[test]
    fn every_word_comes_back_from_the_shell_parser() {
        let mut i = inputs(Workload::Ppo);
        i.user_overrides = [
            "it's", "a b", "$HOME", "`id`", "a\nb", "~x", "#c", "{a,b}", "\u{e9}", "*", "!x", "\\'",
        ]
        .iter()
        .enumerate()
        .map(|(n, s)| Override {
            key: format!("+k{n}"),
            value: OverrideValue::Yaml(serde_yaml::Value::String(s.to_string())),
        })
        .collect();
        let words = words(&i).unwrap();
        let line = build(&i).unwrap();
        assert_eq!(shlex::split(&line), Some(words), "{line}");
    }

    #[test]
    fn a_key_given_twice_reaches_hydra_twice_and_the_last_wins() {
        let mut i = inputs(Workload::Ppo);
        i.user_overrides = [
            "trainer.save_freq=7",
            "data.train_batch_size=8",
            "trainer.save_freq=9",
        ]
        .iter()
        .map(|t| Override::parse(t).unwrap())
        .collect();
        let e = build(&i).unwrap();
        assert!(
            !e.contains("trainer.save_freq=5"),
            "the implied value is replaced: {e}"
        );
        assert!(
            e.ends_with(" trainer.save_freq=7 data.train_batch_size=8 trainer.save_freq=9"),
            "both, in order, as Hydra gets them from verl's own scripts: {e}"
        );
        assert_eq!(repeated(&i.user_overrides), [(0, 2)]);
        i.user_overrides
            .push(Override::parse("+trainer.save_freq=1").unwrap());
        assert_eq!(repeated(&i.user_overrides), [(0, 2), (2, 3)]);
    }

    #[test]
    fn a_relative_script_runs_from_the_snapshot() {
        let code = "/mnt/shared/common/code/q/abc";
        let has = |rel: &str| Some(["my_script.py", "sub/run.py", "run.sh"].contains(&rel));
        let unknown = |_: &str| None;
        for (given, want) in [
            (
                "python3 my_script.py --x 1",
                format!("python3 {code}/my_script.py --x 1"),
            ),
            ("python3 ./sub/run.py", format!("python3 {code}/sub/run.py")),
            (
                "  python -u -W ignore my_script.py",
                format!("  python -u -W ignore {code}/my_script.py"),
            ),
            ("bash run.sh a", format!("bash {code}/run.sh a")),
            ("python3 -m quickstart", "python3 -m quickstart".to_string()),
            ("python3 -c 'print(1)'", "python3 -c 'print(1)'".to_string()),
            ("python3 /abs/x.py", "python3 /abs/x.py".to_string()),
            ("python3 data.txt", "python3 data.txt".to_string()),
            ("python3 ../x.py", "python3 ../x.py".to_string()),
            (
                "echo hi && python3 my_script.py",
                "echo hi && python3 my_script.py".to_string(),
            ),
            (
                "python3 $ARGUS_CODE_PATH/x.py",
                "python3 $ARGUS_CODE_PATH/x.py".to_string(),
            ),
        ] {
            assert_eq!(
                script_in_snapshot(given, code, &has).unwrap(),
                want,
                "{given}"
            );
        }
        let e = script_in_snapshot("python3 missing.py", code, &has).unwrap_err();
        assert!(
            matches!(&e, Error::ScriptNotInSnapshot { script, .. } if script == "missing.py"),
            "{e}"
        );
        assert_eq!(e.exit(), Exit::Usage);
        assert!(
            e.hint().unwrap_or_default().contains("jobs/<id>/work/"),
            "{e}"
        );
        // Where the snapshot cannot be looked at, the path is still the snapshot's.
        assert_eq!(
            script_in_snapshot("python3 missing.py", code, &unknown).unwrap(),
            format!("python3 {code}/missing.py")
        );
    }
}
