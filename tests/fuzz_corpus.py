"""A seeded corpus of broken and borderline agent outputs, built from valid ones by mutation.

Hypothesis explores the space with shrinking; this corpus gives a fixed, fast 10,000 strings per
agent that look like what a small model really writes: cut mid-generation, wrong types, huge
values, stray prose, odd unicode.
"""

from __future__ import annotations

import json
import random

from membuilder.memory.ops import Add, CoreAppend, CoreReplace, CoreRewrite, Merge, Skip, Update, render_ops

POOL = [
    "2023-05-08: Caroline went to an LGBTQ support group | Details: she felt inspired",
    "Luna: the user's cat | Details: grey, three years old",
    "Brewing pour-over coffee | Steps: 1. grind 18 g 2. bloom 30 s 3. pour to 300 g | Context: weekday mornings",
    "Melanie paints landscapes | Details: started in 2022",
    "User prefers vegetarian food",
    "Trip to Lisbon in June | Details: booked with her sister",
    "日本語のメモ: 東京に住んでいる",
    "emoji 🎨🐱 and RTL שלום",
]
ODD = ["\x00", "\ud800", "\u202e", "e\u0301", "🙂", "\n", "\\", '"', "{", "}", "[", "]", ",", ":", "\t"]


def _random_ops(agent: str, rng: random.Random):
    pick = lambda: rng.choice(POOL)  # noqa: E731
    if agent == "core":
        return [rng.choice([CoreAppend(pick()), CoreReplace(pick(), pick()), CoreRewrite(pick())])]
    makers = {
        "episodic": [lambda: Add(pick()), lambda: Update(pick(), pick()), lambda: Merge((pick(), pick(), pick()), pick())],
        "semantic": [lambda: Add(pick()), lambda: Update(pick(), pick()), lambda: Skip("general knowledge")],
        "procedural": [lambda: Add(pick()), lambda: Update(pick(), pick())],
    }[agent]
    return [rng.choice(makers)() for _ in range(rng.randint(0, 4))]


def _mutate(text: str, rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind == 0:  # cut mid-generation
        return text[: rng.randint(0, len(text))]
    if kind == 1:  # character edits, odd unicode included
        chars = list(text)
        for _ in range(rng.randint(1, 5)):
            pos = rng.randint(0, len(chars))
            op = rng.randrange(3)
            if op == 0 and chars and pos < len(chars):
                del chars[pos]
            elif op == 1:
                chars.insert(pos, rng.choice(ODD))
            elif chars and pos < len(chars):
                chars[pos] = rng.choice(ODD)
        return "".join(chars)
    if kind == 2:  # a value of the wrong type
        obj = json.loads(text)
        bad = rng.choice([None, 42, 3.5, True, [], {}, ["x"], {"a": 1}])
        if "operations" in obj and obj["operations"]:
            op = rng.choice(obj["operations"])
            op[rng.choice(list(op))] = bad
        elif "operations" in obj:
            obj["operations"] = bad
        else:
            obj[rng.choice(list(obj))] = bad
        return json.dumps(obj)
    if kind == 3:  # a huge value
        obj = json.loads(text)
        big = rng.choice(POOL) * rng.randint(200, 3000)
        if obj.get("operations"):
            obj["operations"][0]["memory"] = big
        else:
            obj["content"] = big
        return json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    if kind == 4:  # wrapped in prose, thoughts and fences
        return f"<think>{text[:30]}</think>Here you go:\n```json\n{text}\n```\nDone."
    if kind == 5:  # an unterminated thought
        return f"<think>I should write {text}"
    if kind == 6:  # the other agents' format
        return text.replace('"operations"', '"operation"') if '"operations"' in text else json.dumps({"operations": [json.loads(text)]})
    if kind == 7:  # deep nesting
        depth = rng.randint(100, 5000)
        return "{" + '"operations": ' + "[" * depth + "]" * rng.randint(0, depth) + "}"
    if kind == 8:  # random unicode noise
        return "".join(chr(rng.randint(0, 0x2FFFF)) for _ in range(rng.randint(0, 200)))
    return text  # valid as written


def corpus(agent: str, size: int = 10_000, seed: int = 0) -> list[str]:
    rng = random.Random(f"{agent}-{seed}")
    return [_mutate(render_ops(agent, _random_ops(agent, rng)), rng) for _ in range(size)]
