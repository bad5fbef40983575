"""The Sandbox protocol conformance suite: every backend must pass it."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

import pytest

from clawrig.errors import SandboxDied

pytestmark = pytest.mark.sandbox


async def test_exec_captures_stdout_stderr_and_exit_code(make_sandbox, backend):
    sb = await make_sandbox(backend)
    r = await sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    merged = await sb.exec("echo a; echo b >&2; echo c", merge_stderr=True)
    assert merged.stdout == "a\nb\nc\n" and merged.stderr == ""


async def test_exec_argv_cwd_env_and_stdin(make_sandbox, backend):
    sb = await make_sandbox(backend)
    await sb.write_file("/tmp_workspace/sub/x.txt", "x")
    r = await sb.exec(
        ["sh", "-c", 'pwd; echo "$GREETING"; cat'],
        cwd="/tmp_workspace/sub",
        env={"GREETING": "hallo"},
        stdin="from stdin",
    )
    lines = r.stdout.splitlines()
    assert lines[0].endswith("/sub") and lines[1:] == ["hallo", "from stdin"]
    missing = await sb.exec(["/no/such/binary"])
    assert missing.exit_code == 127


async def test_exec_timeout_kills_the_whole_tree(make_sandbox, backend):
    sb = await make_sandbox(backend)
    # a daemonised grandchild (own session via setsid) must die too. The sleeps' lengths are
    # this call's own: the local backend's ps sees the host, and the other backends' runs of
    # this test (another pytest worker) would otherwise be seen as survivors
    a, b = (random.randrange(10**6, 10**7) for _ in range(2))
    r = await sb.exec(f"setsid sh -c 'sleep {a}' & sleep {b}", timeout_s=0.5)
    assert r.timed_out and r.exit_code == 124
    # the answer comes once they are gone (the kill waits on them): no pause before looking
    ps = await sb.exec("ps -eo args")
    assert f"sleep {a}" not in ps.stdout and f"sleep {b}" not in ps.stdout


async def test_exec_time_limits_that_are_not_finite_positive_numbers_are_refused(
    make_sandbox, backend
):
    sb = await make_sandbox(backend)
    for bad in (float("nan"), float("inf"), 0, -1):
        with pytest.raises(ValueError):
            await sb.exec("true", timeout_s=bad)
    # the supervisor refuses them too, before the command starts (what reaches it past a client)
    mark = f"/tmp_workspace/ran-{random.randrange(10**9)}"
    for bad in (float("nan"), float("inf"), -1):
        with pytest.raises(OSError) as exc:
            await sb._call("exec", _wait_s=10, cmd=f"touch {mark}", timeout=bad, limit=1000)
        assert "timeout must be a finite number" in str(exc.value)
    assert (await sb.exec(f"test -e {mark}")).exit_code == 1
    # a finite limit past poll(2)'s range is cut, not an error
    r = await sb.exec("echo ok", timeout_s=1e300)
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "ok\n", False)


async def test_dev_shm_has_the_limits_size(make_sandbox, backend):
    if backend == "local":
        pytest.skip("the local backend shares the host's /dev/shm (its limits_enforced says so)")
    sb = await make_sandbox(backend, shm_bytes=24 * 1024**2)
    r = await sb.exec("df -B1 --output=size /dev/shm | tail -1")
    assert int(r.stdout.strip()) == 24 * 1024**2, r.stdout + r.stderr
    assert sb.limits_enforced["shm"].endswith(f"{24 * 1024**2} bytes")


async def test_output_is_truncated_keeping_head_and_tail(make_sandbox, backend):
    sb = await make_sandbox(backend, output_bytes=10_000)
    r = await sb.exec("python3 -c \"print('HEAD' + 'x' * 1000000 + 'TAIL')\"")
    assert r.truncated
    assert r.stdout.startswith("HEAD") and r.stdout.rstrip().endswith("TAIL")
    assert "bytes omitted" in r.stdout and len(r.stdout) < 10_200
    # 1,000,009 bytes written (HEAD + 10**6 x + TAIL + newline), 10,000 kept
    assert "990009 bytes omitted" in r.stdout


async def test_background_process_survives_between_calls(make_sandbox, backend):
    sb = await make_sandbox(backend)
    h = await sb.spawn("cat")
    assert await h.poll() is None
    await h.write_stdin("ping\n")
    for _ in range(100):
        text, nxt = await h.read_log()
        if text:
            break
        await asyncio.sleep(0.02)
    assert text == "ping\n" and nxt == 5
    await h.write_stdin("pong\n", eof=True)
    for _ in range(100):
        if await h.poll() is not None:
            break
        await asyncio.sleep(0.02)
    assert await h.poll() == 0
    assert await h.read_log(offset=5) == ("pong\n", 10)
    sleeper = await sb.spawn("sleep 300")
    await sleeper.kill()
    assert await sleeper.poll() is not None


async def test_files_read_write_list(make_sandbox, backend):
    sb = await make_sandbox(backend)
    blob = bytes(range(256)) * 10
    await sb.write_file("/tmp_workspace/a/b/blob.bin", blob)
    assert await sb.read_file("/tmp_workspace/a/b/blob.bin") == blob
    assert await sb.read_file("/tmp_workspace/a/b/blob.bin", max_bytes=3) == b"\x00\x01\x02"
    entries = await sb.list("/tmp_workspace/a/b")
    assert [(e.name, e.kind, e.size) for e in entries] == [("blob.bin", "file", 2560)]
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/tmp_workspace/nope")
    with pytest.raises(IsADirectoryError):
        await sb.read_file("/tmp_workspace/a")
    r = await sb.exec("cat /tmp_workspace/a/b/blob.bin | wc -c")
    assert r.stdout.strip() == "2560"


async def test_put_dir_and_get_dir_round_trip(make_sandbox, backend, tmp_path: Path):
    sb = await make_sandbox(backend)
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "deep" / "er" / "x.bin").write_bytes(b"\x00\xff" * 100)
    os.symlink("top.txt", src / "link")
    await sb.put_dir(src, "/tmp_workspace/copied")
    r = await sb.exec(
        "cat /tmp_workspace/copied/deep/er/x.bin | wc -c; readlink /tmp_workspace/copied/link"
    )
    assert r.stdout.split() == ["200", "top.txt"]
    out = tmp_path / "out"
    await sb.get_dir("/tmp_workspace/copied", out)
    assert (out / "top.txt").read_text() == "top"
    assert (out / "deep" / "er" / "x.bin").read_bytes() == b"\x00\xff" * 100
    assert (out / "link").is_symlink() and os.readlink(out / "link") == "top.txt"


async def test_kill_all_leaves_only_the_supervisor(make_sandbox, backend):
    sb = await make_sandbox(backend)
    tag = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"  # local sees the host's processes
    for i in range(3):
        await sb.spawn(f"sleep 40{i}.{tag}")
    await sb.exec(f"(setsid sleep 409.{tag} &) ; true")
    killed = await sb.kill_all()
    assert killed >= 4
    ps = await sb.exec("ps -eo args")
    assert tag not in ps.stdout
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_kill_all_kills_in_one_round_and_returns_once_they_are_gone(make_sandbox, backend):
    sb = await make_sandbox(backend)
    tag = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    await sb.spawn(f"sleep 41.{tag}")
    # a daemonised one that ignores SIGTERM and a busy one
    await sb.exec(f"(setsid sh -c 'trap \"\" TERM; sleep 419.{tag}' &) ; true")
    await sb.exec(f"(setsid sh -c 'while :; do :; done; : {tag}' &) ; true")
    # each of them up (the daemon's sleep started): one still forking when the kill comes
    # escapes a round in --local mode, where kill_all kills what it listed (its docstring)
    for _ in range(500):
        ps = (await sb.exec("ps -eo args")).stdout
        if all(x in ps for x in (f"sleep 41.{tag}", f"sleep 419.{tag}", f": {tag}")):
            break
        await asyncio.sleep(0.01)
    r = await sb._call("kill_all")
    # one kill of everyone, then a look that finds no one: no rounds of pauses (--local
    # kills what it listed: a process of the setup still forking under load takes a second
    # round there, CI165)
    assert r["rounds"] <= (2 if backend == "local" else 1) and r["killed"] >= 3, r
    ps = await sb.exec("ps -eo args")
    assert tag not in ps.stdout, ps.stdout
    again = await sb._call("kill_all")
    assert (again["rounds"], again["killed"]) == (0, 0)


async def test_stop_is_idempotent_and_later_calls_fail(make_sandbox, backend):
    sb = await make_sandbox(backend)
    await sb.stop()
    await sb.stop()
    with pytest.raises(SandboxDied):
        await sb.exec("true")


async def test_trial_time_limit_stops_the_sandbox(make_sandbox, backend):
    sb = await make_sandbox(backend, trial_timeout_s=0.3)
    await asyncio.sleep(0.6)
    with pytest.raises(SandboxDied, match="time limit"):
        await sb.exec("true")


async def test_concurrent_execs_on_one_sandbox(make_sandbox, backend):
    sb = await make_sandbox(backend)
    results = await asyncio.gather(*(sb.exec(f"sleep 0.2; echo {i}") for i in range(8)))
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(8)]


async def test_writing_to_an_exited_process_is_an_error_not_a_crash(make_sandbox, backend):
    sb = await make_sandbox(backend)
    h = await sb.spawn("true")
    for _ in range(100):
        if await h.poll() is not None:
            break
        await asyncio.sleep(0.02)
    with pytest.raises(BrokenPipeError):
        for _ in range(3):
            await h.write_stdin("x" * 100000 + "\n")
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_cancelling_an_exec_kills_its_command(make_sandbox, backend):
    sb = await make_sandbox(backend)
    # The local backend sees every process of the machine, this test's twin on another
    # backend (another xdist worker) included: the sleep's length names this run.
    sleeper = f"sleep 313.{os.getpid()}{random.randrange(10**6)}"
    task = asyncio.create_task(sb.exec(f"{sleeper}; echo never", timeout_s=60))
    await asyncio.sleep(0.3)
    assert sleeper in (await sb.exec("ps -eo args")).stdout
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if sleeper not in (await sb.exec("ps -eo args")).stdout:
            break
        await asyncio.sleep(0.02)
    assert sleeper not in (await sb.exec("ps -eo args")).stdout


async def test_os_errors_keep_their_errno(make_sandbox, backend):
    import errno

    sb = await make_sandbox(backend)
    with pytest.raises(FileNotFoundError) as info:
        await sb.read_file("/tmp_workspace/missing.txt")
    assert info.value.errno == errno.ENOENT
    if backend == "bwrap":
        with pytest.raises(OSError) as info:
            await sb.write_file("/usr/clawrig-denied.txt", "x")
        assert info.value.errno == errno.EROFS


PROBE = r"""
import json, os, sys
try:
    from venv_only import VALUE as VENV_VALUE
