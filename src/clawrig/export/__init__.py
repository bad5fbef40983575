"""Exports of a finished job: four-folder sample sets and SFT data.

- :func:`clawrig.export.fourfolder.export_fourfolder`: graded trials -> a four-folder set that
  passes ``clawrig verify`` (self-contained stdlib evaluators with a self-check);
- :func:`clawrig.export.sft.export_sft`: graded trials -> JSONL or Parquet rows of messages
  and tools (OpenAI or ShareGPT format).
"""

from clawrig.export.fourfolder import DEFAULT_MIN_SCORE, ExportReport, export_fourfolder
from clawrig.export.job import ExportError, JobTrial, find_trials
from clawrig.export.sft import SftReport, export_sft

__all__ = [
    "DEFAULT_MIN_SCORE",
    "ExportError",
    "ExportReport",
    "JobTrial",
    "SftReport",
    "export_fourfolder",
    "export_sft",
    "find_trials",
]
