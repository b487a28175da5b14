//! A running job as researchers look at it: `job status` progress, `job metrics`, the step
//! bar, `job plot` and `--resume`. First from saved records alone (no cluster), then on a
//! real Ray cluster whose driver is a stand-in for verl's PPO entrypoint that prints
//! verl's exact console lines from a Ray actor (so the log carries Ray's real prefixes),
//! saves checkpoints as verl lays them out and resumes from them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Run, TestContext, free_port, poll, read_json, test_profile};

/// The stand-in for `python3 -m verl.trainer.main_ppo`. With Hydra-style arguments it
/// reads `trainer.*` like verl; without (a custom workload) it reads FAKE_* and the
/// ARGUS_* paths argus gives every job.
const FAKE_TRAINER: &str = r#"
import numbers
import os
import pprint
import sys
import time

import ray


class NpFloat64(float):
    """What numpy 2 prints for an np.float64 (verl's validation means are numpy)."""

    def __repr__(self):
        return f"np.float64({float.__repr__(self)})"


def console_line(step, metrics):
    # verl's console logger: the step, then each numeric value's pformat, " - " between.
    parts = [f"step:{step}"]
    parts += [f"{k}:{pprint.pformat(v)}" for k, v in metrics.items() if isinstance(v, numbers.Number)]
    return " - ".join(parts)


def say(text):
    print(text, flush=True)


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self, cfg):
        total = int(cfg["trainer.total_training_steps"])
        save_freq = int(cfg.get("trainer.save_freq", "-1"))
        test_freq = int(cfg.get("trainer.test_freq", "-1"))
        ckpt = cfg["trainer.default_local_dir"]
        mode = cfg.get("trainer.resume_mode", "auto")
        marker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
        sleep = float(os.environ.get("FAKE_STEP_SLEEP", "0.3"))
        hang_after = int(os.environ.get("FAKE_HANG_AFTER", "0"))
        fail_at = int(os.environ.get("FAKE_FAIL_AT", "0"))
        scale = float(os.environ.get("FAKE_SCORE_SCALE", "1"))
        start = 1
        say(f"resume_mode={mode} default_local_dir={ckpt}")
        if mode == "auto" and os.path.exists(marker):
            with open(marker) as f:
                last = int(f.read())
            say(f"Load from checkpoint folder: {ckpt}/global_step_{last}")
            start = last + 1
        elif mode == "resume_path":
            path = cfg["trainer.resume_from_path"]
            say(f"Load from checkpoint folder: {path}")
            start = int(path.rsplit("global_step_", 1)[1]) + 1
        say(f"Total training steps: {total}")
        if start == 1:
            val = {"val-core/openai/gsm8k/reward/mean@1": NpFloat64(0.125)}
            say(f"Initial validation metrics: {pprint.pformat(val)}")
            say(console_line(0, val))
        for step in range(start, total + 1):
            time.sleep(sleep)
            if step == 2:
                say("step:2 - critic/score/mean:9.9 - note:rollout starting")
            metrics = {
                "actor/pg_loss": -0.015 * step,
                "actor/lr": 1e-06,
                "actor/entropy": float("nan") if step == 3 else 1.0 / step,
                "critic/score/mean": scale * step / 10,
                "response_length/mean": 100 + step,
                "perf/max_memory_allocated_gb": float("inf") if step == 1 else 2.5,
                "timing_s/step": sleep,
            }
            if test_freq > 0 and step % test_freq == 0:
                metrics["val-core/openai/gsm8k/reward/mean@1"] = NpFloat64(scale * step / 8)
                metrics["val-aux/openai/gsm8k/reward/std@1"] = 0.5
            say(console_line(step, metrics))
            if save_freq > 0 and step % save_freq == 0:
                # verl's FSDP layout, one rank: every shard, the dataloader's state, then
                # the tracker (argus resumes only from a checkpoint with all of them).
                actor = os.path.join(ckpt, f"global_step_{step}", "actor")
                os.makedirs(actor, exist_ok=True)
                for kind in ("model", "optim", "extra_state"):
                    with open(os.path.join(actor, f"{kind}_world_size_1_rank_0.pt"), "w") as f:
                        f.write(str(step))
                with open(os.path.join(ckpt, f"global_step_{step}", "data.pt"), "w") as f:
                    f.write(str(step))
                with open(marker + ".tmp", "w") as f:
                    f.write(str(step))
                os.replace(marker + ".tmp", marker)
            if step == fail_at:
                raise ValueError(f"FAKE_FAIL_AT: the batch of step {step} is bad")
            # A hang happens once per checkpoint directory (a restarted job goes on).
            hung = os.path.join(ckpt, "hung")
            if step == hang_after and not os.path.exists(hung):
                os.makedirs(ckpt, exist_ok=True)
                open(hung, "w").close()
                time.sleep(600)
        return total


