"""Converters between :class:`clawrig.spec.transcript.Transcript` and its published forms.

- OpenClaw session JSONL (chat.jsonl, what graders read): :mod:`clawrig.transcript.openclaw`.
- OpenAI ``formatted_dialog`` (four-folder datapoints): :mod:`clawrig.transcript.dialog`.
"""

from clawrig.transcript._messages import (
    RAW_ARGUMENTS_KEY,
    arguments_from_value,
    arguments_to_object,
)
from clawrig.transcript.dialog import (
    dialog_statistics,
    from_formatted_dialog,
    to_formatted_dialog,
    transcript_usage,
)
from clawrig.transcript.openclaw import (
    DEFAULT_API,
    SESSION_VERSION,
    dumps_openclaw_jsonl,
    from_openclaw_entries,
    iso_from_ms,
    openclaw_entries_from_jsonl,
    read_openclaw_jsonl,
    stop_reason_from_finish_reason,
    to_openclaw_entries,
    write_openclaw_jsonl,
)

__all__ = [
    "DEFAULT_API",
    "RAW_ARGUMENTS_KEY",
    "SESSION_VERSION",
    "arguments_from_value",
    "arguments_to_object",
    "dialog_statistics",
    "dumps_openclaw_jsonl",
    "from_formatted_dialog",
    "from_openclaw_entries",
    "iso_from_ms",
    "openclaw_entries_from_jsonl",
    "read_openclaw_jsonl",
    "stop_reason_from_finish_reason",
    "to_formatted_dialog",
    "to_openclaw_entries",
    "transcript_usage",
    "write_openclaw_jsonl",
]
