"""Programmatic graders run inside the trial's sandbox (WildClawBench and four-folder).

Contract (shared/reference/formats.md section 1): after every agent process is killed and gt/
is injected, the task's ``grade()`` runs in the sandbox with cwd /tmp_workspace, called as
``grade(transcript=<OpenClaw transcript entries>, workspace_path="/tmp_workspace")``; the
transcript is also at /root/.openclaw/agents/main/sessions/chat.jsonl. The result is the last
JSON object printed on stdout; in a trial, what the grader's runner sends on the harness's
verdict channel (:class:`clawrig.sandbox.channel.HarnessChannel`), never stdout, which anything
the grader starts shares. Score = ``overall_score`` when present, else the mean of the numeric
entries (upstream's rule). 120 s by default, scaled by the timeout multiplier; in a trial that
limit is the harness's to keep, moved later by the trial's harness waits meanwhile (a judge
request waiting for a place of the provider's ``max_concurrency``: :mod:`clawrig.waits`), the
sandbox's own exec timeout a backstop (:data:`GRADER_BACKSTOP_S`).

A grader that crashes, times out, sends no verdict, or returns a score outside [0,1] fails
(``Score.error``), never a silent 0; ``details["blame"]`` says whether the task's grader or the
agent's end state is the cause (:func:`run_grader`).

The runner is started as ``python3 -I -B`` with ``fork_python``: on the supervisor's own
interpreter (the system's python3) or a grading environment's python (a virtual environment of
that interpreter, :mod:`clawrig.sandbox.pyenv`) it is a fork of the supervisor, the same program
without an interpreter's start (:meth:`clawrig.sandbox.base.Sandbox.exec`); another python (an
environment's own interpreter) starts afresh.

Residual risk of the verdict channel: a grader that imports or runs the agent's code *in its own
process* hands that code the runner's socket; graders that run agent code in a subprocess do
not (the socket is not inherited and the runner is not dumpable; a fork of the grader has the
socket closed, ``os.register_at_fork``, but a copy of the grader's memory).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import secrets
import time
from typing import Any

from clawrig.grading.textscan import json_objects
from clawrig.sandbox.base import ExecResult, Sandbox
from clawrig.sandbox.channel import HarnessChannel
from clawrig.sandbox.client import precompiled
from clawrig.sandbox.disk import BYTES_PER_INODE
from clawrig.sandbox.paths import PATHS
from clawrig.spec.task import Task
from clawrig.spec.trial import Score
from clawrig.waits import WaitClock

GRADER_DIR = f"{PATHS.run}/grader"
RUNNER_NAME = "clawrig-grader-runner.py"
"""The runner's file name in tracebacks (its folder is a fresh random one per grading)."""
_RUNNER = r"""
import sys, os
# a fork of the clean room's supervisor has json's C codec at hand (the json package imports re
# and enum: more CPU than a small grader's whole run); a fresh interpreter uses json
loads, dumps = getattr(sys, "clawrig_json", None) or (None, None)
if loads is None:
    import json
    loads, dumps = json.loads, lambda obj: json.dumps(obj, default=str)
src_path, origin = sys.argv[1], sys.argv[2]
transcript_path = sys.argv[3]
verdict_path = sys.argv[4] if len(sys.argv) > 4 else ""  # none: stdout only (Harbor's tests)
channel = None
if verdict_path:
    # before any grader code: nothing else in this sandbox can reach our descriptors (not
    # dumpable: a fork of the clean room's supervisor is already) and the harness takes only
    # the first connection, which is this one
    import _socket  # _socket: socket's module imports enum (start-up is the harness's)
    if not getattr(sys, "clawrig_not_dumpable", False):
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    channel.connect(verdict_path)
    # a process the grader forks (multiprocessing's default on Linux, to run the agent's code
    # with a timeout) runs with a copy of this one: the channel is closed there, so the
    # agent's code cannot send a verdict on it (helper-143)
    os.register_at_fork(after_in_child=channel.close)


def report(obj):
    # the runner's own account of a failure, on the channel only it holds: stderr is shared
    # with everything the grader runs and holds what the agent wrote, so it decides nothing
    if channel is not None:
        channel.sendall(dumps(obj).encode("utf-8") + b"\n")


def from_workspace(exc):
    # True when the agent's files are where it failed: a frame of a workspace file (its code
    # imported or run in process) or a workspace file the exception names
    import traceback
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
        names.append(str(getattr(exc, "filename", None) or ""))
        if any(n == "/tmp_workspace" or n.startswith("/tmp_workspace/") for n in names):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def agent_data(path):
    # the agent's end state: the workspace (gt/ aside) and the transcript's folder
    try:
        path = os.fsdecode(path)
    except TypeError:
        return False  # a descriptor: opened from a path already seen
    path = os.path.normpath(os.path.join(os.getcwd(), path))
    if path == "/tmp_workspace/gt" or path.startswith("/tmp_workspace/gt/"):
        return False
    sessions = os.path.dirname(transcript_path)
    return (
        path == "/tmp_workspace"
        or path.startswith("/tmp_workspace/")
        or path == sessions
        or path.startswith(sessions + "/")
    )


touched = []  # what of the agent's the grader read (or ran) while its module loaded
loading = False
data_read = []  # the grader read the agent's data (at any time)
ran_agent_code = []  # the agent's code may run in this process (or a program was run)
own_code = []  # the grader's module's code object (its exec is the runner's own)
running = []  # the grader's code is running (its module loading, or grade()): not the runner's
_PATH_EVENTS = {
    "open", "os.listdir", "os.scandir", "glob.glob", "sqlite3.connect", "shutil.copyfile"
}
_RUN_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"
}


def audit(event, args):
    try:
        if running and not ran_agent_code and might_run_agent_code(event, args):
            # said on the channel before that code runs, which cannot take it back: a report
            # of the task's fault after it is no report of the runner's (the agent's code,
            # imported by grade(), called report() to make its wrong answer unscored:
            # helper-208)
            ran_agent_code.append(event)
            report({"clawrig_ran_agent_code": event})
        reads = event in _PATH_EVENTS and bool(args) and agent_data(args[0])
        if running and (reads or event in _RUN_EVENTS):
            # (by the grader's code, not the runner's transcript; a program's output is the
            # agent's too: it runs in the workspace)
            data_read.append(event)
        if loading and not touched and (reads or event in _RUN_EVENTS):
            touched.append(event)  # (a program's cwd is the agent's workspace)
    except Exception:
        pass


TRUSTED = tuple(
    p.rstrip("/") + "/" for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/opt"}
)
base_path = list(sys.path)


def system_code(name):
    # a module of the system's or an environment's (a file under the interpreter's prefixes,
    # /usr or /opt), or Python's frozen ones
    return name.startswith("<frozen ") or (
        name.startswith(TRUSTED) and not agent_data(name) and os.path.isfile(name)
    )


def might_run_agent_code(event, args):
    # in this process: code executed that is no module of the system's, once the grader read
    # the agent's data or ran a program (whose output is the agent's) -- from the agent's
    # files, a copy of them, text read from them or a program's output; modules imported
    # where the grader put the workspace on sys.path (a C extension runs no exec); objects
    # unpickled; a library loaded from the workspace (helpers 208, 210). A program the
    # grader runs is another process: no descriptor of the channel, and a connection of its
    # own is not the first, the only one read.
    if event == "exec" and args:
        if args[0] is own_code[0]:
            return False
        name = getattr(args[0], "co_filename", "") or ""
        if name.startswith("/") and agent_data(name):
            return True
        if system_code(name) or not data_read:
            return False
        # text made into code by the system's own (namedtuple's, dataclasses': "<string>"),
        # not by the grader
        caller = sys._getframe(2).f_code.co_filename if name.startswith("<") else ""
        return not (caller and system_code(caller))
    if event == "import":
        return any(p not in base_path and agent_data(p) for p in sys.path if isinstance(p, str))
    if event in ("pickle.find_class", "marshal.loads"):
        return bool(data_read)
    return event == "ctypes.dlopen" and bool(args) and bool(args[0]) and agent_data(args[0])


sys.addaudithook(audit)


def environment_module(exc):
    # the name of a module this environment lacks altogether (a submodule of an installed
    # package that is missing, e.g. one named by the agent's pickle, is no missing package)
    import importlib.util
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None if top else True
    except (ImportError, ValueError):
        found = True
    return None if found else name


entries = []
try:
    with open(transcript_path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    entries.append(loads(line))
                except ValueError:
                    pass
except OSError:
    pass
ns = {"__name__": "clawrig_grader", "__file__": origin}
try:
    with open(src_path, encoding="utf-8") as fh:
        code = compile(fh.read(), origin, "exec")
    if verdict_path:
        # in a trial's clean room the grader's source (its hidden answers) is gone before any
        # of its code runs: a program of the agent's that grade() runs read it from this
        # folder (helper-142). (Harbor's tests folder is the task's own: left as it is.)
        for name in (src_path, sys.argv[0]):
            try:
                os.unlink(name)
            except OSError:
                pass
        try:
            os.rmdir(os.path.dirname(src_path))
        except OSError:
            pass
    loading = True
    own_code.append(code)
    running.append(1)
    exec(code, ns)
    running.clear()
except BaseException as exc:
    running.clear()
    loading = False
    import traceback
    traceback.print_exc()
    if from_workspace(exc):
        sys.exit(1)  # the agent's code or files broke the grader while it loaded
    if touched:
        # it read the agent's data (or ran a program in its workspace) before it failed:
        # the agent's, unless a package of the grader's environment is missing
        missing = environment_module(exc) if isinstance(exc, ModuleNotFoundError) else None
        if missing:
            report({"clawrig_blame": "task", "missing_module": missing})
        sys.exit(1)
    report({"clawrig_blame": "task", "why": "the grader cannot load"})
    sys.exit(4)  # the grader itself cannot load: the task's fault
loading = False
grade = ns.get("grade")
if not callable(grade):
    print("clawrig: the grader defines no grade() function", file=sys.stderr)
    if not touched:
        report({"clawrig_blame": "task", "why": "no grade() function"})
    sys.exit(3)
def async_def(fn):
    # an async def (CO_COROUTINE), also behind functools.partial or an object's __call__
    # (no inspect: its imports cost a small grader's whole run)
    for each in (fn, getattr(fn, "func", None), getattr(fn, "__call__", None)):
        code = getattr(each, "__code__", None)
        if code is not None and code.co_flags & 0x80:
            return True
    return False


if async_def(grade):
    # an async grade() however bound (`grade = _async_one`), found before it is called
    print("clawrig: grade() is a coroutine function (an async def): it must be a plain def",
          file=sys.stderr)
    report({"clawrig_blame": "task", "why": "grade() is async"})
    sys.exit(3)
report({"clawrig_grade_called": True})  # (from now on only a missing module is the task's)
try:
    running.append(1)
    result = grade(transcript=entries, workspace_path="/tmp_workspace")
    running.clear()
except ModuleNotFoundError as exc:
    running.clear()
    import traceback
    traceback.print_exc()
    missing = environment_module(exc)
    if missing and not from_workspace(exc):
        report({"clawrig_blame": "task", "missing_module": missing})
    sys.exit(1)
if hasattr(result, "__await__"):
    # an async grade() (however bound: `grade = _async_one`) returns a coroutine whose body
    # never ran: the task's grader is wrong (it was "returned a string", the agent's 0:
    # helper-207)
    close = getattr(result, "close", None)
    if close is not None:
        close()
    print("clawrig: grade() returned a coroutine (an async def): it must be a plain def",
          file=sys.stderr)
    sys.exit(3)  # (an async def is found before the call: this one is what it returned)
text = dumps(result)
sys.stdout.flush()
print("\n" + text)
if channel is not None:
    channel.sendall(text.encode("utf-8") + b"\n")
    channel.close()
"""


