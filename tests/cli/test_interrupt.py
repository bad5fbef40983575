"""Ctrl-C as a terminal sends it: SIGINT to the whole process group of a real ``clawrig run``
(the harness and every sandbox process it started), once or twice, at different moments.
Every time: exit 130, no traceback, nothing half-written left in the job folder (no
``.tmp-*`` trial folders, no ``.summary_*.tmp``/``.progress_*.tmp`` files), and no mount of
the job's (its warm pool's, its trials' disks) left on the host, not even after the second
Ctrl-C's immediate exit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CLAWRIG, DEMO, clean_env

from clawrig.leftovers import mounts_below, owner_pid, unmount_below
from clawrig.testing.scripted_server import ScriptedServer, reply


def leftovers(out: Path) -> list[str]:
    """Half-written files and folders in the job folder ``out``, and task folders left empty
    (a cancelled trial's; new-user review: Ctrl-C left empty ``000005/``, ``000006/``)."""
    half = [*out.glob("*/.tmp-*"), *out.glob(".*.tmp")]
    empty = [p for p in out.iterdir() if p.is_dir() and not any(p.iterdir())]
    return sorted(str(p.relative_to(out)) for p in [*half, *empty])


@pytest.fixture
def job_tmp() -> Iterator[Path]:
    """The job's temp folder (its pool's root, its trials' disks), its own: a short path in
    /tmp (the sockets made there must fit a unix socket's 108 bytes)."""
    tmp = Path(tempfile.mkdtemp(prefix="ctrl-c-", dir="/tmp"))
    yield tmp
    unmount_below(tmp)  # what a failed run left: never in the next test's way
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=False)


