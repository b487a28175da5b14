//! Bad input, table-driven: every case is a command line with a bad file, flag or
//! environment variable, and must end with exit 2 and one message that says what is
//! wrong (file:line:col where there is a file) and nothing else: no container, network
//! or volume of the test's prefix, and the shared storage listed the same before and after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{Profile, TestContext, docker, free_port};

/// One bad input and how it must end.
struct Case {
    name: &'static str,
    /// `{profile}`, `{job}`, `{file}` (this case's file), `{dir}` are replaced.
    args: &'static [&'static str],
    /// This case's file (written as `{file}`), if any.
    file: Option<String>,
    env: Vec<(&'static str, &'static str)>,
    /// Every one must be in stderr.
    stderr: Vec<String>,
}

/// The good profile: 10 lines, so a key appended starts at line 11.
fn profile(name: &str, shared: &Path, port: u16) -> String {
    Profile::new(name)
        .shared(shared)
        .port(port)
        .worker("gpus", "2")
        .build()
}

const JOB: &str = "workload: custom\ncode_id: abc\nentrypoint: python3 -c 1\n";

fn case(
    name: &'static str,
    args: &'static [&'static str],
    file: Option<String>,
    stderr: &[&str],
) -> Case {
    Case {
        name,
        args,
        file,
        env: Vec::new(),
        stderr: stderr.iter().map(|s| s.to_string()).collect(),
    }
}

