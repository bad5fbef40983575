"""What a task, a grader or an agent wrote reaches the terminal as text, never as escape
sequences: every line and table `clawrig` prints shows a control character as its escape
(helper-205: a task's name set the terminal's title, a grader's error its colours)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text

from clawrig.cli.common import _new_console, json_terminal_safe, terminal_safe

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
REPO = Path(__file__).resolve().parents[2]
TASK = "01_Productivity_Flow_task_1_word_count"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_terminal_safe_shows_each_control_character_as_its_escape():
    assert terminal_safe("a\x1b]0;T\x07b\tc\nd\x9be\x7f") == "a\\x1b]0;T\\x07b\tc\nd\\x9be\\x7f"
    assert terminal_safe("plain é ✓ 中文") == "plain é ✓ 中文"
    # the bidirectional overrides and isolates ("Trojan Source"): helper-207
    assert terminal_safe("a\u202eb\u2066c\u2069") == "a\\u202eb\\u2066c\\u2069"
    text = json.dumps({"n": "x\x9by\u202ez\x7f 中"}, ensure_ascii=False)
    safe = json_terminal_safe(text)
    assert safe == '{"n": "x\\u009by\\u202ez\\u007f 中"}' and json.loads(safe) == json.loads(text)


def test_markup_and_emoji_codes_in_a_text_are_printed_as_written():
    """A text holding rich markup or emoji codes prints as written: "[/nope]" in a grader's
    error was a MarkupError traceback that ended the job, "[link=...]" a terminal hyperlink
    (OSC 8), ":smile:" an emoji (helper-207)."""
    buf = io.StringIO()
    out = _new_console(file=buf, force_terminal=True, width=200, color_system="standard")
    text = "boom [/nope] [link=https://evil.example]clickme[/link] :smile: [bold]b[/bold]"
    out.print(text, highlight=False)
    out.print(Text(text))
    assert "\x1b]8" not in buf.getvalue()
    assert buf.getvalue().count(text) == 2


def test_a_console_on_a_terminal_keeps_its_own_styles_and_shows_the_texts_escapes():
    buf = io.StringIO()
    out = _new_console(file=buf, force_terminal=True, width=60, color_system="standard")
    table = Table("name")
    table.add_row("x\x1b]0;T\x07y")
    table.add_row(Text("z\x1b[31mw"))
    out.print("line \x1b[2J", style="bold", markup=False, highlight=False)
    out.print(table)
    text = buf.getvalue()
    # rich's own styles are escape sequences; the texts' are not among them
    assert text.startswith("\x1b[1mline \\x1b[2J\x1b[0m\n")
    assert "x\\x1b]0;T\\x07y" in text  # (a string: escaped before its column is measured)
    assert "z\\x1b[" in text  # (a Text: escaped when drawn, in the width it had)
    assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLAWRIG, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.sandbox
def test_task_and_grader_text_reach_the_terminal_as_text(tmp_path):
    suite = tmp_path / "wc"
    shutil.copytree(REPO / "examples" / "wildclaw", suite)
    md = suite / "tasks" / "01_Productivity_Flow" / f"{TASK}.md"
    text = md.read_text(encoding="utf-8")
    text = text.replace("name: Word Count Report", 'name: "Word\\e]0;PWNED\\a Count"', 1)
    text = text.replace("Count the words", "Count \x1b[31mthe words", 1)
    text = text.replace(
        '    scores = {"valid_json"',
        '    raise RuntimeError("\\x1b[31mred\\x1b]0;TITLE\\x07 [/nope] [link=https://e.x]y[/link]'
        '")\n    scores = {"valid_json"',
        1,
    )
    md.write_text(text, encoding="utf-8")
    for args in (["tasks", "list", str(suite)], ["tasks", "show", TASK, str(suite)]):
        r = run(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not CONTROL.search(r.stdout + r.stderr)
    assert "Word\\x1b]0;PWNED" in r.stdout, r.stdout  # (a BEL rich drops, or shown)
    assert "Count \\x1b[31mthe words" in r.stdout
    r = run("run", str(suite), "--suite", TASK, "--agent", "nop", "-o", "out", "-v", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr  # (a crash on the agent's end state: its 0)
    said = "\\x1b[31mred\\x1b]0;TITLE\\x07 [/nope] [link=https://e.x]y[/link]"
    assert said in r.stderr and said in r.stdout  # (-v's line, and the summary's)
    assert not CONTROL.search(r.stdout + r.stderr) and "Traceback" not in r.stderr
    r = run("grade", "out", cwd=tmp_path)
    assert said in (r.stdout + r.stderr).replace("\n", " ") and "Traceback" not in r.stderr
    assert not CONTROL.search(r.stdout + r.stderr)
    # --json: the same JSON, its overrides and C1 controls escaped
    md.write_text(text.replace("Word\\e]0;PWNED\\a Count", "Word\\u202e\\x9b Count"))
    r = run("tasks", "list", str(suite), "--json", cwd=tmp_path)
    assert r.returncode == 0 and "\u202e" not in r.stdout and "\x9b" not in r.stdout
    r = run("tasks", "show", TASK, str(suite), "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["name"] == "Word\u202e\x9b Count"
    assert "\\u202e\\u009b" in r.stdout and not CONTROL.search(r.stdout)
