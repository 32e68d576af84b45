"""Peak GPU memory of one training process, estimated from the model's shape and the run's settings.

The estimate is a sum of terms, each in bytes per process:

- **weights** of the policy, in the dtype it trains in. A model loaded in bf16 with ``bf16: true``
  and no sharding trains in bf16 throughout: the HF Trainer only autocasts, keeps no fp32 master
  copy, and ``torch.optim.AdamW`` creates its two states with ``zeros_like(param)``, so they are
  bf16 too (2 + 2 + 4 bytes per trained parameter). DeepSpeed ZeRO-3 with bf16 keeps bf16 weights
  and gradients plus fp32 master weights and two fp32 Adam states (2 + 2 + 4 + 8 = 16 bytes), and
  accelerate's FSDP2 upcasts trained parameters to fp32 under mixed precision (4 + 4 + 8 = 16
  bytes); both split those bytes across the processes and hold one gathered block in bf16 on top.
- **gradients** and **optimizer** states of the trained parameters (all of them in full
  fine-tuning; the adapter's under LoRA, in fp32 as PEFT keeps it).
- **reference** model when ``beta > 0`` and no adapter (TRL loads a second copy in the policy's
  dtype; ZeRO-3 and FSDP shard it like the policy).
- **activations** of one micro-batch's loss pass with gradient checkpointing: each layer's input
  hidden state kept (tokens x hidden x 2 bytes x layers), one layer's full activations while it
  is recomputed in the backward pass, and the logits. Without checkpointing every layer keeps its
  full activations. Tokens are the loss pass's: per row prompt + completion, or with
  ``share_prompt`` (ADRPO's default) each distinct prompt once plus every completion, and then
  the prompt's key/value cache repeated for its rows.
- **logits** over the completion tokens (RL; SFT: every token) x the vocabulary, at
  ``LOGIT_BYTES`` per element: the loss takes the bf16 head output to fp32 and holds about three
  fp32 copies at its peak (scaled logits or log-softmax output, its gradient, the gradient of the
  input). At 4 x 6,000 completion tokens x 151,936 this is the largest term.
- **vllm** colocated: ``vllm_gpu_memory_utilization`` x the device's memory, which vLLM claims
  whole (its weights and its KV cache) at start.

Not counted: the CUDA context and allocator fragmentation (a few GiB), and the generation phase,
whose peak (the KL reference's no-grad forward, or transformers' KV cache when vLLM is off) is
below the loss pass's at these settings. Every assumption above is a constant here, so a measured
peak (``scripts/gpu_check.py``) can correct it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membuilder.training.tiny import QWEN3_SIZES

GIB = 1024 ** 3
LOGIT_BYTES = 12          # ~3 fp32 copies of the logits at the loss's peak (see the module docstring)
CHECKPOINT_BYTES = 2      # a bf16 hidden state kept per layer under gradient checkpointing
# Device memory as torch.cuda.get_device_properties(0).total_memory reports it.
DEVICES = {"H200 (141 GB)": 150_121_545_728, "80 GB card (H100/A100)": 85_520_809_984}
# Per parameter, by how the run holds it: (weights, gradients, optimizer incl. master weights).
PRECISION_BYTES = {
    "bf16": (2, 2, 4),        # bf16-loaded model, no sharding: bf16 params, grads, AdamW states
    "fp32": (4, 4, 8),
    "zero3": (2, 2, 12),      # DeepSpeed ZeRO-3 bf16: fp32 master + 2 fp32 states, all sharded
    "fsdp": (4, 4, 8),        # accelerate FSDP2 mixed precision: params upcast to fp32, sharded
}


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a decoder-only transformer (Llama/Qwen3 layout)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        heads = get("num_attention_heads")
        return cls(hidden=get("hidden_size"), layers=get("num_hidden_layers"), heads=heads,
                   kv_heads=get("num_key_value_heads") or heads,
                   head_dim=get("head_dim") or get("hidden_size") // heads,
                   intermediate=get("intermediate_size"), vocab=get("vocab_size"),
                   tied=bool(get("tie_word_embeddings", False)))

    def layer_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads) + 2 * self.head_dim
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * self.layer_params() + self.hidden

    def layer_activation_values(self) -> int:
        """Values one layer keeps per token for its backward pass (sdpa/flash attention: no T x T matrix):
        two norms' outputs, q, k, v, attention output, o-projection output, gate, up, activation, product, down."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 3 * self.hidden + 2 * q + 2 * kv + 4 * self.intermediate

    def kv_values_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim


