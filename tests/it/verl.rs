//! verl itself, through argus, on CPU: the built-in profile (head + 2 workers with one
//! simulated GPU each) and the shipped CPU JobSpecs, on the verl image (`argus image build
//! --verl`, built once and reused). Each claim is checked against verl's own output: the
//! metrics argus reports against the numbers in verl's console lines, the checkpoints
//! against verl's layout, the resume against verl's own `resume_mode=auto` log line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::{Run, TestContext, entry_names, free_port};
use crate::hub::{CountingRelay, Olah, git_repo};

mod system_python;

/// Builds the verl image once per test binary (argus reuses it when its inputs are unchanged).
pub(crate) fn ensure_verl_image() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
            .args(["image", "build", "--verl", "--no-progress"])
            .env_remove("ARGUS_PROFILE")
            .output()
            .expect("run argus");
        let run = Run::from(out);
        assert_eq!(
            run.code, 0,
            "argus image build --verl failed\n{}\n{}",
            run.stdout, run.stderr
        );
    });
}

/// Builds verl 0.8.0's CPU image once per test binary (the release before 0.9, still
/// supported: `argus image build --verl --verl-version 0.8.0`).
pub(crate) fn ensure_verl_080_image() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
            .args([
                "image",
                "build",
                "--verl",
                "--verl-version",
                "0.8.0",
                "--no-progress",
            ])
            .env_remove("ARGUS_PROFILE")
            .output()
            .expect("run argus");
        let run = Run::from(out);
        assert_eq!(
            run.code, 0,
            "argus image build --verl --verl-version 0.8.0 failed\n{}\n{}",
            run.stdout, run.stderr
        );
    });
}

/// The built-in profile as shipped, with this test's cluster name, storage and port.
pub(crate) fn builtin_profile(ctx: &mut TestContext, extra: &str) -> (PathBuf, PathBuf) {
    let name = ctx.cluster("v");
    let shared = ctx.path("shared");
    let text = std::fs::read_to_string("profiles/local.yaml")
        .expect("profiles/local.yaml")
        .replace("name: argus-local", &format!("name: {name}"))
        .replace(
            "host_path: ${XDG_DATA_HOME:-~/.local/share}/argus/local",
            &format!("host_path: {}", shared.display()),
        )
        .replace(
            "dashboard_port: 8265",
            &format!("dashboard_port: {}", free_port()),
        );
    assert!(text.contains(&name) && text.contains(&*shared.to_string_lossy()));
    (ctx.write("local.yaml", &format!("{text}{extra}")), shared)
}

