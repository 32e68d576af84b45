"""Prompts of the LLM world generator (our wording). Each asks for plain text, one item per call."""

from __future__ import annotations

SYSTEM = "You help build realistic, consistent test data about one fictional person. Reply with the requested text only."

PROFILE_SUMMARY = """Here is a short profile of a fictional person:
{profile}

Write two or three sentences describing this person's life and personality, in the third person.
Do not invent facts that contradict the profile."""

QUESTION = """A person asks an AI assistant for advice. The best answer depends on two or more facts
about the person's life: {facts}.

Write one short question the person could ask, in the first person, that does not mention those
facts. Example of the style: "{example}" """

VALUE_TEXT = """Describe this personal situation as a short phrase a person could say about themselves
(at most eight words, no full sentence).
Topic: {title}
Situation: {value}"""

INITIAL_STATE = """Profile:
{profile}

Which option is most plausible for this person's {title}?
{options}
Answer with the letter only."""

NEW_VALUE = """Profile:
{profile}

This person's {title} used to be "{old}". Which option is the most plausible change?
{options}
Answer with the letter only."""

EVENT = """{name} is a fictional person. Their {title} changed from "{old}" to "{new}".
Write one sentence, in the past tense and the third person, about a life event that explains the
change. Start with "{name}"."""

ANSWER = """A person asks: "{question}"
What we know about them: {facts}.
Write a two-sentence answer personalised to exactly these facts, so that someone reading it could
tell which situation it was written for."""

ANSWER_REFINE = """Your answer did not make the situation clear enough. Rewrite it so it fits only
someone for whom: {facts}. Keep it to two sentences."""

CLASSIFY_ANSWER = """A person asked: "{question}"
Here is an answer written for them:
"{answer}"

Which situation was the answer written for?
{options}
Answer with the letter only."""

QUERY = """Write the first message a person sends to an AI assistant. In it they ask for help with
something everyday, and the message makes clear, without naming the topic directly, that:
{facts}.
Write it in the first person, one or two sentences."""

QUERY_REFINE = """That message did not make it clear enough that {facts}. Rewrite it so a careful
reader could tell, still without naming the topic directly."""

CHECK_QUERY = """A person wrote to an assistant:
"{query}"

What does the message suggest about their {title}?
{options}
Answer with the letter only."""


def lettered(options: list[str]) -> str:
    return "\n".join(f"{chr(65 + i)}. {text}" for i, text in enumerate(options))


def user_turn(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
