"""The CPU patches behind argus_verl_cpu.setup(); each one says what it replaces, why, and for
which verl versions (0.8.0, 0.9.x: `_verl_at_least(0, 9)` is the one branch point).

All patches are idempotent and are skipped entirely when a CUDA or NPU device is present (or when
ARGUS_VERL_CPU=0). Functions that other verl modules imported by name are swapped in every
already-imported verl module too, so the order of imports does not matter.
"""

import glob
import os
import sys

_DONE = False


def accelerator_present():
    """True when this process (or its host) has a CUDA/NPU device, or ARGUS_VERL_CPU=0.

    /dev/nvidia* and /dev/davinci* count too: a CPU-only Ray actor on a GPU host sees no CUDA
    (Ray blanks CUDA_VISIBLE_DEVICES) but must not turn its verl into a CPU one."""
    if os.environ.get("ARGUS_VERL_CPU", "1") == "0":
        return True
    import torch

    if torch.cuda.is_available():
        return True
    npu = getattr(torch, "npu", None)
    try:
        if npu is not None and npu.is_available():
            return True
    except Exception:
        pass
    return bool(glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/davinci[0-9]*"))


def verl_version():
    """verl's release as a (major, minor, micro) tuple, from verl/version/version."""
    import verl

    parts = []
    for piece in str(getattr(verl, "__version__", "0")).split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts + [0] * (3 - len(parts)))


def _verl_at_least(major, minor):
    return verl_version()[:2] >= (major, minor)


