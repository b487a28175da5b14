//! A real Slurm (Debian's slurm-wlm 22.05 and munge, `tests/fixtures/slurm.sh`) on emulated
//! hosts (`crate::hosts`), and the tests that prove the fixture and pin the Slurm facts a Slurm
//! back end relies on.
//!
//! `Slurm::up(&ctx, &["a", "b", "c"], 2)` brings up the hosts (their engines with the stand-in
//! NVIDIA hook) and Slurm on them: slurmctld in the root namespace on the hosts' uplink, one
//! slurmd per host in that host's namespaces (Slurm's node names are the hosts' names; a step
//! on b reaches b's engine at /run/docker.sock), 2 fake GPUs per node as GRES. Dropping it takes
//! Slurm down, then the hosts. A client command needs exactly `env()` (`SLURM_CONF=...`); `run`
//! runs one with it. Fixture instances have their own SlurmctldPort (16800 + their subnet's
//! slot), so tests run in parallel. KillWait is 5 s; a job is forgotten 10 s after it ends
//! (MinJobAge; there is no accounting, so no sacct).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::TestContext;
use crate::hosts::{Hosts, Options, parse_env, run_script, run_script_reporting};

/// Slurm on emulated hosts, owned by one test.
pub struct Slurm {
    // Dropped after `Drop::drop` took Slurm down: the hosts go last.
    hosts: Hosts,
    conf: PathBuf,
    state: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm.sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

impl Slurm {
    /// Hosts named `hosts` (with the NVIDIA stand-in) and Slurm on them, `gpus_per_node` fake
    /// GPUs each (1-16). Panics with the fixtures' output when that fails.
    pub fn up(ctx: &TestContext, hosts: &[&str], gpus_per_node: u32) -> Slurm {
        Self::up_with_kill_wait(ctx, hosts, gpus_per_node, 5)
    }

    /// With Slurm's `KillWait` (the seconds between a step's SIGTERM and its SIGKILL) set:
    /// argus's node steps remove their containers in that time, which a loaded 2-core
    /// machine may need more than 5 s for.
    pub fn up_with_kill_wait(
        ctx: &TestContext,
        hosts: &[&str],
        gpus_per_node: u32,
        kill_wait: u32,
    ) -> Slurm {
        // Slurms of test processes that died without dropping theirs (a failure there is
        // theirs: this test goes on).
        run_script_reporting(&script(), &["gc"]);
        let hosts = Hosts::up(
            ctx,
            hosts,
            Options {
                nvidia: true,
                ..Options::default()
            },
        );
        let gpus = gpus_per_node.to_string();
        let output = run_script(
            &script(),
            &[
                "up",
                hosts.instance(),
                "--gpus-per-node",
                &gpus,
                "--kill-wait",
                &kill_wait.to_string(),
            ],
        );
        let env = parse_env(&String::from_utf8_lossy(&output.stdout));
        let get = |key: &str| -> PathBuf {
            env.get(key)
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("slurm.sh up printed no {key}: {env:?}"))
        };
        Slurm {
            conf: get("SLURM_CONF"),
            state: get("SF_STATE"),
            hosts,
        }
    }

