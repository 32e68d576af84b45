"""Memory bank speed: retrieval latency, fork cost, and the price of scoring G forks at once.

    python bench/memory_bank.py [--sizes 1000 10000 100000] [--out bench/results/memory_bank.json]

Vectors are embedding-like rather than random: real MiniLM embeddings of LoCoMo turns, mixed
pairwise with a little noise, so neighbourhoods look like those of real memories. Queries are
embeddings of the LoCoMo questions. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from membuilder.llm.embedders import load_embedder
from membuilder.memory import EmbeddingCache, Entry, MemoryBank, retrieve_across
from membuilder.memory.ops import Add, CoreAppend, render_ops

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10_conv-26.json"
TYPES = ("episodic", "semantic", "procedural")


def locomo_texts() -> tuple[list[str], list[str]]:
    sample = json.loads(LOCOMO.read_text())[0]
    conv = sample["conversation"]
    turns = [t["text"] for key, v in conv.items() if key.startswith("session_") and isinstance(v, list) for t in v]
    questions = [q["question"] for q in sample["qa"]]
    return turns, questions


def embedding_like(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    i, j = rng.integers(0, len(base), n), rng.integers(0, len(base), n)
    noise = rng.standard_normal((n, base.shape[1])).astype(np.float32) / np.sqrt(base.shape[1])
    v = base[i] + 0.5 * base[j] + 0.3 * noise
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def build_bank(cache: EmbeddingCache, vectors: np.ndarray) -> tuple[MemoryBank, float]:
    bank = MemoryBank(cache=cache)
    entries = [Entry(f"m{i}", TYPES[i % 3], f"memory {i}") for i in range(len(vectors))]
    t = time.perf_counter()
    bank.add_entries(entries, vectors)
    bank.store.segments()
    return bank, time.perf_counter() - t


def ms(seconds: float) -> float:
    return round(1000 * seconds, 4)


def time_retrieval(bank: MemoryBank, queries: np.ndarray) -> list[float]:
    times = []
    for q in queries:
        t = time.perf_counter()
        bank.store.search(q[None, :], k=10)
        times.append(time.perf_counter() - t)
    return times


def recall_at_10(bank: MemoryBank, vectors: np.ndarray, queries: np.ndarray) -> float:
    got = bank.store.search(queries, k=10)
    scores = queries @ vectors.T
    truth = np.argsort(-scores, axis=1)[:, :10]
    return float(np.mean([len({int(h.id[1:]) for h in g} & set(t.tolist())) / 10 for g, t in zip(got, truth)]))


def time_fork(bank: MemoryBank, repeats: int = 200) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        bank.fork()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def group_cost(bank: MemoryBank, g: int, outputs: dict[str, str], questions: list[str], repeats: int) -> float:
    """Wall time to fork G candidates, apply one session's outputs to each, and answer 5 questions each."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        forks = [bank.fork() for _ in range(g)]
        for f in forks:
            for agent, text in outputs.items():
                f.apply(agent, text, time="2023-05-08", session="bench")
        retrieve_across([f for f in forks for _ in questions], questions * g, k=10)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "memory_bank.json"))
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    rng = np.random.default_rng(0)
    embedder = load_embedder("minilm")
    turns, questions = locomo_texts()
    base = embedder.encode(turns)
    query_vecs = embedder.encode(questions)[: args.queries]
    cache = EmbeddingCache(embedder)

    # One session's worth of agent outputs; their text is embedded up front, so the timings
    # measure the bank, not the embedder.
    new_texts = [f"2023-05-08: session event {i} | Details: detail {i}" for i in range(5)]
    facts = [f"Topic {i}: a fact learned in the session" for i in range(3)]
    outputs = {
        "core": render_ops("core", [CoreAppend("Prefers evening calls")]),
        "episodic": render_ops("episodic", [Add(t) for t in new_texts]),
        "semantic": render_ops("semantic", [Add(t) for t in facts]),
        "procedural": render_ops("procedural", [Add("Evening routine | Steps: 1. call mum 2. read | Context: weekdays")]),
    }
    session_questions = questions[:5]
    cache.embed(new_texts + facts + ["Evening routine | Steps: 1. call mum 2. read | Context: weekdays"] + session_questions)

    result: dict[str, object] = {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "dim": embedder.dim,
        "queries": len(query_vecs),
    }
    table = Table(title="Memory bank (k=10, all types, single query)")
    for col in ("entries", "build s", "p50 ms", "p99 ms", "recall@10", "fork ms", "G=8/G=1"):
        table.add_column(col, justify="right")

    for n in tqdm(args.sizes, desc="bank sizes"):
        vectors = embedding_like(base, n, rng)
        bank, build_s = build_bank(cache, vectors)
        times = time_retrieval(bank, query_vecs)
        label = f"{n // 1000}k"
        p50, p99 = statistics.median(times), float(np.percentile(times, 99))
        fork = time_fork(bank)
        recall = recall_at_10(bank, vectors, query_vecs[:100])
        g1 = group_cost(bank, 1, outputs, session_questions, repeats=15)
        g8 = group_cost(bank, 8, outputs, session_questions, repeats=15)
        result.update({
            f"retrieve_p50_ms_{label}": ms(p50),
            f"retrieve_p99_ms_{label}": ms(p99),
            f"recall_at_10_{label}": round(recall, 4),
            f"fork_ms_{label}": ms(fork),
            f"build_s_{label}": round(build_s, 3),
            f"g1_ms_{label}": ms(g1),
            f"g8_ms_{label}": ms(g8),
            f"g8_over_g1_{label}": round(g8 / g1, 3),
        })
        table.add_row(f"{n:,}", f"{build_s:.2f}", f"{1000 * p50:.3f}", f"{1000 * p99:.3f}", f"{recall:.3f}",
                      f"{1000 * fork:.4f}", f"{g8 / g1:.2f}")
    largest = f"{max(args.sizes) // 1000}k"
    result["g8_over_g1"] = result[f"g8_over_g1_{largest}"]
    result["targets"] = {"retrieve_p50_ms_100k": 5.0, "fork_ms_100k": 1.0, "g8_over_g1": 1.5}

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    Console().print(table)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
