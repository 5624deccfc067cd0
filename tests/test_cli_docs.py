"""The README's table of `mindflow` commands against the command itself.

The table is how an operator finds a command and its flags: a command missing from it, a row
naming a command or flag that does not exist, or a `mindflow run` job the runner does not know
would each send someone to an error.
"""

from __future__ import annotations

import re

import typer
from readme import table

from mindflow.cli import app
from mindflow.runner import JOBS


def _rows() -> list[str]:
    """The usages (`mindflow ...`) in the first cell of each row of the command table."""
    usages = []
    for line in table("| command | what it does |"):
        if line.startswith("| `mindflow"):
            first = line.replace("\\|", "\0").split("|")[1].replace("\0", "|")
            usages += re.findall(r"`(mindflow [^`]*)`", first)
    assert usages, "the README has no table of mindflow commands"
    return usages


def _words(usage: str) -> list[tuple[str, ...]]:
    """The command paths a usage names (`mindflow pin|unpin ...` names two), up to its first
    argument or option."""
    paths: list[tuple[str, ...]] = [()]
    for word in usage.split()[1:]:
        if not re.fullmatch(r"[a-z_]+(\|[a-z_]+)*", word):
            break
        paths = [(*path, alternative) for path in paths for alternative in word.split("|")]
    return paths


def _commands():
    """Each command path of the CLI -> its command; `run JOB` as one path per job."""
    root = typer.main.get_command(app)
    found = {}

    def walk(command, path: tuple[str, ...]) -> None:
        found[path] = command
        if hasattr(command, "list_commands"):
            context = typer.Context(command)
            for name in command.list_commands(context):
                walk(command.get_command(context, name), (*path, name))

    walk(root, ())
    for job in JOBS:
        found[("run", job)] = found[("run",)]
    return found


def test_every_row_names_commands_and_options_that_exist():
    commands = _commands()
    wrong = []
    for usage in _rows():
        flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b", usage))
        # A row for several commands (`memories show|list|history`) gives their flags together.
        known: set[str] = set()
        for path in _words(usage):
            command = commands.get(path)
            if command is None or not path:
                wrong.append(f"{usage!r}: no command `mindflow {' '.join(path)}`")
                continue
            known |= {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}
        if flags - known:
            wrong.append(f"{usage!r}: no command of the row has {sorted(flags - known)}")
    assert wrong == []


def test_every_command_and_job_has_a_row():
    documented = {path for usage in _rows() for path in _words(usage)}
    leaves = {
        path
        for path, command in _commands().items()
        if path and not hasattr(command, "list_commands") and path != ("run",)
    }
    assert sorted(" ".join(path) for path in leaves - documented) == []


def test_the_help_of_run_names_every_job():
    run = _commands()[("run",)]
    job = next(param for param in run.params if param.name == "job")
    assert sorted(set(JOBS) - set(re.findall(r"[a-z_]+", job.help))) == []
