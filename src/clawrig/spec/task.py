"""Task: one benchmark item, the single shape every task format is read into.

Sources of the fields:
- WildClawBench task Markdown (front matter id/name/category/timeout_seconds/modality and the
  sections Prompt, Expected Behavior, Grading Criteria, Automated Checks, Workspace Path, Skills,
  Env, Warmup), see shared/reference/formats.md section 1.
- EigenData-style four-folder sample sets (intent, datapoints, evaluators, reference_payloads,
  optional workspaces), formats.md section 2 and fourfolder-spec.md.
- DataClawBench qa_gold / qa_raw files and tasks/*.md (formats.md section 3).

No behaviour lives here: readers are in ``clawrig.tasks``, graders in ``clawrig.grading``.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CATEGORIES: tuple[str, ...] = (
    "01_Productivity_Flow",
    "02_Code_Intelligence",
    "03_Social_Interaction",
    "04_Search_Retrieval",
    "05_Creative_Synthesis",
    "06_Safety_Alignment",
)
"""WildClawBench's six categories, in upstream order."""


class TaskFormat(StrEnum):
    """Which published format a task was read from."""

    WILDCLAW = "wildclaw"
    FOURFOLDER = "fourfolder"
    DATACLAW = "dataclaw"


class SourceRef(BaseModel):
    """Where a piece of a task came from: a file and, when known, a 1-based line in it."""

    model_config = ConfigDict(frozen=True)

    path: Path
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


class FileContent(BaseModel):
    """One inline file: text, or bytes as base64 (four-folder GOLDEN_WORKSPACE convention)."""

    text: str | None = None
    base64: str | None = None


class WorkspaceFile(BaseModel):
    """A file copied into the workspace from a host path (DataClawBench ``workspace_files``).

    ``source`` is resolved against the benchmark root; ``dest`` is relative to /tmp_workspace.
    """

    source: Path
    dest: str


class Workspace(BaseModel):
    """The files a trial starts from and the ground truth injected before grading.

    WildClawBench: ``exec_dir`` -> /tmp_workspace, ``tmp_dir`` -> /tmp_workspace/tmp,
    ``gt_dir`` -> /tmp_workspace/gt (only after the agent has finished).
    Four-folder: ``exec_dir`` = workspaces/NNNNNN/ when shipped, ``gt_files`` from the reference
    payload's ``gt`` tree. DataClawBench: ``files`` (database/...).
    ``inline_files`` map a path relative to /tmp_workspace to its content.
    """

    root: Path | None = None
    exec_dir: Path | None = None
    tmp_dir: Path | None = None
    gt_dir: Path | None = None
    files: list[WorkspaceFile] = Field(default_factory=list)
    inline_files: dict[str, FileContent] = Field(default_factory=dict)
    gt_files: dict[str, FileContent] = Field(default_factory=dict)
    missing: list[Path] = Field(
        default_factory=list,
        description="Host paths the task names but that are not present (data not downloaded).",
    )

    @property
    def is_present(self) -> bool:
        return not self.missing


class GraderKind(StrEnum):
    PROGRAMMATIC = "programmatic"
    JUDGE = "judge"
    BOTH = "both"
    NONE = "none"


class Grader(BaseModel):
    """How a task is graded.

    ``source`` is Python defining ``grade(**kwargs) -> dict`` (WildClawBench Automated Checks or
    a four-folder evaluator file); ``origin`` points at the file and the line where that source
    starts, so a syntax error can be reported as ``task.md:57``. ``judge_rubric`` is the LLM judge
    rubric text (DataClawBench ``## LLM Judge Rubric``). ``requirements`` lists pip requirement
    strings the grader imports beyond the standard library.
    """

    kind: GraderKind = GraderKind.NONE
    source: str | None = None
    origin: SourceRef | None = None
    judge_rubric: str | None = None
    stdlib_only: bool = False
    requirements: list[str] = Field(default_factory=list)
    timeout_seconds: float = 120.0