if __name__ == "__main__":
    cfg = {}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        cfg[key.lstrip("+")] = value.strip("'\"")
    if "trainer.total_training_steps" not in cfg:
        # A custom workload: the checkpoint directory argus gives a resumed job, else its own.
        own = os.path.join(os.environ["ARGUS_JOB_DIR"], "checkpoints")
        cfg = {
            "trainer.total_training_steps": os.environ["FAKE_TOTAL"],
            "trainer.save_freq": os.environ.get("FAKE_SAVE_FREQ", "-1"),
            "trainer.default_local_dir": os.environ.get("ARGUS_CHECKPOINT_DIR", own),
        }
    ray.init()
    gpus = float(os.environ.get("FAKE_GPUS", "0"))
    ray.get(TaskRunner.options(num_gpus=gpus).remote().run.remote(cfg))
    # The actor's last lines reach this driver's log through Ray's log monitor: leave it a
    # moment before the driver (and so the job) ends, as verl's own teardown does.
    time.sleep(3)
"#;

/// The keys override checking needs (a cut of verl's `_generated_ppo_trainer.yaml`).
const FAKE_CONFIG: &str = "data: {train_files: x, val_files: x}\nactor_rollout_ref:\n  model: {path: x}\n  rollout: {name: x}\ncritic:\n  model: {path: x}\ntrainer: {nnodes: 1, n_gpus_per_node: 1, total_training_steps: null, save_freq: -1, test_freq: -1, default_local_dir: x, logger: [console], resume_mode: auto, resume_from_path: null}\n";

/// What the stand-in logs for 6 steps with test_freq 3, as `job metrics --csv` prints it.
const EXPECTED_CSV: &str = "\
step,val-core/openai/gsm8k/reward/mean@1,actor/pg_loss,actor/lr,actor/entropy,critic/score/mean,response_length/mean,perf/max_memory_allocated_gb,timing_s/step,val-aux/openai/gsm8k/reward/std@1
0,0.125,,,,,,,,
1,,-0.015,1e-06,1,0.1,101,inf,0.3,
2,,-0.03,1e-06,0.5,0.2,102,2.5,0.3,
3,0.375,-0.045,1e-06,nan,0.3,103,2.5,0.3,0.5
4,,-0.06,1e-06,0.25,0.4,104,2.5,0.3,
5,,-0.075,1e-06,0.2,0.5,105,2.5,0.3,
6,0.75,-0.09,1e-06,0.16666666666666666,0.6,106,2.5,0.3,0.5
";

fn argus(ctx: &TestContext, profile: &Path, args: &[&str]) -> Run {
    ctx.argus().profile(profile).args(args).run()
}

/// The pixels of a PNG: (width, height, RGB bytes).
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(path).expect("png");
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Checks a PNG plot: its size, that it is not blank, and that the first series' colour
/// (Tableau blue) is drawn.
fn assert_plot(path: &Path, figure: &Value) {
    let (w, h, rgb) = decode_png(path);
    assert_eq!(
        (w as u64, h as u64),
        (
            figure["width"].as_u64().expect("width"),
            figure["height"].as_u64().expect("height")
        )
    );
    let white = rgb.chunks(3).filter(|p| *p == [255, 255, 255]).count();
    let total = rgb.len() / 3;
    assert!(white < total * 99 / 100, "the image is blank");
    let series = rgb.chunks(3).filter(|p| *p == [31, 119, 180]).count();
    assert!(series > 200, "the first series is drawn: {series} pixels");
}

