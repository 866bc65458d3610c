"""User-facing errors: the CLI prints them as one line and exits non-zero, without a traceback."""

from __future__ import annotations


class WmrlError(Exception):
    """A problem with the user's input or environment (not a bug). Exit code 1."""

    exit_code = 1


class ConfigError(WmrlError):
    """An invalid preset, key, type or value. Exit code 2, like a usage error."""

    exit_code = 2


class UnsafeFileError(WmrlError):
    """A downloaded file that would execute code when loaded."""