except ImportError:
    VENV_VALUE = None
IGNORED = ("CLAWRIG_CMD", "PWD", "OLDPWD")
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "file": __file__,
    "env": os.environ.get("GREETING"), "fds": sorted(os.listdir("/proc/self/fd")),
    "leader": os.getsid(0) == os.getpid(), "path": sys.path, "site": "site" in sys.modules,
    "no_bytecode": sys.dont_write_bytecode, "isolated": sys.flags.isolated,
    "stdin": sys.stdin.read(), "child_env": os.popen("echo $GREETING").read(),
    # a fork's command line is the supervisor's (started in the sandbox, or the zygote's)
    "forked": open("/proc/self/cmdline").read().split("\0")[1:4] != ["-I", "-B", sys.argv[0]],
    "exe": sys.executable,
    "prefix": sys.prefix, "base_prefix": sys.base_prefix, "pth": os.environ.get("PTH_RAN"),
    "venv_module": VENV_VALUE,
    # less the command's marker, and PWD and OLDPWD (a fresh start's cwd goes through sh's cd)
    "environ": {k: v for k, v in os.environ.items() if k not in IGNORED},
    "child_environ": sorted(
        line for line in os.popen("env").read().splitlines()
        if line.partition("=")[0] not in IGNORED
    ),
}))
sys.stderr.write("said on stderr\n")
if sys.argv[1] == "raise":
    raise ValueError("from the script")
