"""``--web corpus DIR``: a frozen web served from a local document collection.

The collection is a folder (or one JSONL file) of:

- JSONL files (``*.jsonl``): one document per line, ``{"url": str, "title"?: str,
  "text"?: str, "html"?: str, "content_type"?: str, "published"?: str}`` (``contents`` or
  ``body`` are accepted for ``text``); ``url`` is required and must be http(s);
- other files (``.html``, ``.htm``, ``.md``, ``.txt``, ``.json``, ``.xml``, ``.csv``): a file
  at ``DIR/<host>/<path>`` is the page ``https://<host>/<path>`` (the layout ``wget --mirror``
  writes; ``index.html`` also answers its folder's URL); a file whose first folder is not a
  host name (no dot) is ``https://corpus.invalid/<relative path>``.

Documents are indexed with SQLite FTS5 (``porter unicode61`` tokenizer) over title and text;
web_search ranks them with FTS5's ``bm25()`` (title weighted 2x, lower is better) and returns
an FTS5 ``snippet()`` as the description; a query matches documents containing any of its
words. web_fetch serves a document's stored body with its content type; a URL not in the
collection is a 404.
"""

from __future__ import annotations

import json
import re
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from clawrig.errors import UserError
from clawrig.web.records import normalise_url

FILE_TYPES = {
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".json": "application/json",
    ".xml": "application/xml",
    ".csv": "text/csv",
}
"""File suffixes a corpus folder may hold (besides ``.jsonl``) and their content types."""
FALLBACK_HOST = "corpus.invalid"


def _text_of(body: str, content_type: str) -> tuple[str, str]:
    """(title, plain text) of a document body."""
    if content_type.startswith("text/html"):
        from clawrig.tools.web import html_to_text

        return html_to_text(body, markdown=False)
    heading = re.search(r"^#\s+(.+)$", body, re.M) if content_type == "text/markdown" else None
    return (heading.group(1).strip() if heading else ""), body


def _refuse_hard_links_out(files: list[Path]) -> None:
    """UserError for a regular file of the corpus with more hard links than the corpus holds
    of it: its other name is outside, so it may be any file of this machine (a hard link to
    a secret was served to the agent as a page, helper-137)."""
    seen: dict[tuple[int, int], list[Path]] = {}
    for file in files:
        try:
            st = file.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            seen.setdefault((st.st_dev, st.st_ino), []).append(file)
    for names in seen.values():
        if len(names) < names[0].lstat().st_nlink:
            raise UserError(
                f"{names[0]}: a hard link to a file outside the corpus folder: refused (copy "
                "the file in instead)"
            )


def _scheme(url: str) -> str:
    """The scheme of ``url``, or "" when it cannot be split (a broken ``[IPv6]`` host)."""
    try:
        return urlsplit(url).scheme
    except ValueError:
        return ""


def _file_url(rel: Path) -> str:
    parts = rel.parts
    if len(parts) > 1 and "." in parts[0] and not parts[0].startswith("."):
        return normalise_url("https://" + "/".join(parts))
    return normalise_url(f"https://{FALLBACK_HOST}/" + "/".join(parts))


