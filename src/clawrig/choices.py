"""The closed sets of values that flags and configs take, as ``Literal`` types, importable
without the machinery that uses them (for fast CLI start-up).

The CLI annotates its options with these types, so typer offers them as choices: an unknown
value is a usage error naming the flag and listing the values (exit 2) before anything runs.
The tuples beside them (``get_args``) are for code that checks a value it did not get from the
CLI (a :class:`clawrig.spec.job.JobConfig` built in Python).
"""

from __future__ import annotations

from typing import Literal, get_args

GraderMode = Literal["auto", "judge", "exact", "both", "programmatic"]
"""``--grader``: auto (the task's own grader), judge, exact, both, programmatic."""
GRADERS: tuple[str, ...] = get_args(GraderMode)

Executor = Literal["local", "ray"]
"""``--executor``: where trials run (:mod:`clawrig.runner.executors`)."""
EXECUTORS: tuple[str, ...] = get_args(Executor)

WebMode = Literal["off", "live", "record", "replay", "corpus"]
"""``--web``: the job's web (:mod:`clawrig.web.service`)."""
WEB_MODES: tuple[str, ...] = get_args(WebMode)
WebFlag = Literal[WebMode, Literal["on"]]
"""What ``--web`` accepts: a :data:`WebMode`, or ``on`` (read as ``live``)."""

WebMiss = Literal["error", "live", "empty"]
"""``--web-miss``: what a request that ``--web replay`` never recorded gets."""
MISS_POLICIES: tuple[str, ...] = get_args(WebMiss)

WebProvider = Literal["brave", "tavily"]
"""``--web-provider``: the live search provider (:data:`clawrig.web.providers.PROVIDERS`)."""
WEB_PROVIDERS: tuple[str, ...] = get_args(WebProvider)

SftFormat = Literal["openai", "sharegpt"]
"""``clawrig export sft --format``: the message layout of each row."""
SFT_FORMATS: tuple[str, ...] = get_args(SftFormat)

MAX_WORKERS = 256
"""The most harness worker processes a job may ask for (``--workers``)."""

DEFAULT_DISK_MB = 8192
"""A trial's disk in MiB unless told (``TrialConfig.disk_mb``, ``--disk-mb``)."""
MAX_DISK_MB = 1024 * 1024
"""The largest trial disk ``--disk-mb`` takes (1 TiB; the disk is sparse)."""
DISK_RESERVE_BYTES = 16 * 1024**2
"""Bytes the agent must leave free on its disk (``clawrig.runner.trial.Trial.check_disk``):
the harness writes the transcript there after the agent. Less free is the agent's error."""
MIN_DISK_MB = 2 * DISK_RESERVE_BYTES // 1024**2
"""The smallest trial disk in MiB (``--disk-mb``, 0 aside): twice :data:`DISK_RESERVE_BYTES`;
smaller, every trial was scored 0 as an agent that filled its disk."""
DEFAULT_MEMORY_MB = 4096
"""Each sandbox's memory limit in MiB by default (``--memory-mb``, ``TrialConfig.memory_mb``)."""
MIN_MEMORY_MB = 64
MAX_MEMORY_MB = 1024 * 1024
"""The range ``--memory-mb`` takes (MiB)."""


MAX_RUNS = 1000
"""``--runs`` at most (trials per task): a job lists its trials before it starts one, so
``--runs 100000000000`` sat listing them (a larger count is a usage error, exit 2)."""