def last_json_object(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that parses as a JSON object (upstream's rule), else the
    last balanced ``{...}`` anywhere in it."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    objects = json_objects(stdout)
    return objects[-1] if objects else None


def score_from_result(result: dict[str, Any]) -> float | None:
    """``overall_score`` when present, else the mean of the numeric entries (WildClawBench)."""
    value = result.get("overall_score")
    if isinstance(value, bool):
        value = float(value)
    if isinstance(value, int | float):
        return _float(value)
    nums = [_float(v) for v in result.values() if isinstance(v, int | float)]
    return sum(nums) / len(nums) if nums else None


SUBSCORES_MAX_BYTES = 1 << 20
"""The most JSON text (bytes, non-ASCII escaped) of a grader's verdict kept as a trial's
sub-scores (:func:`capped_subscores`)."""
SUBSCORE_KEY_MAX = 200
"""Characters of a sub-score's name kept when a verdict is cut (:func:`capped_subscores`)."""


def capped_subscores(result: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a grader's verdict) when its JSON text (non-ASCII escaped) is at most
    :data:`SUBSCORES_MAX_BYTES`; else its entries that are numbers, booleans or null
    (``overall_score`` first), as many as fit in :data:`SUBSCORES_MAX_BYTES`, a name longer
    than :data:`SUBSCORE_KEY_MAX` characters cut to that with its length and place said (so
    two stay two); ``details["subscores_cut"]`` then says how many were kept of how many.
    Why: a verdict echoing what the agent wrote (a grader returning the agent's answer) was
    stored whole in score.json and result.json (34 MB seen: helper-178), and read whole by
    every export and the viewer; one of 300,000 entries kept each (helper-181)."""
    try:
        size = len(json.dumps(result, default=str))  # (ASCII: a lone surrogate is no error)
    except (RecursionError, ValueError):
        size = SUBSCORES_MAX_BYTES + 1
    if size <= SUBSCORES_MAX_BYTES:
        return result
    kept: dict[str, Any] = {}
    room = SUBSCORES_MAX_BYTES - 2  # (the braces)
    entries = sorted(enumerate(result.items()), key=lambda e: e[1][0] != "overall_score")
    for place, (key, value) in entries:
        if not (value is None or isinstance(value, bool | int | float)):
            continue
        if len(key) > SUBSCORE_KEY_MAX:
            key = f"{key[:SUBSCORE_KEY_MAX]}...<{len(key)} characters, entry {place + 1}>"
        cost = len(json.dumps(key)) + len(json.dumps(value)) + 4  # (": " and ", ")
        if cost > room:
            break
        kept[key], room = value, room - cost
    details["subscores_cut"] = (
        f"the grader's verdict was {size} bytes of JSON, above {SUBSCORES_MAX_BYTES}: "
        f"{len(kept)} of its {len(result)} entries are kept (numbers, booleans and nulls, as "
        f"many as fit in {SUBSCORES_MAX_BYTES} bytes)"
    )
    return kept


def _float(value: float) -> float:
    """``float(value)``; an int too large for a float (a grader echoing the agent's 400-digit
    number) is +-inf, never an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


GRADER_BACKSTOP_S = 86_400.0
"""Seconds the sandbox's own exec timeout runs past a grader's limit when the harness keeps
that limit (:func:`run_grader` with a ``clock``)."""
KILLED_ANSWER_S = 10.0
"""Seconds :func:`_exec_kept` waits for a grader to be killed, and then as long for its exec
to answer (its output)."""


async def _exec_kept(
    sandbox: Sandbox,
    argv: list[str],
    timeout_s: float,
    clock: WaitClock,
    env: dict[str, str] | None,
) -> ExecResult:
    """Run the grader's ``argv`` within ``timeout_s`` seconds of its own: an asyncio deadline
    that ``clock`` moves later by every harness wait of the trial meanwhile
    (:meth:`WaitClock.track`), as the agent's. Past it every process of the sandbox but its
    supervisor is killed (:meth:`Sandbox.kill_all`: the grader's tree, and the clean room's
    restarted services, whose part ends with grading) and the exec's own answer gives what
    the grader wrote until then; the result is a timeout (exit code 124). The sandbox's exec
    timeout is a backstop :data:`GRADER_BACKSTOP_S` later."""
    began = time.monotonic()
    run = asyncio.ensure_future(
        sandbox.exec(
            argv,
            cwd=PATHS.workspace,
            env=env,
            timeout_s=timeout_s + GRADER_BACKSTOP_S,
            fork_python=True,  # as run_grader's: a fork of the supervisor
        )
    )
    deadline = asyncio.timeout(timeout_s)
    clock.track(deadline)
    try:
        async with deadline:
            return await asyncio.shield(run)
    except TimeoutError:
        if not deadline.expired():
            run.cancel()
            raise
    except BaseException:
        run.cancel()
        raise
    finally:
        clock.untrack(deadline)
    timed_out = ExecResult(exit_code=124, timed_out=True)
    try:
        async with asyncio.timeout(KILLED_ANSWER_S):  # a supervisor the grader stopped: no wait
            await sandbox.kill_all()  # for its call timeout (~2 minutes)
        async with asyncio.timeout(KILLED_ANSWER_S):
            r = await run
        timed_out = r.model_copy(update={"exit_code": 124, "timed_out": True})
    except Exception:  # noqa: BLE001 - no answer: the timeout without the grader's output
        run.cancel()
    except BaseException:
        run.cancel()
        raise
    return timed_out.model_copy(update={"duration_s": time.monotonic() - began})


async def run_grader(
    sandbox: Sandbox,
    task: Task,
    *,
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    python: str = "python3",
    verdict: HarnessChannel | None = None,
    clock: WaitClock | None = None,
) -> Score:
    """Run the task's grade() in the sandbox within ``timeout_s`` seconds. Returns a Score
    (``error`` set on failure).

    ``clock``: the trial's :class:`clawrig.waits.WaitClock`: the limit is then the harness's,
    moved later by the trial's harness waits while the grader runs (its requests to the judge
    waiting for a place of the provider's ``max_concurrency``, the event loop too busy), so
    time queued behind other trials is not the grader's (:func:`_exec_kept`). Without one, the
    sandbox's exec timeout is the limit.

    ``verdict``: an open :class:`HarnessChannel` bound into ``sandbox`` (the trial's clean
    room): the result is then what the grader's runner sends on it, the first connection and
    the first line only, and stdout is a log; without one, the last JSON object on stdout
    (upstream's rule, for callers that grade in a sandbox of their own).

    On failure ``details["blame"]`` says whose it is: ``"task"`` when the grader itself cannot
    run (no grade(), a failure while its module loads, a missing module the task's grader
    requirements name), else ``"agent"`` (grade() crashed, hung, sent no verdict or no score
    in [0,1] on the end state the agent left). A grader that failed while the kernel killed a
    process of the sandbox for its memory limit (:meth:`Sandbox.oom_kills`) is said so:
    "grader killed: out of memory", ``details["out_of_memory"]``."""
    grader = task.grader
    if not grader.source:
        return Score(grader="programmatic", error="the task has no programmatic grader")
    # Tracebacks name the task file and its real line: the source is compiled under the
    # task file's name, shifted down to the line where it starts there.
    origin = str(grader.origin.path) if grader.origin else str(task.source.path)
    offset = (grader.origin.line or 1) - 1 if grader.origin else 0
    # A fresh folder with a random name: nothing the agent left can be in it. And -I: neither
    # the script's folder nor the cwd nor PYTHON* variables reach sys.path, so a module the
    # agent planted cannot shadow one the grader imports.
    folder = f"{GRADER_DIR}-{secrets.token_hex(8)}"
    await sandbox.write_file(f"{folder}/grader.py", "\n" * offset + grader.source)
    # precompiled where the sandbox's python has the harness's bytecode (a fork of the clean
    # room's supervisor: compiling the runner was a fifth of the grader's CPU)
    await sandbox.write_file(f"{folder}/runner.py", precompiled(_RUNNER, RUNNER_NAME))
    seen = sandbox.path_seen_by_commands  # (the local backend's /root and /run/clawrig)
    argv = [
        python,
        "-I",
        "-B",
        seen(f"{folder}/runner.py"),
        seen(f"{folder}/grader.py"),
        origin,
        seen(PATHS.transcript),
        verdict.path_in(sandbox) if verdict is not None else "",
    ]
    # (a plugin backend written before Sandbox.oom_kills may lack it: no count then)
    oom_kills = getattr(sandbox, "oom_kills", lambda: None)
    oom_before = oom_kills()
    if clock is not None:
        r = await _exec_kept(sandbox, argv, timeout_s, clock, env)
    else:
        r = await sandbox.exec(
            argv,
            cwd=PATHS.workspace,
            env=env,
            timeout_s=timeout_s,
            # the system's python3 (the supervisor's own interpreter) or a grading
            # environment of it: a fork of the supervisor, no interpreter start on the way
            # to the verdict
            fork_python=True,
        )
    details: dict[str, Any] = {
        "exit_code": r.exit_code,
        "stderr": r.stderr[-4000:],
        "stdout": r.stdout[-4000:],
        "blame": "agent",
    }

    def failed(error: str, **extra: Any) -> Score:
        return Score(grader="programmatic", details=details, error=error, **extra)

    if r.timed_out:
        details["timed_out"] = True
        return failed(f"grader timed out after {timeout_s:g} s")
    oom_after = oom_kills()
    limits = sandbox.config.limits
    killed = r.exit_code in (-9, 128 + 9)  # SIGKILL: the kernel's, for the memory limit
    if killed and oom_before is not None and (oom_after or 0) > oom_before:
        details["out_of_memory"] = True
        held = (  # a clean room's /tmp, /root and /run/clawrig are memory
            ", which also holds the files written to /tmp, /root and /run/clawrig"
            if limits.scratch_in_memory
            else ""
        )
        return failed(
            "grader killed: out of memory (the sandbox's limit is "
            f"{(limits.memory_bytes or 0) // 1024**2} MiB, --memory-mb{held})"
        )
    if r.exit_code != 0:
        last = _last_line(r.stderr) or f"exit code {r.exit_code}"
        room = limits.scratch_bytes()
        if room and "No space left on device" in last and _room_full(sandbox):
            files = max(1024, room // BYTES_PER_INODE)  # (disk.mount_tmpfs's count)
            last += (
                f" (the clean room's /tmp, /root and /run/clawrig hold {room // 1024**2} MiB "
                f"and {files:,} files and folders together: the trial's --disk-mb, at most "
                "its --memory-mb)"
            )
        declared = {_dist_name(req) for req in grader.requirements}
        if verdict is not None:
            # in a clean room only the runner's report on the channel can blame the task
            # (stderr holds what the agent wrote: a "No module named os" of its own)
            said = await _channel_object(verdict) or {}
            said = said if said.get("clawrig_blame") == "task" else {}
            missing = said.get("missing_module")
            missing = missing.split(".")[0] if isinstance(missing, str) and missing else None
            cannot_load = bool(said) and missing is None
        else:
            missing = _missing_module(r.stderr)
            cannot_load = r.exit_code in (3, 4)
        if cannot_load or (
            missing
            and (_dist_name(missing) in declared or _environment_import(grader.source, missing))
        ):
            details["blame"] = "task"
        if missing and details["blame"] == "task":  # else: one the agent's data named
            details["missing_module"] = missing
            last = (
                f"grader needs the Python module {missing!r}: add it to the suite's grader "
                "requirements (requirements.txt beside the tasks; for a WildClawBench grader on "
                f"an environment, to the task's warmup or the environment) ({last})"
            )
        return failed(f"grader crashed: {last}")
    if verdict is not None:
        result = await _channel_object(verdict)
        if result is None:
            return failed(_no_verdict(verdict))
    else:
        result = last_json_object(r.stdout)
        if result is None:
            return failed("grader printed no JSON object")
    score = score_from_result(result)
    subscores = capped_subscores(result, details)
    if score is None or math.isnan(score) or not 0.0 <= score <= 1.0:
        # what it returned, as it returned it (a string "1.0" read "overall_score=None")
        given: Any = result.get("overall_score", score)
        return failed(
            f"grader returned no score in [0,1] (overall_score={given!r:.200})",
            subscores=subscores,
        )
    details.pop("blame")
    given = result.get("overall_score")
    if given is not None and not isinstance(given, int | float):
        # (the rule takes the mean then, as WildClawBench does; said, not silent: helper-178)
        details["overall_score_ignored"] = (
            f"overall_score={given!r:.200} is no number: the score is the mean of the grader's "
            "numeric entries"
        )
    return Score(score=score, subscores=subscores, grader="programmatic", details=details)


RAN_AGENT_CODE = "clawrig_ran_agent_code"
"""The runner's line saying the agent's code may run in the grader's process from then on
(code executed from the agent's files, objects unpickled from them): sent before it runs.
A report of the task's fault after it may be the agent's code's own, and is not believed."""


GRADE_CALLED = "clawrig_grade_called"
"""The runner's line just before it calls grade(): a report of the task's fault after it can
only be a module missing from the environment (the grader loaded, its grade() is a plain
def: "cannot load" from inside grade() was the agent's code's, helper-210)."""
RUNNER_NOTES = (RAN_AGENT_CODE, GRADE_CALLED)


async def _channel_object(verdict: HarnessChannel) -> dict[str, Any] | None:
    """The JSON object the grader's runner sent on the verdict channel (its first connection,
    the first line not one of :data:`RUNNER_NOTES`): the verdict, or after a failure the
    runner's ``clawrig_blame`` report. A ``clawrig_blame`` line after a :data:`RAN_AGENT_CODE`
    line is left out (the agent's code may have sent it: helper-208), and after a
    :data:`GRADE_CALLED` line one naming no missing module (helper-210)."""
    await verdict.wait_ended(5.0)
    first = verdict.connections[0] if verdict.connections else None
    seen: set[str] = set()
    for line in first.lines if first else []:
        obj = _verdict_object(line)
        if obj is not None and (note := next((k for k in RUNNER_NOTES if k in obj), None)):
            seen.add(note)
            continue
        if (
            obj is not None
            and "clawrig_blame" in obj
            and (RAN_AGENT_CODE in seen or (GRADE_CALLED in seen and "missing_module" not in obj))
        ):
            continue
        return obj
    return None


def _no_verdict(verdict: HarnessChannel) -> str:
    """Why the verdict channel holds no verdict: grade() returned something that is no dict
    (its JSON type named: a grade() that ends without ``return`` gave "the grader sent no
    verdict on the harness channel", helper-190), else nothing was sent."""
    first = verdict.connections[0] if verdict.connections else None
    lines = [
        ln
        for ln in (first.lines if first else [])
        if not any(k in (_verdict_object(ln) or {}) for k in RUNNER_NOTES)
    ]
    if lines:
        try:
            value = json.loads(lines[0])
        except (ValueError, RecursionError):
            value = ...
        if value is not ...:
            kind = {type(None): "None", bool: "a bool", list: "a list", str: "a string"}.get(
                type(value), "a number"
            )
            return f"grade() returned {kind}, not a dict of scores (its overall_score and others)"
    return "grade() sent no verdict: the grader exited before grade() returned"


def _verdict_object(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _environment_import(source: str, module: str) -> bool:
    """True when ``source`` imports ``module`` by name and never touches ``sys.path`` or
    importlib (so the module was to come from the grader's environment, not the workspace)."""
    if "sys.path" in source or "importlib" in source or "__import__" in source:
        return False
    pattern = rf"^\s*(import|from)\s+{re.escape(module)}(\s|\.|,|$)"
    return re.search(pattern, source, re.MULTILINE) is not None


def _dist_name(requirement: str) -> str:
    """The normalised project or module name at the start of a requirement line."""
    name = re.split(r"[\s<>=!~\[;@]", requirement.strip(), maxsplit=1)[0]
    return name.lower().replace("-", "_").replace(".", "_")


def _room_full(sandbox: Sandbox) -> bool:
    """True when the clean room's own folders (a tmpfs on the host, ``scratch_in_memory``)
    have less than 1 MiB or 16 files left: the grader filled them, not the workspace (the
    agent's disk, full by its doing: helper-124)."""
    folder = sandbox.config.scratch_dir
    if not sandbox.config.limits.scratch_in_memory or folder is None:
        return False
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1024**2 or st.f_favail < 16


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _missing_module(stderr: str) -> str | None:
    marker = "No module named "
    for line in reversed(stderr.splitlines()):
        if marker in line:
            return line.split(marker, 1)[1].strip().strip("'\"").split(".")[0]
    return None
