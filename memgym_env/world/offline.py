"""The offline world generator: seeded, deterministic, no language model.

For each user it picks questions and the variables they depend on (the state schema), an initial
state, a profile that agrees with it, then for each update period a few changes, each with a
life event and one session in which the user reveals the new value. Answers to every question are
composed per state variant from the catalog's advice, so each variant has its own answer.

Same config and seed -> the same world, byte for byte: every random choice comes from
``random.Random`` seeded with a string (hashed with SHA-512, independent of PYTHONHASHSEED) and
Faker is re-seeded per user.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from datetime import date

from memgym_env.world.catalog import Catalog, QuestionSpec, VariableSpec, load_catalog
from memgym_env.world.config import WorldConfig
from memgym_env.world.profiles import make_profile
from memgym_env.world.timeline import first_person_event, period_bounds, pronouns, render_event, session_times
from memgym_env.world.types import (
    AnswerChoice,
    Period,
    Question,
    StateUpdate,
    Turn,
    VariableInfo,
    World,
    WorldError,
    WorldSession,
    WorldUser,
)
from memgym_env.world.wording import UserWording


def _pick_questions(cat: Catalog, cfg: WorldConfig, rng: random.Random) -> list[tuple[QuestionSpec, list[str]]]:
    """Questions with their variables; no variable is shared, so each question tests its own facts."""
    order = list(cat.questions)
    rng.shuffle(order)
    used: set[str] = set()
    picked = []
    for spec in order:
        free = [v for v in spec.variables if v not in used and len(cat.variables[v].values) >= cfg.values_per_state]
        if len(free) < cfg.states_per_question:
            continue
        chosen = free[: cfg.states_per_question]
        used.update(chosen)
        picked.append((spec, chosen))
        if len(picked) == cfg.num_questions:
            return picked
    raise WorldError(f"world config: the catalog yields only {len(picked)} questions with "
                     f"{cfg.states_per_question} unshared variables each; num_questions is {cfg.num_questions}")


def _schema(cat: Catalog, variables: list[str], cfg: WorldConfig, rng: random.Random) -> dict[str, list[str]]:
    schema = {}
    for var in variables:
        names = list(cat.variables[var].values)
        keep = set(rng.sample(names, cfg.values_per_state))
        schema[var] = [n for n in names if n in keep]  # catalog order reads better than a shuffle
    return schema


def _info(spec: VariableSpec, values: list[str]) -> VariableInfo:
    full = spec.info()
    return VariableInfo(title=full.title, domain=full.domain, kind=full.kind,
                        values={v: full.values[v] for v in values},
                        steps={v: full.steps[v] for v in values if v in full.steps}, context=full.context,
                        ask=full.ask)


def event_line(cat: Catalog, event_phrase: str, rng: random.Random, wording: UserWording | None = None,
               own: bool = False) -> str:
    """The user's sentence telling the life event behind a change, in the first person (``own``: every draw is
    ``rng``'s, so the wording's generator is left as it was)."""
    intro = rng.choice(cat.dialogue.event_intros)
    if wording is not None:
        intro = wording.line("event_intros", rng if own else None)
    line = intro.format(event=first_person_event(event_phrase))
    return line[0].upper() + line[1:]


def session_messages(cat: Catalog, query: str, event_phrase: str | None, rounds: int, rng: random.Random,
                     wording: UserWording | None = None) -> list[Turn]:
    d = cat.dialogue

    # Varied wording swaps each line for one of its own drawing, after the world's generator has
    # drawn as it always does, so the rest of the world stays the fixed world's.
    def say(kind: str, line: str) -> str:
        return wording.line(kind) if wording is not None else line

    turns = [Turn("user", query), Turn("assistant", say("replies", rng.choice(d.replies)))]
    follow_ups = rng.sample(d.follow_ups, len(d.follow_ups))
    for r in range(1, rounds):
        if r == 1 and event_phrase is not None:
            # The second round tells the life event behind the change, in the user's own words.
            line = event_line(cat, event_phrase, rng, wording)
            turns += [Turn("user", line), Turn("assistant", say("replies", rng.choice(d.replies)))]
        else:
            turns += [Turn("user", say("follow_ups", follow_ups[r % len(follow_ups)])),
                      Turn("assistant", say("closings", rng.choice(d.closings)))]
    return turns


def _lower_first(line: str) -> str:
    """Lower-case a sentence's first letter to continue another sentence ("I" stays upper-case)."""
    word = line.split(" ", 1)[0]
    if word == "I" or word.startswith("I'"):
        return line
    return line[0].lower() + line[1:]


_CONNECTORS = ("{Subj} also", "Later, {subj}", "Around the same time, {subj}", "Then {subj}")


def _summary(first: str, gender: str | None, phrases: list[str]) -> str | None:
    if not phrases:
        return None
    subj = pronouns(gender)["subj"]
    parts = [render_event(phrases[0], first, gender) + "."]
    for k, phrase in enumerate(phrases[1:]):
        lead = _CONNECTORS[k % len(_CONNECTORS)].format(Subj=subj, subj=subj.lower())
        parts.append(render_event(phrase, lead, gender) + ".")
    return " ".join(parts)


def _answer(spec: QuestionSpec, cat: Catalog, variables: list[str], values: tuple[str, ...]) -> str:
    advice = [cat.variables[v].values[x].advice for v, x in zip(variables, values, strict=True)]
    return f"{spec.lead}: " + "; ".join(advice) + "."


