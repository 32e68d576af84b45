"""GPU check, offline. Two sizes:

    python scripts/gpu_check.py                 # small: a small random Qwen3, 3 SFT + 3 ADRPO steps, bf16 on cuda:0
    python scripts/gpu_check.py --device cpu    # the same mechanics on a CPU, float32
    python scripts/gpu_check.py --size 4b       # Qwen3-4B's architecture, the colocate recipe's settings
    python scripts/gpu_check.py --size 4b --device cpu --layers 2 --hidden 256 --prompt-length 64 \
        --completion-length 16 --out /tmp/gpu_check.json     # the cut-down check the test suite runs

Small prints the step times of ADRPO versus plain GRPO (alpha 1) on the same batch. Rewards come
from the format-only scorer (validity and length), so nothing outside the machine is needed.

``--size 4b`` builds a random model with Qwen3-4B's exact architecture (36 layers, hidden 2,560,
32 query and 8 key/value heads of 128, vocabulary 151,936) and a byte-level tokenizer filled out
to that vocabulary, and trains it with the settings of configs/train/adrpo_qwen3_4b_colocate.yaml
(G, micro-batch, accumulation, beta, sampling, full fine-tuning, gradient checkpointing, bf16):

1. 2 optimizer steps of plain GRPO (TRL's GRPOTrainer with the same reward, as
   train/grpo_plain_trl.py) and 2 of ADRPO, end to end, timed per step as generation (with the
   KL reference's log-probs), scoring and optimisation. Without vLLM (it does not fit in what a
   GPU check carries) transformers generates, with no paged KV cache and no prefix sharing: a 6,000-
   token completion of 32 rows on a 20,000-token prompt would need ~120 GB of KV cache and ~40
   minutes, so these steps run at --steps-prompt-length / --steps-completion-length (1,024 / 256).
2. One optimizer step of ADRPO's loss at the recipe's full lengths (--prompt-length 20,000,
   --completion-length 6,000) on token ids drawn at random: the pass whose peak memory the
   estimate (membuilder/training/memory_estimate.py) predicts.

A random model rarely emits its stop token, so it generates to the length limit: the figures are
those of completions at full length. Results go to --out (bench/results/gpu_check.json) and a
Markdown table beside it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs/train/adrpo_qwen3_4b_colocate.yaml"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=["small", "4b"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--layers", type=int, help="4b: keep this many layers (a cut-down check)")
    ap.add_argument("--hidden", type=int, help="4b: hidden size cut down (heads, head width and vocabulary stay)")
    ap.add_argument("--intermediate", type=int, help="4b: MLP width cut down (default 3.8 x hidden when --hidden)")
    ap.add_argument("--prompt-length", type=int, help="4b: prompt tokens of the full-length loss step "
                    "(default: the recipe's max_prompt_tokens)")
    ap.add_argument("--completion-length", type=int, help="4b: completion tokens of the full-length loss step "
                    "(default: the recipe's max_completion_length)")
    ap.add_argument("--steps-prompt-length", type=int, help="4b: prompt tokens of the end-to-end steps "
                    "(default: the smaller of 1024 and --prompt-length)")
    ap.add_argument("--steps-completion-length", type=int, help="4b: completion tokens of the end-to-end steps "
                    "(default: the smaller of 256 and --completion-length)")
    ap.add_argument("--generations", type=int, help="4b: G, cut down for a CPU check (default: the recipe's)")
    ap.add_argument("--micro-batch", type=int, help="4b: per_device_train_batch_size, cut down for a CPU check")
    ap.add_argument("--accumulation", type=int, help="4b: gradient_accumulation_steps, cut down for a CPU check")
    ap.add_argument("--steps", type=int, default=2, help="4b: optimizer steps of GRPO and of ADRPO each")
    ap.add_argument("--runs", default="grpo,adrpo", help="4b: which end-to-end runs, comma-separated (grpo, adrpo)")
    ap.add_argument("--no-full-step", action="store_true", help="4b: skip the full-length loss step")
    ap.add_argument("--out", help="4b: where the JSON goes (default bench/results/gpu_check.json)")
    opt = ap.parse_args(argv)
    if opt.size == "4b":
        return run_4b(opt)
    if any(getattr(opt, k) is not None for k in ("layers", "hidden", "intermediate", "prompt_length",
                                                  "completion_length", "steps_prompt_length",
                                                  "steps_completion_length", "generations", "micro_batch",
                                                  "accumulation", "out")) or opt.no_full_step or opt.steps != 2 \
            or opt.runs != "grpo,adrpo":
        ap.error("the cut-downs, lengths, --steps, --runs, --no-full-step and --out belong to --size 4b")
    small(opt)


def small(opt) -> None:
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    from membuilder.training.adrpo import ADRPOConfig, ADRPOTrainer, GRPOTrainer
    from membuilder.training.format_scorer import FormatScorer
    from membuilder.training.prompts import rl_rows, token_counter
    from membuilder.training.sft import build_sft_trainer
    from membuilder.training.tiny import byte_tokenizer, tiny_qwen3

    gpu = opt.device == "cuda"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible; run with --device cpu for the CPU check")
    use_vllm = gpu and not opt.no_vllm and importlib.util.find_spec("vllm") is not None
    work = Path(tempfile.mkdtemp(prefix="memgym-gpu-check-"))
    tok = byte_tokenizer()
    tiny_qwen3(tok).save_pretrained(work / "model")  # a local path, so vLLM and the KL reference can load it
    tok.save_pretrained(work / "model")
    common = dict(use_cpu=not gpu, bf16=gpu, gradient_checkpointing=False, report_to="none", logging_steps=1,
                  save_strategy="no", max_steps=3, seed=0)
    print(f"device={torch.cuda.get_device_name(0) if gpu else 'cpu'} vllm={use_vllm} torch={torch.__version__}")

    from transformers import AutoModelForCausalLM

    def load():
        return AutoModelForCausalLM.from_pretrained(work / "model", dtype=torch.bfloat16 if gpu else torch.float32)

    scorer = FormatScorer.from_texts({f"s{i}": f"user: note number {i}: I moved to a new city." for i in range(4)})
    sft_rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": '{"operations": []}'}]}] * 8
    sft = build_sft_trainer(load(), tok, Dataset.from_list(sft_rows),
                            SFTConfig(output_dir=str(work / "sft"), per_device_train_batch_size=4,
                                      assistant_only_loss=True, **common))
    started = time.perf_counter()
    sft.train()
    print(f"SFT: 3 steps in {time.perf_counter() - started:.2f}s, loss {sft.state.log_history[-2]['loss']}")

    rows = Dataset.from_list(rl_rows(scorer.session_keys(), scorer.observation, token_counter(tok), 1024))
    times = {}
    # The format scorer attributes nothing (every weight is 1), so both runs take the same
    # steps: the difference is the cost of ADRPO's weighting itself.
    for name in ("grpo", "adrpo"):
        args = ADRPOConfig(output_dir=str(work / name), per_device_train_batch_size=8, num_generations=2,
                           max_completion_length=64, temperature=0.8, top_p=0.9, beta=0.02,
                           use_vllm=use_vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=0.2, **common)
        trainer = ADRPOTrainer(model=load(), args=args, scorer=scorer, train_dataset=rows, processing_class=tok)
        started = time.perf_counter()
        trainer.train()
        times[name] = (time.perf_counter() - started) / 3
        print(f"{name}: {times[name]:.2f}s/step, metrics {dict((k, round(v, 4)) for k, v in trainer.state.log_history[-2].items() if k.startswith(('reward', 'adrpo', 'time')))}")
    # The same batch through both losses: the ADRPO weighting costs one multiply.
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    for name, fn in (("grpo", lambda: GRPOTrainer._compute_loss(trainer, trainer.model, batch)),
                     ("adrpo", lambda: trainer._compute_loss(trainer.model, batch))):
        started = time.perf_counter()
        fn().backward()
        if gpu:
            torch.cuda.synchronize()
        print(f"same batch, {name} loss+backward: {time.perf_counter() - started:.4f}s")
    print(f"ADRPO / GRPO step time: {times['adrpo'] / times['grpo']:.3f}")


# ---- --size 4b ------------------------------------------------------------------------------------

FILLER = "user: we moved to a small town by the coast last spring, and I started a new job at the library. "


def _prompts(tok, target: int, sessions: int):
    """A format scorer whose sessions make the longest agent prompt about ``target`` tokens (a byte
    tokenizer: one token a byte); the instructions alone set the floor."""
    from membuilder.agents.constructor import render_prompt
    from membuilder.memory.ops import AGENTS
    from membuilder.training.format_scorer import FormatScorer
    from membuilder.training.prompts import token_counter

    count = token_counter(tok)
    empty = FormatScorer.from_texts({"s": ""})
    floor = max(count(render_prompt(a, empty.observation("s"))) for a in AGENTS)
    text = (FILLER * (target // len(FILLER) + 1))[:max(0, target - floor)]
    scorer = FormatScorer.from_texts({f"s{i}": f"{i} {text}"[:len(text)] for i in range(sessions)})
    return scorer, floor


def _timed(cls):
    """``cls`` with each rollout timed (generation incl. the reference log-probs; scoring) and its tokens counted."""

    class Timed(cls):
        rollouts: list

        def _generate_and_score_completions(self, inputs):
            _sync()
            started = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            _sync()
            elapsed = time.perf_counter() - started
            score = self.timed_reward.last_stat_totals.get("time/score", (0.0, 1))[0]
            self.rollouts.append({"seconds": elapsed, "score_s": score, "generate_s": max(0.0, elapsed - score),
                                  "completion_tokens": int(out["completion_mask"].sum().item()),
                                  "completion_width": int(out["completion_ids"].shape[1]),
                                  "prompt_width": int(out["prompt_ids"].shape[1]),
                                  "rows": int(out["completion_ids"].shape[0]),
                                  "stopped_early": int((out["completion_mask"].sum(1) <
                                                        out["completion_ids"].shape[1]).sum().item())})
            return out

    return Timed


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _memory(gpu: bool) -> dict:
    import torch

    if not gpu:
        return {}
    return {"max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2),
            "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 2)}


def _reset(gpu: bool) -> None:
    import gc

    import torch

    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _full_length_step(trainer, prompt: int, completion: int, gpu: bool, adrpo: bool) -> dict:
    """One optimizer step of the trainer's own loss over a generation batch at full length: random byte
    ids, every row a completion of ``completion`` tokens (as a random model writes), G rows a prompt."""
    import math

    import torch
    from trl.trainer.utils import split_tensor_dict

    args, device = trainer.args, trainer.accelerator.device
    steps, g = args.gradient_accumulation_steps, args.num_generations
    rows = args.per_device_train_batch_size * steps
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 259, (math.ceil(rows / g), prompt), generator=gen).repeat_interleave(g, 0)[:rows]
    batch = {"prompt_ids": prompts, "prompt_mask": torch.ones_like(prompts),
             "completion_ids": torch.randint(3, 259, (rows, completion), generator=gen),
             "completion_mask": torch.ones(rows, completion, dtype=torch.long),
             "advantages": torch.randn(rows, generator=gen),
             "num_items_in_batch": torch.tensor(float(rows * completion))}
    if args.beta:  # a random model's next-token distribution is near uniform
        batch["ref_per_token_logps"] = torch.full((rows, completion), -math.log(trainer.model.config.vocab_size))
    if adrpo:
        batch["adrpo_weights"] = torch.ones(rows)
    batch = {k: v.to(device) for k, v in batch.items()}
    model = trainer.model_wrapped
    model.train()
    trainer.current_gradient_accumulation_steps = steps
    _reset(gpu)
    _sync()
    started = time.perf_counter()
    for micro in split_tensor_dict(batch, steps):
        micro["num_items_in_batch"] = batch["num_items_in_batch"]
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, micro)
        trainer.accelerator.backward(loss)
        del loss
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    _sync()
    seconds = time.perf_counter() - started
    tokens = rows * completion + (rows // g if adrpo and args.share_prompt else rows) * prompt
    return {"prompt_tokens": prompt, "completion_tokens": completion, "rows": rows, "micro_batches": steps,
            "seconds": round(seconds, 2), "loss_pass_tokens_per_s": round(tokens / seconds, 1),
            **_memory(gpu)}


def run_4b(opt) -> dict:
    import importlib.metadata as meta
    import json
    import platform

    import torch
    import yaml
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer as StockGRPOTrainer

    from membuilder.training.adrpo import ADRPOConfig, ADRPOTrainer
    from membuilder.training.memory_estimate import ModelShape, RunShape, estimate
    from membuilder.training.prompts import rl_rows, token_counter
    from membuilder.training.tiny import QWEN3_SIZES, byte_tokenizer, qwen3_config, random_qwen3
    from membuilder.training.trl_reward import SessionReward

    gpu = opt.device == "cuda"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible; run with --device cpu for the CPU check")
    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    bf16 = gpu and bool(recipe.get("bf16"))
    dtype = torch.bfloat16 if bf16 else torch.float32
    prompt_len = opt.prompt_length or int(recipe["max_prompt_tokens"])
    completion_len = opt.completion_length or int(recipe["max_completion_length"])
    steps_prompt = opt.steps_prompt_length or min(1024, prompt_len)
    steps_completion = opt.steps_completion_length or min(256, completion_len)
    use_vllm = gpu and not opt.no_vllm and importlib.util.find_spec("vllm") is not None
    generation = "vLLM colocate" if use_vllm else (
        "transformers (vLLM not installed)" if importlib.util.find_spec("vllm") is None else "transformers (--no-vllm)")
    device_name = torch.cuda.get_device_name(0) if gpu else f"cpu ({platform.processor() or platform.machine()})"
    started_all = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="memgym-gpu-check-4b-"))
    tok = byte_tokenizer(QWEN3_SIZES["4b"]["vocab_size"])
    intermediate = opt.intermediate or (int(opt.hidden * 3.8) if opt.hidden else None)
    config = qwen3_config(tok, "4b", layers=opt.layers, hidden=opt.hidden, intermediate=intermediate)
    built = time.perf_counter()
    model = random_qwen3(config, dtype=dtype, device="cuda" if gpu else "cpu")
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(work / "model")  # a local path: TRL loads the KL reference (and vLLM the policy) from it
    tok.save_pretrained(work / "model")
    del model
    build_s = time.perf_counter() - built
    print(f"device={device_name} generation={generation} torch={torch.__version__} params={params / 1e9:.3f}B "
          f"layers={config.num_hidden_layers} hidden={config.hidden_size} vocab={config.vocab_size} "
          f"dtype={dtype} (built and saved in {build_s:.1f}s)")

    settings = {k: recipe[k] for k in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                                       "temperature", "top_p", "beta", "epsilon", "learning_rate",
                                       "gradient_checkpointing")}
    for key, value in (("num_generations", opt.generations), ("per_device_train_batch_size", opt.micro_batch),
                       ("gradient_accumulation_steps", opt.accumulation)):
        if value is not None:
            settings[key] = value
    sessions = max(1, opt.steps * settings["per_device_train_batch_size"] * settings["gradient_accumulation_steps"]
                   // (4 * settings["num_generations"]))
    scorer, floor = _prompts(tok, steps_prompt, sessions=sessions)
    rows = Dataset.from_list(rl_rows(scorer.session_keys(), scorer.observation, token_counter(tok), None))
    common = dict(use_cpu=not gpu, bf16=bf16, report_to="none", logging_steps=1, save_strategy="no",
                  max_steps=opt.steps, seed=0, max_completion_length=steps_completion, use_vllm=use_vllm,
                  vllm_mode="colocate", vllm_gpu_memory_utilization=recipe["vllm_gpu_memory_utilization"],
                  **settings)

    def load():
        return AutoModelForCausalLM.from_pretrained(work / "model", dtype=dtype)

    class StepClock(TrainerCallback):
        def __init__(self):
            self.seconds, self._t = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            _sync()
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            _sync()
            self.seconds.append(time.perf_counter() - self._t)

    runs = [r.strip() for r in opt.runs.split(",") if r.strip()]
    if not runs or set(runs) - {"grpo", "adrpo"}:
        raise SystemExit(f"--runs {opt.runs!r}: name grpo and/or adrpo")
    results: dict = {}
    for name in runs:
        _reset(gpu)
        # the stock sampler in order keeps a session's four agent rows in one batch, as the reward needs
        args = ADRPOConfig(output_dir=str(work / name), shuffle_dataset=name == "adrpo", **common)
        clock = StepClock()
        if name == "grpo":  # the stock trainer with the same reward (train/grpo_plain_trl.py)
            reward = SessionReward(scorer, seed=0)
            trainer = _timed(StockGRPOTrainer)(model=load(), args=args, reward_funcs=reward, train_dataset=rows,
                                               processing_class=tok, callbacks=[clock])
        else:
            trainer = _timed(ADRPOTrainer)(model=load(), args=args, scorer=scorer, train_dataset=rows,
                                           processing_class=tok, callbacks=[clock])
            reward = trainer.session_reward
        trainer.timed_reward, trainer.rollouts = reward, []
        trainer.train()
        steps = []
        for seconds, roll in zip(clock.seconds, trainer.rollouts, strict=False):
            optimise = max(0.0, seconds - roll["seconds"])
            steps.append({"step_s": round(seconds, 2), "generate_s": round(roll["generate_s"], 2),
                          "score_s": round(roll["score_s"], 3), "optimise_s": round(optimise, 2),
                          "generated_tokens_per_s": round(roll["completion_tokens"] / max(roll["generate_s"], 1e-9), 1),
                          "completion_tokens": roll["completion_tokens"], "rows": roll["rows"],
                          "prompt_width": roll["prompt_width"], "completion_width": roll["completion_width"],
                          "rows_stopped_early": roll["stopped_early"]})
        results[name] = {"steps": steps, **_memory(gpu)}
        print(f"{name}: {json.dumps(steps)} {_memory(gpu)}")
        if name == "adrpo" and not opt.no_full_step:
            full = _full_length_step(trainer, prompt_len, completion_len, gpu, adrpo=True)
            results["adrpo_full_length_step"] = full
            print(f"adrpo full-length loss step: {full}")
        del trainer
    shape = ModelShape.from_config(config)
    run = RunShape(micro_batch=settings["per_device_train_batch_size"], completion_tokens=completion_len,
                   prompt_tokens=prompt_len, generations=settings["num_generations"], beta=settings["beta"],
                   share_prompt=True, gradient_checkpointing=settings["gradient_checkpointing"],
                   precision="bf16" if bf16 else "fp32")
    est = estimate(shape, run, torch.cuda.get_device_properties(0).total_memory if gpu else None)
    full = results.get("adrpo_full_length_step", {})
    report = {
        "device": device_name, "torch": torch.__version__, "transformers": meta.version("transformers"),
        "trl": meta.version("trl"), "generation": generation, "recipe": str(RECIPE.relative_to(ROOT)),
        "model": {"architecture": "Qwen3ForCausalLM, random weights", "params": params,
                  "layers": config.num_hidden_layers, "hidden": config.hidden_size,
                  "intermediate": config.intermediate_size, "heads": config.num_attention_heads,
                  "kv_heads": config.num_key_value_heads, "head_dim": config.head_dim, "vocab": config.vocab_size,
                  "dtype": str(dtype).removeprefix("torch."), "cut_down": bool(opt.layers or opt.hidden)},
        "settings": {**settings, "steps_prompt_tokens": steps_prompt, "prompt_instruction_floor": floor,
                     "steps_completion_tokens": steps_completion, "full_prompt_tokens": prompt_len,
                     "full_completion_tokens": completion_len, "optimizer_steps_each": opt.steps},
        "note": ("A random model rarely emits its stop token, so it generates to the length limit "
                 "(rows_stopped_early counts the exceptions): these are the figures of full-length completions. "
                 + ("Generation ran in transformers, without vLLM's paged KV cache, prefix sharing and batched "
                    "decoding kernels: its time is not vLLM's (expect it several times slower), and the end-to-end "
                    "steps ran at the shorter steps_* lengths for that reason. " if not use_vllm else "")
                 + "The full-length step is one optimizer step of ADRPO's loss on random ids at the recipe's lengths; "
                   "its peak is what the estimate predicts (minus the vLLM share, as no vLLM runs here)."),
        **results,
        "memory_estimate_full_length_step": est.as_dict(),
        "estimate_vs_measured": ({"estimate_gib": round(est.total / 2 ** 30, 2),
                                  "measured_max_allocated_gib": full["max_allocated_gib"],
                                  "ratio": round(est.total / 2 ** 30 / full["max_allocated_gib"], 3)}
                                 if "max_allocated_gib" in full else None),
        "wall_s": round(time.perf_counter() - started_all, 1),
    }
    out = Path(opt.out) if opt.out else ROOT / "bench/results/gpu_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(_table(report), encoding="utf-8")
    print(_table(report))
    print(f"wrote {out} and {out.with_suffix('.md')} in {report['wall_s']}s")
    return report


def _table(report: dict) -> str:
    lines = [f"# gpu_check --size 4b on {report['device']}", "",
             f"Generation: {report['generation']}. {report['note']}", "",
             "| run | step | step s | generate s | score s | optimise s | generated tok/s | completion tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("grpo", "adrpo"):
        for i, s in enumerate(report.get(name, {}).get("steps", []), 1):
            lines.append(f"| {name} | {i} | {s['step_s']} | {s['generate_s']} | {s['score_s']} | {s['optimise_s']} | "
                         f"{s['generated_tokens_per_s']} | {s['completion_tokens']} |")
    full = report.get("adrpo_full_length_step")
    if full:
        lines += ["", f"Full-length ADRPO step ({full['prompt_tokens']}-token prompts, {full['completion_tokens']}-token "
                      f"completions, {full['rows']} rows in {full['micro_batches']} micro-batches): {full['seconds']} s, "
                      f"{full['loss_pass_tokens_per_s']} loss-pass tokens/s."]
    est = report["memory_estimate_full_length_step"]["gib"]
    lines += ["", "| peak memory | GiB |", "|---|---|"]
    for name in ("grpo", "adrpo"):
        if "max_allocated_gib" in report.get(name, {}):
            lines.append(f"| {name} steps: max allocated / reserved | {report[name]['max_allocated_gib']} / "
                         f"{report[name]['max_reserved_gib']} |")
    if full and "max_allocated_gib" in full:
        lines.append(f"| full-length step: max allocated / reserved | {full['max_allocated_gib']} / "
                     f"{full['max_reserved_gib']} |")
    lines.append(f"| full-length step: estimate | {est['total']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
