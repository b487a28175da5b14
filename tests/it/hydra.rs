//! Hydra overrides against Hydra itself (hydra-core in the test venv): argus's check of
//! overrides against a snapshot's configs gives Hydra's verdict; the values argus writes
//! come back from Hydra's override parser and from a POSIX shell exactly as meant; values
//! no shell can carry are refused.
//!
//! `ARGUS_TEST_VERL=<verl checkout>` also compares verdicts on verl's own configs.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use argus::config::jobspec::{Override, OverrideValue, Workload};
use argus::submit::entrypoint::{self, EntrypointInputs};
use argus::submit::override_check::{self, CONFIG_DIR, Outcome};
use serde_json::{Value as Json, json};
use serde_yaml::Value as Yaml;

use crate::harness::TestContext;

/// The test venv's python, with hydra-core and the PyYAML it brings (an older venv gets
/// it added, under its lock).
pub(crate) fn hydra_python() -> PathBuf {
    let python = crate::hub::python();
    let has_hydra = |p: &Path| {
        Command::new(p)
            .args(["-c", "import hydra"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_hydra(&python) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let lock = File::create(root.join("target/venv-py.lock")).expect("lock file");
        lock.lock().expect("lock");
        if !has_hydra(&python) {
            let ok = Command::new(root.join("tests/venvs.sh"))
                .arg("py")
                .status()
                .expect("tests/venvs.sh")
                .success();
            assert!(ok, "tests/venvs.sh py failed");
        }
    }
    python
}

/// Runs a Python script with JSON on stdin; returns its stdout parsed as JSON.
fn python_json(script: &str, input: &Json) -> Json {
    let mut child = Command::new(hydra_python())
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json from python")
}

/// Hydra's verdict on each list of overrides. Group overrides change the composition, so
/// those cases compose the config with them (compose API: the loader and struct mode of
/// `@hydra.main`); the others run Hydra's own override steps (the parser, the sweep check,
/// `_apply_overrides_to_config`) on a copy of the config as composed once, which is what
/// composing again would do, minus the time.
const HYDRA_VERDICTS: &str = r#"
import copy, json, sys, warnings
warnings.filterwarnings("ignore")
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
job = json.load(sys.stdin)
apply_overrides = ConfigLoaderImpl._apply_overrides_to_config
composed = {}
def capture(overrides, cfg):
    composed.setdefault("cfg", copy.deepcopy(cfg))
    return apply_overrides(overrides, cfg)
ConfigLoaderImpl._apply_overrides_to_config = staticmethod(capture)
out = []
with initialize_config_dir(config_dir=job["dir"], version_base=None):
    compose(config_name=job["name"])
    repo = ConfigRepository(GlobalHydra.instance().config_loader().get_search_path())
    parser = OverridesParser.create()
    for overrides in job["cases"]:
        try:
            parsed = parser.parse_overrides(overrides)
            groups = [o for o in parsed if repo.group_exists(o.key_or_group) and not isinstance(o.value(), dict)]
            if groups:
                compose(config_name=job["name"], overrides=overrides)
            else:
                ConfigLoaderImpl.validate_sweep_overrides_legal(parsed, run_mode=RunMode.RUN, from_shell=False)
                apply_overrides(parsed, copy.deepcopy(composed["cfg"]))
            out.append(["accept", ""])
        except Exception as e:
            out.append(["refuse", (type(e).__name__ + ": " + str(e)).splitlines()[0][:160]])
json.dump(out, sys.stdout)
"#;

/// A verl-shaped config tree: defaults lists with packages (`actor@actor_rollout_ref.actor`,
/// `../optim@optim`, a plain `- actor`, `reward_manager@reward_manager`), `_self_`, a
/// `# @package` header, `_target_`, interpolations (absolute, relative, `oc.select`),
/// `???`, nulls, empty mappings and lists.
fn verl_shaped_configs(code: &Path) -> PathBuf {
    let dir = code.join(CONFIG_DIR);
    let files = [
        (
            "ppo_trainer.yaml",
            "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - data@data: legacy_data\n  - reward_manager@reward_manager\n  - ref@actor_rollout_ref.ref: dp_ref\n  - rollout@actor_rollout_ref.rollout: rollout\n  - algorithm@algorithm.rollout_correction: rollout_correction\n  - extras\n  - _self_\nactor_rollout_ref:\n  hybrid_engine: true\n  model:\n    path: ~/models/x\n    override_config: {}\ncustom_reward_function:\n  path: null\n  name: compute_score\nalgorithm:\n  _target_: verl.trainer.config.AlgoConfig\n  gamma: 1.0\n  kl_ctrl:\n    _target_: verl.trainer.config.KLControlConfig\n    type: fixed\ntrainer:\n  total_training_steps: null\n  project_name: verl_examples\n  experiment_name: gsm8k\n  logger: [\"console\", \"wandb\"]\n  nnodes: 1\n  n_gpus_per_node: 8\n  save_freq: -1\n  test_freq: -1\n  default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}\n  device: cuda\nglobal_profiler:\n  tool: null\n  global_tool_config:\n    torch_memory:\n      kw_args: {}\nray_kwargs:\n  ray_init:\n    num_cpus: null\n",
        ),
        (
            "actor/dp_actor.yaml",
            "# the FSDP actor\ndefaults:\n  - ../optim@optim: fsdp\n  - ../engine@fsdp_config: fsdp\n  - actor\n  - _self_\n_target_: verl.workers.config.FSDPActorConfig\nstrategy: fsdp\nuse_remove_padding: ${oc.select:actor_rollout_ref.model.use_remove_padding,false}\n",
        ),
        (
            "actor/actor.yaml",
            "_target_: verl.workers.config.ActorConfig\nrollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}\nstrategy: ???\nppo_mini_batch_size: 256\ncheckpoint:\n  save_contents: ['model', 'optimizer', 'extra']\n  load_contents: ${.save_contents}\nprofiler:\n  tool: ${oc.select:global_profiler.tool,null}\n  ranks: []\n",
        ),
        (
            "actor/megatron_actor.yaml",
            "defaults:\n  - ../optim@optim: megatron\n  - actor\n  - _self_\nstrategy: megatron\nmegatron:\n  tensor_model_parallel_size: 1\n",
        ),
        ("optim/fsdp.yaml", "lr: 1e-6\nweight_decay: 0.01\n"),
        ("optim/megatron.yaml", "lr: 1e-6\nclip_grad: 1.0\n"),
        (
            "engine/fsdp.yaml",
            "param_offload: false\nwrap_policy:\n  min_num_params: 0\n",
        ),
        (
            "data/legacy_data.yaml",
            "train_files: ~/data/train.parquet\nval_files: ~/data/test.parquet\ntokenizer: null\napply_chat_template_kwargs: {}\n",
        ),
        (
            "reward_manager.yaml",
            "_target_: verl.trainer.config.config.RewardManagerConfig\nname: ${oc.select:reward_model.reward_manager,naive}\n",
        ),
        (
            "ref/dp_ref.yaml",
            "defaults:\n  - ref\n  - ../engine@fsdp_config: fsdp\n  - _self_\nfsdp_config:\n  forward_only: true\n",
        ),
        ("ref/ref.yaml", "log_prob_micro_batch_size: null\n"),
        (
            "rollout/rollout.yaml",
            "_target_: verl.workers.config.RolloutConfig\nname: ???\nn: 1\nengine_kwargs:\n  vllm: {}\n  sglang: {}\nval_kwargs:\n  n: 1\n",
        ),
        (
            "algorithm/rollout_correction.yaml",
            "rollout_is: null\nrollout_is_threshold: 2.0\n",
        ),
        ("extras.yaml", "# @package trainer.extras\nflag: true\n"),
        (
            "sft_trainer_engine.yaml",
            "defaults:\n  - model@model: hf_model\n  - optim@optim: fsdp\n  - _self_\ndata:\n  train_files: x\n  messages_key: messages\ntrainer:\n  device: cuda\n  logger: [console]\n",
        ),
        ("model/hf_model.yaml", "path: ~/models/x\n"),
    ];
    for (path, text) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    }
    dir
}

/// argus's verdict on a list of overrides (as the user's, in order).
fn argus_verdict(code: &Path, config: &str, overrides: &[String]) -> (String, String) {
    let parsed: Result<Vec<Override>, String> =
        overrides.iter().map(|t| Override::parse(t)).collect();
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => return ("refuse".into(), e),
    };
    match override_check::check(code, config, &parsed, 0) {
        Ok(Outcome::Checked { .. }) => ("accept".into(), String::new()),
        Ok(Outcome::NotChecked { reason }) => ("not checked".into(), reason),
        Err(e) => ("refuse".into(), e.to_string()),
    }
}

