"""The evaluation runner behind ``memgym eval``: build memory, answer, judge, score, report.

For each conversation with questions still to do: the system builds (or reloads) its memory
under ``<out>/memory/<conversation>``; the answerer answers the questions in batches from the
system's context; the judge grades the answers in batches; each finished item is appended to
``<out>/items.jsonl`` at once. ``<out>/run.json`` records the configuration before the first
item: a rerun with the same configuration skips what is done, so an interrupted run resumes
where it stopped; a rerun with a different configuration is refused (it would mix numbers). A
lock keeps a second run out of a folder in use. At the end: ``results.json`` (run facts, summary, every item),
``report.md`` (per-category table with counts) and ``plot.png``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from membuilder.agents.constructor import core_compressor
from membuilder.agents.membuilder_assistant import check_memory_view
from membuilder.llm import load_chat_model
from membuilder.llm import load_embedder as load
from membuilder.llm.base import Sampling
from membuilder.plumbing.json_files import load_json_file, loads_guarded, write_json
from memgym_env.benchmarks.peer_factory import make_peer
from memgym_env.benchmarks.peers import INFERRING_PEERS, PEER_SYSTEMS
from memgym_env.conversation import Conversation, QAItem

from . import load_benchmark
from .answering import answer_prompt
from .judge_check import check_judge, control_pairs, describe
from .judges import judge_batch, prompt_identity, prompt_name
from .locomo import LOCOMO_CATEGORIES
from .locomo_f1 import locomo_f1
from .memory_classification import classify
from .report import markdown, plot, print_table, summarize
from .retrieval_metrics import anchor_coverage, recall_at_k
from .systems import (
    SYSTEMS,
    Context,
    FullContext,
    MemBuilder,
    OracleEvidence,
    Rag,
    membuilder_session_builder,
)

log = logging.getLogger("memgym.eval")
LOCK_NAME = ".memgym-eval.lock"


@dataclass
class EvalConfig:
    benchmark: str = field(metadata={"help": "locomo | longmemeval | perltqa"})
    data: str = field(metadata={"help": "benchmark file (.json or .json.gz); PerLTQA: the memory file"})
    out: str = field(metadata={"help": "output folder (results, memory, report); reused to resume"})
    system: str = field(default="rag", metadata={"help": "membuilder | rag | full-context | oracle-evidence | mem0 | "
                                                         "mem0-infer | a-mem (peers need memgym[peers])"})
    model: str = field(default="smollm2-135m", metadata={"help": "memory constructor model (membuilder; the model "
                                                                  "behind mem0-infer and a-mem writes; unused by rag, "
                                                                  "full-context, oracle-evidence and mem0)"})
    answerer: str = field(default="smollm2-135m", metadata={"help": "answer model (every system)"})
    judge: str = field(default="smollm2-135m", metadata={"help": "judge model (every system)"})
    embedder: str = field(default="minilm", metadata={"help": "sentence embedder (rag, membuilder, mem0, mem0-infer, "
                                                               "a-mem; unused by full-context and oracle-evidence)"})
    qa_data: str | None = field(default=None, metadata={"help": "PerLTQA QA file (default: next to --data; "
                                                                "perltqa only)"})
    limit: int | None = field(default=None, metadata={"help": "evaluate only the first N questions, N >= 1 "
                                                              "(every system)", "min": 1})
    skip_bad: bool = field(default=False, metadata={"help": "skip malformed records with a counted warning "
                                                            "(every system)"})
    seed: int = field(default=0, metadata={"help": "sampling seed of the answer model (every system)"})
    batch_size: int = field(default=8, metadata={"help": "questions per generate call, >= 1 (every system; bounds "
                                                         "concurrent remote requests)", "min": 1})
    answer_k: int = field(default=10, metadata={"help": "entries retrieved for answering, >= 1 (membuilder, mem0, "
                                                        "mem0-infer, a-mem)", "min": 1})
    memory_view: str = field(default="all", metadata={
        "help": "membuilder only: what answers retrieve, all (every entry, including those an UPDATE or MERGE "
                "replaced, as MemBuilder is published) or live (replaced entries left out)"})
    rag_k: int = field(default=5, metadata={"help": "raw chunks retrieved, >= 1 (rag only)", "min": 1})
    recall_k: int = field(default=10, metadata={"help": "k of the retrieval recall@k metric, >= 1 (systems that "
                                                        "retrieve: rag, membuilder, mem0, mem0-infer, a-mem)",
                                                "min": 1})
    context_tokens: int = field(default=6000, metadata={"help": "history budget in answerer tokens, >= 1 "
                                                                "(full-context only)", "min": 1})
    construct_max_tokens: int = field(default=384, metadata={"help": "new tokens per memory-agent output, >= 1 "
                                                                      "(membuilder; per write of mem0-infer and "
                                                                      "a-mem)", "min": 1})
    construct_window_tokens: int | None = field(default=None, metadata={
        "help": "membuilder: write a session longer than this many tokens window by window, whole turns each, >= 1 "
                "(default: every session whole, as published; a policy trained on short sessions writes long ones "
                "better in windows of its training length: its card's setting.write_window_tokens)", "min": 1})
    peer_window: int = field(default=0, metadata={"help": "messages per inferred write, >= 0: mem0-infer (0: one "
                                                           "write per session), a-mem (0: one note per turn, as "
                                                           "published); unused by other systems", "min": 0})
    serve_context_length: int | None = field(default=None, metadata={
        "help": "context of the loopback server MemGym starts for mem0-infer / a-mem over a local --model "
                "(default: the model's own; a longer prompt is a refused write)", "min": 1})
    answer_max_tokens: int = field(default=64, metadata={"help": "new tokens per answer, >= 1 (every system)",
                                                         "min": 1})
    judge_max_tokens: int = field(default=24, metadata={"help": "new tokens per verdict, >= 1 (every system)",
                                                        "min": 1})
    judge_mode: str = field(default="auto", metadata={"help": "generate (parse the written verdict), logprob (likelier "
                                                              "verdict wins), calibrated (logprob with the margin cut "
                                                              "fitted on the judge check's controls), auto (logprob "
                                                              "for local models); every system"})
    judge_prompt: str = field(default="published", metadata={
        "help": "published (the benchmark's published judge criteria; LoCoMo: Mem0's generous J) or strict "
                "(LoCoMo only: our stricter prompt, not comparable with published J scores); every system"})
    judge_check: bool = field(default=True, metadata={"help": "grade known-right and known-wrong control answers "
                                                               "to see whether the judge can be trusted (every "
                                                               "system)"})

    def __post_init__(self) -> None:
        check_memory_view(self.memory_view)  # refused before the output folder is touched
        for f in fields(self):  # before any model loads: --batch-size 0 would fail only after it, --limit -1 run all
            low, value = f.metadata.get("min"), getattr(self, f.name)
            if low is not None and value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                                          or value < low):
                raise ValueError(f"--{f.name.replace('_', '-')} must be an integer >= {low}, got {value!r}")

    def judge_prompt_name(self) -> str:
        """The name of the judge prompt in ``judges.PROMPT_TEXTS`` (e.g. ``locomo``, ``locomo-strict``)."""
        return prompt_name(self.benchmark, self.judge_prompt)

    # Fields that change the numbers: a rerun must agree on all of them to reuse results.
    def fingerprint(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("out", "limit", "skip_bad", "batch_size", "judge_check"):
            d.pop(k)
        if self.system not in INFERRING_PEERS:  # settings only inferring peers read: older run folders stay valid
            for k in ("peer_window", "serve_context_length"):
                d.pop(k)
        if self.memory_view == "all":  # the default stays out, so run folders from before it still resume
            d.pop("memory_view")
        if self.construct_window_tokens is None:  # likewise
            d.pop("construct_window_tokens")
        # The data by content: a moved file still resumes, one changed in place does not.
        d["data"] = content_id(self.data)
        d["qa_data"] = content_id(self.qa_data) if self.qa_data else None
        return d


_HASHES: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime) -> "sha256:..."


def content_id(path: str) -> str:
    """``sha256:<hex>`` of a file's bytes (remembered while its size and mtime stay), or its resolved
    path when it does not exist (the run then fails reading it)."""
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError:
        return str(p)
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = "sha256:" + h.hexdigest()
    return _HASHES[key]


def _same_data(old: Any, new: Any, path: str | None) -> bool:
    """Run folders written before content hashes held the resolved path: that path, naming the
    file given now, still matches (and ``_check_resume`` rewrites it as the hash)."""
    if old == new:
        return True
    return (isinstance(old, str) and not old.startswith("sha256:") and path is not None
            and old == str(Path(path).resolve()))


def load_model(spec: str):
    """A ``ChatModel`` from a spec of membuilder's registry: a short name (``smollm2-135m``), a
    checkpoint path, ``vllm:...`` or ``openai:model@url`` (remote concurrency is bounded there), or
    a JSON mapping of the registry's mapping form with backend keywords, e.g.
    ``{"model": "vllm:smollm2-135m-memgym", "max_model_len": 4096}``."""
    if spec.lstrip().startswith("{"):
        try:
            mapping = json.loads(spec)
        except ValueError as exc:
            raise ValueError(f"model spec {spec[:200]!r} starts like a JSON mapping but is not one: {exc}") from exc
        if not isinstance(mapping, dict):
            raise ValueError(f"model spec {spec[:200]!r}: a JSON spec must be a mapping with a 'model' string")
        return load_chat_model(mapping)
    return load_chat_model(spec)


def load_embedder(spec: str):
    return load(spec)


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("memgym", "torch", "transformers", "sentence-transformers", "nltk", "faiss-cpu", "vllm", "openai",
                "mem0ai", "a-mem", "chromadb"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100]


class _Stage:
    """Wall time, token use and (given ``embedder``, a ``CountingEmbedder``) embedding calls of
    one stage (build, retrieve, answer, judge), summed over a run."""

    def __init__(self, totals: dict[str, dict[str, float]], name: str, model=None, embedder=None):
        self.t, self.name, self.model = totals.setdefault(name, {"wall_s": 0.0, "prompt_tokens": 0, "completion_tokens": 0}), name, model
        self.embedder = embedder if isinstance(embedder, CountingEmbedder) else None

    def __enter__(self):
        self.start = time.perf_counter()
        u = getattr(self.model, "usage", None)
        self.before = (u.prompt_tokens, u.completion_tokens, getattr(u, "prompts_cut", 0)) if u else (0, 0, 0)
        self.embeds = (self.embedder.calls, self.embedder.texts) if self.embedder else (0, 0)
        return self

    def __exit__(self, *exc):
        self.t["wall_s"] += time.perf_counter() - self.start
        u = getattr(self.model, "usage", None)
        if u:
            self.t["prompt_tokens"] += u.prompt_tokens - self.before[0]
            self.t["completion_tokens"] += u.completion_tokens - self.before[1]
            if getattr(u, "prompts_cut", 0) > self.before[2]:  # prompts shortened to fit the model's context
                self.t["prompts_cut"] = self.t.get("prompts_cut", 0) + u.prompts_cut - self.before[2]
        if self.embedder:
            self.t["embed_calls"] = self.t.get("embed_calls", 0) + self.embedder.calls - self.embeds[0]
            self.t["embedded_texts"] = self.t.get("embedded_texts", 0) + self.embedder.texts - self.embeds[1]


class CountingEmbedder:
    """An embedder with its ``encode`` calls and texts counted, for the run's cost report."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, 0

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def make_system(cfg: EvalConfig, models: dict[str, Any]):
    if cfg.system == "full-context":
        return FullContext(models["answerer"].count_tokens, cfg.context_tokens)
    if cfg.system == "oracle-evidence":
        return OracleEvidence()
    if cfg.system == "rag":
        return Rag(models["embedder"], k=cfg.rag_k)
    if cfg.system == "membuilder":
        return MemBuilder(membuilder_session_builder(models["model"], cfg.construct_max_tokens,
                                                     window_tokens=cfg.construct_window_tokens), models["embedder"],
                          k=cfg.answer_k, compressor=core_compressor(models["model"]),
                          live_only=cfg.memory_view == "live")
    if cfg.system in PEER_SYSTEMS:
        return make_peer(cfg, models)
    raise ValueError(f"unknown system {cfg.system!r}; expected one of {', '.join(SYSTEMS)}")


