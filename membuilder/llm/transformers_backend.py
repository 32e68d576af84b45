"""The default backend: a Hugging Face causal LM run in-process with transformers.

Works on any local checkpoint folder or hub id (hub ids need the files already in the local
cache: MemGym runs with ``HF_HUB_OFFLINE=1``). CPU in float32 by default; CUDA with bfloat16 when
a GPU is present. On a CPU with AMX (bfloat16 matrix tiles) the default is bfloat16 too:
SmolLM2 was measured generating about 4x faster there than in float32, and the decisions that
matter (multiple-choice argmax) agree with float32 (``bench/bf16_agreement.py``). CPUs without
AMX keep float32, AVX512-BF16 or not: see ``cpu_bf16_is_fast``. ``dtype`` overrides, and so does
``$MEMGYM_DTYPE`` for every model a process loads. ``prefill_dtype`` (or ``$MEMGYM_PREFILL_DTYPE``)
``auto`` lets a float32 model read its prompts through a bfloat16 twin where the CPU has bfloat16
dot products, decoding in float32 (``membuilder.llm.greedy_decode``); unset, float32 is exact.

Conversations are rendered with the tokenizer's chat template, left-padded and generated in
micro-batches, so one call with many conversations costs far less than many
calls with one.

Determinism: greedy decoding (temperature 0) gives the same text on every call with the same
conversations. In float32 a conversation's greedy text does not depend on what else shares its
batch; in bfloat16 it can (padding changes rounding, and a near tie then goes the other way), so
compare runs that batch alike, or pin ``dtype="float32"``. Sampling with a
``seed`` is reproducible for the same batch: the seed fixes torch's generator for that call
(inside ``torch.random.fork_rng``, so the caller's global random state is left alone).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from membuilder.llm.base import (
    ChatMessages,
    Completion,
    Sampling,
    UsageLedger,
    check_conversations,
    check_sampling,
)
from membuilder.llm.context_fit import fit_rendered, model_context_length, prompt_budget
from membuilder.llm.cpu_flags import cpu_flags
from membuilder.llm.greedy_decode import bf16_prefill_is_fast, cache_arg, greedy_decode
from membuilder.llm.loading import load_causal_lm

# Below this many shared leading tokens, running a prefix apart costs more than it saves.
MIN_SHARED_PREFIX = 48


def _shared_prefix(rows: list[list[int]]) -> int:
    """Leading tokens common to every row, leaving each row at least one token of its own."""
    if not rows:
        return 0
    n = min(map(len, rows)) - 1
    first = rows[0]
    for i in range(max(n, 0)):
        t = first[i]
        if any(r[i] != t for r in rows):
            return i
    return max(n, 0)


def pick_device(device: str | None) -> str:
    if device and device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_bf16_is_fast() -> bool:
    """Whether bfloat16 beats float32 on this CPU: only with AMX tiles (``amx_bf16``).

    AVX512-BF16 alone is not enough. Measured on a 2-core VM that shows ``avx512_bf16`` but
    hides AMX: a bf16 matmul ran at 0.55x float32's speed, a SmolLM2 forward and backward pass
    1.4x slower, and generation at the same speed. So such CPUs keep float32. torch's own probe
    asks the kernel for AMX permission when ``/proc/cpuinfo`` does not list it.
    """
    if "amx_bf16" in cpu_flags():
        return True
    import torch

    probe = getattr(getattr(torch._C, "_cpu", None), "_init_amx", None)
    try:
        return bool(probe and probe())
    except Exception:  # a torch without the probe: stay on float32
        return False


def pick_dtype(dtype: str | None, device: str):
    import torch

    dtype = dtype or os.environ.get("MEMGYM_DTYPE") or None
    if dtype in (None, "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16
        return torch.bfloat16 if device == "cpu" and cpu_bf16_is_fast() else torch.float32
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(names)} or 'auto'")
    return names[dtype]


class TransformersChatModel:
    """``ChatModel`` over ``AutoModelForCausalLM``.

    Arguments: ``path`` (checkpoint folder or hub id), ``name`` (shown in reports; defaults to
    the path), ``device`` ("cpu", "cuda", "cuda:1", or "auto"), ``dtype`` ("auto", "float32",
    "bfloat16", "float16"), ``batch_size`` (conversations per forward pass in ``generate``),
    ``threads`` (torch CPU threads, process-wide; default ``$MEMGYM_TORCH_THREADS`` or torch's own
    choice. On a small shared machine 1 thread can be many times faster than 2: idle OpenMP
    workers spin against other processes), ``chat_template_kwargs`` (extra variables for the chat
    template, e.g. ``{"enable_thinking": False}`` so a Qwen3 answerer replies without thinking first;
    templates ignore variables they do not use), ``context_length`` (prompt + completion tokens;
    default the model config's ``max_position_embeddings``: every prompt is fitted to it, see
    ``membuilder.llm.context_fit``), ``prefill_dtype`` (``auto``, ``bfloat16`` or None: the dtype
    greedy generation reads prompts in, default ``$MEMGYM_PREFILL_DTYPE``, else the model's own;
    ``auto`` is bfloat16 for a float32 model on a CPU with bfloat16 dot products. Only for a model
    loaded from ``path``: a twin of a model passed in would miss its later updates).
    A ready model and tokenizer can be passed instead of a path (``model=``, ``tokenizer=``), e.g.
    a policy being trained.
    """

    supports_json_schema = False  # no constrained decoding here; callers parse leniently

    def __init__(self, path: str | None = None, *, name: str | None = None, device: str | None = None,
                 dtype: str | None = None, batch_size: int = 16, threads: int | None = None,
                 model: Any = None, tokenizer: Any = None, chat_template_kwargs: dict[str, Any] | None = None,
                 context_length: int | None = None, prefill_dtype: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        loaded = model is None  # a twin for the prompt pass only of weights this object owns

        threads = threads or int(os.environ.get("MEMGYM_TORCH_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        from transformers import AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if context_length is not None and (isinstance(context_length, bool) or not isinstance(context_length, int)
                                           or context_length < 2):
            raise ValueError(f"context_length must be a whole number >= 2, got {context_length!r}")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise ValueError(f"chat_template_kwargs must be a mapping, got {chat_template_kwargs!r}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.name = name or str(path or getattr(model, "name_or_path", "model"))
        self.batch_size = batch_size
        self.ledger = UsageLedger()
        self._lock = threading.Lock()  # one forward pass at a time (the server calls from threads)
        started = time.perf_counter()
        if model is None:
            if path is None:
                raise ValueError("TransformersChatModel needs a path or a model")
            self.device = pick_device(device)
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(path))
                model = load_causal_lm(str(path), dtype=pick_dtype(dtype, self.device))
            except OSError as exc:
                raise FileNotFoundError(
                    f"cannot load model '{path}': not a local checkpoint folder and not in the offline "
                    f"hub cache ({exc.__class__.__name__}: {str(exc).splitlines()[0]})"
                ) from exc
            model.to(self.device)
        else:
            if tokenizer is None:
                raise ValueError("TransformersChatModel(model=...) also needs tokenizer=")
            self.device = str(next(model.parameters()).device)
        model.eval()
        self.model, self.tokenizer = model, tokenizer
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        self.context_length = context_length or model_context_length(self, default=None)
        self.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        self._torch = torch
        self.prefill_dtype = self._prefill_dtype(prefill_dtype or os.environ.get("MEMGYM_PREFILL_DTYPE") or None,
                                                 loaded=loaded)
        self._prefill_model = None  # built on first use: a process that only scores never pays for it
        self.load_seconds = time.perf_counter() - started

    def _prefill_dtype(self, dtype: str | None, loaded: bool):
        """The torch dtype greedy generation reads prompts in, where it differs from the model's; else None."""
        if dtype in (None, "same"):
            return None
        if dtype == "auto":
            if self.dtype != "float32" or not self.device.startswith("cpu") or not bf16_prefill_is_fast():
                return None
            dtype = "bfloat16"
        want = pick_dtype(dtype, self.device)
        if want == next(self.model.parameters()).dtype or not loaded:
            return None
        return want

    @property
    def prefill_model(self):
        """The copy of the model in ``prefill_dtype`` that reads prompts for greedy generation, or None."""
        if self.prefill_dtype is not None and self._prefill_model is None:
            self._prefill_model = copy.deepcopy(self.model).to(self.prefill_dtype).eval()
        return self._prefill_model

    def __repr__(self) -> str:
        return f"TransformersChatModel(name={self.name!r}, device={self.device!r}, dtype={self.dtype!r})"

    @property
    def engine(self) -> str:
        """What runs this model, for reports: e.g. ``transformers bfloat16 on cpu``."""
        reads = "" if self.prefill_dtype is None else f", prompts read in {str(self.prefill_dtype).replace('torch.', '')}"
        return f"transformers {self.dtype} on {self.device}{reads}"

    @property
    def usage(self):
        return self.ledger.total

    def _eos_ids(self) -> set[int]:
        ids = set()
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (self.tokenizer.eos_token_id, gen_eos):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        # ChatML models end a turn with <|im_end|>; stop there even if the config forgot it.
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id and im_end is not None:
            ids.add(im_end)
        return ids

    # ---- prompts -------------------------------------------------------------------------
    def render(self, conversation: ChatMessages, continue_final: bool = False) -> list[int]:
        """Token ids of a conversation under the chat template, ready for the assistant's turn
        (or, with ``continue_final``, continuing the last assistant message)."""
        out = self.tokenizer.apply_chat_template(
            conversation, tokenize=True, add_generation_prompt=not continue_final,
            continue_final_message=continue_final, return_dict=True, **self.chat_template_kwargs)
        return list(out["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    # ---- generation ----------------------------------------------------------------------
    def generate(self, conversations: list[ChatMessages], sampling: Sampling | None = None, *,
                 purpose: str | None = None, should_stop: Callable[[], bool] | None = None,
                 context_length: int | None = None) -> list[Completion]:
        """One completion per conversation and sample (conversation-major order).

        A prompt longer than the context (``context_length``, else the model's) less the completion is
        cut (``membuilder.llm.context_fit``) and counted in ``usage.prompts_cut``.

        ``should_stop`` is polled after every generated token: once it returns True, decoding ends
        at once and the texts so far are returned (``memgym serve`` stops when its clients leave).
        """
        conversations = check_conversations(conversations, f"{self.name}.generate")
        sampling = check_sampling(sampling, f"{self.name}.generate")
        started = time.perf_counter()
        _, prompts, cut = fit_rendered(conversations, self.render,
                                       prompt_budget(context_length or self.context_length, sampling.max_new_tokens))
        results: list[list[Completion]] = [[] for _ in prompts]
        # Sort by length so each micro-batch pads little; results go back in caller order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        with self._lock, self._seeded(sampling):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                batch = [prompts[i] for i in chunk]
                for i, comps in zip(chunk, self._generate_batch(batch, sampling, should_stop), strict=True):
                    results[i] = comps
        flat = [c for comps in results for c in comps]
        self.ledger.record_completions(purpose, flat, len(conversations), time.perf_counter() - started, cut)
        return flat

    def _seeded(self, sampling: Sampling):
        torch = self._torch
        if sampling.greedy or sampling.seed is None:
            return _nullcontext()
        devices = [torch.cuda.current_device()] if self.device.startswith("cuda") else []
        ctx = torch.random.fork_rng(devices=devices)

        class _Seed:
            def __enter__(self_inner):
                ctx.__enter__()
                torch.manual_seed(int(sampling.seed))

            def __exit__(self_inner, *exc):
                return ctx.__exit__(*exc)

        return _Seed()

    def _generate_batch(self, prompts: list[list[int]], sampling: Sampling,
                        should_stop: Callable[[], bool] | None = None) -> list[list[Completion]]:
        torch = self._torch
        started = time.perf_counter()
        if sampling.greedy and sampling.n == 1 and not sampling.stop:
            # Rows leave the batch as they end: a batch costs the sum of its outputs, not its longest x rows.
            new = greedy_decode(self.model, prompts, sampling.max_new_tokens, eos_ids=self.eos_ids,
                                pad_id=self.tokenizer.pad_token_id, min_new_tokens=sampling.min_new_tokens or 0,
                                should_stop=should_stop, prefill=self.prefill_model)
            latency = time.perf_counter() - started
            return [[self._completion(ids, len(p), sampling, latency)] for ids, p in zip(new, prompts, strict=True)]
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        kwargs: dict[str, Any] = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=pad,
                                      eos_token_id=sorted(self.eos_ids), num_return_sequences=sampling.n)
        if sampling.min_new_tokens:
            kwargs["min_new_tokens"] = min(sampling.min_new_tokens, sampling.max_new_tokens)
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
        if should_stop is not None:
            kwargs["stopping_criteria"] = _stopping_when(should_stop)
        with torch.inference_mode():
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        new = out[:, width:].tolist()
        latency = time.perf_counter() - started
        grouped: list[list[Completion]] = []
        for i, prompt in enumerate(prompts):
            comps = []
            for j in range(sampling.n):
                comps.append(self._completion(new[i * sampling.n + j], len(prompt), sampling, latency))
            grouped.append(comps)
        return grouped

    def _completion(self, ids: list[int], prompt_len: int, sampling: Sampling, latency: float) -> Completion:
        # Generation pads finished rows; keep tokens up to and including the first end token
        # (it was sampled, and a trainer scoring these ids needs it).
        kept, finish = [], "length"
        for tok in ids:
            kept.append(tok)
            if tok in self.eos_ids:
                finish = "stop"
                break
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        if sampling.stop:
            cut = min((text.find(s) for s in sampling.stop if s in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
        if finish == "length" and len(kept) < sampling.max_new_tokens:
            finish = "stop"  # ended by a stop string inside generate
        return Completion(text=text, token_ids=kept, finish_reason=finish, prompt_tokens=prompt_len,
                          completion_tokens=len(kept), latency_s=latency)

    # ---- scoring -------------------------------------------------------------------------
    def choice_logprobs(self, conversation: ChatMessages, choices: list[str], *,
                        purpose: str | None = None) -> list[float]:
        """Summed log-probability of each choice as the assistant's reply, in one batched pass."""
        conversation = check_conversations([conversation], f"{self.name}.choice_logprobs")[0]
        if not choices or not all(isinstance(c, str) and c for c in choices):
            raise ValueError(f"{self.name}.choice_logprobs: choices must be a non-empty list of non-empty strings")
        started = time.perf_counter()
        seqs = [self.tokenizer.encode(c, add_special_tokens=False) for c in choices]
        _, (prompt,), cut = fit_rendered([conversation], self.render,
                                         prompt_budget(self.context_length, max(map(len, seqs))))
        scores: list[float] = []
        with self._lock:
            for start in range(0, len(seqs), self.batch_size):
                scores.extend(self._score_continuations(prompt, seqs[start:start + self.batch_size]))
        self.ledger.record(purpose, 1, len(prompt) * len(choices) + sum(map(len, seqs)), 0,
                           time.perf_counter() - started, cut)
        return scores

    def choice_logprobs_batch(self, conversations: list[ChatMessages], choices: list[list[str]], *,
                              purpose: str | None = None) -> list[list[float]]:
        """``choice_logprobs`` for many prompts at once.

        When every option of a prompt is one token ("1", "2", ...), log p(option | prompt) is
        read off the next-token distribution: one forward pass per prompt, keeping only the last
        position's logits, with prompts of similar length batched together. Other prompts fall
        back to ``choice_logprobs``; both paths give the same numbers.
        """
        if len(conversations) != len(choices):
            raise ValueError(f"{self.name}.choice_logprobs_batch: {len(conversations)} prompts, {len(choices)} choice lists")
        ids = [[self.tokenizer.encode(c, add_special_tokens=False) for c in cs] for cs in choices]
        out: list[list[float] | None] = [None] * len(conversations)
        fast = [i for i, cs in enumerate(ids) if cs and all(len(t) == 1 for t in cs)]
        for i in range(len(conversations)):
            if i not in fast:
                out[i] = self.choice_logprobs(conversations[i], choices[i], purpose=purpose)
        if fast:
            convs = check_conversations([conversations[i] for i in fast], f"{self.name}.choice_logprobs_batch")
            _, fitted, cut = fit_rendered(convs, self.render, prompt_budget(self.context_length, 1))
            rows = dict(zip(fast, fitted))
            self.ledger.note_cuts(purpose, cut)
            order = sorted(fast, key=lambda i: len(rows[i]))  # similar lengths share a batch: less padding
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                logprobs = self._last_logprobs([rows[i] for i in chunk], purpose)
                for i, lp in zip(chunk, logprobs):
                    out[i] = [float(lp[t[0]]) for t in ids[i]]
        return [o if o is not None else [] for o in out]

    def _last_logprobs(self, rows: list[list[int]], purpose: str | None):
        """Next-token log-probabilities after each row (left-padded), one forward pass."""
        torch = self._torch
        started = time.perf_counter()
        shared = _shared_prefix(rows)
        if len(rows) > 1 and shared >= MIN_SHARED_PREFIX:
            logprobs = self._last_logprobs_shared(rows, shared)
            self.ledger.record(purpose, len(rows), sum(map(len, rows)), 0, time.perf_counter() - started)
            return logprobs
        width = max(map(len, rows))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)
        # Left padding shifts positions; count them from each row's first real token, as generate does.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with self._lock, torch.inference_mode():
            logits = self._logits(lambda h: h[:, -1], input_ids=ids, attention_mask=mask, position_ids=positions)
        logprobs = torch.log_softmax(logits, dim=-1).cpu()
        self.ledger.record(purpose, len(rows), sum(map(len, rows)), 0, time.perf_counter() - started)
        return logprobs

    def _last_logprobs_shared(self, rows: list[list[int]], shared: int):
        """``_last_logprobs`` for rows that start with the same ``shared`` tokens: the prefix runs
        once and its key/value cache serves every row. Questions asked of one memory (a period's
        questions, probes and fact checks) share most of their prompt, so this saves most of the
        prefill on a CPU. Suffixes are right-padded: causal attention never looks at later pads."""
        torch = self._torch
        from transformers import DynamicCache

        n = len(rows)
        suffixes = [r[shared:] for r in rows]
        width = max(map(len, suffixes))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in suffixes], device=self.device)
        mask = torch.tensor([[1] * (shared + len(s)) + [0] * (width - len(s)) for s in suffixes], device=self.device)
        positions = torch.arange(shared, shared + width, device=self.device).unsqueeze(0).expand(n, -1)
        last = torch.tensor([len(s) - 1 for s in suffixes], device=self.device)
        with self._lock, torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            # the prefix pass only fills the cache: its logits are not read, so keep one
            self.model(input_ids=torch.tensor([rows[0][:shared]], device=self.device), use_cache=True,
                       logits_to_keep=1, **{cache_arg(self.model): cache})
            cache.batch_repeat_interleave(n)
            batch = torch.arange(n, device=self.device)
            logits = self._logits(lambda h: h[batch, last], cache=cache, input_ids=ids, attention_mask=mask,
                                  position_ids=positions, use_cache=True)
        return torch.log_softmax(logits, dim=-1).cpu()

    def _logits(self, select, cache=None, **inputs):
        """Float32 logits at the positions ``select`` picks from the last hidden states.

        Only the picked positions go through the (vocabulary-sized) head, in float32 (see
        ``_head_logits``); a model without a separate body and head runs whole."""
        body, head = self.model.get_decoder(), self.model.get_output_embeddings()
        if body is not None and head is not None:
            if cache is not None:
                inputs[cache_arg(body)] = cache
            return self._head_logits(head, select(body(**inputs).last_hidden_state))
        if cache is not None:
            inputs[cache_arg(self.model)] = cache
        return select(self.model(**inputs).logits).float()

    def _head_logits(self, head, hidden):
        """Logits in float32 from the last hidden states. Under bfloat16 the head runs in float32:
        bf16 logits are rounded to steps of 1/16 near 10, which moves option log-probabilities
        by up to 0.1 nats; the body's own bf16 error is several times smaller."""
        torch = self._torch
        weight = getattr(head, "weight", None)
        if weight is None or weight.dtype == torch.float32 or getattr(head, "bias", None) is not None:
            return head(hidden).float()
        return hidden.float() @ weight.float().T

    def _score_continuations(self, prompt: list[int], continuations: list[list[int]]) -> list[float]:
        torch = self._torch
        # Right padding here: a plain forward pass takes positions from the index, not the mask.
        rows = [prompt + c for c in continuations]
        width = max(map(len, rows))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.device)
        start = len(prompt) - 1  # the position whose next token is each continuation's first
        with torch.inference_mode():
            logits = self._logits(lambda h: h[:, start:-1], input_ids=ids, attention_mask=mask)
        logprobs = torch.log_softmax(logits, dim=-1)
        scores = []
        for k, cont in enumerate(continuations):
            positions = torch.arange(len(cont), device=self.device)
            targets = torch.tensor(cont, device=self.device)
            scores.append(float(logprobs[k, positions, targets].sum()))
        return scores

    def prompt_logprobs(self, conversation: ChatMessages, continue_final: bool = True) -> list[tuple[int, str, float | None]]:
        """(token id, token text, log-prob given the tokens before it) for every prompt token;
        the first has no log-prob. Serves the vLLM-style ``prompt_logprobs`` of ``memgym serve``."""
        torch = self._torch
        ids = self.render(conversation, continue_final=continue_final)
        with self._lock, torch.inference_mode():
            logits = self._logits(lambda h: h[0], input_ids=torch.tensor([ids], device=self.device))
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        values = logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()
        return [(tok, self.tokenizer.decode([tok]), None if i == 0 else values[i - 1]) for i, tok in enumerate(ids)]


def _stopping_when(should_stop: Callable[[], bool]):
    """A transformers stopping criterion that ends every row once ``should_stop()`` is true."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Flag(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), bool(should_stop()), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_Flag()])


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
