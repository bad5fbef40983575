"""Preflight: what can be checked before any sandbox starts, as a list of checks.

A check is a function ``check(tasks, config) -> list[str]`` taking the selected tasks and the
job's :class:`~clawrig.spec.job.JobConfig` (models already resolved by the Job) and returning
one-line problems (empty when all is well), each naming the flag, file or field at fault.
:data:`CHECKS` is the list a :class:`clawrig.runner.job.Job` runs (any problem refuses the
job); :data:`NOTES` holds checks whose lines are only printed; add a check by appending a
function to either (or pass ``checks=`` to :func:`run_preflight`). The checks that nothing
falls back silently live in :mod:`clawrig.runner.fidelity_checks`. A check must not change
anything on disk and must be quick: local files, a free probe of a loopback model server, a
``docker version``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawrig.errors import UserError
from clawrig.spec.job import JobConfig
from clawrig.spec.task import Task

Check = Callable[[list[Task], JobConfig], list[str]]


class PreflightError(UserError):
    """One or more preflight problems; ``problems`` holds one line each (exit 2 in the CLI)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def writable_problem(path: Path, label: str, *, folder: bool) -> str | None:
    """Why ``path`` cannot be written (as a folder when ``folder``, else as a file), or None.

    Walks up to the nearest existing ancestor and probes it by creating (and removing) a temp
    folder there, so read-only file systems, permissions and pseudo file systems (/proc, /sys)
    all show up; nothing is left on disk.
    """
    if path.is_symlink() and not path.exists():  # (mkdir's FileExistsError: helper-201)
        return f"{label}: {path} is a link to nothing ({os.readlink(path)})"
    if path.exists():
        if folder and not path.is_dir():
            return f"{label}: {path} is a file, not a folder"
        if not folder and path.is_dir():
            return f"{label}: {path} is a folder, not a file"
        probe_in = path if folder else path.parent
    else:
        probe_in = path.parent
        while not probe_in.exists() and probe_in != probe_in.parent:
            if probe_in.is_symlink():  # (mkdir's FileExistsError: helper-202)
                return (
                    f"{label}: cannot create {path}: {probe_in} is a link to nothing "
                    f"({os.readlink(probe_in)})"
                )
            probe_in = probe_in.parent
        if not probe_in.is_dir():
            return f"{label}: cannot create {path}: {probe_in} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".clawrig-probe-", dir=probe_in))
    except OSError as exc:
        # the error is about creating in ``probe_in`` (/proc answers ENOENT for any new name)
        return (
            f"{label}: cannot write {path}: no file or folder can be created in {probe_in} "
            f"({exc.strerror or exc})"
        )
    return None


def check_output(tasks: list[Task], config: JobConfig) -> list[str]:
    """The output folder can be written, no other job holds it, and what it already holds for
    this model fits the request: an unfinished job needs ``--resume``; a finished one is not
    run again into the same folder."""
    from clawrig.runner.batch import output_state_problem

    problem = writable_problem(config.output, "--output", folder=True)
    if problem:
        return [problem]
    problem = output_state_problem(
        config.output,
        config.trial.model,
        resume=config.resume,
        suite=config.suite,
        runs=config.runs,
        replay=config.replay_source(),
        agent=config.trial.agent,
        task_ids=[t.id for t in tasks],
    )
    return [problem] if problem else []


def note_resume_new(tasks: list[Task], config: JobConfig) -> list[str]:
    """With ``--resume``, a note when the output folder holds no job of this model yet (the
    folder is new, or a mistyped ``-o``): the job starts from the first trial, said before it
    does (a script that always passes ``--resume`` still starts its first run)."""
    from clawrig.runner.batch import progress_path, summary_path

    model = config.trial.model
    out = config.output
    if not config.resume or progress_path(out, model).exists() or summary_path(out, model).exists():
        return []
    return [f"--resume: {out} holds no job of {model} yet: starting a new job there"]


def _calls_no_model(config: JobConfig) -> bool:
    """True when the job's agent calls no model (its class's ``needs_model`` is False:
    ``oracle``, ``nop``, a registered agent that says so); an agent that cannot be loaded
    counts as one that does (its own check says what is wrong)."""
    from clawrig.agents import AGENTS

    try:
        agent = AGENTS.get(config.trial.agent.partition("@")[0])
    except UserError:
        return False
    return getattr(agent, "needs_model", True) is False