def _record(cfg: EvalConfig, conv: Conversation, item: QAItem, ctx: Context, answer: str, verdict) -> dict[str, Any]:
    r: dict[str, Any] = {
        "conversation": conv.id, "id": item.id, "category": item.category, "question": item.question,
        "gold": item.answer, "answer": answer, "correct": verdict.correct, "judge_output": verdict.raw,
        **({"judge_margin": round(verdict.margin, 4)} if verdict.margin is not None else {}),
        "evidence": item.evidence, "retrieved_ids": ctx.entry_ids,
        "evidence_retrieved": ctx.read, "written": ctx.written,
    }
    if cfg.benchmark == "locomo":
        r["category_name"] = LOCOMO_CATEGORIES[item.category]
        r["f1"] = locomo_f1(answer, item.answer, item.category)
        if "adversarial_answer" in item.meta:
            r["adversarial_answer"] = item.meta["adversarial_answer"]
    if cfg.benchmark == "longmemeval":
        r["abstention"] = bool(item.meta.get("abstention"))
    if ctx.entry_ids:  # only systems that retrieve have a recall
        r["recall_at_k"] = recall_at_k(ctx.hits, item.evidence, cfg.recall_k)
        if ctx.recall_level is not None:
            r["recall_level"] = ctx.recall_level
    if cfg.benchmark == "perltqa":
        r["anchor_coverage"] = anchor_coverage(answer, item.meta.get("anchors", []))
        r["anchor_coverage_context"] = anchor_coverage(ctx.memory, item.meta.get("anchors", []))
    if verdict.correct:
        r["diagnosis"] = "correct"
    elif ctx.written is not None:
        r["diagnosis"] = "write" if not ctx.written else "read" if not ctx.read else "answer"
    return r


