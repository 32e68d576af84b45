"""Time the offline generation of the AMemGym base world (20 users) and write the figures.

    python bench/world_generation.py            # -> bench/results/world_generation.json

The issue's bar: under 10 s on a 2-core CPU. Import time (Faker, the catalog) is reported apart
from generation, and each figure is the best of a few runs so a busy machine does not mislead.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(repeats: int = 3) -> dict:
    t0 = time.perf_counter()
    from faker import Faker  # noqa: F401  (timed as part of the imports)

    from memgym_env.world.catalog import load_catalog
    from memgym_env.world.config import load_config
    from memgym_env.world.data_json import dumps_world
    from memgym_env.world.offline import generate_world
    from memgym_env.world.oracle import expert_steps
    from memgym_env.world.session_qa import session_qa
    from memgym_env.world.validate import world_issues

    load_catalog()
    imports_s = time.perf_counter() - t0
    cfg = load_config(ROOT / "configs" / "env" / "base.yaml")

    gen, text = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        world = generate_world(cfg)
        gen.append(time.perf_counter() - t)
        text = dumps_world(world)
    t = time.perf_counter()
    issues = world_issues(world)
    validate_s = time.perf_counter() - t
    t = time.perf_counter()
    steps = sum(len(expert_steps(u)) for u in world)
    expert_s = time.perf_counter() - t
    t = time.perf_counter()
    qa = sum(len(session_qa(u)) for u in world)
    qa_s = time.perf_counter() - t

    result = {
        "config": "configs/env/base.yaml",
        "users": len(world),
        "sessions": sum(len(p.sessions) for u in world for p in u.periods),
        "session_qa_items": qa,
        "expert_steps": steps,
        "valid": not issues,
        "file_bytes": len(text.encode("utf-8")),
        "imports_s": round(imports_s, 3),
        "generate_s_best": round(min(gen), 3),
        "generate_s_runs": [round(x, 3) for x in gen],
        "generate_plus_imports_s": round(min(gen) + imports_s, 3),
        "validate_s": round(validate_s, 3),
        "oracle_expert_s": round(expert_s, 3),
        "session_qa_s": round(qa_s, 3),
        "target_s": 10.0,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    out = ROOT / "bench" / "results" / "world_generation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