def note_model_unused(tasks: list[Task], config: JobConfig) -> list[str]:
    """A note when ``-m`` is given to an agent that calls no model (``oracle``, ``nop``): the
    name only names the job's files, and it was taken without a word (a new user's finding:
    ``--agent oracle -m scripted/golden`` wrote ``summary_scripted_golden.json``)."""
    agent, model = config.trial.agent, config.trial.model
    if not _calls_no_model(config) or model in (agent, "", "none"):
        return []
    return [
        f"-m {model}: --agent {agent} calls no model; {model} only names this job's files "
        "(its summary and trial folders)"
    ]


def note_replay_unused(tasks: list[Task], config: JobConfig) -> list[str]:
    """With ``--replay``, a note when the job's agent calls no model (``oracle``, ``nop``):
    only a judge's recorded calls can be answered from the recording (a new user's finding:
    the summary said every reply was replayed, of none)."""
    if config.replay is None or not _calls_no_model(config):
        return []
    return [
        f"--replay: --agent {config.trial.agent} calls no model; of {config.replay} only a "
        "judge's recorded calls are used"
    ]


def note_replay_runs(tasks: list[Task], config: JobConfig) -> list[str]:
    """With ``--replay``, a note when the replayed job recorded more runs of a task than this
    job runs (``--runs``, default 1): the later runs' recorded calls go unused, which was
    said nowhere (a new user's finding: a recording of 8 runs replayed as 1)."""
    if config.replay is None or _calls_no_model(config):
        return []
    from clawrig.llm.gateway.replay import recorded_runs

    most = recorded_runs(config.replay, (t.id for t in tasks))
    if most <= config.runs:
        return []
    return [
        f"--replay: {config.replay} recorded up to {most} runs of a task; this job runs "
        f"{config.runs} (--runs {most} replays them all)"
    ]


def check_config(config: JobConfig) -> list[str]:
    """Option values pydantic's types do not pin down (``--sandbox``, ``--network``,
    ``--setup-network``; the Job checks the ``--web`` options as it builds the web): checked
    first, before tasks are read or models resolved."""
    from clawrig.choices import DISK_RESERVE_BYTES, MIN_DISK_MB
    from clawrig.sandbox.kinds import check_sandbox_kind

    problems = []
    if 0 < config.trial.disk_mb < MIN_DISK_MB:
        problems.append(
            f"--disk-mb: {config.trial.disk_mb} MiB leaves the agent no room (the harness keeps "
            f"{DISK_RESERVE_BYTES // 1024**2} MiB free for its own writes): give at least "
            f"{MIN_DISK_MB}, or 0 for no disk of the trial's own"
        )
    try:
        check_sandbox_kind(config.trial.sandbox)
    except UserError as exc:
        problems.append(str(exc))
    from clawrig.egress import NetworkPolicy

    for option, value in (
        ("--network", config.trial.network),
        ("--setup-network", config.trial.setup_network),
    ):
        try:
            NetworkPolicy.parse(value, option=option)
        except UserError as exc:
            problems.append(str(exc))
    if config.executor == "ray":
        from clawrig.runner.executors.ray import config_problems

        problems += config_problems(config)
        if config.workers > 1:
            problems.append(
                "--workers: only with --executor local (a Ray cluster's nodes take "
                "--slots-per-node trials each)"
            )
    else:  # a cluster option without the cluster would silently run here, on this machine
        for flag, given in (
            ("--ray-address", config.ray_address),
            ("--slots-per-node", config.slots_per_node),
        ):
            if given is not None:
                problems.append(f"{flag}: only with --executor ray (this job runs locally)")
    return problems


