"""The memory estimate's terms on a small shape worked out by hand, and the start check that refuses a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from membuilder.training.memory_estimate import (
    DEVICES,
    GIB,
    DoesNotFit,
    ModelShape,
    RunShape,
    estimate,
    markdown_table,
    require_fit,
    trainer_estimate,
)

ROOT = Path(__file__).resolve().parents[2]
SMALL = ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=300, tied=True)
# per layer: q,k,v,o = 64*16*(2*4 + 2*2) = 12,288; q/k norms 2*16 = 32; MLP 3*64*128 = 24,576; two norms 128
LAYER = 12_288 + 32 + 24_576 + 128
PARAMS = 300 * 64 + 2 * LAYER + 64        # tied embedding, two layers, final norm: 93,312


def test_parameter_count_matches_a_real_qwen3_of_that_shape():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, intermediate_size=128, vocab_size=300, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    assert SMALL.params() == PARAMS == 93_312
    assert ModelShape.from_config(config) == SMALL
    assert sum(p.numel() for p in model.parameters()) == PARAMS


def test_terms_of_a_small_rl_run_by_hand():
    run = RunShape(micro_batch=4, completion_tokens=10, prompt_tokens=20, generations=2, beta=0.1, share_prompt=True,
                   gradient_checkpointing=True, precision="bf16", vllm_share=0.5)
    est = estimate(SMALL, run, device_bytes=10 ** 9)
    # 4 rows, G = 2: two distinct prompts of 20 tokens run once, plus 4 completions of 10 -> 80 tokens
    tokens = 2 * 20 + 4 * 10
    per_token_layer = 3 * 64 + 2 * 64 + 2 * 32 + 4 * 128   # norms+o+down, q+attn out, k+v, gate/up/act/product
    assert est.terms == {
        "weights": PARAMS * 2, "gradients": PARAMS * 2, "optimizer": PARAMS * 4,   # bf16 params, grads, 2 states
        "reference model": PARAMS * 2,
        "layer checkpoints": tokens * 64 * 2 * 2,             # one bf16 hidden state per token per layer
        "one layer recomputed": tokens * per_token_layer * 2,
        "shared prompt cache": 4 * 20 * (2 * 2 * 2 * 16) * 2,  # rows x prompt x (layers x k,v x kv heads x dim) x bf16
        "logits": 4 * 10 * 300 * 12,                          # completion tokens x vocab x 12 bytes
        "vllm (colocated)": 500_000_000,
    }
    assert est.total == sum(est.terms.values()) and est.fits()


def test_sharding_splits_states_and_adds_a_gathered_block():
    run = RunShape(micro_batch=1, completion_tokens=0, prompt_tokens=100, precision="zero3", processes=4,
                   gradient_checkpointing=False)
    est = estimate(SMALL, run)
    assert est.terms["weights"] == PARAMS * 2 // 4
    assert est.terms["optimizer"] == PARAMS * 12 // 4       # fp32 master weights + two fp32 states
    assert est.terms["gathered block"] == LAYER * 2          # the largest block: a layer, here above the embedding
    assert est.terms["layer activations"] == 100 * (3 * 64 + 2 * 64 + 2 * 32 + 4 * 128) * 2 * 2
    assert "reference model" not in est.terms and est.terms["logits"] == 100 * 300 * 12


def test_a_config_that_cannot_fit_is_refused_with_its_estimate():
    fields = yaml.safe_load((ROOT / "configs/train/adrpo_qwen3_4b_colocate.yaml").read_text())
    shape = ModelShape(hidden=2560, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=9728, vocab=151_936)
    run = RunShape.from_config(fields)
    assert run.micro_batch == 2 and run.prompt_tokens == 20_000 and run.completion_tokens == 6_000
    # gradient checkpointing drops the prompt's cache, so the loss runs TRL's own pass: no shared prompt
    assert run.vllm_share == 0.3 and not run.share_prompt and run.beta == 0.02
    on_80 = estimate(shape, run, DEVICES["80 GB card (H100/A100)"])
    with pytest.raises(DoesNotFit) as refused:
        require_fit(on_80, "adrpo_qwen3_4b_colocate")
    message = str(refused.value)
    assert "exceeds" in message and "logits" in message and f"{on_80.total / GIB:.1f} GiB" in message
    # a quarter of the lengths fits the same card
    short = RunShape.from_config({**fields, "max_prompt_tokens": 5000, "max_completion_length": 1500})
    require_fit(estimate(shape, short, DEVICES["80 GB card (H100/A100)"]), "short")


def test_the_readme_table_is_the_functions_output():
    table = markdown_table(str(ROOT))
    assert table.count("\n") == 1 + 2 * 3                    # header, rule, 3 recipes x 2 devices
    readme = (ROOT / "train/README.md").read_text(encoding="utf-8")
    assert table in readme, "train/README.md's memory table is stale: paste `python -m membuilder.training.memory_estimate`"


def test_trainer_estimate_reads_a_real_trainer(tmp_path):
    from datasets import Dataset

    from membuilder.training.adrpo import ADRPOConfig, ADRPOTrainer
    from membuilder.training.format_scorer import FormatScorer
    from membuilder.training.prompts import rl_rows, token_counter
    from membuilder.training.tiny import byte_tokenizer, tiny_qwen3
    from train.common import check_memory

    tok = byte_tokenizer()
    scorer = FormatScorer.from_texts({"s0": "user: hi"})
    rows = Dataset.from_list(rl_rows(scorer.session_keys(), scorer.observation, token_counter(tok), None))
    args = ADRPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, num_generations=2,
                       max_completion_length=32, max_prompt_tokens=900, beta=0.0, report_to="none")
    model = tiny_qwen3(tok, hidden=64, layers=2)
    trainer = ADRPOTrainer(model=model, args=args, scorer=scorer, train_dataset=rows, processing_class=tok)
    est = trainer_estimate(trainer, device_bytes=10 ** 6)
    params = sum(p.numel() for p in model.parameters())
    assert est.notes["params"] == params
    assert est.terms["weights"] == params * 4 and est.terms["optimizer"] == params * 8   # fp32 on a CPU
    assert est.terms["logits"] == 8 * 32 * len(tok) * 12 and "reference model" not in est.terms
    assert not est.fits()   # a megabyte holds none of it, yet on a CPU the start check lets the run go
    check_memory(trainer)
