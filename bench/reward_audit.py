"""What MemoryGym-v0's reward sees: the expert's trajectories of a world replayed under each reward setting.

    python bench/reward_audit.py                 # the ladder's CPU world, training users 0-7 -> bench/results/reward_audit.json
    python bench/reward_audit.py --users 0-15 --env-config configs/env/construction.yaml --out /tmp/audit.json

Writes (a) the share of sessions, among those where a variable a question needs changed, in which
the expert's UPDATEs made ADDs and its Core REPLACE made an APPEND lower the reward; (b) the dominant
memory under each attribution rule; (c) the rewards of writing nothing and of the expert per period
(``memgym_env.construction.audit``), as JSON and as a Markdown table beside it. No model is loaded
but the embedder: both settings answer without one. A few minutes on 2 cores.
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

from membuilder.plumbing.json_files import atomic_write_text, write_json  # noqa: E402
from memgym_env.construction.audit import audit, audit_table  # noqa: E402
from memgym_env.construction.config import REWARD_SETTINGS  # noqa: E402
from train.common import parse_users  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-config", default="configs/env/construction_cpu.yaml", help="MemoryGym-v0 config whose world is replayed")
    p.add_argument("--users", default="0-7", help="users (episodes), e.g. 0-7 (the ladder's training users) or 0,3")
    p.add_argument("--out", default="bench/results/reward_audit.json", help="JSON result; the table goes beside it (.md)")
    p.add_argument("--settings", default=",".join(REWARD_SETTINGS), help="reward settings to audit, comma-separated")
    args = p.parse_args(argv)
    users = parse_users(args.users)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in REWARD_SETTINGS]
    if unknown:
        p.error(f"--settings: unknown {unknown}; known: {list(REWARD_SETTINGS)}")
    t0 = time.perf_counter()
    bar = tqdm(desc="replay expert", unit="session")
    result = audit(args.env_config, users, settings=settings, progress=bar.update)
    bar.close()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, result)
    table = audit_table(result)
    atomic_write_text(out.with_suffix(".md"), table + "\n")
    print(table)
    print(f"\nwrote {out} and {out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