def _check_resume(out: Path, cfg: EvalConfig) -> dict[str, Any]:
    """The folder's ``run.json`` if its configuration is this one; a new one if the folder holds
    no results. Results of an unknown or other configuration are refused (they would mix numbers)."""
    run_path, items_path = out / "run.json", out / "items.jsonl"
    if not run_path.exists():
        if items_path.exists() and items_path.stat().st_size:
            raise ValueError(f"{items_path} holds results but {run_path} is missing, so their configuration is "
                             "unknown; use a new --out folder (or delete items.jsonl to start over)")
        return {"config": cfg.fingerprint(), "invocations": []}
    try:
        run = load_json_file(run_path)  # depth- and size-guarded
        old = run["config"]
        if not isinstance(old, dict) or not isinstance(run.setdefault("invocations", []), list):
            raise TypeError("'config' must be an object and 'invocations' a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run_path}: not a run record memgym eval wrote ({type(exc).__name__}: {exc}); "
                         "use a new --out folder") from None
    new = cfg.fingerprint()
    for key in ("data", "qa_data"):  # an older folder's path becomes this file's content hash
        if old.get(key) != new.get(key) and _same_data(old.get(key), new.get(key), getattr(cfg, key)):
            old[key] = new[key]
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        changes = "; ".join(f"{k}: {repr(old.get(k))[:60]} there, {repr(new.get(k))[:60]} now" for k in diff)
        raise ValueError(f"{out} holds results of another configuration ({changes}); a rerun in the same "
                         "folder resumes only with identical settings: use a new --out folder")
    return run


