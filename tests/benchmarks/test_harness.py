"""benchmarks/harness.py: the common options, warm-up and rounds, the median with its spread,
JSON and markdown output, and a bad input as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import harness

    return harness


def test_the_common_options_and_their_defaults(harness, tmp_path) -> None:
    parser = harness.parser("Speed of a thing.\n\nMore.", rounds=3, warmup=1)
    args = parser.parse_args([])
    assert (args.rounds, args.warmup, args.out, args.markdown) == (3, 1, None, None)
    assert parser.description == "Speed of a thing."
    args = parser.parse_args(["--rounds", "5", "--warmup", "0", "--out", str(tmp_path / "r.json")])
    assert (args.rounds, args.warmup, args.out.name) == (5, 0, "r.json")
    assert not hasattr(harness.parser("x").parse_args([]), "rounds")  # no timing: no rounds
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--rounds", "0"])
    assert exit_info.value.code == 2


def test_warm_up_calls_are_not_timed_and_the_spread_is_the_rounds(harness) -> None:
    calls = []
    spread = harness.timed(lambda: calls.append(1), rounds=4, warmup=2, calls=3)
    assert len(calls) == 2 + 4 * 3 and len(spread.values) == 4
    assert spread.low <= spread.median <= spread.high
    values = harness.Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (values.median, values.low, values.high, values.mean) == (2.5, 1.0, 10.0, 4.0)
    assert values.relative_spread == pytest.approx(9.0 / 2.5)
    assert f"{values:.1f}" == "2.5 [1.0, 10.0]"
    assert values.map(lambda s: 10 / s).high == 10.0
    assert values.as_dict()["rounds"] == 4
    assert harness.repeat(iter(range(5)).__next__, rounds=2, warmup=3) == [3, 4]
    with pytest.raises(ValueError):
        harness.Spread.of([])


def test_the_result_goes_to_a_json_file_or_a_folder_and_the_table_to_markdown(
    harness, tmp_path, capsys
) -> None:
    table = harness.table(["a", "b"], [[1, 2.5]])
    assert table == "| a | b |\n|---|---|\n| 1 | 2.5 |\n"
    args = harness.parser("x").parse_args(
        ["--out", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "t.md")]
    )
    harness.write(args, "thing", {"x": 1}, table)
    assert json.loads((tmp_path / "r.json").read_text()) == {"x": 1}
    assert (tmp_path / "t.md").read_text() == table and table in capsys.readouterr().out
    args = harness.parser("x").parse_args(["--out", str(tmp_path / "dir")])
    harness.write(args, "thing", [1, 2], table, echo=False)
    assert json.loads((tmp_path / "dir" / "thing.json").read_text()) == [1, 2]
    assert (tmp_path / "dir" / "thing.md").read_text() == table
    assert capsys.readouterr().out == ""
    assert not list(tmp_path.rglob("*.partial"))


def test_a_bad_input_is_one_line_and_exit_2(tmp_path) -> None:
    code = "import harness\ndef main():\n    open('no/such/file')\nharness.main(main, 'probe')\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "benchmarks", capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "probe: error: [Errno 2] No such file or directory: 'no/such/file'"
    ]