/// `step:N - key:value - ...` lines of verl's console logger, as printed (after Ray's
/// `(TaskRunner pid=N)` prefix): step -> key -> the value's text.
fn verl_step_lines(log: &str) -> BTreeMap<u64, BTreeMap<String, String>> {
    let mut steps = BTreeMap::new();
    for line in log.lines() {
        let Some(at) = line.find("step:") else {
            continue;
        };
        let mut parts = line[at..].split(" - ");
        let Some(step) = parts
            .next()
            .and_then(|s| s.strip_prefix("step:"))
            .and_then(|s| s.trim().parse::<u64>().ok())
        else {
            continue;
        };
        let entry: &mut BTreeMap<String, String> = steps.entry(step).or_default();
        for part in parts {
            if let Some((k, v)) = part.rsplit_once(':') {
                entry.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    steps
}

/// The number inside a Python repr as verl prints it (`np.float64(0.5)`, `0.5`).
fn number(text: &str) -> f64 {
    let inner = text
        .rsplit_once('(')
        .map_or(text, |(_, r)| r.trim_end_matches(')'));
    inner.parse().unwrap_or(f64::NAN)
}

#[test]
fn verl_grpo_trains_on_cpu_and_resumes_from_its_own_checkpoints() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    ensure_verl_image();
    let (profile, shared) = builtin_profile(&mut ctx, "");

    // The shipped JobSpec as it is: 2 steps, a checkpoint at step 2.
    let report = ctx
        .argus()
        .profile(&profile)
        .args([
            "run",
            "--json",
            "profiles/jobs/verl-grpo-cpu.yaml",
            "--set",
            "total_training_steps=2",
            "--set",
            "save_freq=2",
        ])
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let id = report["submission_id"]
        .as_str()
        .expect("submission_id")
        .to_string();
    let log = std::fs::read_to_string(shared.join(format!("jobs/{id}/logs/driver.log")))
        .expect("driver.log");
    assert!(log.contains("Total training steps: 2"), "{log}");

    // Both FSDP ranks, one per worker container, saved verl's checkpoint.
    let checkpoints = shared.join(format!("jobs/{id}/checkpoints"));
    for rank in 0..2 {
        let file = checkpoints.join(format!(
            "global_step_2/actor/model_world_size_2_rank_{rank}.pt"
        ));
        assert!(file.is_file(), "{} missing", file.display());
    }
    assert_eq!(
        std::fs::read_to_string(checkpoints.join("latest_checkpointed_iteration.txt"))
            .expect("latest")
            .trim(),
        "2"
    );

    // `job metrics` says what verl's own lines say.
    let verl = verl_step_lines(&log);
    assert_eq!(verl.keys().copied().collect::<Vec<_>>(), [1, 2], "{log}");
    let metrics = ctx
        .argus()
        .profile(&profile)
        .args(["job", "metrics", &id, "--json"])
        .run()
        .code(0)
        .json();
    let rows = metrics["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{metrics:#}");
    for row in rows {
        let step = row["step"].as_u64().expect("step");
        let logged = &verl[&step];
        assert!(
            logged.len() > 40,
            "verl logs ~80 metrics a step: {logged:?}"
        );
        for key in ["actor/pg_loss", "critic/score/mean", "timing_s/step"] {
            let ours = row["metrics"][key].as_f64().expect(key);
            let theirs = number(&logged[key]);
            assert!(
                (ours - theirs).abs() <= 1e-12 * theirs.abs().max(1.0),
                "step {step} {key}: argus {ours}, verl {theirs}"
            );
        }
    }

    // Resumed with more steps: verl loads its checkpoint and continues at step 3.
    let resumed = ctx
        .argus()
        .profile(&profile)
        .args([
            "submit",
            "--resume",
            &id,
            "--set",
            "total_training_steps=4",
            "--wait",
            "--json",
        ])
        .run()
        .code(0)
        .json();
    let new_id = resumed["submission_id"]
        .as_str()
        .expect("submission_id")
        .to_string();
    // The resumed job saved into the same directory, at its own save_freq.
    assert!(checkpoints.join("global_step_4/actor").is_dir());
    assert_eq!(
        std::fs::read_to_string(checkpoints.join("latest_checkpointed_iteration.txt"))
            .expect("latest")
            .trim(),
        "4"
    );
    let log2 = std::fs::read_to_string(shared.join(format!("jobs/{new_id}/logs/driver.log")))
        .expect("driver.log of the resumed job");
    assert!(log2.contains("global_step_2"), "{log2}");
    let steps2: Vec<u64> = verl_step_lines(&log2).keys().copied().collect();
    assert_eq!(steps2, [3, 4], "{log2}");
    let joined = ctx
        .argus()
        .profile(&profile)
        .args(["job", "metrics", &new_id, "--json"])
        .run()
        .code(0)
        .json();
    let joined_steps: Vec<u64> = joined["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["step"].as_u64())
        .collect();
    assert_eq!(joined_steps, [1, 2, 3, 4], "{joined:#}");

    // A checkpoint a rank never finished (its optimizer shard gone, the tracker naming it
    // all the same): the resume passes it over, says why, and names the complete one
    // before it, which verl loads (`resume_mode=resume_path`); steps 3 and 4 run again.
    std::fs::remove_file(checkpoints.join("global_step_4/actor/optim_world_size_2_rank_1.pt"))
        .expect("break global_step_4");
    let run = ctx
        .argus()
        .profile(&profile)
        .args([
            "submit",
            "--resume",
            &new_id,
            "--set",
            "total_training_steps=4",
            "--wait",
            "--json",
        ])
        .run()
        .code(0);
    assert!(
        run.stderr
            .contains("global_step_4 is not used: actor/optim_world_size_2_rank_1.pt is missing"),
        "{}",
        run.stderr
    );
    let third = run.json();
    let third_id = third["submission_id"].as_str().expect("submission_id");
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join(format!("jobs/{third_id}/job.json")))
            .expect("job.json"),
    )
    .expect("record");
    let entrypoint = record["entrypoint"].as_str().expect("entrypoint");
    assert!(
        entrypoint.contains(" trainer.resume_mode=resume_path ")
            && entrypoint.contains(&format!(
                "trainer.resume_from_path=/mnt/shared/jobs/{id}/checkpoints/global_step_2"
            )),
        "{entrypoint}"
    );
    let log4 = std::fs::read_to_string(shared.join(format!("jobs/{third_id}/logs/driver.log")))
        .expect("driver.log of the third job");
    assert!(
        log4.contains(&format!("/mnt/shared/jobs/{id}/checkpoints/global_step_2")),
        "verl loads the complete checkpoint: {log4}"
    );
    assert_eq!(
        verl_step_lines(&log4).keys().copied().collect::<Vec<_>>(),
        [3, 4],
        "{log4}"
    );

    // The run replays from its lock: the same image, code, data and model, verl again.
    let lock = report["lock"].as_str().expect("lock").to_string();
    let replay = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--json", "--lock", &lock])
        .run()
        .code(0)
        .json();
    assert_eq!(replay["job_status"], "SUCCEEDED", "{replay:#}");
    assert_eq!(replay["replay_of"], lock.as_str());
    let replayed = replay["submission_id"].as_str().expect("id");
    assert_ne!(replayed, id);
    let log3 = std::fs::read_to_string(shared.join(format!("jobs/{replayed}/logs/driver.log")))
        .expect("driver.log of the replay");
    assert_eq!(
        verl_step_lines(&log3).keys().copied().collect::<Vec<_>>(),
        [1, 2]
    );

    a_killed_worker_is_recovered_by_the_supervisor(&ctx, &profile, &shared);
    let _ = ctx.argus().profile(&profile).args(["down"]).run();
}

/// kill -9 of a worker container while verl trains (one FSDP rank on each worker): the
/// supervised run sees the container die, brings it back, and verl resumes from its own
/// last checkpoint as attempt 2; the run's metrics have steps 1..4 each once, as verl
/// logged them.
fn a_killed_worker_is_recovered_by_the_supervisor(
    ctx: &TestContext,
    profile: &Path,
    shared: &Path,
) {
    let out = ctx.path("supervised.out");
    let err = ctx.path("supervised.err");
    let mut run = ctx
        .argus()
        .profile(profile)
        .args([
            "run",
            "--json",
            "profiles/jobs/verl-grpo-cpu.yaml",
            "--set",
            "total_training_steps=4",
            "--set",
            "save_freq=1",
            "--restart",
            "2",
            "--restart-backoff",
            "0s",
        ])
        .spawn_to(&out, &err);
    let id = crate::harness::poll(
        "the supervised run's job",
        std::time::Duration::from_secs(300),
        || {
            std::fs::read_dir(shared.join("runs"))
                .ok()?
                .flatten()
                .map(|d| crate::harness::read_json(&d.path().join("report.json")))
                .find(|r| r["restart"].is_object())?["attempts"][0]["submission_id"]
                .as_str()
                .map(str::to_string)
        },
    );
    let tracker = shared.join(format!(
        "jobs/{id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    crate::harness::poll(
        "verl's global_step_2",
        std::time::Duration::from_secs(600),
        || (std::fs::read_to_string(&tracker).ok()?.trim() == "2").then_some(()),
    );
    // verl saves a step's checkpoint before it logs the step: wait for the line too, so
    // the kill lands after both (else step 2 is trained but never logged: recorded as
    // `unlogged_steps`, and the metrics have no row for it).
    crate::harness::poll(
        "verl's step:2 line",
        std::time::Duration::from_secs(120),
        || {
            let run = ctx
                .argus()
                .profile(profile)
                .args(["job", "logs", &id])
                .run();
            run.stdout.contains("step:2 - ").then_some(())
        },
    );
    let text = std::fs::read_to_string(profile).expect("profile");
    let cluster = text
        .lines()
        .find_map(|l| l.strip_prefix("name: "))
        .expect("the profile's name");
    // The worker the driver runs on (the built-in profile's entrypoint_resources put it on
    // a worker): Ray's copy of the driver's log goes with it, so the run keeps its own.
    let workers: Vec<String> = ctx
        .cluster_containers(cluster)
        .into_iter()
        .filter(|n| n.contains("-gpu-"))
        .collect();
    let worker = workers
        .iter()
        .find(|w| {
            // A process whose command line starts `python3 -m verl.trainer.main_ppo` (the
            // shell that looks, and Ray's shell around the entrypoint, only contain it).
            let script = "for f in /proc/[0-9]*/cmdline; do \
                tr '\\0' ' ' <\"$f\" | grep -q '^python3 -m verl.trainer.main_ppo' && echo \"$f\"; \
                done; true";
            !crate::harness::docker(&["exec", w, "sh", "-c", script])
                .trim()
                .is_empty()
        })
        .expect("the worker that runs verl's driver")
        .clone();
    crate::harness::docker(&["kill", "-s", "KILL", &worker]);
    let status = run.wait().expect("run");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("out")).expect("json");
    let attempts = report["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{report:#}");
    assert_eq!(attempts[0]["cause"], "node_lost", "{report:#}");
    let detail = attempts[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&worker) && detail.contains("137"),
        "{detail}"
    );
    let from = attempts[1]["resumed_from"]["step"]
        .as_u64()
        .expect("resumed");
    assert!(from >= 2, "{report:#}");
    assert!(
        attempts[0]["steps_lost"].as_u64().expect("lost") <= 1,
        "save_freq 1"
    );
    assert_eq!(report["job_status"], "SUCCEEDED");
    // verl's own word: it loaded the checkpoint and ran only the steps after it.
    let second = attempts[1]["submission_id"].as_str().expect("id");
    let log = std::fs::read_to_string(shared.join(format!("jobs/{second}/logs/driver.log")))
        .expect("driver.log of attempt 2");
    assert!(
        log.contains(&format!(
            "/mnt/shared/jobs/{id}/checkpoints/global_step_{from}"
        )),
        "{log}"
    );
    assert_eq!(
        verl_step_lines(&log).keys().copied().collect::<Vec<_>>(),
        ((from + 1)..=4).collect::<Vec<_>>()
    );
    let metrics = ctx
        .argus()
        .profile(profile)
        .args(["job", "metrics", second, "--json"])
        .run()
        .code(0)
        .json();
    let steps: Vec<u64> = metrics["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["step"].as_u64())
        .collect();
    // Each step once: attempt 1's up to its checkpoint, then attempt 2's. Ray's copy of
    // attempt 1's log died with the driver's node and argus's stream runs a little behind:
    // the end it had not delivered (step 2's line, printed just before the kill) is read
    // off the dead node's disk by the failure bundle.
    let unlogged = &attempts[0]["unlogged_steps"];
    assert_eq!(
        steps,
        [1, 2, 3, 4],
        "report: {report:#}\nmetrics: {metrics:#}"
    );
    assert!(
        unlogged.as_array().is_none_or(|a| a.is_empty()),
        "{report:#}"
    );
}

#[test]
fn verl_sft_trains_on_cpu_with_a_model_from_the_hf_mirror() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    ensure_verl_image();
    // The tiny model served by a real HF-protocol mirror, as a hub model would be.
    let olah = Olah::start(&ctx.path("olah"));
    let model_dir = Path::new("assets/verl/tiny-qwen2");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(model_dir).expect("tiny model") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        files.push((name, std::fs::read(entry.path()).expect("read")));
    }
    let (lfs, plain): (Vec<_>, Vec<_>) = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.clone()))
        .partition(|(n, _)| n.ends_with(".safetensors"));
    git_repo(&olah.mirrors, "models", "argus/tiny-qwen2", &plain, &lfs);
    let (profile, shared) = builtin_profile(&mut ctx, "");
    let text = std::fs::read_to_string(&profile).expect("profile").replace(
        "  HF_HUB_DISABLE_TELEMETRY: \"1\"",
        &format!(
            "  HF_HUB_DISABLE_TELEMETRY: \"1\"\n  HF_ENDPOINT: \"{}\"",
            olah.endpoint
        ),
    );
    std::fs::write(&profile, text).expect("profile");
    // The shipped SFT JobSpec without model_from: the model comes through the mirror.
    let spec = std::fs::read_to_string("profiles/jobs/verl-sft-cpu.yaml")
        .expect("verl-sft-cpu.yaml")
        .lines()
        .filter(|l| !l.starts_with("model_from:"))
        .collect::<Vec<_>>()
        .join("\n");
    let jobs = ctx.path("jobs");
    std::fs::create_dir_all(&jobs).expect("jobs dir");
    let spec_path = jobs.join("sft.yaml");
    std::fs::write(&spec_path, spec).expect("write spec");
    std::os::unix::fs::symlink(
        std::fs::canonicalize("profiles/jobs/quickstart").expect("quickstart"),
        jobs.join("quickstart"),
    )
    .expect("link the sample");
    let report = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--json"])
        .arg_path(&spec_path)
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let id = report["submission_id"].as_str().expect("id").to_string();
    let log = std::fs::read_to_string(shared.join(format!("jobs/{id}/logs/driver.log")))
        .expect("driver.log");
    let verl = verl_step_lines(&log);
    assert!(verl.values().any(|m| m.contains_key("train/loss")), "{log}");
    let metrics = ctx
        .argus()
        .profile(&profile)
        .args(["job", "metrics", &id, "--json"])
        .run()
        .code(0)
        .json();
    for row in metrics["rows"].as_array().expect("rows") {
        let step = row["step"].as_u64().expect("step");
        if let Some(theirs) = verl.get(&step).and_then(|m| m.get("train/loss")) {
            let ours = row["metrics"]["train/loss"].as_f64().expect("train/loss");
            assert!((ours - number(theirs)).abs() < 1e-9, "step {step}");
        }
    }
    // The model was complete in the shared cache when the job was submitted: the job was
    // sent to Ray with the hub switched off (HF_HUB_OFFLINE=1), and verl trained without it.
    let sent: Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join(format!("jobs/{id}/config/submit_payload.json")))
            .expect("the recorded payload"),
    )
    .expect("json");
    assert_eq!(
        sent["runtime_env"]["env_vars"]["HF_HUB_OFFLINE"], "1",
        "{sent:#}"
    );
    no_worker_asks_the_hub(&ctx, &profile, &olah);
    // The model verl trained is the mirror's, pinned in the run's lock.
    let lock: Value = serde_yaml::from_str(
        &std::fs::read_to_string(report["lock"].as_str().expect("lock")).expect("lock"),
    )
    .expect("yaml");
    assert_eq!(lock["model"]["repo"], "argus/tiny-qwen2");
    assert_eq!(lock["model"]["commit"].as_str().map(str::len), Some(40));

    // A dataset without the `messages` column verl's SFT reads: verl's own error, exit 1.
    let failed = ctx
        .argus()
        .profile(&profile)
        .args(["run", "--new"])
        .arg_path(&spec_path)
        .args(["--set", "train_file=gsm8k", "--set", "val_file=gsm8k"])
        .run()
        .code(1)
        .stderr_has("FAILED")
        .stderr_has("the driver's last lines:")
        .stderr_has("KeyError: 'messages'");
    let _ = failed;
    let _ = ctx.argus().profile(&profile).args(["down"]).run();
}

