"""Expert trajectories from the world oracle, SFT with assistant-only loss, saving for inference."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
torch.set_num_threads(1)

from membuilder.memory.ops import AGENTS, parse  # noqa: E402
from membuilder.training.chat_templates import ensure_generation_markers  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402
from membuilder.training.trajectories import (  # noqa: E402
    SessionText,
    build_trajectory,
    read_jsonl,
    sft_rows,
    to_dataset,
    write_jsonl,
)
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.episodes import load_episodes  # noqa: E402
from memgym_env.construction.scoring import SessionScorer  # noqa: E402
from train.common import expert_records  # noqa: E402

CONFIG = ConstructionConfig(world_config="configs/env/base.yaml", world_overrides={"num_users": 2, "num_periods": 2})


@pytest.fixture(scope="module")
def episodes():
    return load_episodes(CONFIG)


def oracle_outputs(episode) -> dict[str, dict[str, str]]:
    conv = episode.conversation
    return {f"{conv.id}/{s.id}": out for s, out in zip(conv.sessions, episode.expert_outputs, strict=True)}


@pytest.fixture(scope="module")
def embedder():
    from membuilder.llm.embedders import load_embedder

    return load_embedder("minilm")


def test_oracle_dataset_renders_the_policy_prompts_on_the_expert_snapshot(episodes):
    from membuilder.agents.constructor import render_prompt

    records = expert_records(CONFIG, [0], limit=6)
    assert len(records) == 6
    first, later = records[0]["observation"], records[-1]["observation"]
    assert first["core"] == "" and len(first["semantic"]) == 0  # empty memory before the first session
    assert later["core"] and later["semantic"]  # the expert's own writes show up in later views
    rows = sft_rows(records)
    assert [r["agent"] for r in rows[:4]] == list(AGENTS)
    last = rows[-1]
    assert last["messages"][:-1] == render_prompt("procedural", later)
    assert last["messages"][-1]["role"] == "assistant"
    for r in rows:
        assert parse(r["agent"], r["messages"][-1]["content"]).valid
    expected = oracle_outputs(episodes[0])[records[2]["key"]]
    assert rows[2 * 4 + 2]["messages"][-1]["content"] == expected["semantic"]
    ds = to_dataset(rows)
    assert ds.column_names == ["messages", "session_key", "agent", "source"] and len(ds) == 24


def test_oracle_records_can_spread_over_every_period_as_the_scorer_picks():
    """session_pick every_period: the sessions the env's scorer keeps, each on the expert's memory before it."""
    spread = expert_records(CONFIG, [0], limit=2, pick="every_period")
    scorer = SessionScorer(dataclasses.replace(CONFIG, answer_mode="evidence"), [0], 2, pick="every_period")
    assert [r["key"] for r in spread] == scorer.session_keys()
    assert len({scorer.period(k) for k in scorer.session_keys()}) == 2  # not the first two sessions
    assert [r["observation"] for r in spread] == [scorer.observation(k) for k in scorer.session_keys()]


def test_keep_empty_rows_drops_a_stable_share_of_answers_that_write_nothing():
    from membuilder.training.trajectories import writes_nothing

    records = expert_records(CONFIG, [0, 1], limit=None)
    every = sft_rows(records)
    empty = [r for r in every if writes_nothing(r["agent"], r["messages"][-1]["content"])]
    assert 20 <= len(empty) < len(every)  # the oracle leaves some agents with nothing to write
    kept = sft_rows(records, keep_empty=0.25)
    kept_empty = [r for r in kept if writes_nothing(r["agent"], r["messages"][-1]["content"])]
    # every row that writes something stays; about a quarter of the others, the same ones each time
    assert len(kept) - len(kept_empty) == len(every) - len(empty)
    assert 0.1 * len(empty) <= len(kept_empty) <= 0.4 * len(empty)
    assert kept == sft_rows(records, keep_empty=0.25)
    assert [r for r in sft_rows(records, keep_empty=0.0) if writes_nothing(r["agent"], r["messages"][-1]["content"])] == []
    assert sft_rows(records, keep_empty=1.0) == every
    with pytest.raises(ValueError, match="keep_empty"):
        sft_rows(records, keep_empty=1.5)


def test_first_session_rows_that_see_an_empty_memory_can_be_taken_several_times():
    """A user has one session whose agents see an empty memory; held-out periods start with one, and a
    policy that saw almost none writes REPLACE on an empty Core. ``empty_memory_repeats`` weighs them up."""
    from membuilder.memory.ops import parse
    from membuilder.training.trajectories import starts_empty

    records = expert_records(CONFIG, [0, 1], limit=4)
    once = sft_rows(records)
    thrice = sft_rows(records, empty_memory_repeats=3)
    first = {x["key"] for x in records if starts_empty(x["observation"])}
    assert first == {records[0]["key"], records[4]["key"]}  # each user's first session, and only those
    empty = [r for r in once if r["session_key"] in first]
    assert {r["agent"] for r in empty} >= {"core", "semantic"}
    assert all("(empty)" in r["messages"][1]["content"] for r in empty if r["agent"] == "core")
    assert len(thrice) == len(once) + 2 * len(empty)
    assert [r for r in thrice if r not in empty] == [r for r in once if r not in empty]  # the rest keep their order
    # what the repeats teach: on an empty Core the expert appends, it never replaces
    assert {type(op).__name__ for r in empty if r["agent"] == "core"
            for op in parse("core", r["messages"][-1]["content"]).ops} == {"CoreAppend"}
    with pytest.raises(ValueError, match="empty_memory_repeats"):
        sft_rows(records, empty_memory_repeats=0)


def test_rows_whose_edit_quotes_text_the_prompt_hides_are_left_out():
    """The expert knows its whole bank; a row whose UPDATE or REPLACE quotes an entry the (cut) prompt does not
    show would teach the policy to invent what it edits, so SFT can leave it out and says which."""
    from membuilder.training.trajectories import unseen_quotes

    seen = "Lodging preference: a room with a bed | Details: First mentioned on 2020-09-29."
    hidden = "Course: ceramics lessons | Details: First mentioned on 2020-10-02."
    obs = {"session": "user: I sleep in a tent now and quit ceramics.", "session_time": "2020-12-29",
           "core": "Lodging preference: a room with a bed (since 2020-09-29)", "core_usage": 10.0, "semantic": [seen]}

    def update(old):
        return json.dumps({"operations": [{"action": "UPDATE", "old_memory": old, "new_memory": "changed"}]})

    replace = json.dumps({"operations": [{"action": "REPLACE", "old_text": "room with a bed", "new_text": "tent"}]})
    records = [{"key": f"u/s{i}", "observation": obs, "outputs": {"semantic": out, "core": replace}}
               for i, out in enumerate([update(seen), update(hidden)])]
    every = sft_rows(records, agents=("core", "semantic"))
    dropped = []
    kept = sft_rows(records, agents=("core", "semantic"), drop_unseen_quotes=True, dropped=dropped)
    assert len(every) == 4 and len(kept) == 3
    assert dropped == [{"session_key": "u/s1", "agent": "semantic", "unseen": [hidden]}]
    assert unseen_quotes("core", replace, kept[0]["messages"][:-1]) == []  # a Core REPLACE's quote is in view

    # on the oracle's own trajectories, cut to a small budget, every kept edit quotes what its prompt shows
    from membuilder.training.prompts import token_counter

    tracks = dataclasses.replace(CONFIG, world_overrides={**CONFIG.world_overrides, "num_periods": 3})
    length = token_counter(byte_tokenizer())
    recs = expert_records(tracks, [0], limit=None)
    lost = []
    rows = sft_rows(recs, length=length, max_prompt_tokens=1400, drop_unseen_quotes=True, dropped=lost)
    assert lost and all(unseen_quotes(r["agent"], r["messages"][-1]["content"], r["messages"][:-1]) == [] for r in rows)
    assert len(rows) + len(lost) == len(sft_rows(recs, length=length, max_prompt_tokens=1400))


def test_llm_expert_trajectory_resumes_from_its_jsonl(episodes, embedder, tmp_path):
    from membuilder.memory.bank import MemoryBank

    conv = episodes[1].conversation
    sessions = [SessionText(f"{conv.id}/{s.id}", s.time, s.render()) for s in conv.sessions[:4]]
    calls = []

    def expert(session: SessionText, obs):  # a writer that records which sessions it was asked about
        calls.append(session.key)
        return oracle_outputs(episodes[1])[session.key]

    path = tmp_path / "traj.jsonl"
    build_trajectory(sessions[:2], expert, MemoryBank(embedder), jsonl=path)
    with path.open("a") as f:
        f.write('{"key": "cut mid-wri')  # a line left by a killed run
    resumed = build_trajectory(sessions, expert, MemoryBank(embedder), jsonl=path)
    assert calls == [s.key for s in sessions[:2]] + [s.key for s in sessions[2:]]
    fresh = build_trajectory(sessions, expert, MemoryBank(embedder))
    assert [r["observation"] for r in resumed] == [r["observation"] for r in fresh]
    out = write_jsonl(sft_rows(resumed), tmp_path / "sft.jsonl")
    assert len(read_jsonl(out)) == 16 and json.loads(out.read_text().splitlines()[0])["agent"] == "core"


def test_generation_markers_mask_only_the_assistant_turn():
    tok = byte_tokenizer()
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert ensure_generation_markers(tok) == "chatml"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": '{"operations": []}'}]
    enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    kept = [t for t, m in zip(enc["input_ids"], enc["assistant_masks"], strict=True) if m]
    assert tok.decode(kept) == '{"operations": []}<|im_end|>'
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                   tokenize=False) == plain


def _sft(tmp_path, rows, peft=None, **kw):
    from trl import SFTConfig

    from membuilder.training.sft import build_sft_trainer

    tok = byte_tokenizer()
    options = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False,
                   report_to="none", per_device_train_batch_size=2, max_steps=2, learning_rate=1e-2,
                   assistant_only_loss=True, max_length=2048, save_strategy="no", logging_steps=1, seed=0)
    args = SFTConfig(**{**options, **kw})
    return build_sft_trainer(tiny_llama(tok), tok, to_dataset(rows), args, peft_config=peft), tok


@pytest.fixture(scope="module")
def small_rows():
    return sft_rows(expert_records(CONFIG, [0], limit=2))


def test_two_sft_steps_change_the_weights_and_resume(small_rows, tmp_path):
    trainer, _ = _sft(tmp_path, small_rows, save_strategy="steps", save_steps=1)
    labels = trainer.get_train_dataloader().__iter__().__next__()
    assert "assistant_masks" in labels or (labels["labels"] == -100).any()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    again, _ = _sft(tmp_path, small_rows, max_steps=3)
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert again.state.global_step == 3


def test_lora_sft_saves_an_adapter_and_a_merged_model_the_backend_loads(small_rows, tmp_path):
    from membuilder.llm import load_chat_model
    from membuilder.llm.base import Sampling
    from membuilder.training.checkpoints import save_policy
    from membuilder.training.sft import lora_config

    trainer, tok = _sft(tmp_path, small_rows, peft=lora_config(r=4, alpha=8))
    lora = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert lora and all("lora" in n for n in lora)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if n in before)
    paths = save_policy(trainer.model, tok, tmp_path / "policy")
    config = tmp_path / "policy" / "adapter" / "adapter_config.json"
    assert config.exists()
    # an adapter carried to another machine names its base by a short name, not this machine's path
    from membuilder.training.checkpoints import set_adapter_base

    before = json.loads(config.read_text())
    assert set_adapter_base(config.parent, "smollm2-135m") and not set_adapter_base(config.parent, "smollm2-135m")
    assert json.loads(config.read_text()) == {**before, "base_model_name_or_path": "smollm2-135m"}
    model = load_chat_model({"model": paths["merged"], "backend": "transformers"})
    out = model.generate([[{"role": "user", "content": "hi"}]], Sampling(max_new_tokens=4))
    assert len(out) == 1


def test_end_of_turn_is_trained_although_smollm2_pads_with_it(tmp_path):
    """SmolLM2's pad token is its end-of-turn token (<|im_end|>, id 2). Padding must not mask
    the <|im_end|> that closes each expert reply: a policy that never learns it runs to the
    token limit."""
    from datasets import Dataset
    from trl import SFTConfig

    from membuilder.training.sft import build_sft_trainer
    from train.common import load_policy

    _, tok, _ = load_policy("smollm2-135m", "float32")
    assert tok.pad_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    rows = [{"messages": [{"role": "user", "content": "Remember a fact."},
                          {"role": "assistant", "content": '{"operation": "APPEND", "content": "x"}'}]},
            {"messages": [{"role": "user", "content": "Remember a much longer fact, it takes more tokens."},
                          {"role": "assistant", "content": '{"a": 1}'}]}]
    args = SFTConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, use_cpu=True, bf16=False,
                     report_to="none", save_strategy="no", assistant_only_loss=True, gradient_checkpointing=False)
    trainer = build_sft_trainer(tiny_llama(tok), tok, Dataset.from_list(rows), args)
    batch = next(iter(trainer.get_train_dataloader()))
    for ids, labels, row in zip(batch["input_ids"].tolist(), batch["labels"].tolist(), rows, strict=True):
        trained = tok.decode([i for i, lab in zip(ids, labels) if lab != -100])
        assert trained == row["messages"][-1]["content"] + "<|im_end|>"


def test_first_period_sessions_add_the_sessions_that_fill_memory_to_a_spread_pick():
    """A pick spread over every period takes a user's first two sessions of period 0, where the expert ADDs,
    and then sessions of change, where it edits; a policy trained on it UPDATEs a memory that holds nothing.
    ``first_period`` adds each user's first N sessions of period 0, and their rows are mostly ADDs."""
    from train.common import first_period_keep, session_periods

    periods = [0, 0, 0, 0, 1, 1, 2, 2]
    assert first_period_keep(periods, [0, 4, 6], 3) == [0, 1, 2, 4, 6]
    assert first_period_keep(periods, [0, 4, 6], 0) == [0, 4, 6]
    assert first_period_keep(periods, [0, 1, 4], 10) == [0, 1, 2, 3, 4]  # no more than period 0 holds
    assert first_period_keep([2, 2, 3], [2], 1) == [0, 2]  # the earliest period, whatever its number
    with pytest.raises(ValueError, match="first_period"):
        first_period_keep(periods, [0], -1)

    spread = expert_records(CONFIG, [0, 1], limit=3, pick="every_period")
    more = expert_records(CONFIG, [0, 1], limit=3, pick="every_period", first_period=3)
    ep = load_episodes(CONFIG)[0]
    first_three = [f"{ep.conversation.id}/{s.id}" for s, p in zip(ep.conversation.sessions, session_periods(ep))
                   if p == 0][:3]
    keys = [r["key"] for r in more]
    assert set(first_three) <= set(keys) and not set(first_three) <= {r["key"] for r in spread}
    assert {r["key"] for r in spread} < set(keys)
    same = {r["key"]: r for r in spread}
    assert all(r == same[r["key"]] for r in more if r["key"] in same)  # the spread pick's records are unchanged
    added = [r for r in more if r["key"] not in same]
    ops = [type(op).__name__ for r in added for op in parse("semantic", r["outputs"]["semantic"]).ops]
    assert ops and ops.count("Add") > len(ops) / 2
