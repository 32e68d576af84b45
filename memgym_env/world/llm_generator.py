"""The LLM world generator: the offline generator's steps, with the text written by any ``ChatModel``.

The skeleton (which variables, how many changes per period, on which days) comes from the same
seeded choices as the offline generator, so a world always has the shape its config asks for.
The model writes or chooses: the profile summary, the questions, readable value texts (schema
refinement), the initial state, each new value, the life events, the personalised answers and
the users' opening requests. Two reflection checks guard the text that scoring depends on
(AMemGym, protocols §4):

* a classifier must recover, from each personalised answer, the state variant it was written for;
* a checker must recover, from each opening request, every value it is meant to reveal.

A failed check is retried with a refinement message up to ``max_retries`` times; after that the
catalog's text is used and the failure is recorded in the ``GenerationReport``. Model errors are
recorded the same way: the run never stops because the model misbehaved. With ``work_dir`` set,
each finished user is saved at once and a second run resumes after the last saved user.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from membuilder.llm.base import ChatModel, Sampling
from membuilder.memory.ops import strip_think
from membuilder.plumbing.json_files import write_json
from memgym_env.world import llm_prompts as P
from memgym_env.world.catalog import Catalog, load_catalog
from memgym_env.world.config import WorldConfig
from memgym_env.world.data_json import user_from_dict, user_to_dict
from memgym_env.world.offline import answer_choices, generate_user, session_messages
from memgym_env.world.timeline import render_event
from memgym_env.world.types import World, WorldUser

_LETTER = re.compile(r"\b([A-Z])\b")


@dataclass
class Failure:
    user: int
    step: str  # "profile" | "question" | "value_text" | "initial_state" | "new_value" | "event" | "answer" | "query"
    where: str
    detail: str


@dataclass
class GenerationReport:
    users_done: int = 0
    users_resumed: int = 0
    generate_calls: int = 0
    choice_calls: int = 0
    retries: int = 0
    checks_passed: int = 0
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        steps: dict[str, int] = {}
        for f in self.failures:
            steps[f.step] = steps.get(f.step, 0) + 1
        return (f"llm world: {self.users_done} users generated, {self.users_resumed} resumed; "
                f"{self.generate_calls} generate and {self.choice_calls} choice calls; {self.retries} retries; "
                f"{self.checks_passed} checks passed; {len(self.failures)} fell back to the catalog {steps or ''}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _clean(text: str, limit: int = 400) -> str:
    text = strip_think(text).strip().strip('"').strip()
    return text.split("\n\n")[0].strip()[:limit]


class LLMWorldGenerator:
    def __init__(self, model: ChatModel, config: WorldConfig | None = None, *, work_dir: str | Path | None = None,
                 max_retries: int = 2, max_new_tokens: int = 96, catalog: Catalog | None = None):
        self.model = model
        self.cfg = config or WorldConfig()
        self.work_dir = Path(work_dir) if work_dir else None
        self.max_retries = max_retries
        self.sampling = Sampling(temperature=0.0, max_new_tokens=max_new_tokens, seed=self.cfg.seed)
        self.cat = catalog or load_catalog()
        self.report = GenerationReport()

    # ---- model calls that never raise ---------------------------------------------------------
    def _write(self, prompts: list[list[dict[str, str]]], user: int, step: str, wheres: list[str]) -> list[str | None]:
        """One batched generate; None where the model failed or wrote nothing."""
        if not prompts:
            return []
        self.report.generate_calls += 1
        try:
            outs = self.model.generate(prompts, self.sampling)
            texts = [_clean(c.text) for c in outs]
        except Exception as exc:  # any backend error becomes a recorded fallback
            for w in wheres:
                self.report.failures.append(Failure(user, step, w, f"model error: {type(exc).__name__}: {exc}"[:300]))
            return [None] * len(prompts)
        return [t or None for t in texts]

    def _pick(self, prompt: str, options: list[str]) -> int | None:
        """Index of the option the model prefers (log-probabilities of the letters, else a generated letter)."""
        conv = P.user_turn(prompt.format(options=P.lettered(options)) if "{options}" in prompt else prompt)
        letters = [chr(65 + i) for i in range(len(options))]
        self.report.choice_calls += 1
        try:
            scores = self.model.choice_logprobs(conv, letters)
            return max(range(len(letters)), key=lambda i: scores[i])
        except NotImplementedError:
            pass
        except Exception:
            return None
        try:
            text = self.model.generate([conv], Sampling(temperature=0.0, max_new_tokens=4))[0].text
        except Exception:
            return None
        m = _LETTER.search(text.upper())
        return letters.index(m.group(1)) if m and m.group(1) in letters else None

    # ---- steps ----------------------------------------------------------------------------
    def _facts(self, user: WorldUser, state: dict[str, str]) -> str:
        return "; ".join(f"their {user.info(v).title.lower()} is {user.info(v).text(x)}" for v, x in state.items())

    def _profile_and_questions(self, i: int, user: WorldUser) -> None:
        p = user.user_profile
        summary = self._write([P.user_turn(P.PROFILE_SUMMARY.format(profile=p.formatted_str))], i, "profile", ["profile"])[0]
        if summary and p.first_name.lower() in summary.lower():
            p.complementary_info = summary
        elif summary is not None:
            self.report.failures.append(Failure(i, "profile", "profile", "summary does not name the person"))
        prompts = [P.user_turn(P.QUESTION.format(facts=", ".join(user.info(v).title.lower() for v in q.required_info),
                                                 example=q.query)) for q in user.qas]
        for q, text in zip(user.qas, self._write(prompts, i, "question", [f"qas[{k}]" for k in range(len(user.qas))]), strict=True):
            if text and text.endswith("?") and len(text) < 200:
                q.query = text
        # Schema refinement: readable text for every value (the variable names stay, they are keys).
        pairs = [(v, x) for v, vals in user.state_schema.items() for x in vals]
        prompts = [P.user_turn(P.VALUE_TEXT.format(title=user.info(v).title, value=user.info(v).text(x))) for v, x in pairs]
        texts = self._write(prompts, i, "value_text", [f"{v}={x}" for v, x in pairs])
        for (v, x), text in zip(pairs, texts, strict=True):
            if text and 2 <= len(text) <= 80 and v in user.variable_info:
                user.variable_info[v].values[x] = text.rstrip(".")

    def _states(self, i: int, user: WorldUser) -> None:
        """Let the model choose the initial values and each new value; the schedule of changes stays."""
        p = user.user_profile.formatted_str
        state: dict[str, str] = {}
        first = user.periods[0]
        for var, values in user.state_schema.items():
            options = [user.info(var).text(x) for x in values]
            k = self._pick(P.INITIAL_STATE.format(profile=p, title=user.info(var).title.lower(), options="{options}"), options)
            state[var] = values[k] if k is not None else first.state[var]
        for n, period in enumerate(user.periods):
            if n == 0:
                for s in period.sessions:
                    s.exposed_states = {v: state[v] for v in s.exposed_states}
                period.updates = {v: dataclasses.replace(u, new=state[v]) for v, u in period.updates.items()}
            else:
                for s in period.sessions:
                    (var,) = s.exposed_states
                    others = [x for x in user.state_schema[var] if x != state[var]]
                    k = self._pick(P.NEW_VALUE.format(profile=p, title=user.info(var).title.lower(),
                                                      old=user.info(var).text(state[var]), options="{options}"),
                                   [user.info(var).text(x) for x in others])
                    new = others[k] if k is not None else others[0]
                    period.updates[var] = dataclasses.replace(period.updates[var], old=state[var], new=new)
                    state[var] = new
                    s.exposed_states = {var: new}
            period.state = dict(state)

    def _events(self, i: int, user: WorldUser) -> None:
        name = user.user_profile.first_name
        jobs = [(n, s) for n, period in enumerate(user.periods) for s in period.sessions if n > 0]
        prompts = []
        for n, s in jobs:
            (var,) = s.exposed_states
            up = user.periods[n].updates[var]
            prompts.append(P.user_turn(P.EVENT.format(name=name, title=user.info(var).title.lower(),
                                                      old=user.info(var).text(up.old), new=user.info(var).text(up.new))))
        texts = self._write(prompts, i, "event", [f"period {n}" for n, _ in jobs])
        for (n, s), text in zip(jobs, texts, strict=True):
            if text and text.lower().startswith(name.lower()):
                s.event = text if text.endswith(".") else text + "."
            else:
                self.report.failures.append(Failure(i, "event", f"period {n}", "no usable event; catalog event kept"))
        for period in user.periods[1:]:
            events = [s.event for s in period.sessions if s.event]
            period.period_summary = " ".join(events) or None

    def _answers(self, i: int, user: WorldUser) -> None:
        jobs = [(q, c) for q in user.qas for c in q.answer_choices]
        facts = [self._facts(user, dict(zip(q.required_info, c.state, strict=True))) for q, c in jobs]
        convs = [P.user_turn(P.ANSWER.format(question=q.query, facts=f)) for (q, _), f in zip(jobs, facts, strict=True)]
        pending = list(range(len(jobs)))
        for attempt in range(self.max_retries + 1):
            texts = self._write([convs[j] for j in pending], i, "answer", [f"answer {j}" for j in pending])
            still = []
            for j, text in zip(pending, texts, strict=True):
                q, c = jobs[j]
                variants = [self._facts(user, dict(zip(q.required_info, o.state, strict=True))) for o in q.answer_choices]
                ok = text is not None and self._pick(
                    P.CLASSIFY_ANSWER.format(question=q.query, answer=text, options="{options}"), variants
                ) == q.answer_choices.index(c)
                if ok:
                    c.answer = text
                    self.report.checks_passed += 1
                    continue
                still.append(j)
                if text is not None:
                    convs[j] = convs[j] + [{"role": "assistant", "content": text},
                                           {"role": "user", "content": P.ANSWER_REFINE.format(facts=facts[j])}]
            if still and attempt < self.max_retries:
                self.report.retries += len(still)
            pending = still
            if not pending:
                break
        for j in pending:
            q, _ = jobs[j]
            self.report.failures.append(Failure(i, "answer", f"qas[{user.qas.index(q)}]",
                                                "classifier could not recover the variant; catalog answer kept"))
        for q in user.qas:  # answers must stay distinct per variant
            seen: set[str] = set()
            for c in q.answer_choices:
                if c.answer in seen:
                    c.answer += f" ({self._facts(user, dict(zip(q.required_info, c.state, strict=True)))})"
                seen.add(c.answer)

    def _query_ok(self, user: WorldUser, query: str, exposed: dict[str, str]) -> bool:
        for var, value in exposed.items():
            info = user.info(var)
            if info.title.lower() in query.lower():
                return False  # names the variable outright
            values = user.state_schema[var]
            k = self._pick(P.CHECK_QUERY.format(query=query, title=info.title.lower(), options="{options}"),
                           [info.text(x) for x in values])
            if k is None or values[k] != value:
                return False
        return True

    def _queries(self, i: int, user: WorldUser) -> None:
        refs = user.sessions()
        facts = [self._facts(user, r.session.exposed_states) for r in refs]
        convs = [P.user_turn(P.QUERY.format(facts=f)) for f in facts]
        pending = list(range(len(refs)))
        for attempt in range(self.max_retries + 1):
            texts = self._write([convs[j] for j in pending], i, "query", [refs[j].id for j in pending])
            still = []
            for j, text in zip(pending, texts, strict=True):
                s = refs[j].session
                if text is not None and self._query_ok(user, text, s.exposed_states):
                    s.query = text
                    if s.messages and s.messages[0].role == "user":
                        s.messages[0].content = text
                    self.report.checks_passed += 1
                    continue
                still.append(j)
                if text is not None:
                    convs[j] = convs[j] + [{"role": "assistant", "content": text},
                                           {"role": "user", "content": P.QUERY_REFINE.format(facts=facts[j])}]
            if still and attempt < self.max_retries:
                self.report.retries += len(still)
            pending = still
            if not pending:
                break
        for j in pending:
            self.report.failures.append(Failure(i, "query", f"session {refs[j].id}",
                                                "checker could not recover the exposed values; catalog request kept"))

    def _catalog_text_for(self, user: WorldUser) -> None:
        """After the model picked the values, rebuild the catalog's text for them: the fallback."""
        rng = random.Random(f"memgym-llm-world-{self.cfg.seed}-{user.id}")
        p = user.user_profile
        for ref in user.sessions():
            s = ref.session
            values = [self.cat.variables[v].values[x] for v, x in s.exposed_states.items()]
            s.query = " ".join(rng.choice(v.say) for v in values)
            phrase = rng.choice(values[0].events) if ref.period > 0 else None
            s.event = render_event(phrase, p.first_name, p.gender) + "." if phrase else None
            rounds = self.cfg.rounds_update if ref.period > 0 else self.cfg.rounds_initial
            s.messages = session_messages(self.cat, s.query, phrase, rounds, rng)
        specs = {spec.query: spec for spec in self.cat.questions}
        for q in user.qas:
            q.answer_choices = answer_choices(specs[q.query], self.cat, q.required_info, user.state_schema,
                                              user.periods, self.cfg.min_answer_variants, rng)

    def generate_one(self, i: int) -> WorldUser:
        user = generate_user(self.cfg, i, self.cat)
        self._states(i, user)
        self._catalog_text_for(user)  # the fallback text, consistent with the chosen values
        self._profile_and_questions(i, user)
        self._events(i, user)
        self._answers(i, user)
        self._queries(i, user)
        return user

    def generate(self) -> tuple[World, GenerationReport]:
        users = []
        if self.work_dir:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.cfg.num_users):
            path = self.work_dir / f"user_{i:04d}.json" if self.work_dir else None
            if path is not None and path.exists():
                users.append(user_from_dict(json.loads(path.read_text(encoding="utf-8")), i, str(path)))
                self.report.users_resumed += 1
                continue
            user = self.generate_one(i)
            users.append(user)
            self.report.users_done += 1
            if path is not None:
                write_json(path, user_to_dict(user))
                (self.work_dir / "report.json").write_text(json.dumps(self.report.to_dict(), indent=1), encoding="utf-8")
        return World(users), self.report
