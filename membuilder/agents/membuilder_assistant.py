"""MemBuilder assistant: the four-agent constructor writes the memory bank after each session;
answers come from Core + the top-10 entries (``membuilder.agents.answer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from membuilder.agents.answer import choice_prompt, memory_lines
from membuilder.agents.assistant import ChatAssistant, Message, bound, transcript
from membuilder.agents.constructor import MemBuilderPolicy, build_observation, core_compressor
from membuilder.agents.session_windows import session_windows
from membuilder.llm.base import ChatMessages, Sampling
from membuilder.memory import MemoryBank

BANK_DIR = "bank"
# Longest memory-writing prompt by default: room for a 256-token output in a 4096-token context.
WRITE_PROMPT_TOKENS = 3840
# What an answer may retrieve: "all" keeps entries an UPDATE or MERGE replaced (MemBuilder as
# published), "live" leaves them out.
MEMORY_VIEWS = ("all", "live")


def check_memory_view(view: str, name: str = "memory_view") -> bool:
    """``live_only`` for the bank's retrieval; a clear error, naming the setting, for a value other than "all" or "live"."""
    if view not in MEMORY_VIEWS:
        raise ValueError(f"{name}: {view!r} is not one of {', '.join(MEMORY_VIEWS)} "
                         "(all: every entry retrievable, as published; live: superseded entries left out)")
    return view == "live"


class MemBuilderAssistant(ChatAssistant):
    """Arguments beyond ``ChatAssistant``'s: ``embedder``, ``write_tokens`` (longest agent output),
    ``view_k`` (own-type entries each agent sees, 20 in MemBuilder), ``answer_k`` (entries
    retrieved for an answer, 10), ``write_model`` (the memory constructor playing the four agents
    and compressing Core, e.g. a trained policy; default ``model``, which always replies and answers),
    ``write_prompt_tokens`` (longest agent prompt: a bank that outgrows the writer's context loses
    view entries from its prompts, lowest-ranked first, instead of failing the run; None: what the
    writer's context leaves after its output),
    ``memory_view`` (what answers retrieve from: "all", every entry including those an UPDATE or
    MERGE replaced, as MemBuilder is published; "live", those superseded entries left out),
    ``window_tokens`` (a session longer than this is written window by window, whole turns each,
    ``membuilder.agents.session_windows``; None: every session whole, as published),
    ``write_view`` (what the memory agents' own views are drawn from, as MemoryGym-v0's ``write_view``: "all"
    as published, or "live"; a policy trained on one is evaluated on the same)."""

    name = "membuilder"

    def __init__(self, model, embedder, *, write_tokens: int = 384, view_k: int = 20, answer_k: int = 10,
                 write_model=None, write_prompt_tokens: int | None = WRITE_PROMPT_TOKENS,
                 memory_view: str = "all", window_tokens: int | None = None, write_view: str = "all", **kwargs):
        self.live_only = check_memory_view(memory_view)
        self.write_live = check_memory_view(write_view, "write_view")
        self.memory_view = memory_view
        self.embedder = embedder
        self.write_model = bound(model if write_model is None else write_model, "write")
        self.policy = MemBuilderPolicy(self.write_model, Sampling(temperature=0.0, max_new_tokens=write_tokens),
                                       max_prompt_tokens=write_prompt_tokens)
        self.view_k = view_k
        self.answer_k = answer_k
        self.window_tokens = window_tokens
        super().__init__(model, **kwargs)

    def _new_bank(self) -> MemoryBank:
        return MemoryBank(self.embedder, compressor=core_compressor(self.write_model))

    def _reset_memory(self) -> None:
        self.bank = self._new_bank()
        self.write_log: list[dict[str, Any]] = []  # per session: which agents wrote valid output

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        if not messages:
            return
        for window in session_windows(transcript(messages), self.window_tokens, self.write_model.count_tokens):
            cut_before = self.policy.prompts_cut
            outputs = self.policy.act(build_observation(self.bank, window, time, self.view_k, self.write_live))
            applied = {agent: self.bank.apply(agent, out, time=time, session=session_id)
                       for agent, out in outputs.items()}
            self.write_log.append({"session": session_id, "valid": {a: r.valid for a, r in applied.items()},
                                   "added": {a: len(r.added_ids) for a, r in applied.items()},
                                   "prompts_cut": self.policy.prompts_cut - cut_before})

    def _answer_hits(self, query: str):
        return self.bank.retrieve(query, self.answer_k, live_only=self.live_only) if len(self.bank) else []

    def context(self, query: str, time: str) -> str:
        hits = self._answer_hits(query)
        return f"{self.bank.core.text or '(empty)'}\n{memory_lines(hits)}"

    def choice_prompt(self, question: str, choices: Sequence[str], time: str) -> ChatMessages:
        hits = self._answer_hits(question)
        return choice_prompt(self.bank.core.text, hits, time[:10] or None, question, choices)

    def memory_text(self) -> str:
        return "\n".join([self.bank.core.text, *(e.text for e in self.bank.entries())]).strip()

    def state_dict(self) -> dict[str, Any]:
        return {"write_log": self.write_log}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.write_log = list(state.get("write_log", []))

    def save_state(self, folder: str | Path) -> None:
        self.bank.save(Path(folder) / BANK_DIR)
        super().save_state(folder)

    def load_state(self, folder: str | Path) -> None:
        super().load_state(folder)
        self.bank = MemoryBank.load(Path(folder) / BANK_DIR, embedder=self.embedder,
                                    compressor=core_compressor(self.write_model))
