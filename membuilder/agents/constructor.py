"""The MemBuilder constructor: one chat model playing the four memory agents.

For each session, all four agents see the same session and their own view of memory, and none
sees the others' output (MemBuilder, protocols §1). Their raw outputs are what the environment
scores and what ADRPO trains.

A prompt that is too long is cut in its memory view, never in its instructions (``fit_prompt``):
what the agent must edit stays longest (its own top-ranked entries; for the Core writer, the Core
lines the session speaks of), and only as a last resort the start of the session text. The JSON
instructions and the output format stay whole, so a cut prompt still asks for a parseable answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.llm.base import ChatMessages, ChatModel, Completion, Sampling
from membuilder.llm.context_fit import model_context_length, prompt_budget
from membuilder.memory.core import CORE_LIMIT
from membuilder.memory.grounding import content_words
from membuilder.memory.ops import AGENTS

SYSTEM = "You are a careful memory-writing agent. You answer only with the JSON your instructions ask for."

# Tokens kept free for what a chat template adds beyond ``chat_length``'s estimate (a default system
# prompt, thinking tags), so a prompt fitted here also fits the backend's exact count.
TEMPLATE_MARGIN = 64

# The observation keys a construction prompt reads (the env's observation dict carries them).
OBS_SESSION, OBS_TIME, OBS_CORE, OBS_CORE_USAGE = "session", "session_time", "core", "core_usage"


def build_observation(bank, session_text: str, session_time: str | None, view_k: int = 20,
                      live_only: bool = False) -> dict[str, Any]:
    """What the four agents see for a session: the session, Core, and each searchable agent's
    top-``view_k`` own-type entries (each line of the session is a query; best score wins).

    ``live_only`` leaves out of those views the entries an UPDATE or MERGE replaced. MemBuilder shows its
    writers the whole history, so an old version of a fact can take a view slot and stand beside the
    current one; an UPDATE that copies the old version replaces nothing current (the stale reward
    counts it against the memory).

    ``MemoryGym-v0`` and the trainer's datasets both build observations here, so the prompts a
    policy is trained on are the prompts it is scored with.
    """
    lines = [line for line in session_text.splitlines() if line.strip()]
    obs: dict[str, Any] = {OBS_SESSION: session_text, OBS_TIME: session_time or "", OBS_CORE: bank.core.text,
                           OBS_CORE_USAGE: min(100.0, bank.core.usage)}
    for agent in AGENTS[1:]:
        obs[agent] = tuple(h.entry.text for h in bank.session_view(agent, lines, view_k, live_only))
    return obs


def shown_texts(obs: Mapping[str, Any]) -> list[str]:
    """Everything an observation shows the writer: the session, its time, Core and each agent's memory view.
    What a written entry may be grounded in (``membuilder.memory.grounding``): a date taken from the session's
    time was given to the writer, not invented."""
    return [str(obs.get(OBS_SESSION) or ""), str(obs.get(OBS_TIME) or ""), str(obs.get(OBS_CORE) or ""),
            *(t for a in AGENTS[1:] for t in obs.get(a, ()))]


def render_prompt(agent: str, obs: Mapping[str, Any]) -> ChatMessages:
    """The chat prompt of one agent for one observation of ``MemoryGym-v0``."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")
    values: dict[str, Any] = {
        "session": obs[OBS_SESSION],
        "session_time": obs.get(OBS_TIME) or "an unknown date",
        "core": obs.get(OBS_CORE) or "(empty)",
    }
    if agent == "core":
        values |= {"limit": CORE_LIMIT, "usage": f"{float(obs.get(OBS_CORE_USAGE, 0.0)):.0f}"}
    else:
        entries: Sequence[str] = obs.get(agent) or ()
        values["entries"] = "\n".join(f"{i}. {t}" for i, t in enumerate(entries, 1)) or "(none yet)"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompts.render(f"construct_{agent}", **values)},
    ]


# Renders a chat prompt and counts its tokens.
PromptLength = Callable[[list[dict[str, str]]], int]


