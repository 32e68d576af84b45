"""The merged weights a LoRA policy sends to vLLM (``membuilder.training.merged_weights``): the
plain model's names, W + delta rounded once, and the trainer's base weights never written."""

from __future__ import annotations

import pytest
import torch

from membuilder.training.merged_weights import install_exact_lora_sync, merged_named_params
from membuilder.training.tiny import byte_tokenizer, tiny_llama


@pytest.fixture
def policy():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    plain_names = [n for n, _ in tiny_llama(byte_tokenizer()).named_parameters()]
    model = tiny_llama(byte_tokenizer()).to(torch.bfloat16)
    # random B as well as A: a trained adapter, whose delta is not zero
    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                            init_lora_weights=False)), plain_names


def test_merged_weights_carry_the_plain_names_and_leave_the_base_alone(policy):
    model, plain_names = policy
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    for _ in range(5):  # five syncs
        sent = dict(merged_named_params(model))
    assert sorted(sent) == sorted(plain_names)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)
    assert all(t.dtype == torch.bfloat16 for t in sent.values())


def test_a_merged_weight_is_the_float32_sum_rounded_once(policy):
    model, _ = policy
    sent = dict(merged_named_params(model))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    a, b = layer.lora_A["default"].weight.float(), layer.lora_B["default"].weight.float()
    exact = layer.base_layer.weight.float() + (b @ a) * layer.scaling["default"]
    got = sent["model.layers.0.self_attn.q_proj.weight"].float()
    assert not torch.equal(got, layer.base_layer.weight.float())  # the adapter is in it
    # within one bfloat16 rounding of the exact sum (8 bits of mantissa: half a step is 2^-8 relative)
    assert torch.all((got - exact).abs() <= exact.abs() * 2 ** -7 + 1e-6)
    # a weight no adapter wraps goes as it is
    assert torch.equal(sent["model.norm.weight"], model.base_model.model.model.norm.weight)


def test_only_an_unsharded_peft_policy_gets_the_exact_sync(policy):
    model, _ = policy

    class Generation:  # the fields of TRL's VLLMGeneration that the install reads
        def __init__(self, model, fsdp=False):
            self.model = model
            self._dist = type("Dist", (), {"is_fsdp": fsdp, "is_zero3": False})()

        def _fix_param_name_to_vllm(self, name, extra_prefixes=None):
            return name

    plain = Generation(model.base_model.model)
    assert not install_exact_lora_sync(plain) and not hasattr(plain, "_iter_named_params")
    assert not install_exact_lora_sync(Generation(model, fsdp=True))
    peft = Generation(model)
    assert install_exact_lora_sync(peft)
    assert dict(peft._iter_named_params()).keys() == dict(merged_named_params(model)).keys()
