"""Atomic file writes: a reader never sees a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


class OutputPathError(ValueError):
    """An output path that cannot be written: a folder where a file is asked for, or a file where
    a folder is (the CLI reports it as one line)."""


def make_directory(path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path`` with its parents (nothing if it exists); an
    :class:`OutputPathError` names the path when it, or a folder above it, is a file."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((f for f in (path, *path.parents) if f.exists() and not f.is_dir()), None)
        if blocker is None:
            raise
        raise OutputPathError(f"{blocker} is a file, not a folder: give another path than {path}") from None
    return path


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it goes.

    The result gets the permissions of the file it replaces, or else those of a new file
    (``0o666`` minus the umask) rather than ``mkstemp``'s private ``0o600``. A ``path`` that is a
    folder, or lies under a file, is an :class:`OutputPathError`.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{path} is a folder: give a file path to write to")
    make_directory(path.parent)
    mode = _file_mode(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        yield Path(temporary)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _file_mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)  # reading the umask means setting it; restore at once
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(text)


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def atomic_save(path: str | os.PathLike[str], writer: Callable[[Path], None]) -> None:
    """Call ``writer(temporary_path)`` and move the result into place."""
    with atomic_path(path) as temporary:
        writer(temporary)


def atomic_torch_save(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_save(path, lambda temporary: torch.save(obj, temporary))


def atomic_write_jsonl(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> None:
    """Write one JSON object per line, atomically."""
    atomic_write_text(path, "".join(json.dumps(record) + "\n" for record in records))


def atomic_append_jsonl(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Add ``record`` as the last line of a JSON-lines file (created if missing), rewriting the
    file atomically, so a killed process leaves it whole (for small files: run records)."""
    atomic_write_jsonl(path, [*read_jsonl(path), record])


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
