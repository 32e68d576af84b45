"""The trained MemBuilder policy shipped in the package: `smollm2-135m-memgym` resolves to SmolLM2
plus the packaged LoRA adapter merged into one checkpoint, rebuilt when the adapter changes, and
the commands write MemBuilder's memory with it unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from membuilder.llm.checkpoints import MARKER, adapter_digest, policy_dir, trained_policy_checkpoint
from membuilder.llm.registry import (
    SMOLLM2_NAMES,
    TRAINED_POLICY,
    constructor_spec,
    parse_spec,
    resolve_chat_path,
)
from memgym_env.cli import build_parser

pytestmark = pytest.mark.slow


def tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def lora_deltas(adapter: Path) -> dict:
    """Base weight name -> B @ A * scale, in float32, from an adapter folder's files alone."""
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    weights = {k: v.float() for k, v in tensors(adapter / "adapter_model.safetensors").items()}
    out = {}
    for key, a in weights.items():
        if ".lora_A." not in key:
            continue
        b = weights[key.replace(".lora_A.", ".lora_B.")]
        r = a.shape[0]
        scale = cfg["lora_alpha"] / (r ** 0.5 if cfg.get("use_rslora") else r)
        name = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        out[name] = (b @ a) * scale
    return out


def assert_merged_is_base_plus_delta(merged: Path, base: Path, adapter: Path) -> None:
    import torch

    merged_w, base_w, deltas = tensors(merged / "model.safetensors"), tensors(base / "model.safetensors"), lora_deltas(adapter)
    assert deltas and set(deltas) <= set(base_w)
    assert set(merged_w) == set(base_w)
    for name in sorted(deltas)[:3] + sorted(deltas)[-1:]:  # a few adapted linear layers, first and last
        expect = base_w[name].float() + deltas[name]
        assert not torch.equal(merged_w[name].float(), base_w[name].float())
        torch.testing.assert_close(merged_w[name].float(), expect, atol=1e-5, rtol=1e-4)
    untouched = [n for n in base_w if n not in deltas]
    assert untouched and all(torch.equal(merged_w[n], base_w[n]) for n in untouched)


@pytest.fixture(scope="module")
def base() -> Path:
    from membuilder.llm.checkpoints import smollm2_checkpoint

    return smollm2_checkpoint()


