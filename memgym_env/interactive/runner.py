"""The interactive evaluation runner behind ``memgym evaluate``: every user, every period.

A run folder holds ``run.json`` (what was run), and per user and period
``users/<user>/period_<pp>/`` with ``interactions.json`` (every session's messages),
``state/`` (the assistant's memory after the period) and ``evaluation.json`` (answers, probes,
upper bound, factual recall, model usage), written last: a period with ``evaluation.json`` is
done. Running the same command again resumes after the last finished period of each user.

Off-policy (``replay``): the user and assistant turns come from another run's interactions (or,
with ``"world"``, from the world's recorded sessions); the assistant only observes them.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membuilder.agents.assistants import NEEDS_EMBEDDER, make_assistant
from membuilder.agents.membuilder_assistant import WRITE_PROMPT_TOKENS, check_memory_view
from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.llm.registry import TRAINED_POLICY, constructor_spec, policy_setting
from membuilder.plumbing.json_files import write_json
from memgym_env.interactive import evolution
from memgym_env.interactive.checks import (
    evidence_overlap_flags,
    factual_recall_flags,
    period_facts,
    readable_state,
    upper_bound,
    upper_bound_table,
)
from memgym_env.interactive.env import MESSAGE, InteractiveEnv
from memgym_env.interactive.results import collect_results, write_report
from memgym_env.interactive.run_files import RUN_FILE, finished_periods, period_dir
from memgym_env.interactive.simulator import ReplaySimulator, make_simulator
from memgym_env.world.types import World, WorldUser

IDENTITY = ("world_digest", "assistant", "model", "constructor", "simulator", "replay", "seed", "assistant_options",
            "evolve")


@dataclass
class RunConfig:
    world: str = field(metadata={"help": "world file (data.json format, e.g. from `memgym world generate`)"})
    assistant: str = field(metadata={"help": "native, rag, awe, awi, membuilder, oracle, mem0, mem0-infer or a-mem (the last three: memgym[peers]); "
                                             "a comma list runs each into OUT/<name>"})
    out: str = field(metadata={"help": "run folder (resumed when it exists)"})
    model: str = field(default="smollm2-135m", metadata={"help": "chat model spec of the assistant, answerer and checker"})
    policy_model: str = field(default=TRAINED_POLICY, metadata={
        "help": "membuilder's memory constructor where --model is SmolLM2-135M: the trained policy, or "
                "smollm2-135m for the untrained base (any other --model constructs with itself)"})
    embedder: str = field(default="minilm", metadata={"help": "embedder spec (rag, awe, membuilder; mem0, mem0-infer and a-mem load this local model themselves)"})
    simulator: str = field(default="template", metadata={"help": "user simulator: template (offline) or llm (the model)"})
    replay: str | None = field(default=None, metadata={"help": "off-policy: a run folder whose interactions to feed, or 'world'"})
    users: int | None = field(default=None, metadata={"help": "only the first N users"})
    seed: int = field(default=0, metadata={"help": "seed of random choices and template follow-ups"})
    reply_tokens: int = field(default=48, metadata={"help": "longest assistant reply"})
    write_tokens: int | None = field(default=None, metadata={
        "help": "longest memory-writing output (awe, awi, membuilder, mem0-infer, a-mem); default 128, and for "
                "membuilder writing with a packaged policy the output limit on its card (the length it was trained "
                "to write within: shorter, its JSON is cut and nothing is written)"})
    write_prompt_tokens: int = field(default=WRITE_PROMPT_TOKENS, metadata={
        "help": "longest membuilder memory-writing prompt; longer ones lose memory-view entries first. Keep "
                "write_prompt_tokens + write_tokens within the writing model's context (vLLM: its max_model_len)"})
    write_window_tokens: int | None = field(default=None, metadata={
        "help": "membuilder: write a session longer than this many tokens window by window, whole turns each; "
                "default: the window on a packaged policy's card (the session length it was trained on), else "
                "every session whole, as published"})
    memory_view: str = field(default="all", metadata={
        "help": "what membuilder's answers retrieve (other assistants ignore it): all (every entry, including "
                "those an UPDATE or MERGE replaced, as MemBuilder is published) or live (replaced entries left out)"})
    write_view: str = field(default="all", metadata={
        "help": "what membuilder's memory agents see of their own memory: all (replaced entries too, as published) "
                "or live (replaced entries left out); a policy trained in MemoryGym-v0 with write_view live is "
                "evaluated with live"})
    context_tokens: int = field(default=1024, metadata={"help": "most tokens of memory text in a prompt"})
    top_k: int | None = field(default=None, metadata={"help": "retrieved items for rag, awe, mem0, mem0-infer (published default 30) and a-mem (default 10, as memgym eval)"})
    factual_recall: bool = field(default=True, metadata={"help": "check each period's new facts against memory"})
    probes: bool = field(default=True, metadata={
        "help": "ask each period's diagnosis probes (which value of each variable holds now); off, the write/read/"
                "utilization diagnosis is left out and the questions' answers are unchanged (MemBuilder on SmolLM2: "
                "about a sixth of a run's time)"})
    checker: str | None = field(default=None, metadata={"help": "model spec of the factual-recall checker (default: --model)"})
    evolve: str = field(default="none", metadata={"help": "self-evolution of awe/awi: none, question-only, complete"})
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads (per worker; default: cores / workers)"})
    workers: int = field(default=1, metadata={"help": "processes the users are split over, each with its own model copy (same results)"})

    def __post_init__(self) -> None:
        check_memory_view(self.memory_view)  # refused before a run folder is claimed
        check_memory_view(self.write_view, "write_view")
        if self.write_window_tokens is not None and self.write_window_tokens < 1:
            raise ValueError(f"--write_window_tokens {self.write_window_tokens}: a window holds at least 1 token "
                             "(leave it out to write every session whole)")

    def constructor(self) -> str | None:
        """The model spec that writes a membuilder assistant's memory (None for other assistants)."""
        return constructor_spec(self.model, self.policy_model) if self.assistant == "membuilder" else None

    def write_limit(self) -> int:
        """``write_tokens`` as given, else the constructor card's output limit (membuilder), else 128."""
        if self.write_tokens is not None:
            return self.write_tokens
        setting = policy_setting(self.constructor()) if self.assistant == "membuilder" else None
        return int(setting["max_completion_tokens"]) if setting and setting.get("max_completion_tokens") else 128

    def write_window(self) -> int | None:
        """``write_window_tokens`` as given, else the constructor card's window (membuilder), else None."""
        if self.write_window_tokens is not None or self.assistant != "membuilder":
            return self.write_window_tokens
        setting = policy_setting(self.constructor()) or {}
        return setting.get("write_window_tokens")

    def assistant_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"reply_tokens": self.reply_tokens, "context_tokens": self.context_tokens}
        if self.assistant in ("awe", "awi", "membuilder", "mem0-infer", "a-mem"):
            opts["write_tokens"] = self.write_limit()
        if self.assistant == "membuilder":
            opts["write_prompt_tokens"] = self.write_prompt_tokens
            if self.memory_view != "all":  # the default stays out, so run folders from before it still resume
                opts["memory_view"] = self.memory_view
            if self.write_view != "all":  # likewise
                opts["write_view"] = self.write_view
            if self.write_window() is not None:  # likewise
                opts["window_tokens"] = self.write_window()
        if self.top_k is not None and self.assistant in ("rag", "awe", "mem0", "mem0-infer", "a-mem"):
            opts["top_k"] = self.top_k
        return opts


