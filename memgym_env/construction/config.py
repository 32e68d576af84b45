"""Every setting of MemoryGym-v0, in one dataclass; ``configs/env/construction.yaml`` shows them all.

Training configs name an env config and override it with these same field names
(``env_config`` + ``env_overrides``), so the env, SFT, RL and the ladder read one dialect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from membuilder.agents.membuilder_assistant import MEMORY_VIEWS
from membuilder.reward import ALPHA, ATTRIBUTION_RULES, LAMBDA, QUOTE_MISS_RULES, check_lambda
from memgym_env.benchmarks.judges import JUDGE_PROMPTS
from memgym_env.construction.answers import ANSWER_MODES

SNAPSHOT_MODES = ("expert", "on_policy")
ANSWER_VIEWS = MEMORY_VIEWS  # what the answerer and the writers may be shown: all, live
# The two named reward settings. published: MemBuilder's reward as released (every entry retrievable,
# evidence by gold string, attribution by retrieval counts), the defaults, and what reproduces
# published numbers. tracks_change: a memory that keeps a replaced value as current loses the question,
# the answerer reads the live view, and attribution follows the evidence (configs/env/construction_cpu_change.yaml).
REWARD_SETTINGS: dict[str, dict[str, str]] = {
    "published": {"answer_mode": "evidence", "answer_view": "all", "attribution": "retrieval"},
    "tracks_change": {"answer_mode": "stale", "answer_view": "live", "attribution": "evidence"},
}


@dataclass
class ConstructionConfig:
    source: str = field(default="world", metadata={
        "help": "where the episodes come from: world (the users of an AMemGym world, generated offline or read "
                "from world_path) or conversation (the conversations of a JSON file, as MemBuilder trains on "
                "LongMemEval sessions)"})
    world_path: str | None = field(default=None, metadata={
        "help": "source world: a world file (AMemGym data.json format, e.g. from `memgym world generate`); "
                "None generates one from world_config and world_overrides"})
    world_config: str | None = field(default=None, metadata={
        "help": "source world: the generator's YAML (WorldConfig fields) when world_path is None; None: "
                "AMemGym's published base setting (configs/env/base.yaml)"})
    world_overrides: dict[str, Any] = field(default_factory=lambda: {"num_users": 2, "num_periods": 2}, metadata={
        "help": "source world: WorldConfig fields over world_config when the world is generated; the default "
                "keeps a CPU run small (2 users and 2 periods, against the base setting's 20 and 10)"})
    conversation_path: str | None = field(default=None, metadata={
        "help": "source conversation: a Conversation JSON (or a list of them), one episode each"})
    qa_path: str | None = field(default=None, metadata={
        "help": "source conversation: a JSON list of QAItem dicts, each naming the session it follows; None: "
                "the QA items inside the conversation file"})
    expert_path: str | None = field(default=None, metadata={
        "help": "source conversation: the expert's four agent outputs per session (JSON lines), needed by "
                "snapshot expert; a world's expert is its oracle (the world's ideal operations)"})
    max_users: int | None = field(default=None, metadata={
        "help": "source world: keep the first N users (episodes); None keeps them all"})
    questions_per_session: int = field(default=5, metadata={
        "help": "source world: questions asked after each session; MemBuilder writes about 5 per session, "
                "mixed 50/30/20 single-session/multi-session/temporal (conversation files bring their own)"})
    answer_mode: str = field(default="choice", metadata={
        "help": "how r_task answers a question from memory: choice (the answerer picks an option by "
                "log-probability, as AMemGym asks multiple choice), llm (the answerer writes an answer and a "
                "judge grades it, as MemBuilder's reward does), evidence (no model: correct when the gold "
                "fact is in the context the answerer would read; published) or stale (evidence, and the memory "
                "shown states the current value of every variable the question needs and no replaced value as "
                "current; see memgym_env/construction/state_values.py)"})
    answer_view: str | None = field(default=None, metadata={
        "help": "what the answerer's top-k is drawn from: all (every entry, replaced ones kept as history: "
                "MemBuilder's published retrieval) or live (entries an UPDATE or MERGE replaced are left out); "
                "None: live in stale mode, all otherwise"})
    write_view: str = field(default="all", metadata={
        "help": "what each writer's view of its own memory (the top view_k entries in its prompt) is drawn from: "
                "all (every entry, replaced ones too, as MemBuilder shows its writers) or live (entries an UPDATE "
                "or MERGE replaced are left out, so an old version of a fact never stands in view beside the "
                "current one)"})
    attribution: str = field(default="retrieval", metadata={
        "help": "ADRPO's rule for the dominant memory type: retrieval (published: the type most retrieved over "
                "the session's questions, never Core) or evidence (the memory, Core included, that held the "
                "evidence of more than half of the answered questions; none: every weight 1)"})
    quote_miss: str = field(default="add", metadata={
        "help": "what an agent earns when an edit of its output quotes memory that is not there (UPDATE's "
                "old_memory, MERGE's old_memories, Core REPLACE's old_text; near paraphrases match): add (the "
                "published reward: the UPDATE lands as a new entry, the REPLACE changes nothing, and the memory is "
                "scored as it stands) or zero (the same memory, and that agent's r_a is 0; info['misquoted'])"})
    answerer: str = field(default="smollm2-135m", metadata={
        "help": "chat model spec that answers the questions (choice, llm): a registry name, a local folder or "
                "openai:NAME@URL; its tokenizer also counts the lengths of the length penalty"})
    judge: str | None = field(default=None, metadata={
        "help": "chat model spec that grades llm answers; None: the answerer judges (MemBuilder's published "
                "pipeline uses a remote LLM judge)"})
    judge_prompt: str = field(default="locomo", metadata={
        "help": "the judge prompt of memgym_env.benchmarks.judges that grades llm answers: locomo (Mem0's "
                "generous J, reused by MemBuilder's eval/llm_judge.py), locomo-strict, longmemeval or perltqa"})
    answer_max_tokens: int = field(default=48, metadata={
        "help": "longest answer in tokens; an answer cut at this limit is counted in info['answers_cut'] and "
                "warned about"})
    judge_max_tokens: int = field(default=24, metadata={
        "help": "longest written verdict in tokens; likewise counted in info['verdicts_cut']"})
    chat_template_kwargs: dict[str, Any] | None = field(default_factory=lambda: {"enable_thinking": False}, metadata={
        "help": "rendered into every answerer/judge prompt, local or served (Qwen3: do not think first)"})
    embedder: str = field(default="minilm", metadata={
        "help": "embedder spec of the memory's retrieval (cosine similarity, as MemBuilder's FAISS inner "
                "product): minilm (all-MiniLM-L6-v2, shipped offline), a sentence-transformers folder or "
                "openai:NAME@URL"})
    snapshot: str = field(default="expert", metadata={
        "help": "the memory each session is written into: expert (the expert's memory before the session, "
                "restored every step, as MemBuilder trains) or on_policy (the policy's own memory carries on)"})
    lam: float = field(default=LAMBDA, metadata={
        "help": "length-penalty weight lambda of r_a = 1[valid] * r_task * (1 - lambda * l_a) (MemBuilder: "
                "0.8, the default); 0 = no length penalty"})
    alpha: float = field(default=ALPHA, metadata={
        "help": "ADRPO weight of the agent of the dominant memory type (the type most retrieved when "
                "answering); 1 = plain GRPO; MemBuilder's best of 1, 2, 4, 8, 16 is 4"})
    reward_density: int = field(default=1, metadata={
        "help": "d: a session gets the task reward with probability 1/d (seeded); the others keep validity and "
                "the length penalty only (MemBuilder's sparse-reward ablation drops half: d = 2)"})
    answer_k: int = field(default=10, metadata={
        "help": "entries retrieved over all memory types to answer a question, beside the whole Core block "
                "(MemBuilder: top-10)"})
    view_k: int = field(default=20, metadata={
        "help": "entries of an agent's own memory type shown in its observation (MemBuilder: top-20 when "
                "constructing)"})

    def __post_init__(self) -> None:
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode {self.answer_mode!r}; expected one of {ANSWER_MODES}")
        if self.answer_view is not None and self.answer_view not in ANSWER_VIEWS:
            raise ValueError(f"answer_view {self.answer_view!r}; expected one of {ANSWER_VIEWS} or null")
        if self.write_view not in ANSWER_VIEWS:
            raise ValueError(f"write_view {self.write_view!r}; expected one of {ANSWER_VIEWS}")
        if self.attribution not in ATTRIBUTION_RULES:
            raise ValueError(f"attribution {self.attribution!r}; expected one of {ATTRIBUTION_RULES}")
        if self.quote_miss not in QUOTE_MISS_RULES:
            raise ValueError(f"quote_miss {self.quote_miss!r}; expected one of {QUOTE_MISS_RULES}")
        if self.snapshot not in SNAPSHOT_MODES:
            raise ValueError(f"snapshot {self.snapshot!r}; expected one of {SNAPSHOT_MODES}")
        if self.source not in ("world", "conversation"):
            raise ValueError(f"source {self.source!r}; expected 'world' or 'conversation'")
        if self.judge_prompt not in JUDGE_PROMPTS:
            raise ValueError(f"judge_prompt {self.judge_prompt!r}; expected one of {JUDGE_PROMPTS}")
        if not isinstance(self.reward_density, int) or self.reward_density < 1:
            raise ValueError(f"reward_density must be an integer >= 1; got {self.reward_density!r}")
        try:
            self.lam = check_lambda(self.lam)
        except ValueError as exc:
            raise ValueError(f"lam: {exc}") from None
        if not isinstance(self.alpha, (int, float)) or self.alpha < 1:
            raise ValueError(f"alpha must be a number >= 1 (1 = plain GRPO); got {self.alpha!r}")

    @property
    def live_view(self) -> bool:
        """Whether the answerer reads only live entries (``answer_view``, or the mode's default)."""
        return (self.answer_view or ("live" if self.answer_mode == "stale" else "all")) == "live"

    @property
    def write_live(self) -> bool:
        """Whether the writers' views leave out replaced entries (``write_view``)."""
        return self.write_view == "live"

    @property
    def reward_setting(self) -> str | None:
        """The named setting these fields make up (``REWARD_SETTINGS``), or None for another mix."""
        mine = {"answer_mode": self.answer_mode, "answer_view": "live" if self.live_view else "all",
                "attribution": self.attribution}
        return next((name for name, fields_ in REWARD_SETTINGS.items() if fields_ == mine), None)

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides: Any) -> ConstructionConfig:
        """The config in ``path`` (None: the defaults) with ``overrides`` (same field names) on top."""
        import yaml

        data = {}
        if path is not None:
            path = Path(path)
            if not path.exists():
                raise ValueError(f"env config {path} does not exist")
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{path}: expected a mapping of ConstructionConfig fields")
        known = {f.name for f in fields(cls)}
        for where, given in ((str(path), data), ("overrides", overrides)):
            unknown = sorted(set(given) - known)
            if unknown:
                raise ValueError(f"{where}: unknown ConstructionConfig fields {unknown}; known: {sorted(known)}")
        return cls(**{**data, **overrides})
