"""What a command printed: the one error line a failure must be."""

from __future__ import annotations


def one_error_line(result, code: int | None, *fragments: str) -> str:
    """The command failed (with `code` when given) and printed one line, an error, no
    traceback, holding every fragment."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
