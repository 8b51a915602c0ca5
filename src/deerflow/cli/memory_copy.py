"""`deerflow memory copy`: move whole users from one DeerMem store to another (files ↔ PostgreSQL).

Each user is read whole from the source engine (`dump_user`) and written whole into the
destination's (`restore_user`): summaries, every bucket's facts and the audit log, with their
revisions and ids. Nothing is merged: a user the destination already holds is refused before
anything is written, or skipped with `--skip-existing`. The source is only read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.markup import escape

from deerflow.agents.memory.extensions import EngineBacked, UserMover
from deerflow.agents.memory.manager import MemoryConflictError, MemoryUnsupportedError
from deerflow.cli import memory_render as render
from deerflow.cli.memory_session import UsersExistError, memory_session
from deerflow.cli.options import ConfigOption, JsonOption

__all__ = ["copy"]

# How many user ids an error message lists before it says how many more there are.
NAMED_USERS: Final = 5


def copy(
    to: Annotated[
        Path,
        typer.Option(
            "--to",
            help="config.yaml of the destination: its DeerMem memory receives the users.",
            dir_okay=False,
            exists=True,
        ),
    ],
    users: Annotated[
        list[str] | None,
        typer.Option(
            "--user",
            "-u",
            help="Copy only this user (repeat for several; default: every user of the source).",
        ),
    ] = None,
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing",
            help="Leave out users the destination already holds, and copy the others.",
        ),
    ] = False,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Copy every user's memory (or the --user ones) into the memory of another config (DeerMem).

    Summaries, every agent's facts and the whole change history move with
    their revisions and ids, so `memory history` and `memory revert` keep
    working. The source is only read. Exits with 2, writing nothing, when a
    user already has a memory at the destination (unless --skip-existing).
    """
    with (
        memory_session(config, json_output=json_output) as source,
        memory_session(to, json_output=json_output) as destination,
    ):
        if not isinstance(source, EngineBacked) or not isinstance(destination, EngineBacked):
            plain = source if not isinstance(source, EngineBacked) else destination
            raise MemoryUnsupportedError(type(plain).__name__, "copy")
        if _store_of(source) == _store_of(destination):
            raise ValueError(f"--to {to}: the destination is the source's own store")
        reader, writer = source.engine, destination.engine
        stored = list(reader.user_ids())
        known = set(stored)
        wanted = list(dict.fromkeys(users)) if users else stored
        if missing := [user for user in wanted if user not in known]:
            raise ValueError(f"--user: no memory in the source for {_named(missing)}")
        present = set(writer.user_ids())
        taken = [user for user in wanted if user in present]
        if taken and not skip_existing:
            raise UsersExistError(_taken_message(taken))
        started = time.perf_counter()
        copied, skipped = _copy_users(
            reader,
            writer,
            [user for user in wanted if user not in present],
            skip_existing=skip_existing,
            progress=not json_output,
        )
        seconds = time.perf_counter() - started
    _report(copied, taken + skipped, seconds, json_output=json_output)


def _copy_users(
    reader: UserMover,
    writer: UserMover,
    users: list[str],
    *,
    skip_existing: bool,
    progress: bool,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Copy `users` one by one; return what each copy held, and the users found taken only
    while copying (another process wrote them meanwhile)."""
    copied: list[dict[str, Any]] = []
    skipped: list[str] = []
    with render.progress_bar("copying users", enabled=progress, total=len(users)) as advance:
        for done, user in enumerate(users, 1):
            dump = reader.dump_user(user)
            try:
                writer.restore_user(dump)
            except MemoryConflictError:
                if not skip_existing:
                    raise UsersExistError(_taken_message([user], copied=len(copied))) from None
                skipped.append(user)
            else:
                copied.append(
                    {"user_id": user, "facts": len(dump.facts), "history": len(dump.history)}
                )
            advance(done)
    return copied, skipped


def _store_of(manager: Any) -> tuple[str, ...]:
    """Where a DeerMem manager keeps its memory: its folder, or its database and schema."""
    settings = manager.backend_config
    if settings.get("storage") == "postgres":  # DeerMem's keys, with their defaults
        schema = settings.get("database_schema") or "deermem"
        return ("postgres", str(settings["database_url"]), schema)
    return ("files", os.path.realpath(settings["storage_path"]))


def _named(users: list[str]) -> str:
    shown = ", ".join(repr(user) for user in users[:NAMED_USERS])
    more = len(users) - NAMED_USERS
    return shown if more <= 0 else f"{shown} and {more} more"


def _taken_message(users: list[str], *, copied: int = 0) -> str:
    done = f"the users before it were copied ({copied}); " if copied else "nothing was written; "
    return (
        f"the destination already has a memory for {_named(users)}: {done}"
        "pass --skip-existing to copy the others, or erase those users there first"
    )


def _report(
    copied: list[dict[str, Any]], skipped: list[str], seconds: float, *, json_output: bool
) -> None:
    facts = sum(user["facts"] for user in copied)
    history = sum(user["history"] for user in copied)
    if json_output:
        render.print_json(
            {
                "users": len(copied),
                "facts": facts,
                "history": history,
                "copied": copied,
                "skipped": skipped,
                "seconds": round(seconds, 3),
            }
        )
        return
    out = render.stdout()
    entries = render.counted(history, "history entry", "history entries")
    out.print(
        f"copied {render.counted(len(copied), 'user')} ({render.counted(facts, 'fact')}, "
        f"{entries}) in {seconds:.2f}s"
    )
    if skipped:
        out.print(f"skipped {len(skipped)} already in the destination: {escape(_named(skipped))}")