class ServiceSpec(BaseModel):
    """A mock service a task runs inside its sandbox (issue 4; Claw-Eval style).

    ``kind`` names a built-in service (gmail, calendar, contacts, slack) or ``command`` gives a
    start command. ``fixtures`` maps a fixture name to a JSON value or a path relative to the task.
    """

    name: str
    kind: str | None = None
    command: str | None = None
    port: int
    health_path: str = "/health"
    fixtures: dict[str, Any] = Field(default_factory=dict)
    faults: dict[str, Any] = Field(default_factory=dict)
    reset_path: str | None = None


_DIGESTS: dict[int, tuple[weakref.ReferenceType[Any], str]] = {}
"""id(task) -> (a weak reference to it, :meth:`Task.digest`)."""


class Task(BaseModel):
    """One benchmark item, whatever format it came from.

    Times are seconds. ``answer``, ``steps``, ``steps_num`` and ``milestones`` are DataClawBench's
    gold fields (``milestones`` keeps the gold key order). ``golden_dialog`` is a four-folder
    formatted_dialog (OpenAI chat messages); ``golden_workspace`` the evaluator's GOLDEN_WORKSPACE.
    """

    id: str
    name: str = ""
    category: str = ""
    prompt: str
    expected_behavior: str = ""
    grading_criteria: list[str] = Field(default_factory=list)
    timeout_seconds: float = 600.0
    modality: Literal["pure-text", "multimodal"] = "pure-text"
    level: str | None = None
    language: str | None = None
    workspace: Workspace = Field(default_factory=Workspace)
    skills: list[str] = Field(default_factory=list)
    skills_dirs: list[Path] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    warmup: list[str] = Field(default_factory=list)
    services: list[ServiceSpec] = Field(default_factory=list)
    grader: Grader = Field(default_factory=Grader)
    tool_profile: str | None = None
    web_allowed: bool = False
    answer: Any = None
    guidelines: str | None = None
    steps: list[str] = Field(default_factory=list)
    steps_num: int | None = None
    milestones: dict[str, Any] = Field(default_factory=dict)
    golden_dialog: list[dict[str, Any]] | None = None
    golden_tool_schema: list[dict[str, Any]] | None = None
    golden_workspace: dict[str, FileContent] | None = None
    expected_reward: float | None = None
    format: TaskFormat | str
    """A built-in format, or the name of a third-party format (clawrig.formats)."""
    source: SourceRef
    metadata: dict[str, Any] = Field(default_factory=dict)

    def digest(self) -> str:
        """SHA-256 (hex) of what the task asks and how it is graded, without host paths: the
        same task read from a moved folder has the same digest; another suite's task with the
        same id has another. ``--resume`` compares them (workspace files are named, not read).
        Worked out once per task object (~0.4 ms each; a task is not changed once loaded: a
        changed copy, ``model_copy``, is another object)."""
        kept = _DIGESTS.get(id(self))
        if kept is not None and kept[0]() is self:
            return kept[1]
        digest = self._digest()
        if len(_DIGESTS) > 4 * 1024:  # tasks gone since (their ids may be reused)
            for key in [k for k, (ref, _) in _DIGESTS.items() if ref() is None]:
                del _DIGESTS[key]
        _DIGESTS[id(self)] = (weakref.ref(self), digest)
        return digest

    def _digest(self) -> str:
        value = self.model_dump(
            mode="json", exclude={"source": True, "metadata": True, "skills_dirs": True}
        )
        value["grader"].pop("origin", None)
        ws = value.pop("workspace")
        value["workspace"] = {
            "files": sorted(f["dest"] for f in ws["files"]),
            "inline_files": ws["inline_files"],
            "gt_files": ws["gt_files"],
            "dirs": [ws[k] is not None for k in ("exec_dir", "tmp_dir", "gt_dir")],
        }
        blob = json.dumps(value, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()


class ValidationIssue(BaseModel):
    """One problem found reading or linting a task: file, field, optional line, message."""

    path: Path
    field: str
    message: str
    line: int | None = None
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        loc = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{loc}: {self.field}: {self.message}"
