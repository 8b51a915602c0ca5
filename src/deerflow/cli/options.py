"""Options shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="config.yaml to use (default: $DEER_FLOW_CONFIG, else ./config.yaml).",
        dir_okay=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
UserOption = Annotated[
    str, typer.Option("--user", "-u", help="User whose memory to use (default: 'default').")
]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", "-a", help="Agent bucket (default: the default bucket)."),
]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (needed without a TTY).")
]
ExpectedRevisionOption = Annotated[
    int | None,
    typer.Option(
        "--expected-revision",
        min=0,
        help=(
            "Write only if the memory is still at this revision (the `revision` of "
            "`memory show --json`); otherwise change nothing and exit with the conflict code."
        ),
    ),
]
