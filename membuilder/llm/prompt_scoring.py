"""``PromptScoring``: the log-probability of each prompt token, computed a chunk of positions at a
time so that ``memgym serve`` can interleave it with other requests and drop it when its client
leaves.

One forward pass over a whole 8k-token prompt held the model for minutes on a CPU, and a
log-softmax over the vocabulary at every position took gigabytes (8k x 49k floats). Here each
``step`` runs the next chunk of positions against the KV cache of the ones before, takes the
model lock for that chunk only, and keeps from the chunk's logits just one number per position:
``logit[next token] - logsumexp(logits)``. Chunks are sized to take about ``target_s`` seconds
(attention grows with position, so later chunks get shorter), but never fewer than
``min_chunk`` tokens: each forward pass has a fixed cost (on 2 shared cores, measured at 0.7 s
to several seconds with SmolLM2 whatever the chunk, as torch's threads wait for a core), so
8-token chunks made a 1k-token prompt take 214 s instead of 13 s whole.

Works on a ``TransformersChatModel`` (a Hugging Face causal LM with its tokenizer); another model
with a ``prompt_logprobs`` method is scored whole in one step (``WholeScoring``).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from typing import Any


def can_chunk(model: Any) -> bool:
    """Whether ``model`` is a Hugging Face causal LM this module can run chunk by chunk."""
    module = getattr(model, "model", None)
    return (getattr(model, "tokenizer", None) is not None and callable(getattr(module, "get_decoder", None))
            and callable(getattr(module, "get_output_embeddings", None)))


class PromptScoring:
    """Scores ``ids`` under ``model``; call ``step()`` until it returns True, then read ``result()``:
    (token id, token text, log-prob given the tokens before it) per token, the first with None."""

    def __init__(self, model: Any, ids: list[int], first_chunk: int = 256, target_s: float = 0.5,
                 min_chunk: int = 64, max_chunk: int = 2048):
        if not ids:
            raise ValueError("PromptScoring needs at least one token")
        self.model, self.ids = model, list(ids)
        self.chunk, self.target_s, self.min_chunk, self.max_chunk = first_chunk, target_s, min_chunk, max_chunk
        self.position, self.values = 0, []
        self.cache = None
        self.chunks_run = 0

    @property
    def done(self) -> bool:
        return self.position >= len(self.ids) - 1  # the last token predicts nothing we need

    def step(self) -> bool:
        """Run the next chunk; True when every position is scored."""
        if self.done:
            return True
        started = time.perf_counter()
        self._chunk()
        self.chunks_run += 1
        elapsed = time.perf_counter() - started
        # Aim the next chunk at target_s, moving by at most 2x a step so one slow chunk does not swing it.
        scale = min(2.0, max(0.5, self.target_s / max(elapsed, 1e-3)))
        self.chunk = max(self.min_chunk, min(self.max_chunk, int(self.chunk * scale)))
        return self.done

    def result(self) -> list[tuple[int, str, float | None]]:
        if not self.done:
            raise RuntimeError("PromptScoring.result() before the last step")
        texts = self.model.tokenizer.batch_decode([[t] for t in self.ids])
        return [(tok, texts[i], None if i == 0 else self.values[i - 1]) for i, tok in enumerate(self.ids)]

    def _chunk(self) -> None:
        import torch

        hf = self.model.model
        body, head = hf.get_decoder(), hf.get_output_embeddings()
        if self.cache is None:
            from transformers import DynamicCache

            try:
                self.cache = DynamicCache(config=hf.config)
            except TypeError:  # older transformers
                self.cache = DynamicCache()
        start, end = self.position, min(self.position + self.chunk, len(self.ids) - 1)
        device = next(hf.parameters()).device
        inputs = torch.tensor([self.ids[start:end]], device=device)
        targets = torch.tensor(self.ids[start + 1:end + 1], device=device)
        cache_arg = "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"
        # The model's own lock (TransformersChatModel serialises forward passes with it), per chunk.
        lock = getattr(self.model, "_lock", None) or contextlib.nullcontext()
        with lock, torch.inference_mode():
            hidden = body(input_ids=inputs, use_cache=True, **{cache_arg: self.cache}).last_hidden_state[0]
            weight = getattr(head, "weight", None)
            if weight is not None and getattr(head, "bias", None) is None:
                logits = hidden.float() @ weight.float().T  # float32 logits, as the backend's scoring
            else:
                logits = head(hidden).float()
            picked = logits.gather(1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
        self.values.extend(picked.tolist())
        self.position = end


class WholeScoring:
    """A model's own ``prompt_logprobs(conversation)`` in one step, for models ``PromptScoring``
    cannot run chunk by chunk."""

    def __init__(self, model: Any, conversation: list[dict], continue_final: bool):
        self.model, self.conversation, self.continue_final = model, conversation, continue_final
        self._result = None

    def step(self) -> bool:
        self._result = self.model.prompt_logprobs(self.conversation, continue_final=self.continue_final)
        return True

    def result(self) -> list[tuple[int, str, float | None]]:
        return self._result
