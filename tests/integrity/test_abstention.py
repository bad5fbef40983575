"""Issue 14, class 1: free abstention. What goes wrong after the agent stops because of what the
agent left must count as the agent's 0, never as a retried, uncounted infrastructure or grading
error. Each attack runs a whole trial (real bwrap sandbox, scripted model, real grading)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets

import pytest
from integrity_helpers import tool_outputs

from clawrig.runner.trial import TrialServices, run_trial
from clawrig.sandbox.disk import can_make_disks
from clawrig.spec.job import TrialConfig
from clawrig.spec.task import FileContent
from clawrig.spec.trial import ErrorKind
from clawrig.testing.scripted_server import call, reply

pytestmark = pytest.mark.sandbox

JSON_GRADER = """
import json, os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    with open(os.path.join(workspace_path, "results", "out.json")) as fh:
        got = json.load(fh)
    return {"overall_score": 1.0 if got == {"answer": want} else 0.0}
"""

REGEX_GRADER = """
import os, re
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    text = open(os.path.join(workspace_path, "results", "out.txt")).read()
    runs = [ln for ln in text.splitlines() if re.match(r"^(a+)+$", ln)]  # backtracks
    return {"overall_score": 1.0 if want in text.split() else 0.0, "runs": len(runs)}
"""


def assert_counted_zero(result) -> None:
    """The trial counts as 0 and is not retried: graded 0, or an agent error."""
    assert result.counted_score() == 0.0, (result.error, result.score)
    if result.error is not None:
        assert result.error.kind == ErrorKind.AGENT and not result.error.retryable


async def test_a_grader_crash_on_deeply_nested_json_is_the_agents_zero(attack, make_task):
    task = make_task(JSON_GRADER)
    result, _ = await attack(
        task, "mkdir -p results && python3 -c \"print('[' * 200000)\" > results/out.json"
    )
    assert_counted_zero(result)
    details = result.score.details if result.score else None
    assert result.error is not None and result.error.phase == "grading", details
    assert "RecursionError" in result.score.details["stderr"]


async def test_a_grader_hung_by_catastrophic_backtracking_is_the_agents_zero(attack, make_task):
    task = make_task(REGEX_GRADER, grader_timeout_s=3)
    result, _ = await attack(
        task, "mkdir -p results && python3 -c \"print('a' * 40 + 'b')\" > results/out.txt"
    )
    assert_counted_zero(result)
    assert result.error is not None and "timed out" in result.error.message


async def test_a_fifo_the_grader_would_open_is_dropped_and_scored(attack, make_task):
    task = make_task()
    result, folder = await attack(task, "mkdir -p results && mkfifo results/out.txt")
    assert result.error is None and result.score.score == 0.0
    assert result.counted_score() == 0.0
    assert "results/out.txt" in (folder / "end_state_dropped.json").read_text()


async def test_a_link_to_an_endless_device_is_dropped_and_scored(attack, make_task):
    task = make_task()
    result, _ = await attack(task, "mkdir -p results && ln -s /dev/zero results/out.txt")
    assert result.error is None and result.score.score == 0.0


async def test_the_transcript_path_made_a_folder_does_not_void_the_trial(attack, make_task):
    task = make_task()
    session = "/root/.openclaw/agents/main/sessions/chat.jsonl"
    result, folder = await attack(
        task, f"rm -rf {session} && mkdir -p {session}/x && chmod 000 /root/.openclaw"
    )
    assert result.error is None and result.score.score == 0.0
    assert (folder / "chat.jsonl").is_file()


async def test_results_linked_to_the_root_does_not_void_the_trial(attack, make_task):
    task = make_task()
    result, folder = await attack(task, "ln -s / results && chmod 000 /run/clawrig")
    assert result.error is None and result.score.score == 0.0
    assert not (folder / "task_output").exists() or not any((folder / "task_output").iterdir())


async def test_a_workspace_deeper_than_the_cap_is_the_agents_zero(attack, make_task):
    task = make_task()
    deep = "/".join(["d"] * 140)
    result, _ = await attack(task, f"mkdir -p {deep} results && echo SECRET > results/out.txt")
    assert_counted_zero(result)
    assert result.error is not None and result.error.phase == "collect"
    assert "more than 128 folders deep" in result.error.message


async def test_a_grader_that_cannot_load_is_a_grading_error_not_the_agents(attack, make_task):
    # blame follows control the other way too: the task's own broken grader is not the agent's
    task = make_task("import clawrig_no_such_module\n" + JSON_GRADER)
    result, _ = await attack(task, "echo nothing")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING
    assert result.counted_score() is None


async def test_file_names_that_are_not_utf8_do_not_void_the_trial(attack, make_task):
    # a link and a file whose names are the byte 0xff: recording them (end_state_dropped.json,
    # agent.log) raised UnicodeEncodeError, an infrastructure error, retried and never counted
    task = make_task()
    result, folder = await attack(
        task,
        "mkdir -p results && ln -s x results/$(printf '\\377') && echo WRONG > results/out.txt",
    )
    assert result.error is None and result.score.score == 0.0
    dropped = json.loads((folder / "end_state_dropped.json").read_text(encoding="utf-8"))
    assert dropped["results/\udcff"] == "link"


async def test_a_tree_past_the_depth_cap_under_a_non_utf8_name_is_the_agents_zero(
    attack, make_task
):
    # the cap's message names the path: with a 0xff byte in it the trial folder could not be
    # written (an infrastructure error, retried, never counted)
    task = make_task()
    deep = "/".join(["d"] * 130)
    result, folder = await attack(task, f"mkdir -p $(printf 'x\\377')/{deep}")
    assert_counted_zero(result)
    assert result.error is not None and "more than 128 folders deep (x\\xff/d/d" in (
        result.error.message
    )
    assert json.loads((folder / "result.json").read_text())["error"]["kind"] == "agent"


NUMBER_GRADER = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    got = float(open(os.path.join(workspace_path, "results", "out.txt")).read())
    return {"overall_score": 1.0 if str(got) == want else 0.0}
"""