def answer_choices(spec: QuestionSpec, cat: Catalog, variables: list[str], schema: dict[str, list[str]],
                   periods: list[Period], min_variants: int, rng: random.Random) -> list[AnswerChoice]:
    """Every state variant the user lived through ("experience"), then unlived distractors ("random")."""
    lived = list(dict.fromkeys(tuple(period.state[v] for v in variables) for period in periods))
    others = [c for c in itertools.product(*(schema[v] for v in variables)) if c not in set(lived)]
    extra = rng.sample(others, max(0, min(len(others), min_variants - len(lived))))
    choices = [AnswerChoice(list(c), _answer(spec, cat, variables, c), "experience") for c in lived]
    return choices + [AnswerChoice(list(c), _answer(spec, cat, variables, c), "random") for c in extra]


def generate_user(cfg: WorldConfig, index: int, cat: Catalog | None = None, fake=None) -> WorldUser:
    """User ``index`` of the world for ``cfg.seed``; independent of the other users."""
    cat = cat or load_catalog()
    if fake is None:
        from faker import Faker

        fake = Faker(cfg.locale)
    fake.seed_instance(f"{cfg.seed}-user-{index}")
    rng = random.Random(f"memgym-world-{cfg.seed}-user-{index}")

    questions = _pick_questions(cat, cfg, rng)
    variables = [v for _, vs in questions for v in vs]
    schema = _schema(cat, variables, cfg, rng)
    state = {v: rng.choice(vals) for v, vals in schema.items()}
    profile = make_profile(fake, rng, state)
    first, gender = profile.first_name, profile.gender
    start = date.fromisoformat(cfg.start_time)
    wording = UserWording(cfg.seed, index, cat) if cfg.wording == "varied" else None
    infos = {v: (wording.info if wording else _info)(cat.variables[v], schema[v]) for v in variables}

    def stated(query: str, shown: dict[str, str]) -> str:
        """Varied wording: the opening request also states each value in the world's words."""
        if wording is None:
            return query
        return " ".join([query, *(wording.statement(infos[v], x) for v, x in shown.items())])

    # Period 0: the initial state, revealed a few variables per session.
    order = rng.sample(variables, len(variables))
    groups = [order[i:i + cfg.initial_states_per_session] for i in range(0, len(order), cfg.initial_states_per_session)]
    times = session_times(start, len(groups), cfg.session_hours, rng)
    sessions = []
    for group, t in zip(groups, times, strict=True):
        lines = [rng.choice(cat.variables[v].values[state[v]].say) for v in group]
        query = " ".join([lines[0]] + [f"Also, {_lower_first(line)}" for line in lines[1:]])
        query = stated(query, {v: state[v] for v in group})
        sessions.append(WorldSession(event=None, exposed_states={v: state[v] for v in group}, query=query,
                                     session_time=t, messages=session_messages(cat, query, None, cfg.rounds_initial, rng,
                                                                               wording)))
    counts = {v: 1 for v in variables}
    periods = [Period(period_start=None, period_end=start.isoformat(), period_summary=None, sessions=sessions,
                      state=dict(state), updates={v: StateUpdate(None, state[v]) for v in variables},
                      update_cnts=dict(counts))]

    changes_left = {v: cfg.max_changes_per_state for v in variables}
    for p in range(1, cfg.num_periods + 1):
        begin, end = period_bounds(start, p, cfg.period_months)
        eligible = [v for v in variables if changes_left[v] > 0]
        wanted = cfg.changes_per_period + rng.randint(-cfg.changes_jitter, cfg.changes_jitter)
        changed = rng.sample(eligible, max(0, min(wanted, len(eligible))))
        times = session_times(end, len(changed), cfg.session_hours, rng)
        sessions, updates, phrases = [], {}, []
        for var, t in zip(changed, times, strict=True):
            old = state[var]
            new = rng.choice([x for x in schema[var] if x != old])
            value = cat.variables[var].values[new]
            phrase = rng.choice(value.events)
            query = stated(rng.choice(value.say), {var: new})
            told = phrase
            if cfg.tell_event == "opening":
                # A generator of its own draws the line, so the rest of the world is the second_round world's
                # (with one round: the same sessions, word for word, but for the event now said).
                side = random.Random(f"memgym-world-{cfg.seed}-user-{index}-event-{p}-{var}")
                query, told = f"{event_line(cat, phrase, side, wording, own=True)} {query}", None
            state[var] = new
            counts[var] += 1
            changes_left[var] -= 1
            updates[var] = StateUpdate(old, new)
            phrases.append(phrase)
            sessions.append(WorldSession(
                event=render_event(phrase, first, gender) + ".", exposed_states={var: new}, query=query,
                session_time=t, messages=session_messages(cat, query, told, cfg.rounds_update, rng, wording)))
        periods.append(Period(period_start=begin.isoformat(), period_end=end.isoformat(),
                              period_summary=_summary(first, gender, phrases), sessions=sessions,
                              state=dict(state), updates=updates, update_cnts=dict(counts)))

    qas = [Question(query=spec.query, required_info=list(vs),
                    answer_choices=answer_choices(spec, cat, vs, schema, periods, cfg.min_answer_variants, rng))
           for spec, vs in questions]

    return WorldUser(id=profile.uuid or str(index), start_time=cfg.start_time, user_profile=profile,
                     state_schema=schema, periods=periods, qas=qas,
                     variable_info=infos)


def generate_world(cfg: WorldConfig | None = None, seed: int | None = None, num_users: int | None = None) -> World:
    """The offline world for ``cfg`` (AMemGym base setting by default); ``seed``/``num_users`` override it."""
    from faker import Faker  # a few hundred ms to import: only when generating

    cfg = cfg or WorldConfig()
    if seed is not None or num_users is not None:
        cfg = dataclasses.replace(cfg, seed=cfg.seed if seed is None else seed,
                                  num_users=cfg.num_users if num_users is None else num_users)
    cfg.check()
    cat = load_catalog()
    fake = Faker(cfg.locale)
    return World([generate_user(cfg, i, cat, fake) for i in range(cfg.num_users)])
