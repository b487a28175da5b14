"""argus_verl_cpu: run verl 0.8.0 or 0.9.x (FSDP2 engines) on CPU-only hosts. A stand-in for a GPU.

verl never runs on CPU by configuration alone; this package patches the few places that assume
CUDA/NPU and adds a CPU rollout. It is never needed (and does nothing) on a host where
torch.cuda / torch.npu is available or /dev/nvidia* exists, nor with ARGUS_VERL_CPU=0, so it is
safe to leave enabled everywhere. One package serves both versions: where verl differs, the code
branches on verl's version (patches.verl_version(), read from verl/version/version).

Entry points
  argus_verl_cpu.setup            Ray `runtime_env.worker_process_setup_hook` ("module.function");
                                  also call it yourself first thing in any non-Ray process.
  python -m argus_verl_cpu.run_module MODULE ARGS...
                                  runpy wrapper for torchrun / plain python: setup(), then runs
                                  MODULE as __main__ (e.g. verl.trainer.sft_trainer).
  actor_rollout_ref.rollout.name=hf_cpu
                                  the CPU rollout (argus_verl_cpu.rollout): a Ray actor per replica
                                  running transformers `generate`, token-in/token-out.
  [verl.plugins] argus_verl_cpu = argus_verl_cpu.platform
                                  (verl >= 0.9) the `cpu` platform, registered by verl itself in
                                  every process that imports verl, the job's driver included.
                                  Needs argus_verl_cpu-<version>.dist-info (METADATA,
                                  entry_points.txt, ...) in site-packages beside this package.

What setup() patches, per verl version, and why (code and details: argus_verl_cpu.patches):
                                                                           0.8.0   0.9.x
  1. verl.utils.device.get_nccl_backend -> "gloo" (it returns "nccl"         yes     no: the cpu
     unless on NPU)                                                                  platform says
                                                                                     "gloo"
  2. verl.utils.distributed.initialize_global_process_group_ray: default     yes     yes
     backend "gloo" (verl builds "cpu:gloo,cpu:<nccl backend>", a
     duplicate device key torch rejects)
  2b. initialize_global_process_group (torchrun): backend "gloo" (0.9        (by 1)  yes
     builds the same duplicate there, with no backend argument)
  3. verl.workers.engine EngineRegistry: FSDP/FSDP2 engines also answer      yes     yes
     for device "cpu" (they register for cuda/npu only); the ref engine's
     CPUOffloadPolicy(pin_memory=True) loses pin_memory (needs CUDA)
  4. torch.cpu gains memory_allocated/memory_reserved/max_memory_*/          yes     yes
     reset_peak_memory_stats/empty_cache/ipc_collect/mem_get_info/
     get_rng_state/set_rng_state/manual_seed/get_device_name/
     set_per_process_memory_fraction (verl calls them on get_torch_device())
  5. verl.utils.attention_utils: pad/unpad from transformers' pure-torch     yes     no: 0.9 falls
     helpers instead of `flash_attn.bert_padding` (imported                          back by itself
     unconditionally on non-NPU hosts)
  6. verl.utils.model: critic/value-head loading uses eager attention        yes     yes
     instead of the hard-coded "flash_attention_2"
  7. torch.compile is disabled (torch._dynamo.config.disable = True):        yes     yes
     verl compiles its entropy helper by default and Inductor on CPU
     needs g++, which slim images lack
  8. rollout name "hf_cpu" registered in                                      yes     yes (+ extra_
     verl.workers.rollout.base._ROLLOUT_REGISTRY and                                 fields
     verl.workers.rollout.replica.RolloutReplicaRegistry (verl ships                 global_steps,
     vLLM/SGLang/TRT-LLM only; its old hf_rollout.HFRollout no longer                wire_format)
     fits the BaseRollout/server API)
  9. the `cpu` platform (argus_verl_cpu.platform): registered if the         -       yes
     entry point did not, and put in place of a platform verl already
     chose (its fallback "nvidia", which turns trainer.device=cpu into
     cuda)
"""

__version__ = "0.2.0"

from .patches import setup  # noqa: E402

__all__ = ["setup", "__version__"]