def _swap(old, new):
    """Replace `old` by `new` in every loaded verl module that bound it by name."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "verl" or name.startswith("verl.")):
            continue
        for attr, val in list(vars(mod).items()):
            if val is old:
                setattr(mod, attr, new)


def _patch_backend():
    # 2. (all versions) initialize_global_process_group_ray() defaults to
    #    "cpu:gloo,{device}:{nccl}", which is "cpu:gloo,cpu:gloo" on CPU; torch rejects the
    #    duplicate device key. Use plain "gloo".
    import verl.utils.distributed as dist

    if not getattr(dist.initialize_global_process_group_ray, "_argus_cpu", False):
        old_init = dist.initialize_global_process_group_ray

        def initialize_global_process_group_ray(timeout_second=None, backend=None):
            return old_init(timeout_second=timeout_second, backend=backend or "gloo")

        initialize_global_process_group_ray._argus_cpu = True
        _swap(old_init, initialize_global_process_group_ray)
        dist.initialize_global_process_group_ray = initialize_global_process_group_ray

    if _verl_at_least(0, 9):
        # 2b. (0.9) initialize_global_process_group() (torchrun: verl.trainer.sft_trainer) builds
        #     the same "cpu:gloo,cpu:gloo" itself, with no backend argument (0.8.0 passed
        #     get_nccl_backend(), which patch 1 made "gloo"). Same function, backend "gloo".
        if not getattr(dist.initialize_global_process_group, "_argus_cpu", False):
            old_global = dist.initialize_global_process_group

            def initialize_global_process_group(timeout_second=36000):
                from datetime import timedelta

                import torch.distributed

                torch.distributed.init_process_group(
                    backend="gloo",
                    timeout=timedelta(seconds=timeout_second),
                    init_method=os.environ.get("DIST_INIT_METHOD", None),
                )
                return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

            initialize_global_process_group._argus_cpu = True
            _swap(old_global, initialize_global_process_group)
            dist.initialize_global_process_group = initialize_global_process_group
        # 1 is not needed on 0.9: get_nccl_backend() asks the platform, which says "gloo".
        return

    # 1. (0.8.0) verl.utils.device.get_nccl_backend() returns "nccl" on anything but NPU.
    import verl.utils.device as device

    if getattr(device.get_nccl_backend, "_argus_cpu", False):
        return
    old = device.get_nccl_backend

    def get_nccl_backend():
        return "gloo"

    get_nccl_backend._argus_cpu = True
    _swap(old, get_nccl_backend)
    device.get_nccl_backend = get_nccl_backend


def patch_torch_cpu():
    # 4. (all versions) verl calls CUDA-only memory/RNG helpers on get_torch_device(), which is
    #    torch.cpu here (0.8.0: getattr(torch, "cpu"); 0.9: the cpu platform's device_module).
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
    # 3. (all versions) FSDP engines are registered for device=["cuda", "npu"] only;
    #    EngineRegistry.get_engine_cls looks up get_device_name() == "cpu" and fails. Alias the
    #    cuda entries to cpu (0.9 also tries the key ("cpu", vendor "cpu") first: not there).
    import verl.workers.engine  # noqa: F401  (registers the engines)
    from verl.workers.engine.base import EngineRegistry

    for backends in EngineRegistry._engines.values():
        for name, devices in backends.items():
            if name in ("fsdp", "fsdp2") and "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])

    # 3b. (all versions) forward-only FSDP2 engines (ref) use CPUOffloadPolicy(pin_memory=True);
    #     pinning needs a CUDA driver. Parameters already live in host memory: drop the pinning.
    import verl.workers.engine.fsdp.transformer_impl as ti

    real = getattr(ti.CPUOffloadPolicy, "_argus_real", ti.CPUOffloadPolicy)
    if real is not None:

        def CPUOffloadPolicy(*a, **k):  # noqa: N802
            k["pin_memory"] = False
            return real(*a, **k)

        CPUOffloadPolicy._argus_real = real
        ti.CPUOffloadPolicy = CPUOffloadPolicy


def _patch_attention():
    # 5. (0.8.0 only) attention_utils imports flash_attn.bert_padding on every non-NPU host
    #    (reached from remove-padding code paths even with use_remove_padding=False). Use
    #    transformers' versions. verl 0.9 falls back to pure-torch helpers by itself when
    #    flash_attn is missing, so this is skipped there.
    if _verl_at_least(0, 9):
        return
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
    # 6. (all versions) verl.utils.model.load_valuehead_model (PPO critic) hard-codes
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
            dtype=torch_dtype,  # `dtype`: transformers >= 4.56 (torch_dtype is deprecated in 5.x)
            config=model_config,
            attn_implementation=attn if attn and "flash" not in attn else "eager",
            trust_remote_code=trust_remote_code,
        )

    load_valuehead_model._argus_cpu = True
    vm.load_valuehead_model = load_valuehead_model


def _register_rollout():
    # 8. (all versions) a CPU rollout under the name "hf_cpu" (argus_verl_cpu.rollout says what
    #    differs between 0.8.0 and 0.9 there).
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[("hf_cpu", "async")] = "argus_verl_cpu.rollout.HFCpuServerAdapter"

    def _load():
        from argus_verl_cpu.rollout import HFCpuReplica

        return HFCpuReplica

    replica.RolloutReplicaRegistry.register("hf_cpu", _load)


def _patch_compile():
    # 7. (all versions) verl torch.compile's its entropy helper (engine use_torch_compile=True by
    #    default). On CPU, Inductor needs a working C++ compiler (g++), which slim images lack
    #    ("InvalidCxxCompiler"). Run eagerly instead: same numbers, no compile step.
    import torch._dynamo

    torch._dynamo.config.disable = True


def _use_cpu_platform():
    # 9. (0.9 only) the "cpu" platform (argus_verl_cpu.platform). verl registers it itself in
    #    every process through the `verl.plugins` entry point of argus_verl_cpu's dist-info; this
    #    also registers it where that dist-info is missing (shim on PYTHONPATH only) or plugins
    #    are off (VERL_USE_EXTERNAL_PLUGINS=none), and replaces a platform verl already chose
    #    ("nvidia", its fallback) before the hook ran. The job's driver process is no Ray worker
    #    and gets no hook: there only the entry point helps.
    if not _verl_at_least(0, 9):
        return
    from verl.plugin import platform as vp

    from argus_verl_cpu.platform import NAME, PlatformCPU

    if vp.PlatformRegistry.get(NAME) is None:
        vp.PlatformRegistry.register(platform=NAME)(PlatformCPU)
    from verl.plugin.platform import platform_manager as pm

    current = pm._current_platform  # None: not chosen yet; detection will find "cpu"
    if current is not None and current.device_name != "cpu":
        vp.set_platform(PlatformCPU())


def setup(*_args, **_kwargs):
    """Apply all CPU patches (no-op on CUDA/NPU hosts or with ARGUS_VERL_CPU=0). Idempotent."""
    global _DONE
    if _DONE or accelerator_present():
        return
    patch_torch_cpu()
    _patch_compile()
    _use_cpu_platform()
    _patch_backend()
    _patch_attention()
    _patch_model_loader()
    _patch_engines()
    _register_rollout()
    _DONE = True
