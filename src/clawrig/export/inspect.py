"""``clawrig export inspect JOB_DIR OUT``: a job as Inspect AI eval logs.

Written with Inspect's own Python API (``inspect_ai.log.EvalLog`` and ``write_eval_log``, the
``.eval`` format), so ``inspect view --log-dir OUT`` and Inspect's log tools
(``read_eval_log``, ``list_eval_logs``) open clawrig runs. One log per model of the job (its
``summary_<model>.json``), named ``<job_id>_<model slug>.eval``; one sample per trial:

- ``id`` = task id, ``epoch`` = run index + 1 (Inspect counts epochs from 1);
- ``input`` = the first user message, ``messages`` = the transcript (chat.jsonl) as Inspect
  chat messages (reasoning as ``ContentReasoning``, tool calls and their results, tool errors
  as ``ToolCallError``), ``output`` = the final assistant text;
- ``scores["clawrig"]`` = the counted score (:func:`clawrig.view.index.counted_score`: an
  agent error counts 0; a trial with another error has no score and an ``error`` instead), the
  grader's sub-scores in its metadata; ``model_usage`` from usage.json (tokens, USD);
- ``results.scores[0].metrics``: the summary's ``mean``, ``wildclaw_average`` (WildClawBench)
  and ``acc`` (DataClawBench overall_score), each only for a job that ran its format's tasks.

Needs the ``inspect`` extra (``pip install 'clawrig[inspect]'``); UserError when it is missing
or JOB_DIR is not a job folder.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clawrig.errors import UserError
from clawrig.export.job import JobTrial, find_trials, read_summary
from clawrig.spec.job import model_slug
from clawrig.spec.layout import JobPaths
from clawrig.spec.summary import HEADLINE_BENCHMARKS, headline_benchmarks
from clawrig.spec.transcript import TranscriptMessage
from clawrig.view.index import counted_score
from clawrig.view.trial import as_dict

SCORER = "clawrig"
"""The name of the one score each sample carries."""


def _messages(trial: JobTrial) -> list[Any]:
    """The trial's transcript as Inspect chat messages (empty when chat.jsonl is unreadable)."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall, ToolCallError

    from clawrig.errors import ClawrigError
    from clawrig.transcript._messages import arguments_to_object
    from clawrig.transcript.openclaw import read_openclaw_jsonl

    try:
        transcript = read_openclaw_jsonl(trial.folder / "chat.jsonl", strict=False)
    except ClawrigError:
        return []
    out: list[Any] = []
    m: TranscriptMessage
    for m in transcript.messages:
        if m.role == "user":
            out.append(ChatMessageUser(content=m.text or ""))
        elif m.role == "assistant":
            content: list[Any] = []
            if m.reasoning:
                content.append(ContentReasoning(reasoning=m.reasoning))
            if m.text:
                content.append(ContentText(text=m.text))
            calls = [
                ToolCall(
                    id=c.id,
                    function=c.name,
                    arguments=arguments_to_object(c.arguments)
                    if isinstance(c.arguments, str)
                    else dict(c.arguments),
                    type="function",
                )
                for c in m.tool_calls
            ]
            out.append(
                ChatMessageAssistant(
                    content=content or "", tool_calls=calls or None, model=m.model or None
                )
            )
        else:
            error = ToolCallError("unknown", m.text or "") if m.is_error else None
            out.append(
                ChatMessageTool(
                    content=m.text or "",
                    tool_call_id=m.tool_call_id,
                    function=m.tool_name,
                    error=error,
                )
            )
    return out


def _sample(trial: JobTrial) -> Any:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    r = trial.result
    messages = _messages(trial)
    first_user = next((msg.text for msg in messages if msg.role == "user"), "")
    final = next(
        (msg.text for msg in reversed(messages) if msg.role == "assistant" and msg.text), ""
    )
    usage = trial.usage()
    score = counted_score(r)
    scores = {}
    if score is not None:
        scores[SCORER] = Score(
            value=score,
            answer=final[:2000] or None,
            explanation=r.error.message if r.error else None,
            metadata={
                "subscores": r.score.subscores if r.score else {},
                "grader": r.score.grader if r.score else "",
                "max_score": r.score.max_score if r.score else 1.0,
            },
        )
    problem = r.error.message if r.error else (r.score.error if r.score else "not graded")
    return EvalSample(
        id=r.task_id,
        epoch=r.run_index + 1,
        input=first_user or r.task_id,
        target="",
        messages=messages,
        output=ModelOutput.from_content(r.model, final),
        scores=scores or None,
        metadata={
            "category": r.category,
            "trial": f"{trial.folder.parent.name}/{trial.folder.name}",
            "trial_id": r.trial_id,
            "agent": r.agent,
            "sandbox": r.sandbox,
            "stop_reason": str(r.stop_reason) if r.stop_reason else None,
            "turns": r.turns,
            "tool_calls": r.tool_calls,
            "error": r.error.model_dump(mode="json") if r.error else None,
            "process": r.process.model_dump(mode="json"),
        },
        model_usage={
            r.model: ModelUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_cache_read=usage.cache_read_tokens or None,
                input_tokens_cache_write=usage.cache_write_tokens or None,
                total_cost=usage.cost_usd,
            )
        },
        started_at=r.started_at or None,
        completed_at=r.finished_at or None,
        total_time=usage.elapsed_time,
        error=None
        if score is not None
        else EvalError(message=str(problem), traceback="", traceback_ansi=""),
    )


def _metric(name: str, value: Any) -> Any:
    from inspect_ai.log import EvalMetric

    return EvalMetric(name=name, value=float(value)) if isinstance(value, int | float) else None


