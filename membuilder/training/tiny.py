"""Tiny random models built in memory, for tests of training mechanics and hardware smoke checks.

``byte_tokenizer()`` is a byte-level BPE with no merges (every byte one token) plus the ChatML
special tokens and SmolLM2's ChatML template (no generation markers, like SmolLM2's own).
``tiny_llama(tokenizer)`` and ``tiny_qwen3(tokenizer)`` are randomly initialised causal LMs with
that vocabulary; hidden 64 and two layers by default, so a training step takes milliseconds.
``byte_tokenizer(vocab_size=151_936)`` fills the vocabulary up to a real model's size, and
``qwen3_config(tokenizer, "4b")`` is Qwen3-4B's architecture with that vocabulary: a random model
the size of the published one, for memory and speed checks on machines with no hub access.
"""

from __future__ import annotations

from itertools import product

SMOLLM2_CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_tokenizer(vocab_size: int | None = None):
    """Every byte one token. ``vocab_size`` pads the vocabulary with multi-byte filler tokens that
    encoding never produces (there are no merges) but that decode to bytes, so every id a model of
    that vocabulary samples decodes to text, as with a real tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = SPECIALS + alphabet
    if vocab_size is not None:
        if vocab_size < len(tokens):
            raise ValueError(f"vocab_size {vocab_size} is below the {len(tokens)} byte and special tokens")
        for width in (2, 3):
            tokens += ["".join(chars) for chars in product(alphabet, repeat=width)][:vocab_size - len(tokens)]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|im_start|>", unk_token="<|endoftext|>")
    fast.chat_template = SMOLLM2_CHATML
    fast.padding_side = "left"
    return fast


def _ids(tokenizer) -> dict:
    return dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=tokenizer.bos_token_id)


def tiny_llama(tokenizer, hidden: int = 64, layers: int = 2, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=True, **_ids(tokenizer))
    return LlamaForCausalLM(config)


def tiny_qwen3(tokenizer, hidden: int = 256, layers: int = 4, seed: int = 0):
    """Qwen3's architecture (q/k norms, GQA, SwiGLU), small and random."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=hidden // 8,
                         max_position_embeddings=32768, tie_word_embeddings=True, **_ids(tokenizer))
    return Qwen3ForCausalLM(config)


# Qwen3-4B's config.json (Qwen/Qwen3-4B on the hub; 4.0B parameters, 3.6B of them outside the
# embedding, as its model card states and this architecture counts).
QWEN3_SIZES = {
    "4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=151_936, tie_word_embeddings=True,
               rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=40_960),
}


def qwen3_config(tokenizer, size: str = "4b", layers: int | None = None, hidden: int | None = None,
                 intermediate: int | None = None):
    """A ``Qwen3Config`` of a published size with ``tokenizer``'s special ids. ``layers``, ``hidden`` and
    ``intermediate`` cut it down for checks on small machines; the heads, head width and vocabulary stay."""
    from transformers import Qwen3Config

    if size not in QWEN3_SIZES:
        raise ValueError(f"size {size!r}; known sizes: {sorted(QWEN3_SIZES)}")
    fields = dict(QWEN3_SIZES[size])
    if len(tokenizer) > fields["vocab_size"]:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, more than Qwen3-{size}'s {fields['vocab_size']}")
    for name, value in (("num_hidden_layers", layers), ("hidden_size", hidden), ("intermediate_size", intermediate)):
        if value is not None:
            fields[name] = value
    ids = {k: v for k, v in _ids(tokenizer).items() if k != "vocab_size"}
    return Qwen3Config(**fields, **ids)


def random_qwen3(config, dtype=None, device=None, seed: int = 0):
    """A randomly initialised ``Qwen3ForCausalLM``, built directly on ``device`` in ``dtype``
    (initialising 4B parameters on a CPU takes minutes; on the GPU, seconds)."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with torch.device(device or "cpu"):
            return Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
