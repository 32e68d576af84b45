"""Trained on the live view against trained on the published view, both judged with write_view live, paired over
the held-out sessions: what training on the live view buys beyond judging with it.
Run from the checkout: PYTHONPATH=. python results/ladder-told-live/compare.py results/ladder-told-live/compare.json"""
import json, sys
from pathlib import Path
from membuilder.plumbing.stats import bootstrap_ci, pooled_paired_difference
from memgym_env.world.types import session_id_period

LIVE = Path("results/ladder-told-live/work/eval")                      # trained and judged live
JUDGED = Path("results/ladder-told-adds-lr6e-5-every/live_view")       # trained on all, judged live
ALL = Path("results/ladder-told-adds-lr6e-5-every/work/eval")          # trained and judged on all


def load(path):
    d = json.loads(path.read_text())
    return d, dict(zip(d["session_keys"], d["session_rewards"]["evidence"]))


def paired(a, b):
    keys = [k for k in a if k in b]
    diff = [b[k] - a[k] for k in keys]
    later = [b[k] - a[k] for k in keys if session_id_period(k) != 0]
    return {"n": len(diff), "mean": round(sum(diff) / len(diff), 4), "ci": bootstrap_ci(diff),
            "later_n": len(later), "later_mean": round(sum(later) / len(later), 4), "later_ci": bootstrap_ci(later)}


rows = {}
sides = {"sft": ("sft.vllm.json", "sft-live.json", "sft.vllm.json")}
sides.update({f"grpo-{s}": (f"grpo-{s}.vllm.json", f"grpo{s}-live.json", f"grpo-{s}.vllm.json") for s in range(3)})
live_by_seed, judged_by_seed, sft_live = {}, {}, None
for label, (live_name, judged_name, all_name) in sides.items():
    if not (LIVE / live_name).exists():
        continue
    dl, live = load(LIVE / live_name)
    dj, judged = load(JUDGED / judged_name)
    _, published = load(ALL / all_name)
    rows[label] = {"trained_live": round(dl["reward"]["evidence"], 4), "trained_all_judged_live": round(dj["reward"]["evidence"], 4),
                   "trained_all_judged_all": round(sum(published.values()) / len(published), 4),
                   "live_minus_judged_live": paired(judged, live), "live_minus_published": paired(published, live),
                   "valid": dl["valid_rate"], "quoted": dl.get("quoted"), "quoted_judged_live": dj.get("quoted")}
    if label == "sft":
        sft_live = live
    else:
        live_by_seed[label] = live
        judged_by_seed[label] = judged
if sft_live and live_by_seed:
    rows["grpo_pooled_minus_sft_live"] = pooled_paired_difference({"sft": sft_live}, live_by_seed)
    rows["grpo_pooled_trained_live_minus_judged_live"] = pooled_paired_difference(judged_by_seed, live_by_seed)
print(json.dumps(rows, indent=1))
Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))