/// Compares Hydra's and argus's verdicts case by case; prints the table; returns mismatches.
fn compare(code: &Path, config: &str, cases: &[Vec<String>]) -> Vec<String> {
    let hydra = python_json(
        HYDRA_VERDICTS,
        &json!({"dir": code.join(CONFIG_DIR), "name": config, "cases": cases}),
    );
    let hydra = hydra.as_array().expect("verdicts");
    let mut mismatches = Vec::new();
    eprintln!("{:<72} {:<7} {:<7}", "overrides", "hydra", "argus");
    for (case, h) in cases.iter().zip(hydra) {
        let hv = h[0].as_str().unwrap_or_default();
        let (av, why) = argus_verdict(code, config, case);
        let line = format!("{:<72} {:<7} {:<7}", case.join(" "), hv, av);
        eprintln!("{line}");
        if hv != av {
            mismatches.push(format!(
                "{line}\n    hydra: {}\n    argus: {why}",
                h[1].as_str().unwrap_or_default()
            ));
        }
    }
    mismatches
}

fn cases(lists: &[&[&str]]) -> Vec<Vec<String>> {
    lists
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[test]
fn override_verdicts_agree_with_hydra_on_verl_shaped_configs() {
    let ctx = TestContext::new("hydraverdict");
    let code = ctx.path("verl");
    verl_shaped_configs(&code);
    let table = cases(&[
        &["trainer.nnodes=2"],
        &["trainer.nnodez=2"],
        &["+trainer.new_key=1"],
        &["+trainer.nnodes=2"],
        &["++trainer.nnodes=2"],
        &["++trainer.brand_new=1"],
        &["~trainer.device"],
        &["~trainer.nope"],
        &["~trainer.device=cuda"],
        &["~trainer.device=cpu"],
        &["~trainer.total_training_steps"],
        &["+trainer.total_training_steps=5"],
        &["data.apply_chat_template_kwargs.enable_thinking=true"],
        &["+data.apply_chat_template_kwargs.enable_thinking=true"],
        &["data.apply_chat_template_kwargs={enable_thinking:true}"],
        &["+data.apply_chat_template_kwargs={enable_thinking:true}"],
        &["actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4"],
        &["+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4"],
        &["actor_rollout_ref.model.override_config.attn_implementation=eager"],
        &["global_profiler.global_tool_config.torch_memory.kw_args.x=1"],
        &["custom_reward_function.path.x=1"],
        &["+custom_reward_function.path.x=1"],
        &["trainer.nnodes.x=1"],
        &["+trainer.nnodes.x=1"],
        &["trainer.logger.0=tensorboard"],
        &["trainer.logger.2=tensorboard"],
        &["+trainer.logger.0=tensorboard"],
        &["trainer.logger=[console]"],
        &["+trainer.logger=[console]"],
        &["~trainer.logger.0"],
        &["trainer.logger.x=1"],
        &["trainer.logger={a:1}"],
        &["actor_rollout_ref.rollout.name=vllm"],
        &["+actor_rollout_ref.rollout.name=vllm"],
        &["~actor_rollout_ref.rollout.name"],
        &["+actor_rollout_ref.actor.rollout_n=3"],
        &["~actor_rollout_ref.actor.rollout_n"],
        &["+actor_rollout_ref.actor.profiler.tool=nsys"],
        &["~actor_rollout_ref.actor.profiler.tool"],
        &["+actor_rollout_ref.actor.checkpoint.load_contents=[model]"],
        &["+actor_rollout_ref.actor.use_remove_padding=true"],
        &["+trainer.default_local_dir=x"],
        &["~trainer.default_local_dir"],
        &["algorithm._target_=my.Algo"],
        &["algorithm.kl_ctrl.horizon=10000"],
        &["+algorithm.kl_ctrl.horizon=10000"],
        &["actor_rollout_ref.actor.optim.lr=1e-5"],
        &["actor_rollout_ref.actor.fsdp_config.param_offload=true"],
        &["actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=1"],
        &["actor_rollout_ref.ref.fsdp_config.forward_only=false"],
        &["actor_rollout_ref.actor.strategy=x"],
        &["reward_manager.name=prime"],
        &["trainer.extras.flag=false"],
        &["algorithm.rollout_correction.rollout_is=token"],
        &["actor@actor_rollout_ref.actor=megatron_actor"],
        &[
            "actor@actor_rollout_ref.actor=megatron_actor",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        ],
        &["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"],
        &["actor=megatron_actor"],
        &["actor@actor_rollout_ref.actor=nope"],
        &["+actor@actor_rollout_ref.actor=megatron_actor"],
        &["++actor@actor_rollout_ref.actor=megatron_actor"],
        &["~actor@actor_rollout_ref.actor"],
        &["~actor@actor_rollout_ref.actor=megatron_actor"],
        &["data=legacy_data"],
        &["data@data=legacy_data"],
        &["+optim@extra_optim=fsdp"],
        &["hydra.run.dir=/tmp/x"],
        &["hydra.job.chdir=true"],
        &["hydra.nope=1"],
        &["hydra/job_logging=disabled"],
        &["hydra/job_logging=nope"],
        &["+hydra.job.env_set.NCCL_DEBUG=INFO"],
        &["hydra.job.env_set.NCCL_DEBUG=INFO"],
        &["trainer.nnodes=1,2"],
        &["trainer.experiment_name='a,b'"],
        &["trainer.experiment_name=a b"],
        &["trainer.nnodes@pkg=1"],
        &["trainer.nnodes=a=b"],
        &["trainer={nnodes:2}"],
        &["trainer={nope:2}"],
        &["+trainer={nope:2}"],
        &["trainer.nnodes={a:1}"],
        &["ray_kwargs.ray_init.num_cpus=4"],
        &["+trainer.x={}", "trainer.x.y=1"],
        &["~trainer.device", "+trainer.device=cpu"],
        &["~trainer.device", "trainer.device=cpu"],
        &["+trainer.a=1", "trainer.a=2"],
        // A key given twice (as 4 of verl's example scripts do): Hydra applies both.
        &["trainer.nnodes=2", "trainer.nnodes=3"],
        &["trainer.nnodes=2", "++trainer.nnodes=3"],
        &["trainer.nnodz=2", "trainer.nnodes=3"],
        &["+trainer.a=1", "+trainer.a=2"],
        &["~trainer.device", "~trainer.device"],
        &[
            "actor@actor_rollout_ref.actor=megatron_actor",
            "actor@actor_rollout_ref.actor=dp_actor",
        ],
    ]);
    let mismatches = compare(&code, "ppo_trainer", &table);
    let sft = cases(&[
        &["model.path=/x"],
        &["optim.lr=1"],
        &["trainer.device=cpu"],
        &["data.messages_key=m"],
        &["data.nope=1"],
        &["+data.nope=1"],
        &["model=hf_model"],
    ]);
    let mut all = mismatches;
    all.extend(compare(&code, "sft_trainer_engine", &sft));
    assert!(
        all.is_empty(),
        "argus and Hydra disagree:\n{}",
        all.join("\n")
    );
}

/// Hydra's own `hydra:` node that argus checks `hydra.*` keys against, compared with the
/// installed hydra-core's (captured just before it applies overrides).
#[test]
fn the_built_in_hydra_node_is_the_installed_hydras() {
    const DUMP: &str = r#"
import json, sys, warnings
warnings.filterwarnings("ignore")
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from omegaconf import OmegaConf
job = json.load(sys.stdin)
seen = {}
original = ConfigLoaderImpl._apply_overrides_to_config
def spy(overrides, cfg):
    seen["hydra"] = OmegaConf.to_container(cfg.hydra, resolve=False)
    return original(overrides, cfg)
ConfigLoaderImpl._apply_overrides_to_config = staticmethod(spy)
with initialize_config_dir(config_dir=job["dir"], version_base=None):
    compose(config_name="ppo_trainer")
json.dump(seen, sys.stdout)
"#;
    let ctx = TestContext::new("hydranode");
    let code = ctx.path("verl");
    let dir = verl_shaped_configs(&code);
    let installed = python_json(DUMP, &json!({ "dir": dir }));
    let built_in: Json = serde_yaml::from_str(include_str!(
        "../../src/submit/override_check/compose/hydra_node.yaml"
    ))
    .expect("built-in hydra node");
    assert_eq!(installed, built_in);
}

/// verl 0.8.0's own configs (tests/fixtures/verl-0.8.0-config): its PPO defaults choose
/// the actor, ref and critic by interpolation (`critic@critic: ${model_engine}_critic`).
fn verl_0_8_0() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verl-0.8.0-config")
}