def check_sandbox(tasks: list[Task], config: JobConfig) -> list[str]:
    """The local sandbox runs one trial at a time; bubblewrap is installed when ``--sandbox
    bwrap``; a Docker engine answers ``docker version`` when ``--sandbox docker``, and no task
    uses the built-in mock services there (:func:`clawrig.services.lifecycle.start_services`
    refuses them on Docker)."""
    kind = config.trial.sandbox
    if kind == "local" and config.parallel > 1:
        from clawrig.sandbox.local import ONE_AT_A_TIME

        return [ONE_AT_A_TIME]
    if kind == "bwrap":
        from clawrig.sandbox.bwrap import NO_BWRAP, bwrap_path

        if bwrap_path() is None:
            return [f"--sandbox bwrap: {NO_BWRAP}"]
    if kind == "docker":
        docker = shutil.which("docker")
        try:
            probe = (
                subprocess.run([docker, "version"], capture_output=True, timeout=20)
                if docker
                else None
            )
        except subprocess.TimeoutExpired:
            probe = None
        if probe is None or probe.returncode != 0:
            return ["--sandbox docker: no Docker engine answers on this machine"]
        from clawrig.services.lifecycle import docker_refusal

        if refusal := docker_refusal(tasks):
            return [refusal]
    return []


def check_model_servers(tasks: list[Task], config: JobConfig) -> list[str]:
    """A model or judge on a loopback server (vLLM, llama.cpp, the scripted server) answers
    ``GET /models``: a free probe, nothing is spent. Remote providers are checked by their
    first request; a replayed job needs no server."""
    if config.replay is not None:
        return []
    from clawrig.runner.batch import resumes_finished_job

    if resumes_finished_job(config, config.trial.model):
        return []  # nothing runs: its models are not asked
    import httpx

    from clawrig.llm.gateway.server import upstream_tls
    from clawrig.llm.providers import load_settings, resolve_model

    wanted = []
    if config.trial.model not in ("", "none"):
        wanted.append(("--model", config.trial.model, "agent"))
    if config.trial.judge:
        wanted.append(("--judge", config.trial.judge, "judge"))
    if not wanted:
        return []
    settings = load_settings(env_file=config.env_file)
    problems = []
    for flag, name, role in wanted:
        try:
            base = resolve_model(name, settings, role=role).base_url  # type: ignore[arg-type]
        except UserError:
            continue  # not a model this job calls (e.g. oracle's label), or checked earlier
        if not str(base).startswith(("http://127.", "http://localhost", "http://[::1]")):
            continue
        try:
            # the TLS context the job's upstream clients share (made once): httpx would read
            # the CA bundle for this probe alone (~50 ms of CPU), though it never uses TLS
            httpx.get(f"{str(base).rstrip('/')}/models", timeout=5, verify=upstream_tls())
        except httpx.TransportError as exc:
            problems.append(
                f"{flag}: cannot reach {name} at {base} ({type(exc).__name__}): is the model "
                "server running?"
            )
    return problems


def check_oracle(tasks: list[Task], config: JobConfig) -> list[str]:
    """``--agent oracle`` replays a golden trajectory (or states the gold answer): a task with
    neither cannot run, so say so before any sandbox starts."""
    if config.trial.agent.partition("@")[0] != "oracle":
        return []
    lacking = [t for t in tasks if not t.golden_dialog and t.answer is None]
    if not lacking:
        return []
    names = ", ".join(t.id for t in lacking[:3]) + (", ..." if len(lacking) > 3 else "")
    return [
        f"--agent oracle: {len(lacking)} task(s) have no golden trajectory or gold answer to "
        f"replay ({names}; first: {lacking[0].source})"
    ]


