//! The batch script `argus slurm submit` hands to `sbatch`. Pure: values in, text out.
//!
//! `#SBATCH` lines are read by sbatch, not by a shell: their values must be one plain
//! word (sbatch has no quoting a value could rely on), so anything else is refused. The
//! one shell line, the `argus slurm run` command, quotes every word with shlex's checked
//! quoting; a word no quoting can carry is refused. No shell text is ever built from an
//! unchecked value.

use std::path::PathBuf;

use crate::config::profile::{SlurmSection, sbatch};
use crate::submit::entrypoint::shell_quote;

/// The allocation, as the profile's `slurm:` section and the flags ask for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time: Option<String>,
    pub sbatch_args: Vec<String>,
}

/// What the flags of `argus slurm submit` say (each wins over the profile).
#[derive(Debug, Clone, Default)]
pub struct AllocationFlags {
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time: Option<String>,
    pub sbatch_args: Vec<String>,
}

impl Allocation {
    /// The flags over the profile's section; one node and no GPU when neither says.
    pub fn resolve(section: Option<&SlurmSection>, flags: &AllocationFlags) -> Allocation {
        let section = section.cloned().unwrap_or_default();
        let mut sbatch_args = section.sbatch_args;
        sbatch_args.extend(flags.sbatch_args.iter().cloned());
        Allocation {
            nodes: flags.nodes.or(section.nodes).unwrap_or(1),
            gpus_per_node: flags.gpus_per_node.or(section.gpus_per_node).unwrap_or(0),
            partition: flags.partition.clone().or(section.partition),
            account: flags.account.clone().or(section.account),
            qos: flags.qos.clone().or(section.qos),
            time: flags.time.clone().or(section.time),
            sbatch_args,
        }
    }
}

/// Everything the script holds.
#[derive(Debug, Clone)]
pub struct ScriptInputs {
    pub run_id: String,
    pub allocation: Allocation,
    /// argus's binary, as the nodes see it (a shared path).
    pub argus: PathBuf,
    /// The run's profile, as the nodes see it.
    pub profile: PathBuf,
    /// Where Slurm writes the batch step's output (`%j` is the job id).
    pub output: PathBuf,
    /// The run has a restart policy: Slurm requeues the batch (node failure, preemption,
    /// argus before the time limit) and warns the batch step [`SIGNAL_GRACE_S`] before
    /// the allocation's end.
    pub supervised: bool,
}

/// How long before the allocation's end Slurm sends the batch step USR1 (a supervised
/// run stops its job and requeues itself then).
pub const SIGNAL_GRACE_S: u32 = 120;

/// The options a supervised run's script sets, which a user's sbatch argument may not
/// name (sbatch takes any unique prefix of a long option).
const SUPERVISED: [&str; 4] = ["requeue", "no-requeue", "signal", "open-mode"];

/// The option of [`SUPERVISED`] that `arg` names, if any.
fn supervised_option(arg: &str) -> Option<&'static str> {
    let name = arg.strip_prefix("--")?.split('=').next()?;
    if name.len() < 2 {
        return None;
    }
    SUPERVISED
        .iter()
        .find(|o| **o == name)
        .or_else(|| SUPERVISED.iter().find(|o| o.starts_with(name)))
        .copied()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error(
        "{what} {value:?} cannot go into an #SBATCH line: it must be one word of letters, digits and _-.:,=+/@%"
    )]
    NotPlain { what: String, value: String },
    #[error("{what} {value:?} cannot be quoted for the shell")]
    Unquotable { what: String, value: String },
    #[error("{what} must be at least 1")]
    Zero { what: String },
    #[error("sbatch argument {arg:?} sets {option}: {why}")]
    Owned {
        arg: String,
        option: String,
        why: String,
    },
}

/// A value an `#SBATCH` line can carry as is.
fn plain(what: &str, value: &str) -> Result<String, ScriptError> {
    let ok = !value.is_empty()
        && value.len() <= 256
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:,=+/@%".contains(c));
    if ok {
        Ok(value.to_string())
    } else {
        Err(ScriptError::NotPlain {
            what: what.into(),
            value: value.into(),
        })
    }
}

fn quoted(what: &str, value: &str) -> Result<String, ScriptError> {
    shell_quote(value).ok_or_else(|| ScriptError::Unquotable {
        what: what.into(),
        value: value.into(),
    })
}

