"""`deerflow config`: validate and show the configuration."""

from __future__ import annotations

import json
from typing import Any

import typer
import yaml
from rich.markup import escape
from rich.syntax import Syntax

from deerflow.agents.memory.factory import resolve_storage_path
from deerflow.agents.memory.manager import MemoryManagerError
from deerflow.cli import console as consoles
from deerflow.cli.options import ConfigOption, JsonOption
from deerflow.config import runtime_home
from deerflow.redaction import redact, redact_text
from deerflow.startup import build_checked, load_checked

app = typer.Typer(help="Validate and show config.yaml.", no_args_is_help=True)


@app.command()
def check(config: ConfigOption = None, json_output: JsonOption = False) -> None:
    """Validate config.yaml the way startup does and print the resolved configuration.

    Runs what `serve`, `chat`, `memory` and `mcp` run before they start: the file's schema, every
    `models[].use` import, the backend's own `backend_config` schema and mode, the storage
    location; it builds the backend and closes it again. Exits with 1 and one line per problem
    (FILE: dotted.key: what is wrong) when any of them would fail. Secrets are redacted.
    """
    try:
        report = check_config(config)
    # Startup would stop on any of these: the backend's storage or server failing counts too.
    except (ValueError, MemoryManagerError, OSError) as exc:
        problems = redact_text(str(exc)).splitlines()
        if json_output:
            typer.echo(json.dumps({"valid": False, "errors": problems}, indent=2))
        else:
            stderr = consoles.stderr()
            stderr.print("[bold red]invalid configuration[/]")
            for line in problems:
                stderr.print(escape(line), highlight=False)
        raise typer.Exit(1) from None
    if json_output:
        typer.echo(json.dumps({"valid": True, **report}, indent=2))
        return
    console = consoles.stdout()
    source = report["config_file"] or "no config file: defaults"
    console.print(f"[bold green]valid[/] ({source})")
    console.print(f"runtime home: {report['home']}")
    console.print(f"memory backend: {report['memory_backend']}")
    console.print(Syntax(yaml.safe_dump(report["config"], sort_keys=False), "yaml"))


def check_config(path: Any = None) -> dict[str, Any]:
    """Run startup's checks (`deerflow.startup`), building the backend and closing it again.

    Raises:
        ValueError: every problem found, one per line, naming the file and the dotted key.
        MemoryManagerError, OSError: building the backend failed (its storage, its server).
    """
    config, source = load_checked(path)
    home = runtime_home()
    manager = build_checked(config, source, home=home)
    manager.close()
    backend = type(manager)
    resolved = config.model_dump(mode="json")
    memory = resolved["memory"]
    memory["backend_config"] = resolve_storage_path(memory["backend_config"], home)
    return {
        "config_file": str(source.resolve()) if source.exists() else None,
        "home": str(home),
        "memory_backend": f"{backend.__module__}.{backend.__qualname__}",
        "config": redact(resolved),
    }