/// The model is complete in the shared cache and the cluster is up: a job that loads it by
/// its id (huggingface_hub's `snapshot_download`, transformers' `AutoConfig`) on both
/// workers, with the mirror reached through a relay on the cluster network's gateway that
/// counts the connections the containers make. Told `HF_HUB_OFFLINE=0` by its JobSpec, the
/// job asks the mirror (so the relay sees what workers would send); left to argus, it is
/// sent with `HF_HUB_OFFLINE=1` and no worker contacts the mirror at all.
fn no_worker_asks_the_hub(ctx: &TestContext, profile: &Path, olah: &Olah) {
    let text = std::fs::read_to_string(profile).expect("profile");
    let cluster = text
        .lines()
        .find_map(|l| l.strip_prefix("name: "))
        .expect("the profile's name");
    let gateway = crate::harness::docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
        &format!("{cluster}-head"),
    ]);
    let relay = CountingRelay::start(gateway.trim(), olah.port());
    let code = ctx.path("hubcheck");
    std::fs::create_dir_all(&code).expect("mkdir");
    std::fs::write(
        code.join("hubcheck.py"),
        r#"import os, socket, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

@ray.remote(num_cpus=0)
def load(repo):
    from huggingface_hub import snapshot_download
    from transformers import AutoConfig
    path = snapshot_download(repo)
    AutoConfig.from_pretrained(repo)
    return socket.gethostname(), os.environ.get("HF_HUB_OFFLINE"), path

ray.init()
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
assert len(nodes) == 2, nodes
pin = lambda n: NodeAffinitySchedulingStrategy(n, soft=False)
for host, offline, path in ray.get([load.options(scheduling_strategy=pin(n)).remote("argus/tiny-qwen2") for n in nodes]):
    print(f"HUBCHECK {host} HF_HUB_OFFLINE={offline} {path}")
"#,
    )
    .expect("hubcheck.py");
    ctx.argus()
        .profile(profile)
        .args(["snapshot", "--code-id", "hubcheck"])
        .arg_path(&code)
        .run()
        .code(0);
    // (submission id, what its JobSpec tells HF_HUB_OFFLINE, if anything)
    for (id, told) in [("hub-asked", Some("0")), ("hub-off", None)] {
        let offline_env = told.map_or(String::new(), |v| format!("\n  HF_HUB_OFFLINE: '{v}'"));
        let spec = ctx.write(
            &format!("{id}.yaml"),
            &format!(
                "workload: custom\nsubmission_id: {id}\ncode_id: hubcheck\nentrypoint: python3 hubcheck.py\nmodel_id: argus/tiny-qwen2\nenv_vars:\n  HF_ENDPOINT: {}{offline_env}\n",
                relay.endpoint
            ),
        );
        let before = relay.connections();
        ctx.argus()
            .profile(profile)
            .args(["submit", "--wait"])
            .arg_path(&spec)
            .run()
            .code(0)
            .stderr_has(&format!("job {id} SUCCEEDED"));
        let log = ctx
            .argus()
            .profile(profile)
            .args(["job", "logs", id])
            .run()
            .code(0)
            .stdout;
        // One line from each of the two workers, each with what the job's environment said.
        let said = told.unwrap_or("1");
        let lines: Vec<_> = log.lines().filter(|l| l.contains("HUBCHECK")).collect();
        assert_eq!(lines.len(), 2, "{log}");
        let hosts: std::collections::BTreeSet<_> = lines
            .iter()
            .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "HUBCHECK").nth(1))
            .collect();
        assert_eq!(hosts.len(), 2, "two workers: {log}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains(&format!("HF_HUB_OFFLINE={said} "))),
            "{log}"
        );
        let made = relay.connections() - before;
        eprintln!("measure: job {id}: {made} connection(s) from the workers to the mirror");
        if told.is_none() {
            assert_eq!(made, 0, "the workers asked the mirror: {log}");
        } else {
            assert!(made >= 2, "the relay saw {made} connection(s): {log}");
        }
    }
}