class Corpus:
    """A local document collection indexed for search (see the module docs).

    ``Corpus(path)`` reads and indexes ``path`` (seconds for thousands of documents, in
    memory). Raises UserError naming the file (and line) for an unreadable file, a JSONL line
    that is not a document, or a collection with no document.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise UserError(f"--web corpus: no such file or folder: {self.path}")
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(url UNINDEXED, title, text, "
            "tokenize='porter unicode61')"
        )
        self._db.execute(
            "CREATE TABLE pages (url TEXT PRIMARY KEY, content_type TEXT, body BLOB, "
            "published TEXT, doc INTEGER)"
        )
        files = [self.path] if self.path.is_file() else sorted(self.path.rglob("*"))
        inside = self.path.resolve()
        if self.path.is_dir():
            _refuse_hard_links_out(files)
        for file in files:
            if not file.is_file() or any(p.startswith(".") for p in file.parts[-1:]):
                continue  # (folders, FIFOs, devices, hidden files)
            if self.path.is_dir() and not file.resolve().is_relative_to(inside):
                # a corpus's pages reach the agent: a link out of it would hand the agent any
                # file of this machine (/etc/shadow, a .env) as a web page (helper-134)
                raise UserError(
                    f"{file}: a link out of the corpus folder (to {file.resolve()}): refused"
                )
            try:
                str(file).encode("utf-8")
            except UnicodeEncodeError:
                raise UserError(f"{file!r}: a corpus file name must be UTF-8 text") from None
            if file.suffix.lower() == ".jsonl":
                self._add_jsonl(file)
            elif file.suffix.lower() in FILE_TYPES and self.path.is_dir():
                self._add_file(file)
        self._db.commit()
        if len(self) == 0:
            raise UserError(
                f"--web corpus: {self.path}: no documents (JSONL lines with a url, or "
                f"{', '.join(sorted(FILE_TYPES))} files)"
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM pages").fetchone()[0]

    def _add(
        self, url: str, title: str, text: str, body: bytes, ctype: str, published: str | None
    ) -> None:
        cur = self._db.execute(
            "INSERT INTO docs (url, title, text) VALUES (?, ?, ?)", (url, title, text)
        )
        self._db.execute(
            "INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?)",
            (url, ctype, body, published, cur.lastrowid),
        )

    def _add_file(self, file: Path) -> None:
        ctype = FILE_TYPES[file.suffix.lower()]
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise UserError(f"{file}: cannot read corpus file: {exc.strerror}") from None
        title, text = _text_of(raw.decode("utf-8", errors="replace"), ctype)
        url = _file_url(file.relative_to(self.path))
        self._add(url, title or file.stem, text, raw, ctype, None)
        if file.name.lower() in ("index.html", "index.htm"):
            folder = url[: -len(file.name)]
            self._db.execute(
                "INSERT OR IGNORE INTO pages SELECT ?, content_type, body, published, doc "
                "FROM pages WHERE url = ?",
                (folder, url),
            )

    def _add_jsonl(self, file: Path) -> None:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{file}: cannot read corpus file: {exc}") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise UserError(f"{file}:{n}: not JSON: {exc}") from None
            except RecursionError:
                raise UserError(f"{file}:{n}: not JSON: nested too deeply") from None
            if not isinstance(doc, dict):
                raise UserError(f"{file}:{n}: a document must be a JSON object")
            url = doc.get("url")
            if not isinstance(url, str) or _scheme(url) not in ("http", "https"):
                raise UserError(f"{file}:{n}: url: an http(s) URL is required, got {url!r}")
            try:
                key = normalise_url(url)
            except ValueError as exc:  # a port out of range, a broken [IPv6] host
                raise UserError(f"{file}:{n}: url: not a URL ({exc}): {url!r}") from None
            html = doc.get("html")
            text = doc.get("text", doc.get("contents", doc.get("body")))
            if not isinstance(html, str) and not isinstance(text, str):
                raise UserError(f"{file}:{n}: text: a document needs `text` or `html`")
            for name in ("content_type", "title", "published"):
                if doc.get(name) is not None and not isinstance(doc[name], str):
                    raise UserError(f"{file}:{n}: {name}: text is required, got {doc[name]!r}")
            ctype = doc.get("content_type") or (
                "text/html" if isinstance(html, str) else "text/plain"
            )
            body: str = html if isinstance(html, str) else str(text)
            texts = {"url": url, "text": body}
            texts |= {k: doc.get(k) or "" for k in ("title", "content_type", "published")}
            for name, value in texts.items():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate escape ("\ud800") JSON allows
                    raise UserError(
                        f"{file}:{n}: {name}: holds a lone surrogate (\\ud800-\\udfff), "
                        "which no UTF-8 text can"
                    ) from None
            title, plain = _text_of(body, ctype)
            self._add(
                key,
                str(doc.get("title") or title),
                plain,
                body.encode("utf-8"),
                ctype,
                doc.get("published"),
            )

    def search(self, query: str, count: int = 5) -> list[dict[str, Any]]:
        """The best ``count`` documents for ``query`` as web_search results
        (``{"title", "url", "description", "published"}``), best first."""
        words = re.findall(r"\w+", query.lower())
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', "") + '"' for w in words)
        with self._lock:
            rows = self._db.execute(
                "SELECT docs.url, docs.title, snippet(docs, 2, '', '', '...', 24), p.published "
                "FROM docs JOIN pages p ON p.doc = docs.rowid AND p.url = docs.url "
                "WHERE docs MATCH ? ORDER BY bm25(docs, 0.0, 2.0, 1.0), docs.url LIMIT ?",
                (match, int(count)),
            ).fetchall()
        return [
            {"title": title, "url": url, "description": " ".join(snip.split()), "published": pub}
            for url, title, snip, pub in rows
        ]

    def page(self, url: str) -> tuple[str, bytes] | None:
        """(content type, body) of the document at ``url``, or None when it is not held."""
        try:
            key = normalise_url(url)
        except ValueError:  # a port out of range, a broken [IPv6] host: no page has it
            return None
        with self._lock:
            row = self._db.execute(
                "SELECT content_type, body FROM pages WHERE url = ?", (key,)
            ).fetchone()
        return (row[0], bytes(row[1])) if row else None
