"""Grounding of a memory writer's entries on a real dialogue it never trained on (LoCoMo conv-26).

    python bench/grounding_locomo.py                                  # shipped policy vs its base, 6 sessions
    python bench/grounding_locomo.py --writers smollm2-135m-memgym --sessions 19 --out /tmp/g.json

Each writer builds MemBuilder memory over the conversation's first N sessions, greedy, as
``memgym eval --system membuilder`` does (``--window-tokens``: a longer session window by window),
and every entry it writes is checked against the session, its time and the memory it was shown
(``membuilder.memory.grounding``: grounded when 70% of its content words are there), and against
the dialogue alone. Writes bench/results/grounding_locomo.json and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm.auto import tqdm  # noqa: E402

from membuilder.llm import load_chat_model  # noqa: E402
from membuilder.llm.embedders import load_embedder  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.plumbing.json_files import atomic_write_text, write_json  # noqa: E402
from memgym_env.benchmarks.grounding import ground_writer, invalid_phrases  # noqa: E402
from memgym_env.benchmarks.locomo import read_locomo  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10_conv-26.json"


def ground_spec(spec: str, sessions, embedder, max_new_tokens: int, view_k: int,
                window_tokens: int | None = None, max_prompt_tokens: int = 3840) -> dict:
    model = load_chat_model(spec)
    bar = tqdm(total=len(sessions), desc=spec, unit="session")
    try:
        return ground_writer(model, sessions, embedder, max_new_tokens=max_new_tokens, view_k=view_k,
                             max_prompt_tokens=max_prompt_tokens, window_tokens=window_tokens, progress=bar.update)
    finally:
        bar.close()
        close = getattr(model, "close", None)
        if callable(close):
            close()


def table(result: dict) -> str:
    lines = [f"LoCoMo {result['conversation']}, first {result['sessions']} sessions; entry grounded when >= 70% of its "
             "content words are in the session or the memory shown", "",
             "| writer | entries | grounded [95% CI] | in the dialogue alone [95% CI] | mean share | "
             "distinct with a capital never said | " + " | ".join(f"valid {a}" for a in AGENTS) + " |",
             "|---|---:|---|---|---:|---:|" + "---:|" * len(AGENTS)]

    def rate(a):
        return f"{a['grounded_rate']:.3f} [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}]" if a["ci"] else "-"

    for spec, r in result["writers"].items():
        a = r["all"]
        share = f"{a['mean_share']:.3f}" if a["mean_share"] is not None else "-"
        unsaid = (r.get("distinct") or {}).get("unsaid")
        named = f"{unsaid['entries']}/{r['distinct']['entries']}" if unsaid else "-"
        lines.append(f"| {spec} | {a['entries']} | {rate(a)} | {rate(r['dialogue']['all'])} | {share} | {named} | "
                     + " | ".join(f"{r['valid_rate'][x]:.2f}" for x in AGENTS) + " |")
    why = [f"- {spec}: " + "; ".join(p) for spec, r in result["writers"].items() if (p := invalid_phrases(r.get("invalid")))]
    return "\n".join(lines + (["", "Invalid outputs per agent and their commonest first errors:", "", *why] if why else []))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA), help="a LoCoMo JSON file (its first conversation is used)")
    p.add_argument("--writers", default="smollm2-135m-memgym,smollm2-135m", help="memory writers (model specs), comma-separated")
    p.add_argument("--sessions", type=int, default=6, help="first N sessions of the conversation")
    p.add_argument("--max-new-tokens", type=int, default=256, help="longest agent output")
    p.add_argument("--window-tokens", type=int, default=None,
                   help="write a session longer than this window by window, whole turns each (default: whole sessions)")
    p.add_argument("--max-prompt-tokens", type=int, default=3840, help="longest agent prompt")
    p.add_argument("--out", default="bench/results/grounding_locomo.json", help="JSON result; the table goes beside it")
    args = p.parse_args(argv)
    if args.sessions < 1:
        p.error("--sessions must be at least 1")
    conv = read_locomo(args.data)[0]
    sessions = conv.sessions[:args.sessions]
    embedder = load_embedder("minilm")
    t0 = time.perf_counter()
    result = {"conversation": conv.id, "sessions": len(sessions), "max_new_tokens": args.max_new_tokens,
              "window_tokens": args.window_tokens, "max_prompt_tokens": args.max_prompt_tokens,
              "writers": {spec: ground_spec(spec, sessions, embedder, args.max_new_tokens, 20, args.window_tokens,
                                            args.max_prompt_tokens)
                          for spec in args.writers.split(",") if spec},
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "load_average": [round(x, 2) for x in os.getloadavg()]}}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, result)
    atomic_write_text(out.with_suffix(".md"), table(result) + "\n")
    print(table(result))
    return result


if __name__ == "__main__":
    main()
