"""Tiny random models built in memory, for tests of training mechanics and hardware smoke checks.

``byte_tokenizer()`` is a byte-level BPE with no merges (every byte one token) plus the ChatML
special tokens and SmolLM2's ChatML template (no generation markers, like SmolLM2's own).
``tiny_llama(tokenizer)`` and ``tiny_qwen3(tokenizer)`` are randomly initialised causal LMs with
that vocabulary; hidden 64 and two layers by default, so a training step takes milliseconds.
"""

from __future__ import annotations

SMOLLM2_CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(alphabet))}
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
