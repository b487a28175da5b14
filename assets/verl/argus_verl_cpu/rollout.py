"""CPU rollout for verl 0.8.0 and 0.9.x, registered as `actor_rollout_ref.rollout.name=hf_cpu`.

Replaces the GPU inference servers (vLLM/SGLang/TRT-LLM) that verl's agent loop talks to:
  HFCpuServer         Ray actor, one per rollout replica, holding a transformers CausalLM on CPU.
                      Token-in/token-out `generate(prompt_ids, sampling_params, request_id)` ->
                      TokenOutput, the same call vLLMHttpServer.generate answers. Concurrent
                      requests are batched (left padding) into one `model.generate`.
  HFCpuReplica        verl RolloutReplica: starts the server next to the replica's first worker.
  HFCpuServerAdapter  verl BaseRollout living in the hybrid actor worker: on update_weights it
                      drains verl's per-tensor weight generator (a collective under FSDP, so every
                      rank iterates it) and rollout-rank 0 pushes the full state dict to its server.
sleep/wake_up/kv-cache calls are no-ops: there is no device memory to free.

Differences between verl versions, handled here without a version switch:
  * every TokenOutput carries extra_fields={"global_steps": <step of the weights>}, as vLLM's server
    does in both versions. 0.9's LLMServerClient copies it into min/max_global_steps and the V1
    trainer (replay buffer / agent_loop_tq) needs it; 0.8.0 only passes it along.
  * 0.9 calls abort_all_requests(reject_request=...) and update_weights(weights, wire_format=...):
    the server takes any arguments; the adapter accepts "named_tensors" (the only format the
    naive, colocated sync sends) and refuses "delta_flush" (delta checkpoint engines: not on CPU).
"""

import asyncio
import logging
import os
from typing import Any, Generator, Optional

import ray
import torch

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)
NAME = "hf_cpu"


def _server_name(replica_rank, node_rank=0):
    return f"{NAME}_server_{replica_rank}_{node_rank}"


