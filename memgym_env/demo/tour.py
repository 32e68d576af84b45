"""``memgym demo --tour``: a tour of the memory bank on real LoCoMo sessions (no language model)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from membuilder.llm.embedders import load_embedder
from membuilder.memory import MemoryBank
from membuilder.memory.ops import Add, CoreAppend, CoreReplace, render_ops

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo10_conv-26.json"


def session_outputs(sample: dict, n: int) -> list[dict]:
    """The four agents' outputs for a session, written from LoCoMo's own annotations.

    LoCoMo annotates every session with dated events and per-speaker observations (each tied to
    the dialogue turn it came from). Rendered as agent operations they make a faithful expert
    memory, so the tour needs no language model.
    """
    conv = sample["conversation"]
    speakers = [conv.get("speaker_a", "A"), conv.get("speaker_b", "B")]
    out = []
    for i in range(1, n + 1):
        date = conv.get(f"session_{i}_date_time")
        if f"session_{i}" not in conv or date is None:
            break
        events = sample.get("event_summary", {}).get(f"events_session_{i}", {})
        observations = sample.get("observation", {}).get(f"session_{i}_observation", {})
        day = events.get("date") or date
        episodic = [Add(f"{day}: {ev} | Details: told by {who} in the conversation of {date}")
                    for who in speakers for ev in events.get(who, [])]
        semantic = [Add(f"{who}: {text} | Details: from turn {turn}") for who in speakers
                    for text, turn in observations.get(who, [])]
        core = (CoreAppend(f"Friends talking: {' and '.join(speakers)}. Last conversation: {date}.") if i == 1
                else CoreReplace(f"Last conversation: {conv[f'session_{i - 1}_date_time']}.", f"Last conversation: {date}."))
        out.append({
            "session": f"session_{i}",
            "time": date,
            "turns": len(conv[f"session_{i}"]),
            "outputs": {
                "core": render_ops("core", [core]),
                "episodic": render_ops("episodic", episodic),
                "semantic": render_ops("semantic", semantic),
                "procedural": render_ops("procedural", []),
            },
        })
    return out


def run_tour(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the tables when piped to a log, as in CI.
    console = Console(width=None if sys.stdout.isatty() else 150)
    if not args.data.exists():
        raise FileNotFoundError(f"{args.data}: LoCoMo file not found (pass --data)")
    if args.sessions < 1:
        raise ValueError("--sessions must be at least 1")
    sample = json.loads(args.data.read_text(encoding="utf-8"))[0]

    with console.status("loading the embedder (all-MiniLM-L6-v2, offline)"):
        t0 = time.perf_counter()
        bank = MemoryBank(load_embedder(args.embedder))
    console.print(f"embedder ready in {time.perf_counter() - t0:.1f}s")

    sessions = session_outputs(sample, args.sessions)
    written = Table(title=f"Writing {len(sessions)} sessions of LoCoMo {sample.get('sample_id', '')}")
    for col in ("session", "time", "turns", "core", "episodic +", "semantic +", "warnings"):
        written.add_column(col)
    for s in sessions:
        added, warnings = {}, 0
        for agent, text in s["outputs"].items():
            applied = bank.apply(agent, text, time=s["time"], session=s["session"])
            if not applied.valid:
                raise ValueError(f"{args.data}: {s['session']}: {agent} output rejected: {applied.errors}")
            added[agent] = len(applied.added_ids)
            warnings += len(applied.warnings)
        written.add_row(s["session"], s["time"], str(s["turns"]), f"{bank.core.usage:.1f}%",
                        str(added["episodic"]), str(added["semantic"]), str(warnings))
    console.print(written)
    console.print(f"[bold]Core[/bold] ({len(bank.core.text)} chars): {bank.core.text}")
    console.print(f"[bold]Entries[/bold]: {bank.counts()}")

    session_ids = {f"D{i}" for i in range(1, len(sessions) + 1)}
    asked = [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")
             and all(e.split(":")[0] in session_ids for e in q["evidence"])][: args.questions]
    hits_per_q = bank.retrieve_many([q["question"] for q in asked], k=10)
    shown = Table(title="Retrieval: top memory for questions about those sessions (top-10 over all types)")
    for col in ("question", "gold answer", "top memory", "score", "evidence in top-10"):
        shown.add_column(col, overflow="fold")
    for q, hits in zip(asked, hits_per_q):
        found = any(ev in h.entry.text for h in hits for ev in q["evidence"])
        top = hits[0] if hits else None
        shown.add_row(q["question"], str(q.get("answer")), top.entry.text if top else "-",
                      f"{top.score:.3f}" if top else "-", "yes" if found else "no")
    console.print(shown)

    path = bank.save(args.out / "bank")
    reloaded = MemoryBank.load(path, cache=bank.cache)
    same = all([h.id for h in a] == [h.id for h in b]
               for a, b in zip(hits_per_q, reloaded.retrieve_many([q["question"] for q in asked], k=10)))
    console.print(f"saved the bank to {path} ({len(reloaded)} entries); reloaded bank retrieves identically: {same}")
    if not same:
        raise RuntimeError("reloaded bank retrieved differently from the saved one")
    return 0
