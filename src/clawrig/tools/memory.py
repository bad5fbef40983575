"""``memory_search`` and ``memory_get``: the agent's memory files in the workspace.

Memory files (OpenClaw's layout): ``/tmp_workspace/MEMORY.md`` (or ``memory.md``) and
``/tmp_workspace/memory/**/*.md``, read through the sandbox.

memory_search splits each file into chunks (paragraphs, a heading kept with the paragraph
after it, at most :data:`CHUNK_LINES` lines each), indexes them in an in-memory SQLite FTS5
table (stdlib ``sqlite3``, ``porter unicode61`` tokenizer) and ranks the chunks matching any
query word by FTS5's ``bm25()`` (k1 = 1.2, b = 0.75). Score = -bm25 relative to the best hit
(the best hit scores 1.0; a tiny corpus makes bm25's absolute values meaningless, as its IDF
is clamped near zero when a word is in half the chunks or more). Result: JSON
``{"results": [{"path", "startLine", "endLine", "score", "snippet"}], "query", "files"}``
(paths relative to the workspace, lines 1-based inclusive), best first;
``maxResults`` (default 6) and ``minScore`` (default 0) filter. One search reads at most
:data:`MAX_FILES` files of :data:`MAX_FILE_BYTES` each, :data:`MAX_TOTAL_BYTES` together (a
``note`` says how many files it left out), and ranks them off the event loop.

memory_get returns ``{"path", "from", "lines", "totalLines", "text"}`` for ``lines`` lines
(default: to the end) from line ``from`` (1-based, default 1) of one memory file.
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
from typing import Any

from clawrig.sizes import format_bytes
from clawrig.tools._common import (
    WORKSPACE,
    error,
    is_agent_os_failure,
    json_result,
    os_error_text,
    resolve_path,
)
from clawrig.tools.base import ToolContext, ToolResult
from clawrig.waits import in_thread

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
CHUNK_LINES = 20
SNIPPET_CHARS = 700
DEFAULT_MAX_RESULTS = 6
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 500
MAX_QUERY_WORDS = 64
"""Most words of one query (FTS5's work grows with the square of them: a 500,000-word query
held a worker thread for 11 minutes, helper-143)."""
MAX_TOTAL_BYTES = 32 * 1024 * 1024
"""Most bytes of memory files one search reads (the files in path order, the last one cut):
500 files of 2 MiB held the harness at 0.9 GB and its event loop for 25 s (helper-142)."""
_WORD = re.compile(r"\w+", re.UNICODE)


def chunk_markdown(text: str, max_lines: int = CHUNK_LINES) -> list[tuple[int, int, str]]:
    """Split Markdown into (start line, end line, text) chunks, lines 1-based inclusive.

    A chunk is a run of non-blank lines; a heading starts a new chunk, and a heading alone is
    joined to the paragraph after it; runs longer than ``max_lines`` are split.
    """
    lines = text.split("\n")
    blocks: list[list[int]] = []
    current: list[int] = []
    for i, line in enumerate(lines):
        if not line.strip():
            if current:
                blocks.append(current)
                current = []
            continue
        if line.lstrip().startswith("#") and current:
            blocks.append(current)
            current = []
        current.append(i)
    if current:
        blocks.append(current)
    merged: list[list[int]] = []
    for block in blocks:
        if merged and len(merged[-1]) == 1 and lines[merged[-1][0]].lstrip().startswith("#"):
            merged[-1].extend(block)
        else:
            merged.append(block)
    chunks = []
    for block in merged:
        for k in range(0, len(block), max_lines):
            part = block[k : k + max_lines]
            chunks.append((part[0] + 1, part[-1] + 1, "\n".join(lines[j] for j in part)))
    return chunks


async def _memory_files(ctx: ToolContext) -> list[str]:
    """Absolute in-sandbox paths of the memory files, sorted."""
    found: list[str] = []
    try:
        top = await ctx.sandbox.list(WORKSPACE)
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = {e.name: e for e in top}
    for name in ROOT_FILES:
        if name in names and names[name].kind == "file":
            found.append(f"{WORKSPACE}/{name}")
            break
    stack = [f"{WORKSPACE}/{MEMORY_DIR}"] if MEMORY_DIR in names else []
    while stack and len(found) < MAX_FILES:
        folder = stack.pop()
        try:
            entries = await ctx.sandbox.list(folder)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for e in entries:
            if e.kind == "dir":
                stack.append(f"{folder}/{e.name}")
            elif e.kind == "file" and e.name.lower().endswith(".md"):
                found.append(f"{folder}/{e.name}")
    return sorted(found)


def _rel(path: str) -> str:
    return posixpath.relpath(path, WORKSPACE)


def _fts_query(query: str) -> str:
    words = _WORD.findall(query)
    return " OR ".join('"' + w.replace('"', "") + '"' for w in words)


def rank_chunks(
    docs: dict[str, str], query: str, max_results: int, min_score: float
) -> list[dict[str, Any]]:
    """Rank the chunks of ``docs`` (relative path -> text) for ``query`` with FTS5 bm25.

    Returns result dicts (path, startLine, endLine, score, snippet), best first. Raises
    ValueError when the query has no searchable word.
    """
    match = _fts_query(query)
    if not match:
        raise ValueError("the query has no searchable words")
    con = sqlite3.connect(":memory:")
    try:
        con.execute(
            "CREATE VIRTUAL TABLE chunks USING fts5("
            "body, path UNINDEXED, start UNINDEXED, stop UNINDEXED, "
            "tokenize='porter unicode61')"
        )
        rows = [
            (body, path, start, stop)
            for path, text in docs.items()
            for start, stop, body in chunk_markdown(text)
        ]
        con.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?)", rows)
        cur = con.execute(
            "SELECT path, start, stop, body, bm25(chunks) AS rank FROM chunks "
            "WHERE chunks MATCH ? ORDER BY rank, path, start",
            (match,),
        )
        hits = [(path, start, stop, body, -float(rank)) for path, start, stop, body, rank in cur]
        best = max((h[4] for h in hits), default=0.0)
        out = []
        for path, start, stop, body, s in hits:
            score = s / best if best > 0 else 1.0
            if score < min_score:
                continue
            snippet = body if len(body) <= SNIPPET_CHARS else body[: SNIPPET_CHARS - 3] + "..."
            out.append(
                {
                    "path": path,
                    "startLine": int(start),
                    "endLine": int(stop),
                    "score": round(score, 4),
                    "snippet": snippet,
                }
            )
            if len(out) >= max_results:
                break
        return out
    finally:
        con.close()


async def memory_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Rank memory-file chunks for ``query`` (see the module docstring).

    Errors: an empty query or one without words, maxResults < 1, minScore outside [0, 1].
    No memory files is not an error: an empty result list with a note.
    """
    query = args["query"].strip()
    if not query:
        return error("memory_search: `query` is empty")
    if len(_WORD.findall(query)) > MAX_QUERY_WORDS:
        return error(
            f"memory_search: `query` has more than {MAX_QUERY_WORDS} words; search for a few "
            "words at a time"
        )
    max_results = int(args.get("maxResults") or DEFAULT_MAX_RESULTS)
    if max_results < 1:
        return error("memory_search: `maxResults` must be >= 1")
    min_score = float(args.get("minScore") or 0.0)
    if not 0.0 <= min_score <= 1.0:
        return error("memory_search: `minScore` must be between 0 and 1")
    docs: dict[str, str] = {}
    room, left_out = MAX_TOTAL_BYTES, 0
    for path in await _memory_files(ctx):
        if room <= 0:
            left_out += 1
            continue
        try:
            data = await ctx.sandbox.read_file(path, max_bytes=min(MAX_FILE_BYTES, room))
        except Exception as exc:
            if is_agent_os_failure(exc):
                continue
            raise
        room -= len(data)
        docs[_rel(path)] = data.decode("utf-8", errors="replace")
    payload: dict[str, Any] = {"query": query, "files": sorted(docs)}
    if left_out:
        payload["note"] = (
            f"{left_out} memory file(s) not searched: the files searched hold "
            f"{format_bytes(MAX_TOTAL_BYTES)} together, the most one search reads"
        )
    if not docs:
        payload["results"] = []
        payload["note"] = "no memory files: create MEMORY.md or memory/*.md in the workspace"
        return json_result(payload)
    try:  # (off the event loop: other trials' work goes on meanwhile)
        payload["results"] = await in_thread(rank_chunks, docs, query, max_results, min_score)
    except ValueError as exc:
        return error(f"memory_search: {exc}")
    return json_result(payload)


