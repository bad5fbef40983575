"""Grading in a real sandbox for ``clawrig verify``: a given end state, or an agent's trial.

- :func:`grade_files` writes an end state (relative path -> bytes) into a fresh workspace and
  grades it through a :class:`clawrig.runner.trial.Trial` (sandbox up, the transcript at the
  OpenClaw session path, gt/ in, the task's grader exactly as a trial runs it).
- :func:`run_agent` runs one whole trial (:func:`clawrig.runner.trial.run_trial`) with the
  oracle or nop agent and returns its result and transcript.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

from clawrig.agents.preamble import first_user_message
from clawrig.choices import DEFAULT_MEMORY_MB
from clawrig.runner.trial import Trial, TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.layout import TrialPaths
from clawrig.spec.task import FileContent, Task
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import Score, TrialResult
from clawrig.transcript import dumps_openclaw_jsonl, read_openclaw_jsonl


def content_bytes(content: FileContent) -> bytes:
    """The bytes of an inline file (text as UTF-8, or decoded base64)."""
    if content.base64 is not None:
        return base64.b64decode(content.base64)
    return (content.text or "").encode("utf-8")


def done_transcript(task: Task) -> Transcript:
    """The empty rollout's transcript: the first user message, then the answer "done"."""
    first = first_user_message(task.prompt, task.timeout_seconds)
    return Transcript(
        model="nop",
        provider="clawrig",
        started_ms=0,
        messages=[
            TranscriptMessage(role="user", text=first, timestamp_ms=0),
            TranscriptMessage(
                role="assistant", text="done", model="nop", provider="clawrig", stop_reason="stop"
            ),
        ],
    )


async def grade_files(
    task: Task,
    files: Mapping[str, bytes],
    transcript: Transcript | str | None,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> Score:
    """Grade the end state ``files`` (relative path -> bytes) in a fresh ``sandbox``, through
    a :class:`clawrig.runner.trial.Trial` (the trial's time limits, grader environment, gt/
    and services as in a trial; the task's own programmatic grader).

    ``memory_mb``: the sandbox's memory limit in MiB (``--memory-mb``); ``timeout_multiplier``
    scales the task's time limits, the grader's too (``--timeout-multiplier``). ``transcript``: a
    Transcript, chat.jsonl text, or None (no session file). Returns the grader's
    :class:`Score` (``error`` set when the grader crashed, timed out or printed no score);
    raises SandboxError when the sandbox cannot start.
    """
    config = TrialConfig(
        agent="nop",
        model="nop",
        sandbox=sandbox,
        memory_mb=memory_mb,
        grader="programmatic",
        timeout_multiplier=timeout_multiplier,
    )
    text = (
        transcript
        if transcript is None or isinstance(transcript, str)
        else dumps_openclaw_jsonl(transcript, seed=0)
    )
    async with Trial(task, config, services=TrialServices(work_dir=work_dir)) as trial:
        await trial.sandbox_up(files=files, with_agent=False, warm=False)
        await trial.put_transcript(text)
        await trial.gt_in()
        return await trial.grade_programmatic()


async def run_agent(
    task: Task,
    agent: str,
    out_root: Path,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> tuple[TrialResult, Transcript, Path]:
    """Run one trial of ``task`` with ``agent`` (oracle | nop) and return (result,
    transcript, its trial folder). The trial folder goes under ``out_root``; settings as
    :func:`grade_files`."""
    config = TrialConfig(
        agent=agent,
        model=agent,
        sandbox=sandbox,
        memory_mb=memory_mb,
        timeout_multiplier=timeout_multiplier,
    )
    result, folder = await run_trial(
        task, config, out_root, services=TrialServices(work_dir=work_dir)
    )
    chat = TrialPaths(folder).chat
    transcript = read_openclaw_jsonl(chat) if chat.is_file() else Transcript()
    return result, transcript, folder
