"""The shared-prompt loss pass gives the log-probs and gradients of one pass per row."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from membuilder.training.shared_prefix import prompt_groups, shared_prefix_logps  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402


def _model():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = tiny_llama(byte_tokenizer()).float()
    for p in model.parameters():  # a random but non-degenerate model
        p.data.normal_(0, 0.2)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.1)  # LoRA B starts at zero; give the adapter a say
    return model


def _batch():
    """Two prompts (the second left-padded by 3) with 3 and 2 completions, right-padded, shuffled."""
    g = torch.Generator().manual_seed(1)
    long_p, short_p = torch.randint(3, 250, (9,), generator=g), torch.randint(3, 250, (6,), generator=g)
    rows, masks = [], []
    for prompt, n in ((long_p, 3), (short_p, 2)):
        for k in range(n):
            comp = torch.randint(3, 250, (5,), generator=g)
            cmask = torch.tensor([1] * (5 - k) + [0] * k)
            pad = 9 - len(prompt)
            rows.append(torch.cat([torch.zeros(pad, dtype=torch.long), prompt, comp]))
            masks.append(torch.cat([torch.zeros(pad, dtype=torch.long), torch.ones(len(prompt), dtype=torch.long), cmask]))
    order = [3, 0, 4, 2, 1]
    return torch.stack(rows)[order], torch.stack(masks)[order]


def _reference(model, ids, mask, keep, temperature):
    """One full pass per row, its prompt padding removed (positions from 0, as in generation)."""
    out = []
    for row, m in zip(ids, mask, strict=True):
        start = int((m[:-keep] == 0).sum())
        logits = model(input_ids=row[start:].unsqueeze(0)).logits[0, -keep - 1:-1].float() / temperature
        out.append(torch.log_softmax(logits, -1).gather(-1, row[-keep:].unsqueeze(-1)).squeeze(-1))
    return torch.stack(out)


def test_groups_follow_identical_prompts_whatever_the_order():
    ids, mask = _batch()
    assert prompt_groups(ids[:, :9], mask[:, :9]) == [[0, 2], [1, 3, 4]]


@pytest.mark.parametrize("rows_per_pass", [None, 1, 2])
@pytest.mark.parametrize("batch_padding", [0, 4])
def test_shared_prompt_logps_and_gradients_equal_one_pass_per_row(batch_padding, rows_per_pass):
    """``batch_padding``: completions padded past every group's longest, as a batch whose longest rollout hit
    the length limit pads the others; the pass stops at each group's last real token. ``rows_per_pass``: the
    completions in passes of that many, shortest first, each padded only to its own longest."""
    model = _model()
    ids, mask = _batch()
    ids = torch.cat([ids, ids.new_zeros(ids.size(0), batch_padding)], dim=1)
    mask = torch.cat([mask, mask.new_zeros(mask.size(0), batch_padding)], dim=1)
    keep, temperature = 5 + batch_padding, 0.7
    ref = _reference(model, ids, mask, keep, temperature)
    got, ent = shared_prefix_logps(model, ids, mask, keep, temperature, compute_entropy=True,
                                  rows_per_pass=rows_per_pass)
    cmask = mask[:, -keep:].bool()
    assert got.shape == (5, keep) and torch.allclose(got[cmask], ref[cmask], atol=1e-5)
    assert ent.shape == got.shape and bool((ent[cmask] > 0).all())
    assert not got[~cmask].any() and not ent[~cmask].any()  # padding is never scored

    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    grads = []
    for value in (ref, got):  # the same objective through each computation
        model.zero_grad()
        (value * cmask).sum().backward()
        grads.append([p.grad.clone() for p in lora])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    assert any(float(g.abs().sum()) > 0 for g in grads[1])