def read_items(path: Path) -> dict[str, dict[str, Any]]:
    """Finished items of ``items.jsonl`` by id. A cut-off last line (a write interrupted by a kill)
    is dropped with a warning naming the file, and cut from the file so appends start clean; a
    damaged line elsewhere is an error naming file and line."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    data = path.read_bytes()
    lines = data.split(b"\n")
    offset = 0
    for n, line in enumerate(lines, 1):
        start, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            rec = loads_guarded(line, f"{path}, line {n}")
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise ValueError("not an item record with an 'id'")
        except ValueError as exc:
            if n == len(lines):  # no newline after it: the last write was cut off
                log.warning("%s: line %d is cut off (an interrupted write); dropped, its item is computed again",
                            path, n)
                with path.open("r+b") as fh:
                    fh.truncate(start)
                break
            raise ValueError(f"{path}, line {n}: damaged ({exc}); fix or delete the line, or use a new --out") from None
        done[rec["id"]] = rec
    else:
        if data and not data.endswith(b"\n"):
            with path.open("ab") as fh:
                fh.write(b"\n")
    return done


@contextmanager
def out_lock(out: Path):
    """Hold ``<out>/.memgym-eval.lock`` for the run: a second run on the same folder is refused
    with who holds it (the lock is the kernel's: it ends with the process, even a killed one)."""
    fh = (out / LOCK_NAME).open("a+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise ValueError(f"{out} is being written by another memgym eval ({holder}); wait for it to end "
                         "or use another --out folder") from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        fh.flush()
        yield
    finally:
        fh.seek(0)
        fh.truncate()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def evaluate(cfg: EvalConfig, models: dict[str, Any] | None = None, quiet: bool = False) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns the summary. ``models`` may pass ready objects
    under 'model', 'answerer', 'judge', 'embedder' (the training callback does).

    One run at a time per ``cfg.out`` (a lock); ``run.json`` is written before the first item,
    so a rerun of an interrupted folder with other settings is refused; 0 questions is an error."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    with out_lock(out):
        return _evaluate(cfg, out, models, quiet)


def _evaluate(cfg: EvalConfig, out: Path, models: dict[str, Any] | None, quiet: bool) -> dict[str, Any]:
    from tqdm import tqdm

    started = time.perf_counter()
    cfg.judge_prompt_name()  # an unknown --judge-prompt is refused before anything is written
    run = _check_resume(out, cfg)
    convs, problems = load_benchmark(cfg.benchmark, cfg.data, cfg.qa_data, cfg.skip_bad, limit=cfg.limit)
    selected: list[tuple[Conversation, QAItem]] = [(c, q) for c in convs for q in c.qa][: cfg.limit]
    if not selected:
        skipped = f"; {problems.count} bad records were skipped" if problems.count else ""
        raise ValueError(f"{cfg.data}: no questions to evaluate ({len(convs)} conversations{skipped}"
                         f"{', --limit ' + str(cfg.limit) if cfg.limit is not None else ''})")
    write_json(out / "run.json", run)  # the configuration, before the first item: a rerun is checked against it
    items_path = out / "items.jsonl"
    done = read_items(items_path)
    pending: dict[str, list[QAItem]] = {}
    by_id = {c.id: c for c in convs}
    for c, q in selected:
        if q.id not in done:
            pending.setdefault(c.id, []).append(q)
    n_pending = sum(len(v) for v in pending.values())
    stages: dict[str, dict[str, float]] = {}
    models = dict(models or {})
    if n_pending:
        _load_models(cfg, models, stages)
        check = _judge_check(cfg, run, models, stages, [q for _, q in selected])
        threshold = check.get("threshold") if check else None
        if cfg.judge_mode == "calibrated" and threshold is None:
            raise ValueError("--judge-mode calibrated: no control answers to calibrate on (no items with a gold "
                             "answer) or the judge gives no log-probabilities")
        if cfg.judge_mode == "calibrated" and any(r.get("judge_threshold") not in (None, threshold) for r in done.values()):
            raise ValueError(f"{out}: earlier items were judged with another calibrated threshold (the control "
                             "answers changed with --limit); use a new --out")
        system = make_system(cfg, models)
        builds: dict[str, Any] = {}
        bar = tqdm(total=n_pending, desc=f"{cfg.benchmark}/{cfg.system}", disable=quiet, unit="q")
        with items_path.open("a", encoding="utf-8") as sink:
            for conv_id, items in pending.items():
                conv = by_id[conv_id]
                with _Stage(stages, "build", models.get("model"), models.get("embedder")):
                    builds[conv_id] = system.build(conv, out / "memory" / _safe(conv_id))
                for i in range(0, len(items), cfg.batch_size):
                    batch = items[i:i + cfg.batch_size]
                    with _Stage(stages, "retrieve", None, models.get("embedder")):
                        contexts = system.contexts(conv, batch)
                    with _Stage(stages, "answer", models["answerer"]):
                        answers = _answer(cfg, models["answerer"], conv, batch, contexts)
                    with _Stage(stages, "judge", models["judge"]):
                        verdicts = judge_batch(models["judge"], cfg.judge_prompt_name(), batch, answers, cfg.judge_max_tokens,
                                               cfg.judge_mode, threshold=threshold)
                    kinds: list[str | None] = [None] * len(batch)
                    if cfg.benchmark == "perltqa":  # PerLTQA's memory classification, by the answer model
                        with _Stage(stages, "classify", models["answerer"]):
                            kinds = classify(models["answerer"], [it.question for it in batch], [conv.id] * len(batch))
                    for item, ctx, ans, v, kind in zip(batch, contexts, answers, verdicts, kinds, strict=True):
                        rec = _record(cfg, conv, item, ctx, ans, v)
                        if kind is not None:
                            rec["memory_kind_predicted"] = kind
                        if cfg.judge_mode == "calibrated":
                            rec["judge_threshold"] = threshold
                        done[item.id] = rec
                        sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    sink.flush()
                    bar.update(len(batch))
        bar.close()
        _add_peer_costs(stages, system)
        if hasattr(system, "close"):
            system.close()
        run["builds"] = {**run.get("builds", {}), **builds}
    _judge_check(cfg, run, models, stages, [q for _, q in selected])
    records = [done[q.id] for _, q in selected]
    summary = summarize(cfg.benchmark, records, run.get("judge_check"))
    run["invocations"].append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "items_computed": n_pending,
                               "items_reused": len(records) - n_pending, "stages": stages,
                               "wall_s": round(time.perf_counter() - started, 3),
                               "usage": {k: _usage(m) for k, m in models.items() if k != "embedder"},
                               "engines": {k: getattr(m, "engine", None) for k, m in models.items() if k != "embedder"}})
    run.update(versions=_versions(), skipped_records=problems.count, skipped_messages=problems.messages[:50],
               limit=cfg.limit, questions=len(records))
    write_json(out / "run.json", run)
    ident = prompt_identity(cfg.judge_prompt_name())
    run["judge_prompt"] = ident
    meta = {**cfg.fingerprint(), "limit": cfg.limit, "judge_prompt": f"{ident['name']} (sha256 {ident['sha256'][:12]})"}
    meta["data"] = f"{cfg.data} ({meta['data'][:19]})"
    write_json(out / "results.json", {"run": run, "summary": summary, "items": records})
    (out / "report.md").write_text(markdown(summary, meta) + _report_footer(run), encoding="utf-8")
    plot(summary, out / "plot.png")
    if not quiet:
        print_table(summary)
        print(f"wrote {out / 'results.json'}, {out / 'report.md'}, {out / 'plot.png'}")
    return summary