#[test]
fn override_verdicts_agree_with_hydra_on_verl_0_8_0() {
    let verl = verl_0_8_0();
    let ppo = cases(&[
        &["trainer.total_training_steps=3"],
        &["actor_rollout_ref.rollout.name=vllm"],
        &["algorithm.adv_estimator=grpo"],
        &["trainer.save_frq=1"],
        &["trainer.save_freq=1", "trainer.save_freq=2"],
        &["critic.optim.lr=1e-5"],
        &["actor_rollout_ref.actor.fsdp_config.param_offload=true"],
        &["actor_rollout_ref.ref.fsdp_config.param_offload=true"],
        &["critic.fsdp.param_offload=true"],
        &["model_engine=megatron"],
        &[
            "model_engine=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        ],
        &["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"],
        &[
            "model_engine=megatron",
            "critic.megatron.tensor_model_parallel_size=2",
        ],
        &["model_engine=torchtitan"],
        &["model_engine=nope"],
        &["~model_engine"],
        &["+model_engine=megatron"],
        &["actor@actor_rollout_ref.actor=megatron_actor"],
        &[
            "critic@critic=megatron_critic",
            "critic.megatron.tensor_model_parallel_size=2",
        ],
        &[
            "model_engine=megatron",
            "critic@critic=dp_critic",
            "critic.fsdp.param_offload=true",
        ],
        &["+actor_rollout_ref.model.override_config.attn_implementation=eager"],
        &[
            "trainer.device=cpu",
            "actor_rollout_ref.actor.strategy=fsdp2",
        ],
        // `${oc.select:a,${oc.select:b,null}}`: null, so `+` sets it and `~` finds nothing.
        &["+actor_rollout_ref.rollout.profiler.tool_config.precision_debugger.config_path=1"],
        &["~actor_rollout_ref.rollout.profiler.tool_config.precision_debugger.config_path"],
    ]);
    let mut mismatches = compare(&verl, "ppo_trainer", &ppo);
    let sft = cases(&[
        &["optim.lr=1e-5"],
        &["model.path=/m"],
        &["trainer.device=cpu"],
        &["data.messages_key=messages"],
        &["data.micro_batch_size_per_gpu=4"],
        &["data.nope=1"],
        &["engine=megatron"],
    ]);
    mismatches.extend(compare(&verl, "sft_trainer_engine", &sft));
    assert!(
        mismatches.is_empty(),
        "argus and Hydra disagree on verl 0.8.0:\n{}",
        mismatches.join("\n")
    );
    // Keys of both composed configs, as below for a checkout (one in 8, to keep it short).
    every_key_agrees(&verl, 8);
}

/// verl 0.9.1's own configs (tests/fixtures/verl-0.9.1-config), the release the GPU image and
/// JobSpecs run: 0.8.0's tree less the mindspeed entries, plus TransferQueue's section (the V1
/// trainer's storage, `transfer_queue@transfer_queue`).
fn verl_0_9_1() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verl-0.9.1-config")
}

