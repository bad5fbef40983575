"""Help a newcomer understands: one meaning per short flag across commands, the same
``--parallel`` default for ``run`` and ``verify``, no ``<bool>`` metavar on flags, every
``--grader`` mode explained, the killer question explained, the exit codes listed; and the
headline lines under the table follow the suite's format."""

from __future__ import annotations

import re

import pytest

from clawrig.cli.run import headline

COMMANDS = [
    ["run"],
    ["verify"],
    ["grade"],
    ["tasks", "list"],
    ["tasks", "show"],
    ["tasks", "validate"],
    ["tools", "schema"],
    ["tools", "list"],
    ["export", "sft"],
    ["export", "fourfolder"],
]


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    import subprocess

    from cli_helpers import CLAWRIG, clean_env

    out = {}
    for cmd in COMMANDS:
        r = subprocess.run(
            [CLAWRIG, *cmd, "--help"], env=clean_env(), capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        out[" ".join(cmd)] = r.stdout
    return out


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


def test_headline_follows_the_suite_format():
    base = {"evaluated_count": 2, "error_count": 1, "mean": {"mean": 0.5}}
    dataclaw = {
        **base,
        "formats": ["dataclaw"],
        "dataclaw": {"overall_score": 0.75},
        "process": {"ee": {"mean": 0.5, "n": 2}, "gpr": {"mean": 0.25, "n": 2},
                    "tpe": {"mean": None, "n": 0}},
    }  # fmt: skip
    assert headline(dataclaw) == [
        "DataClawBench Acc: 0.7500 (2 graded, 1 errors)",
        "DataClawBench process: EE 0.5000 (n=2), GPR 0.2500 (n=2)",
    ]
    wild = {**base, "formats": ["wildclaw"], "wildclaw": {"overall": 0.4}}
    assert headline(wild) == [
        "WildClawBench average score: 0.4000 (all selected tasks; an errored or missing task "
        "counts 0)"
    ]
    assert headline({**base, "formats": ["fourfolder"], "wildclaw": {"overall": 0.4}}) == [
        "mean score: 0.5000"
    ]