    /// The emulated hosts Slurm runs on (engines, addresses, `exec` on a host).
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// What a Slurm client command (and argus running one) needs in its environment.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "SLURM_CONF".to_string(),
            self.conf.to_string_lossy().into_owned(),
        )]
    }

    /// Slurm's state dir (slurm.conf, logs under `log/`, munge, spool).
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// A Slurm client command (`sinfo`, `sbatch`, `srun`, `scontrol`, `squeue`, `scancel`, ...)
    /// with `env()`, and none of the SLURM_* variables of the test's own environment.
    pub fn run(&self, args: &[&str]) -> Output {
        let (program, args) = args.split_first().expect("a command");
        let mut command = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SLURM_") {
                command.env_remove(key);
            }
        }
        command
            .args(args)
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    /// Like `run`, but panics with the output unless it succeeds; returns stdout, trimmed.
    #[track_caller]
    pub fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{} failed ({})\n--- stdout\n{}\n--- stderr\n{}\n--- slurmctld log\n{}",
            args.join(" "),
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.log_tail("slurmctld.log")
        );
        text(&out.stdout)
    }

    /// `sbatch --parsable args...`: the job id.
    #[track_caller]
    pub fn sbatch(&self, args: &[&str]) -> String {
        let mut all = vec!["sbatch", "--parsable"];
        all.extend_from_slice(args);
        let out = self.run_ok(&all);
        // --parsable prints "<id>" or "<id>;<cluster>".
        out.split(';').next().unwrap_or_default().to_string()
    }

    /// The job's state (`JobState` of `scontrol show job`): PENDING, RUNNING, COMPLETING,
    /// COMPLETED, CANCELLED, FAILED, TIMEOUT, ...; `PURGED` once Slurm forgot it (MinJobAge).
    pub fn job_state(&self, job_id: &str) -> String {
        let out = self.run(&["scontrol", "show", "job", "-o", job_id]);
        if !out.status.success() && text(&out.stderr).contains("Invalid job id") {
            return "PURGED".to_string();
        }
        text(&out.stdout)
            .split_whitespace()
            .find_map(|field| field.strip_prefix("JobState="))
            .unwrap_or_default()
            .to_string()
    }

    /// Polls the job's state (every 20 ms) until it is one of `states`; returns it. Panics
    /// after `timeout` with what Slurm says of the job.
    #[track_caller]
    pub fn wait_state(&self, job_id: &str, states: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.job_state(job_id);
            if states.contains(&state.as_str()) {
                return state;
            }
            if Instant::now() > deadline {
                let show = self.run(&["scontrol", "show", "job", job_id]);
                panic!(
                    "job {job_id} is {state:?} after {timeout:?}, not one of {states:?}\n{}\n{}",
                    text(&show.stdout),
                    self.log_tail("slurmctld.log")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `scontrol show hostnames <list>`: a Slurm node list expanded, one name a line.
    #[track_caller]
    pub fn hostnames(&self, list: &str) -> Vec<String> {
        self.run_ok(&["scontrol", "show", "hostnames", list])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The GPU indexes the job holds on each of its nodes, as `scontrol show job -d` lists them
    /// (`Nodes=a,b CPU_IDs=.. GRES=gpu:1(IDX:1)`): absolute indexes on the node.
    #[track_caller]
    pub fn job_gpus(&self, job_id: &str) -> BTreeMap<String, Vec<u32>> {
        let show = self.run_ok(&["scontrol", "show", "job", "-d", job_id]);
        let mut gpus = BTreeMap::new();
        for line in show.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let nodes = fields.iter().find_map(|f| f.strip_prefix("Nodes="));
            let gres = fields.iter().find_map(|f| f.strip_prefix("GRES="));
            let (Some(nodes), Some(gres)) = (nodes, gres) else {
                continue;
            };
            let indexes = gpu_indexes(gres);
            for node in self.hostnames(nodes) {
                gpus.insert(node, indexes.clone());
            }
        }
        gpus
    }

    /// The last lines of one of the fixture's logs (`slurmctld.log`, `slurmd-<host>.log`).
    pub fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.state.join("log").join(name)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The GPU indexes in a `GRES=` value of `scontrol show job -d`: `gpu:2(IDX:0-1)`,
/// `gpu:tesla:1(IDX:3)`, `gpu:3(IDX:0,2-3)`; other GRES are skipped.
fn gpu_indexes(gres: &str) -> Vec<u32> {
    let mut indexes = Vec::new();
    // Several GRES are joined by commas outside the parentheses.
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&gres[start..]);
    for item in items {
        let Some(list) = item
            .strip_prefix("gpu:")
            .and_then(|rest| rest.split_once("(IDX:"))
            .map(|(_, list)| list.trim_end_matches(')'))
        else {
            continue;
        };
        for part in list.split(',').filter(|p| !p.is_empty()) {
            let (low, high) = part.split_once('-').unwrap_or((part, part));
            let (low, high): (u32, u32) = (
                low.parse().unwrap_or_else(|e| panic!("{gres}: {e}")),
                high.parse().unwrap_or_else(|e| panic!("{gres}: {e}")),
            );
            indexes.extend(low..=high);
        }
    }
    indexes
}

impl Drop for Slurm {
    fn drop(&mut self) {
        run_script_reporting(&script(), &["down", self.hosts.instance()]);
    }
}

// --- the fixture's own tests --------------------------------------------------------------

/// `KEY=VALUE` words of a line, e.g. `host=a CUDA_VISIBLE_DEVICES=1`.
fn words(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// Seconds since the epoch, as a step's `date +%s.%N` prints them.
fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// Waits (every 10 ms) until a file a job writes has `lines` complete lines; returns it.
#[track_caller]
fn wait_file(path: &Path, lines: usize, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let content = std::fs::read_to_string(path).unwrap_or_default();
        if content.matches('\n').count() >= lines {
            return content;
        }
        assert!(
            Instant::now() < deadline,
            "{} has fewer than {lines} lines after {timeout:?}: {content}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while pid is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn gpu_indexes_parse_scontrols_gres_forms() {
    assert_eq!(gpu_indexes("gpu:1(IDX:1)"), [1]);
    assert_eq!(gpu_indexes("gpu:2(IDX:0-1)"), [0, 1]);
    assert_eq!(gpu_indexes("gpu:tesla:3(IDX:0,2-3)"), [0, 2, 3]);
    assert_eq!(gpu_indexes("mps:100(0),gpu:1(IDX:2)"), [2]);
    assert_eq!(gpu_indexes("(null)"), Vec::<u32>::new());
}

#[test]
fn slurm_runs_a_slurmd_per_host_named_for_it_and_a_step_reaches_its_hosts_engine() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let started = Instant::now();
    let slurm = Slurm::up(&ctx, &["a", "b", "c"], 2);
    eprintln!("measure: hosts + Slurm up in {:?}", started.elapsed());
    let hosts = slurm.hosts();

    let nodes = slurm.run_ok(&["sinfo", "-h", "-N", "-o", "%N %T %G"]);
    assert_eq!(
        nodes.lines().collect::<Vec<_>>(),
        ["a idle gpu:2", "b idle gpu:2", "c idle gpu:2"],
        "{nodes}"
    );
    // Slurm's node addresses are the hosts' addresses.
    for name in ["a", "b", "c"] {
        let node = slurm.run_ok(&["scontrol", "show", "node", "-o", name]);
        let words = words(&node);
        assert_eq!(
            words.get("NodeAddr"),
            Some(&hosts.host(name).ip.to_string().as_str()),
            "{node}"
        );
        assert_eq!(words.get("NodeHostName"), Some(&name), "{node}");
    }

    let dir = ctx.path("work");
    std::fs::create_dir_all(&dir).expect("work dir");
    let chdir = format!("--chdir={}", dir.display());
    let mut names: Vec<String> = Vec::new();
    for round in 0..2 {
        let started = Instant::now();
        let out = slurm.run_ok(&["srun", &chdir, "-N3", "hostname"]);
        eprintln!(
            "measure: srun -N3 hostname ({round}) in {:?}",
            started.elapsed()
        );
        names = out.lines().map(str::to_string).collect();
    }
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);

    // A step on b talks to b's engine at the standard socket path.
    let engine = |host: &str| text(&hosts.docker(host, &["info", "--format", "{{.ID}}"]).stdout);
    let on_b = slurm.run_ok(&[
        "srun", &chdir, "-w", "b", "docker", "info", "--format", "{{.ID}}",
    ]);
    assert_eq!(on_b, engine("b"));
    assert_ne!(on_b, engine("a"));

    // A batch script runs on the allocation's first node; `scontrol show hostnames` expands
    // the node list one name a line, in Slurm's order.
    let out = dir.join("batch.out");
    let started = Instant::now();
    let job = slurm.sbatch(&[
        &chdir,
        "-N3",
        "-o",
        &out.to_string_lossy(),
        "--wrap",
        "echo \"host=$(hostname) nodelist=$SLURM_JOB_NODELIST\"; scontrol show hostnames \"$SLURM_JOB_NODELIST\"; \
         until [ -e release ]; do sleep 0.02; done",
    ]);
    slurm.wait_state(&job, &["RUNNING"], Duration::from_secs(30));
    eprintln!("measure: sbatch to RUNNING in {:?}", started.elapsed());
    std::fs::write(dir.join("release"), "").expect("release");
    assert_eq!(
        slurm.wait_state(&job, &["COMPLETED", "FAILED"], Duration::from_secs(30)),
        "COMPLETED"
    );
    let printed = wait_file(&out, 4, Duration::from_secs(10));
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines, ["host=a nodelist=a,b,c", "a", "b", "c"], "{printed}");

    let instance = hosts.instance().to_string();
    let state = slurm.state().to_path_buf();
    let started = Instant::now();
    drop(slurm);
    eprintln!("measure: Slurm + hosts down in {:?}", started.elapsed());
    assert!(!state.exists(), "{} is left", state.display());
    let left: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&format!("/argus-multihost/{instance}/")))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "processes left");
}

