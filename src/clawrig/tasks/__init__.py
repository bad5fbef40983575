"""Task readers: every published task format -> :class:`clawrig.spec.task.Task`.

- :mod:`clawrig.tasks.wildclaw`: WildClawBench task Markdown.
- :mod:`clawrig.tasks.fourfolder`: four-folder sample sets (+ optional workspaces/).
- :mod:`clawrig.tasks.dataclaw`: DataClawBench gold files and task files;
  :mod:`clawrig.tasks.dataclaw_build` rebuilds them from qa_raw.
- :mod:`clawrig.tasks.registry`: format detection, :func:`load_tasks`, :func:`validate`.
"""

from clawrig.tasks.dataclaw import read_dataclaw_root, read_dataclaw_task_md
from clawrig.tasks.dataclaw_build import BuildResult, build_dataclaw
from clawrig.tasks.fourfolder import read_fourfolder
from clawrig.tasks.registry import Suite, detect_format, find_task, load_suite, load_tasks, validate
from clawrig.tasks.text import IssueCollector
from clawrig.tasks.wildclaw import read_wildclaw_task

__all__ = [
    "BuildResult",
    "IssueCollector",
    "Suite",
    "build_dataclaw",
    "detect_format",
    "find_task",
    "load_suite",
    "load_tasks",
    "read_dataclaw_root",
    "read_dataclaw_task_md",
    "read_fourfolder",
    "read_wildclaw_task",
    "validate",
]
