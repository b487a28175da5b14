//! The sbatch options a user's own sbatch argument (the profile's `slurm.sbatch_args`,
//! `--sbatch-arg`) may not set: those argus writes into the batch script itself
//! ([`OWNED`]: sbatch would take whichever comes last without a word; the script's writer
//! is tested to write no option outside it), and those argus cannot run under ([`SHAPE`]).

/// (long name, short letter, what sets it instead).
pub const OWNED: &[(&str, Option<char>, &str)] = &[
    (
        "job-name",
        Some('J'),
        "argus names the job argus-<run id>, by which it finds the run again",
    ),
    ("nodes", Some('N'), "set it with --nodes or slurm.nodes"),
    (
        "ntasks-per-node",
        None,
        "argus runs one task per node: its node step",
    ),
    (
        "ntasks",
        Some('n'),
        "argus runs one task per node: its node step",
    ),
    (
        "output",
        Some('o'),
        "argus writes the batch output where it follows it (runs/<run id>/)",
    ),
    (
        "error",
        Some('e'),
        "argus follows the batch step's errors in its output file",
    ),
    (
        "gres",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "gpus-per-node",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "gpus",
        Some('G'),
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "partition",
        Some('p'),
        "set it with --partition or slurm.partition",
    ),
    (
        "account",
        Some('A'),
        "set it with --account or slurm.account",
    ),
    ("qos", Some('q'), "set it with --qos or slurm.qos"),
    ("time", Some('t'), "set it with --time or slurm.time"),
];

/// Options argus does not write but cannot run under: they change the allocation's shape
/// (more nodes, several jobs, GPUs per task) or what sbatch answers. (long name, short
/// letter, why).
pub const SHAPE: &[(&str, Option<char>, &str)] = &[
    (
        "gpus-per-task",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "gpus-per-socket",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "tres-per-task",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "tres-per-node",
        None,
        "set GPUs with --gpus-per-node or slurm.gpus_per_node",
    ),
    (
        "ntasks-per-gpu",
        None,
        "argus runs one task per node: its node step",
    ),
    (
        "nodelist",
        Some('w'),
        "a node list longer than --nodes raises the node count, and argus lays its cluster out on exactly --nodes nodes: steer placement with --exclude or --constraint",
    ),
    (
        "nodefile",
        Some('F'),
        "a node file longer than --nodes raises the node count, and argus lays its cluster out on exactly --nodes nodes: steer placement with --exclude or --constraint",
    ),
    (
        "array",
        Some('a'),
        "argus runs one allocation per run; an array would start several under one name",
    ),
    (
        "het-job",
        None,
        "argus's allocation is one homogeneous job (head and workers alike)",
    ),
    (
        "wait",
        Some('W'),
        "argus follows the job itself; sbatch --wait would hold back the job id until the end",
    ),
    (
        "test-only",
        None,
        "argus needs the job id of a real submission (`argus slurm submit --dry-run` prints the script)",
    ),
    (
        "parsable",
        None,
        "argus passes it itself and reads sbatch's answer in that form",
    ),
    (
        "clusters",
        Some('M'),
        "argus follows, cancels and cleans up its job on the cluster it submits to: another cluster's job of the same number is someone else's",
    ),
    (
        "jobid",
        None,
        "Slurm numbers argus's job; another number could be someone else's job",
    ),
    (
        "wrap",
        None,
        "argus's batch script is the job; --wrap would replace it",
    ),
    (
        "help",
        Some('h'),
        "sbatch would print its help instead of submitting",
    ),
    (
        "usage",
        None,
        "sbatch would print its usage instead of submitting",
    ),
    (
        "version",
        Some('V'),
        "sbatch would print its version instead of submitting",
    ),
];

/// sbatch's short options that take no value (they may lead a group such as `-HN2`).
const SHORT_FLAGS: &str = "HkOQsv";

/// The option of argus's own (or one it cannot run under) that `arg` sets, as
/// (`--long`, why it is refused and what to do instead). `--name=v`, `--name v` (the
/// option word alone) and getopt's unambiguous abbreviations (`--node=2`, `--out=x`),
/// `-N2`, `-N 2` and `-HN2` all count.
pub fn owned_option(arg: &str) -> Option<(String, String)> {
    let why = |owned: bool, why: &str| {
        if owned {
            format!(
                "argus writes it into the batch script itself, and sbatch would silently take the last one: {why}"
            )
        } else {
            why.to_string()
        }
    };
    let all = || {
        OWNED
            .iter()
            .map(|o| (true, o))
            .chain(SHAPE.iter().map(|o| (false, o)))
    };
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or_default();
        if name.is_empty() {
            return None;
        }
        // An exact name first: `--gpus` is its own option, not short for `--gpus-per-node`.
        let found = all()
            .find(|(_, (n, _, _))| *n == name)
            .or_else(|| all().find(|(_, (n, _, _))| n.starts_with(name)));
        return found.map(|(owned, (n, _, w))| (format!("--{n}"), why(owned, w)));
    }
    let short = arg.strip_prefix('-')?;
    for c in short.chars() {
        if let Some((owned, (n, _, w))) = all().find(|(_, (_, s, _))| *s == Some(c)) {
            return Some((format!("--{n} (-{c})"), why(owned, w)));
        }
        if !SHORT_FLAGS.contains(c) {
            // The rest is this option's value.
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_an_owned_option_is_found() {
        for arg in [
            "--nodes=4",
            "--nodes",
            "--node=4",
            "-N4",
            "-N",
            "-HN2",
            "--output=/tmp/x",
            "-o/tmp/x",
            "--out=x",
            "--job-name=x",
            "-Jx",
            "--gres=gpu:2",
            "--time=1:00:00",
            "--ntasks=3",
            "--nodelist=a,b",
            "-wnode1",
            "-F/tmp/nodes",
            "--array=0-3",
            "-a1-2",
            "--tres-per-task=gres/gpu:1",
            "--gpus-per-task=1",
            "--gpus-per-socket=1",
            "--ntasks-per-gpu=2",
            "--het-job",
            "--wait",
            "-W",
            "--test-only",
            "--parsable",
            "--clusters=other",
            "--cluster=c",
            "-Mc",
            "-Ma",
            "--jobid=123",
            "--wrap=id",
            "-h",
            "--help",
            "--usage",
            "-V",
            "--version",
        ] {
            assert!(owned_option(arg).is_some(), "{arg}");
        }
        for arg in [
            "--exclusive",
            "--mem=4G",
            "--exclude=a,b",
            "--time-min=10",
            "--gres-flags=enforce-binding",
            "-H",
            "--requeue",
            "--constraint=x",
            "-C",
        ] {
            assert_eq!(owned_option(arg), None, "{arg}");
        }
        assert_eq!(owned_option("-N3").unwrap().0, "--nodes (-N)");
    }
}