def check_replay(tasks: list[Task], config: JobConfig) -> list[str]:
    """``--replay``: the agent's model is the one the replayed job recorded (a request's key
    holds the model's name: another ``-m`` matched no recorded reply), and every selected
    task's agent was recorded there (a task it did not run has no recorded reply). Either
    failed at the trial's first request, as "the run diverged", naming a trial, after its
    sandbox started (a new user's finding). Agents that call no model (``oracle``, ``nop``)
    need neither."""
    if config.replay is None or _calls_no_model(config):
        return []
    from clawrig.llm.gateway import recorded_agent_models
    from clawrig.llm.gateway.replay import recorded_task_ids

    agents = sorted(recorded_agent_models(config.replay))
    if agents and config.trial.model not in (*agents, "none"):
        # (a folder of two models' jobs named one of them, "drop -m": helper-203)
        which = "drop -m to replay them" if len(agents) == 1 else "give -m one of them"
        return [
            f"--replay: {config.replay} recorded the agent's calls to {', '.join(agents)}, "
            f"not -m {config.trial.model} (a recorded reply answers its own model only): "
            f"{which}"
        ]
    recorded = recorded_task_ids(config.replay)
    if not recorded:  # (records without task ids: any request may match; none: said later)
        return []
    lacking = [t.id for t in tasks if t.id not in recorded]
    if not lacking:
        return []
    names = ", ".join(lacking[:3]) + (", ..." if len(lacking) > 3 else "")
    have = ",".join(sorted(recorded)[:10]) + (",..." if len(recorded) > 10 else "")
    if len(lacking) == len(tasks):
        return [
            f"--replay: {config.replay} recorded none of the {len(tasks)} selected task(s) "
            f"({names}): it is a run of other tasks ({have}); replay it on its own suite"
        ]
    return [
        f"--replay: {len(lacking)} selected task(s) were not run in {config.replay} ({names}): "
        f"it recorded {len(recorded)}; select them with --suite {have}"
    ]


REPLAY_SETTINGS = {
    "agent": "--agent",
    "timeout_multiplier": "--timeout-multiplier",
    "preamble": "--preamble",
}
"""The trial settings that change what the agent sends its model (the agent; the time limit
it is told; the text before the task's prompt) by their flags: a replay with another value
asks for requests the job never recorded."""


def check_replay_settings(tasks: list[Task], config: JobConfig) -> list[str]:
    """``--replay`` with a setting of :data:`REPLAY_SETTINGS` other than the replayed job's
    (its first trial's recorded ``config``) is refused before any sandbox: it failed at a
    trial's first request that differed, as "the run diverged", naming options as possible
    causes, and ``--resume`` then refused the settings (helper-148)."""
    if config.replay is None or _calls_no_model(config):
        return []
    from clawrig.spec.layout import JobPaths, TrialPaths, model_from_json_text
    from clawrig.spec.trial import TrialResult

    for path in JobPaths(config.replay).trial_files(TrialPaths.RESULT):
        try:
            recorded = model_from_json_text(TrialResult, path.read_text(encoding="utf-8")).config
        except (OSError, ValueError):
            continue
        if recorded is None:  # (folders written before it was recorded)
            continue
        return [
            f"--replay: {config.replay} ran with {flag} {_shown(getattr(recorded, field))}, "
            f"this job with {flag} {_shown(getattr(config.trial, field))}: it changes what the "
            f"agent sends its model, so no recorded reply would match; replay with {flag} as "
            "recorded"
            for field, flag in REPLAY_SETTINGS.items()
            if getattr(recorded, field) != getattr(config.trial, field)
        ]
    return []


def _shown(value: Any) -> str:
    """A setting's value as a flag's argument in a message (a long text: its first words)."""
    if value is None:
        return "(none)"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return repr(text[:40] + "...") if len(text) > 40 or "\n" in text else text


def check_grader_mode(tasks: list[Task], config: JobConfig) -> list[str]:
    """A task ``--grader`` cannot grade is refused before any sandbox starts, naming its file
    (it would end as a grading error after its whole run): ``judge|exact|both`` need the
    task's reference answer or judge rubric; ``auto|programmatic`` need some grader (checks,
    answer or rubric; e.g. a WildClawBench task without its ``## Automated Checks``)."""
    from clawrig.runner.trial import grader_problem

    return [p for t in tasks if (p := grader_problem(t, config.trial.grader)) is not None]


def check_requirements(tasks: list[Task], config: JobConfig) -> list[str]:
    """Every grader requirement names a package on the index: a direct reference, URL or path
    (``pkg @ file:///...``) is refused (:func:`clawrig.sandbox.pyenv.requirement_problem`)."""
    from clawrig.sandbox.pyenv import requirement_problem

    problems = []
    for task in tasks:
        for req in task.grader.requirements:
            if problem := requirement_problem(req.strip()):
                problems.append(f"{task.source}: grader requirement {req!r}: {problem}")
    return problems


