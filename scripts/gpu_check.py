"""GPU smoke check, offline: a small random Qwen3-architecture model, 3 SFT steps and 3 ADRPO steps.

    python scripts/gpu_check.py                 # bf16 on cuda:0; uses vLLM (colocate) when installed
    python scripts/gpu_check.py --device cpu    # the same mechanics on a CPU, float32

Prints the step times of ADRPO versus plain GRPO (alpha 1) on the same batch. Rewards come from
the format-only scorer (validity and length), so nothing outside the machine is needed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--no-vllm", action="store_true")
    opt = ap.parse_args()
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


if __name__ == "__main__":
    main()