async def test_words_of_the_agent_in_the_graders_traceback_cannot_blame_the_task(attack, make_task):
    # float('No module named os') fails with the agent's text in the traceback: read as a
    # missing module the grader imports, the failure was the task's (a grading error, not
    # counted) instead of the agent's 0
    task = make_task(NUMBER_GRADER)
    result, _ = await attack(
        task, "mkdir -p results && printf 'No module named os' > results/out.txt"
    )
    assert_counted_zero(result)
    assert "missing_module" not in result.score.details


async def test_agent_code_the_grader_imports_while_loading_is_the_agents_fault(attack, make_task):
    # a grader that imports the agent's module at load time: the agent's broken code made the
    # grader "unable to load", the task's fault (a grading error, not counted)
    grader = (
        "import sys\nsys.path.insert(0, '/tmp_workspace')\nimport solution\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    return {'overall_score': 1.0 if solution.answer() == 42 else 0.0}\n"
    )
    task = make_task(grader)
    result, _ = await attack(task, "printf 'def answer(:\\n' > solution.py")
    assert_counted_zero(result)
    assert "SyntaxError" in result.score.details["stderr"]


async def test_a_module_missing_from_the_graders_environment_stays_the_tasks(attack, make_task):
    # the other way round: grade() importing a module its environment lacks is the task's
    grader = (
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    import clawrig_no_such_module\n"
        "    return {'overall_score': 1.0}\n"
    )
    result, _ = await attack(make_task(grader), "echo hi")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING
    assert result.score.details["missing_module"] == "clawrig_no_such_module"
    assert result.counted_score() is None


