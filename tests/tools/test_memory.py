"""memory_search (SQLite FTS5, bm25) and memory_get on memory files in the bwrap workspace."""

from __future__ import annotations

import json
from pathlib import Path

MEMORY = """# Preferences
The user prefers concise answers.

# Projects
Project Falcon uses PostgreSQL for the database.
Database migrations run every Friday.
"""
DAY = """# Standup
Discussed the database migration plan for Falcon.
The migration moves tables to a new database cluster.

# Lunch
Tried the new ramen place.
"""


def body(r) -> dict:
    assert not r.is_error, r.text
    return json.loads(r.text)


def write_memory(ws: Path) -> None:
    (ws / "MEMORY.md").write_text(MEMORY)
    (ws / "memory").mkdir()
    (ws / "memory" / "2026-03-01.md").write_text(DAY)
    (ws / "memory" / "notes.txt").write_text("database migration database migration")  # not .md
    (ws / "other.md").write_text("database migration database migration")  # not memory


async def test_memory_search_ranks_chunks(call, workspace: Path) -> None:
    write_memory(workspace)
    r = body(await call("memory_search", {"query": "database migration"}))
    assert r["files"] == ["MEMORY.md", "memory/2026-03-01.md"]
    hits = [(h["path"], h["startLine"], h["endLine"]) for h in r["results"]]
    # the standup paragraph has "database" and "migration" twice each; the projects paragraph
    # "database" twice and "migrations" once; the other paragraphs have neither
    assert hits == [("memory/2026-03-01.md", 1, 3), ("MEMORY.md", 4, 6)]
    # scores are bm25 relative to the best hit. By hand (FTS5's bm25, k1=1.2, b=0.75, both
    # words in 2 of the 4 chunks so equal IDF): chunk lengths 17 and 13 tokens, mean 10.5;
    # standup: 2 * 2*2.2/(2 + 1.2*(0.25 + 0.75*17/10.5)) = 2.342205; projects:
    # 2*2.2/(2 + 1.2*(0.25 + 0.75*13/10.5)) + 1*2.2/(1 + ...) = 2.199946; ratio 0.93926
    scores = [h["score"] for h in r["results"]]
    assert scores[0] == 1.0
    assert abs(scores[1] - 0.93926) < 0.0005
    assert r["results"][0]["snippet"] == DAY.split("\n\n")[0]
    # maxResults and minScore
    r = body(await call("memory_search", {"query": "database migration", "maxResults": 1}))
    assert [h["path"] for h in r["results"]] == ["memory/2026-03-01.md"]
    r = body(await call("memory_search", {"query": "database migration", "minScore": 0.95}))
    assert [h["path"] for h in r["results"]] == ["memory/2026-03-01.md"]
    r = body(await call("memory_search", {"query": "ramen"}))
    assert [(h["path"], h["startLine"], h["endLine"]) for h in r["results"]] == [
        ("memory/2026-03-01.md", 5, 6)
    ]


async def test_memory_search_without_memory_files(call) -> None:
    r = body(await call("memory_search", {"query": "anything"}))
    assert r["results"] == [] and r["files"] == []
    assert r["note"].startswith("no memory files")


async def test_memory_search_reads_at_most_its_total(call, workspace: Path, monkeypatch) -> None:
    """One search reads at most MAX_TOTAL_BYTES of memory files (in path order, the last cut),
    and says how many it left out: 500 files of 2 MiB held the harness at 0.9 GB and its event
    loop for 25 s (helper-142). The limit is lowered here to three files' worth."""
    from clawrig.tools import memory

    chunk = "# Note\nthe word zebra lives here\n"
    (workspace / "memory").mkdir()
    for i in range(5):
        (workspace / "memory" / f"{i}.md").write_text(chunk * 10)
    total = 2 * len(chunk * 10) + len(chunk)
    monkeypatch.setattr(memory, "MAX_TOTAL_BYTES", total)
    r = body(await call("memory_search", {"query": "zebra", "maxResults": 100}))
    assert r["files"] == ["memory/0.md", "memory/1.md", "memory/2.md"]
    assert r["note"] == (
        f"2 memory file(s) not searched: the files searched hold {total} B together, the most "
        "one search reads"
    )
    # the third file was cut after its first chunk (2 lines): 10 + 10 + 1 chunks match
    assert len(r["results"]) == 21


async def test_memory_search_refuses_a_query_of_too_many_words(call, workspace: Path) -> None:
    """FTS5's work grows with the square of a query's words: a 500,000-word query held a
    worker thread for 11 minutes (helper-143). Past MAX_QUERY_WORDS, a tool error."""
    from clawrig.tools.memory import MAX_QUERY_WORDS

    write_memory(workspace)
    r = await call("memory_search", {"query": " ".join(["database"] * (MAX_QUERY_WORDS + 1))})
    assert r.is_error and r.text == (
        f"memory_search: `query` has more than {MAX_QUERY_WORDS} words; search for a few "
        "words at a time"
    )
    r = body(await call("memory_search", {"query": " ".join(["database"] * MAX_QUERY_WORDS)}))
    assert r["results"]


async def test_memory_search_errors(call, workspace: Path) -> None:
    write_memory(workspace)
    r = await call("memory_search", {"query": "  "})
    assert r.is_error and r.text == "memory_search: `query` is empty"
    r = await call("memory_search", {"query": "?!"})
    assert r.is_error and r.text == "memory_search: the query has no searchable words"
    r = await call("memory_search", {"query": "x", "minScore": 2})
    assert r.is_error and "`minScore` must be between 0 and 1" in r.text
    r = await call("memory_search", {"query": "x", "maxResults": -1})
    assert r.is_error and "`maxResults` must be >= 1" in r.text


async def test_memory_get(call, workspace: Path) -> None:
    write_memory(workspace)
    r = body(await call("memory_get", {"path": "memory/2026-03-01.md", "from": 2, "lines": 2}))
    assert r == {
        "path": "memory/2026-03-01.md",
        "from": 2,
        "lines": 2,
        "totalLines": 6,
        "text": "Discussed the database migration plan for Falcon.\n"
        "The migration moves tables to a new database cluster.",
    }
    r = body(await call("memory_get", {"path": "/tmp_workspace/MEMORY.md"}))
    assert r["text"] == MEMORY.rstrip("\n") and r["from"] == 1 and r["lines"] == 6


async def test_memory_get_errors(call, workspace: Path) -> None:
    write_memory(workspace)
    r = await call("memory_get", {"path": "other.md"})
    assert r.is_error and r.text.startswith("memory_get: other.md is not a memory file")
    r = await call("memory_get", {"path": "memory/none.md"})
    assert r.is_error and r.text == "memory_get: File not found: memory/none.md"
    r = await call("memory_get", {"path": "MEMORY.md", "from": 0})
    assert r.is_error and "`from` must be a line number >= 1" in r.text
    r = await call("memory_get", {"path": "MEMORY.md", "from": 40})
    assert r.is_error and r.text == "memory_get: `from` 40 is past the end of MEMORY.md (6 lines)"
    r = await call("memory_get", {"path": "MEMORY.md", "lines": 0.5})
    assert r.is_error and "`lines` must be a whole number >= 1" in r.text