def world_digest(path: str | Path) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()[:16]


def recorded_sessions(source: str, world: World) -> dict[str, list[dict[str, str]]]:
    """{"<user>/<session id>": messages} from a run folder's interactions, or from the world."""
    out: dict[str, list[dict[str, str]]] = {}
    if source == "world":
        for user in world:
            for ref in user.sessions():
                out[f"{user.id}/{ref.id}"] = [{"role": t.role, "content": t.content} for t in ref.session.messages] \
                    or [{"role": "user", "content": ref.session.query}]
        return out
    root = Path(source) / "users"
    if not root.is_dir():
        raise FileNotFoundError(f"--replay {source}: no users/ folder (not a run folder of `memgym evaluate`)")
    for path in sorted(root.glob("*/period_*/interactions.json")):
        try:
            sessions = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        for k, s in enumerate(sessions):
            if not isinstance(s, dict) or "id" not in s or not isinstance(s.get("messages"), list):
                raise ValueError(f"{path}: session {k}: needs 'id' and a 'messages' list")
            out[f"{path.parent.parent.name}/{s['id']}"] = s["messages"]
    return out


def usage_snapshot(*models) -> dict[str, dict[str, float]]:
    """Usage per purpose, summed over ``models`` (the run's model and a separate constructor)."""
    out: dict[str, dict[str, float]] = {}
    for model in models:
        ledger = getattr(model, "ledger", None) or getattr(getattr(model, "model", None), "ledger", None)
        for purpose, usage in (ledger.to_dict()["by_purpose"] if ledger is not None else {}).items():
            acc = out.setdefault(purpose, {})
            for k, v in usage.items():
                acc[k] = acc.get(k, 0) + v
    return out