async def test_a_300_character_agent_id_does_not_void_the_trial(
    scripted_server, make_task, tmp_path
):
    # sessions_spawn with a 300-character agentId: the sub-agent's transcript file name was
    # too long for the file system (OSError, an infrastructure error, retried, not counted)
    spawn = {"task": "say hi", "agentId": "a" * 300, "timeoutSeconds": 20}
    first = [True]

    def respond(request):
        if first[0]:
            first[0] = False
            return reply(tool_calls=[call("sessions_spawn", spawn)])
        return reply("done")

    srv = scripted_server(responder=respond)
    config = TrialConfig(agent="native", model="scripted/x")
    result, folder = await run_trial(
        make_task(), config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    assert result.error is None and result.score.score == 0.0
    [sub] = (folder / "subagents").iterdir()
    assert len(sub.name) < 120 and sub.read_text().strip()


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_disk_left_too_full_for_gt_is_the_agents_zero(attack, make_task):
    # gt/ of 24 MiB, and the agent leaves 20 MiB free (more than the 16 MiB reserve): writing
    # gt/ into the clean room failed with ENOSPC, an infrastructure error, never counted
    task = make_task()
    task.workspace.gt_files["media.txt"] = FileContent(text="g" * (24 * 1024**2))
    fill = (
        "python3 -c \"import os; st = os.statvfs('/tmp'); "
        "open('/tmp/fill', 'wb').write(b'z' * (st.f_bavail * st.f_frsize - 20 * 2**20))\""
    )
    result, _ = await attack(task, fill, disk_mb=96)
    assert_counted_zero(result)
    assert result.error is not None and "disk (96 MiB, --disk-mb) is full" in result.error.message


async def _trial(srv, task, config, tmp_path, *, pooled: bool):
    """One trial of ``task`` under ``config`` with the scripted model ``srv`` (its folder under
    ``tmp_path/out``), its sandboxes from a warm pool of its own when ``pooled``."""
    from clawrig.sandbox.pool import WarmPool, pooling_possible

    if pooled and not pooling_possible():
        pytest.skip("pooling needs root, mke2fs and bwrap")
    pool = WarmPool(parallel=1, work_dir=tmp_path) if pooled else None
    try:
        result, _ = await run_trial(
            task,
            config,
            tmp_path / "out",
            services=TrialServices(model=srv.chat_model(), pool=pool),
        )
    finally:
        if pool is not None:
            await pool.close()
    return result


SCRATCH_GRADER = """
import os, shutil
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    shutil.copyfile(workspace_path + "/data.bin", "/tmp/data.bin")  # 40 MiB of scratch
    st = os.statvfs("/tmp")
    kinds = {line.split()[4]: line.split(" - ")[1].split()[0] for line in open(
        "/proc/self/mountinfo")}
    return {"overall_score": 1.0, "tmp": kinds.get("/tmp"), "root": kinds.get("/root"),
            "bytes": st.f_blocks * st.f_frsize, "inodes": st.f_files}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
@pytest.mark.parametrize("pooled", [False, True])
async def test_the_graders_scratch_room_is_the_same_with_a_pool_or_without(
    pooled, scripted_server, make_task, tmp_path
):
    # an honest agent leaves a legitimate 40 MiB file and 24 MiB free on its 96 MiB disk; the
    # grader copies the file to /tmp. A clean room started without a pool had its /tmp on the
    # trial's disk (what the agent left free): ENOSPC, the grader crashed, the agent's 0; a
    # pooled one had a disk of its own: 1.0 (helper-113: one end state, two scores). Both have
    # a room of their own now, a tmpfs of the disk's size
    leave = (
        'head -c $((40 * 1024 * 1024)) /dev/urandom > data.bin && python3 -c "import os; '
        "st = os.statvfs('/tmp'); open('/tmp/fill', 'wb').write(b'z' * (st.f_bavail * "
        'st.f_frsize - 24 * 2**20))"'
    )
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": leave})]), reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=96)
    result = await _trial(srv, make_task(SCRATCH_GRADER), config, tmp_path, pooled=pooled)
    assert result.error is None, result.error
    assert result.score is not None and result.score.score == 1.0
    assert ("clean_room" in result.pooled) is pooled
    # its room is a tmpfs of the trial disk's size and inode count (no second disk per trial)
    got = result.score.subscores
    assert (got["tmp"], got["root"]) == ("tmpfs", "tmpfs")
    assert got["bytes"] == 96 * 1024**2 and got["inodes"] == 96 * 1024**2 // (32 * 1024)


OOM_GRADER = """
import os, sys
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    st = os.statvfs("/tmp")
    sys.stderr.write("room %d\\n" % (st.f_blocks * st.f_frsize))
    sys.stderr.flush()
    with open("/tmp/scratch.bin", "wb") as fh:  # 160 MiB of scratch: over the 128 MiB limit
        for _ in range(160):
            fh.write(b"x" * 2**20)
    return {"overall_score": 1.0}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
@pytest.mark.parametrize("pooled", [False, True])
async def test_a_grader_writing_more_scratch_than_its_memory_limit_is_said_out_of_memory(
    pooled, scripted_server, make_task, tmp_path
):
    # the clean room's /tmp is memory counted in its limit: a grader writing past it is
    # killed by the kernel, and the error says so (it read "grader crashed: exit code 137")
    from clawrig.sandbox.bwrap import Cgroup

    probe = Cgroup(f"clawrig-probe-{os.getpid()}-{secrets.token_hex(4)}", 64 * 1024**2, None)
    counts_kills = probe.oom_kills() is not None
    probe.remove()
    if not counts_kills:
        pytest.skip("no memory cgroup with an oom_kill count here")
    srv = scripted_server([reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", memory_mb=128, disk_mb=512)
    result = await _trial(srv, make_task(OOM_GRADER), config, tmp_path, pooled=pooled)
    assert ("clean_room" in result.pooled) is pooled
    assert result.error is not None and result.error.kind == ErrorKind.AGENT, result.error
    assert result.score is not None and result.score.score == 0.0
    assert result.score.details.get("out_of_memory") is True
    # its room is the 512 MiB disk's size cut to the memory limit: what it can ever hold
    assert f"room {128 * 1024**2}" in result.score.details["stderr"]
    assert result.error.message.startswith("grader killed: out of memory")
    assert "128 MiB" in result.error.message and "/tmp" in result.error.message


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_task_that_leaves_less_than_the_reserve_is_a_setup_error(attack, make_task):
    # helper-114: a 50 MiB initial workspace on a 64 MiB disk left less than the 16 MiB the
    # harness keeps for its writes after the agent: every agent, even one that only says
    # "done", got "the trial's disk is full", the agent's 0 (the task's own size)
    task = make_task()
    task.workspace.inline_files["big.txt"] = FileContent(text="x" * (50 * 1024**2))
    result, _ = await attack(task, disk_mb=64)
    assert result.error is not None and result.error.kind == ErrorKind.SETUP, result.error
    assert "leave less than the harness's reserve" in result.error.message
    assert "64 MiB" in result.error.message and "--disk-mb" in result.error.message


IMPORT_TIME_JSON_GRADER = """
import json
with open("/tmp_workspace/results/out.json") as fh:
    GOT = json.load(fh)  # at import, before grade() runs
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    return {"overall_score": 1.0 if GOT == {"answer": "SECRET-ANSWER-7"} else 0.0}
"""


async def test_agent_data_a_grader_reads_while_loading_is_the_agents_zero(attack, make_task):
    # the grader parses results/out.json at module level: the agent's broken JSON made the
    # grader "unable to load", the task's fault (a grading error, not counted)
    task = make_task(IMPORT_TIME_JSON_GRADER)
    result, _ = await attack(task, "mkdir -p results && printf '{not json' > results/out.json")
    assert_counted_zero(result)
    assert "JSONDecodeError" in result.score.details["stderr"]


PICKLE_GRADER = """
import pickle
with open("results/model.pkl", "rb") as fh:  # relative: the cwd is the workspace
    MODEL = pickle.load(fh)
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    return {"overall_score": 1.0 if MODEL == "SECRET-ANSWER-7" else 0.0}
"""


async def test_an_agents_pickle_naming_a_missing_module_at_load_is_its_zero(attack, make_task):
    # the pickle names a module no environment has: a ModuleNotFoundError while the grader
    # loads, read as the grader missing a package (the task's)
    task = make_task(PICKLE_GRADER)
    make = (
        "import pickle, types, sys; m = types.ModuleType('clawrig_evil'); "
        "sys.modules['clawrig_evil'] = m; exec('class C: pass', m.__dict__); "
        "m.C.__module__ = 'clawrig_evil'; "
        "open('results/model.pkl', 'wb').write(pickle.dumps(m.C()))"
    )
    result, _ = await attack(task, f'mkdir -p results && python3 -c "{make}"')
    assert_counted_zero(result)
    assert "clawrig_evil" in result.score.details["stderr"]
    assert "missing_module" not in result.score.details


GRADE_TIME_PICKLE_GRADER = """
import json, pickle
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with open("results/model.pkl", "rb") as fh:
        got = pickle.load(fh)
    return {"overall_score": 1.0 if got == json.loads('"SECRET-ANSWER-7"') else 0.0}
"""


async def test_an_agents_pickle_naming_a_submodule_of_the_graders_import_is_its_zero(
    attack, make_task
):
    # the pickle names json.clawrig_nope: "No module named 'json.clawrig_nope'", and json is a
    # module the grader imports by name, so the failure read as the grader's environment
    # lacking it (the task's) instead of the agent's 0
    task = make_task(GRADE_TIME_PICKLE_GRADER)
    make = "open('results/model.pkl', 'wb').write(b'cjson.clawrig_nope\\nlen\\n.')"
    result, _ = await attack(task, f'mkdir -p results && python3 -c "{make}"')
    assert_counted_zero(result)
    assert "json.clawrig_nope" in result.score.details["stderr"]


async def test_a_grader_missing_a_package_after_reading_the_workspace_stays_the_tasks(
    attack, make_task
):
    # the other way round: the grader read the workspace at load, then its own import failed
    grader = (
        "import os\nFILES = os.listdir('/tmp_workspace')\nimport clawrig_no_such_module\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    return {'overall_score': 1.0}\n"
    )
    result, _ = await attack(make_task(grader), "echo hi")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING
    assert result.score.details["missing_module"] == "clawrig_no_such_module"


ECHOING_GRADER = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    got = int(open(os.path.join(workspace_path, "results", "out.txt")).read())
    return {"right": 1.0 if got == 7 else 0.0, "value": got}  # no overall_score: the mean
"""


async def test_a_number_too_large_for_a_float_in_the_verdict_is_the_agents_zero(attack, make_task):
    # the grader echoes the agent's number in its verdict: a 400-digit int made the harness's
    # mean raise OverflowError, an infrastructure error (retried, never counted)
    result, _ = await attack(
        make_task(ECHOING_GRADER),
        "mkdir -p results && python3 -c \"print('9' * 400)\" > results/out.txt",
    )
    assert_counted_zero(result)
    assert "no score in [0,1]" in result.error.message


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("    print('checked')\n", "grade() returned None, not a dict of scores"),
        ("    return [1.0]\n", "grade() returned a list, not a dict of scores"),
        ("    import os; os._exit(0)\n", "grade() sent no verdict: the grader exited before"),
    ],
)
async def test_a_grade_that_returns_no_dict_says_what_it_returned(attack, make_task, body, said):
    """helper-190: a grade() that only printed (returning None) was "the grader sent no verdict
    (a JSON object) on the harness channel": the agent's 0 by the rule, in words an author
    could not act on."""
    grader = "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n" + body
    result, _ = await attack(make_task(grader), "echo hi")
    assert_counted_zero(result)
    assert said in result.error.message, result.error.message


async def test_an_async_grade_however_bound_is_the_tasks_grading_error(attack, make_task):
    """An async grade() bound by assignment (``grade = _g``: the reader refuses only ``async
    def grade``) returns a coroutine whose body never ran: the task's grading error, saying
    so (it was "grade() returned a string", the agent's 0: helper-207)."""
    grader = (
        "async def _g(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    return {'overall_score': 1.0}\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    return {'overall_score': 0.0}\n"
        "grade = _g\n"
    )
    result, _ = await attack(make_task(grader), "echo hi")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING, result.error
    assert result.error.message == (
        "grader crashed: clawrig: grade() is a coroutine function (an async def): it must be "
        "a plain def"
    )


IMPORTS_SOLUTION = """
import importlib.util
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    spec = importlib.util.spec_from_file_location("solution", workspace_path + "/solution.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"overall_score": 1.0 if mod.add(2, 3) == 5 else 0.0}
"""

EXECS_SOLUTION = """
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    ns = {}
    exec(open(workspace_path + "/solution.py").read(), ns)
    return {"overall_score": 1.0 if ns["add"](2, 3) == 5 else 0.0}
"""

FORGED_BLAME = (  # the runner's own report(), reached through __main__, then its exit code
    "import __main__, os, sys\n"
    "__main__.report({'clawrig_blame': 'task', 'why': 'grade() is async'})\n"
    "sys.stderr.write('clawrig: grade() returned a coroutine\\n'); os._exit(3)\n"
)


@pytest.mark.parametrize("grader", [IMPORTS_SOLUTION, EXECS_SOLUTION], ids=["import", "exec"])
async def test_the_agents_code_run_by_grade_cannot_claim_the_tasks_fault(attack, make_task, grader):
    """A grade() that imports (or execs) the agent's solution.py runs the agent's code in the
    grader's process: that code called the runner's report() with the task's fault and
    exited, and its wrong answer was an unscored grading error (never counted, run again at
    --resume) instead of its 0 (helper-208). The runner says on the channel, before such code
    runs, that it may run; a report of the task's fault after that is not believed."""
    write = f"cat > solution.py <<'EOF'\n{FORGED_BLAME}EOF"
    result, _ = await attack(make_task(grader), write)
    assert_counted_zero(result)


FORGED_MISSING = (  # a module the grader imports by name said missing: the task's, were it so
    "import __main__, os\n"
    "__main__.report({'clawrig_blame': 'task', 'missing_module': 'json'})\n"
    "os._exit(1)\n"
)
GRADERS_RUNNING_IT = {  # (helper-210's ways past the first rule)
    "relative compile": "exec(compile(open('solution.py').read(), 'solution.py', 'exec'), {})",
    "named compile": "exec(compile(open('solution.py').read(), '<solution>', 'exec'), {})",
    "a copy": (
        "import shutil, tempfile; d = tempfile.mkdtemp(); shutil.copy('solution.py', d)\n"
        "    exec(compile(open(d + '/solution.py').read(), d + '/solution.py', 'exec'), {})"
    ),
    "a program's output": (
        "import subprocess\n"
        "    out = subprocess.run(['cat', 'solution.py'], capture_output=True, text=True).stdout\n"
        "    exec(out, {})"
    ),
    "a pickle from a program": (
        "import pickle, subprocess\n"
        "    pickle.loads(subprocess.run(['cat', 'ans.pkl'], capture_output=True).stdout)"
    ),
}


@pytest.mark.parametrize("how", list(GRADERS_RUNNING_IT))
async def test_the_agents_code_cannot_claim_a_missing_module(attack, make_task, how):
    """The agent's code, run by grade() in its process however the grader got it (a relative
    or made-up file name, a copy, a program's output, a pickle a program printed), reports a
    module the grader imports by name as missing: its wrong answer was unscored (helper-210).
    The runner's line comes before that code runs; the report after it is not believed."""
    grader = (
        "import json\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        f"    {GRADERS_RUNNING_IT[how]}\n"
        "    return {'overall_score': 0.0}\n"
    )
    pickle_it = (
        "python3 -c \"import pickle; code = open('solution.py').read()\n"
        "class X:\n    def __reduce__(self): return (exec, (code,))\n"
        "open('ans.pkl', 'wb').write(pickle.dumps(X()))\""
    )
    write = f"cat > solution.py <<'EOF'\n{FORGED_MISSING}EOF\n{pickle_it}"
    result, _ = await attack(make_task(grader), write)
    assert_counted_zero(result)


async def test_a_workspace_on_sys_path_makes_a_missing_module_the_agents(attack, make_task):
    """A grader that puts the workspace on sys.path and imports the agent's module by name:
    the module missing (the agent wrote none) is the agent's 0, not the task's unscored
    error (helper-210)."""
    grader = (
        "import site\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    site.addsitedir(workspace_path)\n"
        "    import solution\n"
        "    return {'overall_score': 1.0 if solution.add(2, 3) == 5 else 0.0}\n"
    )
    result, _ = await attack(make_task(grader), "echo nothing written")
    assert_counted_zero(result)


async def test_a_namedtuple_after_reading_the_workspace_leaves_a_missing_module_the_tasks(
    attack, make_task
):
    """The system's own text-made code (namedtuple's "<string>") is no agent's code: a grader
    that read the workspace, made a namedtuple and then missed a module it imports by name
    is the task's grading error, as without the namedtuple (helper-210)."""
    grader = (
        "import collections, os\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    os.listdir(workspace_path)\n"
        "    collections.namedtuple('P', 'x y')\n"
        "    import clawrig_no_such_module  # noqa: F401\n"
        "    return {'overall_score': 1.0}\n"
    )
    result, _ = await attack(make_task(grader), "echo hi")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING, result.error
    assert result.score.details["missing_module"] == "clawrig_no_such_module"


RUNS_SOLUTION = """
import os, subprocess
def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):
    subprocess.run(['python3', os.path.join(workspace_path, 'solution.py')], timeout=20)
    return {'overall_score': 0.0}
"""


@pytest.mark.parametrize(
    ("signal_name", "call_timeout_s"), [("SIGKILL", 3), ("SIGSTOP", 3), ("SIGSTOP", 3600)]
)
async def test_a_program_the_grader_runs_killing_the_clean_rooms_supervisor_is_the_agents_zero(
    attack, make_task, signal_name, call_timeout_s
):
    # the grader runs the agent's solution.py in the clean room; it kills or stops the
    # supervisor (pid 2, the same uid): the trial ended as a retried infrastructure error, a
    # free abstention for a wrong answer (found by the red-team review of the forked grader).
    # Stopped, the grader's kill at its time limit waited out the supervisor's call timeout
    # (default 120 s; here an hour: the trial must end long before)
    # (the supervisor found as the grader's parent, not by number; the process it signalled
    # and its ancestry go to the grader's stderr, in the assertion's message)
    # (CI163 scored it 0 with no error, graded in 48 ms: the signal reached the supervisor
    # but took effect after its answer. The kernel wakes one thread of a process for a stop
    # signal, and the group stop reaches the others only once that thread runs; another
    # thread may send an answer meanwhile. The request was answered then, and nothing of the
    # harness's is wrong: the program waits until the signal has taken effect, so the test
    # checks what it means to)
    sol = (
        "import os, signal, sys\n"
        "def stat(pid): return open(f'/proc/{pid}/stat').read()\n"
        "supervisor = int(stat(os.getppid()).rsplit(')', 1)[1].split()[1])\n"
        "sys.stderr.write(f'me {os.getpid()} {stat(os.getpid())[:60]!r} runner "
        "{stat(os.getppid())[:60]!r} target {supervisor} {stat(supervisor)[:60]!r}\\n')\n"
        "sys.stderr.flush()\n"
        f"os.kill(supervisor, signal.{signal_name})\n"
        "while True:  # until it has taken effect: stopped, or dead\n"
        "    try: state = stat(supervisor).rsplit(')', 1)[1].split()[0]\n"
        "    except OSError: break\n"
        "    if state in 'TtZX': break\n"
    )
    async with asyncio.timeout(300):
        result, _ = await attack(
            make_task(RUNS_SOLUTION, grader_timeout_s=5),
            f"cat > solution.py <<'EOF'\n{sol}EOF",
            call_timeout_s=call_timeout_s,
        )
    assert_counted_zero(result)
    details = result.score.details if result.score else None
    assert result.error is not None and result.error.phase == "grading", details


# the agent's command stops its sandbox's supervisor: the first ancestor of its shell whose
# parent is outside the sandbox or its init (pid 0 or 1), found from /proc as the grader's
# solution above finds it; then it waits until the supervisor is stopped (a stop takes effect
# when the one thread the kernel woke for it runs: another thread may answer first, and a
# command answered is no stopped request: 1 run in 17 on a loaded machine, and the official
# CI on 6f0e6cc)
STOPS_ITS_SUPERVISOR = (
    "p=$$; while :; do pp=$(cut -d' ' -f4 /proc/$p/stat); [ \"$pp\" -le 1 ] && break; "
    "p=$pp; done; kill -STOP $p; "
    "while [ \"$(cut -d' ' -f3 /proc/$p/stat)\" != T ]; do :; done"
)


@pytest.mark.parametrize("grading", [False, True], ids=["agent", "clean-room"])
async def test_a_stopped_supervisor_ends_the_trial_within_seconds(attack, make_task, grading):
    """helper-157: a process of the sandbox stopping its supervisor (SIGSTOP) held the trial
    until the request's whole wait ran out: the command's limit and the call timeout (720 s
    for an agent's command). It was the agent's 0 then as now; now the harness sees the
    supervisor stopped within ``STOPPED_WATCH_S`` (5 s) and ends the trial at once. With a call
    timeout of an hour and a time limit of ten minutes, only the check ends it in time."""
    async with asyncio.timeout(300):
        if grading:  # the grader runs the agent's program, which stops the clean room's
            sol = f"import subprocess\nsubprocess.run({STOPS_ITS_SUPERVISOR!r}, shell=True)\n"
            result, folder = await attack(
                make_task(RUNS_SOLUTION, grader_timeout_s=600),
                f"cat > solution.py <<'EOF'\n{sol}EOF",
                call_timeout_s=3600,
            )
        else:
            result, folder = await attack(
                make_task(timeout_s=600), STOPS_ITS_SUPERVISOR, call_timeout_s=3600
            )
    assert_counted_zero(result)
    assert result.error is not None, (result.score, tool_outputs(folder))
    assert result.error.phase == ("grading" if grading else "agent"), result.error
    assert "supervisor was stopped (SIGSTOP" in result.error.message, result.error


@pytest.mark.parametrize("timeout", [3_000_000, float("inf"), float("nan"), 1e300])
async def test_an_exec_time_limit_too_large_or_not_a_number_is_not_an_infrastructure_error(
    scripted_server, make_task, tmp_path, timeout
):
    """A red-team finding: a huge ``timeout`` overflowed poll(2) in the supervisor, and the
    trial ended as a retried infrastructure error (a free abstention for a wrong answer)."""
    srv = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "echo wrong > results.txt"})]),
            reply(tool_calls=[call("exec", {"command": "echo ran", "timeout": timeout})]),
            reply("done"),
        ]
    )
    config = TrialConfig(agent="native", model="scripted/x")
    result, folder = await run_trial(
        make_task(), config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    assert result.error is None, result.error
    assert_counted_zero(result)
    outputs = tool_outputs(folder)
    if timeout == 1e300 or timeout == 3_000_000:  # finite: the command runs, its limit cut
        assert "ran" in outputs[1], outputs
    else:  # refused as the tool's error, before anything ran: NaN and Infinity are not
        # JSON (jsonl.loads_strict), so the arguments are refused as such
        token = "NaN" if timeout != timeout else "Infinity"
        assert f"Invalid JSON in the arguments of exec: {token} is not JSON" in outputs[1], outputs


ECHO_GRADER = """
import json, os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    got = json.load(open(os.path.join(workspace_path, "results", "answer.json")))["answer"]
    return {"overall_score": 0.0, "got": got}
"""


async def test_a_lone_surrogate_a_grader_echoes_leaves_the_trial_readable(attack, make_task):
    # a red-team finding: the agent's answer holds "\ud800" and the grader echoes it in its
    # verdict; result.json then held the escape, which pydantic's JSON parser refuses, so the
    # harness could not read its own file: a resumed job dropped the trial (its 0 gone from the
    # summary), `clawrig grade` refused it, `clawrig serve` lost the episode
    from clawrig.rl.episode import episode_from_trial
    from clawrig.runner.regrade import load_trial, score_file_problem

    task = make_task(ECHO_GRADER)
    result, folder = await attack(
        task, 'mkdir -p results && printf \'{"answer": "x\\\\ud800"}\' > results/answer.json'
    )
    assert result.error is None and result.score.score == 0.0
    again = load_trial(folder)  # what re-grading and a resumed job read
    assert again.score.score == 0.0 and again.model_dump() == result.model_dump()
    assert episode_from_trial(folder).reward == 0.0
    # and `clawrig grade` finds score.json agreeing with it (it said "not a valid score file")
    assert score_file_problem(folder, again) is None


@pytest.mark.parametrize("depth", [230, 300])
async def test_deep_json_a_grader_echoes_leaves_the_trial_scored_and_readable(
    attack, make_task, depth
):
    # a red-team finding: the grader echoes the agent's answer, nested `depth` objects deep.
    # 230 levels: result.json was written but pydantic's reader stops near 200 ("recursion
    # limit exceeded"): resume dropped the trial, grade refused it. 300: pydantic's writer
    # stops near 255, so the trial folder could not be written: a retried infrastructure
    # error, never scored (a free re-run and an abstention from the agent's 0)
    from clawrig.runner.regrade import load_trial
    from clawrig.spec.trial import RECORDED_JSON_MAX_DEPTH

    task = make_task(ECHO_GRADER)
    nested = '{"a":' * depth + "1" + "}" * depth
    result, folder = await attack(
        task, f"mkdir -p results && printf '%s' '{{\"answer\": {nested}}}' > results/answer.json"
    )
    assert result.error is None and result.score.score == 0.0
    again = load_trial(folder)
    assert again.score.score == 0.0 and again.model_dump() == result.model_dump()
    got = again.score.subscores["got"]
    for _ in range(RECORDED_JSON_MAX_DEPTH - 1):  # the levels kept, then the rest as its text
        got = got["a"]
    left = depth - (RECORDED_JSON_MAX_DEPTH - 1)
    assert got == '{"a":' * left + "1" + "}" * left
    assert json.loads((folder / "score.json").read_text())["score"] == 0.0


FULL_ROOM_GRADER = """
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with open("/root/scratch.bin", "wb") as fh:  # 80 MiB of scratch in a 64 MiB room
        for _ in range(80):
            fh.write(b"x" * 2**20)
    return {"overall_score": 1.0}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_grader_filling_its_room_is_told_how_big_the_room_is(
    scripted_server, make_task, tmp_path
):
    # helper-123: "No space left on device" named no room and no option; the room is the
    # trial's --disk-mb (64 MiB here), shared by /tmp, /root and /run/clawrig
    srv = scripted_server([reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=64)
    result = await _trial(srv, make_task(FULL_ROOM_GRADER), config, tmp_path, pooled=False)
    assert result.error is not None and result.error.kind == ErrorKind.AGENT, result.error
    message = result.error.message
    assert (
        "No space left on device" in message
        and "hold 64 MiB and 2,048 files and folders together" in message
    ), message
    assert "--disk-mb" in message


COPY_GRADER = """
import os, shutil, sys
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    kind = [line.split(" - ")[1].split()[0] for line in open("/proc/self/mountinfo")
            if line.split()[4] == "/tmp"]
    sys.stderr.write("room %s\\n" % kind[0])
    sys.stderr.flush()
    shutil.copytree(workspace_path, "/tmp/ws_copy")  # a common grader's first step
    return {"overall_score": 1.0}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
@pytest.mark.parametrize("sparse", [False, True])
async def test_the_graders_room_is_the_same_whatever_the_agent_left(
    sparse, scripted_server, make_task, tmp_path
):
    # helper-124: a room chosen by the end state's size let the agent pick it (a sparse 70 MiB
    # file, 0 bytes written, switched it to a disk: the honest agent's 0 became a 1.0) and a
    # re-grading measure it otherwise. The room is memory (min(--disk-mb, --memory-mb)),
    # whatever the agent left; a 300 MiB result copied to /tmp under a 256 MiB limit does
    # not fit, and the error names --memory-mb (helper-122)
    leave = (
        "truncate -s 300M big.bin"
        if sparse
        else "head -c $((300 * 1024 * 1024)) /dev/zero > big.bin"
    )
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": leave})]), reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", memory_mb=256, disk_mb=512)
    result = await _trial(srv, make_task(COPY_GRADER), config, tmp_path, pooled=True)
    assert "clean_room" in result.pooled
    assert result.error is not None and result.error.kind == ErrorKind.AGENT, result.error
    assert result.score is not None and result.score.score == 0.0
    assert "room tmpfs" in result.score.details["stderr"]
    assert "--memory-mb" in result.error.message, result.error.message


