"""File tools: ``read``, ``edit``, ``write`` (OpenClaw 2026.3.24, from pi-coding-agent).

All file access goes through the sandbox (``read_file``/``write_file``/``exec``); paths are
in-sandbox paths, relative ones resolve against /tmp_workspace. Result texts follow OpenClaw's
(the demo suite's golden trajectories hold them verbatim):

- read: the file's text as is (no line numbers). Output stops at :data:`MAX_LINES` lines or
  :data:`MAX_BYTES` bytes, whichever comes first, with a note
  ``[Showing lines A-B of N. Use offset=B+1 to continue.]``; with ``limit`` and more lines left:
  ``[K more lines in file. Use offset=M to continue.]``. PNG/JPEG/GIF/WebP files come back as
  image content (``Read image file [image/png]``) when the model can see images, else as a note.
- edit: ``Successfully replaced text in PATH.``
- write: ``Successfully wrote N bytes to PATH`` (N = UTF-8 byte length of ``content``).

PATH in those messages is the path as the model wrote it.
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Any

from clawrig.sizes import format_bytes
from clawrig.tools._common import (
    PATH_ALIASES,
    error,
    first_arg,
    is_agent_os_failure,
    os_error_text,
    resolve_path,
)
from clawrig.tools.base import ToolContext, ToolResult
from clawrig.tools.image import image_block, sniff_image_mime

MAX_LINES = 2000
"""read: most lines returned by one call (pi-coding-agent DEFAULT_MAX_LINES)."""
MAX_BYTES = 50 * 1024
"""read: most bytes (UTF-8) returned by one call (pi-coding-agent DEFAULT_MAX_BYTES)."""
EDIT_CAP = 16 * 1024 * 1024
"""The largest file ``edit`` changes (bytes): it holds the file in the harness's memory (a
1 GiB file four times took the harness to 1.47 GB: helper-142); a larger one is the agent's
to change with ``exec``."""
DIFF_MAX_LINES = 2000
"""Most lines (before and after together) of the changed region ``edit`` shows a diff of
(:func:`edit_diff`)."""
READ_CAP = 8 * 1024 * 1024
"""read: files up to this size are fetched whole; larger ones are windowed with sed inside
the sandbox."""
MAX_IMAGE_BYTES = 20 * 1024 * 1024
OLD_TEXT_ALIASES = ("oldText", "old_string", "oldString", "old_text")
NEW_TEXT_ALIASES = ("newText", "new_string", "newString", "new_text")


def _path_arg(tool: str, args: dict[str, Any]) -> tuple[str, str] | ToolResult:
    raw = first_arg(args, PATH_ALIASES)
    if not isinstance(raw, str) or not raw.strip():
        return error(f"{tool}: missing required argument `path` (the file to {tool})")
    return raw, resolve_path(raw)


def _as_positive_int(value: Any, name: str) -> int | None | ToolResult:
    if value is None:
        return None
    n = int(value)
    if n != value or n < 1:
        return error(f"read: `{name}` must be a whole number >= 1 (got {value!r})")
    return n


async def read(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Read a text file (windowed by ``offset``/``limit``, 1-based lines) or an image.

    Errors: missing path argument, file not found, a directory, permission denied, offset past
    the end of the file.
    """
    got = _path_arg("read", args)
    if isinstance(got, ToolResult):
        return got
    raw, path = got
    offset = _as_positive_int(args.get("offset"), "offset")
    if isinstance(offset, ToolResult):
        return offset
    limit = _as_positive_int(args.get("limit"), "limit")
    if isinstance(limit, ToolResult):
        return limit
    try:
        data = await ctx.sandbox.read_file(path, max_bytes=READ_CAP)
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"read: {os_error_text(exc, raw)}")
        raise
    mime = sniff_image_mime(data[:16])
    if mime is not None:
        return await _read_image(ctx, raw, path, data, mime)
    if len(data) >= READ_CAP:
        return await _read_large(ctx, raw, path, offset or 1, limit)
    text = data.decode("utf-8", errors="replace")
    lines, ends_nl = _split(text)
    return _window(lines, raw, offset or 1, limit, first_line=1, total=len(lines), ends_nl=ends_nl)


def _split(text: str) -> tuple[list[str], bool]:
    """Lines of ``text`` and whether it ends with a newline (then no empty last line)."""
    lines = text.split("\n")
    ends_nl = len(lines) > 1 and lines[-1] == ""
    if ends_nl:
        lines.pop()
    return lines, ends_nl


