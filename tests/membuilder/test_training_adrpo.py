"""ADRPO trainer mechanics on a tiny random Llama and a byte-level tokenizer built in memory."""

from __future__ import annotations

import codecs
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
torch.set_num_threads(1)

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from membuilder.memory.ops import AGENTS, SEARCHABLE_AGENTS  # noqa: E402
from membuilder.reward import CandidateReward  # noqa: E402
from membuilder.training.adrpo import (  # noqa: E402
    ADRPOConfig,
    ADRPOTrainer,
    SessionRepeatSampler,
    accumulation_for,
    group_advantages,
    trim_rollout_log,
    weight_advantages,
    zero_tied,
)
from membuilder.training.format_scorer import FormatScorer  # noqa: E402
from membuilder.training.prompts import fit_prompt, rl_rows, token_counter  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402
from membuilder.training.trl_reward import SessionReward  # noqa: E402
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.scoring import SessionScorer  # noqa: E402

SESSIONS = {"s1": "user: I moved to Lyon last week.", "s2": "user: I adopted a cat named Luna.",
            "s3": "user: I now run every morning before work."}


def letter_share(text: str) -> float:
    return sum(c.isascii() and c.isalpha() for c in text) / max(1, len(text))


class LengthScorer(FormatScorer):
    """A real scorer of raw outputs for mechanics tests: random text is never valid JSON, so the
    reward is the share of ASCII letters in each output, and the dominant memory type is the
    searchable agent that wrote the most characters (it gets alpha)."""

    alpha = 4.0

    def score(self, session_key, candidates, *, task_rewarded=True):
        out = []
        for cand in candidates:
            fill = {a: letter_share(cand[a]) for a in AGENTS}
            dominant = max(SEARCHABLE_AGENTS, key=lambda a: (len(cand[a]), a))
            weights = {a: (self.alpha if a == dominant else 1.0) for a in AGENTS}
            out.append(CandidateReward(agent_rewards=fill, weights=weights, task_reward=1.0,
                                       valid=dict.fromkeys(AGENTS, True), length_penalty=dict.fromkeys(AGENTS, 0.0),
                                       dominant=dominant))
        return out


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
                per_device_train_batch_size=8, num_generations=2, max_completion_length=12, max_steps=2,
                logging_steps=1, learning_rate=5e-3, save_strategy="no", seed=0, temperature=1.0,
                max_prompt_tokens=400)
    base.update(kw)
    return ADRPOConfig(**base)