def interrupt(
    tmp_path: Path,
    after_s: float,
    times: int,
    job_tmp: Path | None = None,
    sig: signal.Signals = signal.SIGINT,
) -> tuple[int, str, Path]:
    """Run the demo suite, send ``sig`` ``times`` once trials are under way: SIGINT to the
    whole process group (a terminal's Ctrl-C), SIGTERM to the harness alone (``kill``,
    ``timeout``). Returns the exit code, stderr + stdout, the job folder."""
    out = tmp_path / "out"
    err_file = tmp_path / "stderr.txt"
    with open(tmp_path / "stdout.txt", "w") as so, open(err_file, "w") as se:
        proc = subprocess.Popen(
            [CLAWRIG, "run", DEMO, "--agent", "oracle", "-p", "3", "-o", out],
            env=clean_env({"TMPDIR": str(job_tmp)} if job_tmp is not None else None),
            stdout=so,
            stderr=se,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    deadline = time.monotonic() + 60
    while not list(out.glob("*/.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.02)  # trials are under way
    time.sleep(after_s)
    for _ in range(times):
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        time.sleep(0.05)
    rc = proc.wait(timeout=60)
    return rc, err_file.read_text() + (tmp_path / "stdout.txt").read_text(), out


@pytest.mark.parametrize("after_s", [0.0, 0.3, 0.8, 1.5, 2.5])
def test_ctrl_c_leaves_no_traceback_and_no_partial_files(tmp_path, after_s, job_tmp):
    rc, text, out = interrupt(tmp_path, after_s, times=1, job_tmp=job_tmp)
    assert "Traceback" not in text and "SandboxDied" not in text, text[-3000:]
    assert mounts_below(job_tmp) == []
    if rc == 0:  # the job finished before the signal arrived: nothing to check
        return
    assert rc == 130, text[-2000:]
    assert "interrupted" in text
    assert leftovers(out) == []


@pytest.mark.parametrize("after_s", [0.1, 1.0])
def test_double_ctrl_c_exits_at_once_and_cleans_up(tmp_path, after_s, job_tmp):
    rc, text, out = interrupt(tmp_path, after_s, times=2, job_tmp=job_tmp)
    assert "Traceback" not in text, text[-3000:]
    # os._exit runs no atexit: the pool's root and the trials' disks were left mounted, and
    # the harness's own folders (device nodes, /etc, ...) stayed until a later harness swept
    assert mounts_below(job_tmp) == []
    left = sorted(p.name for p in job_tmp.iterdir() if owner_pid(p.name) is not None)
    assert left == [], (rc, text[-800:])
    if rc == 0:
        return
    assert rc == 130, text[-2000:]
    assert leftovers(out) == []
    # an oracle job calls no model: nothing of its trials is in _retried/ (helper-225: said so)
    again = [ln for ln in text.splitlines() if "interrupted again" in ln]
    assert all("_retried/" not in ln for ln in again), again
    assert all(
        "no trial was still running" in ln or "no model call of theirs was recorded" in ln
        for ln in again
    ), again
    assert not (out / "_retried").exists()


@pytest.mark.parametrize("after_s", [0.3, 1.5])
def test_sigterm_stops_like_ctrl_c_with_exit_143(tmp_path, after_s, job_tmp):
    # kill -TERM of the harness alone: was exit 143 with no message, no summary, and the
    # half-written .tmp-* trial folders left
    rc, text, out = interrupt(tmp_path, after_s, times=1, job_tmp=job_tmp, sig=signal.SIGTERM)
    assert "Traceback" not in text and "SandboxDied" not in text, text[-3000:]
    assert mounts_below(job_tmp) == []
    if rc == 0:  # the job finished before the signal arrived: nothing to check
        return
    assert rc == 143, text[-2000:]
    assert leftovers(out) == []
    if "did not stop within the grace time" in text:
        return  # the known stall of a cancelled trial (as after Ctrl-C): exited anyway, clean
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert (  # how many did not run, as a budget stop says (a new user's finding)
        f"interrupted (SIGTERM): finished trials are kept; {summary['not_run']} trial(s) not "
        "run (--resume continues)"
    ) in text
    assert summary["interrupted"] is True and summary["interrupted_by"] == "SIGTERM"
    assert (out / "progress_oracle.json").is_file()  # resumable
    # the oracle's line for the samples that finished (helper-228: none after an interrupt)
    expected = [r for r in summary["tasks"] if r.get("expected_reward") is not None]
    reached = sum(1 for r in expected if r["meets_expected"] is True)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("oracle: ")]
    head = f"oracle: {reached}/{len(expected)} samples reach their expected reward"
    if not expected:  # (none finished: "0/0" read oddly, helper-229)
        head = "oracle: no sample finished"
    assert line.startswith(head) and line.endswith(f"{summary['not_run']} not run)"), line


def _ctrl_c_once_asked(out: Path, responder: Any, requests: int) -> tuple[int, str, str]:
    """``clawrig run`` of demo task 000015 with a scripted model answered by ``responder``
    into ``out``, sent SIGINT once the model server has received ``requests`` requests;
    returns the exit code, stdout and stderr."""
    with ScriptedServer(responder=responder, models=["demo"]) as srv:
        proc = subprocess.Popen(
            [CLAWRIG, "run", DEMO, "-s", "000015", "-m", "scripted/demo", "-o", out],
            env=clean_env({"SCRIPTED_BASE_URL": srv.base_url, "COLUMNS": "200"}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while len(srv.requests) < requests and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def test_ctrl_c_before_any_trial_finished_says_the_totals_in_one_line(tmp_path):
    """helper-157: an interrupt with no trial finished printed an empty table whose caption
    (the totals) wrapped to the width of its column headers, a word or two per line."""
    out = tmp_path / "out"
    # the trial is waiting on its first reply
    rc, stdout, stderr = _ctrl_c_once_asked(out, lambda _: reply("late", delay=60), 1)
    assert rc == 130, stderr[-2000:]
    summary = json.loads((out / "summary_scripted_demo.json").read_text())
    assert summary["tasks"] == [] and summary["interrupted"] is True
    (line,) = [ln for ln in stdout.splitlines() if "trial(s)" in ln and "graded" in ln]
    assert line.startswith("clawrig: scripted/demo (native): 0 trial(s), 0 graded, 0 not scored")
    assert line.endswith("; no trial graded: no mean score")  # whole, one line
    assert "─" not in stdout  # no table drawn


def test_the_exit_tables_name_sigterm():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "143 terminated (SIGTERM)" in readme
    r = subprocess.run(
        [CLAWRIG, "run", "--help"], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert "143 terminated (SIGTERM" in " ".join(r.stdout.split()), r.stdout
    # after a kill -9 (helper-228: run --help did not say clawrig cleanup exists)
    said = " ".join(r.stdout.replace("│", " ").split())
    assert "the next job's start removes, or `clawrig cleanup` at once" in said, said


_SIGNAL_AT_START = """
import os, signal, sys, typer
from clawrig.cli.common import run_guarded, terminate_like_ctrl_c

# Ctrl-C's handler as a terminal's command has it: a test session started in the background
# (`cmd &` without job control) has SIGINT ignored, which its children inherit (CI at 2f8dc1e)
signal.signal(signal.SIGINT, signal.default_int_handler)

app = typer.Typer()

@app.command()
def start(sig: str) -> None:
    terminate_like_ctrl_c()  # as clawrig run does before its job starts
    os.kill(os.getpid(), signal.Signals[sig])  # Ctrl-C or kill while the job starts up
    signal.pause()

@app.command()
def other() -> None:
    pass

@app.command()
def wrapped(sig: str) -> None:  # a library turning the signal's exception into its own
    try:
        os.kill(os.getpid(), signal.Signals[sig])
        signal.pause()
    except BaseException as exc:
        raise RuntimeError("a library's error") from exc

@app.command()
def blocked() -> None:  # a thread the exit waits for (a pip install, a stuck read)
    import asyncio, time
    def wait() -> None:
        print("ready", flush=True)  # (from the thread: it has started)
        time.sleep(120)
    async def main() -> None:
        await asyncio.to_thread(wait)
    asyncio.run(main())

@app.command()
def exiting(sig: str) -> None:  # the signal while the exit's clean-ups run
    import atexit, time
    def clean_up() -> None:
        os.kill(os.getpid(), signal.Signals[sig])
        time.sleep(0.2)
        print("cleaned up", flush=True)
    atexit.register(clean_up)

@app.command()
def plain(sig: str) -> None:  # a command with no signal handling of its own (grade, verify)
    os.kill(os.getpid(), signal.Signals[sig])
    signal.pause()

def _while_parsing(value: str | None) -> str | None:  # while the root's options are parsed
    if value:
        os.kill(os.getpid(), signal.Signals[value])
        signal.pause()
    return value

@app.callback()
def root(parsing: str = typer.Option(None, callback=_while_parsing)) -> None:
    pass

sys.exit(run_guarded(typer.main.get_command(app)))
"""


def test_signals_still_stop_an_exit_waiting_for_a_blocked_thread():
    """helper-163: once the command had its exit code every signal was ignored, and the exit
    waited for a thread still blocked (asyncio's to_thread: a pip install of up to 30
    minutes) with nothing but SIGKILL to stop it. One signal after the exit code is still
    ignored (the clean-ups run whole); a second exits at once, with the command's code."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_AT_START, "blocked"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for _ in range(20):  # SIGTERM every 0.25 s until it has gone (the thread sleeps 120 s)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                continue
        assert proc.poll() is not None, "the exit could not be stopped"
        assert proc.returncode == 143
        assert proc.stderr is not None and proc.stderr.read() == "clawrig: interrupted (SIGTERM)\n"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [("SIGINT", 130, "clawrig: interrupted"), ("SIGTERM", 143, "clawrig: interrupted (SIGTERM)")],
)
def test_a_signal_while_the_exit_cleans_up_is_ignored(sig, code, line):
    """helper-162: a SIGTERM while the exit's clean-ups ran (a trial disk's unmount, a temp
    folder's removal) raised in them: cut short, a traceback, exit 0. The command had ended:
    the clean-ups run whole and it exits with the command's code, saying nothing more."""
    r = subprocess.run(
        [sys.executable, "-c", _SIGNAL_AT_START, "exiting", sig],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, "cleaned up\n", ""), r.stderr


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [("SIGINT", 130, "clawrig: interrupted"), ("SIGTERM", 143, "clawrig: interrupted (SIGTERM)")],
)
def test_a_signal_before_the_job_loop_exits_with_its_code_and_says_so(sig, code, line):
    """A Ctrl-C or SIGTERM that comes while a command starts (clawrig run's preflight, its
    workers starting: before the job's loop handles signals) is said in one line and exits
    128 + the signal, as the README's exit codes say. typer turned the KeyboardInterrupt into a
    silent exit 130: SIGTERM exited 130, not 143, and neither said anything. Every command
    (clawrig run, grade, verify ...): run_guarded says it, in one place."""
    import sys

    # (plain: SIGTERM killed it, -15, no line: helper-159; parsing: typer's silent 130 for
    # either signal while the arguments were parsed or a subcommand's module loaded:
    # helper-161)
    # (wrapped: a library's exception made of SIGTERM's, pydantic's while it built a schema,
    # a traceback and exit 1: helper-162)
    cases = [["start", sig], ["plain", sig], ["--parsing", sig, "other"]]
    for command in cases + ([["wrapped", sig]] if sig == "SIGTERM" else []):
        r = subprocess.run(
            [sys.executable, "-c", _SIGNAL_AT_START, *command],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (r.returncode, r.stderr.strip()) == (code, line), (command, r.stderr)


START = """
import os, signal, sys
sys.argv[0] = {argv0!r}
import clawrig.cli  # what the console script imports first, before typer
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
if {interrupt}:
    import typer  # (the slow imports the guard covers)
    os.kill(os.getpid(), signal.{signal})
    import time
    time.sleep(5)
clawrig.cli.end_start_guard()  # (what run_guarded does first)
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
"""


@pytest.mark.parametrize("argv0", ["/venv/bin/clawrig", "/usr/bin/python-program"])
def test_ctrl_c_while_the_command_imports_is_one_line_not_a_traceback(argv0):
    # a Ctrl-C ~0.1 s after `clawrig` started printed a KeyboardInterrupt traceback out of
    # `import typer` (a red-team finding): the console script's start has a handler of its own
    # until run_guarded takes over; a program importing clawrig's CLI modules keeps its own
    def start(interrupt: bool, sig: str = "SIGINT") -> subprocess.CompletedProcess[str]:
        code = START.format(argv0=argv0, interrupt=interrupt, signal=sig)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    guarded = argv0.endswith("/clawrig")
    done = start(False)
    assert done.stdout.split() == [str(not guarded), "True"], done.stderr
    done = start(True)
    if guarded:
        assert (done.returncode, done.stderr) == (130, "clawrig: interrupted\n"), done.stderr
        assert done.stdout.split() == ["False"]
    else:  # Python's own KeyboardInterrupt, as for any program
        assert "KeyboardInterrupt" in done.stderr and done.returncode != 130
    # SIGTERM too (helper-159: killed with no line, -15, in the first ~0.3 s)
    done = start(True, "SIGTERM")
    if guarded:
        assert (done.returncode, done.stderr) == (143, "clawrig: interrupted (SIGTERM)\n")
    else:  # Python's default: killed by the signal
        assert done.returncode == -15 and done.stderr == ""


def test_a_job_whose_progress_file_was_removed_resumes_from_its_interrupted_summary(
    tmp_path, job_tmp
):
    # an interrupted job's progress file removed by hand: its summary (interrupted, trials not
    # run) counted as a finished job's, so --resume ran nothing and its unrun trials were lost
    out = tmp_path / "out"
    args = [CLAWRIG, "run", DEMO, "--agent", "oracle", "-p", "1", "-o", out]
    env = clean_env({"TMPDIR": str(job_tmp)})
    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while not list(out.glob("*/*/result.json")) and time.monotonic() < deadline:
        time.sleep(0.02)  # the first trial is done, nine to go (one at a time)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "err.txt").read_text()[-2000:]
    summary = json.loads((out / "summary_oracle.json").read_text())
    kept = {p.parent.name for p in out.glob("*/*/result.json")}
    assert summary["interrupted"] is True and summary["not_run"] == 10 - len(kept) > 0
    (out / "progress_oracle.json").unlink()
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"clawrig: error: --output: {out} holds an unfinished job of oracle (summary_oracle.json:"
        f" {summary['not_run']} trial(s) not run): add --resume to continue it, or choose "
        "another folder"
    ], again.stderr
    # helper-116: other trial settings, or a summary without its job id, are refused as with
    # the progress file (they summed trials of two settings into one job / ran a new job)
    other = subprocess.run(
        [*args, "--resume", "--timeout-multiplier", "3"], env=env, capture_output=True, text=True
    )
    assert other.returncode == 2, other.stderr[-2000:]
    assert "trial settings differ from the job's (timeout_multiplier 1.0 -> 3.0)" in (
        other.stderr
    ), other.stderr
    # helper-119: another suite, resumed from the summary (no task digests there): refused by
    # the job's task ids (its tasks ran under the job's id beside the first suite's)
    fewer = tmp_path / "fewer"
    shutil.copytree(DEMO, fewer)
    for rel in ("intent/000009.json", "datapoints/000009.json", "evaluators/evaluator_000009.py",
                "reference_payloads/reference_payload_000009.json"):  # fmt: skip
        (fewer / rel).unlink()
    shutil.rmtree(fewer / "workspaces" / "000009")
    moved = subprocess.run(
        [*args[:2], fewer, *args[3:], "--resume"], env=env, capture_output=True, text=True
    )
    assert moved.returncode == 2, moved.stderr[-2000:]
    assert "1 task(s) of the interrupted job are not in the suite now (000009)" in moved.stderr
    spath = out / "summary_oracle.json"
    spath.write_text(json.dumps({**summary, "job_id": 123}))
    no_id = subprocess.run([*args, "--resume"], env=env, capture_output=True, text=True)
    assert no_id.returncode == 2 and no_id.stderr.strip().splitlines() == [
        f"clawrig: error: {spath}: job_id: the unfinished job's id is not readable and its "
        "progress file is gone: its finished trials cannot be told apart; choose another --output"
    ], no_id.stderr
    spath.write_text(json.dumps(summary))
    assert {p.parent.name for p in out.glob("*/*/result.json")} == kept  # nothing ran
    resumed = subprocess.run([*args, "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = json.loads((out / "summary_oracle.json").read_text())
    assert final["job_id"] == summary["job_id"] and final["not_run"] == 0
    assert not final["interrupted"] and len(final["tasks"]) == 10
    results = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    assert len(results) == len({r["task_id"] for r in results}) == 10  # each task once
    assert kept <= {p.parent.name for p in out.glob("*/*/result.json")}  # the first ones kept
    assert all(r["job_id"] == summary["job_id"] for r in results)


def test_ctrl_c_before_any_trial_finished_shows_what_the_answered_requests_spent(tmp_path):
    """helper-168: the progress bar read ``spend $0.0000`` at a Ctrl-C after two answered
    requests, which the usage line then counted ($0.02): it showed the finished trials' spend
    alone. It shows the gateway's count as it is drawn."""
    from clawrig.testing.scripted_server import call

    out = tmp_path / "out"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.01}

    def responder(request: dict) -> object:
        done = sum(1 for m in request["messages"] if m.get("role") == "tool")
        if done < 2:  # two answered requests, then one that is not answered before the signal
            return reply(tool_calls=[call("exec", {"command": "true"})], usage=usage)
        return reply("late", delay=60)

    rc, stdout, stderr = _ctrl_c_once_asked(out, responder, 3)  # the third waits for its reply
    assert rc == 130, stderr[-2000:]
    assert "model usage: 2 requests" in stderr + stdout, stderr[-2000:]
    bars = [ln for ln in stderr.splitlines() if ln.lstrip().startswith("trials")]
    assert bars and "spend $0.0200" in bars[-1], stderr[-2000:]


def test_sigterm_in_a_commands_event_loop_cancels_it_and_its_clean_up_runs():
    """verify, grade, export, pull (:func:`run_async`): SIGTERM raised as Terminated inside
    the event loop cut a callback short and left the sandboxes' stops pending, destroyed at
    exit. It cancels the command's coroutine (its ``finally`` runs, awaiting), then raises
    Terminated; the SIGTERM handler found before is put back."""
    import asyncio

    from clawrig.cli import common
    from clawrig.cli.common import Terminated, run_async, terminate_like_ctrl_c

    held = signal.getsignal(signal.SIGTERM)
    terminate_like_ctrl_c()
    ours = signal.getsignal(signal.SIGTERM)
    cleaned: list[str] = []

    async def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.01)  # a clean-up that awaits (a sandbox's stop)
            cleaned.append("stopped")

    try:
        with pytest.raises(Terminated):  # (not cancelled: the sleep ends and nothing raises)
            run_async(command())
        assert cleaned == ["stopped"]
        assert signal.getsignal(signal.SIGTERM) is ours
        assert run_async(asyncio.sleep(0, result=7)) == 7  # no signal: what it returns
    finally:
        signal.signal(signal.SIGTERM, held)
        common._TERMINATED[0] = False  # (this process goes on)


def test_a_signal_while_a_report_is_written_waits_for_its_end():
    """helper-180: SIGTERM while `verify --json` wrote its report to a slow reader left cut
    JSON on stdout. A first signal waits for the report's end (:func:`signals_held`), then is
    raised as it would have been; the handlers found before are put back."""
    from clawrig.cli import common
    from clawrig.cli.common import Terminated, signals_held

    held = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    written: list[str] = []
    try:
        for signum, raised in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
            with pytest.raises(raised):
                with signals_held():
                    os.kill(os.getpid(), signum)
                    written.append(f"the rest after {signum.name}")
            assert {s: signal.getsignal(s) for s in held} == held
        assert written == ["the rest after SIGTERM", "the rest after SIGINT"]
        with signals_held():  # no signal: nothing raised
            written.append("quiet")
    finally:
        common._TERMINATED[0] = False


_SIGNAL_AFTER_THE_TRIALS = """
import os, signal, sys
import clawrig.cli.run as run
import clawrig.runner.batch as batch
import clawrig.runner.job as job
when = {when!r}

def send():
    os.kill(os.getpid(), signal.{sig})

written = batch.write_json_atomic

def write_then_signal(path, value):  # just after the summary is written
    written(path, value)
    if when == "summary" and path.name.startswith("summary_"):
        send()

batch.write_json_atomic = write_then_signal
arun = job.Job.arun

async def arun_then_signal(self, *args):  # the job ended, its event loop not yet shut down
    summary = await arun(self, *args)
    if when == "loop":
        send()
    return summary

job.Job.arun = arun_then_signal
render = run.render_summary

def render_after_signal(summary):  # while the table is printed
    if when == "table":
        send()
    return render(summary)

run.render_summary = render_after_signal
sys.argv = ["clawrig", "run", {demo!r}, "--agent", "oracle", "-s", "000001,000002",
            "-o", {out!r}]
from clawrig.cli.main import app
app()
"""


@pytest.mark.parametrize("when", ["summary", "loop", "table"])
@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [("SIGINT", 130, "clawrig: interrupted"), ("SIGTERM", 143, "clawrig: interrupted (SIGTERM)")],
)
def test_a_signal_after_every_trial_ended_lets_the_job_end_whole(tmp_path, sig, code, said, when):
    """helper-225: a Ctrl-C that came after every trial had ended, as the summary was written
    or the job's sandboxes and services stopped, said only "clawrig: interrupted" (exit 130)
    of a finished job: no table, the README's "before any trial" line; a little earlier it cut
    the summary's writing (none written, the progress file left). It is now held until the job
    has ended: the summary is written, the table printed, then the exit says so. helper-227:
    one in the event loop's shutdown or as the table was printed still lost the table or the
    words."""
    out = tmp_path / "out"
    script = _SIGNAL_AFTER_THE_TRIALS.format(sig=sig, demo=str(DEMO), out=str(out), when=when)
    r = subprocess.run(
        [sys.executable, "-c", script], env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == code and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"{said} as the job ended: every trial had ended"
    summary_file = out / "summary_oracle.json"
    summary = json.loads(summary_file.read_text())
    assert summary["interrupted"] is False and summary["not_run"] == 0
    assert len(summary["tasks"]) == 2 and not list(out.glob("progress_*.json"))
    printed = " ".join(r.stdout.split())
    assert f"summary: {summary_file}" in printed and "000002" in printed, r.stdout
    assert "interrupted" not in printed  # (a finished job's table and lines)