def fit_prompt(agent: str, obs: Mapping[str, Any], length: PromptLength, max_tokens: int | None) -> list[dict[str, str]]:
    """``render_prompt(agent, obs)``, with the memory view shortened until it fits ``max_tokens``.

    What an agent needs to edit goes last: a Semantic, Episodic or Procedural writer loses the Core block
    (only context to it) before any of its own entries, then its lowest-ranked entries, because an UPDATE
    must copy an existing entry exactly and a writer shown none of them can only invent one. The Core
    block is cut by lines, those sharing the fewest words with the session first, so the line a change
    must REPLACE stays in view. The start of the session text goes only when nothing else is left.
    """
    messages = render_prompt(agent, obs)
    if not max_tokens or length(messages) <= max_tokens:
        return messages
    obs = dict(obs)
    session = str(obs.get(OBS_SESSION) or "")

    def fits(changes: Mapping[str, Any]) -> bool:
        return length(render_prompt(agent, {**obs, **changes})) <= max_tokens

    core_lines = str(obs.get(OBS_CORE) or "").splitlines()
    if agent != "core" and core_lines:
        obs[OBS_CORE] = _core_view(core_lines, session, _fewest(len(core_lines), lambda k: fits(
            {OBS_CORE: _core_view(core_lines, session, k)})))
    if agent != "core":
        entries = list(obs.get(agent) or ())
        keep = len(entries) - _fewest(len(entries), lambda k: fits({agent: entries[:len(entries) - k]}))
        obs[agent] = entries[:keep]  # the lowest-ranked entries go first
    elif len(core_lines) > 1:
        # the line most related to the session stays whole; a block still too long (or written as one long
        # paragraph) then keeps its most recent part, as below
        obs[OBS_CORE] = _core_view(core_lines, session, _fewest(len(core_lines) - 1, lambda k: fits(
            {OBS_CORE: _core_view(core_lines, session, k)})))
    messages = render_prompt(agent, obs)
    for field in (OBS_CORE, OBS_SESSION):
        text = str(obs.get(field) or "")
        while text and length(messages) > max_tokens:
            # keep the most recent part: cut a quarter of what is left from the front
            text = text[len(text) // 4 + 1:] if len(text) > 8 else ""
            # a Core cut to nothing still reads "...": the block is not empty, only out of view
            obs[field] = ("..." + text) if text else ("..." if field == OBS_CORE else "")
            messages = render_prompt(agent, obs)
    return messages


def _fewest(n: int, fits: Callable[[int], bool]) -> int:
    """The fewest of ``n`` items to drop for the prompt to fit (``n`` when even that is not enough); each
    render tokenizes the whole prompt, so this searches instead of dropping one at a time."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _core_view(lines: Sequence[str], session: str, drop: int) -> str:
    """The Core block without its ``drop`` lines least related to the session (fewest shared content words;
    among equals the oldest), the rest in their order, a "..." line where lines were left out."""
    if drop <= 0:
        return "\n".join(lines)
    said = content_words(session)
    order = sorted(range(len(lines)), key=lambda i: (len(content_words(lines[i]) & said), i))
    gone = set(order[:drop])
    out: list[str] = []
    for i, line in enumerate(lines):
        if i not in gone:
            out.append(line)
        elif not out or out[-1] != "...":
            out.append("...")
    return "\n".join(out)  # all left out is "...", not "(empty)": a writer must not think Core is empty


def chat_length(count_tokens: Callable[[str], int], per_message: int = 8) -> PromptLength:
    """A prompt's length from a model's ``count_tokens``: its messages' text plus ``per_message`` tokens each
    for the chat template's role markers and the generation prompt (SmolLM2's and Qwen's take 3-5)."""

    def length(messages: list[dict[str, str]]) -> int:
        return sum(count_tokens(m["content"]) + per_message for m in messages) + per_message

    return length


def render_prompts(obs: Mapping[str, Any]) -> dict[str, ChatMessages]:
    return {agent: render_prompt(agent, obs) for agent in AGENTS}


class MemBuilderPolicy:
    """Writes the four agents' outputs for observations with any ``ChatModel``.

    ``act`` handles many observations at once: all 4 x len(observations) prompts (times
    ``sampling.n`` samples) go to the model in one ``generate`` call. ``max_prompt_tokens`` bounds
    each prompt (``fit_prompt``, measured with the model's ``count_tokens``): a model's context
    cannot hold an unbounded memory view; ``prompts_cut`` counts the prompts it shortened. Without
    it the bound is what the model's context leaves after the completion (less a margin for the
    chat template, which ``count_tokens`` does not see), so a long session's memory view is cut
    here, by rank, before the backend would have to cut the prompt's middle.
    """

    def __init__(self, model: ChatModel, sampling: Sampling | None = None, max_prompt_tokens: int | None = None):
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ValueError(f"MemBuilderPolicy: max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self.model = model
        self.sampling = sampling or Sampling(temperature=0.0, max_new_tokens=384)
        self.max_prompt_tokens = max_prompt_tokens
        self.prompts_cut = 0
        self._length = chat_length(model.count_tokens)

    @property
    def prompt_limit(self) -> int | None:
        """The most tokens a prompt may take: ``max_prompt_tokens``, else from the model's context."""
        if self.max_prompt_tokens is not None:
            return self.max_prompt_tokens
        budget = prompt_budget(model_context_length(self.model, default=None), self.sampling.max_new_tokens)
        return None if budget is None else max(1, budget - TEMPLATE_MARGIN)

    def prompt(self, agent: str, obs: Mapping[str, Any]) -> ChatMessages:
        messages = render_prompt(agent, obs)
        limit = self.prompt_limit
        if limit is None or self._length(messages) <= limit:
            return messages
        self.prompts_cut += 1
        return fit_prompt(agent, obs, self._length, limit)

    def act_many(self, observations: Sequence[Mapping[str, Any]], n: int | None = None) -> list[list[dict[str, str]]]:
        """For each observation, ``n`` candidate actions (dicts agent -> raw output)."""
        n = n or self.sampling.n
        sampling = Sampling(**{**self.sampling.__dict__, "n": n})
        conversations = [self.prompt(a, obs) for obs in observations for a in AGENTS]
        completions: list[Completion] = self.model.generate(conversations, sampling)
        out = []
        for o in range(len(observations)):
            candidates = []
            for k in range(n):
                candidates.append({a: completions[(o * len(AGENTS) + j) * n + k].text for j, a in enumerate(AGENTS)})
            out.append(candidates)
        return out

    def act(self, observation: Mapping[str, Any]) -> dict[str, str]:
        return self.act_many([observation], n=1)[0][0]


def core_compressor(model: ChatModel, max_new_tokens: int = 900):
    """A Core compression hook backed by a chat model (used when Core overflows its limit)."""

    def compress(text: str, target: int) -> str:
        prompt = [{"role": "user", "content": prompts.render("compress_core", core=text, target=target)}]
        return model.generate([prompt], Sampling(temperature=0.0, max_new_tokens=max_new_tokens))[0].text.strip()

    return compress