def _rollouts_header(model: str, trials: list[JobTrial]) -> dict[str, Any]:
    """What :func:`build_log` reads of a summary, for the episodes of ``model`` in an RL output
    folder (which has none): the job id, the mean of the scored episodes' counted scores, the
    first episode's start and task source."""
    scores = [t.score for t in trials if t.score is not None]
    first = min(trials, key=lambda t: str(t.raw.get("started_at") or ""))
    return {
        "model": model,
        "job_id": first.result.job_id,
        "overall_score": sum(scores) / len(scores) if scores else None,
        "suite_path": first.raw.get("task_source"),
        "timestamp": first.raw.get("started_at"),
    }


def build_log(summary: dict[str, Any], trials: list[JobTrial]) -> Any:
    """The EvalLog of one model's job: ``summary`` (summary_<model>.json) and its trials."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    model = str(summary.get("model") or trials[0].result.model)
    samples = [_sample(t) for t in trials]
    scored = sum(1 for s in samples if s.scores)
    mean = as_dict(summary.get("mean"))
    wild = as_dict(summary.get("wildclaw"))
    # a benchmark's own number only for a job that ran its tasks, as the console and the
    # viewer show them (a four-folder job's "acc" was written, and "-" in the viewer)
    ran = headline_benchmarks(summary)
    ran = set(HEADLINE_BENCHMARKS) if ran is None else ran  # (a summary from before formats)
    metrics = {
        name: m
        for name, m in (
            ("mean", _metric("mean", mean.get("mean"))),
            (
                "wildclaw_average",
                _metric("wildclaw_average", wild.get("overall")) if "wildclaw" in ran else None,
            ),
            ("acc", _metric("acc", summary.get("overall_score")) if "dataclaw" in ran else None),
        )
        if m is not None
    }
    usage = as_dict(summary.get("usage"))
    suite = str(summary.get("suite_path") or summary.get("suite") or "suite")
    task_ids = sorted({t.result.task_id for t in trials})
    started = min((t.result.started_at for t in trials if t.result.started_at), default="")
    finished = max((t.result.finished_at for t in trials if t.result.finished_at), default="")
    return EvalLog(
        status="success",
        eval=EvalSpec(
            eval_id=str(summary.get("job_id") or ""),
            run_id=str(summary.get("job_id") or ""),
            created=str(summary.get("timestamp") or datetime.now(UTC).isoformat()),
            task=f"clawrig/{Path(suite).name}",
            task_id=str(summary.get("job_id") or ""),
            dataset=EvalDataset(
                name=Path(suite).name, location=suite, samples=len(task_ids), sample_ids=task_ids
            ),  # fmt: skip
            model=model,
            config=EvalConfig(epochs=int(summary.get("runs_per_task") or 1)),
            metadata={"agent": summary.get("agent"), "clawrig": summary.get("benchmark_version")},
        ),
        results=EvalResults(
            total_samples=len(samples),
            completed_samples=len(samples),
            scores=[
                EvalScore(
                    name=SCORER,
                    scorer=SCORER,
                    scored_samples=scored,
                    unscored_samples=len(samples) - scored,
                    metrics=metrics,
                )
            ],
        ),
        stats=EvalStats(
            started_at=started,
            completed_at=finished,
            model_usage={
                model: ModelUsage(
                    input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0),
                    total_tokens=int(usage.get("total_tokens") or 0),
                    total_cost=usage.get("cost_usd"),
                )
            },
        ),
        samples=samples,
    )


def export_inspect(
    job_dir: Path,
    out: Path,
    unreadable: dict[str, str] | None = None,
    checked: Callable[[], None] | None = None,
) -> list[Path]:
    """Write one ``.eval`` log per model of the job into folder ``out``; return their paths.
    Trial folders whose result.json cannot be read are left out, and go into ``unreadable``
    (``<task>/<trial>`` -> why) when given. ``checked``: called once the arguments are
    checked, before the job is read (the command's warnings about the job come after its
    refusals of bad arguments). Raises UserError when inspect-ai is not installed, JOB_DIR is
    not a job folder or has no trial, or ``out`` is a file."""
    try:
        from inspect_ai.log import write_eval_log
    except ImportError:
        raise UserError(
            "clawrig export inspect needs inspect-ai: pip install 'clawrig[inspect]'"
        ) from None
    from clawrig.runner.preflight import writable_problem

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"OUT: {out} is a file; give a folder for the .eval logs")
    if problem := writable_problem(out, "OUT", folder=True):  # (a traceback: helper-198)
        raise UserError(problem)
    if checked is not None:
        checked()
    by_model: dict[str, list[JobTrial]] = defaultdict(list)
    for t in find_trials(job_dir, unreadable):
        by_model[t.result.model].append(t)
    if not by_model:
        raise UserError(f"{job_dir}: the job has no readable trial (no */*/result.json)")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    layout = JobPaths(job_dir)
    for model, trials in sorted(by_model.items()):
        if layout.is_rollouts() and not layout.summary(model).is_file():
            # an RL output folder: no summary, its episodes' own records
            header, job_trials = _rollouts_header(model, trials), trials
        else:
            summary = read_summary(job_dir, model)
            job_id = summary.job_id
            job_trials = [t for t in trials if t.result.job_id == (job_id or t.result.job_id)]
            header = summary.to_json()
        if not job_trials:
            continue
        path = out / f"{header.get('job_id') or 'job'}_{model_slug(model)}.eval"
        write_eval_log(build_log(header, job_trials), str(path))
        paths.append(path)
    return paths