def _judge_check(cfg: EvalConfig, run: dict[str, Any], models: dict[str, Any], stages: dict[str, dict[str, float]],
                 items: list[QAItem]) -> dict[str, Any] | None:
    """The run's judge check (see ``judge_check``), computed once per set of control answers."""
    if not (cfg.judge_check or cfg.judge_mode == "calibrated"):
        return run.get("judge_check")
    expected = [p[0].id for p in control_pairs(items)]
    if (run.get("judge_check") or {}).get("controls") != expected:
        if "judge" not in models:
            t0 = time.perf_counter()
            models["judge"] = load_model(cfg.judge)
            stages.setdefault("load", {"wall_s": 0.0})["wall_s"] += time.perf_counter() - t0
        with _Stage(stages, "judge_check", models["judge"]):
            run["judge_check"] = check_judge(models["judge"], cfg.judge_prompt_name(), items, cfg.judge_max_tokens,
                                             cfg.judge_mode)
    return run["judge_check"]


def _load_models(cfg: EvalConfig, models: dict[str, Any], stages: dict[str, dict[str, float]]) -> None:
    """Load what the system needs; one object per distinct spec, so shared roles share weights."""
    t0 = time.perf_counter()
    by_spec: dict[str, Any] = {}
    roles = ["answerer", "judge"] + (["model"] if cfg.system in ("membuilder", *INFERRING_PEERS) else [])
    for role in roles:
        if role not in models:
            spec = getattr(cfg, role)
            if spec not in by_spec:
                by_spec[spec] = load_model(spec)
            models[role] = by_spec[spec]
    if cfg.system in ("rag", "membuilder", *PEER_SYSTEMS) and "embedder" not in models:
        models["embedder"] = CountingEmbedder(load_embedder(cfg.embedder))
    stages.setdefault("load", {"wall_s": 0.0})["wall_s"] += time.perf_counter() - t0