def _trainer(tokenizer, tmp_path, scorer=None, alpha=4.0, eval_dataset=None, **kw):
    if scorer is None:
        scorer = LengthScorer.from_texts(SESSIONS)
        scorer.alpha = alpha
    args = _args(tmp_path, **kw)
    rows = rl_rows(scorer.session_keys(), scorer.observation, token_counter(tokenizer), args.max_prompt_tokens)
    model = tiny_llama(tokenizer)
    if args.beta:  # TRL builds the KL reference from the policy's path
        model.save_pretrained(tmp_path / "tiny")
        model = type(model).from_pretrained(tmp_path / "tiny")
    trainer = ADRPOTrainer(model=model, args=args, scorer=scorer, train_dataset=Dataset.from_list(rows),
                           eval_dataset=eval_dataset, processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by train(); needed to call _compute_loss directly
    return trainer


def test_weighting_arithmetic_on_a_hand_computed_batch():
    # two agent prompts, G = 4: rewards [1, 0, 0, 1] and [0.5, 0.5, 0.5, 1.0]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 1.0])
    adv = group_advantages(rewards, 4)
    s1 = (4 * 0.25 / 3) ** 0.5  # sample std of [1, 0, 0, 1]: sqrt(sum of 4 x 0.5^2 / 3)
    s2 = (3 * 0.125**2 + 0.375**2) ** 0.5 / 3**0.5
    expected = torch.tensor([0.5 / s1, -0.5 / s1, -0.5 / s1, 0.5 / s1,
                             -0.125 / s2, -0.125 / s2, -0.125 / s2, 0.375 / s2])
    assert torch.allclose(adv, expected, atol=1e-3)
    weights = torch.tensor([4.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    assert torch.allclose(weight_advantages(adv, weights), adv * weights)
    per_token = adv.unsqueeze(1).repeat(1, 3)
    assert torch.allclose(weight_advantages(per_token, weights), (adv * weights).unsqueeze(1).repeat(1, 3))


def test_sampler_keeps_the_four_agents_of_a_session_in_one_generation_batch():
    keys = [k for k in ("a", "b", "c", "d", "e", "f") for _ in AGENTS]
    sampler = SessionRepeatSampler(keys, mini_repeat_count=2, batch_size=8, repeat_count=1, seed=3)
    order = list(sampler)
    assert len(order) == len(sampler) == 6 * 4 * 2
    for start in range(0, len(order), 16):  # one generation batch = 8 rows x G
        batch = order[start:start + 16]
        sessions = {keys[i] for i in batch}
        assert len(sessions) == 2
        for s in sessions:
            rows = [i for i in batch if keys[i] == s]
            assert len(rows) == 8 and len(set(rows)) == 4  # all four agents, G each
    firsts = [keys[order[i]] for i in range(0, len(order), 8)]
    assert firsts != ["a", "b", "c", "d", "e", "f"]  # sessions are shuffled
    with pytest.raises(ValueError, match="split a session"):
        SessionRepeatSampler(keys, mini_repeat_count=2, batch_size=6)


def test_rollout_k_pairs_the_kth_completion_of_each_agent():
    seen = []

    class Recording(LengthScorer):
        def score(self, session_key, candidates, *, task_rewarded=True):
            seen.append((session_key, candidates))
            return super().score(session_key, candidates, task_rewarded=task_rewarded)

    reward = SessionReward(Recording.from_texts(SESSIONS))
    keys, agents, completions = [], [], []
    for agent in AGENTS:
        for k in range(2):
            keys.append("s1")
            agents.append(agent)
            completions.append([{"role": "assistant", "content": f"{agent}-{k}" + "x" * (k * 10)}])
    rewards = reward(prompts=[None] * 8, completions=completions, session_key=keys, agent=agents)
    (key, cands), = seen
    assert key == "s1" and [c["core"] for c in cands] == ["core-0", "core-1" + "x" * 10]
    assert all(c[a].startswith(f"{a}-{k}") for k, c in enumerate(cands) for a in AGENTS)
    assert rewards[0] == pytest.approx(4 / 6) and rewards[1] == pytest.approx(14 / 16)
    # dominant in both rollouts: procedural (longest name); its completions carry alpha
    assert reward.last_weights == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0]
    assert reward.last_stats["adrpo/dominant_procedural"] == 1.0


def test_reward_density_coin_is_seeded_and_passed_to_the_scorer():
    asked = []

    class Recording(LengthScorer):
        def score(self, session_key, candidates, *, task_rewarded=True):
            asked.append(task_rewarded)
            return super().score(session_key, candidates, task_rewarded=task_rewarded)

    reward = SessionReward(Recording.from_texts(SESSIONS), reward_density=4, seed=1)
    share = sum(reward.task_rewarded(f"s{i}", step) for i in range(50) for step in range(20)) / 1000
    assert 0.2 < share < 0.3
    keys, agents = ["s1"] * 8, [a for a in AGENTS for _ in range(2)]
    for step in range(12):
        state = type("State", (), {"global_step": step})()
        reward(prompts=[None] * 8, completions=["x"] * 8, session_key=keys, agent=agents, trainer_state=state)
    assert asked == [reward.task_rewarded("s1", step) for step in range(12)] and False in asked
    dense = SessionReward(LengthScorer.from_texts(SESSIONS))
    assert dense.reward_density == 1 and all(dense.task_rewarded("s1", step) for step in range(10))


def test_the_adrpo_reward_refuses_a_batch_that_cuts_a_session():
    """ADRPO's weights need joint rollouts: its reward refuses a batch that holds a session's agents unevenly,
    where a plain trainer's reward scores each agent alone (which needs the scorer's expert outputs)."""
    agents = [a for a in AGENTS[:3] for _ in range(2)]
    cut = dict(prompts=[None] * 6, completions=["x"] * 6, session_key=["s1"] * 6, agent=agents)
    with pytest.raises(ValueError, match="SessionRepeatSampler"):
        SessionReward(LengthScorer.from_texts(SESSIONS), whole_sessions=True)(**cut)
    with pytest.raises(TypeError, match="expert_action"):
        SessionReward(LengthScorer.from_texts(SESSIONS))(**cut)


def test_unrewarded_session_in_the_trainer_uses_the_env_reward_as_it_is():
    """Published: an unrewarded session keeps validity and length with r_task = 1 and no dominant
    type. A rollout whose memory would answer nothing does not score above one that answers."""
    scorer = SessionScorer(ConstructionConfig(answer_mode="evidence", world_overrides={"num_users": 1},
                                              reward_density=1000), users=[0], max_sessions_per_user=2)
    key = scorer.session_keys()[1]
    expert = scorer.expert_action(key)

    def rot13(v):
        if isinstance(v, str):
            return codecs.encode(v, "rot13")
        if isinstance(v, list):
            return [rot13(x) for x in v]
        return {k: x if k in ("operation", "action") else rot13(x) for k, x in v.items()}

    blind = {a: json.dumps(rot13(json.loads(t))) for a, t in expert.items()}
    reward = SessionReward(scorer, seed=0)
    assert reward.reward_density == 1000 and not reward.task_rewarded(key, 0)
    agents = [a for a in AGENTS for _ in range(2)]
    completions = [(expert if k == 0 else blind)[a] for a in AGENTS for k in range(2)]
    rewards = reward(prompts=[None] * 8, completions=completions, session_key=[key] * 8, agent=agents)
    knows, knows_nothing = rewards[0::2], rewards[1::2]
    assert knows_nothing == knows and all(r > 0 for r in knows)
    assert reward.last_weights == [1.0] * 8 and reward.last_stats["adrpo/dominant_none"] == 1.0
    assert reward.last_stats["reward/task_rewarded"] == 0.0 and "reward/task" not in reward.last_stats
    env_rewards = scorer.score(key, [expert], task_rewarded=False)[0].agent_rewards
    assert knows == [env_rewards[a] for a in AGENTS]  # the trainer adds nothing of its own


def test_prompt_truncation_drops_memory_entries_not_instructions(tokenizer):
    obs = {"session": "user: hello", "session_time": "2024-01-01", "core": "Name: Ana",
           "semantic": [f"Fact {i}: " + "detail " * 20 for i in range(20)]}
    length = token_counter(tokenizer)
    full = fit_prompt("semantic", obs, length, None)
    short = fit_prompt("semantic", obs, length, length(full) - 300)
    assert length(short) <= length(full) - 300
    assert "Fact 0:" in short[1]["content"] and "Fact 19:" not in short[1]["content"]
    tail = full[1]["content"][-200:]  # the output instructions at the end survive
    assert short[1]["content"].endswith(tail)


def test_prompt_cut_keeps_what_a_writer_must_edit(tokenizer):
    """A Semantic writer loses the Core block (context to it) before its own entries, which an UPDATE must
    copy exactly; the Core writer keeps the Core lines the session speaks of and is told lines are missing."""
    core = "\n".join([f"Hobby {i}: collecting stamps of series {i} (since 2020-01-0{i % 9 + 1})" for i in range(24)]
                     + ["Lodging preference: a room with a bed (since 2020-09-29)"]
                     + [f"Pet {i}: a goldfish named Bubbles {i}" for i in range(12)])
    session = "user: I'd rather sleep in a tent under the stars now; my lodging preference changed.\nassistant: Noted."
    entries = ["Lodging preference: a room with a bed | Details: First mentioned by the user on 2020-09-29.",
               *(f"Fact {i}: " + "detail " * 12 for i in range(5))]
    obs = {"session": session, "session_time": "2020-12-29", "core": core, "core_usage": 30.0, "semantic": entries}
    length = token_counter(tokenizer)
    full = fit_prompt("semantic", obs, length, None)
    no_core = fit_prompt("semantic", {**obs, "core": ""}, length, None)
    cut = fit_prompt("semantic", obs, length, length(no_core) + 20)
    assert length(cut) <= length(no_core) + 20 < length(full)
    assert all(e in cut[1]["content"] for e in entries)  # every entry kept; the Core context went
    assert "Hobby 0:" not in cut[1]["content"] and "tent under the stars" in cut[1]["content"]

    whole = fit_prompt("core", obs, length, None)
    short = fit_prompt("core", obs, length, length(whole) - 350)
    text = short[1]["content"]
    assert length(short) <= length(whole) - 350
    assert "Lodging preference: a room with a bed (since 2020-09-29)" in text  # the line to REPLACE
    assert "\n...\n" in text and "Hobby 0:" not in text and session in text
    # with every Core line left out the writer sees "...", never an empty Core it might fill again
    tiny = fit_prompt("core", obs, length, length(fit_prompt("core", {**obs, "core": "..."}, length, None)))
    assert "(empty)" not in tiny[1]["content"] and "Hobby" not in tiny[1]["content"]
    # a Core block written as one paragraph keeps its most recent part, as before
    para = fit_prompt("core", {**obs, "core": core.replace("\n", " ")}, length, length(whole) - 350)
    assert "Pet 11: a goldfish named Bubbles 11" in para[1]["content"] and "Hobby 0:" not in para[1]["content"]


GRPO_FIELDS = ("output_dir", "use_cpu", "bf16", "gradient_checkpointing", "report_to", "per_device_train_batch_size",
               "num_generations", "max_completion_length", "learning_rate", "seed", "temperature", "beta", "epsilon",
               "loss_type", "scale_rewards")


def test_alpha_one_equals_grpo_loss_on_the_same_batch(tokenizer, tmp_path):
    for beta in (0.0, 0.02):
        trainer = _trainer(tokenizer, tmp_path / f"a1-{beta}", alpha=1.0, beta=beta)
        grpo = GRPOTrainer(model=trainer.model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                           args=GRPOConfig(**{k: getattr(trainer.args, k) for k in GRPO_FIELDS}),
                           train_dataset=trainer.train_dataset, processing_class=tokenizer)
        grpo.current_gradient_accumulation_steps = 1
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.train()
        out = trainer._generate_and_score_completions(batch)
        assert torch.all(out["adrpo_weights"] == 1.0)
        assert out["advantages"].abs().sum() > 0
        if beta:
            assert "ref_per_token_logps" in out
        grpo.model.train()
        assert torch.equal(trainer._compute_loss(trainer.model, out), grpo._compute_loss(grpo.model, out))


def test_alpha_scales_the_loss_through_the_advantages(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path, alpha=4.0)
    trainer.model.train()
    out = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    weights = out["adrpo_weights"]
    assert set(weights.tolist()) == {1.0, 4.0}
    # TRL's advantages are the per-agent-prompt group normalisation of the session rewards
    rewards = torch.tensor(list(trainer._logs["rewards"]["session_reward"]))
    assert torch.allclose(out["advantages"], group_advantages(rewards, 2), atol=1e-5)

    def grads(loss_fn):
        trainer.model.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss.detach(), torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    weighted = grads(lambda: trainer._compute_loss(trainer.model, out))
    by_hand = grads(lambda: GRPOTrainer._compute_loss(trainer, trainer.model,
                                                      {**out, "advantages": out["advantages"] * weights}))
    plain = grads(lambda: GRPOTrainer._compute_loss(trainer, trainer.model, out))
    assert torch.equal(weighted[0], by_hand[0]) and torch.equal(weighted[1], by_hand[1])
    assert not torch.allclose(weighted[1], plain[1])  # the dominant agent's gradient is scaled by alpha


def test_two_adrpo_steps_change_the_weights_and_log_stable_metrics(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)]
    assert changed
    logs = trainer.state.log_history[0]
    for name in ["reward/task", "adrpo/weight_mean", "adrpo/dominant_none", "time/generate", "time/score",
                 "time/tokens_per_s", "reward/frac_groups_alike",
                 *(f"reward/valid_{a}" for a in AGENTS), *(f"reward/length_penalty_{a}" for a in AGENTS),
                 *(f"adrpo/dominant_{m}" for m in SEARCHABLE_AGENTS)]:
        assert name in logs, name
    assert logs["adrpo/weight_mean"] > 1.0
    # the last step's share of agent prompts whose G rewards are all equal, counted exactly
    last = [h for h in trainer.state.log_history if "reward/frac_groups_alike" in h][-1]
    rewards, g = trainer.session_reward.last_rewards, trainer.num_generations
    groups = [rewards[i:i + g] for i in range(0, len(rewards), g)]
    assert last["reward/frac_groups_alike"] == pytest.approx(sum(len(set(x)) == 1 for x in groups) / len(groups))


def test_resume_from_a_checkpoint(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path, save_strategy="steps", save_steps=1, max_steps=2)
    trainer.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "trainer_state.json").exists()
    again = _trainer(tokenizer, tmp_path, save_strategy="no", max_steps=3)
    again.train(resume_from_checkpoint=str(checkpoint))
    assert again.state.global_step == 3


