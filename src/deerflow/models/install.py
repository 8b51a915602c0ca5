"""Install the `local` extra (the offline model) on first use, showing the installer's progress.

llama-cpp-python compiles from source, which takes minutes, so the installer's output is shown
as it comes and a line every `HEARTBEAT_SECONDS` says it is still working. Inside this project's
own environment the extra is installed from the lock (`uv sync --locked --inexact --extra
local`); anywhere else its requirements are installed into the running interpreter with
`uv pip install`. Both build llama.cpp portably (see `tool.uv.config-settings-package` in
pyproject.toml).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from deerflow.models.local import LOCAL_EXTRA_MODULES
from deerflow.version import DISTRIBUTION

__all__ = ["LocalInstallError", "ensure_local_extra", "install_command", "local_extra_installed"]

HEARTBEAT_SECONDS: Final = 30.0
# The build setting pyproject.toml gives uv sync, repeated for installs outside the project.
_PORTABLE_BUILD: Final = "llama-cpp-python:cmake.args=-DGGML_NATIVE=OFF"
_LOCAL_MARKER: Final = re.compile(r""";.*\bextra\s*==\s*['"]local['"]""")


class LocalInstallError(RuntimeError):
    """The `local` extra could not be installed; the message says what to run by hand."""


def local_extra_installed() -> bool:
    """Whether llama-cpp-python and the model package can be imported."""
    importlib.invalidate_caches()
    return all(importlib.util.find_spec(name) is not None for name in LOCAL_EXTRA_MODULES)


def _project_root() -> Path | None:
    """This project's checkout, when the running interpreter is its own `.venv`."""
    root = Path(__file__).resolve().parents[3]
    in_checkout = (root / "uv.lock").is_file() and (root / "pyproject.toml").is_file()
    own_venv = Path(sys.prefix).resolve() == (root / ".venv").resolve()
    return root if in_checkout and own_venv else None


def _uv() -> str:
    # `uv run` names itself in $UV; otherwise look on PATH.
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise LocalInstallError(
            "installing the offline model needs uv (https://docs.astral.sh/uv/): "
            f"pip install uv, or install the requirements yourself: {' '.join(_requirements())}"
        )
    return found


def _requirements() -> list[str]:
    """The `local` extra's requirements, as this installed distribution declares them."""
    specs = importlib.metadata.requires(DISTRIBUTION) or []
    return [spec.split(";")[0].strip() for spec in specs if _LOCAL_MARKER.search(spec)]


def install_command() -> tuple[list[str], Path | None]:
    """The command that installs the extra, and the directory to run it in."""
    uv = _uv()
    root = _project_root()
    if root is not None:
        return [uv, "sync", "--locked", "--inexact", "--extra", "local"], root
    command = [uv, "pip", "install", "--python", sys.executable]
    return [*command, "--config-settings-package", _PORTABLE_BUILD, *_requirements()], None


def ensure_local_extra(echo: Callable[[str], None]) -> None:
    """Install the `local` extra unless it is there, passing every line of progress to `echo`.

    Raises:
        LocalInstallError: no uv, the installer failed, or the modules are still missing after it.
    """
    if local_extra_installed():
        return
    command, cwd = install_command()
    echo(
        "The offline model is not installed yet: installing the `local` extra now "
        "(llama-cpp-python compiles from source: about 7 minutes on 2 cores, once)."
    )
    echo(f"$ {' '.join(command)}")
    env = {**os.environ}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            minutes, seconds = divmod(int(time.monotonic() - started), 60)
            echo(f"  ... still installing ({minutes}m {seconds:02d}s so far)")

    ticker = threading.Thread(target=heartbeat, name="deerflow-install-heartbeat", daemon=True)
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    ) as process:
        ticker.start()
        try:
            assert process.stdout is not None  # PIPE was asked for
            for line in process.stdout:
                echo(f"  {line.rstrip()}")
        finally:
            done.set()
            returncode = process.wait()
    ticker.join()
    if returncode != 0:
        raise LocalInstallError(
            f"installing the offline model failed (exit {returncode}); run it by hand to see why: "
            f"{' '.join(command)}"
        )
    if not local_extra_installed():
        raise LocalInstallError(
            f"the installer finished but {', '.join(LOCAL_EXTRA_MODULES)} cannot be imported "
            f"by {sys.executable}"
        )
    minutes, seconds = divmod(int(time.monotonic() - started), 60)
    echo(f"The offline model is installed ({minutes}m {seconds:02d}s).")
