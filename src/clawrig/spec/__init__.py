"""Pydantic data, no behaviour: the single source of truth for file shapes."""

from clawrig.spec.llm import ChatResponse, ToolCall
from clawrig.spec.task import (
    CATEGORIES,
    FileContent,
    Grader,
    GraderKind,
    ServiceSpec,
    SourceRef,
    Task,
    TaskFormat,
    ValidationIssue,
    Workspace,
    WorkspaceFile,
)
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import (
    ErrorKind,
    Score,
    StopReason,
    TrialError,
    TrialResult,
    Usage,
)

__all__ = [
    "CATEGORIES",
    "ChatResponse",
    "ErrorKind",
    "FileContent",
    "Grader",
    "GraderKind",
    "Score",
    "ServiceSpec",
    "SourceRef",
    "StopReason",
    "Task",
    "TaskFormat",
    "ToolCall",
    "Transcript",
    "TranscriptMessage",
    "TrialError",
    "TrialResult",
    "Usage",
    "ValidationIssue",
    "Workspace",
    "WorkspaceFile",
]