@dataclass(frozen=True)
class RunShape:
    """The settings of a run the estimate reads (from a training config's fields)."""

    micro_batch: int
    completion_tokens: int            # RL: max_completion_length; SFT: 0
    prompt_tokens: int                # RL: max_prompt_tokens; SFT: max_length
    generations: int = 1
    beta: float = 0.0
    share_prompt: bool = False
    gradient_checkpointing: bool = True
    precision: str = "bf16"
    processes: int = 1
    trainable_params: int | None = None   # None: full fine-tuning
    vllm_share: float = 0.0               # colocated vLLM's vllm_gpu_memory_utilization; 0 when not colocated

    @classmethod
    def from_config(cls, fields: dict[str, Any], processes: int = 1, sharding: str = "none") -> RunShape:
        """From a training YAML's fields (``configs/train/*.yaml``); ``sharding`` is the accelerate
        config's: none, zero3 or fsdp."""
        rl = "num_generations" in fields
        dtype = str(fields.get("dtype", "bfloat16"))
        if sharding in ("zero3", "fsdp"):
            precision = sharding
        elif sharding == "none":
            precision = "bf16" if dtype in ("bfloat16", "auto") else "fp32"
        else:
            raise ValueError(f"sharding {sharding!r}; expected none, zero3 or fsdp")
        colocated = rl and fields.get("use_vllm") and fields.get("vllm_mode", "colocate") == "colocate"
        return cls(micro_batch=int(fields.get("per_device_train_batch_size", 8)),
                   completion_tokens=int(fields.get("max_completion_length", 256)) if rl else 0,
                   prompt_tokens=int(fields.get("max_prompt_tokens") or 512) if rl
                   else int(fields.get("max_length", 1024)),
                   generations=int(fields.get("num_generations", 1)),
                   beta=float(fields.get("beta", 0.0)) if rl else 0.0,
                   # checkpointed layers drop the prompt's cache, so ADRPO runs TRL's own pass then
                   share_prompt=(bool(fields.get("share_prompt", True)) and not fields.get("gradient_checkpointing"))
                   if rl else False,
                   gradient_checkpointing=bool(fields.get("gradient_checkpointing", False)),
                   precision=precision, processes=processes,
                   vllm_share=float(fields.get("vllm_gpu_memory_utilization", 0.3)) if colocated else 0.0)

    def distinct_prompts(self) -> int:
        """Prompts in one micro-batch: the sampler keeps a prompt's G rows adjacent."""
        if self.completion_tokens == 0 or not self.share_prompt:
            return self.micro_batch
        per = math.ceil(self.micro_batch / self.generations)
        return per if self.micro_batch % self.generations == 0 or self.generations % self.micro_batch == 0 else per + 1


@dataclass
class Estimate:
    terms: dict[str, int] = field(default_factory=dict)   # bytes per process
    device_bytes: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.terms.values())

    def gib(self) -> dict[str, float]:
        return {**{k: round(v / GIB, 2) for k, v in self.terms.items()}, "total": round(self.total / GIB, 2)}

    def fits(self) -> bool:
        return self.device_bytes is None or self.total <= self.device_bytes

    def table(self) -> str:
        rows = [f"  {name:<24} {value:>8.2f} GiB" for name, value in self.gib().items()]
        if self.device_bytes is not None:
            rows.append(f"  {'device memory':<24} {self.device_bytes / GIB:>8.2f} GiB")
        return "\n".join(rows)

    def as_dict(self) -> dict[str, Any]:
        return {"gib": self.gib(), "bytes": dict(self.terms), "total_bytes": self.total,
                "device_bytes": self.device_bytes, "fits": self.fits(), **self.notes}


def estimate(model: ModelShape, run: RunShape, device_bytes: int | None = None) -> Estimate:
    """Peak memory of one process of ``run`` training ``model`` (see the module docstring for each term)."""
    if run.precision not in PRECISION_BYTES:
        raise ValueError(f"precision {run.precision!r}; expected one of {sorted(PRECISION_BYTES)}")
    w_bytes, g_bytes, o_bytes = PRECISION_BYTES[run.precision]
    sharded = run.precision in ("zero3", "fsdp")
    split = run.processes if sharded else 1
    params = model.params()
    out = Estimate(device_bytes=device_bytes, notes={"params": params, "run": asdict(run)})
    if run.trainable_params is None:
        out.terms["weights"] = params * w_bytes // split
        out.terms["gradients"] = params * g_bytes // split
        out.terms["optimizer"] = params * o_bytes // split
    else:  # LoRA: a frozen base in bf16, an fp32 adapter with fp32 gradients and AdamW states
        out.terms["weights"] = params * 2 // split + run.trainable_params * 4
        out.terms["gradients"] = run.trainable_params * 4
        out.terms["optimizer"] = run.trainable_params * 8
    if sharded:  # one block gathered whole in bf16 for the forward; the embedding is the largest
        out.terms["gathered block"] = max(model.vocab * model.hidden, model.layer_params()) * 2
    if run.beta > 0 and run.trainable_params is None:
        out.terms["reference model"] = params * 2 // split
    rl = run.completion_tokens > 0
    if rl:
        tokens = run.distinct_prompts() * run.prompt_tokens + run.micro_batch * run.completion_tokens
        scored = run.micro_batch * run.completion_tokens
    else:
        tokens = scored = run.micro_batch * run.prompt_tokens
    layer = model.layer_activation_values() * 2
    if run.gradient_checkpointing:
        out.terms["layer checkpoints"] = tokens * model.hidden * CHECKPOINT_BYTES * model.layers
        out.terms["one layer recomputed"] = tokens * layer
    else:
        out.terms["layer activations"] = tokens * layer * model.layers
    if rl and run.share_prompt:
        # the prompt's key/value cache, repeated for each of its rows in the micro-batch
        out.terms["shared prompt cache"] = run.micro_batch * run.prompt_tokens * model.kv_values_per_token() * 2
    out.terms["logits"] = scored * model.vocab * LOGIT_BYTES
    if run.vllm_share and device_bytes is not None:
        out.terms["vllm (colocated)"] = int(run.vllm_share * device_bytes)
    out.notes["loss_pass_tokens"] = tokens
    return out


