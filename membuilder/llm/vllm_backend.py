"""``ChatModel`` over vLLM's offline engine (``vllm.LLM``), for GPU rollouts at scale.

vLLM is imported only when this backend is built, so CPU installs never need it; without it
the constructor says how to install it. All conversations of one ``generate`` go to a single
``LLM.chat`` call, which vLLM schedules with continuous batching. A ``Sampling.json_schema``
becomes guided JSON decoding: ``StructuredOutputsParams(json=...)`` on vLLM >= 0.11, the older
``GuidedDecodingParams(json=...)`` before that.
"""

from __future__ import annotations

import os
import time
from typing import Any

from membuilder.llm.base import (
    ChatMessages,
    Completion,
    Sampling,
    UsageLedger,
    check_conversations,
    check_sampling,
)


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError(
            "the vllm backend needs vLLM and a CUDA GPU: `pip install -e '.[gpu]'` (or `pip install vllm`); "
            "on a CPU machine use the transformers backend (e.g. model 'smollm2-135m')"
        ) from exc
    return vllm


class VLLMChatModel:
    """Arguments: ``path`` (local folder or hub id), ``name``, ``dtype`` ("auto", "bfloat16", ...),
    ``gpu_memory_utilization`` (share of GPU memory vLLM may take; lower it when a trainer shares
    the GPU), ``max_model_len``, ``tensor_parallel_size``, ``seed``, and any further ``vllm.LLM``
    keyword in ``engine_kwargs``."""

    supports_json_schema = True

    def __init__(self, path: str, *, name: str | None = None, dtype: str | None = None, device: str | None = None,
                 gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, seed: int = 0, engine_kwargs: dict[str, Any] | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        vllm = _import_vllm()
        if device not in (None, "auto", "cuda"):
            raise ValueError(f"the vllm backend runs on CUDA; device {device!r} is not supported")
        self.name = name or path
        self.ledger = UsageLedger()
        self._vllm = vllm
        kwargs = dict(model=path, dtype=dtype or "auto", gpu_memory_utilization=gpu_memory_utilization,
                      tensor_parallel_size=tensor_parallel_size, seed=seed)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(engine_kwargs or {})
        started = time.perf_counter()
        self.llm = vllm.LLM(**kwargs)
        self.load_seconds = time.perf_counter() - started
        self.tokenizer = self.llm.get_tokenizer()

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
        outputs = self.llm.chat(conversations, self._params(sampling), use_tqdm=False)
        latency = time.perf_counter() - started
        completions = []
        for request in outputs:
            prompt_len = len(request.prompt_token_ids or [])
            for sample in request.outputs:
                completions.append(Completion(
                    text=sample.text, token_ids=list(sample.token_ids),
                    finish_reason="length" if sample.finish_reason == "length" else "stop",
                    prompt_tokens=prompt_len, completion_tokens=len(sample.token_ids), latency_s=latency))
        self.ledger.record_completions(purpose, completions, len(conversations), latency)
        return completions

    def choice_logprobs(self, conversation: ChatMessages, choices: list[str], *,
                        purpose: str | None = None) -> list[float]:
        """Summed log-probability of each choice's tokens after the rendered prompt, from vLLM's
        ``prompt_logprobs`` over prompt+choice token ids (one batched call)."""
        conversation = check_conversations([conversation], f"{self.name}.choice_logprobs")[0]
        if not choices or not all(isinstance(c, str) and c for c in choices):
            raise ValueError(f"{self.name}.choice_logprobs: choices must be a non-empty list of non-empty strings")
        started = time.perf_counter()
        rendered = self.tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
        # transformers 5 returns a BatchEncoding here, 4.x a plain list of ids.
        prompt = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
        conts = [self.tokenizer.encode(c, add_special_tokens=False) for c in choices]
        requests = [{"prompt_token_ids": prompt + cont} for cont in conts]
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        scores = []
        for cont, out in zip(conts, outputs, strict=True):
            entries = out.prompt_logprobs[len(prompt):]
            scores.append(float(sum(entry[tok].logprob for tok, entry in zip(cont, entries, strict=True))))
        self.ledger.record(purpose, 1, sum(len(prompt) + len(c) for c in conts), 0, time.perf_counter() - started)
        return scores
