"""Scene and fact extraction from a batch of episodes, in one call per batch."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

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


# VADSNT, the Being design's emotion: each in [0, 1].
EMOTION_KEYS = ("valence", "arousal", "dominance", "safety", "novelty", "trust")


class Emotion(BaseModel):
    valence: Unit
    arousal: Unit
    dominance: Unit
    safety: Unit
    novelty: Unit
    trust: Unit

    @model_validator(mode="before")
    @classmethod
    def from_list(cls, value: Any) -> Any:
        """Six numbers in VADSNT order are the same emotion."""
        if isinstance(value, (list, tuple)):
            if len(value) != len(EMOTION_KEYS):
                raise ValueError(f"emotion needs the six VADSNT values, not {len(value)}")
            return dict(zip(EMOTION_KEYS, value, strict=True))
        return value


def _when_forms(value: Any) -> Any:
    """The design's two forms of `when`: a date ("2024-03-02", or a list of them), or a list of
    {date, action}."""
    if isinstance(value, str):
        return [{"date": value}]
    if isinstance(value, list):
        return [{"date": w} if isinstance(w, str) else w for w in value]
    return value


def _lines(value: Any) -> Any:
    """A list of strings; one string is a list of one, nothing is an empty list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [v for v in value if not (isinstance(v, str) and not v.strip())]
    return value


class Scene(BaseModel):
    episode_ids: list[Text] = Field(min_length=1)
    action: Text
    actors: list[Text] = Field(default_factory=list)
    when: Annotated[list[When], BeforeValidator(_when_forms)] = Field(default_factory=list)
    setting: OptionalText = None
    dialogue: Annotated[list[Text], BeforeValidator(_lines)] = Field(default_factory=list)
    sensory: Annotated[list[Text], BeforeValidator(_lines)] = Field(default_factory=list)
    feeling: OptionalText = None
    importance: Unit
    themes: list[Text] = Field(default_factory=list)
    # Phrases a later question about the scene might use where its text does not: published as
    # full-text keys of its memory (mindflow/recall/keys.py).
    keyphrases: Annotated[list[Text], BeforeValidator(_lines)] = Field(default_factory=list)
    emotion: Emotion | None = None


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
  with dates as YYYY-MM-DD), setting, dialogue (short quotes, a list of strings), sensory (a
  list of sensory details), feeling (the being's feeling in a few words), importance 0..1,
  themes (1-4 short tags), keyphrases (2-6 short phrases someone asking about this moment
  later might use that the episodes' own words do not: the kind of event, the topic, the
  things and places involved, e.g. "apartment purchase" for "we signed the papers") and
  emotion, VADSNT: an object of six numbers in 0..1 named valence, arousal, dominance,
  safety, novelty, trust.
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
