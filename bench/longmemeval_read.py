"""Streaming a LongMemEval-S-sized file: ijson's C backend against its pure-Python one.

LongMemEval-S (499 questions, about 257 MB) is not shipped here, so the benchmark writes a file
of the same size from the shared sample's records (``../shared/data/longmemeval``, 3 records of
about 0.5 MB each, repeated with new question ids) and reads it back record by record, as
``memgym eval --benchmark longmemeval`` does (``memgym_env.benchmarks.loading.iter_json_list``),
once with each backend.

    python bench/longmemeval_read.py [--records 499]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_sample.json"


def write_file(path: Path, records: int) -> int:
    sample = json.loads(SAMPLE.read_text())
    with path.open("w", encoding="utf-8") as fh:
        fh.write("[")
        for i in range(records):
            rec = dict(sample[i % len(sample)], question_id=f"bench_{i:04d}")
            fh.write(("," if i else "") + json.dumps(rec))
        fh.write("]")
    return path.stat().st_size


def read_with(backend_name: str, path: Path) -> tuple[float, int]:
    import ijson

    import memgym_env.benchmarks.loading as loading

    chosen = ijson.get_backend(backend_name)
    original = loading.json_stream_backend
    loading.json_stream_backend = lambda: chosen  # the reader's own code, with this backend
    try:
        started = time.perf_counter()
        count = sum(1 for _ in loading.iter_json_list(path))
        return time.perf_counter() - started, count
    finally:
        loading.json_stream_backend = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=499)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "longmemeval_read.json"))
    args = parser.parse_args()
    from memgym_env.benchmarks.loading import json_stream_backend

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "longmemeval_s_like.json"
        size = write_file(path, args.records)
        timings = {}
        for name in ("yajl2_c", "python"):
            seconds, count = read_with(name, path)
            timings[name] = round(seconds, 2)
            print(f"{name:8s} {count} records, {size / 1e6:.0f} MB in {seconds:.1f} s", flush=True)
    result = {"file_mb": round(size / 1e6, 1), "records": args.records, "seconds": timings,
              "c_over_python": round(timings["python"] / timings["yajl2_c"], 1),
              "default_backend": json_stream_backend().backend, "load_average_at_end": list(os.getloadavg())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