MISSING_MODULE_AFTER_AN_OOM_GRADER = """
import subprocess, sys
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    # a helper the grader runs is killed for the memory limit; the grader itself goes on and
    # fails on a module the task needs and the system lacks: the task's fault, not the agent's
    subprocess.run([sys.executable, "-c", "b = bytearray(400 << 20)"])
    import yamlx_not_installed  # noqa: F401
    return {"overall_score": 1.0}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_an_out_of_memory_helper_does_not_hide_the_graders_own_failure(
    scripted_server, make_task, tmp_path
):
    # helper-122: any kill for the memory limit while the grader ran was "grader killed: out
    # of memory", the agent's 0, even when the grader exited on its own with a task bug
    srv = scripted_server([reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", memory_mb=256, disk_mb=512)
    result = await _trial(
        srv, make_task(MISSING_MODULE_AFTER_AN_OOM_GRADER), config, tmp_path, pooled=False
    )
    assert result.error is not None and result.error.kind == ErrorKind.GRADING, result.error
    assert "yamlx_not_installed" in result.error.message
    assert "out of memory" not in result.error.message


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_transcript_bigger_than_the_clean_rooms_memory_is_the_agents_zero(
    scripted_server, make_task, tmp_path
):
    # helper-124: the harness writes the agent's transcript into the clean room, whose room is
    # memory: one over the memory limit killed the clean room's supervisor there, an
    # infrastructure error retried three times and left unscored (a way to abstain)
    huge = "x" * (40 * 1024**2)
    srv = scripted_server(
        [reply(tool_calls=[call("no_such_tool", {"blob": huge})]) for _ in range(2)]
        + [reply("done")]
    )
    config = TrialConfig(agent="native", model="scripted/x", memory_mb=64, disk_mb=512)
    result = await _trial(srv, make_task(), config, tmp_path, pooled=False)
    assert result.error is not None, result.score
    assert result.error.kind == ErrorKind.AGENT and not result.error.retryable, result.error
    assert result.error.phase == "gt_inject" and "out of memory" in result.error.message
    assert result.error.out_of_memory  # said as a field (verify reads it), not only in text


WORKSPACE_WRITER_GRADER = """
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with open(workspace_path + "/more.bin", "wb") as fh:  # 40 MiB into the agent's disk
        for _ in range(40):
            fh.write(b"x" * 2**20)
    return {"overall_score": 1.0}
