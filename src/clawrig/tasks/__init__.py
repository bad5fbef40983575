"""Task readers: every published task format -> :class:`clawrig.spec.task.Task`.

- :mod:`clawrig.tasks.wildclaw`: WildClawBench task Markdown.
- :mod:`clawrig.tasks.fourfolder`: four-folder sample sets (+ optional workspaces/).
- :mod:`clawrig.tasks.dataclaw`: DataClawBench gold files and task files;
  :mod:`clawrig.tasks.dataclaw_build` rebuilds them from qa_raw.
- :mod:`clawrig.tasks.registry`: format detection, :func:`load_tasks`, :func:`validate`.
"""

from clawrig.tasks.dataclaw_build import BuildResult, build_dataclaw
from clawrig.tasks.registry import Suite, detect_format, find_task, load_suite, load_tasks, validate

__all__ = [
    "BuildResult",
    "Suite",
    "build_dataclaw",
    "detect_format",
    "find_task",
    "load_suite",
    "load_tasks",
    "validate",
]
