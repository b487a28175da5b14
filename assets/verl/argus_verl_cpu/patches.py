"""The CPU patches behind argus_verl_cpu.setup(); each one says what it replaces and why.

All patches are idempotent and are skipped entirely when a CUDA or NPU device is present (or when
ARGUS_VERL_CPU=0). Functions that other verl modules imported by name are swapped in every
already-imported verl module too, so the order of imports does not matter.
"""

import os
import sys

_DONE = False


def _accelerator_present():
    import torch

    if torch.cuda.is_available():
        return True
    npu = getattr(torch, "npu", None)
    try:
        return bool(npu is not None and npu.is_available())
    except Exception:
        return False


def _swap(old, new):
    """Replace `old` by `new` in every loaded verl module that bound it by name."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "verl" or name.startswith("verl.")):
            continue
        for attr, val in list(vars(mod).items()):
            if val is old:
                setattr(mod, attr, new)


def _patch_backend():
    # 1. verl.utils.device.get_nccl_backend() returns "nccl" on anything but NPU.
    import verl.utils.device as device

    if getattr(device.get_nccl_backend, "_argus_cpu", False):
        return
    old = device.get_nccl_backend

    def get_nccl_backend():
        return "gloo"

    get_nccl_backend._argus_cpu = True
    _swap(old, get_nccl_backend)
    device.get_nccl_backend = get_nccl_backend

    # 2. initialize_global_process_group_ray() defaults to "cpu:gloo,{device}:{nccl}", which is
    #    "cpu:gloo,cpu:gloo" on CPU; torch rejects the duplicate device key. Use plain "gloo".
    import verl.utils.distributed as dist

    old_init = dist.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return old_init(timeout_second=timeout_second, backend=backend or "gloo")

    _swap(old_init, initialize_global_process_group_ray)
    dist.initialize_global_process_group_ray = initialize_global_process_group_ray


def _patch_torch_cpu():
    # 4. verl calls CUDA-only memory/RNG helpers on get_torch_device(), which is torch.cpu here.
    import torch

    cpu = torch.cpu

    def _mem_get_info(*a, **k):
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * size
        return free, pages * size

    fills = {
        "memory_allocated": lambda *a, **k: 0,
        "memory_reserved": lambda *a, **k: 0,
        "max_memory_allocated": lambda *a, **k: 0,
        "max_memory_reserved": lambda *a, **k: 0,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "empty_cache": lambda *a, **k: None,
        "ipc_collect": lambda *a, **k: None,
        "set_per_process_memory_fraction": lambda *a, **k: None,
        "mem_get_info": _mem_get_info,
        "get_device_name": lambda *a, **k: "cpu",
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
    }
    for name, fn in fills.items():
        if not hasattr(cpu, name):
            setattr(cpu, name, fn)


def _patch_engines():
    # 3. FSDP engines are registered for device=["cuda", "npu"] only; EngineRegistry.get_engine_cls
    #    looks up get_device_name() == "cpu" and fails. Alias the cuda entries to cpu.
    import verl.workers.engine  # noqa: F401  (registers the engines)
    from verl.workers.engine.base import EngineRegistry

    for backends in EngineRegistry._engines.values():
        for name, devices in backends.items():
            if name in ("fsdp", "fsdp2") and "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])

    # 3b. forward-only FSDP2 engines (ref) use CPUOffloadPolicy(pin_memory=True); pinning needs a
    #     CUDA driver. Parameters already live in host memory, so drop the pinning.
    import verl.workers.engine.fsdp.transformer_impl as ti

    real = getattr(ti.CPUOffloadPolicy, "_argus_real", ti.CPUOffloadPolicy)
    if real is not None:

        def CPUOffloadPolicy(*a, **k):  # noqa: N802
            k["pin_memory"] = False
            return real(*a, **k)

        CPUOffloadPolicy._argus_real = real
        ti.CPUOffloadPolicy = CPUOffloadPolicy


def _patch_attention():
    # 5. attention_utils imports flash_attn.bert_padding on every non-NPU host (reached from
    #    remove-padding code paths even with use_remove_padding=False). Use transformers' versions.
    import verl.utils.attention_utils as au
    from transformers import modeling_flash_attention_utils as mfa

    def _rearrange(*a, **k):
        from einops import rearrange

        return rearrange(*a, **k)

    def _get_attention_functions():
        au._index_first_axis, au._pad_input, au._rearrange, au._unpad_input = (
            mfa._index_first_axis,
            mfa._pad_input,
            _rearrange,
            mfa._unpad_input,
        )
        return au._index_first_axis, au._pad_input, au._rearrange, au._unpad_input

    au._get_attention_functions = _get_attention_functions


def _patch_model_loader():
    # 6. verl.utils.model.load_valuehead_model (PPO critic) hard-codes
    #    attn_implementation="flash_attention_2". On CPU load the token-classification head with
    #    the attention the model config asks for (eager/sdpa). Callers import it lazily by name.
    import verl.utils.model as vm

    if getattr(vm.load_valuehead_model, "_argus_cpu", False):
        return

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        attn = getattr(model_config, "_attn_implementation", None)
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=attn if attn and "flash" not in attn else "eager",
            trust_remote_code=trust_remote_code,
        )

    load_valuehead_model._argus_cpu = True
    vm.load_valuehead_model = load_valuehead_model


def _register_rollout():
    # 8. a CPU rollout under the name "hf_cpu".
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[("hf_cpu", "async")] = "argus_verl_cpu.rollout.HFCpuServerAdapter"

    def _load():
        from argus_verl_cpu.rollout import HFCpuReplica

        return HFCpuReplica

    replica.RolloutReplicaRegistry.register("hf_cpu", _load)


def _patch_compile():
    # 7. verl torch.compile's its entropy helper (engine use_torch_compile=True by default). On CPU,
    #    Inductor needs a working C++ compiler (g++), which slim images lack ("InvalidCxxCompiler").
    #    Run eagerly instead: same numbers, no compile step.
    import torch._dynamo

    torch._dynamo.config.disable = True


def setup(*_args, **_kwargs):
    """Apply all CPU patches (no-op on CUDA/NPU hosts or with ARGUS_VERL_CPU=0). Idempotent."""
    global _DONE
    if _DONE or os.environ.get("ARGUS_VERL_CPU", "1") == "0" or _accelerator_present():
        return
    _patch_torch_cpu()
    _patch_compile()
    _patch_backend()
    _patch_attention()
    _patch_model_loader()
    _patch_engines()
    _register_rollout()
    _DONE = True
