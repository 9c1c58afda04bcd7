"""Reading a user's text file (a YAML spec, a cluster, jobs): one that is not UTF-8 is an error
that names the file and the byte, not a UnicodeDecodeError traceback."""

from __future__ import annotations

from pathlib import Path

from perfcast.errors import PerfcastError


class NotUtf8Error(PerfcastError):
    """A text file the user gave is not UTF-8."""


def not_utf8(path: Path | str, err: UnicodeDecodeError) -> NotUtf8Error:
    byte = err.object[err.start : err.start + 1].hex()
    return NotUtf8Error(
        f"{path} is not UTF-8 text (byte 0x{byte} at offset {err.start}); save it as UTF-8"
    )


def read_text(path: Path | str) -> str:
    """The file's text, read as UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from None