fn cases(good: &str) -> Vec<Case> {
    let with = |extra: &str| Some(format!("{good}{extra}"));
    let job = |extra: &str| Some(format!("{JOB}{extra}"));
    let replace = |from: &str, to: &str| Some(good.replace(from, to));
    let up = &["-p", "{file}", "up"][..];
    let submit = &["-p", "{profile}", "submit", "{file}"][..];
    let run = &["-p", "{profile}", "run", "{file}"][..];
    let mut all = vec![
        // Profiles (class 5: accepted nonsense).
        case(
            "profile env key twice",
            up,
            with("env:\n  A: x\n  A: y\n"),
            &["bad.yaml:13:3: env.A: key \"A\" is given twice (first at line 12, column 3)"],
        ),
        case(
            "worker count 100000",
            up,
            replace("count: 1", "count: 100000"),
            &[
                ":9:12: workers[0].count: count is 100000, more than 256",
                "valid: a whole number from 1 to 256",
            ],
        ),
        case(
            "memory that overflows",
            up,
            with("head: {memory: 10000000t}\n"),
            &[
                ":11:16: head.memory: invalid value: string \"10000000t\"",
                "1024t (1 PiB)",
            ],
        ),
        case(
            "gpus 1000",
            up,
            replace("gpus: 2", "gpus: 1000"),
            &[":10:11: workers[0].gpus: gpus is 1000", "0 to 64 GPUs"],
        ),
        case(
            "head_address not an IP",
            up,
            with("network: {mode: host, head_address: 'head; rm -rf /'}\n"),
            &[
                ":11:37: network.head_address: \"head; rm -rf /\" is not an IP address (valid: the host's IPv4 address",
            ],
        ),
        case(
            "head_address IPv6",
            up,
            with("network: {mode: host, head_address: 'fd00::1'}\n"),
            &[":11:37: network.head_address: fd00::1 is IPv6"],
        ),
        case(
            "port in a host-mode block",
            up,
            Some(
                good.replace(
                    &format!("dashboard_port: {}", port_of(good)),
                    "dashboard_port: 20005",
                ) + "network: {mode: host}\n",
            ),
            &[
                ":6:19: ray.dashboard_port: port 20005 is in the host-mode port block of Ray node 0 (20000-20999)",
            ],
        ),
        case(
            "too many host-mode nodes",
            up,
            Some(good.replace("count: 1", "count: 50") + "network: {mode: host}\n"),
            &[":9:12: workers[0].count: 51 Ray nodes in host mode"],
        ),
        case(
            "NFS server injects an option",
            up,
            replace(
                "  host_path:",
                "  nfs: {server: '10.0.0.5,nolock', export: /e}\n  x_host_path:",
            )
            .map(|t| drop_line(&t, "x_host_path")),
            &[":4:17: shared.nfs.server: \"10.0.0.5,nolock\" is not an NFS server"],
        ),
        case(
            "NFS options set addr",
            up,
            replace(
                "  host_path:",
                "  nfs: {server: 10.0.0.5, export: /e, options: 'rw,addr=6.6.6.6'}\n  x_host_path:",
            )
            .map(|t| drop_line(&t, "x_host_path")),
            &["shared.nfs.options: NFS option addr is set from shared.nfs.server"],
        ),
        case(
            "NFS export with a comma",
            up,
            replace(
                "  host_path:",
                "  nfs: {server: 10.0.0.5, export: '/e,x'}\n  x_host_path:",
            )
            .map(|t| drop_line(&t, "x_host_path")),
            &["shared.nfs.export: \"/e,x\" is not an NFS export"],
        ),
        case(
            "both host_path and nfs",
            up,
            replace(
                "  host_path:",
                "  nfs: {server: a, export: /e}\n  host_path:",
            ),
            &[":4:3: shared: give exactly one of `host_path` and `nfs`"],
        ),
        case(
            "mount escapes with ..",
            up,
            replace("  host_path:", "  mount: /mnt/../etc\n  host_path:"),
            &["invalid shared.mount \"/mnt/../etc\": .. would leave its directory"],
        ),
        case(
            "relative host_path",
            up,
            Some(
                good.lines()
                    .map(|l| {
                        if l.starts_with("  host_path:") {
                            "  host_path: relative/x".to_string()
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
                    + "\n",
            ),
            &[":4:14: shared.host_path: relative/x is not an absolute path"],
        ),
        case(
            "entrypoint worker_node 0",
            up,
            with("submit: {entrypoint_resources: {worker_node: 0}}\n"),
            &[":11:46: submit.entrypoint_resources.worker_node: worker_node is 0"],
        ),
        case(
            "entrypoint worker_node -1",
            &["-p", "{file}", "status"],
            with("submit: {entrypoint_resources: {worker_node: -1}}\n"),
            &["worker_node is -1"],
        ),
        case(
            "entrypoint resource NaN",
            &["-p", "{file}", "down"],
            with("submit: {entrypoint_resources: {gpu_slot: .nan}}\n"),
            &["gpu_slot is NaN"],
        ),
        case(
            "entrypoint on the head",
            up,
            with("submit: {entrypoint_resources: {head_node: 1}}\n"),
            &["the driver never runs on the head"],
        ),
        // Issue 26 item 12: what argus or Ray set themselves, and what can never be met.
        case(
            "worker resources redefine worker_node",
            up,
            replace("gpus: 2", "gpus: 2\n    resources: {worker_node: 2}"),
            &[
                ":11:30: workers[0].resources.worker_node: worker_node cannot be a node's own resource",
                "valid: a name of your own",
            ],
        ),
        case(
            "head resources redefine head_node",
            up,
            with("head: {resources: {head_node: 0}}\n"),
            &[":11:31: head.resources.head_node: head_node cannot be a node's own resource"],
        ),
        case(
            "object store without shm_size",
            up,
            replace("gpus: 2", "gpus: 2\n    object_store_memory: 512m"),
            &[
                ":11:26: workers[0].object_store_memory: object_store_memory (512m) without shm_size: Docker's /dev/shm is 64 MiB",
                "valid: shm_size: 512m or more",
            ],
        ),
        case(
            "entrypoint resource no node has",
            up,
            with("submit: {entrypoint_resources: {accelerator_h20: 1}}\n"),
            &[
                ":11:32: submit.entrypoint_resources: no node offers accelerator_h20: 1, so the driver would wait forever",
                "head: head_node: 1; workers gpu: GPU: 2, worker_node: 1",
            ],
        ),
        case(
            "profile sbatch_args repeat --job-name",
            &["-p", "{file}", "slurm", "submit", "{job}"],
            with("slurm: {sbatch_args: [--job-name=mine]}\n"),
            &[
                ":11:23: slurm.sbatch_args[0]: \"--job-name=mine\" sets --job-name: argus writes it into the batch script itself",
            ],
        ),
        case(
            "--sbatch-arg repeats --nodes",
            &[
                "-p",
                "{profile}",
                "slurm",
                "submit",
                "{job}",
                "--sbatch-arg=--exclusive",
                "--sbatch-arg",
                "-N4",
            ],
            None,
            &[
                "sbatch argument \"-N4\" sets --nodes (-N): argus writes it into the batch script itself",
                "set it with --nodes or slurm.nodes",
            ],
        ),
        case(
            "--sbatch-arg repeats --output, two words",
            &[
                "-p",
                "{profile}",
                "slurm",
                "submit",
                "{job}",
                "--sbatch-arg=--output",
                "--sbatch-arg=/tmp/x",
            ],
            None,
            &["sbatch argument \"--output\" sets --output"],
        ),
        case(
            "entrypoint_num_cpus inf",
            up,
            with("submit: {entrypoint_num_cpus: .inf}\n"),
            &["entrypoint_num_cpus is inf"],
        ),
        case(
            "env sets RAY_AUTH_MODE",
            up,
            with("env: {RAY_AUTH_MODE: disabled}\n"),
            &[
                ":11:22: env.RAY_AUTH_MODE: RAY_AUTH_MODE cannot be set here: argus sets RAY_AUTH_MODE",
            ],
        ),
        case(
            "env sets HF_HOME",
            up,
            with("env: {HF_HOME: /root/.cache}\n"),
            &["HF_HOME cannot be set here: argus sets HF_HOME to <mount>/common/hf"],
        ),
        case(
            "env sets RAY_AUTH_TOKEN",
            up,
            with("env: {RAY_AUTH_TOKEN: abcdef}\n"),
            &["RAY_AUTH_TOKEN cannot be set here"],
        ),
        case(
            "runtime env sets PYTHONPATH",
            up,
            with("submit: {runtime_env: {env_vars: {PYTHONPATH: /x}}}\n"),
            &["PYTHONPATH cannot be set here"],
        ),
        case(
            "gpu_mode as a list",
            up,
            replace("gpus: 2", "gpus: 2\n    gpu_mode: [nvidia]"),
            &[
                ":11:15: workers[0].gpu_mode: invalid type: sequence, expected one of nvidia|amd|simulated",
            ],
        ),
        case(
            "docker.host garbage",
            up,
            with("docker: {host: garbage}\n"),
            &[":11:16: docker.host: malformed Docker endpoint \"garbage\": no scheme"],
        ),
        case(
            "docker.host port out of range",
            up,
            with("docker: {host: 'tcp://127.0.0.1:99999'}\n"),
            &["malformed Docker endpoint \"tcp://127.0.0.1:99999\""],
        ),
        case(
            "ready_timeout_s a year",
            up,
            replace(
                "  dashboard_port:",
                "  ready_timeout_s: 31536000\n  dashboard_port:",
            ),
            &[":6:20: ray.ready_timeout_s: 31536000 seconds is out of range"],
        ),
        case(
            "unknown key",
            &["-p", "{file}", "down"],
            with("workerz: []\n"),
            &[":11:1: unknown field `workerz`"],
        ),
        // Auth that is not there (class 6).
        case(
            "token auth on Ray 2.51",
            up,
            replace("ray:\n", "ray:\n  auth: token\n"),
            &[
                ":6:9: ray.auth: image argus/ray:2.51.1 has Ray 2.51, which has no token auth",
                "--ray-version 2.52.0",
            ],
        ),
        // JobSpecs (classes 4 and 5).
        case(
            "workload as a list",
            submit,
            Some("workload: [ppo]\ncode_id: abc\n".into()),
            &[
                "bad.yaml:1:11: workload: invalid type: sequence, expected one of ppo|grpo|sft|custom",
            ],
        ),
        case(
            "overrides key twice",
            submit,
            job("overrides:\n  a.b: 1\n  a.b: 2\n"),
            &[":6:3: overrides.a.b: key \"a.b\" is given twice"],
        ),
        case(
            "override key with =",
            submit,
            job("overrides: {'a=b': 1}\n"),
            &["invalid override key \"a=b\""],
        ),
        case(
            "env_vars key twice",
            run,
            job("env_vars:\n  X: 1\n  X: 2\n"),
            &[":6:3: env_vars.X: key \"X\" is given twice"],
        ),
        case(
            "env_vars sets PYTHONPATH",
            submit,
            job("env_vars: {PYTHONPATH: /tmp}\n"),
            &["env_vars.PYTHONPATH: PYTHONPATH cannot be set here"],
        ),
        case(
            "submission_id traversal",
            submit,
            job("submission_id: ../../x\n"),
            &[":4:16: submission_id: invalid submission id \"../../x\": '/' is not allowed"],
        ),
        case(
            "submission_id with NUL",
            submit,
            job("submission_id: \"a\\0b\"\n"),
            &[":4:16: submission_id: contains a NUL byte"],
        ),
        case(
            "submission_id look-alike",
            run,
            job("submission_id: \"ppо-1\"\n"),
            &["'о' is not allowed"],
        ),
        case(
            "submission_id with a space",
            submit,
            job("submission_id: 'a b'\n"),
            &["' ' is not allowed"],
        ),
        case(
            "submission_id 200 chars",
            submit,
            Some(format!("{JOB}submission_id: {}\n", "a".repeat(200))),
            &["it is 200 characters long", "(200 characters)"],
        ),
        case(
            "submission_id ..",
            submit,
            job("submission_id: '..'\n"),
            &["\"..\" names a directory"],
        ),
        case(
            "code_id traversal",
            submit,
            Some(JOB.replace("code_id: abc", "code_id: ../x")),
            &[":2:10: code_id: invalid code id \"../x\""],
        ),
        case(
            "code_path outside the shared storage (submit)",
            submit,
            Some(JOB.replace("code_id: abc", "code_path: /etc")),
            &[":2:12: code_path: /etc is not on the shared storage (/mnt/shared)"],
        ),
        case(
            "code_path outside the shared storage (run)",
            run,
            Some(JOB.replace("code_id: abc", "code_path: /etc")),
            &["code_path: /etc is not on the shared storage"],
        ),
        case(
            "code_path escapes with ..",
            submit,
            Some(JOB.replace("code_id: abc", "code_path: /mnt/shared/../../etc")),
            &[".. would leave its directory"],
        ),
        case(
            "train_file traversal",
            run,
            job("train_file: ../../etc/passwd\n"),
            &[
                ":4:13: train_file: invalid data file (relative to common/datasets) \"../../etc/passwd\"",
            ],
        ),
        case(
            "val_file outside the shared storage",
            submit,
            job("val_file: /etc/passwd\n"),
            &["val_file: /etc/passwd is not on the shared storage"],
        ),
        case(
            "two code sources",
            submit,
            job("code_path: /mnt/shared/x\n"),
            &["code_id: give one of code_path, code_id and code.source"],
        ),
        case(
            "nnodes 100000",
            submit,
            job("nnodes: 100000\n"),
            &["nnodes is 100000", "from 1 to 1024"],
        ),
        case(
            "time_limit 1000 days",
            submit,
            job("time_limit: 1000d\n"),
            &["at most 365 days"],
        ),
        // The restart policy (class 5): checked with the JobSpec, before runs/ is touched.
        case(
            "restart max 101 (run)",
            run,
            job("restart:\n  max: 101\n"),
            &[
                "bad.yaml:5:8: restart.max: 101 is more than 100",
                "valid: a whole number of restarts after the first attempt, from 0 to 100",
            ],
        ),
        case(
            "restart unknown key (run)",
            run,
            job("restart: {max: 1, retries: 2}\n"),
            &["bad.yaml:4:19: restart: unknown field `retries`, expected one of `max`, `on`"],
        ),
        case(
            "restart hang_after 5s (run)",
            run,
            job("restart:\n  max: 1\n  on: [hang]\n  hang_after: 5s\n"),
            &[
                "bad.yaml:7:15: restart.hang_after: 5s is less than 10s",
                "valid: a duration from 10s to 7d",
            ],
        ),
        case(
            "--hang-after with no restart policy (run)",
            &["-p", "{profile}", "run", "{file}", "--hang-after", "5m"],
            Some(JOB.into()),
            &["--hang-after needs a restart policy"],
        ),
        case(
            "--restart-on an unknown cause (run)",
            &[
                "-p",
                "{profile}",
                "run",
                "{file}",
                "--restart",
                "1",
                "--restart-on",
                "oom",
            ],
            Some(JOB.into()),
            &["--restart-on"],
        ),
        case(
            "--set override key with a space",
            &[
                "-p",
                "{profile}",
                "submit",
                "{file}",
                "--set",
                "overrides.a b=1",
            ],
            Some(JOB.into()),
            &["--set: \"a b\" is not a Hydra key"],
        ),
        // An image build's inputs (class 10): the tag compared as Docker resolves it, the
        // lock holding pins only, both refused before anything is built.
        case(
            "--verl --tag docker.io/ of the Ray image it is built on",
            &["image", "build", "--verl", "--tag", "docker.io/argus/ray:2.51.1"],
            None,
            &["the verl image would replace the Ray image it is built on"],
        ),
        case(
            "--verl --tag index.docker.io/ of the Ray image it is built on",
            &["image", "build", "--verl", "--tag", "index.docker.io/argus/ray:2.51.1"],
            None,
            &["the verl image would replace the Ray image it is built on"],
        ),
        case(
            "--lock with --index-url",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("six==1.16.0\n--index-url http://evil.example/simple\n".into()),
            &["bad.yaml:2: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with --extra-index-url",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("--extra-index-url=http://evil.example/simple\nsix==1.16.0\n".into()),
            &["bad.yaml:1: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with --trusted-host",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("# pins\n--trusted-host evil.example\n".into()),
            &["bad.yaml:2: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with -e",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("-e git+https://evil.example/x.git#egg=x\n".into()),
            &["bad.yaml:1: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with -r",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("six==1.16.0\n-r /etc/other.txt\n".into()),
            &["bad.yaml:2: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with -c",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("-c constraints.txt\n".into()),
            &["bad.yaml:1: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with a URL",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("https://evil.example/x-1.0-py3-none-any.whl\n".into()),
            &["bad.yaml:1: ", "is a URL or a path", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with a path",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("./x-1.0-py3-none-any.whl\n".into()),
            &["bad.yaml:1: ", "is a URL or a path", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with an unpinned requirement",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("six==1.16.0\ntorch>=2\n".into()),
            &["bad.yaml:2: ", "is not pinned", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with an option after a pin",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("six==1.16.0 --index-url=http://evil.example\n".into()),
            &["bad.yaml:1: ", "only --hash=sha256", "hint: a lock holds name==version lines"],
        ),
        case(
            "--lock with an option behind a comment's U+2028",
            &["image", "build", "--verl", "--lock", "{file}"],
            Some("# c\u{2028}--index-url http://evil.example\n".into()),
            &["bad.yaml:2: ", "is a pip option", "hint: a lock holds name==version lines"],
        ),
        // What is wrong after --set is named by the --set, never at a line of the document
        // the sets make (which no one wrote); what the sets left is at its line of the file.
        case(
            "--set of a wrong type",
            &["-p", "{profile}", "submit", "--dry-run", "{file}", "--set", "total_training_steps=abc"],
            Some(JOB.into()),
            &["bad.yaml: --set total_training_steps=abc: total_training_steps: invalid type: string \"abc\""],
        ),
        case(
            "--set of an unknown field",
            &["-p", "{profile}", "submit", "--dry-run", "{file}", "--set", "nnodes=1", "--set", "foo=1"],
            Some(JOB.into()),
            &["bad.yaml: --set foo=1: unknown field `foo`"],
        ),
        case(
            "--set of a section's field out of bounds",
            &["-p", "{profile}", "submit", "--dry-run", "{file}", "--set", "restart.max=0", "--set", "nnodes=0"],
            Some(JOB.into()),
            &["bad.yaml: --set nnodes=0: nnodes: nnodes is 0", "valid: a whole number from 1 to 1024"],
        ),
        case(
            "--set code_path off the shared storage",
            &["-p", "{profile}", "submit", "--dry-run", "{file}", "--set", "code_path=/elsewhere/code"],
            Some(JOB.into()),
            &["bad.yaml: --set code_path=/elsewhere/code: code_path: /elsewhere/code is not on the shared storage"],
        ),
        case(
            "a field --set left is at its line of the file",
            &["-p", "{profile}", "submit", "--dry-run", "{file}", "--set", "metadata.x=1"],
            Some("# first\n\nworkload: custom\ncode_path: /elsewhere/code\nentrypoint: python3 -c 1\n".into()),
            &["bad.yaml:4:12: code_path: /elsewhere/code is not on the shared storage"],
        ),
        // Run locks (class 7).
        case(
            "lock of an unknown format",
            &["-p", "{profile}", "run", "--lock", "{file}"],
            Some("format: 2\nrun_id: r\n".into()),
            &[
                "bad.yaml:1:9: format: a run lock of format 2 is not one this argus",
                "valid: format: 1",
            ],
        ),
        // A Slurm run named for jobs (class 5 and 1): checked before any file or srun.
        case(
            "--slurm-run with up",
            &["-p", "{profile}", "--slurm-run", "run-x", "up"],
            None,
            &[
                "--slurm-run does not apply to `argus up`",
                "hint: `argus slurm status RUN_ID`",
            ],
        ),
        case(
            "--slurm-run traversal",
            &["-p", "{profile}", "--slurm-run", "../../etc", "job", "list"],
            None,
            &["invalid run id \"../../etc\": '/' is not allowed"],
        ),
        case(
            "--slurm-run of no run",
            &["-p", "{profile}", "--slurm-run", "run-nope", "job", "list"],
            None,
            &["no Slurm run run-nope under"],
        ),
        // Flags where they do not apply (class 5).
        case(
            "--config with up",
            &["--config", "{file}", "up"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &[
                "--config does not apply to `argus up`",
                "hint: use -p PROFILE here",
            ],
        ),
        case(
            "--config with down",
            &["--config", "{file}", "down"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus down`"],
        ),
        case(
            "--config with status",
            &["--config", "{file}", "status"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus status`"],
        ),
        case(
            "--config with image build",
            &["--config", "{file}", "image", "build"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus image build`"],
        ),
        case(
            "--config with snapshot",
            &["--config", "{file}", "snapshot", "list"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus snapshot`"],
        ),
        case(
            "--config with prepare",
            &["--config", "{file}", "prepare", "--dataset", "gsm8k"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus prepare`"],
        ),
        case(
            "--config with run",
            &["--config", "{file}", "run", "{job}"],
            Some("address: http://127.0.0.1:1\nshared_root: /tmp/x\n".into()),
            &["--config does not apply to `argus run`"],
        ),
        case(
            "--include without a model",
            &[
                "-p",
                "{profile}",
                "prepare",
                "--dataset",
                "gsm8k",
                "--include",
                "*.json",
            ],
            None,
            &["--include does not apply to `argus prepare`: it filters model files"],
        ),
        case(
            "--exclude without a model",
            &[
                "-p",
                "{profile}",
                "prepare",
                "--dataset",
                "gsm8k",
                "--exclude",
                "*.bin",
            ],
            None,
            &["--exclude does not apply to `argus prepare`"],
        ),
        case(
            "--from without a dataset",
            &[
                "-p",
                "{profile}",
                "prepare",
                "--model",
                "acme/tiny",
                "--from",
                "{dir}",
            ],
            None,
            &["--from does not apply to `argus prepare`"],
        ),
        case(
            "--include with nothing listed",
            &["-p", "{profile}", "prepare", "--include", "*.json"],
            None,
            &["--include does not apply to `argus prepare`: no model is asked for"],
        ),
        case(
            "run JOBSPEC with --lock",
            &["-p", "{profile}", "run", "{job}", "--lock", "{file}"],
            Some("format: 1\n".into()),
            &["--lock does not apply to `argus run`"],
        ),
        // Several hosts (issue 11): refused before any engine is dialled.
        case(
            "hosts: an unknown worker host",
            up,
            Some(
                good.replace("    count: 1\n", "    hosts: {z: 1}\n")
                    + "network: {mode: host}\nhosts:\n  - {name: a, docker: 'tcp://127.0.0.1:9', address: 127.0.0.1}\n",
            ),
            &[
                ":9:16: workers[0].hosts.z: unknown host \"z\"",
                "valid: one of the hosts: a",
            ],
        ),
        case(
            "hosts: an ssh endpoint with an option for a user",
            up,
            with(
                "hosts:\n  - {name: a, docker: 'ssh://-oProxyCommand=touch@x', address: 10.0.0.1}\n",
            ),
            &[":12:23: hosts[0].docker", "the user must be"],
        ),
        case(
            "hosts: two hosts on a bridge network",
            up,
            with(
                "hosts:\n  - {name: a, docker: 'tcp://10.0.0.1:2375', address: 10.0.0.1}\n  - {name: b, docker: 'tcp://10.0.0.2:2375', address: 10.0.0.2}\n",
            ),
            &["2 hosts need host networking"],
        ),
        case(
            "up --timeout 0",
            &["-p", "{profile}", "up", "--timeout", "0"],
            None,
            &["--timeout 0 does not apply to `argus up`"],
        ),
    ];
    // A malformed Docker endpoint in the environment (class 9): bad input, not unreachable.
    for (name, args, value, want) in [
        (
            "DOCKER_HOST garbage (up)",
            &["-p", "{profile}", "up"][..],
            "garbage",
            "DOCKER_HOST: malformed Docker endpoint \"garbage\": no scheme",
        ),
        (
            "DOCKER_HOST bad port (status)",
            &["-p", "{profile}", "status"][..],
            "tcp://127.0.0.1:99999",
            "DOCKER_HOST: malformed Docker endpoint",
        ),
        (
            "DOCKER_HOST unknown scheme (down)",
            &["-p", "{profile}", "down"][..],
            "ftp://host",
            "unknown scheme \"ftp\"",
        ),
        (
            "DOCKER_HOST garbage (image build)",
            &["image", "build"][..],
            "garbage",
            "DOCKER_HOST: malformed",
        ),
        (
            "DOCKER_HOST relative socket (run)",
            &["-p", "{profile}", "run", "{job}"][..],
            "unix://docker.sock",
            "it is not absolute",
        ),
    ] {
        all.push(Case {
            name,
            args,
            file: None,
            env: vec![("DOCKER_HOST", value)],
            stderr: vec![want.to_string()],
        });
    }
    all
}

fn port_of(profile: &str) -> String {
    profile
        .lines()
        .find_map(|l| l.trim().strip_prefix("dashboard_port: "))
        .unwrap_or_default()
        .to_string()
}

fn drop_line(text: &str, containing: &str) -> String {
    text.lines()
        .filter(|l| !l.contains(containing))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Everything a bad input could have changed: the test prefix's Docker objects and the
/// shared storage's files.
#[derive(Debug, PartialEq, Eq)]
struct World {
    containers: String,
    networks: String,
    volumes: String,
    files: BTreeMap<PathBuf, u64>,
}

fn world(prefix: &str, shared: &Path) -> World {
    let filter = format!("name={prefix}");
    let mut files = BTreeMap::new();
    let mut stack = vec![shared.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let meta = entry.metadata().map(|m| (m.is_dir(), m.len()));
            if let Ok((is_dir, len)) = meta {
                files.insert(
                    path.strip_prefix(shared).unwrap_or(&path).to_path_buf(),
                    len,
                );
                if is_dir {
                    stack.push(path);
                }
            }
        }
    }
    World {
        containers: docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]),
        networks: docker(&[
            "network",
            "ls",
            "--filter",
            &filter,
            "--format",
            "{{.Name}}",
        ]),
        volumes: docker(&["volume", "ls", "--filter", &filter, "--format", "{{.Name}}"]),
        files,
    }
}

#[test]
fn bad_inputs_end_in_exit_2_with_one_message_and_change_nothing() {
    let mut ctx = TestContext::new("badinput");
    let cluster = ctx.cluster("c");
    let shared = ctx.path("shared");
    std::fs::create_dir_all(shared.join("jobs")).expect("shared");
    std::fs::write(shared.join("jobs/marker"), "kept").expect("marker");
    let good = profile(&cluster, &shared, free_port());
    let good_path = ctx.write("good.yaml", &good);
    let job_path = ctx.write("job.yaml", JOB);
    let cases = cases(&good);
    let before = world(&ctx.prefix, &shared);
    let mut failures = Vec::new();
    let mut outcomes = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let dir = ctx.path(&format!("case{i}"));
        std::fs::create_dir_all(&dir).expect("case dir");
        let file = dir.join("bad.yaml");
        if let Some(text) = &case.file {
            std::fs::write(&file, text).expect("case file");
        }
        let args: Vec<String> = case
            .args
            .iter()
            .map(|a| {
                a.replace("{profile}", &good_path.display().to_string())
                    .replace("{job}", &job_path.display().to_string())
                    .replace("{file}", &file.display().to_string())
                    .replace("{dir}", &dir.display().to_string())
            })
            .collect();
        let mut command = Command::new(env!("CARGO_BIN_EXE_argus"));
        command
            .args(&args)
            .env_remove("ARGUS_PROFILE")
            .env_remove("DOCKER_HOST")
            .env("NO_COLOR", "1")
            .env("XDG_DATA_HOME", ctx.path("xdg"));
        for (k, v) in &case.env {
            command.env(k, v);
        }
        let out = command.output().expect("run argus");
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let missing: Vec<&String> = case
            .stderr
            .iter()
            .filter(|want| !stderr.contains(want.as_str()))
            .collect();
        let errors = stderr.matches("error: ").count();
        if code != 2 || !missing.is_empty() || errors != 1 || !out.stdout.is_empty() {
            failures.push(format!(
                "case {i} `{}`: exit {code}, {errors} errors, missing {missing:?}\n  argus {}\n{stderr}",
                case.name,
                args.join(" ")
            ));
        }
        outcomes.push(format!("{:>2} exit {code}  {}", i, case.name));
        let after = world(&ctx.prefix, &shared);
        if after != before {
            failures.push(format!(
                "case {i} `{}` changed the world:\n  before {before:?}\n  after  {after:?}",
                case.name
            ));
            break;
        }
    }
    eprintln!("{} bad-input cases:\n{}", cases.len(), outcomes.join("\n"));
    assert!(
        !ctx.path("xdg").exists(),
        "nothing may be created under XDG_DATA_HOME"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
