"""argus_verl_cpu: run verl 0.8.0 (FSDP2 engines) on CPU-only hosts. A stand-in for a GPU, nothing more.

verl never runs on CPU by configuration alone; this package patches the few places that assume
CUDA/NPU and adds a CPU rollout. It is never needed (and does nothing) on a host where
torch.cuda / torch.npu is available, so it is safe to leave enabled everywhere.

Entry points
  argus_verl_cpu.setup            Ray `runtime_env.worker_process_setup_hook` ("module.function");
                                  also call it yourself first thing in any non-Ray process.
  python -m argus_verl_cpu.run_module MODULE ARGS...
                                  runpy wrapper for torchrun / plain python: setup(), then runs
                                  MODULE as __main__ (e.g. verl.trainer.sft_trainer).
  actor_rollout_ref.rollout.name=hf_cpu
                                  the CPU rollout (argus_verl_cpu.rollout): a Ray actor per replica
                                  running transformers `generate`, token-in/token-out.

What setup() patches, and why (see argus_verl_cpu.patches for the code):
  1. verl.utils.device.get_nccl_backend -> "gloo"              (it returns "nccl" unless on NPU)
  2. verl.utils.distributed.initialize_global_process_group_ray: default backend "gloo"
     (verl builds "cpu:gloo,cpu:<nccl backend>", a duplicate device key torch rejects)
  3. verl.workers.engine EngineRegistry: FSDP/FSDP2 engines also answer for device "cpu"
     (they register for cuda/npu only); the ref engine's CPUOffloadPolicy(pin_memory=True)
     loses pin_memory (pinning needs a CUDA driver)
  4. torch.cpu gains memory_allocated/memory_reserved/max_memory_*/reset_peak_memory_stats/
     empty_cache/ipc_collect/mem_get_info/get_rng_state/set_rng_state/manual_seed/
     get_device_name/set_per_process_memory_fraction (verl calls them on get_torch_device())
  5. verl.utils.attention_utils: pad/unpad come from transformers' pure-torch helpers instead of
     `flash_attn.bert_padding` (imported unconditionally on non-NPU hosts)
  6. verl.utils.model: critic/value-head loading uses eager attention instead of the hard-coded
     "flash_attention_2"
  7. torch.compile is disabled (torch._dynamo.config.disable = True): verl compiles its entropy
     helper by default and Inductor on CPU needs g++, which slim images lack
  8. rollout name "hf_cpu" registered in verl.workers.rollout.base._ROLLOUT_REGISTRY and
     verl.workers.rollout.replica.RolloutReplicaRegistry (verl ships vLLM/SGLang/TRT-LLM only;
     its old hf_rollout.HFRollout no longer fits the BaseRollout/server API in 0.8.0)
"""

from .patches import setup

__all__ = ["setup"]
