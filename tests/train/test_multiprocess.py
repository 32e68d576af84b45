"""ADRPO in two processes (``accelerate launch --multi_gpu --num_processes 2``, gloo on the CPU),
on a tiny random Llama and a two-user MemoryGym-v0 world scored by the env scorer.

Three runs of ``train/adrpo.py`` go at once, each writing its ``rollout_log`` (one JSON line per
scored completion, one file per process):

* two processes, sampled: every process's rollout batch holds whole sessions (4 agents x G of
  one session key), each completion carries the reward and weight the scorer gives for its own
  rollout, and its advantage is the GRPO advantage of those rewards within its group;
* two processes and one process, greedy, same sessions and weights: the same completions get the
  same rewards and weights.

Random 8-byte outputs are never valid memory JSON, so the env scorer gives every agent 0 and
weight 1. The script under test therefore runs with ``TextScorer``: the env scorer's result plus
a term that hashes the session, the agent's own output and its whole rollout, and a weight alpha
for a searchable agent picked by hash. A completion paired with the wrong row, rollout, session
or process cannot get the same reward or weight by accident.

Run as a script, this file is ``train/adrpo.py`` with that scorer (see the bottom).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import zlib
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("trl")

from membuilder.memory.ops import AGENTS, SEARCHABLE_AGENTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ALPHA = 4.0
G = 2
ENV = {"world_overrides": {"num_users": 2, "num_periods": 1}, "answer_mode": "evidence", "alpha": ALPHA}


def _unit(text: str) -> float:
    return zlib.crc32(text.encode("utf-8")) / 2**32


def text_terms(session_key: str, candidate: dict[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    """Rewards that depend on the session, the agent's own output and the whole rollout; weight
    alpha for the searchable agent whose output hashes highest."""
    own = {a: _unit(f"{session_key}|{a}|{candidate[a]}") for a in AGENTS}
    rollout = _unit("|".join(candidate[a] for a in AGENTS))
    dominant = max(SEARCHABLE_AGENTS, key=lambda a: own[a])
    return ({a: own[a] + rollout for a in AGENTS}, {a: ALPHA if a == dominant else 1.0 for a in AGENTS})


class TextScorer:
    """The run's own scorer (the env's) with ``text_terms`` added to its rewards and weights."""

    def __init__(self, inner):
        self.inner = inner
        self.reward_density = inner.reward_density

    def session_keys(self):
        return self.inner.session_keys()

    def observation(self, session_key):
        return self.inner.observation(session_key)

    def score(self, session_key, candidates, *, task_rewarded=True):
        out = []
        for cand, base in zip(candidates, self.inner.score(session_key, candidates, task_rewarded=task_rewarded),
                              strict=True):
            rewards, weights = text_terms(session_key, cand)
            out.append(dataclasses.replace(
                base, agent_rewards={a: base.agent_rewards[a] + rewards[a] for a in AGENTS},
                weights={a: base.weights[a] * weights[a] for a in AGENTS}))
        return out


# ---- the runs ------------------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _launch(out: Path, processes: int, port: int, tiny: str, *extra: str) -> subprocess.Popen:
    out.mkdir(parents=True)
    args = ["--model_name_or_path", tiny, "--output_dir", str(out / "run"), "--rollout_log", str(out / "rollouts"),
            "--scorer", "env", "--env_overrides", json.dumps(ENV), "--users", "0-1", "--max_sessions_per_user", "1",
            "--use_cpu", "true", "--bf16", "false", "--dtype", "float32", "--gradient_checkpointing", "false",
            "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--seed", "0",
            "--num_generations", str(G), "--max_completion_length", "8", "--max_prompt_tokens", "1024",
            "--beta", "0", *extra]
    if processes == 1:
        cmd = [sys.executable, __file__, *args]
    else:  # accelerate's --cpu starts a single process (it needs mpirun for more); --multi_gpu starts
        # torch.distributed workers, which pick gloo on the CPU because the script runs with --use_cpu
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(port), __file__, *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=(out / "log.txt").open("w"), stderr=subprocess.STDOUT)


def _rows(out: Path, processes: int) -> list[dict]:
    files = sorted(out.glob("rollouts.*.jsonl"))
    assert [f.name for f in files] == [f"rollouts.{p}.jsonl" for p in range(processes)]
    rows = [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines()]
    assert rows and {r["num_processes"] for r in rows} == {processes} and {r["mode"] for r in rows} == {"train"}
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Rollout logs of the three runs, started together: {name: rows}."""
    from membuilder.training.tiny import byte_tokenizer, tiny_llama

    tmp = tmp_path_factory.mktemp("multiprocess")
    tiny = tmp / "tiny"
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(tiny)
    tok.save_pretrained(tiny)
    greedy = ["--generation_kwargs", json.dumps({"do_sample": False}), "--learning_rate", "0",
              "--per_device_train_batch_size", str(len(AGENTS) * G)]
    ports = _free_ports(2)
    # sampled: a rollout batch of 4 x 2 rows per process, one session, cut into two loss steps
    layout = {"sampled2": (2, ports[0], ["--temperature", "1.0", "--top_p", "1.0", "--learning_rate", "1e-3",
                                         "--per_device_train_batch_size", str(len(AGENTS) * G // 2),
                                         "--gradient_accumulation_steps", "2", "--max_steps", "2"]),
              # greedy: both sessions in one step over two processes, or one per step in one process
              "greedy2": (2, ports[1], [*greedy, "--max_steps", "1"]),
              "greedy1": (1, 0, [*greedy, "--max_steps", "2"])}
    started = time.perf_counter()
    procs = {name: _launch(tmp / name, n, port, str(tiny), *extra) for name, (n, port, extra) in layout.items()}
    try:
        for name, proc in procs.items():
            rc = proc.wait(timeout=600)
            assert rc == 0, f"{name} failed:\n" + (tmp / name / "log.txt").read_text()[-6000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    print(f"three ADRPO runs in {time.perf_counter() - started:.0f} s")
    return {"_dir": tmp, **{name: _rows(tmp / name, n) for name, (n, _, _) in layout.items()}}


def _batches(rows: list[dict]) -> dict[tuple[int, int], list[dict]]:
    """Rows per (rollout batch, process), in the order the process scored them."""
    out: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in rows:
        out[r["batch"], r["process"]].append(r)
    return out


def _assert_whole_sessions(rows: list[dict], processes: int, sessions_per_process: int) -> set[str]:
    batches = _batches(rows)
    for b in {b for b, _ in batches}:
        seen: set[str] = set()
        for p in range(processes):
            batch = batches[b, p]
            keys = {r["session_key"] for r in batch}
            assert len(keys) == sessions_per_process, (b, p, keys)
            assert not keys & seen, f"batch {b}: sessions {keys & seen} in two processes"
            seen |= keys
            for key in keys:
                cells = sorted((r["agent"], r["k"]) for r in batch if r["session_key"] == key)
                assert cells == sorted((a, k) for a in AGENTS for k in range(G)), (b, p, key, cells)
    return {r["session_key"] for r in rows}


def test_each_process_scores_whole_sessions_and_weights_follow_their_completions(runs):
    rows = runs["sampled2"]
    keys = _assert_whole_sessions(rows, processes=2, sessions_per_process=1)
    assert len(keys) == 2 and len({r["batch"] for r in rows}) == 2  # two steps, both sessions each step
    assert {r["process"] for r in rows} == {0, 1}
    for (b, p), batch in _batches(rows).items():
        for key in {r["session_key"] for r in batch}:
            cell = {(r["agent"], r["k"]): r for r in batch if r["session_key"] == key}
            for k in range(G):
                rewards, weights = text_terms(key, {a: cell[a, k]["completion"] for a in AGENTS})
                for a in AGENTS:
                    r = cell[a, k]
                    assert r["reward"] == pytest.approx(rewards[a], abs=1e-9), (b, p, key, a, k)
                    assert r["weight"] == weights[a], (b, p, key, a, k)
            for a in AGENTS:  # TRL's slice of the gathered advantages is this process's rows
                group = [cell[a, k]["reward"] for k in range(G)]
                mean = sum(group) / G
                std = (sum((x - mean) ** 2 for x in group) / (G - 1)) ** 0.5
                for k in range(G):
                    assert cell[a, k]["advantage"] == pytest.approx((group[k] - mean) / (std + 1e-4), abs=1e-3)
    # the check has teeth: sampled completions differ, and weights other than 1 occur
    assert len({r["completion"] for r in rows}) > len(rows) // 2
    assert {r["weight"] for r in rows} == {1.0, ALPHA}
    assert sum(abs(r["advantage"]) > 0.1 for r in rows) > len(rows) // 2


def test_two_processes_train_one_model(runs):
    """Gradients are averaged over the processes, the shared-prompt loss included: after two updates from
    different sessions both processes hold the same weights, and they moved."""
    out = runs["_dir"] / "sampled2" / "run"
    first, second = (json.loads((out / f"weights.{p}.json").read_text()) for p in (0, 1))
    start = json.loads((runs["_dir"] / "greedy1" / "run" / "weights.0.json").read_text())  # learning rate 0
    assert first.keys() == second.keys() == start.keys()
    assert all(first[n] == pytest.approx(second[n], rel=1e-6, abs=1e-6) for n in first)
    assert any(first[n] != pytest.approx(start[n], rel=1e-6, abs=1e-6) for n in first)


def test_two_processes_reward_the_same_sessions_as_one(runs):
    two, one = runs["greedy2"], runs["greedy1"]
    assert _assert_whole_sessions(two, processes=2, sessions_per_process=1) == \
        _assert_whole_sessions(one, processes=1, sessions_per_process=1)

    def by_cell(rows):
        return {(r["session_key"], r["agent"], r["k"]): (r["completion"], r["reward"], r["weight"]) for r in rows}

    assert by_cell(two) == by_cell(one)
    assert len(by_cell(one)) == 2 * len(AGENTS) * G
    assert len({reward for _, reward, _ in by_cell(one).values()}) == 2 * len(AGENTS)  # G identical per greedy row
    assert set(runs["greedy2"][0]) >= {"step", "batch", "process", "task_rewarded", "advantage"}


if __name__ == "__main__":  # train/adrpo.py with TextScorer around its scorer
    sys.path.insert(0, str(ROOT))
    from train import adrpo

    make_scorer = adrpo.make_scorer
    adrpo.make_scorer = lambda script, users: TextScorer(make_scorer(script, users))
    trainer = adrpo.main(sys.argv[1:])
    # each process's weights after training, to check that the processes trained one model
    import torch

    with torch.no_grad():
        sums = {n: float(p.double().sum()) for n, p in trainer.accelerator.unwrap_model(trainer.model).named_parameters()}
    Path(trainer.args.output_dir, f"weights.{trainer.accelerator.process_index}.json").write_text(json.dumps(sums))