#[test]
fn two_jobs_on_the_same_nodes_get_disjoint_gpus_and_their_steps_see_absolute_indexes() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let started = Instant::now();
    let slurm = Slurm::up(&ctx, &["a", "b"], 2);
    eprintln!("measure: up in {:?}", started.elapsed());
    let hosts = slurm.hosts();
    let shell = hosts.import_shell_image("a");
    hosts.import_shell_image("b");
    eprintln!("measure: images in {:?}", started.elapsed());
    let dir = ctx.path("work");
    std::fs::create_dir_all(&dir).expect("work dir");
    // The batch step (on the first node) and one step per node, as argus's node steps are
    // started (`srun --overlap --ntasks-per-node=1`); each step starts a container with its
    // GPUs as NVIDIA device ids, then waits until the test releases the job, so both jobs
    // hold their GPUs at once.
    let show = ctx.write(
        "show.sh",
        r#"echo "$1 host=$(hostname) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} SLURM_STEP_GPUS=${SLURM_STEP_GPUS-unset} SLURM_JOB_GPUS=${SLURM_JOB_GPUS-unset} GPU_DEVICE_ORDINAL=${GPU_DEVICE_ORDINAL-unset}"
"#,
    );
    let show = show.display();
    let script = ctx.write(
        "gpus.sbatch",
        &format!(
            r#"#!/bin/bash
bash {show} batch
srun --overlap --ntasks-per-node=1 bash -c '
    bash {show} step
    echo "container host=$(hostname) $(docker run --rm --gpus "\"device=$SLURM_STEP_GPUS\"" {shell} /bin/bash -c "echo NVIDIA_VISIBLE_DEVICES=\$NVIDIA_VISIBLE_DEVICES")"
    until [ -e release ]; do sleep 0.02; done'
"#
        ),
    );
    let chdir = format!("--chdir={}", dir.display());
    let script = script.to_string_lossy().into_owned();
    let jobs: Vec<(String, PathBuf)> = (0..2)
        .map(|n| {
            let out = dir.join(format!("job{n}.out"));
            let id = slurm.sbatch(&[
                &chdir,
                "-N2",
                "-w",
                "a,b",
                "--ntasks-per-node=1",
                "--gres=gpu:1",
                "-o",
                &out.to_string_lossy(),
                &script,
            ]);
            (id, out)
        })
        .collect();
    let submitted = Instant::now();
    for (id, _) in &jobs {
        slurm.wait_state(id, &["RUNNING"], Duration::from_secs(30));
    }
    eprintln!(
        "measure: two sbatch to both RUNNING in {:?}",
        submitted.elapsed()
    );
    // Both hold their GPUs now (neither can end before the release).
    let held: Vec<BTreeMap<String, Vec<u32>>> =
        jobs.iter().map(|(id, _)| slurm.job_gpus(id)).collect();
    for node in ["a", "b"] {
        let (first, second) = (&held[0][node], &held[1][node]);
        assert_eq!((first.len(), second.len()), (1, 1), "{held:?}");
        assert_ne!(first, second, "two jobs share a GPU on {node}: {held:?}");
    }
    // Every step printed its line and its container's before waiting.
    for (_, out) in &jobs {
        wait_file(out, 5, Duration::from_secs(30));
    }
    eprintln!(
        "measure: steps and containers printed after {:?}",
        submitted.elapsed()
    );
    std::fs::write(dir.join("release"), "").expect("release");
    for ((id, out), gpus) in jobs.iter().zip(&held) {
        assert_eq!(
            slurm.wait_state(
                id,
                &["COMPLETED", "FAILED", "CANCELLED"],
                Duration::from_secs(30)
            ),
            "COMPLETED"
        );
        let printed = std::fs::read_to_string(out).expect("job output");
        let mut seen = BTreeMap::new();
        for line in printed.lines() {
            let w = words(line);
            let kind = line.split_whitespace().next().unwrap_or_default();
            let host = w.get("host").copied().unwrap_or_default();
            let want = gpus[host][0].to_string();
            match kind {
                "batch" => {
                    // The batch step: the job's GPUs on the first node; no step GPUs.
                    assert_eq!(host, "a", "{printed}");
                    assert_eq!(w["CUDA_VISIBLE_DEVICES"], want, "{printed}");
                    assert_eq!(w["SLURM_JOB_GPUS"], want, "{printed}");
                    assert_eq!(w["SLURM_STEP_GPUS"], "unset", "{printed}");
                }
                "step" => {
                    for var in [
                        "CUDA_VISIBLE_DEVICES",
                        "SLURM_STEP_GPUS",
                        "SLURM_JOB_GPUS",
                        "GPU_DEVICE_ORDINAL",
                    ] {
                        assert_eq!(w[var], want, "{var} on {host}, job {id}: {printed}");
                    }
                }
                "container" => {
                    assert_eq!(w["NVIDIA_VISIBLE_DEVICES"], want, "{printed}");
                }
                _ => panic!("unexpected line in job {id}'s output: {line}\n{printed}"),
            }
            *seen.entry((kind, host)).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 5, "job {id}: {printed}");
    }
}

