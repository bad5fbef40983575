"""Help a newcomer understands: one meaning per short flag across commands, the same
``--parallel`` default for ``run`` and ``verify``, no ``<bool>`` metavar on flags, every
``--grader`` mode explained, the killer question explained, the exit codes listed; and the
headline lines under the table follow the suite's format."""

from __future__ import annotations

import re

import pytest

from clawrig.cli.run import headline


def every_command() -> list[list[str]]:
    """Every command path of ``clawrig`` (leaves and groups), walked from the click tree."""
    import typer

    from clawrig.cli.main import _app

    out: list[list[str]] = []

    def walk(group, path: list[str]) -> None:
        ctx = group.context_class(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            out.append([*path, name])
            if hasattr(cmd, "list_commands"):
                walk(cmd, [*path, name])

    walk(typer.main.get_command(_app), [])
    return out


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    import subprocess

    from cli_helpers import CLAWRIG, clean_env

    out = {}
    for cmd in [[], *every_command()]:
        r = subprocess.run(
            [CLAWRIG, *cmd, "--help"], env=clean_env(), capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, (cmd, r.stderr[-2000:])
        out[" ".join(cmd)] = r.stdout
    return out


def test_every_command_has_help(helps):
    # `clawrig pull --help` once died on its own help text (rich read "[/PATH]" as markup)
    paths = set(helps)
    assert {"run", "pull", "serve", "view", "env build", "export inspect", "tasks list"} <= paths
    for cmd, text in helps.items():
        assert text.lstrip().startswith(f"Usage: clawrig {cmd}".rstrip()), cmd


def test_help_descriptions_are_filled_paragraphs():
    """helper-219: ``grade --help`` and ``verify --help`` broke lines mid-sentence (a
    docstring's own line breaks kept, each line wrapped again at 80 columns: "grade" alone on
    a line). Each paragraph of a command's description fills its lines but the last."""
    checked = set()
    for path in every_command():
        cmd = " ".join(path)
        lines = _help_at_80(*path).splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Usage:")) + 1
        end = next((i for i, ln in enumerate(lines) if ln.startswith("╭")), len(lines))
        paragraphs = "\n".join(ln.rstrip() for ln in lines[start:end]).split("\n\n")
        for para in (p.strip("\n").splitlines() for p in paragraphs):
            # a wrapped line leaves at most the next word's length unused (80 columns, a
            # space of margin each side)
            for line, after in zip(para, para[1:], strict=False):
                room = 78 - len(line)
                assert room <= len(after.split()[0]) + 1, (cmd, line, after)
                checked.add(cmd)
    assert {"grade", "verify"} <= checked, checked


def test_start_up_loads_only_the_command_it_runs():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.argv = ['clawrig', 'version']\n"
        "from clawrig.cli.main import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('clawrig.cli.'))))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    version, loaded = r.stdout.splitlines()
    assert loaded.split() == ["clawrig.cli.common", "clawrig.cli.main"]


def test_each_short_flag_has_one_meaning(helps):
    meaning: dict[str, set[str]] = {}
    for text in helps.values():
        for long, short in re.findall(r"(--[a-z][a-z-]*)\s+(-[a-zA-Z])\s", text):
            meaning.setdefault(short, set()).add(long)
    assert meaning["-p"] == {"--parallel"}
    assert {k: v for k, v in meaning.items() if len(v) > 1} == {}


def test_parallel_default_is_the_same_for_run_and_verify(helps):
    def default(text: str) -> str:
        line = next(ln for ln in text.splitlines() if "--parallel" in ln)
        return re.search(r"\[default: (\d+)\]", line).group(1)

    assert default(helps["run"]) == default(helps["verify"])


def test_flags_show_no_bool_metavar(helps):
    for cmd, text in helps.items():
        assert "<bool>" not in text, cmd


def test_newcomer_words_are_explained(helps):
    run = " ".join(helps["run"].split())
    for mode in ("auto:", "judge:", "exact:", "both:", "programmatic:"):
        assert mode in run
    assert "3 the --budget-usd cap stopped the job" in run
    verify = " ".join(helps["verify"].split())
    assert "the killer question (does the grader reward a wrong rollout?" in verify


def test_choices_named_in_help_not_in_a_long_metavar():
    """``run --help`` at 80 columns cut three option names with "…": rich narrows the name,
    type and help columns alike once the widest no longer fit, and ``<auto|judge|exact|both|
    programmatic>`` made the type column the widest (``grade --help`` split "programmatic").
    An option whose choices show as ``<mode>`` names every choice in its help instead, and
    no other shows a list longer than ``<brave|tavily>``."""
    from typing import Literal, get_args, get_origin

    from clawrig.cli.main import _load

    checked = []
    for name in ("run", "grade", "verify"):
        for param in _load(name).params:
            annotation = param.type_descriptor.annotation
            if get_origin(annotation) is not Literal:
                continue
            choices = set(get_args(annotation))
            if param.metavar == "<mode>":
                words = set(re.findall(r"[a-z]+", param.help or ""))
                assert choices <= words, (name, param.opts, param.help)
                checked.append(param.opts[0])
            else:
                assert len("|".join(choices)) <= len("brave|tavily"), (name, param.opts)
    assert checked.count("--grader") == 2 and {"--web", "--web-miss"} <= set(checked), checked
    text = _help_at_80("run")
    said = " ".join(text.split())
    assert "--no-warm" in said and "--warm" not in said.replace("--no-warm", "")
    # every option's name whole at 80 columns (helper-223: "--max-cost-usd-per-tr…"): the
    # options are in panels, each a table sized to its own options
    names = {o for p in _load("run").params for o in p.opts if o.startswith("--")} | {"--help"}
    shown = set(re.findall(r"│ (--[a-z-]+)(?=\s)", text))
    assert "…" not in text and shown == names, (names - shown, shown - names)


def _help_at_80(*command: str) -> str:
    import subprocess

    from cli_helpers import CLAWRIG, clean_env

    r = subprocess.run(
        [CLAWRIG, *command, "--help"],
        env={**clean_env(), "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_headline_follows_the_suite_format():
    """The console's headline per benchmark, from a summary's own fields: DataClawBench's Acc
    is its top-level ``overall_score`` (a ``dataclaw`` key the summary does not have was read,
    so the line never showed: helper-144)."""
    base = {"evaluated_count": 2, "error_count": 1, "mean": {"mean": 0.5}}
    dataclaw = {
        **base,
        "formats": ["dataclaw"],
        "overall_score": 0.75,
        "process": {"ee": {"mean": 0.5, "n": 2}, "gpr": {"mean": 0.25, "n": 2},
                    "tpe": {"mean": None, "n": 0}},
    }  # fmt: skip
    assert headline(dataclaw) == [
        "DataClawBench Acc: 0.7500 (2 graded, 1 errors)",
        "DataClawBench process: EE 0.5000 (n=2), GPR 0.2500 (n=2)",
    ]
    wild = {**base, "formats": ["wildclaw"], "wildclaw": {"overall": 0.4}}
    assert headline(wild) == [
        "WildClawBench average score: 0.4000 (its leaderboard's number: all selected tasks, an "
        "errored or missing task counts 0)"
    ]
    # an unfinished job's: its trials not run count 0 so far (helper-195: an interrupt
    # before any trial finished printed a plain 0.0000)
    assert headline({**wild, "wildclaw": {"overall": 0.0}, "not_run": 3}) == [
        "WildClawBench average score: 0.0000 (its leaderboard's number: all selected tasks, an "
        "errored or missing task counts 0); so far: 3 trial(s) not run yet count 0 (--resume "
        "runs them)"
    ]
    # a four-folder set's number is the table caption's mean: not printed a second time
    assert headline({**base, "formats": ["fourfolder"], "wildclaw": {"overall": 0.4}}) == []


def test_each_command_is_listed_with_a_one_line_summary():
    """A group's list of commands shows each one's first help paragraph as it is written
    (typer's rich mode keeps its line breaks): one line each, not a sentence broken over
    six lines at the docstring's wrap (`clawrig --help` showed grade's so)."""
    import typer

    from clawrig.cli.main import _app

    root = typer.main.get_command(_app)
    broken = []
    for path in every_command():
        cmd = root
        for name in path:
            cmd = cmd.get_command(cmd.context_class(cmd), name)  # type: ignore[attr-defined]
        first = (cmd.short_help or cmd.help or "").strip().split("\n\n")[0]
        if "\n" in first.strip():
            broken.append(" ".join(path))
    assert broken == []


def test_version_option_and_command_say_the_same():
    """helper-139: `clawrig --version` (what a new user tries first) was "No such option"."""
    import subprocess
    import sys
    from pathlib import Path

    from clawrig import __version__

    exe = str(Path(sys.executable).with_name("clawrig"))
    for args in (["--version"], ["version"]):
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == __version__, (args, proc.stderr)


def test_no_help_text_loses_characters_to_rich_markup():
    """typer renders help texts as rich markup: ``openclaw[@VERSION]`` printed as ``openclaw``
    (helper-223; rich took ``[@VERSION]`` for a tag). Every command's and option's help reads
    as written."""
    from rich.markup import render

    from clawrig.cli.main import COMMANDS, _load

    def walk(command, path):
        texts = [(path, command.help or "")]
        texts += [(f"{path} {p.name}", p.help or "") for p in command.params]
        for name, sub in (getattr(command, "commands", None) or {}).items():
            texts += walk(sub, f"{path} {name}")
        return texts

    texts = [t for name, how in COMMANDS.items() if how for t in walk(_load(name), name)]
    assert len(texts) > 100
    lost = [(where, text) for where, text in texts if render(text).plain != text]
    assert lost == []