/// The `#SBATCH` options, in order (also what `--dry-run` shows).
pub fn sbatch_options(inputs: &ScriptInputs) -> Result<Vec<String>, ScriptError> {
    let a = &inputs.allocation;
    if a.nodes == 0 {
        return Err(ScriptError::Zero {
            what: "--nodes".into(),
        });
    }
    let mut out = vec![
        format!("--job-name=argus-{}", plain("run id", &inputs.run_id)?),
        format!("--nodes={}", a.nodes),
        "--ntasks-per-node=1".to_string(),
        format!(
            "--output={}",
            plain("output path", &inputs.output.to_string_lossy())?
        ),
    ];
    if a.gpus_per_node > 0 {
        out.push(format!("--gres=gpu:{}", a.gpus_per_node));
    }
    for (flag, value) in [
        ("partition", &a.partition),
        ("account", &a.account),
        ("qos", &a.qos),
        ("time", &a.time),
    ] {
        if let Some(value) = value {
            out.push(format!("--{flag}={}", plain(&format!("--{flag}"), value)?));
        }
    }
    if inputs.supervised {
        out.push("--requeue".to_string());
        out.push(format!("--signal=B:USR1@{SIGNAL_GRACE_S}"));
        // A requeued batch writes the same output: what the earlier attempts printed stays.
        out.push("--open-mode=append".to_string());
    }
    for arg in &a.sbatch_args {
        if inputs.supervised
            && let Some(option) = supervised_option(arg)
        {
            return Err(ScriptError::Owned {
                arg: arg.clone(),
                option: format!("--{option}"),
                why: "the run has a restart policy (restart: or --restart): argus sets --requeue, --signal=B:USR1@120 and --open-mode=append itself".into(),
            });
        }
        if let Some((option, why)) = sbatch::owned_option(arg) {
            return Err(ScriptError::Owned {
                arg: arg.clone(),
                option,
                why,
            });
        }
        let arg = plain("sbatch argument", arg)?;
        if !arg.starts_with('-') {
            return Err(ScriptError::NotPlain {
                what: "sbatch argument (an option such as --exclusive)".into(),
                value: arg,
            });
        }
        out.push(arg);
    }
    Ok(out)
}