/// A verl release's Hydra configs (`tests/fixtures/verl-<version>-config`, from its wheel) as
/// the snapshot `verl-snapshot-id`, under a profile of its own.
fn snapshot_of(ctx: &mut TestContext, fixture: &str) -> PathBuf {
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &crate::harness::test_profile(&name, &shared, 8265, 1, ""),
    );
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "verl-snapshot-id"])
        .arg_path(Path::new(fixture))
        .run()
        .code(0);
    profile
}

#[test]
fn the_shipped_cpu_jobspecs_are_checked_against_their_releases_own_configs() {
    // 0.9.1's JobSpecs against 0.9.1's configs, then 0.8.0's against 0.8.0's (the check of a
    // key 0.8.0 does not have runs on the last).
    let mut ctx = TestContext::new("verlcfg091");
    let profile = snapshot_of(&mut ctx, "tests/fixtures/verl-0.9.1-config");
    cpu_jobspecs_pass(&ctx, &profile, &["verl-grpo-cpu", "verl-sft-cpu"]);
    let mut ctx = TestContext::new("verlcfg");
    let profile = snapshot_of(&mut ctx, "tests/fixtures/verl-0.8.0-config");
    cpu_jobspecs_pass(&ctx, &profile, &["verl-grpo-cpu-0.8.0"]);
    // A key verl 0.8.0 does not have: refused before anything is sent, with the fix.
    let bad = ctx.write(
        "bad.yaml",
        "workload: grpo\ncode_id: verl-snapshot-id\noverrides:\n  trainer.save_frq: 1\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run"])
        .arg_path(&bad)
        .run()
        .code(2)
        .stderr_has("trainer.save_freq");
}