sys.exit(int(sys.argv[1]))
"""


async def test_forked_python_is_the_command_it_replaces(make_sandbox, backend):
    """``fork_python``: ``python3 -I -B SCRIPT`` run as a fork of the supervisor sees what a
    fresh interpreter sees (argv, cwd, environment, only stdio open, its own session, sys.path
    with the site packages, no bytecode written, exit code, stderr), and is a fork (its
    /proc/self/cmdline is the supervisor's) only where python3 is the supervisor's own
    interpreter or a virtual environment's python of it (then seeing what that environment's
    own start sees)."""
    sb = await make_sandbox(backend)
    await sb.write_file("/tmp_workspace/sub/probe.py", PROBE)
    python = (await sb.exec(["sh", "-c", "command -v python3"])).stdout.strip()
    # the supervisor's interpreter: its argv[0] (the shell's parent's), looked up on PATH
    cmdline = "tr '\\0' ' ' < /proc/$PPID/cmdline"
    supervisor = (await sb.exec(["sh", "-c", cmdline])).stdout.split()[0]
    if "/" not in supervisor:
        supervisor = (await sb.exec(["sh", "-c", f"command -v {supervisor}"])).stdout.strip()

    async def run(exe: str, fork: bool) -> tuple[int, dict[str, object], str]:
        r = await sb.exec(
            [exe, "-I", "-B", "/tmp_workspace/sub/probe.py", "3", "x y"],
            cwd="/tmp_workspace/sub",
            env={"GREETING": "hallo"},
            fork_python=fork,
        )
        assert r.stdout, r.stderr
        data = json.loads(r.stdout.splitlines()[0])
        data["argv"] = data["argv"][1:]
        return r.exit_code, data, r.stderr

    async def same_program(exe: str) -> bool:
        """``exe`` is the supervisor's interpreter: its path, or a virtual environment's
        python (a pyvenv.cfg beside it or one folder up) whose file is the same."""
        if exe == supervisor:
            return True
        real = await sb.exec(["readlink", "-f", exe, supervisor])
        a, b = real.stdout.split()
        folder = exe.rsplit("/", 1)[0]
        cfg = await sb.exec(
            ["sh", "-c", 'test -f "$0/pyvenv.cfg" || test -f "$0/../pyvenv.cfg"', folder]
        )
        return a == b and cfg.exit_code == 0

    fresh = await run(python, False)
    forked = await run(python, True)
    assert fresh[1].pop("forked") is False
    assert forked[1].pop("forked") is await same_program(python)
    assert fresh[0] == forked[0] == 3
    assert forked[1] == fresh[1]
    assert fresh[1]["argv"] == ["3", "x y"] and fresh[1]["env"] == "hallo"
    assert fresh[1]["child_env"] == "hallo\n" and fresh[1]["leader"] is True
    # the whole environment, Python's and the C one a child gets (the marker, PWD and OLDPWD
    # aside): the command's, not the supervisor's (a fork changes it where they differ)
    env = fresh[1]["environ"]
    assert isinstance(env, dict) and env["GREETING"] == "hallo" and "CLAWRIG_LOG_DIR" not in env
    assert sorted(f"{k}={v}" for k, v in env.items()) == fresh[1]["child_environ"]
    # the probe's listing of /proc/self/fd holds a descriptor of its own beside 0, 1, 2
    assert fresh[1]["cwd"].endswith("/sub") and len(fresh[1]["fds"]) == 4
    assert forked[2] == fresh[2] == "said on stderr\n"
    # another path to the same program (a virtual environment's python) is another
    # interpreter: started afresh
    await sb.exec(["ln", "-s", str(fresh[1]["exe"]), "/tmp_workspace/sub/py3"])
    other = await run("/tmp_workspace/sub/py3", True)
    assert other[1].pop("forked") is False and other[0] == 3
    # a virtual environment of this interpreter (a grading environment): a fork where the
    # interpreter is the supervisor's, seeing what the environment's own start sees: its
    # sys.executable and sys.prefix, its site packages (a module there, a .pth file run) and
    # not the system's
    venv = "/tmp_workspace/venv"
    made = await sb.exec([python, "-I", "-m", "venv", "--without-pip", venv], timeout_s=120)
    assert made.exit_code == 0, made.stderr
    site = (
        await sb.exec([f"{venv}/bin/python3", "-I", "-c", "import sys; print(sys.path[-1])"])
    ).stdout.strip()
    assert site.startswith(venv) and site.endswith("site-packages")
    await sb.write_file(f"{site}/venv_only.py", "VALUE = 42\n")
    await sb.write_file(f"{site}/probe.pth", "import os; os.environ['PTH_RAN'] = 'yes'\n")
    venv_fresh = await run(f"{venv}/bin/python3", False)
    venv_forked = await run(f"{venv}/bin/python3", True)
    assert venv_fresh[1].pop("forked") is False
    # (made by a python3 on PATH that may be no interpreter: pyenv's shim script, as in CI;
    # the environment's python is then the interpreter the shim ran)
    assert venv_forked[1].pop("forked") is await same_program(f"{venv}/bin/python3")
    assert venv_forked == venv_fresh
    data = venv_fresh[1]
    assert data["venv_module"] == 42 and data["pth"] == "yes"
    assert data["prefix"] == venv and data["exe"] == f"{venv}/bin/python3"
    assert data["base_prefix"] == fresh[1]["base_prefix"] and site in data["path"]
    assert not any("-packages" in p for p in data["path"] if not p.startswith(venv))
    crash = await sb.exec(
        [python, "-I", "-B", "/tmp_workspace/sub/probe.py", "raise"], fork_python=True
    )
    assert crash.exit_code == 1
    assert crash.stderr.endswith("ValueError: from the script\n")
    assert "supervisor" not in crash.stderr  # the traceback starts at the script


async def test_the_harness_s_run_folder_is_the_sandbox_s_own(make_sandbox, backend):
    """A file the harness writes under /run/clawrig (a grading's runner, a service's code)
    runs as a command at :meth:`path_seen_by_commands`, and is never the machine's own
    /run/clawrig: the local backend wrote every grader there, left it, and as any user but
    root could not grade at all (a red-team finding)."""
    from clawrig.sandbox.paths import PATHS

    sb = await make_sandbox(backend)
    name = f"conformance-{random.randrange(1 << 32):08x}"
    inside = f"{PATHS.run}/{name}/hello.py"
    await sb.write_file(inside, "print(6 * 7)\n")
    r = await sb.exec(["python3", sb.path_seen_by_commands(inside)])
    assert (r.exit_code, r.stdout) == (0, "42\n"), r.stderr
    assert not os.path.lexists(f"{PATHS.run}/{name}")  # (every backend: not the host's)
