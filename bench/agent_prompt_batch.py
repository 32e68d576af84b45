"""One agent prompt of the ladder's held-out world with G random completions, as the RL loss sees them.

Shared by the loss-pass benchmarks (``shared_prompt_loss.py``, ``lora_dropout.py``): the Semantic agent's
prompt for the first held-out session of user 8 of the CPU world, cut to ``prompt_tokens``, then G
completions of ``completion_tokens`` random tokens, right-padded to different lengths as TRL pads them.
"""

from __future__ import annotations


def agent_prompt_batch(tokenizer, prompt_tokens: int, generations: int, completion_tokens: int,
                       lengths: list[int] | None = None):
    """(prompt ids, prompt + completion ids [G, T], attention mask [G, T]); ``lengths``: each completion's real
    length, the rest of its ``completion_tokens`` padding (the batch's width)."""
    import torch

    from membuilder.training.prompts import fit_prompt, token_counter
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.construction.scoring import SessionScorer

    scorer = SessionScorer(ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml"), [8], 1)
    obs = scorer.observation(scorer.session_keys()[0])
    prompt = tokenizer.apply_chat_template(fit_prompt("semantic", obs, token_counter(tokenizer), prompt_tokens),
                                           add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)["input_ids"][0]
    g, c = generations, completion_tokens
    completions = torch.randint(100, 40000, (g, c), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompt.expand(g, -1), completions], dim=1)
    mask = torch.ones_like(ids)
    for k in range(g):
        mask[k, ids.size(1) - k * (c // (2 * g)):] = 0
    if lengths is not None:
        if len(lengths) != g or not all(0 < n <= c for n in lengths):
            raise ValueError(f"lengths {lengths}: give {g} lengths of 1 to {c} tokens")
        for k, n in enumerate(lengths):
            mask[k, prompt.numel():] = 0
            mask[k, prompt.numel():prompt.numel() + n] = 1
    return prompt, ids, mask