/// The `(step, value)` points of one panel and job in `job plot --json`.
fn plotted(figure: &Value, key: &str, job: &str) -> Vec<(u64, Value)> {
    let panel = figure["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("no panel {key} in {figure:#}"));
    let series = panel["series"]
        .as_array()
        .expect("series")
        .iter()
        .find(|s| s["job"] == job)
        .unwrap_or_else(|| panic!("no series {job} in {panel:#}"));
    series["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| (p[0].as_u64().expect("step"), p[1].clone()))
        .collect()
}

/// A job record as `argus submit` leaves it once the job ended, with this driver log.
fn saved_job(shared: &Path, id: &str, log: &str, resumes: Option<&str>) {
    let dir = shared.join("jobs").join(id);
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    std::fs::write(dir.join("logs/driver.log"), log).expect("log");
    let mut record = serde_json::json!({
        "submission_id": id, "workload": "ppo", "code_id": "c", "code_path": "/mnt/shared/common/code/verl/c",
        "entrypoint": "python3 -m verl.trainer.main_ppo trainer.total_training_steps=4",
        "cluster": "gone", "dashboard": "", "submitted_at": "2026-01-01T00:00:00Z",
        "status": "STOPPED", "start_time": 1_000_000, "end_time": 1_090_000,
    });
    if let Some(previous) = resumes {
        record["resumes"] = previous.into();
    }
    std::fs::write(dir.join("job.json"), record.to_string()).expect("record");
}

#[test]
fn metrics_plots_and_progress_from_saved_logs_without_a_cluster() {
    let mut ctx = TestContext::new("trainrec");
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    // verl's lines as a Ray job log has them, noise between.
    let log = "\
2026-01-01 00:00:00,000\tINFO worker.py:1691 -- Connecting to existing Ray cluster
\x1b[36m(TaskRunner pid=265)\x1b[0m Total training steps: 4
\x1b[36m(TaskRunner pid=265)\x1b[0m Initial validation metrics: {'val-core/openai/gsm8k/reward/mean@1': np.float64(0.125)}
\x1b[36m(TaskRunner pid=265)\x1b[0m step:0 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.125)
\x1b[36m(TaskRunner pid=265)\x1b[0m step:1 - actor/pg_loss:-0.015 - actor/lr:1e-06 - critic/score/mean:0.1 - timing_s/step:0.3
\x1b[36m(TaskRunner pid=265)\x1b[0m step:2 - critic/score/mean:9.9 - note:rollout starting
Training Progress:  50%|#####     | 2/4\r\x1b[36m(TaskRunner pid=265, ip=10.0.0.3)\x1b[0m step:2 - actor/pg_loss:-0.03 - actor/lr:1e-06 - critic/score/mean:nan - timing_s/step:0.3 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.25)
(TaskRunner pid=265) step:3 - actor/pg_loss:-0.045 - actor/lr:1e-06 - critic/score/mean:0.3 - timing_s/step:0.3
";
    saved_job(&shared, "rec-a", log, None);
    let expected = "\
step,val-core/openai/gsm8k/reward/mean@1,actor/pg_loss,actor/lr,critic/score/mean,timing_s/step
0,0.125,,,,
1,,-0.015,1e-06,0.1,0.3
2,0.25,-0.03,1e-06,nan,0.3
3,,-0.045,1e-06,0.3,0.3
";
    let run = argus(&ctx, &profile, &["job", "metrics", "rec-a", "--csv"]).code(0);
    assert_eq!(run.stdout, expected);

    // --keys (globs, in the order given) and JSON with nan as a string.
    let json = argus(
        &ctx,
        &profile,
        &[
            "job",
            "metrics",
            "rec-a",
            "--json",
            "--keys",
            "critic/*",
            "--keys",
            "val-core/*",
        ],
    )
    .code(0)
    .json();
    assert_eq!(
        json["keys"],
        serde_json::json!(["critic/score/mean", "val-core/openai/gsm8k/reward/mean@1"])
    );
    assert_eq!(json["total_steps"], 4);
    assert_eq!(json["rows"][2]["metrics"]["critic/score/mean"], "nan");
    assert_eq!(
        json["rows"][2]["metrics"]["val-core/openai/gsm8k/reward/mean@1"],
        0.25
    );
    assert_eq!(json["rows"][3]["metrics"]["critic/score/mean"], 0.3);
    assert!(
        json["rows"][1]["metrics"]
            .get("val-core/openai/gsm8k/reward/mean@1")
            .is_none()
    );
    argus(
        &ctx,
        &profile,
        &["job", "metrics", "rec-a", "--keys", "nope/*"],
    )
    .code(2)
    .stderr_has("no metric matches --keys \"nope/*\"")
    .stderr_has("hint: the log has: val-core/openai/gsm8k/reward/mean@1, actor/pg_loss");
    argus(&ctx, &profile, &["job", "metrics", "rec-a", "--keys", "a["]).code(2);

    // Progress of the ended job, from its record.
    let status = argus(&ctx, &profile, &["job", "status", "rec-a", "--json"])
        .code(0)
        .json();
    let progress = &status["progress"];
    assert_eq!(
        (progress["step"].as_u64(), progress["total_steps"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(progress["elapsed_s"], 90.0);
    assert!(progress["eta_s"].is_null(), "an ended job has no ETA");
    assert_eq!(progress["metrics"][0]["key"], "critic/score/mean");
    assert_eq!(progress["metrics"][0]["value"], 0.3);
    assert_eq!(progress["metrics"][1]["value"], 0.25);
    argus(&ctx, &profile, &["job", "status", "rec-a"])
        .code(0)
        .stdout_has("3/4 (75%)")
        .stdout_has("critic/score/mean at step 3");

    // A resumed job's metrics continue the chain.
    saved_job(
        &shared,
        "rec-b",
        "(TaskRunner pid=9) Total training steps: 4\n(TaskRunner pid=9) step:3 - critic/score/mean:0.33\n(TaskRunner pid=9) step:4 - critic/score/mean:0.4\n",
        Some("rec-a"),
    );
    let json = argus(
        &ctx,
        &profile,
        &[
            "job",
            "metrics",
            "rec-b",
            "--json",
            "--keys",
            "critic/score/mean",
        ],
    )
    .code(0)
    .json();
    let rows: Vec<(u64, String, Value)> = json["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["step"].as_u64().expect("step"),
                r["job"].as_str().expect("job").to_string(),
                r["metrics"]["critic/score/mean"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "rec-a".into(), 0.1.into()),
            (2, "rec-a".into(), "nan".into()),
            (3, "rec-b".into(), 0.33.into()),
            (4, "rec-b".into(), 0.4.into()),
        ]
    );

    // Plots: PNG with the figure's size, ink and the log's points; SVG; two jobs compared.
    let png = ctx.path("out/a.png");
    std::fs::create_dir_all(png.parent().expect("dir")).expect("mkdir");
    let out = argus(
        &ctx,
        &profile,
        &[
            "job",
            "plot",
            "rec-a",
            "--json",
            "-o",
            &png.display().to_string(),
        ],
    )
    .code(0)
    .json();
    let figure = &out["figure"];
    assert_eq!(figure["title"], "job rec-a");
    assert_plot(&png, figure);
    assert_eq!(
        plotted(figure, "critic/score/mean", "rec-a"),
        [(1, 0.1.into()), (2, Value::Null), (3, 0.3.into())],
        "nan is kept in the data (null in JSON) and left out of the line"
    );
    assert_eq!(
        plotted(figure, "val-core/openai/gsm8k/reward/mean@1", "rec-a"),
        [(0, 0.125.into()), (2, 0.25.into())]
    );
    let svg = ctx.path("out/cmp.svg");
    let out = argus(
        &ctx,
        &profile,
        &[
            "job",
            "plot",
            "rec-a",
            "rec-b",
            "--keys",
            "critic/score/mean",
            "-o",
            &svg.display().to_string(),
        ],
    )
    .code(0);
    assert_eq!(out.stdout.trim(), svg.display().to_string());
    let text = std::fs::read_to_string(&svg).expect("svg");
    for needle in ["jobs rec-a vs rec-b", "critic/score/mean", "step", "rec-b"] {
        assert!(text.contains(needle), "{needle} in the SVG");
    }

    // Bad output paths: nothing is written.
    let blocker = ctx.write("a-file", "not a directory");
    let inside = blocker.join("x.png");
    argus(
        &ctx,
        &profile,
        &["job", "plot", "rec-a", "-o", &inside.display().to_string()],
    )
    .code(2)
    .stderr_has("cannot write")
    .stderr_has("hint: choose a writable path with -o");
    argus(&ctx, &profile, &["job", "plot", "rec-a", "-o", "x.jpg"])
        .code(2)
        .stderr_has("must end in .png or .svg");

    // A log without verl lines: an empty table, said so, exit 0; nothing to plot.
    saved_job(&shared, "plain", "hello\nstep:one - not a metric\n", None);
    let run = argus(&ctx, &profile, &["job", "metrics", "plain", "--csv"])
        .code(0)
        .stderr_has("has no verl step lines");
    assert_eq!(run.stdout, "step\n");
    argus(&ctx, &profile, &["job", "metrics", "plain"])
        .code(0)
        .stdout_has("STEP");
    argus(
        &ctx,
        &profile,
        &[
            "job",
            "plot",
            "plain",
            "-o",
            &ctx.path("p.png").display().to_string(),
        ],
    )
    .code(2)
    .stderr_has("nothing to plot");
    assert!(!ctx.path("p.png").exists());
    let status = argus(&ctx, &profile, &["job", "status", "plain", "--json"])
        .code(0)
        .json();
    assert!(status["progress"].is_null());
}

/// The tmux server of a test (its own socket), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(ctx: &TestContext) -> Self {
        Tmux {
            socket: ctx.prefix.clone(),
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// Runs `shell` in a new 200×50 terminal named `name`, then keeps the pane open.
    fn start(&self, name: &str, dir: &Path, shell: &str) {
        let status = self
            .command()
            .args([
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "200",
                "-y",
                "50",
                "-c",
            ])
            .arg(dir)
            .arg(format!("{shell}; echo EXIT=$?; sleep 600"))
            .env("NO_COLOR", "1")
            .env_remove("ARGUS_PROFILE")
            .status()
            .expect("tmux");
        assert!(status.success());
    }

    /// The whole pane (scrollback included), as the terminal shows it.
    fn screen(&self, name: &str) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-J", "-S", "-", "-t", name])
            .output()
            .expect("tmux capture");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// One small cluster with the stand-in verl snapshotted, and how its scenarios call argus.
pub struct Training {
    pub ctx: TestContext,
    pub profile: PathBuf,
    pub shared: PathBuf,
    /// The cluster's name.
    pub name: String,
    started: std::time::Instant,
}

impl Training {
    /// `argus up` and the stand-in's snapshot (`None`: Docker tests are skipped).
    fn up() -> Option<Training> {
        let started = std::time::Instant::now();
        let mut ctx = TestContext::docker()?;
        let name = ctx.cluster("c");
        let shared = ctx.path("shared");
        let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
        argus(&ctx, &profile, &["up"]).code(0);
        ctx.write("fakeverl/verl/__init__.py", "");
        ctx.write("fakeverl/verl/trainer/__init__.py", "");
        ctx.write("fakeverl/verl/trainer/main_ppo.py", FAKE_TRAINER);
        ctx.write(
            "fakeverl/verl/trainer/config/_generated_ppo_trainer.yaml",
            FAKE_CONFIG,
        );
        argus(
            &ctx,
            &profile,
            &[
                "snapshot",
                "--code-id",
                "fakeverl",
                &ctx.path("fakeverl").display().to_string(),
            ],
        )
        .code(0);
        // A model directory as submit requires one (the stand-in never loads it).
        ctx.write("shared/models/none/config.json", "{}");
        Some(Training {
            ctx,
            profile,
            shared,
            name,
            started,
        })
    }

    pub fn argus(&self, args: &[&str]) -> Run {
        argus(&self.ctx, &self.profile, args)
    }

    /// A PPO JobSpec `<id>.yaml` of the stand-in: 6 steps, a checkpoint every 2, validation
    /// every 3.
    fn spec(&self, id: &str, extra: &str) -> PathBuf {
        self.ctx.write(
            &format!("{id}.yaml"),
            &format!("workload: ppo\nsubmission_id: {id}\ncode_id: fakeverl\nmodel_id: /mnt/shared/models/none\ntotal_training_steps: 6\nsave_freq: 2\ntest_freq: 3\n{extra}"),
        )
    }

    /// Runs one scenario, saying when it starts. `ARGUS_TEST_SCENARIOS=<text>` runs only
    /// those whose title has it (to work on a few; the full test runs them all).
    fn scenario(&self, title: &str, scenario: fn(&Training)) {
        if let Ok(only) = std::env::var("ARGUS_TEST_SCENARIOS")
            && !title.contains(&only)
        {
            return;
        }
        eprintln!("[{:>6.1?}] {title}", self.started.elapsed());
        scenario(self);
    }
}

/// The scenarios share one cluster (bringing one up takes most of a minute here), so they are
/// one test, each a named function called in sequence. Order matters: the metrics and the
/// plot read the job the first one ran.
#[test]
fn training_jobs_on_a_real_cluster() {
    let Some(t) = Training::up() else {
        return;
    };
    t.scenario(
        "A verl job followed from a pipe",
        a_verl_job_followed_from_a_pipe_streams_without_a_bar,
    );
    t.scenario("Metrics", metrics_are_exact_and_saved_when_the_job_ends);
    t.scenario(
        "The plot of the real log",
        the_plot_of_the_real_log_has_its_points,
    );
    t.scenario(
        "The bar in a real terminal (tmux)",
        the_bar_is_drawn_in_a_real_terminal_and_not_with_no_progress,
    );
    t.scenario("Resume", a_stopped_job_is_resumed_from_its_checkpoint);
    t.scenario("No checkpoint", a_job_without_checkpoint_is_not_resumed);
    t.scenario("Unknown ids are bad input.", unknown_ids_are_bad_input);
    t.scenario(
        "A custom job without verl lines",
        a_custom_job_without_verl_lines_has_no_metrics_or_progress,
    );
    t.scenario(
        "argus run --resume",
        a_stopped_run_is_resumed_by_a_second_run,
    );
    use crate::supervise::*;
    t.scenario(
        "Supervised: a killed worker",
        a_killed_worker_is_recovered_from_the_last_complete_checkpoint,
    );
    t.scenario("Supervised: a hang", a_hang_is_detected_and_restarted);
    t.scenario(
        "Supervised: a failure that repeats",
        a_repeated_failure_gives_up_after_max,
    );
    t.scenario(
        "Supervised: Ctrl-C, then run again",
        ctrl_c_stops_the_run_and_a_second_run_resumes_it,
    );
    t.scenario(
        "Supervised: a second run follows",
        a_second_run_follows_the_supervisor,
    );
    t.scenario(
        "Supervised: a killed head",
        a_killed_head_takes_the_cluster_down_and_up_and_resumes,
    );
    t.argus(&["down"]).code(0);
}

/// A verl job followed from a pipe: the log streams, no bar is drawn.
fn a_verl_job_followed_from_a_pipe_streams_without_a_bar(t: &Training) {
    let path = t.spec("train-1", "");
    let run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["submit", "--follow"])
        .arg_path(&path)
        .run()
        .code(0);
    assert!(
        run.stdout.contains("(TaskRunner pid="),
        "Ray's prefix is in the log: {}",
        run.stdout
    );
    assert!(run.stdout.contains("step:6 - "), "{}", run.stdout);
    assert!(
        !run.stderr.contains("steps ·"),
        "no bar without a terminal: {}",
        run.stderr
    );
}

/// Metrics: exact values, nan/inf kept, the near-miss line ignored; saved when it ended.
fn metrics_are_exact_and_saved_when_the_job_ends(t: &Training) {
    let csv = t
        .argus(&["job", "metrics", "train-1", "--csv"])
        .code(0)
        .stdout;
    assert_eq!(csv, EXPECTED_CSV);
    assert_eq!(
        std::fs::read_to_string(t.shared.join("jobs/train-1/metrics.csv")).expect("metrics.csv"),
        EXPECTED_CSV
    );
    let status = t
        .argus(&["job", "status", "train-1", "--json"])
        .code(0)
        .json();
    let progress = &status["progress"];
    assert_eq!(
        (progress["step"].as_u64(), progress["total_steps"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(progress["percent"], 100.0);
    let metrics: Vec<(&str, &Value)> = progress["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| (m["key"].as_str().unwrap_or_default(), &m["value"]))
        .collect();
    assert_eq!(
        metrics,
        [
            ("critic/score/mean", &Value::from(0.6)),
            ("val-core/openai/gsm8k/reward/mean@1", &Value::from(0.75)),
            ("response_length/mean", &Value::from(106.0)),
        ]
    );
}

/// The plot of the real log: right size, ink, and the log's points.
fn the_plot_of_the_real_log_has_its_points(t: &Training) {
    let png = t.ctx.path("train-1.png");
    let out = t
        .argus(&[
            "job",
            "plot",
            "train-1",
            "--json",
            "-o",
            &png.display().to_string(),
        ])
        .code(0)
        .json();
    assert_plot(&png, &out["figure"]);
    let score: Vec<(u64, Value)> = (1..=6).map(|s| (s, Value::from(s as f64 / 10.0))).collect();
    assert_eq!(
        plotted(&out["figure"], "critic/score/mean", "train-1"),
        score
    );
    assert_eq!(
        plotted(
            &out["figure"],
            "val-core/openai/gsm8k/reward/mean@1",
            "train-1"
        ),
        [(0, 0.125.into()), (3, 0.375.into()), (6, 0.75.into())]
    );
}

/// The bar in a real terminal (tmux): drawn above the log, gone with --no-progress.
fn the_bar_is_drawn_in_a_real_terminal_and_not_with_no_progress(t: &Training) {
    let tmux = Tmux::new(&t.ctx);
    let argus_bin = env!("CARGO_BIN_EXE_argus");
    let p = t.profile.display();
    t.spec("tty-1", "");
    t.spec("tty-2", "");
    tmux.start(
        "bar",
        t.ctx.dir.path(),
        &format!("{argus_bin} -p {p} submit --follow tty-1.yaml"),
    );
    tmux.start(
        "nobar",
        t.ctx.dir.path(),
        &format!("{argus_bin} -p {p} --no-progress submit --follow tty-2.yaml"),
    );
    for (session, bar) in [("bar", true), ("nobar", false)] {
        let screen = poll(
            &format!("{session} to finish"),
            Duration::from_secs(180),
            || {
                let s = tmux.screen(session);
                s.contains("EXIT=").then_some(s)
            },
        );
        assert!(screen.contains("EXIT=0"), "{screen}");
        assert!(
            screen.contains("step:6 - "),
            "the log streams on the terminal: {screen}"
        );
        assert_eq!(
            screen.contains("6/6 steps"),
            bar,
            "bar {bar} in {session}:\n{screen}"
        );
        if bar {
            assert!(
                screen.contains("[==============================] 6/6 steps"),
                "{screen}"
            );
            assert!(
                screen.contains("score 0.6 · val 0.75 · resp_len 106"),
                "{screen}"
            );
        }
    }
}

/// Resume: a job saving every 2 steps hangs after step 4; it is refused while running,
/// stopped, and continued by a new job from global_step_4.
fn a_stopped_job_is_resumed_from_its_checkpoint(t: &Training) {
    let path = t.spec("long-1", "env_vars: {FAKE_HANG_AFTER: \"4\"}\n");
    t.ctx
        .argus()
        .profile(&t.profile)
        .args(["submit"])
        .arg_path(&path)
        .run()
        .code(0);
    let marker = t
        .shared
        .join("jobs/long-1/checkpoints/latest_checkpointed_iteration.txt");
    poll("the step-4 checkpoint", Duration::from_secs(120), || {
        (std::fs::read_to_string(&marker).ok()?.trim() == "4").then_some(())
    });
    let running = t
        .argus(&["job", "status", "long-1", "--json"])
        .code(0)
        .json();
    assert_eq!(running["job"]["status"], "RUNNING");
    assert!(
        running["progress"]["eta_s"].as_f64().is_some(),
        "{running:#}"
    );
    t.argus(&["submit", "--resume", "long-1"])
        .code(2)
        .stderr_has("job long-1 is still RUNNING")
        .stderr_has("argus job stop long-1 --wait");
    t.argus(&["job", "stop", "long-1", "--wait"]).code(3);
    t.argus(&[
        "submit",
        "--resume",
        "long-1",
        "--set",
        "submission_id=long-2",
        "--wait",
    ])
    .code(0)
    .stderr_has("resuming long-1 from global_step_4 in /mnt/shared/jobs/long-1/checkpoints");
    let record = read_json(&t.shared.join("jobs/long-2/job.json"));
    assert_eq!(record["resumes"], "long-1");
    let entrypoint = record["entrypoint"].as_str().expect("entrypoint");
    assert!(
        entrypoint.contains(" trainer.default_local_dir=/mnt/shared/jobs/long-1/checkpoints "),
        "{entrypoint}"
    );
    assert!(
        entrypoint.ends_with(" trainer.resume_mode=auto"),
        "{entrypoint}"
    );
    assert!(
        entrypoint.contains(" trainer.total_training_steps=6 "),
        "same JobSpec: {entrypoint}"
    );
    let log = std::fs::read_to_string(t.shared.join("jobs/long-2/logs/driver.log")).expect("log");
    assert!(
        log.contains("resume_mode=auto default_local_dir=/mnt/shared/jobs/long-1/checkpoints"),
        "{log}"
    );
    assert!(
        log.contains(
            "Load from checkpoint folder: /mnt/shared/jobs/long-1/checkpoints/global_step_4"
        ),
        "{log}"
    );
    assert!(
        !log.contains("step:4 - "),
        "the new job starts after the checkpoint: {log}"
    );
    let chain = t
        .argus(&[
            "job",
            "metrics",
            "long-2",
            "--json",
            "--keys",
            "critic/score/mean",
        ])
        .code(0)
        .json();
    assert_eq!(chain["jobs"], serde_json::json!(["long-1", "long-2"]));
    let rows: Vec<(u64, &str, &Value)> = chain["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["step"].as_u64().unwrap_or(99),
                r["job"].as_str().unwrap_or(""),
                &r["metrics"]["critic/score/mean"],
            )
        })
        .collect();
    let want: Vec<(u64, &str, Value)> = (1..=6)
        .map(|s| {
            (
                s,
                if s <= 4 { "long-1" } else { "long-2" },
                Value::from(s as f64 / 10.0),
            )
        })
        .collect();
    assert_eq!(rows.len(), want.len(), "{chain:#}");
    for ((s, j, v), (ws, wj, wv)) in rows.iter().zip(&want) {
        assert_eq!((*s, *j, *v), (*ws, *wj, wv));
    }
    let out = t
        .argus(&[
            "job",
            "plot",
            "long-2",
            "--json",
            "-o",
            &t.ctx.path("chain.png").display().to_string(),
        ])
        .code(0)
        .json();
    assert_eq!(out["figure"]["title"], "job long-2 (continues long-1)");
    assert_eq!(
        plotted(&out["figure"], "critic/score/mean", "long-2").len(),
        6
    );
}

/// No checkpoint: refused with exit 2, nothing submitted.
fn a_job_without_checkpoint_is_not_resumed(t: &Training) {
    let path = t.spec("nockpt", "");
    t.ctx
        .argus()
        .profile(&t.profile)
        .args(["submit", "--wait", "--set", "save_freq=100"])
        .arg_path(&path)
        .run()
        .code(0);
    let jobs_before = std::fs::read_dir(t.shared.join("jobs"))
        .expect("jobs")
        .count();
    t.argus(&["submit", "--resume", "nockpt"])
        .code(2)
        .stderr_has("job nockpt has no checkpoint to resume from")
        .stderr_has("hint: verl saves a checkpoint every trainer.save_freq steps");
    assert_eq!(
        std::fs::read_dir(t.shared.join("jobs"))
            .expect("jobs")
            .count(),
        jobs_before
    );
}

/// Unknown ids are bad input.
fn unknown_ids_are_bad_input(t: &Training) {
    t.argus(&["job", "metrics", "no-such-job"])
        .code(2)
        .stderr_has("no job no-such-job");
    t.argus(&["job", "plot", "no-such-job"]).code(2);
    t.argus(&["submit", "--resume", "no-such-job"])
        .code(2)
        .stderr_has("argus has no record of job no-such-job");
}

/// A custom job without verl lines: its log as before, an empty table, no progress.
fn a_custom_job_without_verl_lines_has_no_metrics_or_progress(t: &Training) {
    let plain = t.ctx.write("plain.yaml", "workload: custom\nsubmission_id: plain-1\ncode_id: fakeverl\nentrypoint: echo hello from a custom job\n");
    let run = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["submit", "--follow"])
        .arg_path(&plain)
        .run()
        .code(0);
    assert!(
        run.stdout.contains("hello from a custom job"),
        "{}",
        run.stdout
    );
    let run = t
        .argus(&["job", "metrics", "plain-1", "--csv"])
        .code(0)
        .stderr_has("has no verl step lines");
    assert_eq!(run.stdout, "step\n");
    assert!(!t.shared.join("jobs/plain-1/metrics.csv").exists());
    let status = t
        .argus(&["job", "status", "plain-1", "--json"])
        .code(0)
        .json();
    assert!(status["progress"].is_null());
}

/// argus run --resume: a custom job run stopped midway, continued by a second run with
/// the checkpoint directory in ARGUS_CHECKPOINT_DIR.
fn a_stopped_run_is_resumed_by_a_second_run(t: &Training) {
    t.ctx.write("runcode/verl/__init__.py", "");
    t.ctx.write("runcode/verl/trainer/__init__.py", "");
    t.ctx
        .write("runcode/verl/trainer/main_ppo.py", FAKE_TRAINER);
    let run_spec = t.ctx.write(
        "run.yaml",
        "workload: custom\ncode: {source: runcode, name: runcode}\nentrypoint: python3 -m verl.trainer.main_ppo\nenv_vars: {FAKE_TOTAL: \"4\", FAKE_SAVE_FREQ: \"2\", FAKE_HANG_AFTER: \"2\", FAKE_STEP_SLEEP: \"0.2\"}\n",
    );
    let mut first = t
        .ctx
        .argus()
        .profile(&t.profile)
        .args(["run"])
        .arg_path(&run_spec)
        .spawn();
    let (run_id, job_id) = poll("the run's job to start", Duration::from_secs(180), || {
        let dir = std::fs::read_dir(t.shared.join("runs"))
            .ok()?
            .flatten()
            .next()?;
        let report = read_json(&dir.path().join("report.json"));
        let job = report["submission_id"].as_str()?.to_string();
        (report["stage"] == "wait").then(|| (dir.file_name().to_string_lossy().into_owned(), job))
    });
    let marker = t.shared.join(format!(
        "jobs/{job_id}/checkpoints/latest_checkpointed_iteration.txt"
    ));
    poll(
        "the run's step-2 checkpoint",
        Duration::from_secs(120),
        || (std::fs::read_to_string(&marker).ok()?.trim() == "2").then_some(()),
    );
    t.argus(&["job", "stop", &job_id, "--wait"]).code(3);
    assert_eq!(
        first.wait().expect("run").code(),
        Some(3),
        "the first run ends with its job STOPPED"
    );
    // `--set` applies to the resumed JobSpec, as `submit --resume` applies it.
    let second = t
        .argus(&[
            "run",
            "--json",
            "--resume",
            &run_id,
            "--set",
            "env_vars.RESUME_NOTE=from-set",
        ])
        .code(0)
        .json();
    let new_job = second["submission_id"].as_str().expect("job").to_string();
    assert_ne!(new_job, job_id);
    let recorded =
        std::fs::read_to_string(t.shared.join(format!("jobs/{new_job}/config/jobspec.yaml")))
            .expect("the resumed job's JobSpec");
    assert!(recorded.contains("RESUME_NOTE: from-set"), "{recorded}");
    assert_eq!(
        read_json(&t.shared.join(format!("jobs/{new_job}/job.json")))["resumes"],
        job_id.as_str()
    );
    let log = std::fs::read_to_string(t.shared.join(format!("jobs/{new_job}/logs/driver.log")))
        .expect("log");
    assert!(
        log.contains(&format!(
            "Load from checkpoint folder: /mnt/shared/jobs/{job_id}/checkpoints/global_step_2"
        )),
        "{log}"
    );
    let csv = t
        .argus(&[
            "job",
            "metrics",
            &new_job,
            "--csv",
            "--keys",
            "critic/score/mean",
        ])
        .code(0)
        .stdout;
    assert_eq!(csv, "step,critic/score/mean\n1,0.1\n2,0.2\n3,0.3\n4,0.4\n");
    t.argus(&["run", "--resume", "run-nope"])
        .code(2)
        .stderr_has("no run run-nope");
}