/// The whole script.
pub fn script(inputs: &ScriptInputs) -> Result<String, ScriptError> {
    let mut text = String::from("#!/bin/sh\n");
    text.push_str(&format!(
        "# argus run {}: written by `argus slurm submit`.\n",
        inputs.run_id
    ));
    for option in sbatch_options(inputs)? {
        text.push_str(&format!("#SBATCH {option}\n"));
    }
    let words = [
        quoted("argus binary", &inputs.argus.to_string_lossy())?,
        "--no-progress".to_string(),
        "-p".to_string(),
        quoted("profile path", &inputs.profile.to_string_lossy())?,
        "slurm".to_string(),
        "run".to_string(),
        quoted("run id", &inputs.run_id)?,
    ];
    text.push_str(
        "# The batch step: the containers on every node, Ray, the job; its exit code is the job's.\n",
    );
    text.push_str(&format!("exec {}\n", words.join(" ")));
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> ScriptInputs {
        ScriptInputs {
            run_id: "run-20260101-000000-abcd".into(),
            allocation: Allocation {
                nodes: 3,
                gpus_per_node: 1,
                time: Some("0:10:00".into()),
                ..Default::default()
            },
            argus: "/shared/bin/argus".into(),
            profile: "/shared/runs/r/slurm/profile.yaml".into(),
            output: "/shared/runs/r/slurm-%j.out".into(),
            supervised: false,
        }
    }

    #[test]
    fn a_supervised_run_is_requeued_and_warned_before_its_end() {
        let mut i = inputs();
        assert!(!script(&i).unwrap().contains("--requeue"));
        i.supervised = true;
        let text = script(&i).unwrap();
        assert!(text.contains("#SBATCH --requeue\n"), "{text}");
        assert!(text.contains("#SBATCH --signal=B:USR1@120\n"), "{text}");
        assert!(text.contains("#SBATCH --open-mode=append\n"), "{text}");
        for (arg, option) in [
            ("--no-requeue", "--no-requeue"),
            ("--signal=USR2@60", "--signal"),
            ("--sig=USR2@60", "--signal"),
            ("--open-mode=truncate", "--open-mode"),
            ("--requeue", "--requeue"),
        ] {
            let mut again = i.clone();
            again.allocation.sbatch_args = vec![arg.into()];
            let err = script(&again).unwrap_err();
            assert!(
                matches!(&err, ScriptError::Owned { option: o, .. } if o == option),
                "{arg}: {err}"
            );
        }
        // Without a policy they are the user's.
        let mut plain = inputs();
        plain.allocation.sbatch_args = vec!["--no-requeue".into(), "--signal=USR2@60".into()];
        assert!(script(&plain).is_ok());
    }

    #[test]
    fn the_script_asks_for_the_allocation_and_runs_the_batch_step() {
        let text = script(&inputs()).unwrap();
        assert!(text.contains("#SBATCH --nodes=3\n"));
        assert!(text.contains("#SBATCH --gres=gpu:1\n"));
        assert!(text.contains("#SBATCH --time=0:10:00\n"));
        assert!(text.contains("#SBATCH --output=/shared/runs/r/slurm-%j.out\n"));
        assert!(text.ends_with(
            "exec /shared/bin/argus --no-progress -p /shared/runs/r/slurm/profile.yaml slurm run run-20260101-000000-abcd\n"
        ));
        assert!(!text.contains("--partition"));
    }

    #[test]
    fn flags_win_over_the_profile() {
        let section = SlurmSection {
            partition: Some("gpu".into()),
            nodes: Some(2),
            gpus_per_node: Some(8),
            sbatch_args: vec!["--exclusive".into()],
            ..Default::default()
        };
        let flags = AllocationFlags {
            nodes: Some(4),
            qos: Some("high".into()),
            sbatch_args: vec!["--requeue".into()],
            ..Default::default()
        };
        let a = Allocation::resolve(Some(&section), &flags);
        assert_eq!(a.nodes, 4);
        assert_eq!(a.gpus_per_node, 8);
        assert_eq!(a.partition.as_deref(), Some("gpu"));
        assert_eq!(a.qos.as_deref(), Some("high"));
        assert_eq!(a.sbatch_args, ["--exclusive", "--requeue"]);
        assert_eq!(Allocation::resolve(None, &Default::default()).nodes, 1);
    }

    #[test]
    fn values_that_are_not_one_plain_word_are_refused() {
        for bad in ["gpu part", "a\nb", "x;rm -rf /", "$(id)", "", "a'b"] {
            let mut i = inputs();
            i.allocation.partition = Some(bad.into());
            assert!(
                matches!(script(&i), Err(ScriptError::NotPlain { .. })),
                "{bad:?}"
            );
        }
        let mut i = inputs();
        i.allocation.sbatch_args = vec!["exclusive".into()];
        assert!(script(&i).is_err());
        let mut i = inputs();
        i.allocation.nodes = 0;
        assert!(matches!(script(&i), Err(ScriptError::Zero { .. })));
    }

    /// Every option argus writes is in the one list of owned options, so a user's
    /// argument repeating any of them is refused, in every spelling.
    #[test]
    fn user_sbatch_args_cannot_repeat_an_option_argus_writes() {
        let mut i = inputs();
        i.allocation.partition = Some("gpu".into());
        i.allocation.account = Some("a".into());
        i.allocation.qos = Some("q".into());
        for option in sbatch_options(&i).unwrap() {
            let name = option.split('=').next().unwrap().to_string();
            for arg in [option.clone(), name.clone()] {
                let mut again = inputs();
                again.allocation.sbatch_args = vec!["--exclusive".into(), arg.clone()];
                assert!(
                    matches!(script(&again), Err(ScriptError::Owned { .. })),
                    "{arg} was accepted"
                );
            }
        }
        for (arg, option) in [
            ("-N4", "--nodes (-N)"),
            ("-o/tmp/x", "--output (-o)"),
            ("-Jname", "--job-name (-J)"),
            ("--node=4", "--nodes"),
        ] {
            let mut again = inputs();
            again.allocation.sbatch_args = vec![arg.into()];
            let err = script(&again).unwrap_err();
            assert!(err.to_string().contains(option), "{arg}: {err}");
        }
    }

    #[test]
    fn the_shell_line_quotes_paths() {
        let mut i = inputs();
        i.argus = "/opt/my tools/argus".into();
        i.profile = "/p/it's.yaml".into();
        let text = script(&i).unwrap();
        let last = text.lines().last().unwrap();
        let words = shlex::split(last.trim_start_matches("exec ")).unwrap();
        assert_eq!(words[0], "/opt/my tools/argus");
        assert_eq!(words[3], "/p/it's.yaml");
        i.argus = "/a\0b".into();
        assert!(matches!(script(&i), Err(ScriptError::Unquotable { .. })));
    }
}