def _add_peer_costs(stages: dict[str, dict[str, float]], system) -> None:
    """A peer's own counts (its model calls, embeddings, failed writes), into the stages they belong to."""
    for stage, counts in (getattr(system, "costs", None) or {}).items():
        acc = stages.setdefault(stage, {"wall_s": 0.0})
        for k, v in counts.items():
            acc[k] = acc.get(k, 0) + v


def _answer(cfg: EvalConfig, answerer, conv: Conversation, items: list[QAItem], contexts: list[Context]) -> list[str]:
    prompts = [answer_prompt(ctx.memory, conv, it) for it, ctx in zip(items, contexts, strict=True)]
    outs = answerer.generate(prompts, Sampling(temperature=0.0, max_new_tokens=cfg.answer_max_tokens, seed=cfg.seed,
                                               stop=["\n\n", "\nQuestion:"]))
    return [o.text.strip() for o in outs]


def _usage(model) -> dict[str, Any] | None:
    u = getattr(model, "usage", None)
    return u.to_dict() if hasattr(u, "to_dict") else None


def _report_footer(run: dict[str, Any]) -> str:
    last = run["invocations"][-1]
    lines = ["", "## Run", "", f"- questions: {run['questions']} (computed now {last['items_computed']}, "
             f"reused {last['items_reused']}); skipped bad records: {run['skipped_records']}",
             *describe(run.get("judge_check"))]
    for name, st in last["stages"].items():
        toks = f", {int(st.get('prompt_tokens', 0))} prompt + {int(st.get('completion_tokens', 0))} completion tokens" \
            if st.get("prompt_tokens") or st.get("completion_tokens") else ""
        extra = "".join(f", {k.replace('_', ' ')} {v:g}" for k, v in st.items()
                        if k not in ("wall_s", "prompt_tokens", "completion_tokens") and isinstance(v, int | float) and v)
        lines.append(f"- stage {name}: {st['wall_s']:.1f} s{toks}{extra}")
    engines = {k: v for k, v in last.get("engines", {}).items() if v}
    if engines:  # what ran each model: transformers float32 / bfloat16, or vLLM
        lines.append("- engines: " + ", ".join(f"{k} {v}" for k, v in engines.items()))
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()))
    return "\n".join(lines) + "\n"
