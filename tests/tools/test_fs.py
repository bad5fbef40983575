"""read, edit and write through Toolset.call in a real bwrap sandbox."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

from clawrig.testing.paths import SHARED


def png_bytes(width: int = 2, height: int = 1) -> bytes:
    """A valid RGB PNG built by hand (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


# -- read ----------------------------------------------------------------------------------


async def test_read_returns_the_text_as_is(call, workspace: Path) -> None:
    (workspace / "notes.md").write_text("hello\nwörld\n", encoding="utf-8")
    r = await call("read", {"path": "/tmp_workspace/notes.md"})
    assert not r.is_error
    assert r.text == "hello\nwörld\n"
    # relative paths are under /tmp_workspace; every alias works
    for alias in ("path", "file_path", "filePath", "file"):
        r = await call("read", {alias: "notes.md"})
        assert r.text == "hello\nwörld\n", alias
    # a file without a final newline stays without one
    (workspace / "nonl.txt").write_text("a\nb")
    assert (await call("read", {"path": "nonl.txt"})).text == "a\nb"


async def test_read_offset_and_limit(call, workspace: Path) -> None:
    (workspace / "ten.txt").write_text("".join(f"l{i}\n" for i in range(1, 11)))
    r = await call("read", {"path": "ten.txt", "offset": 3, "limit": 2})
    assert r.text == "l3\nl4\n\n[6 more lines in file. Use offset=5 to continue.]"
    r = await call("read", {"path": "ten.txt", "offset": 9})
    assert r.text == "l9\nl10\n"
    r = await call("read", {"path": "ten.txt", "limit": 10})
    assert r.text == "".join(f"l{i}\n" for i in range(1, 11))
    r = await call("read", {"path": "ten.txt", "offset": 11})
    assert r.is_error
    assert r.text == "read: offset 11 is beyond the end of the file (10 lines total)"
    r = await call("read", {"path": "ten.txt", "offset": 0})
    assert r.is_error and "`offset` must be a whole number >= 1" in r.text
    r = await call("read", {"path": "ten.txt", "limit": 2.5})
    assert r.is_error and "`limit` must be a whole number >= 1" in r.text


async def test_read_truncates_at_2000_lines(call, workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 2501)))
    r = await call("read", {"path": "long.txt"})
    body, note = r.text.split("\n\n[")
    assert body.split("\n") == [f"line {i}" for i in range(1, 2001)]
    assert note == "Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"
    assert r.details == {"truncated": True, "truncatedBy": "lines"}
    rest = await call("read", {"path": "long.txt", "offset": 2001})
    assert rest.text == "".join(f"line {i}\n" for i in range(2001, 2501))


async def test_read_truncates_at_50_kb(call, workspace: Path) -> None:
    # 100 lines of 1000 bytes: 51 lines take 51*1000 + 50 newlines = 51,050 bytes <= 51,200;
    # a 52nd would make 52,051.
    (workspace / "wide.txt").write_text("".join("x" * 1000 + "\n" for _ in range(100)))
    r = await call("read", {"path": "wide.txt"})
    body, note = r.text.split("\n\n[")
    assert body == "\n".join(["x" * 1000] * 51)
    assert note == "Showing lines 1-51 of 100 (50 KB limit). Use offset=52 to continue.]"
    # one line over 50 KB alone: say how to get it
    (workspace / "one.txt").write_text("y" * 60000)
    r = await call("read", {"path": "one.txt"})
    assert not r.is_error
    assert r.text == (
        "[Line 1 is 58.6 KB, over the 50 KB read limit. "
        "Use exec: sed -n '1p' one.txt | head -c 51200]"
    )


async def test_read_large_file_is_windowed_in_the_sandbox(call, workspace: Path) -> None:
    # over the 8 MiB whole-file cap: counted and cut with wc/tail/head inside the sandbox
    n = 800_000
    with open(workspace / "huge.log", "w") as fh:
        for i in range(1, n + 1):
            fh.write(f"row {i:07d}\n")  # 12 bytes a line: 9.6 MB
    r = await call("read", {"path": "huge.log", "offset": 500_000, "limit": 3})
    assert r.text == (
        "row 0500000\nrow 0500001\nrow 0500002\n\n"
        "[299998 more lines in file. Use offset=500003 to continue.]"
    )
    r = await call("read", {"path": "huge.log", "offset": n - 1})
    assert r.text == f"row {n - 1:07d}\nrow {n:07d}\n"
    r = await call("read", {"path": "huge.log", "offset": n + 1})
    assert r.is_error and f"({n} lines total)" in r.text


