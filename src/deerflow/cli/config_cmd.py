"""`deerflow config`: validate and show the configuration."""

from __future__ import annotations

import json
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.syntax import Syntax

from deerflow.agents.memory.base import check_contract
from deerflow.agents.memory.factory import resolve_manager_class, resolve_storage_path
from deerflow.cli.options import ConfigOption, JsonOption
from deerflow.config import load_config, resolve_config_path, runtime_home
from deerflow.redaction import redact, redact_text

app = typer.Typer(help="Validate and show config.yaml.", no_args_is_help=True)


@app.command()
def check(config: ConfigOption = None, json_output: JsonOption = False) -> None:
    """Validate config.yaml and print the resolved configuration, secrets redacted.

    Exits with 1 when the file is invalid, names an unknown backend, or asks for a mode the
    backend cannot serve.
    """
    try:
        report = check_config(config)
    except ValueError as exc:
        message = redact_text(str(exc))
        if json_output:
            typer.echo(json.dumps({"valid": False, "error": message}, indent=2))
        else:
            Console(stderr=True).print(
                f"[bold red]invalid configuration[/]\n{message}", highlight=False
            )
        raise typer.Exit(1) from None
    if json_output:
        typer.echo(json.dumps({"valid": True, **report}, indent=2))
        return
    console = Console()
    source = report["config_file"] or "no config file: defaults"
    console.print(f"[bold green]valid[/] ({source})")
    console.print(f"runtime home: {report['home']}")
    console.print(f"memory backend: {report['memory_backend']}")
    console.print(Syntax(yaml.safe_dump(report["config"], sort_keys=False), "yaml"))


def check_config(path: Any = None) -> dict[str, Any]:
    """Load and validate everything `deerflow` would at startup, without building anything.

    Raises:
        ValueError: the first problem found, naming the dotted key.
    """
    config = load_config(path)
    config_path, _ = resolve_config_path(path)
    home = runtime_home()
    backend = resolve_manager_class(config.memory.manager_class)
    check_contract(backend, config.memory.mode)
    resolved = config.model_dump(mode="json")
    memory = resolved["memory"]
    memory["backend_config"] = resolve_storage_path(memory["backend_config"], home)
    return {
        "config_file": str(config_path.resolve()) if config_path.exists() else None,
        "home": str(home),
        "memory_backend": f"{backend.__module__}.{backend.__qualname__}",
        "config": redact(resolved),
    }
