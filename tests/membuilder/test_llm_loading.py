"""The one model loader: a checkpoint's weights all arrive, a skipped embedding tie is repaired."""

from __future__ import annotations

import pytest
import torch

from membuilder.llm.loading import ensure_loaded, load_causal_lm, meta_parameters


def test_a_tied_checkpoint_loads_with_its_output_layer_tied(tiny_chat_path):
    model = load_causal_lm(tiny_chat_path, dtype=torch.float32)
    assert meta_parameters(model) == []
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_an_output_layer_left_on_meta_is_tied_again(tiny_chat_path, caplog):
    model = load_causal_lm(tiny_chat_path, dtype=torch.float32)
    # what a skipped tie leaves: lm_head a parameter of its own with no data
    model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.lm_head.weight, device="meta"))
    assert meta_parameters(model) == ["lm_head.weight"]
    with caplog.at_level("WARNING"):
        ensure_loaded(model, tiny_chat_path)
    assert meta_parameters(model) == [] and model.lm_head.weight is model.model.embed_tokens.weight
    assert "tied it to the embeddings again" in caplog.text
    model.to("cpu")  # what failed before: copying out of a meta tensor


def test_an_untied_gap_is_an_error_naming_the_checkpoint_and_weight(tiny_chat_path):
    model = load_causal_lm(tiny_chat_path, dtype=torch.float32)
    layer = model.model.layers[0].mlp.up_proj
    layer.weight = torch.nn.Parameter(torch.empty_like(layer.weight, device="meta"))
    with pytest.raises(RuntimeError, match=r"checkpoint /.*model: 1 weight\(s\).*layers\.0\.mlp\.up_proj\.weight"):
        ensure_loaded(model, tiny_chat_path)


def test_a_tie_weights_stand_in_left_on_the_class_is_replaced_before_the_next_load(tiny_chat_path, caplog):
    from transformers import PreTrainedModel

    genuine = PreTrainedModel.__dict__["tie_weights"]
    load_causal_lm(tiny_chat_path, dtype=torch.float32)  # a first load remembers transformers' own tie_weights

    def empty_func(*args, **kwargs):  # what transformers' no_tie_weights puts on the class while building
        pass

    # the end state of two builds that raced in two threads: the stand-in restored last
    PreTrainedModel.tie_weights = empty_func
    try:
        with caplog.at_level("WARNING"):
            model = load_causal_lm(tiny_chat_path, dtype=torch.float32)
    finally:
        stayed = PreTrainedModel.__dict__["tie_weights"]
        PreTrainedModel.tie_weights = genuine
    assert stayed is genuine and "transformers' own tie_weights is back" in caplog.text
    assert model.lm_head.weight is model.model.embed_tokens.weight
