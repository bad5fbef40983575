"""In-sandbox Python environments: a real venv (iniconfig only: small, pure Python, and not in
Debian's dist-packages) built from /usr/bin/python3 into a temporary cache, used inside real
bwrap sandboxes, for services and for graders (bound for the grading phase only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from clawrig.errors import SetupError, TaskFormatError
from clawrig.grading.programmatic import run_grader
from clawrig.sandbox import SandboxConfig, pyenv
from clawrig.sandbox.bwrap import BwrapSandbox
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.pyenv import (
    WILDCLAW_GRADER_REQUIREMENTS,
    GradingEnvStage,
    ensure_env,
    env_bind,
    env_key,
    normalize_requirements,
    read_requirements,
    suite_grader_requirements,
)
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

REQ = ["iniconfig==2.3.1"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clawrig-cache")
    os.chmod(path, 0o755)
    return path


@pytest.fixture(scope="session")
def small_env(cache_dir: Path) -> Path:
    """One real environment for the whole session (pip install from PyPI, once)."""
    return ensure_env(REQ, cache_dir=cache_dir)


@pytest.fixture
async def sandbox_factory(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    made: list[BwrapSandbox] = []

    async def make(binds: list = ()) -> BwrapSandbox:  # type: ignore[assignment]
        sb = BwrapSandbox(
            SandboxConfig(workspace_dir=tmp_path / f"ws{len(made)}", binds=list(binds))
        )
        await sb.start()
        made.append(sb)
        return sb

    yield make
    for sb in made:
        await sb.stop()


def test_requirements_are_normalized() -> None:
    reqs = ["b==1", "  a ", "# a comment", "", "b==1", "x>=2 # pinned later"]
    assert normalize_requirements(reqs) == ["a", "b==1", "x>=2"]
    with pytest.raises(SetupError, match="pip options are not supported"):
        normalize_requirements(["--index-url https://example.invalid/simple"])


def test_requirements_file(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("# graders\nnumpy==2.4.6\n\nPyYAML  # config files\nnumpy==2.4.6\n")
    assert read_requirements(path) == ["PyYAML", "numpy==2.4.6"]
    assert suite_grader_requirements(tmp_path, WILDCLAW_GRADER_REQUIREMENTS) == [
        "PyYAML",
        "numpy==2.4.6",
    ]
    path.write_text("numpy\n-r other.txt\n")
    with pytest.raises(TaskFormatError) as info:
        read_requirements(path)
    assert (
        str(info.value) == f"{path}:2: requirements: '-r other.txt': pip options are not supported"
    )
    # what pip would refuse at install time is refused when the suite is read (helper-130)
    for bad in ("pandas[", "numpy; os_name", "numpy===", "[x]"):
        path.write_text(f"requests\n{bad}\n")
        with pytest.raises(TaskFormatError) as info:
            read_requirements(path)
        assert str(info.value).startswith(
            f"{path}:2: requirements: {bad!r}: not a valid requirement: "
        ), str(info.value)
    # without a file: the default list (WildClawBench's), sorted
    empty = tmp_path / "suite"
    empty.mkdir()
    assert suite_grader_requirements(empty, WILDCLAW_GRADER_REQUIREMENTS) == [
        "Pillow==13.0.0",
        "PyYAML==6.0.4",
        "numpy==2.4.6",
        "openai==3.57.0",
        "requests==2.34.2",
    ]


def test_env_key_is_the_sha256_of_the_sorted_list_and_the_interpreter() -> None:
    out = subprocess.run(
        [
            "/usr/bin/python3",
            "-c",
            "import platform, sys; print(platform.python_version(), "
            "sys.implementation.cache_tag, platform.machine())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    payload = json.dumps(
        {
            "python": {"cache_tag": out[1], "machine": out[2], "version": out[0]},
            "requirements": ["a==1", "b"],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    expected = hashlib.sha256(payload.encode()).hexdigest()
    assert env_key(["b", "a==1"]) == env_key(["a==1", "b", "b"]) == expected
    assert env_key(["a==2", "b"]) != expected


def test_env_is_built_from_the_sandbox_python(small_env: Path, cache_dir: Path) -> None:
    assert small_env == cache_dir / "envs" / env_key(REQ)
    assert os.readlink(small_env / "bin" / "python3") in ("python", "/usr/bin/python3")
    assert os.path.realpath(small_env / "bin" / "python3") == os.path.realpath("/usr/bin/python3")
    manifest = json.loads((small_env / "clawrig-env.json").read_text())
    assert manifest["requirements"] == REQ
    assert "iniconfig==2.3.1" in manifest["installed"]
    # nothing half-built is left in the cache
    assert [p.name for p in (cache_dir / "envs").iterdir() if p.name.startswith(".tmp-")] == []
    # the bare interpreter does not have the package; the environment's does
    bare = subprocess.run(["/usr/bin/python3", "-I", "-c", "import iniconfig"], capture_output=True)
    assert bare.returncode == 1
    env = subprocess.run(
        [
            str(small_env / "bin" / "python3"),
            "-I",
            "-c",
            "import iniconfig; print(iniconfig.__file__)",
        ],
        capture_output=True,
        text=True,
    )
    assert env.stdout.startswith(str(small_env / "lib"))


def test_parallel_callers_build_once(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[Path] = []
    real_build = pyenv._build

    def counting_build(tmp: Path, reqs: list[str], python: str) -> None:
        builds.append(tmp)
        real_build(tmp, reqs, python)

    monkeypatch.setattr(pyenv, "_build", counting_build)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(ensure_env([], cache_dir=cache_dir)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1
    assert len(builds) == 1
    assert (results[0] / "pyvenv.cfg").is_file()


def test_a_failing_build_leaves_nothing(cache_dir: Path) -> None:
    # a line pip refuses is refused before any build (PEP 508)
    with pytest.raises(SetupError, match="not a valid requirement"):
        ensure_env(["not a requirement!!"], cache_dir=cache_dir)
    missing = "clawrig-no-such-distribution-zz==0.0.1"  # valid, on no index: pip fails
    with pytest.raises(SetupError) as info:
        ensure_env([missing], cache_dir=cache_dir)
    assert f"pip could not install {missing}" in str(info.value)
    assert "\n" not in str(info.value)
    names = [p.name for p in (cache_dir / "envs").iterdir()]
    assert env_key([missing]) not in names
    assert not [n for n in names if n.startswith(".tmp-")]


async def test_env_bound_in_a_sandbox(small_env: Path, sandbox_factory) -> None:
    bind, python = env_bind(small_env)
    key = env_key(REQ)
    assert bind.dest == f"/opt/clawrig-env/{key}" and bind.read_only
    assert python == f"/opt/clawrig-env/{key}/bin/python3"
    sb = await sandbox_factory([bind])
    r = await sb.exec([python, "-I", "-c", "import iniconfig, sys; print(iniconfig.__file__)"])
    assert r.exit_code == 0, r.stderr
    assert (
        r.stdout.strip()
        == f"/opt/clawrig-env/{key}/lib/python3.11/site-packages/iniconfig/__init__.py"
    )
    r = await sb.exec(f"touch /opt/clawrig-env/{key}/planted")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr
    assert not (small_env / "planted").exists()


def _task(source: str) -> Task:
    return Task(
        id="pyenv-grader",
        prompt="p",
        format=TaskFormat.FOURFOLDER,
        source=SourceRef(path=Path("task.json")),
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=source, requirements=REQ),
    )


GRADER = """
import iniconfig, os
def grade(transcript, workspace_path):
    ini = iniconfig.IniConfig("x.ini", data="[score]\\nvalue = 0.75\\n")
    return {"overall_score": float(ini["score"]["value"]), "where": iniconfig.__file__}