async def _read_image(ctx: ToolContext, raw: str, path: str, data: bytes, mime: str) -> ToolResult:
    if not ctx.can_see_images:
        return ToolResult(
            text=(
                f"{raw} is an image ({mime}). This model cannot see images, so its content is "
                "not shown; inspect it with exec instead (e.g. `file`, or python3)."
            ),
            details={"path": path, "mimeType": mime},
        )
    if len(data) >= READ_CAP:
        data = await ctx.sandbox.read_file(path, max_bytes=MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:
        return error(f"read: image {raw} is larger than {format_bytes(MAX_IMAGE_BYTES)}")
    return ToolResult(
        text=f"Read image file [{mime}]",
        details={"path": path, "mimeType": mime, "bytes": len(data)},
        images=[image_block(data, mime)],
    )


async def _read_large(
    ctx: ToolContext, raw: str, path: str, offset: int, limit: int | None
) -> ToolResult:
    """A file over READ_CAP: count its lines and cut the window inside the sandbox."""
    q = shlex.quote(path)
    count = await ctx.sandbox.exec(f"wc -l < {q}; tail -c 1 -- {q} | wc -l", timeout_s=120)
    try:
        newlines, ends = (int(x) for x in count.stdout.split())
    except ValueError:
        return error(f"read: cannot count the lines of {raw}: {count.stdout.strip()[:200]}")
    ends_nl = ends == 1
    total = newlines if ends_nl else newlines + 1
    if offset > total:
        return _beyond(offset, total)
    window = await ctx.sandbox.exec(
        f"tail -n +{offset} -- {q} | head -n {min(limit or MAX_LINES, MAX_LINES) + 1} "
        f"| head -c {MAX_BYTES * 4}",
        timeout_s=120,
    )
    lines, _ = _split(window.stdout)
    return _window(lines, raw, offset, limit, first_line=offset, total=total, ends_nl=ends_nl)


def _beyond(offset: int, total: int) -> ToolResult:
    return error(f"read: offset {offset} is beyond the end of the file ({total} lines total)")


def _window(
    lines: list[str],
    raw: str,
    offset: int,
    limit: int | None,
    *,
    first_line: int,
    total: int,
    ends_nl: bool,
) -> ToolResult:
    """Apply offset/limit and the 2,000-line / 50 KB caps to ``lines``, which start at line
    ``first_line`` of a file of ``total`` lines (``ends_nl``: it ends with a newline)."""
    if offset > total:
        return _beyond(offset, total)
    start = offset - first_line
    end = len(lines) if limit is None else min(len(lines), start + limit)
    selected = lines[start:end]
    kept: list[str] = []
    size = 0
    cut_by: str | None = None
    for line in selected:
        if len(kept) >= MAX_LINES:
            cut_by = "lines"
            break
        add = len(line.encode("utf-8")) + (1 if kept else 0)
        if size + add > MAX_BYTES:
            cut_by = "bytes"
            break
        kept.append(line)
        size += add
    if not kept and selected:
        line_bytes = len(selected[0].encode("utf-8"))
        return ToolResult(
            text=(
                f"[Line {offset} is {line_bytes / 1024:.1f} KB, over the "
                f"{MAX_BYTES // 1024} KB read limit. Use exec: sed -n '{offset}p' {raw} | "
                f"head -c {MAX_BYTES}]"
            ),
            details={"truncated": True, "truncatedBy": "bytes"},
        )
    text = "\n".join(kept)
    last = offset + len(kept) - 1
    details: dict[str, Any] = {"truncated": cut_by is not None}
    if cut_by is not None:
        why = f" ({MAX_BYTES // 1024} KB limit)" if cut_by == "bytes" else ""
        text += (
            f"\n\n[Showing lines {offset}-{last} of {total}{why}. "
            f"Use offset={last + 1} to continue.]"
        )
        details["truncatedBy"] = cut_by
    elif last < total:
        left = total - last
        text += (
            f"\n\n[{left} more line{'s' if left != 1 else ''} in file. "
            f"Use offset={last + 1} to continue.]"
        )
    elif ends_nl:
        text += "\n"  # the whole rest of the file: as it is, final newline included
    return ToolResult(text=text, details=details)


async def edit(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Replace the one exact occurrence of ``oldText`` with ``newText``.

    Errors: missing arguments, empty oldText, file not found, oldText found 0 or several times,
    a file over :data:`EDIT_CAP`. Files with CRLF line ends match an LF ``oldText`` and keep
    their CRLF ends. A trial's edits run one at a time (:attr:`ToolContext.edits`).
    """
    async with ctx.edits:
        return await _edit(ctx, args)


async def _edit(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    got = _path_arg("edit", args)
    if isinstance(got, ToolResult):
        return got
    raw, path = got
    old = first_arg(args, OLD_TEXT_ALIASES)
    new = first_arg(args, NEW_TEXT_ALIASES)
    if old is None:
        return error("edit: missing required argument `oldText` (the exact text to replace)")
    if new is None:
        return error("edit: missing required argument `newText` (the replacement text)")
    if old == "":
        return error("edit: `oldText` must not be empty; use write to create or overwrite a file")
    try:
        data = await ctx.sandbox.read_file(path, max_bytes=EDIT_CAP + 1)
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"edit: {os_error_text(exc, raw)}")
        raise
    if len(data) > EDIT_CAP:
        return error(
            f"edit: {raw} is larger than edit's {EDIT_CAP // 1024**2} MiB limit: change it with "
            "exec (sed, python) instead"
        )
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        return error(f"edit: {raw} is not a UTF-8 text file")
    crlf = "\r\n" in content and "\r\n" not in old
    work = content.replace("\r\n", "\n") if crlf else content
    count = work.count(old)
    if count == 0:
        return error(
            f"Could not find the exact text in {raw}. The old text must match exactly, "
            "including all whitespace and newlines; read the file again and copy the text."
        )
    if count > 1:
        return error(
            f"Found {count} occurrences of the text in {raw}. The text must be unique: "
            "include more surrounding lines in oldText so it matches exactly once."
        )
    updated = work.replace(old, new, 1)
    if crlf:
        updated = updated.replace("\n", "\r\n")
    try:
        await ctx.sandbox.write_file(path, updated.encode("utf-8"))
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"edit: {os_error_text(exc, raw)}")
        raise
    return ToolResult(
        text=f"Successfully replaced text in {raw}.",
        details={"diff": edit_diff(work, work.index(old), old, new, raw)},
    )


def edit_diff(text: str, at: int, old: str, new: str, name: str, context: int = 2) -> str:
    """The unified diff (``context`` lines around, headers naming ``name``, line numbers the
    file's) of ``text`` with ``old`` at offset ``at`` replaced by ``new``, made by
    ``difflib.unified_diff`` of the changed lines and their context alone, not the whole file
    before and after. Past
    :data:`DIFF_MAX_LINES` changed lines, a one-line note instead: difflib's matching grows with
    the square of the lines it compares (repeated lines), so a whole-file diff of a 1.5 MB file
    of repeated lines held the harness's event loop for 64 s, every trial of the job with it
    (helper-142)."""
    # the changed lines and their context, found by position: the file is not split (a
    # 16 MiB file split into lines for each of 50 edits of a turn took the harness to 6.8 GB:
    # helper-143)
    stop = at + max(len(old) - 1, 0)  # the replaced text's last character
    first = text.count("\n", 0, at)  # the line (0-based) it starts in
    last = first + text.count("\n", at, stop)  # and ends in
    begin = text.rfind("\n", 0, at) + 1
    lo = first
    while lo > first - context and begin > 0:
        begin = text.rfind("\n", 0, begin - 1) + 1
        lo -= 1
    finish = text.find("\n", stop)
    for _ in range(context):
        if finish == -1 or finish + 1 >= len(text):
            break
        finish = text.find("\n", finish + 1)
    region = text[begin : len(text) if finish == -1 else finish + 1]
    before = region.splitlines(keepends=True)
    cut = at - begin
    after = (region[:cut] + new + region[cut + len(old) :]).splitlines(keepends=True)
    if len(before) + len(after) > DIFF_MAX_LINES:
        return f"(diff not shown: {last - first + 1} lines replaced by {new.count(chr(10)) + 1})"
    diff = list(difflib.unified_diff(before, after, fromfile=name, tofile=name, n=context))
    for i, line in enumerate(diff):  # the region's line numbers -> the file's
        if m := _HUNK.match(line):
            a, b, c, d = (int(x) if x else None for x in m.groups())
            diff[i] = f"@@ -{_span(a, b, lo)} +{_span(c, d, lo)} @@\n"
    return "".join(diff)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$")


def _span(start: int | None, length: int | None, shift: int) -> str:
    """A hunk header's ``start[,length]`` moved down by ``shift`` lines (difflib's format: a
    length of 1 is left out, an empty range starts one line before)."""
    assert start is not None
    return f"{start + shift}" if length is None else f"{start + shift},{length}"


async def write(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Create or overwrite a file with ``content``, creating parent folders.

    Errors: missing path, a directory in the way, a read-only location.
    """
    got = _path_arg("write", args)
    if isinstance(got, ToolResult):
        return got
    raw, path = got
    data = args["content"].encode("utf-8")
    try:
        await ctx.sandbox.write_file(path, data)
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"write: {os_error_text(exc, raw)}")
        raise
    return ToolResult(text=f"Successfully wrote {len(data)} bytes to {raw}")


TOOLS = {"read": read, "edit": edit, "write": write}