def usage_delta(before: dict, after: dict) -> dict[str, dict[str, float]]:
    out = {}
    for purpose, now in after.items():
        was = before.get(purpose, {})
        diff = {k: round(v - was.get(k, 0), 3) for k, v in now.items()}
        if any(diff.values()):
            out[purpose] = diff
    return out


class UserRun:
    """Plays one user from ``start`` to the end, saving each period."""

    def __init__(self, cfg: RunConfig, run: Path, world: World, user: WorldUser, assistant, model,
                 simulator, replay: dict | None, upper_cache: dict, on_period_end: Callable[[str, int], None] | None,
                 checker=None, constructor=None):
        self.cfg, self.run, self.world, self.user = cfg, run, world, user
        self.assistant, self.model, self.simulator, self.replay = assistant, model, simulator, replay
        self.upper_cache, self.on_period_end = upper_cache, on_period_end
        self.checker = checker or model
        # every model whose calls this run books: a separate memory constructor's too
        self.metered = (model,) if constructor is None or constructor is model else (model, constructor)

    def play(self, start: int, progress) -> None:
        user, assistant = self.user, self.assistant
        env = InteractiveEnv(self.world, simulator=self.simulator, seed=self.cfg.seed, probes=self.cfg.probes)
        obs, info = env.reset(seed=self.cfg.seed, options={"user": user.id, "start_period": start})
        assistant.reset(user.id)
        if start > 0:
            assistant.load_state(period_dir(self.run, user.id, start - 1) / "state")
        self._begin_period()
        pending: dict[str, str] = {}
        while True:
            if "evaluation" in info:  # answer the whole period's examination in two batched calls
                items = info["evaluation"]
                qs = [it for it in items if it["kind"] == "question"]
                ps = [it for it in items if it["kind"] == "probe"]
                outs = assistant.answer(qs, obs["time"]) + assistant.probe(ps, obs["time"])
                pending = {it["id"]: o for it, o in zip(qs + ps, outs, strict=True)}
                self.items = {it["id"]: it for it in items}
            if obs["kind"] == MESSAGE:
                action = self._reply(env, obs)
            else:
                action = pending[env.items[env.item_idx].id]
            obs, _, done, _, info = env.step(action)
            if "session_end" in info:
                s = info["session_end"]
                facts = readable_state(user, user.periods[s["period"]].state)
                assistant.observe(s["messages"], time=s["time"], session_id=s["id"], facts=facts)
                self.sessions.append({k: s[k] for k in ("id", "time", "exposed_states", "messages")})
            if "answer" in info:
                self.answers.append(info["answer"])
            if "period_end" in info:
                self._finish_period(info["period_end"])
                progress.update(1)
                if self.on_period_end is not None:
                    self.on_period_end(user.id, info["period_end"])
                self._begin_period()
            if done:
                return

    def _reply(self, env: InteractiveEnv, obs: dict) -> str:
        if self.replay is not None:
            ref = env.refs[env.session_idx]
            recorded = [m["content"] for m in self.replay.get(f"{self.user.id}/{ref.id}", []) if m["role"] == "assistant"]
            if env.round < len(recorded):
                return recorded[env.round]
        return self.assistant.act(obs["text"], obs["time"])

    def _begin_period(self) -> None:
        self.sessions: list[dict] = []
        self.answers: list[dict] = []
        self.items: dict[str, dict] = {}
        self.usage_before = usage_snapshot(*self.metered)
        self.started = time.perf_counter()

    def _finish_period(self, period: int) -> None:
        cfg, user = self.cfg, self.user
        key = (user.id, period)
        if key not in self.upper_cache:
            if user.id not in self.upper_cache:  # each (question, choice state) is asked once per user
                self.upper_cache[user.id] = upper_bound_table(self.model, user)
            self.upper_cache[key] = upper_bound(self.model, user, period, self.upper_cache[user.id])
        facts = period_facts(user, period) if cfg.factual_recall else []
        flags = factual_recall_flags(self.assistant, self.checker, facts, cfg.context_tokens)
        overlap = evidence_overlap_flags(self.assistant, facts) or [None] * len(facts)
        questions = [a | {"question": self.items[a["id"]]["question"], "choices": self.items[a["id"]]["choices"]}
                     for a in self.answers if a["kind"] == "question"]
        updates = {user.info(v).title: (user.info(v).text(u.old) if u.old else None, user.info(v).text(u.new))
                   for v, u in user.periods[period].updates.items()}
        evolved = evolution.evolve(self.assistant, self.model, cfg.evolve, questions, updates,
                                   time=user.periods[period].period_end)
        folder = period_dir(self.run, user.id, period)
        self.assistant.save_state(folder / "state")
        write_json(folder / "interactions.json", self.sessions)
        write_json(folder / "evaluation.json", {
            "user": user.id, "period": period, "time": user.periods[period].period_end,
            "questions": questions, "probes": [a for a in self.answers if a["kind"] == "probe"],
            "upper_bound": self.upper_cache[key],
            "factual_recall": [f | {"supported": ok} | ({} if o is None else {"evidence_overlap": o})
                               for f, ok, o in zip(facts, flags, overlap, strict=True)],
            "evolution": evolved, "usage": usage_delta(self.usage_before, usage_snapshot(*self.metered)),
            "wall_s": round(time.perf_counter() - self.started, 3),
        })


