"""Write docs/configuration.md: every field of MemGym's config dataclasses, with type, default and meaning.

The meaning comes from the field's ``metadata["help"]`` or, failing that, the comment on its line
in the class source. Run it again whenever a config changes:

    .venv/bin/python scripts/config_reference.py            # writes docs/configuration.md
    .venv/bin/python scripts/config_reference.py --check    # exit 1 if the file is out of date
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "configuration.md"


def sections():
    from membuilder.training.adrpo import ADRPOConfig
    from memgym_env.benchmarks.runner import EvalConfig
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.demo.job import DemoSizes
    from memgym_env.interactive.runner import RunConfig
    from memgym_env.world.config import SessionQAConfig, WorldConfig
    from train.adrpo import ADRPOScriptArgs
    from train.common import BenchmarkEvalArgs, EnvArgs
    from train.grpo_plain_trl import PlainGRPOScriptArgs
    from train.ladder.settings import LadderArgs
    from train.sft import SFTScriptArgs

    return [
        ("World generator", WorldConfig, "configs/env/base.yaml; `memgym world generate --set NAME=VALUE`"),
        ("World: questions after each session", SessionQAConfig, "the `session_qa:` block of the world YAML"),
        ("MemoryGym-v0", ConstructionConfig, "configs/env/construction.yaml; `memgym rollout --config`"),
        ("Interactive evaluation", RunConfig, "`memgym evaluate --FIELD-NAME`"),
        ("Demo sizes", DemoSizes, "the presets of `memgym demo` (`--quick`, default, `--full`)"),
        ("Training: env and users", EnvArgs, "shared by train/sft.py and train/adrpo.py: an env config, its overrides, the users"),
        ("Training: benchmark evaluation", BenchmarkEvalArgs, "shared by train/sft.py and train/adrpo.py: a benchmark "
         "sample scored with the live policy every N steps; `benchmark_eval` takes the fields of EvalConfig below"),
        ("Benchmark evaluation", EvalConfig, "`memgym eval --FIELD-NAME`; the `benchmark_eval:` mapping of a training config"),
        ("Training: SFT", SFTScriptArgs, "train/sft.py, configs/train/sft_*.yaml (plus TRL's SFTConfig)"),
        ("Training: ADRPO", ADRPOScriptArgs, "train/adrpo.py, configs/train/adrpo_*.yaml (plus TRL's GRPOConfig)"),
        ("Training: ADRPO trainer", ADRPOConfig, "configs/train/adrpo_*.yaml; the trainer's options beside TRL's "
         "GRPOConfig fields, and the GRPOConfig defaults it changes"),
        ("Training: plain TRL GRPO", PlainGRPOScriptArgs, "train/grpo_plain_trl.py, configs/train/grpo_plain_trl_cpu.yaml "
                                                          "(plus TRL's GRPOConfig)"),
        ("Training ladder", LadderArgs, "configs/train/ladder_smollm2_cpu.yaml; `make ladder`"),
    ]


def comments(cls) -> dict[str, str]:
    """{field name: the comment on its line} from the class body."""
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+):[^#]*#\s*(.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def yaml_comments(where: str) -> dict[str, str]:
    """{key: comment} from the YAML file named first in ``where`` (the config files comment each key)."""
    m = re.match(r"(configs/\S+\.yaml)", where)
    path = ROOT / m.group(1) if m else None
    if path is None or not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        k = re.match(r"\s*(\w+):[^#]*#\s*(.+)$", line)
        if k:
            out[k.group(1)] = k.group(2).strip()
    return out


def written_type(cls, f: dataclasses.Field) -> str:
    """A field's annotation as the class writes it. Not ``f.type``: HfArgumentParser rewrites that in place once it
    has parsed the class (``str | None`` becomes ``str``), so the page would depend on what ran before it."""
    for klass in cls.__mro__:
        kind = inspect.get_annotations(klass).get(f.name)
        if kind is not None:
            return kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f"`{f.default_factory()!r}`"  # type: ignore[misc]
    return "required"


def reward_settings() -> list[str]:
    """The named reward settings: published (the defaults, what reproduces published numbers) and tracks_change."""
    from memgym_env.construction.config import REWARD_SETTINGS

    names = list(REWARD_SETTINGS)
    fields = list(REWARD_SETTINGS[names[0]])
    out = ["### Named reward settings (`REWARD_SETTINGS`)", "",
           "`published` is MemBuilder's reward as released and what reproduces published numbers; its retrieval "
           "view and attribution rule are the defaults (answer_mode's default, choice, asks the answerer model), "
           "and `configs/env/construction_cpu.yaml` sets it whole. `tracks_change` scores memory that follows the "
           "user's changes "
           "(`configs/env/construction_cpu_change.yaml`; docs/memorygym_v0.md, \"What the reward measures\").", "",
           "| field | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    out += [f"| `{f}` | " + " | ".join(f"`{REWARD_SETTINGS[n][f]}`" for n in names) + " |" for f in fields]
    return out + [""]


def render() -> str:
    lines = ["# Configuration reference", "",
             "Generated by `scripts/config_reference.py` from the config dataclasses; do not edit by hand.", ""]
    for title, cls, where in sections():
        parents = [b for b in cls.__bases__ if dataclasses.is_dataclass(b)]
        # a parent's field is listed again only where this class changes its default
        inherited = {f.name: default(f) for b in parents for f in dataclasses.fields(b)}
        notes = yaml_comments(where) | comments(cls)
        lines += [f"## {title}: `{cls.__module__}.{cls.__name__}`", "", f"Set in: {where}."]
        if parents:
            names = " and ".join(f"`{b.__name__}`" for b in parents)
            lines += ["", f"Also takes every field of {names}."]
        lines += ["", "| field | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if inherited.get(f.name) == default(f):
                continue
            meaning = f.metadata.get("help") or notes.get(f.name, "")
            kind = written_type(cls, f)
            lines.append(f"| `{f.name}` | `{kind}` | {default(f)} | {meaning.replace('|', '/')} |")
        lines.append("")
        if cls.__name__ == "ConstructionConfig":
            lines += reward_settings()
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'out of date; run scripts/config_reference.py'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