#[test]
fn scancel_sends_sigterm_then_sigkill_after_killwait_and_a_container_outlives_the_step() {
    let Some(ctx) = TestContext::docker_engine() else {
        return;
    };
    let slurm = Slurm::up(&ctx, &["a"], 2);
    let hosts = slurm.hosts();
    let shell = hosts.import_shell_image("a");

    // The stand-in NVIDIA hook: device requests are accepted and the ids reach the container.
    for (gpus, want) in [(r#""device=1""#, "1"), (r#""device=0,1""#, "0,1")] {
        let out = hosts.docker_ok(
            "a",
            &[
                "run",
                "--rm",
                "--gpus",
                gpus,
                &shell,
                "/bin/bash",
                "-c",
                "echo \"NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES\"",
            ],
        );
        assert_eq!(out.trim(), format!("NVIDIA_VISIBLE_DEVICES={want}"));
    }

    let dir = ctx.path("work");
    std::fs::create_dir_all(&dir).expect("work dir");
    let container = format!("{}-kept", ctx.prefix);
    // The step starts a container through the engine's API, then ignores SIGTERM (it writes
    // down when it came) and waits for ever.
    let step = format!(
        r#"docker run -d -i --name {container} {shell} /bin/bash -c read >/dev/null
trap 'date +%s.%N > term' TERM
echo $$ > pid.new && mv pid.new pid
while :; do sleep 0.05; done"#
    );
    let job = slurm.sbatch(&[
        &format!("--chdir={}", dir.display()),
        "-w",
        "a",
        "-o",
        &dir.join("job.out").to_string_lossy(),
        "--wrap",
        &format!("srun bash -c '{}'", step.replace('\'', r"'\''")),
    ]);
    let pid: u32 = wait_file(&dir.join("pid"), 1, Duration::from_secs(30))
        .trim()
        .parse()
        .expect("the step's pid");
    assert!(alive(pid));

    let cancelled = now_epoch();
    slurm.run_ok(&["scancel", &job]);
    let term: f64 = wait_file(&dir.join("term"), 1, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("the time the step got SIGTERM");
    assert!(alive(pid), "the step died with SIGTERM, which it traps");
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the step outlived KillWait by far"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed = now_epoch();
    eprintln!(
        "measure: scancel -> SIGTERM {:.2} s, SIGTERM -> SIGKILL {:.2} s (KillWait=5)",
        term - cancelled,
        killed - term
    );
    assert!(
        term - cancelled < 3.0,
        "SIGTERM came {} s after scancel",
        term - cancelled
    );
    assert!(
        (4.0..9.0).contains(&(killed - term)),
        "SIGKILL came {} s after SIGTERM, KillWait is 5 s",
        killed - term
    );
    assert_eq!(
        slurm.wait_state(
            &job,
            &["CANCELLED", "COMPLETED", "FAILED"],
            Duration::from_secs(30)
        ),
        "CANCELLED"
    );
    // Slurm killed the step's processes, not the container the step asked the engine for.
    let running = hosts.docker_ok(
        "a",
        &["inspect", "--format", "{{.State.Running}}", &container],
    );
    assert_eq!(
        running.trim(),
        "true",
        "the step's container did not outlive it"
    );
    hosts.docker_ok("a", &["rm", "-f", &container]);
}