def check_identity(run: Path, meta: dict[str, Any]) -> None:
    path = run / RUN_FILE
    if not path.exists():
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    changed = [k for k in IDENTITY if old.get(k) != meta.get(k)]
    if changed:
        raise ValueError(f"{run}: holds a run with different {', '.join(changed)} "
                         f"({', '.join(f'{k}={old.get(k)!r}' for k in changed)}); use another --out")


def run_meta(cfg: RunConfig) -> dict[str, Any]:
    """What ``run.json`` records; the ``IDENTITY`` keys must match for a run folder to be resumed."""
    return {"world": str(cfg.world), "world_digest": world_digest(cfg.world), "assistant": cfg.assistant,
            "model": cfg.model, "constructor": cfg.constructor(), "embedder": cfg.embedder, "simulator": cfg.simulator, "replay": cfg.replay,
            "mode": "off-policy" if cfg.replay else "on-policy", "seed": cfg.seed, "evolve": cfg.evolve,
            "assistant_options": cfg.assistant_options(), "config": asdict(cfg)}


def prepare_run(cfg: RunConfig) -> dict[str, Any]:
    """Claim (or re-open) the run folder: refuses one holding a different run; writes ``run.json``."""
    run, meta = Path(cfg.out), run_meta(cfg)
    check_identity(run, meta)
    write_json(run / RUN_FILE, meta)
    return meta


