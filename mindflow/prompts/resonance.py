"""Resonance with a model: phase 1 (seeds: entities and clean queries) and phase 5 (the fragments
rewritten in the user's language), as the MindBot design's subconscious does them."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from mindflow.prompts import Prompt, Text, user

MAX_QUERIES = 3
STORY_CHARS = 6_000  # of STORY.md, its latest part: the relationship as it stands now
SOUL_CHARS = 3_000


class Seeds(BaseModel):
    entities: list[Text] = Field(default_factory=list, max_length=10)
    queries: list[Text] = Field(min_length=1, max_length=MAX_QUERIES)

    @field_validator("queries")
    @classmethod
    def distinct(cls, queries: list[str]) -> list[str]:
        return list(dict.fromkeys(" ".join(q.split()) for q in queries))


SEEDS_SYSTEM = f"""You are the subconscious of an AI being. Before it answers, you decide what its
long-term memory should be searched for. From the user's message (and the recent messages, if
given), return:
- entities: the people, places, projects and things the message names, as written;
- queries: 2 to {MAX_QUERIES} short, clean search phrases for memories that would matter here
  (plain words; no ids, usernames, timestamps or technical metadata)."""


def seeds(message: str, recent: list[str]) -> Prompt:
    body = ""
    if recent:
        body += "Recent messages:\n" + "\n".join(f"- {' '.join(m.split())[:500]}" for m in recent) + "\n\n"
    body += f"User's message:\n{message}"
    return Prompt("resonance_seeds", SEEDS_SYSTEM, user(body), Seeds, max_tokens=300)


class Rewritten(BaseModel):
    lines: list[Text] = Field(min_length=1)


REWRITE_SYSTEM = """You are the subconscious of an AI being. Below are raw memory fragments that
surfaced for the user's message, each starting with when it happened. Rewrite each fragment as
the being's own recollection, in the language of the user's message, in the first person, in
the voice SOUL.md describes and with the relationship STORY.md tells. Keep the time label of
each line at its start, translated.

Rules:
1. Do not invent facts not explicitly in the raw memory.
2. Do not add sensory details ("I heard", "I saw") unless literally stated.
3. Only rephrase style and point of view; keep every fact from the raw text.
4. When uncertain, stay closer to the original wording.

Return exactly one line per fragment, in the same order."""


def rewrite(message: str, fragments: list[str], soul: str, story: str) -> Prompt:
    body = (
        f"SOUL.md:\n{soul.strip()[-SOUL_CHARS:] or '(none)'}\n\n"
        f"STORY.md (latest part):\n{story.strip()[-STORY_CHARS:] or '(none)'}\n\n"
        f"User's message:\n{message}\n\n"
        "Fragments:\n" + "\n".join(f"{i}. {f}" for i, f in enumerate(fragments, 1))
    )

    def one_per_fragment(answer: Rewritten) -> None:
        if len(answer.lines) != len(fragments):
            raise ValueError(f"{len(answer.lines)} lines for {len(fragments)} fragments")

    return Prompt(
        "resonance_rewrite", REWRITE_SYSTEM, user(body), Rewritten,
        max_tokens=200 + 120 * len(fragments), check=one_per_fragment,
    )  # fmt: skip