def test_batch_that_would_split_a_session_is_refused(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="whole sessions|split a session"):
        _trainer(tokenizer, tmp_path, per_device_train_batch_size=6, num_generations=2)


def test_one_adrpo_step_with_the_memorygym_scorer(tokenizer, tmp_path):
    """End to end: world sessions, expert snapshots and the env's reward drive one ADRPO step."""
    scorer = SessionScorer(ConstructionConfig(answer_mode="evidence", world_overrides={"num_users": 1}),
                           max_sessions_per_user=2)
    trainer = _trainer(tokenizer, tmp_path, scorer=scorer, max_steps=1, max_prompt_tokens=6000)
    trainer.train()
    logs = trainer.state.log_history[0]
    # A random tiny model writes no valid JSON: the validity gate zeroes every agent.
    assert logs["reward/valid_core"] == 0.0 and "adrpo/weight_mean" in logs


def test_an_adrpo_run_with_an_eval_dataset_evaluates(tokenizer, tmp_path):
    scorer = LengthScorer.from_texts(SESSIONS)
    rows = Dataset.from_list(rl_rows(["s3"], scorer.observation, token_counter(tokenizer), 400))
    trainer = _trainer(tokenizer, tmp_path, scorer=scorer, max_steps=1, eval_strategy="steps", eval_steps=1,
                       per_device_eval_batch_size=8, eval_dataset=rows)
    trainer.train()
    metrics = [log for log in trainer.state.log_history if "eval_loss" in log or "eval_reward" in log]
    assert metrics, trainer.state.log_history
    metrics = metrics[0]
    assert metrics["eval_reward"] > 0 and "eval_adrpo/weight_mean" in metrics


