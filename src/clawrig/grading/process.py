"""DataClawBench process metrics: EE for correct runs, GPR / TPE / TGPR for incorrect ones.

Definitions: shared/reference/metrics.md (upstream: dataclaw/utils/process_grading.py and the
DataClawBench README, section 7). Notation:

* steps = the agent's assistant messages, numbered from 1; a message with several tool calls is
  one step and the tool results attach to the step that called them. T = number of steps.
* N = gold ``steps_num`` (fallback: number of gold steps); M = number of milestones.
* EE = N / T, only for correct runs (score >= 1.0).
* For incorrect runs, per milestone j: achieved or not, and the first step t_j where it was.
  GPR = achieved / M; TPE = mean over achieved milestones of gamma^max(t_j - N, 0) (0 when none);
  TGPR = the same sum divided by M; gamma = 0.9.

Milestone detection, two ways:

(a) :func:`match_milestones`, deterministic, no judge: a milestone is reached at the first step
    whose assistant text or tool output (tool results attached to that step) contains its value:
    numbers within 1% relative (1e-6 absolute near zero; numbers read from the text with
    thousands separators, percent signs -- "20.00%" matches 20.0 and 0.2 -- and Chinese text
    around them), strings after NFKC/case/whitespace folding, and for a list or nested value
    every leaf (dict values, list elements; dict keys are labels and are not searched) in that
    same step; an ASCII word must match as a whole word ("Yes" is not in "yesterday").
    Lenient by nature: a small integer such as 7 matches any "7" in a step. The "downstream
    implies upstream" rule is off by default here (``infer_upstream``), because a chance hit on
    a late milestone would otherwise credit the whole chain.
(b) :func:`judge_milestones`, the judge protocol: the prompt shows the gold steps, the
    milestones and, per step, the assistant text, the tool calls and tool-output snippets that
    contain a number matching a milestone (the whole output when it is at most
    :data:`SHORT_OUTPUT_CHARS` long, else +-:data:`SNIPPET_WINDOW` character windows; when a
    value occurs more than :data:`MAX_OCCURRENCES` times in a long output, 5 occurrences are
    sampled with a seeded RNG so the prompt is reproducible). The reply is one JSON object
    ``{"milestones": [{"index", "achieved", "step", "evidence"}], "notes"}``, parsed like the
    answer judge's (5 attempts, stricter instruction after a malformed reply); then "a correct
    downstream milestone implies its upstream ones": an unachieved milestone before an achieved
    one is marked achieved at the earliest step of the achieved milestones after it. Every call
    goes to judge_process_chat.jsonl.

An achieved milestone without a step is a grading error. Results are the process_score.json
dict, in upstream's shape (:func:`process_metrics`), or ``{"error", "error_kind"}``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from clawrig.errors import GradingError, InfrastructureError
from clawrig.grading.answers import NumberMatch, find_numbers, fold, parse_number
from clawrig.grading.judge import STRICT_INSTRUCTION, parse_judge_json, run_judge_attempts
from clawrig.llm.base import ChatModel
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript

__all__ = [
    "GAMMA",
    "MAX_OCCURRENCES",
    "REL_TOL",
    "SHORT_OUTPUT_CHARS",
    "SNIPPET_WINDOW",
    "MilestoneResult",
    "Step",
    "apply_downstream_rule",
    "build_process_messages",
    "grade_process",
    "judge_milestones",
    "match_milestones",
    "milestone_leaves",
    "process_metrics",
    "tool_output_snippets",
    "transcript_steps",
    "validate_process_judgment",
    "value_matches",
]

GAMMA = 0.9
"""TPE's per-step decay after the gold step count (DataClawBench README)."""
REL_TOL = 0.01
"""Relative tolerance for milestone numbers (1%)."""
ABS_TOL = 1e-6
"""Absolute tolerance near zero."""
SHORT_OUTPUT_CHARS = 1000
"""A tool output at most this long is shown whole in the process-judge prompt."""
SNIPPET_WINDOW = 300
"""Characters shown on each side of a matching number in a long tool output."""
MAX_OCCURRENCES = 5
"""At most this many occurrences of one value per long tool output are shown (seeded sample)."""
_TOOL_CALL_CHARS = 400


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One agent step: ``index`` (1-based), assistant ``text``, ``tool_calls`` as
    (name, arguments JSON string) and the attached ``tool_outputs`` as (tool name, text)."""

    index: int
    text: str
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    tool_outputs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def content(self) -> str:
        """Assistant text and every tool output, joined by newlines (what the matcher reads)."""
        return "\n".join([self.text, *(out for _, out in self.tool_outputs)])


def transcript_steps(transcript: Transcript) -> list[Step]:
    """The agent's steps. A tool result attaches to the step whose tool call has its
    ``tool_call_id``; a result with an unknown id attaches to the latest step before it; a
    result before any step is dropped."""
    steps: list[Step] = []
    by_call: dict[str, Step] = {}
    for m in transcript.messages:
        if m.role == "assistant":
            step = Step(
                index=len(steps) + 1,
                text=m.text or "",
                tool_calls=[(c.name, c.arguments) for c in m.tool_calls],
            )
            steps.append(step)
            for c in m.tool_calls:
                by_call[c.id] = step
        elif m.role == "toolResult":
            owner = by_call.get(m.tool_call_id or "") or (steps[-1] if steps else None)
            if owner is not None:
                owner.tool_outputs.append((m.tool_name or "", m.text or ""))
    return steps


# --------------------------------------------------------------------------------------------
# Value matching
# --------------------------------------------------------------------------------------------


def milestone_leaves(value: Any) -> list[Any]:
    """The scalar leaves of a milestone value: itself, list elements, dict values (recursive).

    None leaves are dropped (they cannot be observed).
    """
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in milestone_leaves(v)]
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in milestone_leaves(v)]
    return [] if value is None else [value]


def _readings(n: NumberMatch) -> list[float]:
    return [n.value, n.value / 100.0] if n.percent else [n.value]


def _close(x: float, v: float) -> bool:
    return abs(x - v) <= max(REL_TOL * abs(v), ABS_TOL)


def number_matches(found: NumberMatch, target: NumberMatch) -> bool:
    """Whether a number found in text matches a milestone number: within 1% relative (1e-6
    absolute near zero), either side read divided by 100 when it carries a percent sign."""
    return any(_close(x, v) for x in _readings(found) for v in _readings(target))


def value_matches(leaf: Any, text: str, numbers: list[NumberMatch] | None = None) -> str | None:
    """Whether ``text`` contains a milestone leaf; returns a short evidence snippet or None.

    Numbers (int/float or numeric strings such as ``"29.29"``) use :func:`number_matches`
    against every number in the text (``numbers``: precomputed ``find_numbers(text)``);
    other values compare as folded substrings.
    """
    target = parse_number(leaf)
    if target is not None:
        for n in numbers if numbers is not None else find_numbers(text):
            if number_matches(n, target):
                return _snippet(text, n.start, n.end, 60)
        return None
    needle = fold(str(leaf).lower() if isinstance(leaf, bool) else str(leaf))
    if not needle:
        return None
    hay = fold(text)
    # ASCII words match whole words ("yes" is not found in "yesterday"); CJK text has no
    # word boundaries and matches as a substring.
    left = r"(?<![0-9a-z])" if needle[0].isascii() and needle[0].isalnum() else ""
    right = r"(?![0-9a-z])" if needle[-1].isascii() and needle[-1].isalnum() else ""
    m = re.search(left + re.escape(needle) + right, hay)
    if m is None:
        return None
    return _snippet(hay, m.start(), m.end(), 60)


def _snippet(text: str, start: int, end: int, window: int) -> str:
    a, b = max(0, start - window), min(len(text), end + window)
    return ("..." if a else "") + text[a:b] + ("..." if b < len(text) else "")


@dataclass
class MilestoneResult:
    """One milestone's outcome: ``index`` (1-based, gold order), ``name`` (the gold key),
    ``expected`` (gold value), ``achieved``, ``step`` (first step, 1-based), ``evidence``,
    ``source`` ("match", "judge" or "inferred" by the downstream rule)."""

    index: int
    name: str
    expected: Any
    achieved: bool = False
    step: int | None = None
    evidence: str = ""
    source: str = "match"


def match_milestones(
    task: Task, transcript: Transcript, *, infer_upstream: bool = False
) -> list[MilestoneResult]:
    """Deterministic milestone detection (module docstring, (a)), in gold order."""
    steps = transcript_steps(transcript)
    contents = [(s, s.content) for s in steps]
    numbers = [find_numbers(c) for _, c in contents]
    results: list[MilestoneResult] = []
    for j, (name, value) in enumerate(task.milestones.items(), start=1):
        res = MilestoneResult(index=j, name=name, expected=value)
        leaves = milestone_leaves(value)
        for (step, content), nums in zip(contents, numbers, strict=True):
            if not leaves:
                break
            evidence = [value_matches(leaf, content, nums) for leaf in leaves]
            if all(e is not None for e in evidence):
                res.achieved, res.step = True, step.index
                res.evidence = (
                    str(evidence[0])
                    if len(leaves) == 1
                    else f"all {len(leaves)} values found in step {step.index}"
                )
                break
        results.append(res)
    return apply_downstream_rule(results) if infer_upstream else results


def apply_downstream_rule(results: list[MilestoneResult]) -> list[MilestoneResult]:
    """ "A correct downstream milestone implies its upstream ones": every unachieved milestone
    that has an achieved one after it (gold order) becomes achieved, at the earliest step among
    the achieved milestones after it, with ``source="inferred"``. Returns new objects."""
    out = [MilestoneResult(**asdict(r)) for r in results]
    earliest_after: int | None = None
    for r in reversed(out):
        if r.achieved:
            if r.step is not None:
                earliest_after = r.step if earliest_after is None else min(earliest_after, r.step)
        elif earliest_after is not None:
            r.achieved, r.step, r.source = True, earliest_after, "inferred"
            r.evidence = "implied by a correct downstream milestone"
    return out


# --------------------------------------------------------------------------------------------
# Judge protocol
# --------------------------------------------------------------------------------------------


def _numeric_targets(milestones: dict[str, Any]) -> list[NumberMatch]:
    seen: set[tuple[float, bool]] = set()
    out: list[NumberMatch] = []
    for value in milestones.values():
        for leaf in milestone_leaves(value):
            n = parse_number(leaf)
            if n is not None and (n.value, n.percent) not in seen:
                seen.add((n.value, n.percent))
                out.append(n)
    return out


def tool_output_snippets(
    step: Step, targets: list[NumberMatch], *, seed: int = 0
) -> list[tuple[str, str]]:
    """Tool-output evidence for one step: (tool name, text) for each output that contains a
    number matching a milestone number, in order. An output at most SHORT_OUTPUT_CHARS long is
    shown whole; a longer one as merged +-SNIPPET_WINDOW windows around the matches, where a
    value occurring more than MAX_OCCURRENCES times in that output is sampled down to
    MAX_OCCURRENCES with ``random.Random(f"{seed}:{step.index}:{output}:{value!r}")``
    (deterministic for a seed; ``output`` is the output's 0-based position in the step)."""
    out: list[tuple[str, str]] = []
    for o_idx, (name, text) in enumerate(step.tool_outputs):
        nums = find_numbers(text)
        spans: list[tuple[int, int]] = []
        for target in targets:
            occ = [n for n in nums if number_matches(n, target)]
            if len(occ) > MAX_OCCURRENCES:
                rng = random.Random(f"{seed}:{step.index}:{o_idx}:{target.value!r}")
                occ = [occ[i] for i in sorted(rng.sample(range(len(occ)), MAX_OCCURRENCES))]
            spans.extend((n.start, n.end) for n in occ)
        if not spans:
            continue
        if len(text) <= SHORT_OUTPUT_CHARS:
            out.append((name, text))
            continue
        windows = sorted(
            (max(0, a - SNIPPET_WINDOW), min(len(text), b + SNIPPET_WINDOW)) for a, b in spans
        )
        merged: list[list[int]] = []
        for a, b in windows:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        parts = [
            ("..." if a else "") + text[a:b] + ("..." if b < len(text) else "") for a, b in merged
        ]
        out.append((name, "\n".join(parts)))
    return out


PROCESS_SYSTEM_PROMPT = (
    "You are an expert auditor of data-analysis agent trajectories for DataClawBench. You decide, "
    "for each gold milestone, whether the agent achieved it and at which step it first did. "
    "Reply with one JSON object and nothing else."
)


def _process_shape(m: int) -> str:
    return (
        '{"milestones": [{"index": 1, "achieved": true or false, "step": <first step number or '
        f'null>, "evidence": "<short quote>"}}, ... one entry per milestone, index 1..{m}], '
        '"notes": "<short summary>"}'
    )


def build_process_messages(
    task: Task, steps: list[Step], *, seed: int = 0, strict: bool = False
) -> list[dict[str, str]]:
    """The process-judge request: gold steps, milestones, and the agent's steps with evidence
    snippets (module docstring, (b)). Deterministic for a given ``seed``."""
    n = task.steps_num or len(task.steps)
    targets = _numeric_targets(task.milestones)
    gold_steps = "\n".join(f"{i}. {s}" for i, s in enumerate(task.steps, start=1))
    milestones = "\n".join(
        f"{j}. {name}: {json.dumps(value, ensure_ascii=False)}"
        for j, (name, value) in enumerate(task.milestones.items(), start=1)
    )
    blocks: list[str] = []
    for step in steps:
        lines = [f"### Step {step.index}"]
        lines.append(f"Assistant text: {step.text.strip() or '(none)'}")
        for name, args in step.tool_calls:
            shown = args if len(args) <= _TOOL_CALL_CHARS else args[:_TOOL_CALL_CHARS] + "..."
            lines.append(f"Tool call: {name} {shown}")
        snippets = tool_output_snippets(step, targets, seed=seed)
        for name, text in snippets:
            lines.append(f"Tool output ({name}):\n{text}")
        skipped = len(step.tool_outputs) - len(snippets)
        if skipped:
            lines.append(f"({skipped} tool output(s) without a milestone number not shown)")
        blocks.append("\n".join(lines))
    user = (
        "## Task\n\n"
        f"{task.prompt.strip()}\n\n"
        f"## Gold solution steps (N = {n})\n\n{gold_steps or '(none)'}\n\n"
        f"## Milestones (M = {len(task.milestones)}), in order\n\n{milestones}\n\n"
        f"## Agent trajectory (T = {len(steps)} steps)\n\n"
        + ("\n\n".join(blocks) or "(no steps)")
        + "\n\n## Instructions\n\n"
        "For each milestone decide whether the agent achieved it and the FIRST step (1..T) where "
        "it did. Evidence is the milestone's value, within 1% relative (1e-6 absolute near zero), "
        "in the right context in the assistant text or a tool output of that step. A correct "
        "downstream milestone implies its upstream ones (give them a step no later than the "
        "downstream one). Different but valid solution paths count. An achieved milestone must "
        "have a step.\n\n"
        f"Reply with one JSON object of this shape:\n{_process_shape(len(task.milestones))}"
    )
    if strict:
        user += f"\n\n{STRICT_INSTRUCTION}\n{_process_shape(len(task.milestones))}"
    return [
        {"role": "system", "content": PROCESS_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    return None


def validate_process_judgment(
    obj: dict[str, Any] | None, task: Task, t: int
) -> tuple[list[MilestoneResult] | None, str]:
    """Check a parsed process-judge reply and apply the downstream rule.

    Malformed (returns ``(None, reason)``): no ``milestones`` list, an entry without a valid
    ``index`` (1..M; position used when absent) or ``achieved``, a duplicate or missing index,
    a step outside 1..T, or an achieved milestone without a step.
    """
    if obj is None:
        return None, "no JSON object in the reply"
    items = obj.get("milestones")
    if not isinstance(items, list):
        return None, 'the object has no "milestones" list'
    names = list(task.milestones)
    m = len(names)
    found: dict[int, MilestoneResult] = {}
    for pos, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return None, f"milestone entry {pos} is not an object"
        idx = item.get("index", pos)
        if isinstance(idx, str) and idx.strip().isdigit():
            idx = int(idx)
        if not isinstance(idx, int) or isinstance(idx, bool) or not 1 <= idx <= m:
            return None, f"milestone entry {pos} has index {idx!r}, not in 1..{m}"
        if idx in found:
            return None, f"milestone {idx} appears twice"
        achieved = _as_bool(item.get("achieved"))
        if achieved is None:
            return None, f'milestone {idx} has "achieved" {item.get("achieved")!r}'
        step = item.get("step")
        if isinstance(step, str) and step.strip().isdigit():
            step = int(step)
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            return None, f"milestone {idx} has step {step!r}"
        if achieved and step is None:
            return None, f"milestone {idx} is achieved without a step"
        if achieved and not 1 <= step <= t:  # type: ignore[operator]
            return None, f"milestone {idx} has step {step}, not in 1..{t}"
        found[idx] = MilestoneResult(
            index=idx,
            name=names[idx - 1],
            expected=task.milestones[names[idx - 1]],
            achieved=achieved,
            step=step if achieved else None,
            evidence=str(item.get("evidence") or ""),
            source="judge",
        )
    missing = [j for j in range(1, m + 1) if j not in found]
    if missing:
        return None, f"milestones {missing} are missing"
    return apply_downstream_rule([found[j] for j in range(1, m + 1)]), ""


async def judge_milestones(
    task: Task,
    transcript: Transcript,
    model: ChatModel,
    *,
    log_path: Path | None,
    seed: int = 0,
) -> list[MilestoneResult]:
    """Milestone detection by the process judge (module docstring, (b)), in gold order.

    Appends every request and reply to ``log_path`` (judge_process_chat.jsonl). Raises
    :class:`clawrig.errors.GradingError` when the reply stays malformed after 5 attempts and
    :class:`clawrig.errors.InfrastructureError` when the provider fails after its retries.
    No model call when the transcript has no steps (nothing can be achieved).
    """
    steps = transcript_steps(transcript)
    if not steps:
        return [
            MilestoneResult(index=j, name=k, expected=v, source="judge")
            for j, (k, v) in enumerate(task.milestones.items(), start=1)
        ]
    value, attempts, reasons = await run_judge_attempts(
        model,
        lambda strict: build_process_messages(task, steps, seed=seed, strict=strict),
        lambda content: validate_process_judgment(
            parse_judge_json(content, "milestones"), task, len(steps)
        ),
        log_path=log_path,
        kind="process",
    )
    if value is None:
        raise GradingError(
            f"process judge reply unparseable after {attempts} attempts; last problem: "
            f"{reasons[-1] if reasons else '?'}"
        )
    return value


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def _gold_steps(task: Task) -> int | None:
    if task.steps_num is not None:
        return task.steps_num
    return len(task.steps) or None


def _error(message: str, kind: str = "grading") -> dict[str, Any]:
    return {"error": message, "error_kind": kind}


def process_metrics(
    task: Task,
    transcript: Transcript,
    score: float,
    milestones: list[MilestoneResult] | None = None,
    *,
    gamma: float = GAMMA,
) -> dict[str, Any]:
    """process_score.json for one graded run (upstream shape, metrics.md).

    ``score >= 1.0``: ``{"efficiency": {"s_agent": T, "s_gold": N, "efficiency": N/T}}``.
    Otherwise (``milestones`` required): ``{"gpr": {gpr, milestones_total, milestones_achieved,
    break_point, chain_summary, details[]}, "tgpr": {tgpr, tpe, gpr, gamma, s_gold,
    milestones_total, milestones_achieved, details[]}}``; ``break_point`` is the 1-based index of
    the first milestone (gold order) not achieved, or None when all are. Problems (no gold step
    count, no steps, no milestones, an achieved milestone without a step) give
    ``{"error": ..., "error_kind": "grading"}``.
    """
    n = _gold_steps(task)
    if n is None:
        return _error(f"{task.source}: steps_num: the task has no gold step count")
    t = len(transcript_steps(transcript))
    if score >= 1.0:
        if t == 0:
            return _error("the transcript has no assistant step (T = 0)")
        return {"efficiency": {"s_agent": t, "s_gold": n, "efficiency": n / t}}
    m = len(task.milestones)
    if m == 0:
        return _error(f"{task.source}: milestone: the task has no milestones")
    if milestones is None:
        return _error("an incorrect run needs milestone results")
    if len(milestones) != m:
        return _error(f"{len(milestones)} milestone results for {m} milestones")
    for r in milestones:
        if r.achieved and r.step is None:
            return _error(f"milestone {r.index} ({r.name}) is achieved without a step")
    achieved = [r for r in milestones if r.achieved]
    weights = {r.index: gamma ** max(r.step - n, 0) for r in achieved}  # type: ignore[operator]
    a = len(achieved)
    gpr = a / m
    tpe = sum(weights.values()) / a if a else 0.0
    tgpr = sum(weights.values()) / m
    first_miss = next((r for r in milestones if not r.achieved), None)
    marks = "".join("✓" if r.achieved else "✗" for r in milestones)
    if first_miss is None:
        summary = f"{marks} {a}/{m} milestones achieved; the chain is complete"
    else:
        summary = (
            f"{marks} {a}/{m} milestones achieved; the chain breaks at milestone "
            f"{first_miss.index} ({first_miss.name})"
        )
    return {
        "gpr": {
            "gpr": gpr,
            "milestones_total": m,
            "milestones_achieved": a,
            "break_point": first_miss.index if first_miss else None,
            "chain_summary": summary,
            "details": [
                {
                    "index": r.index,
                    "milestone": r.name,
                    "expected": r.expected,
                    "achieved": r.achieved,
                    "step": r.step,
                    "evidence": r.evidence,
                    "source": r.source,
                }
                for r in milestones
            ],
        },
        "tgpr": {
            "tgpr": tgpr,
            "tpe": tpe,
            "gpr": gpr,
            "gamma": gamma,
            "s_gold": n,
            "milestones_total": m,
            "milestones_achieved": a,
            "details": [
                {
                    "index": r.index,
                    "milestone": r.name,
                    "achieved": r.achieved,
                    "step": r.step,
                    "delay": max(r.step - n, 0) if r.achieved else None,  # type: ignore[operator]
                    "weight": weights.get(r.index, 0.0),
                }
                for r in milestones
            ],
        },
    }


async def grade_process(
    task: Task,
    transcript: Transcript,
    score: float | None,
    *,
    method: Literal["match", "judge"] = "match",
    model: ChatModel | None = None,
    log_path: Path | None = None,
    seed: int = 0,
    infer_upstream: bool | None = None,
    gamma: float = GAMMA,
) -> dict[str, Any]:
    """Process metrics for one run, ready to write as process_score.json.

    ``score``: the outcome score (None = the run was not graded: returns ``{"skipped":
    reason}``). ``method`` "match" (deterministic) or "judge" (needs ``model``; ``log_path`` is
    judge_process_chat.jsonl; ``seed`` fixes snippet sampling). ``infer_upstream`` defaults to
    False for "match" and True for "judge". Grading problems come back as ``{"error",
    "error_kind"}`` ("grading" or "infrastructure"), never raised.
    """
    if score is None:
        return {"skipped": "the run has no outcome score (agent or grading error)"}
    if score >= 1.0 or not task.milestones:
        return process_metrics(task, transcript, score, None, gamma=gamma)
    if method == "judge":
        if model is None:
            return _error("process method 'judge' needs a judge model")
        try:
            results = await judge_milestones(task, transcript, model, log_path=log_path, seed=seed)
        except GradingError as exc:
            return _error(str(exc))
        except InfrastructureError as exc:
            return _error(f"process judge provider failed: {exc}", "infrastructure")
        if infer_upstream is False:
            results = [
                r
                if r.source != "inferred"
                else MilestoneResult(r.index, r.name, r.expected, source="judge")
                for r in results
            ]
    else:
        results = match_milestones(task, transcript, infer_upstream=bool(infer_upstream))
    return process_metrics(task, transcript, score, results, gamma=gamma)
