"""verl >= 0.9: the `cpu` platform, loaded by verl itself through the `verl.plugins` entry point.

verl 0.9 chooses its device through `verl.plugin.platform.get_platform()`: the first registered
platform whose `is_platform_available(use_smi_check=True)` is true, else "nvidia". On a host
without a GPU nothing answers, so verl falls back to "nvidia": `auto_set_device` then turns
`trainer.device=cpu` back into `cuda`, and every `get_torch_device()` / `get_device_id()` /
`get_nccl_backend()` means CUDA. Ray's `worker_process_setup_hook` cannot fix this for the job's
driver process (`python3 -m verl.trainer.main_ppo` / `sft_trainer_ray` is no Ray worker), so
the platform is registered through verl's own plugin discovery: `verl/__init__.py` loads every
`verl.plugins` entry point of the environment, in every process, the driver included. The
entry point (`argus_verl_cpu-<version>.dist-info/entry_points.txt` in site-packages) is
    [verl.plugins]
    argus_verl_cpu = argus_verl_cpu.platform
and `VERL_PLATFORM=cpu` selects it explicitly. verl 0.8.0 has no plugin discovery and never
imports this module.

The platform claims the process only when no accelerator is there: not when torch sees
CUDA/NPU, not when /dev/nvidia* or /dev/davinci* exist (a CPU-only Ray actor on a GPU host sees
no CUDA but still has the device files), and never with ARGUS_VERL_CPU=0. verl's own platforms
(nvidia, huawei, rocm) are registered first and so are probed first.

What it answers, and why each differs from CUDA:
  device_name "cpu", vendor "cpu"   trainer.device=cpu stays cpu; engines are looked up for
                                    "cpu" (argus_verl_cpu.patches aliases the FSDP ones)
  current_device() -> "cpu"         verl does `.to(get_device_id())`; an int would mean cuda:N
  device_module torch.cpu           with the memory/RNG helpers verl calls filled in (patches 4)
  communication_backend "gloo"      (verl 0.8.0 needed patch 1 for the same)
  ray_resource_name "cpu"           bundles {"CPU": n, "cpu": 1} and actors
                                    resources={"cpu": 1}: the custom resource argus's workers
                                    advertise, as verl 0.8.0 asked for with trainer.device=cpu
                                    (verl still checks for logical GPUs, n_gpus_per_node*nnodes)
  no IPC, no NVTX/profiler, no cudart, no collective module, no RAY_EXPERIMENTAL_NOSET_* vars.
"""

import contextlib

import torch

from argus_verl_cpu.patches import accelerator_present, patch_torch_cpu

NAME = "cpu"


def _make_platform_class():
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    @PlatformRegistry.register(platform=NAME)
    class PlatformCPU(PlatformBase):
        """verl platform for hosts without an accelerator (argus_verl_cpu)."""

        @property
        def device_name(self):
            return "cpu"

        @property
        def vendor_name(self):
            return "cpu"

        @property
        def device_module(self):
            patch_torch_cpu()
            return torch.cpu

        def is_available(self):
            return True

        def is_platform_available(self, use_smi_check=False):
            return not accelerator_present()

        def current_device(self):
            return "cpu"

        def device_count(self):
            return 1

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            pass

        def empty_cache(self):
            pass

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            pass

        def profiler_stop(self):
            pass

        def ray_resource_name(self):
            return "cpu"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    return PlatformCPU


try:
    import verl.plugin.platform  # noqa: F401  (verl >= 0.9 only)
except ImportError:  # verl 0.8.0: no platform layer, nothing to register
    PlatformCPU = None
else:
    PlatformCPU = _make_platform_class()