/// The CPU JobSpecs' overrides, as the check judges them with the snapshot named.
fn cpu_jobspecs_pass(ctx: &TestContext, profile: &Path, jobs: &[&str]) {
    for job in jobs {
        let text = std::fs::read_to_string(format!("profiles/jobs/{job}.yaml"))
            .expect("jobspec")
            .lines()
            .filter(|l| {
                !["code:", "  source:", "  name:", "model_from:", "data_from:"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .collect::<Vec<_>>()
            .join("\n");
        let spec = ctx.write(
            &format!("{job}.yaml"),
            &format!("code_id: verl-snapshot-id\n{text}\n"),
        );
        let out = ctx
            .argus()
            .profile(profile)
            .args(["submit", "--dry-run", "--json"])
            .arg_path(&spec)
            .run()
            .code(0)
            .json();
        assert!(
            out["checked_overrides_against"].as_str().is_some(),
            "{job}: {out:#}"
        );
    }
}

/// The GPU JobSpecs run verl 0.9.1 (`code.source: pypi:verl==0.9.1`): with that release's
/// configs as their snapshot (`--set code_id`, as after `argus snapshot`), every override is
/// checked and none is refused, and what the image without flash-attn needs and the V1
/// trainer's TransferQueue placement are in the command line.
#[test]
fn the_shipped_gpu_jobspecs_are_checked_against_verl_0_9_1s_own_configs() {
    let mut ctx = TestContext::new("verlcfg091");
    let profile = snapshot_of(&mut ctx, "tests/fixtures/verl-0.9.1-config");
    for job in ["ppo", "grpo", "sft"] {
        let spec = PathBuf::from(format!("profiles/jobs/{job}.yaml"));
        let text = std::fs::read_to_string(&spec).expect("jobspec");
        assert!(text.contains("source: pypi:verl==0.9.1"), "{job}");
        // `submit` needs the snapshot `argus run` would make.
        ctx.argus()
            .profile(&profile)
            .args(["submit", "--dry-run"])
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has("code.source is snapshotted by `argus run`");
        let out = ctx
            .argus()
            .profile(&profile)
            .args([
                "submit",
                "--dry-run",
                "--json",
                "--set",
                "code_id=verl-snapshot-id",
            ])
            .arg_path(&spec)
            .run()
            .code(0)
            .json();
        assert!(
            out["checked_overrides_against"]
                .as_str()
                .is_some_and(|s| s.contains("verl-snapshot-id")),
            "{job}: {out:#}"
        );
        assert!(
            out["notes"]
                .as_array()
                .is_none_or(|n| n.iter().all(|n| !n.to_string().contains("not checked"))),
            "{job}: {out:#}"
        );
        let entrypoint = out["payload"]["entrypoint"].as_str().unwrap_or_default();
        for needed in [
            "use_remove_padding=",
            "override_config.attn_implementation=sdpa",
        ] {
            assert!(entrypoint.contains(needed), "{job}: {entrypoint}");
        }
        if job != "sft" {
            for needed in [
                "actor_rollout_ref.rollout.name=vllm",
                "+transfer_queue.backend.SimpleStorage.required_node_resource=worker_node",
            ] {
                assert!(entrypoint.contains(needed), "{job}: {entrypoint}");
            }
        }
    }
}

#[test]
fn a_verl_job_the_cluster_cannot_hold_or_a_model_dir_without_config_is_refused_before_submission() {
    let Some(mut ctx) = TestContext::docker() else {
        return;
    };
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    // One worker with 2 simulated GPUs.
    let port = free_port();
    let profile = ctx.write(
        "p.yaml",
        &crate::harness::test_profile(&name, &shared, port, 1, ""),
    );
    ctx.argus().profile(&profile).args(["up"]).run().code(0);
    std::fs::create_dir_all(shared.join("user/code")).expect("code dir");
    std::fs::create_dir_all(shared.join("models/empty")).expect("model dir");
    let jobs_before = entry_names(&shared.join("jobs")).len();
    let spec = ctx.write(
        "big.yaml",
        "workload: grpo\ncode_path: /mnt/shared/user/code\nnnodes: 2\nn_gpus_per_node: 2\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--no-check"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("trainer.nnodes=2 x trainer.n_gpus_per_node=2")
        .stderr_has("1 live worker(s) with 2 GPU(s)");
    let spec = ctx.write(
        "model.yaml",
        "workload: grpo\ncode_path: /mnt/shared/user/code\nmodel_id: /mnt/shared/models/empty\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--no-check"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("holds no config.json");
    // A driver asking for a resource only the live cluster can tell is absent (a node's
    // address): refused at submit with what the nodes have, not left PENDING forever.
    let pinned = ctx.write(
        "pinned.yaml",
        &(crate::harness::test_profile(&name, &shared, port, 1, "")
            + "submit:\n  entrypoint_resources: {\"node:10.99.99.99\": 0.01}\n"),
    );
    let spec = ctx.write(
        "pinned-job.yaml",
        "workload: custom\ncode_path: /mnt/shared/user/code\nentrypoint: python3 -c 1\n",
    );
    ctx.argus()
        .profile(&pinned)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("node:10.99.99.99")
        .stderr_has("its driver would wait forever");
    let jobs_after = entry_names(&shared.join("jobs")).len();
    assert_eq!(jobs_before, jobs_after, "nothing was recorded or submitted");
    let list = ctx
        .argus()
        .profile(&profile)
        .args(["job", "list", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list:#}");

    // A job that runs but asks Ray for a placement no node can give (as verl does when the
    // nodes advertise too few CPUs): said while waiting, not left to its time limit.
    std::fs::write(
        shared.join("user/code/pg.py"),
        "import time, ray\nfrom ray.util.placement_group import placement_group\nray.init()\npg = placement_group([{'CPU': 64, 'cpu': 1}])\nprint('asked', flush=True)\ntime.sleep(300)\n",
    )
    .expect("pg.py");
    let spec = ctx.write(
        "pg.yaml",
        "workload: custom\nsubmission_id: pg-infeasible\ncode_path: /mnt/shared/user/code\nentrypoint: python3 /mnt/shared/user/code/pg.py\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit"])
        .arg_path(&spec)
        .run()
        .code(0);
    ctx.argus()
        .profile(&profile)
        .args(["job", "wait", "pg-infeasible", "--timeout", "60"])
        .run()
        .code(1)
        .stderr_has("infeasible")
        .stderr_has(r#"{"CPU":64.0,"cpu":1.0}"#);
    ctx.argus()
        .profile(&profile)
        .args(["job", "stop", "pg-infeasible", "--wait"])
        .run();
    let _ = ctx.argus().profile(&profile).args(["down"]).run();
}

/// verl 0.8.0 stays supported: its JobSpec trains GRPO on its own image, and on a profile
/// whose image is 0.9.1's the same JobSpec is refused before anything starts, naming both
/// releases and the command that builds the right image.
#[test]
fn verl_0_8_0_trains_on_its_image_and_is_refused_on_another_releases() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let (profile, shared) = builtin_profile(&mut ctx, "");
    // The built-in profile's image (0.9.1), kept: refused, nothing made.
    ctx.argus()
        .profile(&profile)
        .args(["run", "profiles/jobs/verl-grpo-cpu-0.8.0.yaml"])
        .run()
        .code(2)
        .stderr_has(
            "the job's code is verl 0.8.0, but the image argus/verl:0.9.1-cpu holds verl 0.9.1's dependencies",
        )
        .stderr_has("argus image build --verl --verl-version 0.8.0");
    assert!(!shared.exists(), "nothing on the shared storage");

    ensure_verl_080_image();
    let text = std::fs::read_to_string(&profile)
        .expect("profile")
        .replace("image: argus/verl:0.9.1-cpu", "image: argus/verl:0.8.0-cpu");
    let profile = ctx.write("local-080.yaml", &text);
    let report = ctx
        .argus()
        .profile(&profile)
        .args([
            "run",
            "--json",
            "--down-after",
            "profiles/jobs/verl-grpo-cpu-0.8.0.yaml",
            "--set",
            "total_training_steps=2",
        ])
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let id = report["submission_id"].as_str().expect("submission_id");
    let log = std::fs::read_to_string(shared.join(format!("jobs/{id}/logs/driver.log")))
        .expect("driver.log");
    // 0.8.0's own trainer (not 0.9's V1: `TaskRunnerV1`), two steps.
    assert!(log.contains("Total training steps: 2"), "{log}");
    assert!(!log.contains("TaskRunnerV1"), "{log}");
    assert_eq!(
        verl_step_lines(&log).keys().copied().collect::<Vec<_>>(),
        [1, 2],
        "{log}"
    );
}