def test_micro_batches_of_one_prompt_train_what_one_session_batch_trains(tokenizer, tmp_path):
    """share_prompt with G rows a micro-batch: each micro-batch holds one agent prompt, and the accumulated
    update equals the update of the whole session in one micro-batch (same rollouts, same seed).

    Plain SGD, so the update is the learning rate times the accumulated gradient: Adam's first step
    divides by the gradient's magnitude and so blows float rounding (which differs between CPUs,
    with AMX or without) up to the learning rate's size; SGD keeps it at rounding size."""
    whole = _trainer(tokenizer, tmp_path / "whole", max_steps=1, learning_rate=1e-2, optim="sgd")
    whole.train()  # each trainer seeds the RNG when built: build the second after the first has sampled
    split = _trainer(tokenizer, tmp_path / "split", max_steps=1, learning_rate=1e-2, optim="sgd",
                     per_device_train_batch_size=2, gradient_accumulation_steps=4)
    split.train()
    assert len(split._buffered_inputs) == 4
    for micro in split._buffered_inputs:
        prompts = {tuple(row[mask.bool()].tolist()) for row, mask in zip(micro["prompt_ids"], micro["prompt_mask"])}
        assert len(prompts) == 1  # one agent prompt, its G = 2 completions
    def rows(batches):  # TRL shuffled the whole-session batch's rows: compare them as a set
        return sorted(tuple(r.tolist()) for b in batches for r in b["completion_ids"])

    assert rows(split._buffered_inputs) == rows(whole._buffered_inputs)  # the same rollouts
    start = tiny_llama(tokenizer).state_dict()
    a, b = dict(whole.model.named_parameters()), dict(split.model.named_parameters())
    step_a = {n: (a[n] - start[n]).detach() for n in a}
    step_b = {n: (b[n] - start[n]).detach() for n in a}
    largest = max(s.abs().max().item() for s in step_a.values())
    assert largest > 1e-4  # the step moved the weights
    # the two accumulations sum the same per-row terms in another order: they agree to float32 rounding
    # of the update, far below the update itself
    worst = max((step_a[n] - step_b[n]).abs().max().item() for n in a)
    assert worst <= 1e-3 * largest, (worst, largest)