/// The Hydra overrides `submit --dry-run` writes for a shipped JobSpec (argus's, then the
/// JobSpec's), with the snapshot `code_id` named: the entrypoint's words after the module.
fn shipped_command_line(ctx: &TestContext, profile: &Path, job: &str) -> Vec<String> {
    let out = ctx
        .argus()
        .profile(profile)
        .args(["submit", "--dry-run", "--json"])
        .args([
            "--set",
            "code_id=verl-snapshot-id",
            "--set",
            "submission_id=tq1",
        ])
        .arg_path(Path::new(&format!("profiles/jobs/{job}.yaml")))
        .run()
        .code(0)
        .json();
    let entrypoint = out["payload"]["entrypoint"].as_str().expect("entrypoint");
    let words = shlex::split(entrypoint).expect("shell words");
    let module = words
        .iter()
        .position(|w| w.starts_with("verl.trainer."))
        .unwrap_or_else(|| panic!("{job}: no verl module in {entrypoint}"));
    words[module + 1..].to_vec()
}

#[test]
fn override_verdicts_agree_with_hydra_on_verl_0_9_1() {
    let verl = verl_0_9_1();
    let ppo = cases(&[
        &["trainer.total_training_steps=3"],
        &["actor_rollout_ref.rollout.name=vllm"],
        &["algorithm.adv_estimator=grpo"],
        &["trainer.save_frq=1"],
        &["trainer.use_v1=false"],
        &["critic.optim.lr=1e-5"],
        &["actor_rollout_ref.actor.fsdp_config.param_offload=true"],
        &["model_engine=megatron"],
        &["model_engine=mindspeed"],
        &["+actor_rollout_ref.model.override_config.attn_implementation=sdpa"],
        &["actor_rollout_ref.model.override_config.attn_implementation=sdpa"],
        &["+critic.model.override_config.attn_implementation=sdpa"],
        // TransferQueue: a section of its own; SimpleStorage declares no node resource.
        &["transfer_queue.enable=true"],
        &["transfer_queue.backend.SimpleStorage.num_data_storage_units=2"],
        &["+transfer_queue.backend.SimpleStorage.required_node_resource=worker_node"],
        &["transfer_queue.backend.SimpleStorage.required_node_resource=worker_node"],
        &["++transfer_queue.backend.SimpleStorage.required_node_resource=worker_node"],
        &["+transfer_queue.enable=true"],
        &["transfer_queue=transfer_queue"],
        &["transfer_queue=nope"],
    ]);
    let mut mismatches = compare(&verl, "ppo_trainer", &ppo);
    let sft = cases(&[
        &["model.use_remove_padding=false"],
        &["+model.override_config.attn_implementation=sdpa"],
        &["data.micro_batch_size_per_gpu=4"],
        &["trainer.device=cpu"],
        &["data.nope=1"],
    ]);
    mismatches.extend(compare(&verl, "sft_trainer_engine", &sft));
    // The shipped GPU JobSpecs' whole command lines, as argus writes them: Hydra composes
    // each (no refusal), and argus says the same.
    let (ctx, profile) = dry_run_ctx("hydra091");
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "verl-snapshot-id"])
        .arg_path(&verl)
        .run()
        .code(0);
    for (job, config) in [
        ("ppo", "ppo_trainer"),
        ("grpo", "ppo_trainer"),
        ("sft", "sft_trainer_engine"),
    ] {
        let line = shipped_command_line(&ctx, &profile, job);
        assert!(
            line.iter()
                .any(|w| w.starts_with("+transfer_queue.") || job == "sft"),
            "{job}: {line:?}"
        );
        let hydra = python_json(
            HYDRA_VERDICTS,
            &json!({"dir": verl.join(CONFIG_DIR), "name": config, "cases": [line.clone()]}),
        );
        assert_eq!(hydra[0][0], "accept", "{job}: Hydra: {}", hydra[0][1]);
        mismatches.extend(compare(&verl, config, &[line]));
    }
    assert!(
        mismatches.is_empty(),
        "argus and Hydra disagree on verl 0.9.1:\n{}",
        mismatches.join("\n")
    );
    every_key_agrees(&verl, 8);
}