def check_env_cache(tasks: list[Task], config: JobConfig) -> list[str]:
    """When a task needs a Python environment built into clawrig's cache (the built-in mock
    services', a grader's requirements), the cache's folder for them can be made: an
    unusable ``CLAWRIG_CACHE_DIR`` (a file in its way, read-only) failed every such trial at
    setup (:func:`clawrig.sandbox.pyenv.envs_folder`)."""
    from clawrig.errors import SetupError
    from clawrig.sandbox.pyenv import envs_folder
    from clawrig.services.lifecycle import needs_services_env

    if not any(needs_services_env(t) or t.grader.requirements for t in tasks):
        return []
    try:
        envs_folder()
    except SetupError as exc:
        return [str(exc)]
    return []


def note_disk_space(tasks: list[Task], config: JobConfig) -> list[str]:
    """A note when the trials running at once could write more than the host has free: each
    trial's disk (``TrialConfig.disk_mb``) is sparse, so the host pays only for what agents
    write, but agents that fill theirs together could fill the host's."""
    disk = config.trial.disk_mb * 1024**2
    if not disk or not tasks:
        return []
    at_once = max(1, min(config.parallel, len(tasks) * config.runs))
    try:
        st = os.statvfs(tempfile.gettempdir())
    except OSError:
        return []
    free = st.f_bavail * st.f_frsize
    if at_once * disk <= free:
        return []
    from clawrig.sizes import format_bytes

    return [
        f"{at_once} trial(s) at once with a {config.trial.disk_mb} MiB disk each could write "
        f"{format_bytes(at_once * disk)}, {format_bytes(at_once * disk - free)} more than the "
        f"{format_bytes(free)} free under {tempfile.gettempdir()}: lower --parallel or "
        "--disk-mb if agents may fill their disks"
    ]


def note_memory(tasks: list[Task], config: JobConfig) -> list[str]:
    """A note when the trials running at once could use more memory than the host has: each
    sandbox's limit (``TrialConfig.memory_mb``) is a cap, not a reservation, and what graders
    write to the clean room's /tmp is memory no process's size shows (helper-122), so a host
    they overfill has its out-of-memory killer pick some other process, the harness perhaps."""
    limit = config.trial.memory_mb * 1024**2
    if not limit or not tasks:
        return []
    at_once = max(1, min(config.parallel, len(tasks) * config.runs))
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return []
    if at_once * limit <= total:
        return []
    from clawrig.sizes import format_bytes

    return [
        f"{at_once} trial(s) at once with a {config.trial.memory_mb} MiB memory limit each "
        "could "
        f"use {format_bytes(at_once * limit)}, more than this machine's {format_bytes(total)}: "
        "lower --parallel or --memory-mb if agents or graders may fill theirs (a grader's "
        "/tmp is memory)"
    ]


def _fidelity_checks() -> tuple[list[Check], list[Check]]:
    from clawrig.runner import fidelity_checks as fc

    return [fc.check_workspace_data, fc.check_judge], [
        fc.note_judge,
        fc.note_grader_imports,
        fc.note_local_home,
    ]


_FIDELITY_CHECKS, _FIDELITY_NOTES = _fidelity_checks()

CHECKS: list[Check] = [
    check_requirements,
    check_env_cache,
    check_grader_mode,
    check_sandbox,
    check_oracle,
    check_replay,
    check_replay_settings,
    check_output,
    *_FIDELITY_CHECKS,
    check_model_servers,
]
"""The checks every Job runs, in order (append yours): any problem refuses the job."""

NOTES: list[Check] = [
    *_FIDELITY_NOTES,
    note_disk_space,
    note_memory,
    note_resume_new,
    note_model_unused,
    note_replay_unused,
    note_replay_runs,
]
"""Checks whose lines are only notes for the user: the job runs (append yours)."""


def run_preflight(
    tasks: list[Task], config: JobConfig, checks: list[Check] | None = None
) -> list[str]:
    """Every problem the checks find (one line each), in check order."""
    problems: list[str] = []
    for check in CHECKS if checks is None else checks:
        problems.extend(check(tasks, config))
    return problems