def test_a_resumed_run_drops_the_rollout_lines_it_redoes(tmp_path):
    log = tmp_path / "rollouts.0.jsonl"
    records = [{"mode": "train", "step": s} for s in (0, 0, 1, 2, 2)] + [{"mode": "eval", "step": 2}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"mode": "train", "st')  # torn last line
    # resumed from checkpoint-2: updates 1 and 2 (rollouts logged at steps 0 and 1) and the evaluation at step 2
    # happened before the checkpoint; the rollouts logged at step 2 and the torn line are redone
    assert trim_rollout_log(str(log), 2) == 3
    assert [json.loads(x) for x in log.read_text().splitlines()] == [records[i] for i in (0, 1, 2, 5)]
    assert trim_rollout_log(str(log), 2) == 0
    assert trim_rollout_log(str(tmp_path / "missing.jsonl"), 0) == 0
    log.write_text('{"mode": "train", "step": 0}\nnot json\n{"mode": "train", "step": 1}\n')
    with pytest.raises(ValueError, match=r"rollouts.0.jsonl: line 2 is not a rollout record"):
        trim_rollout_log(str(log), 1)


def test_dropout_is_off_in_rl_so_two_forwards_of_the_policy_agree(tokenizer, tmp_path):
    """A LoRA policy with dropout: the trainer zeroes every dropout (LoRA's too), so the rollout's log-probs and
    the loss's, two train-mode forwards of one policy, are the same numbers; disable_dropout=false keeps it."""
    from peft import LoraConfig, get_peft_model

    scorer = LengthScorer.from_texts(SESSIONS)
    rows = Dataset.from_list(rl_rows(scorer.session_keys(), scorer.observation, token_counter(tokenizer), 400))
    ids = torch.tensor([tokenizer("user: I moved to Lyon last week.")["input_ids"]])

    def build(**kw):
        lora = LoraConfig(r=4, lora_dropout=0.5, target_modules="all-linear", init_lora_weights=False)  # B != 0
        model = get_peft_model(tiny_llama(tokenizer), lora)
        trainer = ADRPOTrainer(model=model, args=_args(tmp_path, **kw), scorer=scorer, train_dataset=rows,
                               processing_class=tokenizer)
        trainer.model.train()
        probs = [m.p for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout)]
        with torch.no_grad():
            twice = [trainer.model(input_ids=ids).logits for _ in range(2)]
        return probs, torch.equal(*twice)

    assert ADRPOConfig.__dataclass_fields__["disable_dropout"].default
    probs, same = build()
    assert probs and set(probs) == {0} and same
    probs, same = build(disable_dropout=False)
    assert 0.5 in probs and not same


