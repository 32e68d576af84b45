"""MemGym's systems and the published peers side by side, under one protocol, in one command.

On LoCoMo conv-26 and the LongMemEval sample (``../shared/data``), every system builds its
memory per conversation and the same answerer and judge (``--answerer``, ``--judge``) answer and
grade from it, with the judge check on; each system and benchmark is an ordinary ``memgym eval``
folder under ``--out`` (rerun the command to resume). The table goes to stdout and to
``<out>/table.md``: judge accuracy with a 95% Wilson interval (computed here: ``memgym eval``
reports counts), LoCoMo token F1, recall@k, the judge check, and each system's build and
retrieval cost, summed over every invocation of its folder (a resumed run adds to the first),
with the embeddings its build made, ours and the peer's own ("failed writes": writes the
endpoint refused or whose model reply the peer could not parse, by the peer's own account:
Mem0 then stores nothing, A-Mem keeps the note without its keywords or skips its evolution).

    python bench/peers_side_by_side.py                       # everything (hours on 2 CPU cores)
    python bench/peers_side_by_side.py --systems rag,mem0 --locomo-limit 10 --lme-limit 1

``mem0-infer`` and ``a-mem`` write with ``--model`` through a loopback server; with SmolLM2
(8,192-token context) every Mem0 write is refused, its extraction prompt being longer, and
the table shows the refusals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.plumbing.stats import wilson
from memgym_env.benchmarks.runner import CountingEmbedder, EvalConfig, evaluate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BENCHMARKS = {"locomo": DATA / "locomo" / "locomo10_conv-26.json",
              "longmemeval": DATA / "longmemeval" / "longmemeval_s_sample.json"}
SYSTEMS = "rag,membuilder,mem0,mem0-infer,a-mem"



def row(bench: str, system: str, results: dict) -> dict:
    items, run, summary = results["items"], results["run"], results["summary"]
    scope = [i for i in items if bench != "locomo" or i.get("category") in (1, 2, 3, 4)]
    judged = [i for i in scope if i.get("correct") is not None]
    right = sum(bool(i["correct"]) for i in judged)
    lo, hi = wilson(right, len(judged)) or (math.nan, math.nan)
    head = summary.get("headline") or summary.get("overall") or {}
    check = run.get("judge_check") or {}
    stages = summed_stages(run)
    build, retrieve = stages.get("build", {}), stages.get("retrieve", {})
    builds = run.get("builds", {}).values()
    failed = sum(b.get(k, 0) for b in builds
                 for k in ("writes_refused", "writes_unparsed", "failed_analyses", "failed_evolutions"))
    return {"benchmark": bench, "system": system, "n": len(judged), "right": right,
            "acc": right / len(judged) if judged else None, "lo": lo, "hi": hi,
            "f1": head.get("f1"), "recall": head.get("recall_at_k"),
            "check": check.get("agreement"), "trusted": check.get("trusted"), "controls": check.get("n"),
            "build_s": build.get("wall_s"), "retrieve_s": retrieve.get("wall_s"),
            "build_tokens": int(build.get("prompt_tokens", 0) + build.get("completion_tokens", 0)),
            "build_embeds": int(build.get("embedded_texts", 0)),
            "memories": sum(b.get("memories", b.get("chunks", 0)) or 0 for b in builds),
            "failed_writes": failed}


def summed_stages(run: dict) -> dict[str, dict[str, float]]:
    """Each stage's wall time, tokens and embeddings over every invocation (a run resumed after
    its build spends nothing on it in the last invocation)."""
    out: dict[str, dict[str, float]] = {}
    for inv in run.get("invocations") or []:
        for name, counts in (inv.get("stages") or {}).items():
            acc = out.setdefault(name, {})
            for k, v in counts.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    acc[k] = acc.get(k, 0) + v
    return out


def pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def table(rows: list[dict]) -> str:
    head = ("| benchmark | system | judged | judge acc % [95% CI] | F1 % | recall@k % | judge check | build s | "
            "retrieve s | build tokens | build embedded texts | memories | failed writes |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        check = "-" if r["check"] is None else \
            f"{pct(r['check'])}% of {r['controls']} ({'trusted' if r['trusted'] else 'not trusted'})"
        lines.append(f"| {r['benchmark']} | {r['system']} | {r['n']} | {pct(r['acc'])} [{pct(r['lo'])}, "
                     f"{pct(r['hi'])}] | {pct(r['f1'])} | {pct(r['recall'])} | {check} | {r['build_s'] or 0:.0f} | "
                     f"{r['retrieve_s'] or 0:.1f} | {r['build_tokens']} | {r['build_embeds']} | {r['memories']} | "
                     f"{r['failed_writes']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default=SYSTEMS, help=f"comma list (default: {SYSTEMS})")
    ap.add_argument("--benchmarks", default="locomo,longmemeval")
    ap.add_argument("--locomo-limit", type=int, default=None, help="first N questions of conv-26 (default: all 199)")
    ap.add_argument("--lme-limit", type=int, default=None, help="first N LongMemEval questions (default: all 3)")
    ap.add_argument("--model", default="smollm2-135m", help="memory writer of membuilder, mem0-infer and a-mem")
    ap.add_argument("--answerer", default="smollm2-135m")
    ap.add_argument("--judge", default="smollm2-135m")
    ap.add_argument("--construct-max-tokens", type=int, default=384)
    ap.add_argument("--peer-window", type=int, default=0, help="see memgym eval --peer-window")
    ap.add_argument("--out", default="runs/peers")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    threads = 1 if (os.cpu_count() or 1) <= 2 else None  # one torch thread is faster on a shared 2-core machine
    kw = {"threads": threads} if threads else {}
    loaded: dict[str, object] = {}
    for spec in {args.model, args.answerer, args.judge}:
        loaded[spec] = load_chat_model(spec, **kw)
    models = {"answerer": loaded[args.answerer], "judge": loaded[args.judge], "model": loaded[args.model],
              "embedder": CountingEmbedder(load_embedder("minilm"))}
    text = ""
    for bench in args.benchmarks.split(","):
        limit = args.locomo_limit if bench == "locomo" else args.lme_limit
        for system in args.systems.split(","):
            out = Path(args.out) / bench / system
            cfg = EvalConfig(benchmark=bench, data=str(BENCHMARKS[bench]), out=str(out), system=system,
                             model=args.model, answerer=args.answerer, judge=args.judge, limit=limit,
                             construct_max_tokens=args.construct_max_tokens, peer_window=args.peer_window)
            started = time.perf_counter()
            evaluate(cfg, models=dict(models), quiet=True)
            print(f"{bench}/{system}: done in {time.perf_counter() - started:.0f} s", flush=True)
            text = collected(Path(args.out))
            (Path(args.out) / "table.md").write_text(text + "\n")
    print(text)
    return 0


def collected(out: Path) -> str:
    """The table of every finished run under ``out`` (this invocation's and earlier ones')."""
    rows = []
    for bench in BENCHMARKS:
        for system in SYSTEMS.split(","):
            path = out / bench / system / "results.json"
            if path.exists():
                rows.append(row(bench, system, json.loads(path.read_text())))
    return table(rows)


if __name__ == "__main__":
    raise SystemExit(main())
