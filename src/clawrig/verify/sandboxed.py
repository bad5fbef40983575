"""Grading in a real sandbox for ``clawrig verify``: a given end state, or an agent's trial.

- :func:`grade_files` writes an end state (relative path -> bytes) into a fresh workspace,
  starts a sandbox on it, puts the transcript at the OpenClaw session path, injects gt/ and
  runs the task's grader exactly as a trial does (:func:`clawrig.grading.programmatic.
  run_grader`, cwd /tmp_workspace, the grader's own timeout).
- :func:`run_agent` runs one whole trial (:func:`clawrig.runner.trial.run_trial`) with the
  oracle or nop agent and returns its result and transcript.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from clawrig.agents.preamble import first_user_message
from clawrig.grading.programmatic import run_grader
from clawrig.runner.trial import TrialServices, grader_env, run_trial
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.workspace import inject_gt
from clawrig.spec.job import TrialConfig
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


def write_tree(dest: Path, files: Mapping[str, bytes]) -> None:
    """Write relative path -> bytes under ``dest`` (paths must stay inside it)."""
    for rel, data in files.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"path escapes the workspace: {rel!r}")
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


async def grade_files(
    task: Task,
    files: Mapping[str, bytes],
    transcript: Transcript | str | None,
    *,
    sandbox: str = "bwrap",
    work_dir: Path | None = None,
) -> Score:
    """Grade the end state ``files`` (relative path -> bytes) in a fresh ``sandbox``.

    ``transcript``: a Transcript, chat.jsonl text, or None (no session file). gt/ is injected
    before grading as in a trial. Returns the grader's :class:`Score` (``error`` set when the
    grader crashed, timed out or printed no score); raises SandboxError when the sandbox
    cannot start.
    """
    work = Path(tempfile.mkdtemp(prefix="clawrig-verify-", dir=work_dir))
    os.chmod(work, 0o755)
    ws = work / "workspace"
    ws.mkdir()
    box = None
    try:
        write_tree(ws, files)
        timeout = task.grader.timeout_seconds
        box = create_sandbox(
            sandbox,
            SandboxConfig(workspace_dir=ws, limits=Limits(command_timeout_s=timeout)),
        )
        await box.start()
        if transcript is not None:
            text = (
                transcript
                if isinstance(transcript, str)
                else dumps_openclaw_jsonl(transcript, seed=0)
            )
            await box.write_file(PATHS.transcript, text)
        await inject_gt(box, task)
        return await run_grader(box, task, timeout_s=timeout, env=grader_env(task))
    finally:
        if box is not None:
            with contextlib.suppress(Exception):
                await box.stop()
        shutil.rmtree(work, ignore_errors=True)


async def run_agent(
    task: Task,
    agent: str,
    out_root: Path,
    *,
    sandbox: str = "bwrap",
    work_dir: Path | None = None,
) -> tuple[TrialResult, Transcript]:
    """Run one trial of ``task`` with ``agent`` (oracle | nop) and return (result,
    transcript). The trial folder goes under ``out_root``."""
    config = TrialConfig(agent=agent, model=agent, sandbox=sandbox)
    result, folder = await run_trial(
        task, config, out_root, services=TrialServices(work_dir=work_dir)
    )
    chat = folder / "chat.jsonl"
    transcript = read_openclaw_jsonl(chat) if chat.is_file() else Transcript()
    return result, transcript