def test_sessions_per_step_sets_the_accumulation():
    assert accumulation_for(4, 8, 8) == 16  # 4 sessions x 4 agents x G 8 = 128 completions in micro-batches of 8
    assert accumulation_for(8, 8, 32, processes=2) == 4  # the published 8 x 4 x 8 = 256, 128 per process
    with pytest.raises(ValueError, match="do not split"):
        accumulation_for(1, 2, 3)
    with pytest.raises(ValueError, match="integer >= 1"):
        accumulation_for(0, 8, 8)


class CoinScorer(LengthScorer):
    """Rewards 1 when an output starts with an ASCII letter, else 0: with G = 2 many groups tie."""

    def score(self, session_key, candidates, *, task_rewarded=True):
        out = super().score(session_key, candidates, task_rewarded=task_rewarded)
        for cand, reward in zip(candidates, out, strict=True):
            reward.agent_rewards = {a: float(cand[a][:1].isascii() and cand[a][:1].isalpha()) for a in AGENTS}
        return out


def test_redraw_keeps_the_draw_with_the_fewest_tied_groups(tokenizer, tmp_path):
    calls = []
    trainer = _trainer(tokenizer, tmp_path, scorer=CoinScorer.from_texts(SESSIONS), redraw_tied=3, max_steps=3)
    draw = trainer._draw

    def counted(inputs):
        out = draw(inputs)
        calls.append(trainer._tied_groups(trainer.num_generations)[0])
        return out

    trainer._draw = counted
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward/redraws" in h]
    assert len(logs) == 3
    redraws = [round(h["reward/redraws"]) for h in logs]
    assert sum(redraws) + 3 == len(calls) and sum(redraws) > 0
    # each step kept the fewest ties among its draws, and stopped drawing once none tied
    at = 0
    for h, n in zip(logs, redraws, strict=True):
        draws = calls[at:at + n + 1]
        at += n + 1
        groups = len(trainer.session_reward.last_rewards) // trainer.num_generations
        assert h["reward/tied_groups_first_draw"] == pytest.approx(draws[0] / groups)
        assert h["reward/frac_groups_alike"] == pytest.approx(min(draws) / groups)
        assert n == 3 or draws[-1] == 0
    with pytest.raises(ValueError, match="redraw_tied"):
        _args(tmp_path, redraw_tied=-1)