class HFCpuServer:
    """Token-in/token-out generation server on CPU (a Ray async actor)."""

    def __init__(self, config, model_config, replica_rank: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from argus_verl_cpu import setup

        setup()
        self.config = config
        path = model_config.get("local_path") or model_config.get("path")
        trust = bool(model_config.get("trust_remote_code", False))
        tok_path = model_config.get("tokenizer_path") or path
        if not os.path.isdir(path):
            from verl.utils.fs import copy_to_local

            path = copy_to_local(path)
            tok_path = copy_to_local(tok_path)
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager", trust_remote_code=trust
        ).eval()
        tok = AutoTokenizer.from_pretrained(tok_path, trust_remote_code=trust)
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if tok.eos_token_id is not None and tok.eos_token_id not in eos:
            eos.append(tok.eos_token_id)
        self.eos = eos
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else (eos[0] if eos else 0)
        self.prompt_length = int(config.prompt_length)
        self.response_length = int(config.response_length)
        self.global_steps = None
        self._queue: list = []
        self._runner: Optional[asyncio.Task] = None
        self._lock = asyncio.Lock()

    # ---- weights -------------------------------------------------------------------------
    def update_weights(self, state_dict: dict, global_steps: Optional[int] = None):
        with torch.no_grad():
            own = self.model.state_dict()
            missing = [k for k in state_dict if k not in own]
            for k, v in state_dict.items():
                if k in own:
                    own[k].copy_(v.to(own[k].dtype))
        if missing:
            logger.warning("hf_cpu: ignored %d unknown weights, e.g. %s", len(missing), missing[:3])
        print(f"hf_cpu: loaded {len(state_dict) - len(missing)} tensors (step {global_steps})", flush=True)
        self.global_steps = global_steps
        return len(state_dict) - len(missing)

    # ---- generation ----------------------------------------------------------------------
    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str = "", **kwargs
    ) -> TokenOutput:
        params = dict(sampling_params)
        if "max_tokens" in params:
            max_new = params.pop("max_tokens")
        elif "max_new_tokens" in params:
            max_new = params.pop("max_new_tokens")
        else:
            max_new = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_new = max(1, int(max_new))
        key = (
            float(params.get("temperature", 1.0)),
            float(params.get("top_p", 1.0)),
            int(params.get("top_k", -1) or -1),
            float(params.get("repetition_penalty", 1.0) or 1.0),
            bool(params.get("logprobs", False)),
        )
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((list(map(int, prompt_ids)), max_new, key, fut))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await fut

    async def _run(self):
        await asyncio.sleep(0.02)  # let concurrent requests of a batch arrive
        while self._queue:
            key = self._queue[0][2]
            batch = [r for r in self._queue if r[2] == key]
            self._queue = [r for r in self._queue if r[2] != key]
            try:
                outs = await asyncio.get_running_loop().run_in_executor(None, self._generate_batch, batch, key)
                for (_, _, _, fut), out in zip(batch, outs):
                    fut.set_result(out)
            except Exception as e:  # surface the error to every waiting request
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)

    @torch.no_grad()
    def _generate_batch(self, batch, key):
        temperature, top_p, top_k, rep, want_logprobs = key
        steps = self.global_steps  # the weights this batch is generated with
        width = max(len(p) for p, *_ in batch)
        ids = torch.full((len(batch), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, (p, *_) in enumerate(batch):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        max_new = max(m for _, m, *_ in batch)
        kw = dict(max_new_tokens=max_new, eos_token_id=self.eos, pad_token_id=self.pad, repetition_penalty=rep)
        if temperature <= 0:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_logits=want_logprobs, **kw
        )
        new = out.sequences[:, width:]
        logps = None
        if want_logprobs:
            logits = torch.stack(out.logits, dim=1).float()
            if temperature > 0:
                logits = logits / temperature
            logps = torch.log_softmax(logits, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        results = []
        for i, (_, limit, *_) in enumerate(batch):
            toks = new[i, :limit].tolist()
            for j, t in enumerate(toks):
                if t in self.eos:  # keep the stop token, like vLLM
                    toks = toks[: j + 1]
                    break
            lp = logps[i, : len(toks)].tolist() if logps is not None else None
            results.append(
                TokenOutput(
                    token_ids=toks, log_probs=lp, stop_reason="completed", extra_fields={"global_steps": steps}
                )
            )
        return results

    # ---- control plane verl calls on every server; nothing to do on CPU -----------------
    async def wake_up(self, *a, **k): ...
    async def sleep(self, *a, **k): ...
    async def clear_kv_cache(self, *a, **k): ...
    async def release_kv_cache(self, *a, **k): ...
    async def resume_kv_cache(self, *a, **k): ...
    async def resume_generation(self, *a, **k): ...
    async def wait_for_requests_to_drain(self, *a, **k): ...
    async def start_profile(self, *a, **k): ...
    async def stop_profile(self, *a, **k): ...

    async def abort_all_requests(self, *a, **k):
        return {"aborted_count": 0, "request_ids": []}

    async def set_global_steps(self, global_steps):
        self.global_steps = global_steps


class HFCpuReplica(RolloutReplica):
    """One HFCpuServer per replica, placed on the node of the replica's first worker."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = ray.get_runtime_context().get_node_id()
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(
                lambda self: ray.get_runtime_context().get_node_id()
            )
        server = (
            ray.remote(HFCpuServer)
            .options(
                name=_server_name(self.replica_rank) + self.name_suffix,
                num_cpus=0,  # workers already hold the CPUs; this actor only serves between train phases
                max_concurrency=self.max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            )
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.__ray_ready__.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{NAME}://{_server_name(self.replica_rank)}"


class HFCpuServerAdapter(BaseRollout):
    """Rollout object inside verl's hybrid ActorRolloutRefWorker: forwards weights to HFCpuServer."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, *args, **kwargs):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        ws = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        ws *= self.config.pipeline_model_parallel_size
        self.replica_rank = rank // ws if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % ws
        self.server = None
        self.sleep_level = 1

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        **kwargs,
    ):
        if wire_format != "named_tensors":  # verl 0.9: delta checkpoint engines
            raise NotImplementedError(f"hf_cpu takes full named tensors, not {wire_format!r}")
        state = {}
        for name, tensor in weights:  # always drain: yielding full tensors is collective under FSDP
            if self.rollout_rank == 0:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.rollout_rank != 0:
            return
        if self.server is None:
            self.server = ray.get_actor(_server_name(self.replica_rank))
        await self.server.update_weights.remote(state, kwargs.get("global_steps"))

    def generate_sequences(self, prompts):
        raise NotImplementedError("hf_cpu serves the async agent loop only")
