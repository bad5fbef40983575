"""Pre-run checks that nothing falls back silently (issue 13 item 7), on tasks read by the real
readers from real files."""

from __future__ import annotations

import json
import re

from clawrig.env.pymodules import requirement_modules
from clawrig.runner.fidelity_checks import (
    check_judge,
    check_workspace_data,
    note_grader_imports,
    note_judge,
    note_local_home,
)
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_suite, load_tasks


def _config(tmp_path, **trial) -> JobConfig:
    return JobConfig(suite_path=tmp_path, trial=TrialConfig(**trial))


def test_dataclaw_judge_tasks_refuse_auto_without_a_judge(dataclaw_real, tmp_path):
    tasks = load_tasks(dataclaw_real)
    n = len(tasks)
    [line] = check_judge(tasks, _config(tmp_path, grader="auto"))
    assert line.startswith(f"--grader auto: {n} task(s) are graded by an LLM judge (")
    assert "--grader exact" in line
    assert check_judge(tasks, _config(tmp_path, grader="auto", judge="scripted/j")) == []
    assert check_judge(tasks, _config(tmp_path, grader="exact")) == []
    [note] = note_judge(tasks, _config(tmp_path, grader="exact"))
    assert note == (
        f"--grader exact: {n} judge-graded task(s) are graded by exact match only (no LLM judge)"
    )


def test_missing_workspace_data_names_what_and_where(wildclaw_task, task_sections, bench_root):
    wildclaw_task()
    task_sections["Workspace Path"] = "```\nworkspace/04_Search_Retrieval/task_9_absent\n```"
    wildclaw_task("second.md", id="t_absent", sections=task_sections)
    tasks = load_suite(bench_root).tasks
    [line] = check_workspace_data(tasks, _config(bench_root))
    absent = bench_root / "workspace" / "04_Search_Retrieval" / "task_9_absent"
    assert line == (
        f"task t_absent: workspace data missing: {absent}: download the WildClawBench workspace "
        f"data (Hugging Face dataset internlm/WildClawBench) under {bench_root} (or pass --root); "
        "a task of your own: make it"
    )


def test_grader_imports_the_environment_lacks(wildclaw_task, task_sections, bench_root):
    task_sections["Automated Checks"] = (
        "```python\ndef grade(**kwargs):\n    import fitz\n    from bs4 import BeautifulSoup\n"
        "    import numpy, json\n    from openai import OpenAI\n    return {}\n```"
    )
    wildclaw_task(sections=task_sections)
    tasks = load_tasks(bench_root)
    # the WildClawBench default grader environment has numpy and openai, not fitz or bs4
    [line] = note_grader_imports(tasks, _config(bench_root))
    assert line.startswith(
        "task 01_Productivity_Flow_task_1_meeting_notes: grader imports bs4, fitz, which its "
        "grading environment does not have (it has "
    )
    # the grader calls a judge (openai) and none is configured: said before the run
    [note] = note_judge(tasks, _config(bench_root))
    assert note.startswith("1 grader(s) call an LLM judge themselves (01_Productivity_Flow")
    assert note_judge(tasks, _config(bench_root, judge="scripted/j")) == []
    # a requirements.txt beside the tasks that provides them silences the note
    (bench_root / "requirements.txt").write_text("pymupdf==1.26.0\nbeautifulsoup4\nnumpy\nopenai\n")
    assert note_grader_imports(load_tasks(bench_root), _config(bench_root)) == []


def test_requirement_modules():
    assert requirement_modules("Pillow==13.0.0") == ["PIL"]
    assert requirement_modules("PyYAML>=6") == ["yaml"]
    assert requirement_modules("python_docx") == ["docx"]
    assert requirement_modules("some-package[extra]==1") == ["some_package"]
    # import names are lower case where the distribution's is not (helper-127's false notes)
    assert requirement_modules("Flask==3")[:2] == ["Flask", "flask"]
    assert requirement_modules("PyJWT") == ["jwt"] and requirement_modules("pdfminer.six") == [
        "pdfminer"
    ]
    # what a distribution always installs with it counts: pandas brings numpy
    assert {"numpy", "dateutil"} <= set(requirement_modules("pandas>=2"))


def test_upstream_default_judge(wildclaw_task, task_sections, bench_root, dataclaw_real):
    from clawrig.runner.fidelity_checks import UPSTREAM_JUDGE, upstream_judge

    task_sections["Automated Checks"] = (
        "```python\ndef grade(**kwargs):\n    from openai import OpenAI\n    return {}\n```"
    )
    wildclaw_task(sections=task_sections)
    tasks = load_tasks(bench_root)
    assert upstream_judge(tasks, {"OPENROUTER_API_KEY": "k"}) == UPSTREAM_JUDGE
    assert UPSTREAM_JUDGE == "openrouter/openai/gpt-5.4"
    assert upstream_judge(tasks, {"OPENROUTER_API_KEY": "k", "JUDGE_MODEL": "x/y"}) == "x/y"
    assert upstream_judge(tasks, {}) is None  # no key: no judge, said by note_judge
    assert upstream_judge(load_tasks(dataclaw_real), {"OPENROUTER_API_KEY": "k"}) is None