def test_under_gradient_checkpointing_the_loss_runs_trls_pass_and_its_logps_hold(tokenizer, tmp_path):
    """Checkpointed layers drop the prompt's key/value cache in training, which would leave the
    shared-prefix pass scoring completions without their prompt: ADRPO must fall back then."""
    from membuilder.training.adrpo import GRPOTrainer
    from membuilder.training.shared_prefix import checkpointing, shared_prefix_logps

    trainer = _trainer(tokenizer, tmp_path, max_steps=1)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    plain, _ = shared_prefix_logps(trainer.model, ids, mask, keep, trainer.temperature)
    assert not checkpointing(trainer.model)
    trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert checkpointing(trainer.model)
    ours, _, _ = trainer._logps_and_entropies(trainer.model, ids, mask, keep, None, False, False)
    trl, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, keep)
    real = batch["completion_mask"].bool()
    assert torch.allclose(ours[real], trl[real]) and torch.allclose(ours[real], plain[real], atol=1e-4)


def test_the_kl_reference_of_a_continued_adapter_is_that_adapter_not_the_base_model(tokenizer, tmp_path):
    """RL continues the SFT adapter; with beta > 0 the KL term must pull towards SFT. TRL keeps a frozen copy
    of the adapter ("ref") for that, so at the first step the reference log-probs are the policy's own, and
    not those of the base model under it (the ladder's sweep relies on it)."""
    from peft import LoraConfig, get_peft_model

    scorer = LengthScorer.from_texts(SESSIONS)
    args = _args(tmp_path, beta=0.02, max_steps=1)
    rows = rl_rows(scorer.session_keys(), scorer.observation, token_counter(tokenizer), args.max_prompt_tokens)
    # a random, non-zero adapter changes the outputs, as a trained SFT adapter does
    model = get_peft_model(tiny_llama(tokenizer), LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    trainer = ADRPOTrainer(model=model, args=args, scorer=scorer, train_dataset=Dataset.from_list(rows),
                           processing_class=tokenizer)
    assert "ref" in trainer.model.peft_config
    out = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    keep = out["completion_ids"].size(1)
    with torch.no_grad():
        policy, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
        with trainer.model.disable_adapter():
            base, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
    real = out["completion_mask"].bool()
    assert torch.allclose(out["ref_per_token_logps"][real], policy[real], atol=1e-4)
    assert (base[real] - policy[real]).abs().max() > 1e-2


class ExpertLengthScorer(LengthScorer):
    """LengthScorer with an expert (a fixed text per agent) and a record of every candidate it scored."""

    EXPERT = "expert output"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[dict[str, str]] = []

    def expert_action(self, session_key):
        return dict.fromkeys(AGENTS, self.EXPERT)

    def score(self, session_key, candidates, *, task_rewarded=True):
        self.seen += [dict(c) for c in candidates]
        return super().score(session_key, candidates, task_rewarded=task_rewarded)


def test_per_agent_credit_trains_with_each_agent_scored_beside_the_experts_outputs(tokenizer, tmp_path):
    scorer = ExpertLengthScorer.from_texts(SESSIONS)
    trainer = _trainer(tokenizer, tmp_path, scorer=scorer, credit="per_agent", max_steps=1)
    trainer.train()
    assert trainer.session_reward.credit == "per_agent" and scorer.seen
    # every candidate holds one sampled agent output and the expert's three others
    assert all(sum(c[a] != ExpertLengthScorer.EXPERT for a in AGENTS) <= 1 for c in scorer.seen)
    assert any(c[a] != ExpertLengthScorer.EXPERT for c in scorer.seen for a in AGENTS)
    with pytest.raises(ValueError, match="credit"):
        _args(tmp_path, credit="shapley")
    with pytest.raises(TypeError, match="expert_action"):
        _trainer(tokenizer, tmp_path, credit="per_agent")


def test_vllm_importance_correction_under_top_p_warns_that_it_shrinks_every_completion(tmp_path):
    """vLLM's log-probs come after top-p, the trainer's do not: the ratio would be the mass top-p cut."""
    import warnings

    from membuilder.training.adrpo import TOP_P_RATIO_WARNING

    with pytest.warns(UserWarning, match="shrinks by the probability mass the filter cut"):
        _args(tmp_path, use_vllm=True, top_p=0.9)
    assert "vllm_importance_sampling_correction: false" in TOP_P_RATIO_WARNING
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*probability mass the filter cut.*")
        _args(tmp_path, use_vllm=True, top_p=0.9, vllm_importance_sampling_correction=False)  # the published way
        _args(tmp_path, use_vllm=True, top_p=1.0)  # nothing filtered: the ratio sees engine noise alone
        _args(tmp_path, use_vllm=False, top_p=0.9)  # the trainer samples and scores alike


def test_completions_cut_at_the_limit_and_left_out_of_the_loss_are_still_logged_as_generated(tokenizer, tmp_path):
    # The DAPO option drops a cut completion from the loss by zeroing its mask; the rollout log (what the
    # ladder's action and signal reports read) must still hold the text the policy wrote, marked as left out.
    def logged(masked: bool):
        out = tmp_path / ("masked" if masked else "plain")
        _trainer(tokenizer, out, max_steps=1, mask_truncated_completions=masked,
                 rollout_log=str(out / "rollouts")).train()
        return [json.loads(x) for x in (out / "rollouts.0.jsonl").read_text().splitlines()]

    masked, plain = logged(True), logged(False)
    assert [r["completion"] for r in masked] == [r["completion"] for r in plain]  # the same seed samples the same
    cut = [r for r in masked if r.get("loss_masked")]
    assert cut and all(r["completion"] for r in cut)  # a random tiny model seldom stops within 12 tokens
    assert not any(r.get("loss_masked") for r in plain)


def test_tied_groups_get_advantage_exactly_zero():
    rewards = [0.4] * 8 + [0.0, 1.0] * 4
    advantages = group_advantages(torch.tensor(rewards), 8)
    zeroed = zero_tied(advantages, rewards, 8)
    assert torch.equal(zeroed[:8], torch.zeros(8))  # TRL's mean-centring may leave float noise here
    assert torch.equal(zeroed[8:], advantages[8:]) and zeroed[8:].abs().min() > 0.9
    with pytest.raises(RuntimeError, match="3 rewards for 16 advantages"):
        zero_tied(advantages, rewards[:3], 8)


def test_micro_batches_whose_groups_all_tie_are_skipped_and_the_update_is_unchanged(tokenizer, tmp_path):
    """One agent prompt a micro-batch, G = 2 with coin rewards, so many micro-batches tie: with skip_tied they
    run no forward or backward, and the weights after two AdamW steps are those of the full pass (a tied
    micro-batch adds exactly zero to the gradient; dropout is off, so the loss draws nothing at random)."""
    runs = {}
    for skip in (True, False):
        trainer = _trainer(tokenizer, tmp_path / str(skip), scorer=CoinScorer.from_texts(SESSIONS), max_steps=2,
                           per_device_train_batch_size=2, gradient_accumulation_steps=4, skip_tied=skip)
        trainer.train()
        runs[skip] = trainer
    skipped = [h["loss/skipped_batches"] for h in runs[True].state.log_history if "loss/skipped_batches" in h]
    assert len(skipped) == 2 and sum(skipped) > 0
    assert all(h["loss/skipped_batches"] == 0 for h in runs[False].state.log_history if "loss/skipped_batches" in h)

    def rows(t):
        return [r.tolist() for b in t._buffered_inputs for r in b["completion_ids"]]

    assert rows(runs[True]) == rows(runs[False])  # the same rollouts
    start = tiny_llama(tokenizer).state_dict()
    a, b = dict(runs[True].model.named_parameters()), dict(runs[False].model.named_parameters())
    assert max((a[n] - start[n]).abs().max().item() for n in a) > 1e-4  # the untied micro-batches trained
    for n in a:
        assert torch.equal(a[n], b[n]), n
