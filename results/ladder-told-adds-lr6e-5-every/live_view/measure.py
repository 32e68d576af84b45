"""Held-out evaluation of trained policies with the writers' view drawn from live entries only
(write_view: live), paired with the committed evaluation of the same policy under the published view (all).
Run from the writer-view checkout: python live_view_eval.py OUT_DIR LABEL=POLICY:ALL_VIEW_JSON ..."""
import json, sys
from pathlib import Path
from membuilder.plumbing.stats import bootstrap_ci
from memgym_env.world.types import session_id_period
from train.ladder.settings import parse_args
from train.ladder.evaluator import Evaluator

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
a = parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml",
                "--env_config", "configs/env/construction_cpu_change_told.yaml",
                "--set", "env_overrides.write_view=live"])
ev = Evaluator(a, out)
rows = {}
for spec in sys.argv[2:]:
    label, rest = spec.split("=", 1)
    policy, all_json = rest.split(":", 1)
    path = out / f"{label}-live.json"
    if path.exists():
        live = json.loads(path.read_text())
    else:
        live = ev.with_baselines(ev(policy, label))
        path.write_text(json.dumps(live))
    base = json.loads(Path(all_json).read_text())
    assert base["session_keys"] == live["session_keys"], "different held-out sessions"
    ra, rl = base["session_rewards"]["evidence"], live["session_rewards"]["evidence"]
    diff = [y - x for x, y in zip(ra, rl)]
    later = [d for d, k in zip(diff, live["session_keys"]) if session_id_period(k) != 0]
    rows[label] = {"all": sum(ra) / len(ra), "live": sum(rl) / len(rl), "n": len(diff),
                   "live_minus_all": sum(diff) / len(diff), "ci": bootstrap_ci(diff),
                   "later_minus_all": sum(later) / len(later), "later_ci": bootstrap_ci(later), "later_n": len(later),
                   "valid_all": base["valid_rate"], "valid_live": live["valid_rate"],
                   "quoted_all": base.get("quoted"), "quoted_live": live.get("quoted")}
    r = rows[label]
    print(f"{label}: all {r['all']:.3f} live {r['live']:.3f}; live-all {r['live_minus_all']:+.3f} "
          f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}] over {r['n']}; later periods {r['later_minus_all']:+.3f} "
          f"[{r['later_ci'][0]:+.3f}, {r['later_ci'][1]:+.3f}] over {r['later_n']}", flush=True)
(out / "summary.json").write_text(json.dumps(rows, indent=1))
