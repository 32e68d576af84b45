"""User profiles for the offline generator: names, places and jobs from Faker, the rest from short lists.

The profile is a snapshot taken at the start of the timeline, so where a schema variable covers the
same ground (relationship, line of work) the profile agrees with the initial state.
"""

from __future__ import annotations

import random

from memgym_env.world.timeline import pronouns
from memgym_env.world.types import Profile

EDUCATION = ("high school", "vocational training", "associate degree", "bachelors", "masters", "doctorate")
HOBBIES = ("hiking", "chess", "baking", "photography", "cycling", "birdwatching", "knitting", "jazz records",
           "pottery", "swimming", "film history", "crosswords", "sailing", "gardening", "astronomy", "tennis",
           "salsa dancing", "woodworking", "podcasts", "video games", "fishing", "calligraphy", "running", "travel vlogs")
SKILLS = ("public speaking", "negotiation", "spreadsheets", "first aid", "carpentry", "data analysis",
          "copywriting", "project planning", "sewing", "bookkeeping", "photo editing", "conflict resolution",
          "budgeting", "teaching", "sketching", "customer care", "event planning", "statistics", "translation")
_OCCUPATION_BY_FIELD = {
    "healthcare": ("nurse", "physiotherapist", "pharmacist", "paramedic"),
    "tech": ("software developer", "data engineer", "IT support specialist", "web designer"),
    "education": ("primary school teacher", "secondary school teacher", "teaching assistant"),
}
_MARITAL_FROM_STATE = {"single": "single", "dating": "in a relationship", "married": "married"}


def _marital(age: int, rng: random.Random) -> str:
    if age < 25:
        return rng.choice(("single", "single", "in a relationship"))
    if age > 65:
        return rng.choice(("married", "widowed", "divorced", "married"))
    return rng.choice(("single", "married", "married", "in a relationship", "divorced"))


def _job(raw: str) -> str:
    """Faker writes some jobs as "Engineer, land"; we want "land engineer"."""
    head, _, qualifier = raw.lower().partition(", ")
    return f"{qualifier} {head}" if qualifier else head


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def make_profile(fake, rng: random.Random, initial_state: dict[str, str]) -> Profile:
    """A profile consistent with the user's initial state; ``fake`` is a seeded ``Faker``."""
    gender = rng.choice(("female", "male", "female", "male", "nonbinary"))
    name = {"female": fake.name_female, "male": fake.name_male}.get(gender, fake.name_nonbinary)()
    age = rng.randint(18, 85)
    marital = _MARITAL_FROM_STATE.get(initial_state.get("relationship_status", ""), None) or _marital(age, rng)
    education = rng.choice(EDUCATION if age >= 22 else EDUCATION[:3])
    field_jobs = _OCCUPATION_BY_FIELD.get(initial_state.get("job_field", ""))
    if age >= 70:
        occupation = f"retired {_job(fake.job())}"
    elif field_jobs:
        occupation = rng.choice(field_jobs)
    else:
        occupation = _job(fake.job())
    hobbies = ", ".join(rng.sample(HOBBIES, 3))
    skills = ", ".join(rng.sample(SKILLS, 3))
    first = name.split()[0]
    subj = pronouns(gender)["subj"]
    verb = "live" if subj == "They" else "lives"
    city = fake.city()
    info = (f"{first} grew up in {city} and works as {_a(occupation)}. "
            f"{subj} {verb} for {hobbies.split(', ')[0]} and is good at {skills.split(', ')[0]}.")
    if occupation.startswith("retired"):
        info = f"{first} grew up in {city} and is {_a(occupation)}. {subj} {verb} for {hobbies.split(', ')[0]}."
    uuid = fake.uuid4()
    fields = dict(name=name, age=age, gender=gender, marital_status=marital, education_level=education,
                  occupation=occupation, hobbies_and_interests=hobbies, skills_and_expertise=skills)
    formatted = "\n".join(f"{k}: {v}" for k, v in fields.items())
    return Profile(uuid=uuid, complementary_info=info, formatted_str=formatted, **fields)
