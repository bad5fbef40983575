"""Episodes for RL trainers: one trial of one task, seen from a trainer.

An episode is a trial (:func:`clawrig.runner.trial.run_trial`) whose agent's model is a
trainer-owned OpenAI-compatible endpoint (vLLM, SGLang...): the endpoint, with the trainer's
key, goes into the job's model gateway on the host; the agent (clawrig's native loop on the
host, or a real OpenClaw in the sandbox through the forwarder) only ever holds the gateway's
per-trial token. The trial folder is written as for ``clawrig run``; the :class:`Episode` is
read back from it (:func:`episode_from_trial`), so an episode can be rebuilt from its folder
at any time.

Reward and masking (the one score rule, ``TrialResult.counted_score``): a graded trial's
reward is the grader's score in [0, 1]; an agent error (the agent broke its sandbox, or the
grader crashed on what the agent left: blame follows control) is a reward of 0.0; an
infrastructure, setup, grading or cancelled error has ``reward=None`` and ``mask=True``: the
trainer must leave it out, never train on it as a 0.

Token ids: each record of the trial's ``model_calls.jsonl`` may carry ``token_capture``
(``prompt_token_ids``, ``completion_token_ids``, ``completion_logprobs``) when the upstream
returned them; :attr:`Episode.turns` lists them per model call, exactly as sampled.

Group statistics follow verl's GRPO outcome advantage (verl ``core_algos.
compute_grpo_outcome_advantage``, norm by std on): mean and sample std (n - 1) over the
unmasked rewards of a group, ``advantage = (reward - mean) / (std + 1e-6)``; a group with one
unmasked episode has mean 0 and std 1 (advantage = reward), as in verl; masked episodes get
``advantage=None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from clawrig.errors import ModelRequestError, UserError, first_invalid
from clawrig.llm.gateway.tokens import TokenServer
from clawrig.spec.job import RL_JOB_ID, TrialConfig
from clawrig.spec.layout import JobPaths, TrialPaths, model_from_json_text
from clawrig.spec.llm import surrogate_free, surrogate_free_json
from clawrig.spec.task import Task
from clawrig.spec.trial import ErrorKind, StopReason, TrialResult, Usage, finite_float
from clawrig.waits import harness_slots

EpisodeStop = Literal[
    "complete", "max_turns", "time_limit", "context_length", "agent_error", "infra_error"
]
"""Why an episode ended: the agent finished (``complete``), ran out of turns, of time or of
context (a reply cut at ``finish_reason: length``, a token cap, or a prompt the server refused
as too long), the agent broke its sandbox or the grader crashed on its end state
(``agent_error``, reward 0), or the harness, the model server or the grader's judge failed
(``infra_error``, masked)."""

GRPO_EPSILON = 1e-6
"""Added to the group std before dividing (verl's ``epsilon``)."""

_STOPS: dict[str, EpisodeStop] = {
    StopReason.FINAL_ANSWER: "complete",
    StopReason.REPLAY_END: "complete",
    StopReason.MAX_TURNS: "max_turns",
    StopReason.COST_BUDGET: "max_turns",
    StopReason.TIME_LIMIT: "time_limit",
    StopReason.TOKEN_BUDGET: "context_length",
    StopReason.MODEL_ERROR: "context_length",  # the provider would not serve its conversation
    StopReason.PROVIDER_ERROR: "infra_error",
    StopReason.CANCELLED: "infra_error",
}
_CONTEXT_WORDS = ("context length", "context_length", "maximum context", "too long", "max_tokens")


def _context_refusal(message: str) -> bool:
    """True when a server's refusal says the prompt is past the model's context."""
    return any(w in message.lower() for w in _CONTEXT_WORDS)


HARNESS_FIELDS = {
    "stream": "the harness sets it (each call's reply is read whole; a streamed one failed "
    "the episode as an infrastructure error)",
    "stream_options": "the harness sets it",
    "n": "one choice per call is what an episode's agent reads (a group is POST /v1/groups)",
    "model": "the request's own field (model) names it",
    "messages": "the agent's conversation is the harness's to send",
    "tools": "the agent's tools are the harness's to send",
    "seed": "give it as the episode's seed (a group's episodes get seed, seed + 1, ...: one "
    "seed in sampling gave every episode of a group the same one)",
}
"""Request fields ``sampling`` may not set, and why (helper-134: ``{"stream": true}`` ran a
sandbox and ended masked with an AttributeError)."""


SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
"""The range of a request's ``seed``: a 64-bit signed integer, as the OpenAI API and vLLM's
sampling parameters take it."""


def seed_problem(seed: object) -> str | None:
    """Why ``seed`` is no request's seed (not an integer, a bool, outside
    :data:`SEED_MIN`..:data:`SEED_MAX`), led by ``seed:``; None when it is one or None."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):  # (numpy's too)
        return f"seed: must be an integer, got {seed!r}"
    seed = int(seed)
    if not SEED_MIN <= seed <= SEED_MAX:
        return f"seed: must be a 64-bit integer ({SEED_MIN}..{SEED_MAX}), got {seed}"
    return None


EPISODE_AGENTS = ("native", "openclaw")
"""The agents an episode may run: those whose every move is the model's (``openclaw@VERSION``
pins OpenClaw's version). The oracle replays a task's golden trajectory and calls no model:
its reward was no policy's (helper-211: 1.0 for a model never asked)."""
MAX_EPISODE_TURNS = 1000
"""An episode's ``max_turns`` at most (``clawrig serve``'s limit too)."""


def episode_problem(agent: object, max_turns: object) -> str | None:
    """Why ``agent`` or ``max_turns`` cannot run an episode, led by the argument's name
    (``agent:``, ``max_turns:``); None when both can. ``max_turns``: None or an integer in
    1..:data:`MAX_EPISODE_TURNS` (0 ended the episode before any call, with a reward of 0
    the model never earned: helper-211)."""
    if not isinstance(agent, str) or agent.partition("@")[0] not in EPISODE_AGENTS:
        return (
            f"agent: an episode runs {' or '.join(EPISODE_AGENTS)} (openclaw@VERSION pins its "
            f"version), got {agent!r}"
        )
    if max_turns is not None and (
        isinstance(max_turns, bool)
        or not isinstance(max_turns, numbers.Integral)
        or not 1 <= int(max_turns) <= MAX_EPISODE_TURNS
    ):
        top = MAX_EPISODE_TURNS
        return f"max_turns: must be an integer in 1..{top} (or None), got {max_turns!r}"
    return None


class Sampling(BaseModel):
    """Sampling parameters sent with every model call of an episode (OpenAI chat fields;
    other fields, e.g. vLLM's ``top_k``, ``min_p``, ``repetition_penalty``, pass through
    unchanged). ``max_tokens`` is per call, in tokens."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stop: list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def body(self, seed: int | None = None) -> dict[str, Any]:
        """The request fields these settings add (None values left out)."""
        out = {k: v for k, v in self.model_dump().items() if v is not None}
        if seed is not None:
            out["seed"] = seed
        return out

    def problem(self) -> str | None:
        """Why a field cannot be sent in a JSON request, as ``sampling.<field>: ...``, or None:
        a NaN or an infinity (Python's JSON reads and writes them, JSON has none), or a string
        holding a lone surrogate (``\\ud800``-``\\udfff``: no UTF-8 text holds one), or a value
        nested deeper than :data:`~clawrig.spec.trial.RECORDED_JSON_MAX_DEPTH` levels (the
        trial's config records it: pydantic writes at most ~255)."""
        from clawrig.spec.trial import RECORDED_JSON_MAX_DEPTH, nested_deeper

        for key in self.model_extra or {}:
            if key in HARNESS_FIELDS:
                return f"sampling.{key}: {HARNESS_FIELDS[key]}"
        for key, value in self.body().items():
            if nested_deeper(value):
                return f"sampling.{key}: nested deeper than {RECORDED_JSON_MAX_DEPTH} levels"
            try:
                json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
            except UnicodeEncodeError:  # a ValueError too: first
                return (
                    f"sampling.{key}: a string holds a lone surrogate (\\ud800-\\udfff): "
                    "no UTF-8 text can"
                )
            except ValueError:
                return f"sampling.{key}: NaN or an infinity: not JSON"
        return None


class Turn(BaseModel):
    """One model call of the episode's agent, in order. Token ids and logprobs are exactly
    what the server returned (``token_capture`` of the call's record), or None when it
    returned none. ``finish_reason`` is the server's (stop, tool_calls, length)."""

    index: int
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    latency_s: float | None = None
    choice: dict[str, Any] | None = None
    """The server's ``choices[0]`` as returned (message, finish_reason; its logprobs when the
    agent asked for them: those the harness asked for are the ``completion_*`` fields)."""
    session: str | None = None
    """None for a call of the episode's agent; for a native sub-agent's (``sessions_spawn``,
    in :attr:`Episode.subagent_turns`) its session key."""


class Episode(BaseModel):
    """One rollout of one task (see the module docs for reward and masking).

    ``messages``: the conversation in OpenAI chat format (the last request the agent sent plus
    the assistant's last reply; tool calls as ``tool_calls``, results as ``role: tool``);
    ``tools``: the function tools the model was offered; ``turns``: per model call of the
    agent's own conversation (the one ``messages`` holds, in its order), tokens and logprobs
    when captured; ``subagent_turns``: the calls of its sub-agents (``sessions_spawn``), each
    with its ``session``; ``reward`` in [0, 1] or None when masked; ``scores``: named
    sub-scores (the grader's numeric sub-scores, ``judge``, and ``ee``, ``gpr``, ``tpe``,
    ``tgpr`` where the task has gold steps and milestones); ``usage`` tokens/USD/requests;
    ``timings`` seconds per trial phase; ``trial_dir`` the trial folder (None only when the
    model server refused a request before it answered any in this process: no folder is
    written; see docs/training.md).
    """

    episode_id: str
    task_id: str
    model: str
    agent: str
    run_index: int = 0
    seed: int | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    subagent_turns: list[Turn] = Field(default_factory=list)
    reward: float | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    stop_reason: EpisodeStop
    mask: bool = False
    error: str | None = None
    advantage: float | None = None
    usage: Usage = Field(default_factory=Usage)
    timings: dict[str, float] = Field(default_factory=dict)
    trial_dir: Path | None = None

    @property
    def has_tokens(self) -> bool:
        """True when every turn has its prompt and completion token ids."""
        return bool(self.turns) and all(
            t.prompt_token_ids is not None and t.completion_token_ids is not None
            for t in self.turns
        )


class GroupStats(BaseModel):
    """Statistics of a group's unmasked rewards (verl GRPO; see the module docs)."""

    n: int
    n_valid: int
    mean: float | None = None
    std: float | None = None
    advantages: list[float | None] = Field(default_factory=list)


class EpisodeGroup(BaseModel):
    """``n`` episodes of one task with their group statistics."""

    task_id: str
    episodes: list[Episode]
    stats: GroupStats


def group_stats(rewards: list[float | None], epsilon: float = GRPO_EPSILON) -> GroupStats:
    """Mean, sample std and GRPO advantages of ``rewards`` (None = masked, left out)."""
    valid = [r for r in rewards if r is not None]
    n = len(valid)
    if n == 0:
        return GroupStats(n=len(rewards), n_valid=0, advantages=[None] * len(rewards))
    if n == 1:
        mean, std = 0.0, 1.0  # verl: a lone sample is not normalised
    else:
        mean = sum(valid) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (n - 1))
    adv = [None if r is None else (r - mean) / (std + epsilon) for r in rewards]
    real_mean = sum(valid) / n
    real_std = std if n > 1 else 0.0
    return GroupStats(n=len(rewards), n_valid=n, mean=real_mean, std=real_std, advantages=adv)


# ------------------------------------------------------------------ episode from a trial


def _score_of(result: TrialResult) -> float | None:
    """The one score rule: :meth:`TrialResult.counted_score`."""
    return result.counted_score()


def _subscores(result: TrialResult) -> dict[str, float]:
    out: dict[str, float] = {}

    def put(name: str, value: Any) -> None:
        if (number := finite_float(value, bools=True)) is not None:
            out[name] = number

    if result.score is not None:
        for k, v in result.score.subscores.items():
            put(k, v)
    if result.judge_score is not None:
        put("judge", result.judge_score.score)
    for key, value in result.process.metrics().items():
        put(key, value)
    return out


def _read_calls(folder: Path) -> list[dict[str, Any]]:
    from clawrig.llm.gateway import RECORD_FILE, read_records

    path = folder / RECORD_FILE
    if not path.is_file():
        return []
    # a reply's lone surrogate (a JSON escape such as "\ud800" from the server, recorded as
    # it came) written as U+FFFD, as chat.jsonl has it: an Episode holding one cannot be
    # encoded (helper-196: `clawrig serve` answered 500 after the episode was graded)
    return [surrogate_free(r) for r in read_records(path) if r.get("role", "agent") == "agent"]


def _conversations(calls: list[dict[str, Any]]) -> tuple[list[dict], list[tuple[str, dict]]]:
    """(the calls of the episode's agent, [(session, call)] of its sub-agents'), each in order:
    a call the native agent's sub-agent made carries its session (``session`` in its record,
    :data:`clawrig.spec.llm.AGENT_SESSION`); every other call is the agent's. (The real
    OpenClaw's calls carry none: its sub-agents' would be among the agent's. Telling them
    apart by their first messages was tried and left out: a conversation compacted, or a
    system prompt that changes from call to call, would drop the agent's own calls.)"""
    own: list[dict] = []
    others: list[tuple[str, dict]] = []
    for rec in calls:
        session = rec.get("session")
        if isinstance(session, str):
            others.append((session, rec))
        else:
            own.append(rec)
    return own, others


def _sent(rec: dict[str, Any]) -> bool:
    """Whether a record kept its request's messages (not past the record file's size limit)."""
    messages = (rec.get("request") or {}).get("messages")
    return isinstance(messages, list) and bool(messages)


def _turns(calls: list[dict[str, Any]], sessions: list[str] | None = None) -> list[Turn]:
    """One Turn per answered call (``sessions``: each call's session, for sub-agents')."""
    turns: list[Turn] = []
    for i, rec in enumerate(calls):
        if rec.get("status") != 200 or not isinstance(rec.get("response"), dict):
            continue
        cap = rec.get("token_capture") or {}
        choices = rec["response"].get("choices") or [{}]
        usage = rec.get("usage")
        turns.append(
            Turn(
                index=len(turns),
                prompt_token_ids=cap.get("prompt_token_ids"),
                completion_token_ids=cap.get("completion_token_ids"),
                completion_logprobs=cap.get("completion_logprobs"),
                finish_reason=choices[0].get("finish_reason"),
                usage=Usage.model_validate(usage) if isinstance(usage, dict) else None,
                latency_s=rec.get("latency_s"),
                choice=choices[0] if choices[0] else None,
                session=sessions[i] if sessions is not None else None,
            )
        )
    return turns


def _messages(calls: list[dict[str, Any]], folder: Path) -> tuple[list[dict], list[dict]]:
    """The agent's conversation (``calls``: its own, :func:`_conversations`): the last
    request's messages, plus its reply when it was answered (a request the server refused,
    for the context's length say, holds the tool results the last reply led to: helper-211
    found them left out); without records, the trial's formatted_dialog.json."""
    sent = [r for r in calls if _sent(r)]
    if sent:
        last = sent[-1]
        request = last.get("request") or {}
        messages = list(request.get("messages") or [])
        answered = last.get("status") == 200 and isinstance(last.get("response"), dict)
        choices = (last["response"].get("choices") or []) if answered else []
        if choices and isinstance(choices[0].get("message"), dict):
            reply = {k: v for k, v in choices[0]["message"].items() if v is not None}
            reply.setdefault("content", "")
            messages.append(reply)
        return messages, list(request.get("tools") or [])
    with contextlib.suppress(OSError, ValueError):
        text = TrialPaths(folder).dialog.read_text(encoding="utf-8")
        dialog = json.loads(surrogate_free_json(text))
        return list(dialog.get("formatted_dialog") or []), list(dialog.get("tool_schema") or [])
    return [], []


def episode_from_trial(folder: Path | str, *, seed: int | None = None) -> Episode:
    """Read the :class:`Episode` of a finished trial folder (result.json, model_calls.jsonl,
    formatted_dialog.json); ``seed``, when not given, is the one the episode ran with (its
    result's ``config.extra["seed"]``). Raises UserError when the folder has no readable
    result.json."""
    folder = Path(folder)
    try:
        result = model_from_json_text(
            TrialResult, TrialPaths(folder).result.read_text(encoding="utf-8")
        )
    except (OSError, ValueError) as exc:
        raise UserError(f"{TrialPaths(folder).result}: not a trial result ({exc})") from None
    if seed is None:
        recorded = result.config.extra.get("seed") if result.config is not None else None
        seed = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
    calls = _read_calls(folder)
    own, others = _conversations(calls)
    turns = _turns(own)
    subagent_turns = _turns([rec for _, rec in others], [session for session, _ in others])
    messages, tools = _messages(own, folder)
    reward = _score_of(result)
    error = result.error
    if error is not None and error.kind == ErrorKind.AGENT:
        stop: EpisodeStop = "agent_error"
    elif (
        error is not None
        and error.phase == "agent"
        and "HTTP 4" in error.message
        and _context_refusal(error.message)
    ):
        stop = "context_length"  # the server refused the prompt as too long: masked
    elif error is not None or reward is None:
        stop = "infra_error"
    else:
        stop = _STOPS.get(result.stop_reason or StopReason.FINAL_ANSWER, "complete")
        if stop == "complete" and turns and turns[-1].finish_reason == "length":
            stop = "context_length"
    mask = stop == "infra_error" or (stop == "context_length" and error is not None)
    message = error.message if error is not None else None
    if message is None and result.stop_reason == StopReason.MODEL_ERROR:
        message = result.stop_detail  # the server's refusal of the conversation, graded
    if message is None and result.score is not None and result.score.error:
        message = result.score.error
    return Episode(
        episode_id=result.trial_id,
        task_id=result.task_id,
        model=result.model,
        agent=result.agent,
        run_index=result.run_index,
        seed=seed,
        messages=messages,
        tools=tools,
        turns=turns,
        subagent_turns=subagent_turns,
        reward=None if mask else reward,
        scores={} if mask else _subscores(result),
        stop_reason=stop,
        mask=mask,
        error=message,
        usage=result.usage,
        timings=result.timings,
        trial_dir=folder.resolve(),
    )


# ------------------------------------------------------------------ running episodes


def resolve_task(task: Task | str | Path, *, root: Path | str | None = None) -> Task:
    """A :class:`Task`, or a path clawrig reads (task file, suite) holding exactly one task,
    or ``PATH#TASK_ID``. Raises UserError (one line) otherwise."""
    if isinstance(task, Task):
        return task
    from clawrig.runner.batch import select_tasks
    from clawrig.tasks.registry import load_tasks

    text = str(task)
    path, _, wanted = text.partition("#")
    tasks = load_tasks(Path(path), root=root)
    if wanted:
        try:
            tasks = select_tasks(tasks, wanted, [])
        except UserError as exc:  # (said as the run command's option, --suite)
            raise UserError(f"task: {path}: {str(exc).removeprefix('--suite: ')}") from None
    if len(tasks) != 1:
        raise UserError(f"task: {path} holds {len(tasks)} tasks; name one as {path}#TASK_ID")
    return tasks[0]


def mark_rollouts(output: Path, job_id: str) -> None:
    """Mark ``output`` as an RL output folder (:attr:`JobPaths.ROLLOUTS`), so ``clawrig grade``,
    the exports and the viewer take its trial folders as a job's (it has no summary: episodes
    come as a trainer asks). Written once; an existing one is kept. Raises OSError."""
    layout = JobPaths(output)
    if not layout.is_rollouts():
        from clawrig.runner.batch import write_json_atomic

        write_json_atomic(layout.rollouts, {"format": "clawrig rollouts", "job_id": job_id})


class Rollouts:
    """The environment side of RL training: a model gateway, an output folder and limits,
    shared by every episode run through it.

    ``output``: where trial folders go (``<output>/<task_id>/<trial>/``; default a new
    temporary folder); ``trial``: the trial settings every episode starts from (sandbox,
    max_turns, timeout_multiplier, grader, memory); ``judge``: the judge model for tasks graded
    by a judge (a :class:`clawrig.llm.base.ChatModel`) or None; ``max_concurrency``: episodes
    running at once (sandbox starts and grading have the job's limits,
    :func:`clawrig.waits.harness_slots`);
    ``retry``: the gateway's retries of the trainer's server (default: 3 attempts, 0.5 s
    backoff: an episode whose server stays down ends masked quickly).

    ``executor``: where episodes run: ``local`` (this process, the default; no Ray import) or
    ``ray`` (the nodes of a Ray cluster at ``ray_address``, None: a one-machine cluster;
    ``slots_per_node`` episodes at once per node, default its CPU count; docs/ray.md). With
    ``ray`` the gateway (the only holder of the trainer's key) stays here, listening on this
    machine's cluster address; each node's gateway forwards to it and records the episode's
    token ids; each task's folder is shipped once per node; trial folders come back whole into
    ``output``. Raises UserError for an unknown executor, Ray options without ``ray`` or an
    ``output`` that cannot be written (a file, a read-only or pseudo file system).

    Use ``async with Rollouts() as env`` or :meth:`close`. Thread-safe to share between
    tasks of one event loop.
    """

    def __init__(
        self,
        output: Path | str | None = None,
        *,
        trial: TrialConfig | None = None,
        judge: Any = None,
        max_concurrency: int = 64,
        retry: Any = None,
        job_id: str = RL_JOB_ID,
        executor: str = "local",
        ray_address: str | None = None,
        slots_per_node: int | None = None,
    ) -> None:
        from clawrig.llm.client import RetryPolicy
        from clawrig.llm.gateway import Gateway
        from clawrig.runner.executors import EXECUTORS

        if executor not in EXECUTORS:
            raise UserError(
                f"executor: unknown executor {executor!r} (choose from {', '.join(EXECUTORS)})"
            )
        if executor != "ray" and (ray_address is not None or slots_per_node is not None):
            raise UserError("ray_address / slots_per_node: only with executor='ray'")
        if slots_per_node is not None and slots_per_node < 1:
            raise UserError(f"slots_per_node: at least 1 (got {slots_per_node})")
        if output is not None:
            from clawrig.runner.preflight import writable_problem

            if problem := writable_problem(Path(output), "output", folder=True):
                raise UserError(problem)  # at start-up, not at the first episode's mkdir
        self._own_output = output is None
        self.output = (
            Path(output) if output is not None else Path(tempfile.mkdtemp(prefix="clawrig-rl-"))
        )
        self.trial = trial or TrialConfig()
        self.judge = judge
        self.job_id = job_id
        self.retry = retry or RetryPolicy(attempts=3, initial_s=0.5, max_s=4.0)
        self.executor = executor
        self.ray_address = ray_address
        self.slots_per_node = slots_per_node
        host = "127.0.0.1"
        if executor == "ray":  # nodes reach the gateway at this machine's cluster address
            from clawrig.runner.executors.ray import address_problem, driver_host

            if problem := address_problem(ray_address):
                raise UserError(problem.replace("--ray-address", "ray_address", 1))
            host = driver_host()
        self.gateway = Gateway(retry=self.retry, host=host)
        self._ray: Any = None
        self._ray_lock: asyncio.Lock | None = None
        self.max_concurrency = max(1, max_concurrency)
        self._slots: asyncio.Semaphore | None = None
        self._starts: asyncio.Semaphore | None = None
        self._grading: asyncio.Semaphore | None = None
        self._started = False
        self._locks: list[int] = []
        self.set_aside = 0
        """Half-written trial folders of killed writers that :meth:`start` set aside (into
        ``_retried/`` with their spend) or removed."""

    def start(self) -> Rollouts:
        """Start the gateway (idempotent; the first episode does it too) and hold the output
        folder shared with the other processes writing there: the first sets aside the trial
        folders a killed writer left half-written
        (:func:`clawrig.runner.batch.share_output`). Raises UserError when a ``clawrig run``
        job writes to the output."""
        if not self._started:
            from clawrig.runner.batch import share_output
            from clawrig.spec.job import JobConfig

            self.output.mkdir(parents=True, exist_ok=True)
            job = JobConfig(suite_path=self.output, output=self.output, trial=self.trial)
            self._locks, self.set_aside = share_output(self.output, job, self.job_id)
            mark_rollouts(self.output, self.job_id)
            self.gateway.start()
            self._started = True
        return self

    def close(self) -> None:
        """Stop the gateway (and the Ray executor's node workers); let go of the output
        folder. Trial folders stay."""
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None
        if self._started:
            self.gateway.stop()
            self._started = False
        while self._locks:
            os.close(self._locks.pop())

    async def __aenter__(self) -> Rollouts:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _limits(self) -> tuple[asyncio.Semaphore, asyncio.Semaphore, asyncio.Semaphore]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
            self._starts, self._grading = harness_slots()
        return self._slots, self._starts, self._grading  # type: ignore[return-value]

    async def _ray_executor(self) -> Any:
        """The Ray executor, started by the first episode that needs it."""
        from clawrig.runner.executors.ray import RayExecutor
        from clawrig.runner.trial import TrialServices
        from clawrig.spec.job import JobConfig

        if self._ray_lock is None:
            self._ray_lock = asyncio.Lock()
        async with self._ray_lock:
            if self._ray is None:
                job = JobConfig(
                    suite_path=self.output,  # no suite: each episode's task is shipped
                    output=self.output,
                    trial=self.trial,
                    executor="ray",
                    ray_address=self.ray_address,
                    slots_per_node=self.slots_per_node,
                )
                services = TrialServices(judge=self.judge, gateway=self.gateway)
                executor = RayExecutor(job, [], services)
                try:
                    await executor.start()
                except BaseException:
                    executor.shutdown()
                    raise
                self._ray = executor
        return self._ray

    def endpoint(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        sampling: Sampling | dict[str, Any] | None = None,
        seed: int | None = None,
        server: TokenServer | None = None,
    ) -> Any:
        """The trainer's server as a :class:`clawrig.llm.providers.ModelEndpoint` named
        ``rl/<model>`` (the key stays in the host's gateway); ``server`` vllm | sglang turns on
        the gateway's token capture (:mod:`clawrig.llm.gateway.tokens`). Raises UserError led
        by the argument for a URL :func:`~clawrig.llm.providers.require_http_url` refuses, an
        empty model, a key holding a NUL or control character or a sampling field no JSON request
        can carry (:meth:`Sampling.problem`)."""
        from clawrig.llm.providers import ModelEndpoint, require_http_url
        from clawrig.tasks.safety import unsendable_in_header

        require_http_url(base_url, "base_url")
        if not model.strip():
            raise UserError("model: empty model name")
        if problem := seed_problem(seed):
            raise UserError(problem)
        seed = None if seed is None else int(seed)  # (a numpy integer is no JSON number)
        if api_key and (bad := unsendable_in_header(api_key)):
            raise UserError(f"api_key: contains {bad}")
        if server is not None and server not in get_args(TokenServer):
            choices = " or ".join(get_args(TokenServer))
            raise UserError(f"server: must be {choices} (or None), got {server!r}")
        try:
            sampling = Sampling.model_validate(sampling or {})
        except ValidationError as exc:
            where, what = first_invalid(exc)
            raise UserError(f"sampling.{where}: {what}") from None
        if problem := sampling.problem():
            raise UserError(problem)
        return ModelEndpoint(
            name=f"rl/{model}",
            provider="rl",
            model_id=model,
            base_url=base_url.rstrip("/"),
            api_key=SecretStr(api_key) if api_key else None,
            max_tokens=sampling.max_tokens,
            extra_body=sampling.body(seed),
            server=server,
        )

    async def run_episode(
        self,
        task: Task | str | Path,
        *,
        base_url: str,
        model: str,
        sampling: Sampling | dict[str, Any] | None = None,
        agent: str = "native",
        seed: int | None = None,
        api_key: str | None = None,
        server: TokenServer | None = None,
        run_index: int = 0,
        max_turns: int | None = None,
        no_subagents: str | None = None,
    ) -> Episode:
        """Run one episode of ``task`` with the agent's model at ``base_url`` (an
        OpenAI-compatible ``.../v1``) named ``model``; see :class:`Episode`.

        ``agent``: native (clawrig's loop) or openclaw (the real OpenClaw in the sandbox);
        ``seed``: sent as the request's ``seed`` (vLLM/SGLang per-request sampling seed);
        ``api_key``: the trainer's key for ``base_url`` (held by the gateway on the host);
        ``server``: ``vllm`` or ``sglang`` when ``base_url`` is one: the gateway then asks for
        and records the sampled token ids and logprobs (:attr:`Episode.turns`);
        ``no_subagents``: why the agent may not start sub-agents (its ``sessions_spawn``
        answers with an error saying so; the step bridge's episodes: one conversation).
        Raises UserError for a bad task, agent, URL, key or sampling value, and
        :class:`clawrig.errors.ModelRequestError` when the server refuses the model or key
        (401/403/404) before it answered any request of this process; every other failure is
        in the episode (masked when not the policy's).
        """
        from clawrig.agents import create_agent
        from clawrig.llm.client import OpenAIChatModel, RetryPolicy
        from clawrig.runner.trial import TrialServices, run_trial

        if problem := episode_problem(agent, max_turns):
            raise UserError(problem)
        the_task = resolve_task(task)
        the_agent = create_agent(agent)
        endpoint = self.endpoint(
            base_url=base_url,
            model=model,
            api_key=api_key,
            sampling=sampling,
            seed=seed,
            server=server,
        )
        self.start()
        slots, starts, grading = self._limits()
        chat = OpenAIChatModel(endpoint, retry=RetryPolicy(attempts=1))
        services = TrialServices(
            model=chat if the_agent.needs_model else None,
            judge=self.judge,
            gateway=self.gateway,
            sandbox_starts=starts,
            grading_slots=grading,
            no_subagents=no_subagents,
        )
        update: dict[str, Any] = {"model": endpoint.name, "agent": agent}
        if max_turns is not None:
            update["max_turns"] = max_turns
        update["extra"] = {**self.trial.extra, "seed": seed, "sampling": endpoint.extra_body}
        config = self.trial.model_copy(update=update)
        async with slots:
            try:
                if self.executor == "ray":
                    executor = await self._ray_executor()
                    _, folder = await executor.run(
                        the_task,
                        run_index,
                        job_id=self.job_id,
                        attempt=1,
                        earlier=Usage(),
                        trial=config,
                        services=services,
                    )
                else:
                    _, folder = await run_trial(
                        the_task,
                        config,
                        self.output,
                        run_index=run_index,
                        services=services,
                        job_id=self.job_id,
                    )
            except ModelRequestError as exc:
                if (exc.status or 0) >= 500:  # the model server failed, it did not refuse
                    stop: EpisodeStop = "infra_error"
                elif _context_refusal(str(exc)):
                    stop = "context_length"
                else:
                    raise
                return Episode(
                    episode_id="",
                    task_id=the_task.id,
                    model=endpoint.name,
                    agent=agent,
                    run_index=run_index,
                    seed=seed,
                    stop_reason=stop,
                    mask=True,
                    error=str(exc),
                )
            finally:
                with contextlib.suppress(Exception):
                    await chat.aclose()
        return episode_from_trial(folder, seed=seed)

    async def run_group(
        self,
        task: Task | str | Path,
        n: int,
        *,
        base_url: str,
        model: str,
        sampling: Sampling | dict[str, Any] | None = None,
        agent: str = "native",
        seed: int | None = None,
        api_key: str | None = None,
        server: TokenServer | None = None,
        max_turns: int | None = None,
    ) -> EpisodeGroup:
        """``n`` episodes of one task, concurrently (run_index 0..n-1; episode i gets seed
        ``seed + i`` when a seed is given), with :func:`group_stats`; each episode's
        ``advantage`` is set. Raises UserError when n < 1, and what an episode raised (a
        refusal of the key or model) once the group's other episodes are stopped: none of them
        runs on unseen (helper-134: they ran on, and the server counted none of them)."""
        if n < 1:
            raise UserError(f"n: a group needs at least one episode (got {n})")
        if problem := seed_problem(seed):
            raise UserError(problem)
        seed = None if seed is None else int(seed)  # (numpy's would wrap at 64 bits)
        if problem := seed_problem(None if seed is None else seed + n - 1):
            raise UserError(f"{problem} (seed + n - 1)")
        the_task = resolve_task(task)
        runs = [
            asyncio.ensure_future(
                self.run_episode(
                    the_task,
                    base_url=base_url,
                    model=model,
                    sampling=sampling,
                    agent=agent,
                    seed=None if seed is None else seed + i,
                    api_key=api_key,
                    server=server,
                    run_index=i,
                    max_turns=max_turns,
                )
            )
            for i in range(n)
        ]
        try:
            episodes = await asyncio.gather(*runs)
        except BaseException:
            for run in runs:
                run.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            raise
        stats = group_stats([e.reward for e in episodes])
        for ep, adv in zip(episodes, stats.advantages, strict=True):
            ep.advantage = adv
        return EpisodeGroup(task_id=the_task.id, episodes=list(episodes), stats=stats)


_DEFAULT: Rollouts | None = None


def default_rollouts() -> Rollouts:
    """The process-wide :class:`Rollouts` used by :func:`run_episode` / :func:`run_group`
    (output: ``$CLAWRIG_RL_OUTPUT`` or a temporary folder)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Rollouts(os.environ.get("CLAWRIG_RL_OUTPUT") or None)
    return _DEFAULT


async def run_episode(
    task: Task | str | Path,
    *,
    base_url: str,
    model: str,
    sampling: Sampling | dict[str, Any] | None = None,
    agent: str = "native",
    seed: int | None = None,
    **kwargs: Any,
) -> Episode:
    """One episode on the process-wide :class:`Rollouts` (see :meth:`Rollouts.run_episode`)."""
    return await default_rollouts().run_episode(
        task, base_url=base_url, model=model, sampling=sampling, agent=agent, seed=seed, **kwargs
    )


async def run_group(task: Task | str | Path, n: int, **kwargs: Any) -> EpisodeGroup:
    """A group on the process-wide :class:`Rollouts` (see :meth:`Rollouts.run_group`)."""
    return await default_rollouts().run_group(task, n, **kwargs)
