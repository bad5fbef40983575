"""What a trial does not pay for when it does not need it (issue 19): no judge proxy (its
in-sandbox forwarder) for a grader that cannot call a judge or when no judge can answer, and
no gt/ work for a task without gt. Real trials in real bwrap sandboxes, a real gateway, a
scripted judge server on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.grading.judge_proxy import grader_may_call_judge
from clawrig.llm.gateway import FORWARDER_PORT, Gateway
from clawrig.runner.trial import Trial, TrialServices, run_trial
from clawrig.sandbox.workspace import inject_gt
from clawrig.spec.job import TrialConfig
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat, Workspace
from clawrig.testing.scripted_server import reply

pytestmark = pytest.mark.sandbox

# Whether something listens on the judge proxy's port inside the sandbox while grading: the
# probe itself reads no environment, so only the second line below makes a grader "able to
# call a judge"
PROBE = f"""
import socket

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    try:
        socket.create_connection(("127.0.0.1", {FORWARDER_PORT}), timeout=2).close()
        listening = 1.0
    except OSError:
        listening = 0.0
    return {{"listening": listening, "overall_score": 1.0}}
"""
READS_JUDGE = PROBE + '\nimport os\nJUDGE = os.environ.get("JUDGE_MODEL")\n'


def task_with(source: str, *, task_id: str = "cost_task", workspace: Workspace | None = None):
    return Task(
        id=task_id,
        format=TaskFormat.WILDCLAW,
        prompt="p",
        source=SourceRef(path=Path(f"{task_id}.md")),
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=source),
        workspace=workspace or Workspace(),
    )


def test_which_graders_may_call_a_judge():
    assert not grader_may_call_judge(task_with(PROBE))
    assert grader_may_call_judge(task_with(READS_JUDGE))
    # a grader that starts another program passes its environment on
    assert grader_may_call_judge(task_with("import subprocess\ndef grade(**k): ..."))
    # "pty" as a word, not inside "empty"
    assert not grader_may_call_judge(task_with("def grade(**k):\n    return {'empty': 1}"))
    # the task's ## Env naming a model setting, or the reader having found a judge call
    assert grader_may_call_judge(task_with(PROBE).model_copy(update={"env": ["JUDGE_MODEL"]}))
    meta = {"grader_uses_judge": True}
    assert grader_may_call_judge(task_with(PROBE).model_copy(update={"metadata": meta}))


async def test_the_judge_proxy_runs_only_when_a_grader_can_call_a_judge(scripted_server, tmp_path):
    judge = scripted_server(responder=lambda req: reply('{"score": 1}'))
    config = TrialConfig(agent="nop", model="nop")
    listening = {}
    with Gateway() as gw:
        for name, source, judge_model in (
            ("probe", PROBE, judge.chat_model("scripted/judge")),
            ("reads_judge", READS_JUDGE, judge.chat_model("scripted/judge")),
            ("no_judge", READS_JUDGE, None),
        ):
            services = TrialServices(judge=judge_model, gateway=gw)
            result, _ = await run_trial(
                task_with(source, task_id=name), config, tmp_path / "out", services=services
            )
            assert result.error is None, result.error
            listening[name] = result.score.subscores["listening"]
    assert listening == {"probe": 0.0, "reads_judge": 1.0, "no_judge": 0.0}


async def test_no_gt_work_for_a_task_without_gt(tmp_path):
    gt_src = tmp_path / "gt"
    gt_src.mkdir()
    (gt_src / "answer.txt").write_text("42")
    for workspace, kept in ((Workspace(), True), (Workspace(gt_dir=gt_src), False)):
        async with Trial(task_with(PROBE, workspace=workspace), TrialConfig(agent="nop")) as trial:
            box = await trial.sandbox_up(with_agent=False)
            # what an agent may leave: its own gt/ folder
            await box.write_file("/tmp_workspace/gt/mine.txt", "agent's")
            await inject_gt(box, trial.task)
            names = sorted(e.name for e in await box.list("/tmp_workspace/gt"))
        # without gt the harness leaves the folder alone (no scrub); with gt, only the task's
        assert names == (["mine.txt"] if kept else ["answer.txt"])