def write_adapter(base: Path, folder: Path, seed: int) -> Path:
    """A small real LoRA adapter over SmolLM2 (random B, so its delta is not zero), saved in bf16
    as the trained one is."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    peft.to(torch.bfloat16).save_pretrained(str(folder))
    return folder


def test_the_name_resolves_to_base_plus_the_packaged_adapter(base):
    adapter = policy_dir(TRAINED_POLICY)
    merged = Path(resolve_chat_path(TRAINED_POLICY))
    assert merged.name == f"{TRAINED_POLICY}-{adapter_digest(adapter)}" and merged.parent == base.parent
    assert resolve_chat_path(TRAINED_POLICY.upper()) == str(merged)  # short names ignore case
    assert (merged / "chat_template.jinja").is_file() or "chat_template" in (merged / "tokenizer_config.json").read_text()
    assert_merged_is_base_plus_delta(merged, base, adapter)


def test_a_new_adapter_builds_a_new_merge_and_the_same_one_is_reused(base, tmp_path):
    first = write_adapter(base, tmp_path / "adapter", seed=1)
    merged = trained_policy_checkpoint(adapter=first, root=tmp_path / "cache", base=base)
    assert_merged_is_base_plus_delta(merged, base, first)
    built_at = json.loads((merged / MARKER).read_text())["built_at"]
    assert trained_policy_checkpoint(adapter=first, root=tmp_path / "cache", base=base) == merged
    assert json.loads((merged / MARKER).read_text())["built_at"] == built_at  # not built again

    write_adapter(base, first, seed=2)  # the same folder, new weights: as when a retrained adapter ships
    again = trained_policy_checkpoint(adapter=first, root=tmp_path / "cache", base=base)
    assert again != merged and again.parent == merged.parent
    assert not merged.exists()  # the merge of the adapter's earlier version is gone (about 540 MB)
    assert_merged_is_base_plus_delta(again, base, first)


def test_missing_adapter_files_name_the_folder(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError) as missing:
        trained_policy_checkpoint(adapter=tmp_path, root=tmp_path / "cache")
    assert str(tmp_path) in str(missing.value) and "adapter_model.safetensors" in str(missing.value)
    assert "adapter_config.json" not in str(missing.value).split("but")[-1]
    assert not (tmp_path / "cache").exists()


def test_the_trained_name_picks_its_engine_like_smollm2(monkeypatch):
    for engine in ("transformers", "vllm"):
        monkeypatch.setenv("MEMGYM_ENGINE", engine)
        assert parse_spec(TRAINED_POLICY).backend == parse_spec("smollm2-135m").backend == engine
    monkeypatch.delenv("MEMGYM_ENGINE")
    assert parse_spec(TRAINED_POLICY).backend == parse_spec("smollm2-135m").backend


def test_the_trained_policy_constructs_where_the_model_is_smollm2():
    assert TRAINED_POLICY not in SMOLLM2_NAMES
    assert constructor_spec("smollm2-135m") == TRAINED_POLICY
    assert constructor_spec("vllm:smollm2-135m") == f"vllm:{TRAINED_POLICY}"
    assert constructor_spec("smollm2-135m", "smollm2-135m") == "smollm2-135m"
    for other in ("openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1", "/models/qwen3", TRAINED_POLICY):
        assert constructor_spec(other) == other


@pytest.mark.parametrize("argv", [["demo"], ["rollout"], ["evaluate", "--world", "w.json", "--assistant", "membuilder",
                                                            "--out", "runs/x"]])
def test_each_command_defaults_to_the_trained_policy_and_can_pick_the_untrained_one(argv, capsys):
    parser = build_parser()
    assert parser.parse_args(argv).policy_model == TRAINED_POLICY
    assert parser.parse_args([*argv, "--policy-model", "smollm2-135m"]).policy_model == "smollm2-135m"
    with pytest.raises(SystemExit):
        parser.parse_args([argv[0], "--help"])
    assert "--policy-model" in capsys.readouterr().out


def test_membuilder_run_writes_with_the_trained_policy_and_answers_with_the_model(tmp_path):
    from memgym_env.interactive.runner import RunConfig, run_meta

    world = tmp_path / "w.json"
    world.write_text("{}")
    cfg = RunConfig(world=str(world), assistant="membuilder", out=str(tmp_path / "run"))
    assert (cfg.model, cfg.constructor()) == ("smollm2-135m", TRAINED_POLICY)
    assert run_meta(cfg)["constructor"] == TRAINED_POLICY
    assert RunConfig(world=str(world), assistant="rag", out="x").constructor() is None
    assert RunConfig(world=str(world), assistant="membuilder", out="x", model="/m").constructor() == "/m"


def test_membuilder_writes_at_the_output_limit_on_its_policy_card_unless_told_otherwise(tmp_path):
    """The demo's interactive MemBuilder once wrote with the packaged policy at 24 tokens: every JSON
    operation list was cut, the banks stayed empty and 6 of 8 answers were write failures. A packaged
    constructor now writes at its card's limit; other constructors and assistants keep 128."""
    from memgym_env.interactive.runner import RunConfig

    card = json.loads((policy_dir(TRAINED_POLICY) / "card.json").read_text())["setting"]["max_completion_tokens"]
    world = tmp_path / "w.json"
    world.write_text("{}")

    def options(**kw) -> dict:
        return RunConfig(world=str(world), out=str(tmp_path / "run"), **kw).assistant_options()

    assert card == 256 and options(assistant="membuilder")["write_tokens"] == card
    assert options(assistant="membuilder", model="transformers:smollm2-135m")["write_tokens"] == card
    assert options(assistant="membuilder", policy_model="smollm2-135m")["write_tokens"] == 128  # no card
    assert options(assistant="membuilder", write_tokens=40)["write_tokens"] == 40
    assert options(assistant="awe")["write_tokens"] == 128 and "write_tokens" not in options(assistant="rag")
    # `memgym evaluate` leaves the flag unset, so the card decides there too
    args = build_parser().parse_args(["evaluate", "--world", str(world), "--assistant", "membuilder", "--out", "x"])
    assert args.write_tokens is None


def test_each_membuilder_run_is_labelled_with_the_model_that_writes_its_memory():
    from memgym_env.interactive.results import run_label

    trained = {"assistant": "membuilder", "model": "smollm2-135m", "constructor": TRAINED_POLICY}
    untrained = {"assistant": "membuilder", "model": "smollm2-135m", "constructor": "smollm2-135m"}
    assert run_label(trained) == f"membuilder [writes with {TRAINED_POLICY}]"
    assert run_label(untrained) == "membuilder [writes with smollm2-135m]"  # not a bare "membuilder" beside it
    assert run_label({"assistant": "rag", "model": "smollm2-135m", "constructor": None}) == "rag"
