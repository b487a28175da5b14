"""`python -m argus_verl_cpu.run_module MODULE [ARGS...]`: apply the CPU patches, then run MODULE as
__main__ with sys.argv = [MODULE, ARGS...] (what `python -m MODULE ARGS...` would do).

On a CPU-only host it also makes every `ray.init()` in this process add
runtime_env.worker_process_setup_hook="argus_verl_cpu.setup" (unless one is already given), so Ray
workers get the patches too: verl.trainer.sft_trainer_ray calls a bare `ray.init()` that no
config key can reach. Examples:
    python3 -m argus_verl_cpu.run_module verl.trainer.sft_trainer_ray key=value ...
    torchrun --nproc_per_node=2 -m argus_verl_cpu.run_module verl.trainer.sft_trainer key=value ...
"""

import runpy
import sys

from argus_verl_cpu import patches

HOOK = "argus_verl_cpu.setup"


def _inject_ray_hook():
    import ray

    real = ray.init
    if getattr(real, "_argus_cpu", False):
        return

    def init(*args, **kwargs):
        env = dict(kwargs.get("runtime_env") or {})
        env.setdefault("worker_process_setup_hook", HOOK)
        kwargs["runtime_env"] = env
        return real(*args, **kwargs)

    init._argus_cpu = True
    ray.init = init


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    patches.setup()
    if patches._DONE:  # i.e. CPU-only host, patches active
        _inject_ray_hook()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
