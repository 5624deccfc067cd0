"""Scene and fact extraction from a batch of episodes, in one call per batch."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field, field_validator

from mindflow.prompts import IsoDate, OptionalText, Prompt, Text, Unit, user

# The relation vocabulary of the semantic graph; anything else is stored as relates-to.
PREDICATES = (
    "develops", "uses", "part-of", "depends-on", "decided-on", "supersedes", "prefers",
    "avoids", "relates-to", "works-on", "works-with", "knows", "owns", "located-in",
    "created", "learned", "blocked-by", "caused",
)  # fmt: skip
CATEGORIES = ("person", "project", "technology", "preference", "decision", "event", "place", "other")


class When(BaseModel):
    date: IsoDate
    action: OptionalText = None


class Scene(BaseModel):
    episode_ids: list[Text] = Field(min_length=1)
    action: Text
    actors: list[Text] = Field(default_factory=list)
    when: list[When] = Field(default_factory=list)
    setting: OptionalText = None
    dialogue: OptionalText = None
    sensory: OptionalText = None
    feeling: OptionalText = None
    importance: Unit
    themes: list[Text] = Field(default_factory=list)
    # VADSNT: valence, arousal, dominance, surprise, novelty, tension, each in [0, 1].
    emotion: list[Unit] | None = Field(default=None, min_length=6, max_length=6)


class Entity(BaseModel):
    name: Text
    aliases: list[Text] = Field(default_factory=list)


class Fact(BaseModel):
    entity: Text
    key: Text
    value: Text
    category: Text = "other"
    confidence: Unit = 0.8
    # How much the fact matters to the being (Gandalf's i); None: that of its scenes.
    importance: Unit | None = None
    episode_ids: list[Text] = Field(default_factory=list)


class Relation(BaseModel):
    subject: Text
    predicate: str  # mapped onto the vocabulary below; a blank one is relates-to
    object: Text
    episode_ids: list[Text] = Field(default_factory=list)

    @field_validator("predicate")
    @classmethod
    def known_predicate(cls, value: str) -> str:
        value = value.strip().lower().replace("_", "-").replace(" ", "-")
        return value if value in PREDICATES else "relates-to"


class Extraction(BaseModel):
    scenes: list[Scene]
    entities: list[Entity] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    relations: list[Relation] = Field(default_factory=list)


SYSTEM = f"""You turn a being's raw episodes (messages, events, decisions) into long-term memory.

Return:
- scenes: group consecutive episodes that belong to one moment into one scene (never one
  scene per word; a single episode may be its own scene). Each scene keeps the ids of the
  episodes it came from in episode_ids (every given episode id must appear in exactly one
  scene), action (what happened, one or two sentences), actors, when (list of {{date, action}}
  with dates as YYYY-MM-DD), setting, dialogue (a short quote if any), sensory, feeling (the
  being's feeling in a few words), importance 0..1, themes (1-4 short tags) and emotion as
  six numbers in 0..1: valence, arousal, dominance, surprise, novelty, tension (VADSNT).
- entities: the people, projects, tools and places mentioned, each with a canonical name and
  the other names used for it (aliases). Reuse a known entity name when it is the same thing.
- facts: durable facts as (entity, key, value, category, confidence, importance 0..1,
  episode_ids). A key
  names one attribute with one current value (e.g. database, city, role); when a fact
  changes, give the new value under the same key. Categories: {", ".join(CATEGORIES)}.
- relations: (subject, predicate, object, episode_ids) with predicate one of
  {", ".join(PREDICATES)}."""


def render_episode(episode_id: str, day: str, speaker: str, text: str) -> str:
    """One line per episode: line breaks inside the text become spaces."""
    return f"[{episode_id}] {day} {' '.join(speaker.split())}: {' '.join(text.split())}"


def build(episode_lines: list[str], known_entities: list[str], max_tokens: int) -> Prompt:
    known = json.dumps(known_entities, ensure_ascii=False) if known_entities else "[]"
    body = f"Known entities: {known}\n\nEpisodes:\n" + "\n".join(episode_lines)
    return Prompt("extraction", SYSTEM, user(body), Extraction, max_tokens=max_tokens)
