"""Prompts: one module per prompt, each with `build(...) -> Prompt` and the schema it expects.

The shapes every prompt module shares live in `mindflow.prompts.prompt`; listed here.
"""

from mindflow.prompts.prompt import IsoDate, OptionalText, Prompt, Text, Unit, user

__all__ = ["IsoDate", "OptionalText", "Prompt", "Text", "Unit", "user"]
