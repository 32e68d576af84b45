"""LoRA on a bfloat16 base (``dtype: auto`` on CPUs with bf16 hardware) trains as float32 does."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
torch.set_num_threads(1)

from membuilder.training.sft import build_sft_trainer, lora_config  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402
from train.common import policy_dtype  # noqa: E402

ROWS = [{"messages": [{"role": "user", "content": f"Remember fact {i}."},
                      {"role": "assistant", "content": '{"operation": "APPEND", "content": "fact ' + str(i) + '"}'}]}
        for i in range(8)]


def sft_losses(dtype, tmp_path) -> tuple[list[float], object]:
    from datasets import Dataset
    from trl import SFTConfig

    tok = byte_tokenizer()
    model = tiny_llama(tok, hidden=64).to(dtype)
    args = SFTConfig(output_dir=str(tmp_path / str(dtype)), max_steps=30, per_device_train_batch_size=8,
                     learning_rate=1e-2, logging_steps=1, use_cpu=True, bf16=False, gradient_checkpointing=False,
                     report_to="none", save_strategy="no", assistant_only_loss=True, seed=0, lr_scheduler_type="constant")
    trainer = build_sft_trainer(model, tok, Dataset.from_list(ROWS), args, peft_config=lora_config(r=8, alpha=16))
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h], trainer.model


def test_lora_on_a_bf16_base_keeps_fp32_adapters_and_learns_like_fp32(tmp_path):
    bf16_losses, model = sft_losses(torch.bfloat16, tmp_path)
    base = [p for n, p in model.named_parameters() if "lora_" not in n]
    adapters = [p for n, p in model.named_parameters() if "lora_" in n]
    assert base and all(p.dtype == torch.bfloat16 and not p.requires_grad for p in base)
    assert adapters and all(p.dtype == torch.float32 and p.requires_grad for p in adapters)  # updates not rounded away
    fp32_losses, _ = sft_losses(torch.float32, tmp_path)
    assert bf16_losses[-1] < 0.9 * bf16_losses[0]  # 5.59 -> 4.61 here
    # Same data, seed and steps: the bf16 run ends within 5% of the float32 run's loss (4.606 vs 4.609 here).
    assert abs(bf16_losses[-1] - fp32_losses[-1]) <= 0.05 * fp32_losses[-1]


def test_auto_dtype_is_bf16_only_for_a_frozen_base_on_bf16_hardware():
    from membuilder.llm.transformers_backend import cpu_bf16_is_fast

    if torch.cuda.is_available():
        pytest.skip("on a GPU auto is bfloat16 either way")
    frozen = torch.bfloat16 if cpu_bf16_is_fast() else torch.float32
    assert policy_dtype("auto", frozen_base=True) == frozen
    assert policy_dtype(None, frozen_base=True) == frozen
    assert policy_dtype("auto", frozen_base=False) == torch.float32  # full fine-tuning keeps fp32 weights
    assert policy_dtype("float32", frozen_base=True) == torch.float32  # an explicit dtype wins
