"""Files only their owner may read (mode 0600): generated secrets and the embedded stack's state.

Each is written whole or not at all and is 0600 from the moment it exists: the text goes to a
private draft beside the target (`O_CREAT | O_EXCL`, mode 0600, so no umask or earlier file can
widen it), which is then renamed over the target (`write_private`) or hard-linked to it when
absent (`read_or_create_secret`). A reader never sees half a file, and no other local user ever
sees the content, not even briefly (issue 9: `stack.json` was 0644 and named the broker's port).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Final

PRIVATE_FILE_MODE: Final = 0o600
SECRET_RANDOM_BYTES: Final = 32  # 256 bits, `secrets.token_urlsafe`: 43 characters [A-Za-z0-9_-]


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8), mode 0600, atomically (a rename).

    Raises `OSError` if the directory is not writable; the old file is then left as it was and
    no draft is left behind.
    """
    draft = _draft(path, text)
    try:
        draft.replace(path)
    except BaseException:
        draft.unlink(missing_ok=True)
        raise


def read_or_create_secret(path: Path, *, nbytes: int = SECRET_RANDOM_BYTES) -> str:
    """The secret kept in `path`, generated first (`secrets.token_urlsafe(nbytes)`, 0600) when
    the file does not exist. Two processes creating it at once agree: the first hard link wins
    and the other reads it. A file left readable by others (an older version, a copy) is made
    0600 before it is read.

    Raises `OSError` if the file or its directory cannot be read or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path, secrets.token_urlsafe(nbytes))
    make_private(path)
    return path.read_text(encoding="ascii").strip()


def make_private(path: Path) -> None:
    """Clear the group and other bits of `path` (a file: 0600 at most), if it exists."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if stat.S_IMODE(mode) & 0o077:
        path.chmod(stat.S_IMODE(mode) & 0o700)


def _create(path: Path, text: str) -> None:
    """Create `path` with `text` unless it exists (then keep the existing file)."""
    draft = _draft(path, text)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def _draft(path: Path, text: str) -> Path:
    """A new 0600 file beside `path` holding `text`, flushed to disk; removed again on error."""
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        draft.unlink(missing_ok=True)
        raise
    return draft