"""


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_full_workspace_is_not_blamed_on_the_graders_room(
    scripted_server, make_task, tmp_path
):
    # helper-124: the agent left its disk nearly full and the grader wrote into the workspace:
    # "No space left on device" said the clean room's /tmp, /root and /run/clawrig held 128
    # MiB, which were empty; the hint is for a full room only
    leave = (
        "python3 -c \"import os; st = os.statvfs('.'); open('fill', 'wb').write(b'z' * "
        '(st.f_bavail * st.f_frsize - 24 * 2**20))"'
    )
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": leave})]), reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=128)
    result = await _trial(srv, make_task(WORKSPACE_WRITER_GRADER), config, tmp_path, pooled=False)
    assert result.error is not None and result.error.kind == ErrorKind.AGENT, result.error
    assert "No space left on device" in result.error.message
    assert "hold" not in result.error.message, result.error.message


@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_a_warmup_that_fills_the_disk_is_the_tasks_setup_error(
    scripted_server, make_task, tmp_path
):
    # helper-125: the task's own warmup wrote 30 MiB on a 32 MiB disk; every agent, even one
    # that did nothing, was then "the trial's disk is full", the agent's 0
    task = make_task()
    task.warmup = ["head -c $((30 * 1024 * 1024)) /dev/zero > /tmp/warm.bin"]
    srv = scripted_server([reply("done")])
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=32)
    result = await _trial(srv, task, config, tmp_path, pooled=False)
    assert result.error is not None and result.error.kind == ErrorKind.SETUP, result.error
    assert "warmup" in result.error.message and "--disk-mb" in result.error.message


async def test_tool_arguments_nested_too_deep_to_record_are_refused_not_an_abstention(
    scripted_server, make_task, tmp_path
):
    """A red-team finding (helper-130): read calls whose arguments nest 930-998 deep parse on
    the host, but the trial's files could not be written from them (a RecursionError while
    encoding JSON): an infrastructure error, retried, never scored. Now the tool refuses
    arguments nested past TOOL_ARGUMENTS_MAX_DEPTH and the transcript keeps their raw text:
    the trial is graded (the agent answered nothing: 0)."""
    from clawrig.spec.trial import TOOL_ARGUMENTS_MAX_DEPTH

    task = make_task()
    calls = [
        call("read", '{"path": "/tmp_workspace/x", "x": ' + "[" * d + "]" * d + "}")
        for d in range(930, 1000, 2)
    ]
    srv = scripted_server([reply(tool_calls=calls), reply("done")])
    config = TrialConfig(agent="native", model="scripted/x")
    result, folder = await run_trial(
        task, config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    assert result.error is None and result.counted_score() == 0.0, (result.error, result.score)
    outputs = tool_outputs(folder)
    assert len(outputs) == len(calls)
    refusals = {  # (the deepest ones already fail to parse: Python's own recursion limit)
        f"The arguments of read are nested more than {TOOL_ARGUMENTS_MAX_DEPTH} levels deep.",
        "The arguments of read are nested too deeply to parse.",
    }
    assert {o.strip() for o in outputs} <= refusals, {o[:150] for o in outputs}
    # the shallower ones parse: refused by the depth limit (the new check), not by Python
    assert any(f"more than {TOOL_ARGUMENTS_MAX_DEPTH} levels" in o for o in outputs)


async def test_tool_arguments_that_are_not_json_text_stay_raw(scripted_server, make_task, tmp_path):
    """NaN, Infinity and 1e999 parse in Python but were written back to chat.jsonl as bare
    tokens no strict JSON reader (OpenClaw's, JavaScript's) reads (helper-132): the tool
    refuses them and the transcript keeps the model's raw text."""
    from clawrig.jsonl import jsonl_lines, loads_strict
    from clawrig.spec.layout import TrialPaths

    task = make_task()
    raws = ['{"command": "echo hi", "x": NaN}', '{"command": "echo hi", "z": 1e999}']
    srv = scripted_server([reply(tool_calls=[call("exec", r) for r in raws]), reply("done")])
    config = TrialConfig(agent="native", model="scripted/x")
    result, folder = await run_trial(
        task, config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    assert result.error is None and result.counted_score() == 0.0, (result.error, result.score)
    assert [o.split(":")[0] for o in tool_outputs(folder)] == [
        "Invalid JSON in the arguments of exec"
    ] * 2
    records = [loads_strict(ln) for ln in jsonl_lines(TrialPaths(folder).chat.read_text())]
    kept = [
        part["arguments"]
        for rec in records
        for part in (rec.get("message") or {}).get("content") or []
        if isinstance(part, dict) and part.get("type") == "toolCall"
    ]
    assert kept == [{"_raw": r} for r in raws]
