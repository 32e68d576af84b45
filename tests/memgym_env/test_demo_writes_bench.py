"""bench/demo_writes.py on the demo comparison's first batch, cut small: generate against rows leaving the batch."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_writes_bench_times_three_ways_and_counts_rows_that_match_generate(tmp_path):
    spec = importlib.util.spec_from_file_location("demo_writes", ROOT / "bench" / "demo_writes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "demo_writes.json"
    assert bench.main(["--prompts", "2", "--new-tokens", "8", "--models", "smollm2-135m", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    r = result["models"]["smollm2-135m"]
    assert len(r["prompt_tokens"]) == 2 and min(r["prompt_tokens"]) > 300  # the held-out prompts, not a toy
    assert set(r["methods"]) == set(bench.METHODS)
    assert r["methods"]["rows_leave"]["same_tokens_as_generate"] == 2  # float32: the very same tokens
    assert r["methods"]["generate"]["speedup_over_generate"] == 1.0
    assert all(m["seconds"] > 0 and m["load_average"] >= 0 for m in r["methods"].values())