"""


async def test_grader_env_is_there_for_grading_only(
    small_env: Path, cache_dir: Path, sandbox_factory
) -> None:
    stage = GradingEnvStage(small_env, cache_dir=cache_dir)
    try:
        assert stage.bind.dest == PATHS.grader_env == "/opt/clawrig-grader-env"
        sb = await sandbox_factory([stage.bind])
        # agent phase: the folder is there but empty; nothing the grader imports is reachable
        r = await sb.exec(["ls", "-A", PATHS.grader_env])
        assert r.exit_code == 0 and r.stdout == ""
        score = await run_grader(sb, _task(GRADER))
        assert score.score is None
        assert score.error == (
            "grader crashed: grader needs the Python module 'iniconfig': add it to the suite's "
            "grader requirements (requirements.txt beside the tasks; for a WildClawBench "
            "grader on an environment, to the task's warmup or the environment) "
            "(ModuleNotFoundError: No module named 'iniconfig')"
        )
        # grading phase: the same running sandbox now sees the environment
        python = stage.activate()
        assert python == "/opt/clawrig-grader-env/bin/python3"
        score = await run_grader(sb, _task(GRADER), python=python)
        assert score.error is None, score.details
        assert score.score == 0.75
        assert score.subscores["where"].startswith("/opt/clawrig-grader-env/lib/python3.11/")
        # hard links to the cache, read-only inside
        rel = Path("lib/python3.11/site-packages/iniconfig/__init__.py")
        assert (stage.folder / rel).stat().st_ino == (small_env / rel).stat().st_ino
        r = await sb.exec(f"echo x >> {PATHS.grader_env}/{rel}")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr
    finally:
        stage.cleanup()
    assert not stage.folder.exists()
    assert (small_env / "lib/python3.11/site-packages/iniconfig/__init__.py").is_file()


async def test_missing_module_error_in_the_env_names_it(
    small_env: Path, cache_dir: Path, sandbox_factory
) -> None:
    stage = GradingEnvStage(small_env, cache_dir=cache_dir)
    try:
        sb = await sandbox_factory([stage.bind])
        # Debian's dist-packages (yaml lives there on this host) are not on the env's path
        source = "import yaml\ndef grade(transcript, workspace_path):\n    return {'s': 1}\n"
        score = await run_grader(sb, _task(source), python=stage.activate())
        assert score.error is not None
        assert "grader needs the Python module 'yaml'" in score.error
    finally:
        stage.cleanup()