async def test_read_errors(call, workspace: Path) -> None:
    r = await call("read", {"path": "missing.txt"})
    assert r.is_error and r.text == "read: File not found: missing.txt"
    (workspace / "sub").mkdir()
    r = await call("read", {"path": "sub"})
    assert r.is_error and r.text.startswith("read: sub is a directory")
    r = await call("read", {})
    assert r.is_error and r.text == "read: missing required argument `path` (the file to read)"


async def test_read_image(call, ctx, workspace: Path) -> None:
    data = png_bytes()
    (workspace / "dot.png").write_bytes(data)
    r = await call("read", {"path": "dot.png"})
    assert not r.is_error and not r.images
    assert r.text.startswith("dot.png is an image (image/png). This model cannot see images")
    ctx.can_see_images = True
    r = await call("read", {"path": "dot.png"})
    assert r.text == "Read image file [image/png]"
    assert r.images == [{"data": base64.b64encode(data).decode(), "mimeType": "image/png"}]


async def test_files_are_the_sandbox_files_not_the_host_files(call, tmp_path: Path) -> None:
    # /tmp inside the sandbox is private: writing there leaves the host's /tmp alone
    name = f"clawrig-tools-{tmp_path.name}.txt"
    r = await call("write", {"path": f"/tmp/{name}", "content": "inside"})
    assert r.text == f"Successfully wrote 6 bytes to /tmp/{name}"
    assert not (Path("/tmp") / name).exists()
    assert (await call("read", {"path": f"/tmp/{name}"})).text == "inside"


# -- write ---------------------------------------------------------------------------------


async def test_write_golden_datapoint(call, workspace: Path) -> None:
    # the real four-folder sample 000015: its write call and the tool result it recorded
    dialog = json.loads((SHARED / "examples/fourfolder/datapoints/000015.json").read_text())[
        "formatted_dialog"
    ]
    calls = {tc["id"]: tc["function"] for m in dialog for tc in (m.get("tool_calls") or [])}
    writes = [
        (calls[m["tool_call_id"]], m["content"])
        for m in dialog
        if m["role"] == "tool" and m["name"] == "write"
    ]
    assert writes
    for fn, expected in writes:
        r = await call("write", fn["arguments"])  # the raw JSON string, as the model sent it
        assert r.text == expected  # "Successfully wrote 56 bytes to ..." (en dashes: 3 bytes)
        args = json.loads(fn["arguments"])
        host = workspace / args["path"].removeprefix("/tmp_workspace/")
        assert host.read_text(encoding="utf-8") == args["content"]


async def test_write_counts_utf8_bytes_and_creates_folders(call, workspace: Path) -> None:
    content = "€ and 日本\n"  # 3 + 5 + 6 + 1 bytes in UTF-8; 10 characters
    r = await call("write", {"file_path": "deep/er/out.txt", "content": content})
    assert r.text == "Successfully wrote 15 bytes to deep/er/out.txt"
    assert (workspace / "deep/er/out.txt").read_bytes() == content.encode("utf-8")
    r = await call("write", {"path": "deep/er/out.txt", "content": ""})
    assert r.text == "Successfully wrote 0 bytes to deep/er/out.txt"
    assert (workspace / "deep/er/out.txt").read_bytes() == b""


async def test_write_errors(call, workspace: Path) -> None:
    r = await call("write", {"content": "x"})
    assert r.is_error and r.text == "write: missing required argument `path` (the file to write)"
    (workspace / "adir").mkdir()
    r = await call("write", {"path": "adir", "content": "x"})
    assert r.is_error and r.text.startswith("write: adir is a directory")
    r = await call("write", {"path": "/usr/clawrig-nope.txt", "content": "x"})
    assert r.is_error
    assert r.text.startswith("write: Cannot access /usr/clawrig-nope.txt: ")
    assert "Read-only file system" in r.text


# -- edit ----------------------------------------------------------------------------------


async def test_edit_replaces_the_unique_match(call, workspace: Path) -> None:
    src = "def f():\n    return 1\n\ndef g():\n    return 2\n"
    (workspace / "m.py").write_text(src)
    r = await call(
        "edit", {"path": "m.py", "oldText": "    return 2\n", "newText": "    return 3\n"}
    )
    assert not r.is_error
    assert r.text == "Successfully replaced text in m.py."
    assert (workspace / "m.py").read_text() == src.replace("return 2", "return 3")
    assert "-    return 2" in r.details["diff"] and "+    return 3" in r.details["diff"]
    # the other spellings of the arguments
    r = await call(
        "edit",
        {"file_path": "/tmp_workspace/m.py", "old_string": "def g", "new_string": "def h"},
    )
    assert r.text == "Successfully replaced text in /tmp_workspace/m.py."
    assert "def h():" in (workspace / "m.py").read_text()