/// verl's own configs (`ARGUS_TEST_VERL=<verl checkout>`): every key of the composed PPO
/// config set, added, force-added and deleted; and a typo of each.
#[test]
fn override_verdicts_agree_with_hydra_on_a_verl_checkout() {
    let Some(verl) = std::env::var_os("ARGUS_TEST_VERL") else {
        eprintln!(
            "SKIPPED: set ARGUS_TEST_VERL=<verl checkout> to compare verdicts on verl's own configs"
        );
        return;
    };
    every_key_agrees(&PathBuf::from(verl), 1);
}

/// Every `stride`-th key of the composed `ppo_trainer` and `sft_trainer_engine` set (and on
/// a sample: added, deleted, misspelled, extended), Hydra's verdict against argus's.
fn every_key_agrees(verl: &Path, stride: usize) {
    const KEYS: &str = r#"
import json, sys, warnings
warnings.filterwarnings("ignore")
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
job = json.load(sys.stdin)
with initialize_config_dir(config_dir=job["dir"], version_base=None):
    cfg = compose(config_name=job["name"])
keys = []
def walk(node, prefix):
    for k in node.keys():
        key = f"{prefix}{k}"
        keys.append(key)
        child = node._get_node(k)
        if isinstance(child, DictConfig):
            walk(child, key + ".")
walk(cfg, "")
json.dump(keys, sys.stdout)
"#;
    for name in ["ppo_trainer", "sft_trainer_engine"] {
        let dir = verl.join(CONFIG_DIR);
        let keys = python_json(KEYS, &json!({"dir": dir, "name": name}));
        let keys: Vec<String> = keys
            .as_array()
            .expect("keys")
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        let mut table = Vec::new();
        for (i, key) in keys.iter().enumerate().step_by(stride) {
            table.push(vec![format!("{key}=1")]);
            // The other forms on a sample, to keep the run short.
            if i % 3 == 0 {
                table.push(vec![format!("+{key}=1")]);
                table.push(vec![format!("~{key}")]);
                table.push(vec![format!("{key}x=1")]);
                table.push(vec![format!("{key}.new_key=1")]);
            }
        }
        let mismatches = compare(verl, name, &table);
        assert!(
            mismatches.is_empty(),
            "argus and Hydra disagree on verl's {name}:\n{}",
            mismatches.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------
// Quoting: generated values through argus's entrypoint, a POSIX shell and Hydra's parser.

/// xorshift64*: a seeded generator, so a failure replays (`ARGUS_TEST_SEED`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Pieces that are hard for Hydra or for a shell, and plain ones.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "0",
    "7",
    "_",
    "-",
    ".",
    "/",
    ":",
    "@",
    "+",
    "%",
    " ",
    "  ",
    "\t",
    "'",
    "\"",
    "\\",
    "\\\\",
    "\\'",
    "$",
    "${x}",
    "${oc.env:HOME}",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    "=",
    "#",
    "~",
    "*",
    "?",
    "!",
    "`",
    ";",
    "&",
    "|",
    "<",
    ">",
    "\n",
    "\u{e9}",
    "\u{65e5}",
    "true",
    "null",
    "nan",
    "inf",
    "1e-6",
    "-1",
    "0x1",
    "a,b",
    "$(id)",
    "`id`",
    "''",
    "a b",
];

fn gen_string(rng: &mut Rng) -> String {
    let n = rng.below(6);
    (0..n).map(|_| *rng.pick(PIECES)).collect()
}

/// Mapping keys from pieces Hydra can write in a key, sometimes not (then argus refuses).
fn gen_key(rng: &mut Rng) -> String {
    const KEY_PIECES: &[&str] = &[
        "a", "b_", "c-d", "x1", " ", ":", "=", ",", "[", "\\", "$", "/", "'", "#",
    ];
    let n = 1 + rng.below(3);
    let key: String = (0..n).map(|_| *rng.pick(KEY_PIECES)).collect();
    format!("k{key}")
}

fn gen_value(rng: &mut Rng, depth: usize) -> Yaml {
    let kinds = if depth > 2 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Yaml::Null,
        1 => Yaml::Bool(rng.below(2) == 0),
        2 => Yaml::Number((rng.next() as i64 >> rng.below(60)).into()),
        3 => {
            let f = *rng.pick(&[0.5, -2.25, 1e-6, 1e16, 123456.789, 0.0, -0.0, 1e300, 3.0]);
            Yaml::Number(f.into())
        }
        4 => Yaml::String(gen_string(rng)),
        5 => Yaml::Sequence(
            (0..rng.below(4))
                .map(|_| gen_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_yaml::Mapping::new();
            for _ in 0..rng.below(3) {
                map.insert(Yaml::String(gen_key(rng)), gen_value(rng, depth + 1));
            }
            Yaml::Mapping(map)
        }
    }
}

fn inputs(overrides: Vec<Override>) -> EntrypointInputs {
    EntrypointInputs {
        workload: Workload::Ppo,
        model_path: Some("/mnt/shared/common/hf/hub/models--Q--M/snapshots/abc".into()),
        train_file: Some("/mnt/shared/common/datasets/gsm8k/train.parquet".into()),
        val_file: Some("/mnt/shared/common/datasets/gsm8k/test.parquet".into()),
        nnodes: Some(1),
        n_gpus_per_node: Some(2),
        total_training_steps: Some(3),
        save_freq: None,
        test_freq: None,
        checkpoint_dir: "/mnt/shared/jobs/j/checkpoints".into(),
        hydra_run_dir: "/mnt/shared/jobs/j/hydra".into(),
        user_overrides: overrides,
        custom: None,
    }
}

fn has_nul(v: &Yaml) -> bool {
    match v {
        Yaml::String(s) => s.contains('\0'),
        Yaml::Sequence(items) => items.iter().any(has_nul),
        Yaml::Mapping(m) => m.iter().any(|(k, v)| has_nul(k) || has_nul(v)),
        _ => false,
    }
}

/// The value as tagged JSON, the way the Python side describes what Hydra parsed.
fn tagged(v: &Yaml) -> Json {
    match v {
        Yaml::Null => json!(["null"]),
        Yaml::Bool(b) => json!(["bool", b]),
        Yaml::Number(n) if n.is_f64() => json!(["float", n.as_f64()]),
        Yaml::Number(n) => json!(["int", n.to_string()]),
        Yaml::String(s) => json!(["str", s]),
        Yaml::Sequence(items) => json!(["list", items.iter().map(tagged).collect::<Vec<_>>()]),
        Yaml::Mapping(m) => json!([
            "dict",
            m.iter()
                .map(|(k, v)| json!([tagged(k), tagged(v)]))
                .collect::<Vec<_>>()
        ]),
        Yaml::Tagged(t) => tagged(&t.value),
    }
}

/// Floats come back from Python as repr strings; compare them as numbers.
fn same_tagged(hydra: &Json, want: &Json) -> bool {
    match (hydra, want) {
        (Json::Array(h), Json::Array(w)) if h.len() == 2 && h[0] == "float" && w[0] == "float" => {
            let h: f64 = h[1]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            w[1].as_f64().is_some_and(|w| w.to_bits() == h.to_bits())
        }
        (Json::Array(h), Json::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| same_tagged(a, b))
        }
        _ => hydra == want,
    }
}

const HYDRA_PARSE: &str = r#"
import json, sys
from hydra.core.override_parser.overrides_parser import OverridesParser
parser = OverridesParser.create()
def tag(v):
    if v is None: return ["null"]
    if isinstance(v, bool): return ["bool", v]
    if isinstance(v, int): return ["int", str(v)]
    if isinstance(v, float): return ["float", repr(v)]
    if isinstance(v, str): return ["str", v]
    if isinstance(v, list): return ["list", [tag(x) for x in v]]
    if isinstance(v, dict): return ["dict", [[tag(k), tag(x)] for k, x in v.items()]]
    return ["other", repr(v)]
out = []
for line in json.load(sys.stdin):
    try:
        o = parser.parse_override(line)
        out.append({"key": o.key_or_group, "value": tag(o.value())})
    except Exception as e:
        out.append({"error": str(e).splitlines()[0]})
json.dump(out, sys.stdout)
"#;

#[test]
fn generated_overrides_survive_the_shell_and_hydras_parser() {
    let seed = std::env::var("ARGUS_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_0001_u64);
    let mut rng = Rng(seed);
    let (mut built, mut refused_nul, mut refused_hydra) = (0, 0, 0);
    let mut for_sh = Vec::new();
    let mut for_hydra: Vec<(String, Json)> = Vec::new();
    for case in 0..1500 {
        let mut overrides = Vec::new();
        let mut values = Vec::new();
        for n in 0..1 + rng.below(3) {
            let mut v = gen_value(&mut rng, 0);
            if rng.below(40) == 0 {
                v = Yaml::String(format!("a\0{}", gen_string(&mut rng)));
            }
            overrides.push(Override {
                key: format!("+trainer.k{n}"),
                value: OverrideValue::Yaml(v.clone()),
            });
            values.push(v);
        }
        let i = inputs(overrides);
        match entrypoint::build(&i) {
            Ok(line) => {
                built += 1;
                assert!(
                    !values.iter().any(has_nul),
                    "seed {seed:#x} case {case}: a NUL got through: {line}"
                );
                let words = entrypoint::words(&i).expect("words");
                assert_eq!(
                    shlex::split(&line).as_ref(),
                    Some(&words),
                    "seed {seed:#x} case {case}: {line}"
                );
                let user_words = &words[words.len() - values.len()..];
                for (word, value) in user_words.iter().zip(&values) {
                    let text = word.split_once('=').map(|(_, v)| v).unwrap_or_default();
                    let back =
                        argus::hydra::parse_value(text).expect("argus parses its own output");
                    assert!(
                        back.same_as(value),
                        "seed {seed:#x} case {case}: {word} -> {back:?}"
                    );
                    if for_hydra.len() < 400 {
                        for_hydra.push((word.clone(), tagged(value)));
                    }
                }
                if case % 40 == 0 {
                    for_sh.push((line, words));
                }
            }
            Err(entrypoint::Error::Nul { .. }) => {
                assert!(
                    values.iter().any(has_nul),
                    "seed {seed:#x} case {case}: refused without a NUL"
                );
                refused_nul += 1;
            }
            Err(entrypoint::Error::Unrepresentable { reason, .. }) => {
                assert!(!reason.is_empty());
                refused_hydra += 1;
            }
            Err(e) => panic!("seed {seed:#x} case {case}: {e}"),
        }
    }
    eprintln!(
        "{built} entrypoints built; refused: {refused_nul} with a NUL, {refused_hydra} that Hydra cannot read back"
    );
    assert!(built > 1000 && refused_nul > 0 && refused_hydra > 0);

    // A real POSIX shell splits a sample the same way.
    for (line, words) in &for_sh {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .expect("/bin/sh");
        assert!(out.status.success(), "{line}");
        let printed = out.stdout.strip_suffix(&[0]).unwrap_or(&out.stdout);
        let got: Vec<String> = printed
            .split(|b| *b == 0)
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        assert_eq!(&got, words, "{line}");
    }

    // Hydra's own override parser reads the values back as written.
    let lines: Vec<&String> = for_hydra.iter().map(|(w, _)| w).collect();
    let parsed = python_json(HYDRA_PARSE, &json!(lines));
    for ((word, want), got) in for_hydra.iter().zip(parsed.as_array().expect("list")) {
        assert!(
            same_tagged(&got["value"], want),
            "Hydra reads {word:?} as {got}, argus meant {want}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Through the binary: exit codes and messages.

fn dry_run_ctx(name: &str) -> (TestContext, PathBuf) {
    let mut ctx = TestContext::new(name);
    let cluster = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write(
        "p.yaml",
        &crate::harness::test_profile(&cluster, &shared, 8265, 1, ""),
    );
    (ctx, profile)
}

#[test]
fn a_nul_in_an_override_value_is_refused_naming_the_key() {
    let (ctx, profile) = dry_run_ctx("hydranul");
    let spec = ctx.write(
        "j.yaml",
        "workload: ppo\ncode_path: /mnt/shared/common/code/verl/x\nsubmission_id: n1\noverrides:\n  trainer.experiment_name: \"a\\0; touch /tmp/pwned\"\n",
    );
    for extra in [&["--no-check"][..], &[][..]] {
        ctx.argus()
            .profile(&profile)
            .args(["submit", "--dry-run"])
            .args(extra)
            .arg_path(&spec)
            .run()
            .code(2)
            .stderr_has("j.yaml:5:28: overrides.trainer.experiment_name: contains a NUL byte");
    }
}

#[test]
fn override_refusals_and_broken_configs_through_the_cli() {
    let (ctx, profile) = dry_run_ctx("hydracli");
    let src = ctx.path("verl-src");
    verl_shaped_configs(&src);
    ctx.argus()
        .profile(&profile)
        .args(["snapshot", "--code-id", "hydra-cli"])
        .arg_path(&src)
        .run()
        .code(0);
    let spec = ctx.write(
        "j.yaml",
        "workload: ppo\ncode_id: hydra-cli\nsubmission_id: h1\noverrides:\n  actor_rollout_ref.rollout.name: vllm\n",
    );
    let submit = |sets: &[&str]| {
        let mut a = ctx.argus().profile(&profile).args(["submit", "--dry-run"]);
        for s in sets {
            a = a.args(["--set", s]);
        }
        a.arg_path(&spec).run()
    };
    submit(&["overrides.+data.apply_chat_template_kwargs.enable_thinking=true"]).code(0);
    submit(&["overrides.data.apply_chat_template_kwargs.enable_thinking=true"])
        .code(2)
        .stderr_has("override `data.apply_chat_template_kwargs.enable_thinking` is not a key of verl's config")
        .stderr_has("hint: prefix a new key with +");
    submit(&["overrides.+trainer.nnodes=2"])
        .code(2)
        .stderr_has("Hydra would refuse override `+trainer.nnodes=2`: an item is already at `trainer.nnodes`")
        .stderr_has("write ++");
    let delete = ctx.write(
        "d.yaml",
        "workload: ppo\ncode_id: hydra-cli\nsubmission_id: h3\noverrides: ['~trainer.total_training_steps']\n",
    );
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run"])
        .arg_path(&delete)
        .run()
        .code(2)
        .stderr_has("nothing to delete");
    // A code tree on the shared storage (not a snapshot: those are read-only) whose
    // configs are broken: that is an error of its own, never an unknown override.
    let tree = ctx.path("shared/common/code/verl/broken");
    let broken = verl_shaped_configs(&tree);
    std::fs::write(broken.join("optim/fsdp.yaml"), "lr: [1e-6\n").expect("write");
    let spec = ctx.write(
        "j2.yaml",
        "workload: ppo\ncode_path: /mnt/shared/common/code/verl/broken\nsubmission_id: h2\noverrides:\n  trainer.nnodes: 2\n",
    );
    let run = ctx
        .argus()
        .profile(&profile)
        .args(["submit", "--dry-run"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("verl's config cannot be used")
        .stderr_has("optim/fsdp.yaml:");
    assert!(!run.stderr.contains("not a key"), "{}", run.stderr);
    std::fs::write(broken.join("optim/fsdp.yaml"), b"lr: \xff\n").expect("write");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("not UTF-8");
    std::fs::remove_file(broken.join("optim/fsdp.yaml")).expect("rm");
    ctx.argus()
        .profile(&profile)
        .args(["submit", "--dry-run"])
        .arg_path(&spec)
        .run()
        .code(2)
        .stderr_has("Hydra cannot compose verl's config")
        .stderr_has("Could not find 'actor/../optim/fsdp'");
}
