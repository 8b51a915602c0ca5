"""Zip archives of Markdown exports: pack a folder, unpack an upload without trusting it.

An uploaded archive may hold anything: absolute names, `..`, links, a zip bomb. `unpack_export`
accepts only the layout `export_markdown` writes (`memory.json` and `facts/*.md`) and refuses
archives whose members would unpack to more than `MAX_UNPACKED_BYTES`.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from pathlib import Path
from typing import Final

__all__ = ["MAX_UNPACKED_BYTES", "MAX_UPLOAD_BYTES", "is_zip", "pack_folder", "unpack_export"]

MAX_UPLOAD_BYTES: Final = 16 * 1024 * 1024
MAX_UNPACKED_BYTES: Final = 64 * 1024 * 1024
MAX_MEMBERS: Final = 5000
_MEMBER: Final = re.compile(r"^(memory\.json|facts/[A-Za-z0-9_.-]+\.md)$")


def is_zip(data: bytes) -> bool:
    return data.startswith((b"PK\x03\x04", b"PK\x05\x06"))


def pack_folder(folder: Path) -> bytes:
    """The files under `folder` as a deflated zip, named relative to `folder`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def unpack_export(data: bytes, destination: Path) -> None:
    """Write the members of a Markdown-export archive under `destination`.

    Raises:
        ValueError: not a zip, a member outside the export layout, no `memory.json`, too many
            members or too many bytes once unpacked.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"import: not a zip archive: {exc}") from None
    with archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        if len(members) > MAX_MEMBERS:
            raise ValueError(f"import: the archive has more than {MAX_MEMBERS} files")
        for info in members:
            if not _MEMBER.fullmatch(info.filename):
                raise ValueError(
                    f"import: unexpected file {info.filename!r} in the archive; a Markdown "
                    "export holds memory.json and facts/*.md"
                )
        if not any(info.filename == "memory.json" for info in members):
            raise ValueError("import: the archive has no memory.json; not a Markdown export")
        if sum(info.file_size for info in members) > MAX_UNPACKED_BYTES:
            raise ValueError(f"import: the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        for info in members:
            target = destination / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                # The declared size bounds the read, so a lying header cannot inflate it.
                with archive.open(info) as source:
                    content = source.read(info.file_size + 1)
            # Encrypted members raise RuntimeError, exotic ones NotImplementedError.
            except (
                zipfile.BadZipFile,
                OSError,
                EOFError,
                zlib.error,
                RuntimeError,
                NotImplementedError,
            ) as exc:
                raise ValueError(f"import: cannot read {info.filename!r}: {exc}") from None
            if len(content) > info.file_size:
                raise ValueError(f"import: {info.filename!r} is larger than its header says")
            target.write_bytes(content)