def _is_memory_path(path: str) -> bool:
    if path in (f"{WORKSPACE}/{n}" for n in ROOT_FILES):
        return True
    return path.startswith(f"{WORKSPACE}/{MEMORY_DIR}/") and path.lower().endswith(".md")


async def memory_get(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Lines of one memory file. Errors: not a memory file, missing file, bad from/lines."""
    raw = args["path"].strip()
    path = resolve_path(raw)
    if not _is_memory_path(path):
        return error(
            f"memory_get: {raw} is not a memory file (MEMORY.md or memory/*.md in the "
            "workspace); use read for other files"
        )
    start = args.get("from")
    count = args.get("lines")
    if start is not None and (int(start) != start or start < 1):
        return error(f"memory_get: `from` must be a line number >= 1 (got {start!r})")
    if count is not None and (int(count) != count or count < 1):
        return error(f"memory_get: `lines` must be a whole number >= 1 (got {count!r})")
    try:
        data = await ctx.sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"memory_get: {os_error_text(exc, raw)}")
        raise
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first = int(start or 1)
    if first > max(len(lines), 1):
        return error(f"memory_get: `from` {first} is past the end of {raw} ({len(lines)} lines)")
    chosen = lines[first - 1 :] if count is None else lines[first - 1 : first - 1 + int(count)]
    return json_result(
        {
            "path": _rel(path),
            "from": first,
            "lines": len(chosen),
            "totalLines": len(lines),
            "text": "\n".join(chosen),
        }
    )


TOOLS = {"memory_search": memory_search, "memory_get": memory_get}