async def test_edit_requires_exactly_one_match(call, workspace: Path) -> None:
    src = "a = 1\nb = 1\n"
    (workspace / "v.py").write_text(src)
    r = await call("edit", {"path": "v.py", "oldText": "= 1", "newText": "= 2"})
    assert r.is_error
    assert r.text.startswith("Found 2 occurrences of the text in v.py. The text must be unique")
    r = await call("edit", {"path": "v.py", "oldText": "c = 1", "newText": "c = 2"})
    assert r.is_error
    assert r.text.startswith("Could not find the exact text in v.py.")
    assert (workspace / "v.py").read_text() == src  # untouched by the failed edits


async def test_edit_errors(call, workspace: Path) -> None:
    (workspace / "e.txt").write_text("abc")
    r = await call("edit", {"path": "e.txt", "newText": "x"})
    assert r.is_error and "missing required argument `oldText`" in r.text
    r = await call("edit", {"path": "e.txt", "oldText": "a"})
    assert r.is_error and "missing required argument `newText`" in r.text
    r = await call("edit", {"path": "e.txt", "oldText": "", "newText": "x"})
    assert r.is_error and "`oldText` must not be empty" in r.text
    r = await call("edit", {"path": "gone.txt", "oldText": "a", "newText": "b"})
    assert r.is_error and r.text == "edit: File not found: gone.txt"
    r = await call("edit", {"oldText": "a", "newText": "b"})
    assert r.is_error and "missing required argument `path`" in r.text


async def test_edit_keeps_crlf_line_ends(call, workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    r = await call("edit", {"path": "w.txt", "oldText": "one\ntwo", "newText": "1\n2"})
    assert r.text == "Successfully replaced text in w.txt."
    assert (workspace / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_diff_is_the_changed_lines_with_the_files_line_numbers(
    call, workspace: Path, monkeypatch
) -> None:
    """The diff is made from the changed lines and their context, not the whole file: a file
    of 300,000 repeated lines made difflib hold the harness's event loop for 64 s
    (helper-142). Its hunk numbers are still the file's."""
    import difflib

    compared: list[int] = []  # lines difflib was given, per call (the real difflib runs)
    real = difflib.unified_diff

    def counting(a, b, *args, **kwargs):  # type: ignore[no-untyped-def]
        compared.append(len(a) + len(b))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(difflib, "unified_diff", counting)
    text = "".join(f"l{i % 150}\n" for i in range(300_000)) + "UNIQUE\n" + "tail\n"
    (workspace / "big.txt").write_text(text)
    r = await call("edit", {"path": "big.txt", "oldText": "UNIQUE", "newText": "CHANGED"})
    assert not r.is_error, r.text
    assert compared == [8]  # the changed line and two of context each side, before and after
    assert (workspace / "big.txt").read_text() == text.replace("UNIQUE", "CHANGED")
    assert r.details["diff"] == (
        "--- big.txt\n+++ big.txt\n@@ -299999,4 +299999,4 @@\n"
        " l148\n l149\n-UNIQUE\n+CHANGED\n tail\n"
    )
    # a small file's diff: what difflib gives for the whole file
    small = "a\nb\nc\nd\ne\nf\ng\n"
    (workspace / "s.txt").write_text(small)
    r = await call("edit", {"path": "s.txt", "oldText": "d\ne\n", "newText": "D\n"})
    whole = difflib.unified_diff(
        small.splitlines(True), small.replace("d\ne\n", "D\n").splitlines(True),
        fromfile="s.txt", tofile="s.txt", n=2,
    )  # fmt: skip
    assert r.details["diff"] == "".join(whole)


async def test_edit_refuses_a_file_past_its_limit(call, workspace: Path) -> None:
    """A file larger than ``EDIT_CAP`` is the agent's to change with exec: edit held it whole
    in the harness's memory (1 GiB files took it to 1.47 GB: helper-142)."""
    from clawrig.tools.fs import EDIT_CAP

    with (workspace / "huge.txt").open("wb") as fh:
        fh.truncate(EDIT_CAP + 1)  # sparse: no disk
    r = await call("edit", {"path": "huge.txt", "oldText": "x", "newText": "y"})
    assert r.is_error
    assert r.text == (
        f"edit: huge.txt is larger than edit's {EDIT_CAP // 1024**2} MiB limit: change it with "
        "exec (sed, python) instead"
    )