class DoesNotFit(SystemExit):
    pass


def require_fit(est: Estimate, where: str) -> None:
    """Stop with the estimate when it exceeds the device's memory."""
    if est.fits():
        return
    raise DoesNotFit(
        f"{where}: the estimated peak memory of one process, {est.total / GIB:.1f} GiB, exceeds the device's "
        f"{est.device_bytes / GIB:.1f} GiB, so training would run out of memory:\n{est.table()}\n"
        "Shorten max_completion_length / max_prompt_tokens (max_length for SFT), lower per_device_train_batch_size "
        "(raising gradient_accumulation_steps), lower vllm_gpu_memory_utilization, or shard with "
        "configs/accelerate/zero3.yaml over more GPUs. The terms are membuilder/training/memory_estimate.py's; "
        "to start anyway, set MEMGYM_MEMORY_CHECK=off.")


def trainer_estimate(trainer, device_bytes: int) -> Estimate:
    """The estimate for a built HF/TRL trainer, from its arguments, its model's config and its accelerator."""
    args, model = trainer.args, trainer.model
    fields = {k: getattr(args, k) for k in ("per_device_train_batch_size", "max_completion_length",
                                             "max_prompt_tokens", "max_length", "num_generations", "beta",
                                             "share_prompt", "gradient_checkpointing", "use_vllm", "vllm_mode",
                                             "vllm_gpu_memory_utilization") if getattr(args, k, None) is not None}
    import torch

    dtype = next(model.parameters()).dtype
    fields["dtype"] = "bfloat16" if dtype in (torch.bfloat16, torch.float16) else "float32"
    distributed = str(getattr(trainer.accelerator, "distributed_type", "NO"))
    sharding = "fsdp" if "FSDP" in distributed else "zero3" if "DEEPSPEED" in distributed else "none"
    run = RunShape.from_config(fields, processes=trainer.accelerator.num_processes, sharding=sharding)
    if hasattr(model, "peft_config"):
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        run = RunShape(**{**asdict(run), "trainable_params": trainable})
    config = getattr(model, "config", None)
    return estimate(ModelShape.from_config(config), run, device_bytes)


# The shipped GPU recipes as the README launches them: (training config, sharding, processes).
GPU_RECIPES = [
    ("configs/train/sft_qwen3_4b.yaml", "zero3", 8),
    ("configs/train/adrpo_qwen3_4b_colocate.yaml", "none", 1),
    ("configs/train/adrpo_qwen3_4b_server.yaml", "zero3", 6),
]


def recipe_estimates(root: str = ".") -> list[tuple[str, str, Estimate]]:
    """Each shipped GPU recipe's estimate on each device in ``DEVICES`` (Qwen3-4B's shape)."""
    import yaml

    shape = ModelShape.from_config(QWEN3_SIZES["4b"])
    out = []
    for path, sharding, processes in GPU_RECIPES:
        fields = yaml.safe_load((Path(root) / path).read_text(encoding="utf-8"))
        run = RunShape.from_config(fields, processes=processes, sharding=sharding)
        for device, memory in DEVICES.items():
            out.append((f"{Path(path).name} ({sharding}, {processes} process{'es' if processes > 1 else ''})",
                        device, estimate(shape, run, memory)))
    return out


def markdown_table(root: str = ".") -> str:
    """The README's table: one row per recipe and device, GiB per process."""
    rows = recipe_estimates(root)
    names = list(rows[0][2].gib())
    seen = []
    for _, _, est in rows:
        seen += [n for n in est.gib() if n not in seen]
    names = [n for n in seen if n != "total"] + ["total"]
    lines = ["| recipe | device | " + " | ".join(names) + " | fits |",
             "|" + "---|" * (len(names) + 3)]
    for recipe, device, est in rows:
        g = est.gib()
        cells = [f"{g[n]:.1f}" if n in g else "-" for n in names]
        lines.append(f"| {recipe} | {device} ({est.device_bytes / GIB:.0f} GiB) | " + " | ".join(cells)
                     + f" | {'yes' if est.fits() else '**no**'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