def test_tasks_missing_the_same_data_share_one_line(dataclaw_real, tmp_path):
    """The real DataClawBench files hold 2 of the database's 19 files: every task misses the
    same 17, said once (not once per task)."""
    tasks = load_tasks(dataclaw_real)
    upstream = next((dataclaw_real / "tasks").glob("task_001_*.md")).read_text()
    files = json.loads(re.search(r"workspace_files: (\[.*?\n\])", upstream, re.S).group(1))
    missing = [f for f in files if not (dataclaw_real / "assets" / f["source"]).exists()]
    assert len(missing) == 17
    [line] = check_workspace_data(tasks, _config(tmp_path))
    assert line.startswith(f"{len(tasks)} tasks ({tasks[0].id}, {tasks[1].id}, {tasks[2].id}, ...)")
    assert ": workspace data missing: " in line and "(+14 more)" in line
    assert line.endswith(
        "download the DataClawBench assets (Hugging Face dataset GTML-LAB/DataClaw); a task of "
        "your own: make it"
    )


def test_local_sandbox_notes_the_tasks_whose_commands_name_root(
    wildclaw_task, task_sections, bench_root
):
    """Under ``--sandbox local`` commands see this machine's /root, not the trial's private
    home (a red-team finding: a grader globbing /root/.openclaw/... sessions read nothing, or
    the user's own, and scored 0 where bwrap gave 1): the tasks whose grader, warmup or
    skills need /root are named before the run; other backends and other tasks get no line."""
    skills = dict(task_sections)  # installs pdf_reader into /root/skills
    del task_sections["Skills"]
    wildclaw_task("plain.md", id="plain", sections=task_sections)  # names /tmp_workspace only
    wildclaw_task("skills.md", id="skills", sections=skills)
    grader = dict(task_sections)
    grader["Automated Checks"] = (
        "```python\nimport glob\ndef grade(**kw):\n"
        "    n = len(glob.glob('/root/.openclaw/agents/main/sessions/*.jsonl'))\n"
        "    return {'overall_score': float(n > 0)}\n```"
    )
    wildclaw_task("grader.md", id="grader_root", sections=grader)
    warm = dict(task_sections)
    warm["Warmup"] = "```bash\nls /root/skills/hello/run.py\n```"
    wildclaw_task("warm.md", id="warm_root", sections=warm)
    other = dict(task_sections)
    other["Warmup"] = "```bash\nls /srv/root/x ~/rootless /root.d\n```"  # not /root itself
    wildclaw_task("other.md", id="other_paths", sections=other)
    tasks = load_tasks(bench_root)
    lines = note_local_home(tasks, _config(bench_root, sandbox="local"))
    named = {line.split(":", 1)[0]: line for line in lines}
    assert sorted(named) == ["task grader_root", "task skills", "task warm_root"]
    assert "/root is named in its grader;" in named["task grader_root"]
    assert "/root is named in its warmup;" in named["task warm_root"]
    assert "/root is named in its skills (which go to /root/skills);" in named["task skills"]
    assert all("score may differ from bwrap's" in line for line in lines)
    assert note_local_home(tasks, _config(bench_root, sandbox="bwrap")) == []


def test_tasks_validate_gives_the_grader_import_note_run_gives(
    wildclaw_task, task_sections, bench_root
):
    import subprocess
    import sys
    from pathlib import Path

    task_sections["Automated Checks"] = (
        "```python\ndef grade(**kwargs):\n    import fitz\n    return {}\n```"
    )
    task_file = wildclaw_task(sections=task_sections)
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    [expected] = note_grader_imports(load_tasks(bench_root), _config(task_file))
    argv = [clawrig, "tasks", "validate", str(task_file), "--root", str(bench_root)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr  # a note, not an error
    assert "grader imports fitz" in expected
    out = " ".join(r.stdout.split())
    assert f"note: {expected} (clawrig run with its default --sandbox and --env)" in out
    r = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["notes"] == [
        f"{expected} (clawrig run with its default --sandbox and --env)"
    ]


def test_tasks_validate_notes_survive_an_unusable_cache_and_odd_graders(
    wildclaw_task, task_sections, bench_root, tmp_path
):
    import os
    import subprocess
    import sys
    from pathlib import Path

    clawrig = str(Path(sys.executable).with_name("clawrig"))
    # a grader with a relative import and a third-party one; a second one nested too deeply
    # for Python's parser (~3,000 chained terms)
    task_sections["Automated Checks"] = (
        "```python\nfrom .helpers import x\nimport fitz\n\ndef grade(**kwargs):\n    return {}\n```"
    )
    wildclaw_task(sections=task_sections)
    deep = "x = " + " + ".join(['"a"'] * 3000)
    task_sections["Automated Checks"] = (
        f"```python\n{deep}\n\ndef grade(**kwargs):\n    return {{}}\n```"
    )
    deep_file = wildclaw_task("second.md", id="t_deep", sections=task_sections)
    (tmp_path / "afile").write_text("")
    env = dict(os.environ, CLAWRIG_CACHE_DIR=str(tmp_path / "afile" / "cache"))
    argv = [clawrig, "tasks", "validate", str(bench_root / "tasks"), "--root", str(bench_root)]
    r = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in r.stderr, r.stderr
    report = json.loads(r.stdout)
    [deep_issue] = [i for i in report["issues"] if i["path"] == str(deep_file)]
    assert "too deeply nested to parse (RecursionError)" in deep_issue["message"]
    assert r.returncode == 1  # the deep grader's task error; the rest validates
    # with a usable cache: the relative import is no module to install, fitz is
    r = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=120)
    relative, modules = json.loads(r.stdout)["notes"]
    assert "grader imports fitz, which" in modules and ".helpers" not in modules
    assert "grader imports .helpers relatively, but a grader runs as one file" in relative