def run_users(cfg: RunConfig, world: World) -> list[WorldUser]:
    return list(world)[: cfg.users] if cfg.users else list(world)


def load_constructor(cfg: RunConfig, model, threads: int | None = None, cache: dict | None = None):
    """The model that writes a membuilder run's memory: ``model`` when the constructor spec is the
    run's model (and for other assistants), else that spec loaded (once per spec in ``cache``)."""
    spec = cfg.constructor()
    if spec is None or spec == cfg.model:
        return model
    if cache is not None and spec in cache:
        return cache[spec]
    loaded = load_chat_model(spec, **({"threads": threads} if threads else {}))
    if cache is not None:
        cache[spec] = loaded
    return loaded


def play_users(cfg: RunConfig, world: World, users: list[WorldUser], model, embedder, upper_cache: dict,
               progress, on_period_end: Callable[[str, int], None] | None = None, checker=None,
               constructor=None) -> None:
    """Play the unfinished periods of ``users`` into ``cfg.out`` (already prepared). A membuilder
    run writes memory with ``constructor`` (default: ``load_constructor(cfg, model)``)."""
    run = Path(cfg.out)
    options = cfg.assistant_options()
    if cfg.assistant == "membuilder":
        constructor = constructor if constructor is not None else load_constructor(cfg, model)
        options["write_model"] = constructor
    else:
        constructor = None
    assistant = make_assistant(cfg.assistant, model, embedder, **options)
    replay = recorded_sessions(cfg.replay, world) if cfg.replay else None
    simulator = ReplaySimulator(replay) if replay is not None else make_simulator(cfg.simulator, model, cfg.seed)
    try:
        for user in users:
            done = finished_periods(run, user)
            if done < len(user.periods):
                UserRun(cfg, run, world, user, assistant, model, simulator, replay, upper_cache,
                        on_period_end, checker, constructor).play(done, progress)
    finally:
        close = getattr(assistant, "close", None)  # peers hold a temporary store and maybe a loopback server
        if close is not None:
            close()


def load_run_models(cfgs: list[RunConfig], threads: int | None = None):
    """(model, embedder or None, checker or None) for runs sharing one model, embedder and checker."""
    kw = {"threads": threads} if threads else {}
    cfg = cfgs[0]
    model = load_chat_model(cfg.model, **kw)
    embedder = None
    if any(c.assistant in NEEDS_EMBEDDER for c in cfgs):
        embedder = load_embedder(cfg.embedder)
    checker = load_chat_model(cfg.checker, **kw) if cfg.checker else None
    return model, embedder, checker


def finish_run(cfg: RunConfig, world: World, meta: dict[str, Any], wall_s: float | None) -> dict[str, Any]:
    """Results and report of a run folder whose periods are all played (``wall_s`` None: the
    periods' seconds, summed)."""
    results = collect_results(Path(cfg.out), world, run_users(cfg, world), meta, wall_s)
    write_report(results, Path(cfg.out))
    return results


def evaluate_one(cfg: RunConfig, world: World, model, embedder, upper_cache: dict,
                 on_period_end: Callable[[str, int], None] | None = None, checker=None,
                 constructor=None) -> dict[str, Any]:
    """Play (or resume) one assistant over the world; returns the results (also in results.json).
    ``constructor``: membuilder's memory-writing model, loaded from ``cfg`` when not given."""
    from tqdm.auto import tqdm

    meta = prepare_run(cfg)
    users = run_users(cfg, world)
    started = time.perf_counter()
    with tqdm(total=sum(len(u.periods) for u in users),
              initial=sum(finished_periods(Path(cfg.out), u) for u in users),
              desc=f"{cfg.assistant} ({meta['mode']})", unit="period") as progress:
        play_users(cfg, world, users, model, embedder, upper_cache, progress, on_period_end, checker, constructor)
    return finish_run(cfg, world, meta, time.perf_counter() - started)
