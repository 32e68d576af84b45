"""Every training config parses into the entry point's dataclasses; vLLM configs fail clearly without vLLM."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl import ModelConfig, SFTConfig, TrlParser  # noqa: E402

from membuilder.training.adrpo import ADRPOConfig  # noqa: E402
from train.adrpo import ADRPOScriptArgs  # noqa: E402
from train.common import parse_users, require_vllm  # noqa: E402
from train.ladder import LadderArgs  # noqa: E402
from train.sft import SFTScriptArgs  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "train"


def _parse(name: str):
    if name.startswith("ladder"):
        return TrlParser((LadderArgs,)).parse_args_and_config(["--config", str(CONFIGS / name)])
    kind = (ADRPOScriptArgs, ADRPOConfig, ModelConfig) if name.startswith("adrpo") else (SFTScriptArgs, SFTConfig, ModelConfig)
    # GPU configs ask for bf16, which TrainingArguments refuses on a CPU-only torch: override just that here
    cpu = [] if "cpu" in name else ["--bf16", "false", "--use_cpu", "true", "--gradient_checkpointing", "false"]
    return TrlParser(kind).parse_args_and_config(["--config", str(CONFIGS / name), *cpu])


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_config_parses(name):
    if name.startswith("ladder"):
        (ladder,) = _parse(name)
        assert len(ladder.seeds) >= 2
        assert not set(parse_users(ladder.train_users)) & set(parse_users(ladder.held_out_users))
        for stage in (ladder.sft_config, ladder.adrpo_config):
            assert (CONFIGS.parents[1] / stage).exists()
        return
    script, args, model = _parse(name)
    assert model.model_name_or_path
    if name.startswith("adrpo"):
        assert args.per_device_train_batch_size * args.steps_per_generation % (4 * args.num_generations) == 0
        if "qwen3" in name:
            assert (args.learning_rate, args.epsilon, args.beta, args.num_generations, args.temperature,
                    args.top_p, args.alpha) == (1e-6, 0.2, 0.02, 8, 0.8, 0.9, 4.0)
            assert args.use_vllm and args.vllm_mode == ("server" if "server" in name else "colocate")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_config_without_vllm_fails_at_start_with_the_fix():
    with pytest.raises(SystemExit, match="use_vllm: false"):
        require_vllm(True)
    require_vllm(False)
