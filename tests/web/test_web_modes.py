"""The web modes end to end at the tool level, against the loopback web of conftest.py: live
Brave and Tavily shapes, record then replay (identical tool results, no request reaching the
server), replay misses (a tool error the agent sees, or live / empty; each counted), and the
local corpus (FTS5)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from web_helpers import BRAVE_KEY, TAVILY_KEY

from clawrig.errors import UserError
from clawrig.tools import ToolContext, Toolset, WebPolicy
from clawrig.web import WebService
from clawrig.web.records import BLOB_DIR, WEB_RECORD_FILE, normalise_url

TOOLS = Toolset("full")


async def call(ctx: ToolContext, name: str, args: dict) -> tuple[bool, str]:
    r = await TOOLS.call(ctx, name, json.dumps(args))
    return r.is_error, r.text


def trial_ctx(service: WebService, folder: Path | None, task: str = "t1", run: int = 0, **kw):
    policy = WebPolicy(mode=service.mode, allow_hosts=["127.0.0.1"], **kw)
    return ToolContext(sandbox=None, web=policy, web_backend=service.session(task, run, folder))  # type: ignore[arg-type]


@pytest.fixture
def brave_env(monkeypatch, web_server):
    monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)
    monkeypatch.setenv("CLAWRIG_BRAVE_ENDPOINT", f"{web_server.url}/res/v1/web/search")
    return web_server


CALLS = [
    ("web_search", {"query": "tern   release", "count": 3}),
    ("web_fetch", {"url": "/tern.html"}),
    ("web_fetch", {"url": "/notes.txt", "extractMode": "text"}),
    ("web_fetch", {"url": "/missing"}),
    ("web_search", {"query": "weather"}),
    ("web_fetch", {"url": "/tern.html", "maxChars": 100}),
]


def resolved(url: str, args: dict) -> dict:
    return {**args, "url": url + args["url"]} if "url" in args else args


async def test_live_brave_shape_and_results(brave_env) -> None:
    srv = brave_env
    ctx = trial_ctx(WebService("live"), None)
    err, text = await call(ctx, "web_search", {"query": "tern  release", "count": 3})
    assert not err, text
    assert json.loads(text) == {
        "query": "tern release",
        "provider": "brave",
        "results": [
            {
                "title": "Tern 4.2 release",
                "url": f"{srv.url}/tern.html",
                "description": "Tern 4.2 was released in March.",
                "published": "March 2, 2026",
            },
            {
                "title": "Tern changelog",
                "url": f"{srv.url}/notes.txt",
                "description": "Offline mode and purge.",
                "published": "March 2, 2026",
            },
        ],
    }
    assert srv.requests[-1] == {
        "api": "brave",
        "params": {"q": "tern release", "count": "3"},
        "token": BRAVE_KEY,
    }


async def test_live_tavily_shape(monkeypatch, web_server) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", TAVILY_KEY)
    monkeypatch.setenv("CLAWRIG_TAVILY_ENDPOINT", f"{web_server.url}/search")
    ctx = trial_ctx(WebService("live", provider="tavily"), None, search_provider="tavily")
    err, text = await call(ctx, "web_search", {"query": "changelog", "count": 2})
    assert not err, text
    assert json.loads(text)["results"] == [
        {
            "title": "Tern changelog",
            "url": f"{web_server.url}/notes.txt",
            "description": "Offline mode and purge.",
            "published": None,
        }
    ]
    assert json.loads(text)["provider"] == "tavily"
    assert web_server.requests[-1] == {
        "api": "tavily",
        "body": {"query": "changelog", "max_results": 2, "search_depth": "basic"},
        "token": f"Bearer {TAVILY_KEY}",
    }
    monkeypatch.setenv("TAVILY_API_KEY", "wrong")
    err, text = await call(ctx, "web_search", {"query": "changelog"})
    assert err and text.startswith("web_search: Tavily answered HTTP 401: ")


async def test_record_then_replay_gives_identical_results_without_network(
    brave_env, tmp_path
) -> None:
    srv = brave_env
    rec_job = tmp_path / "rec"
    recorder = WebService("record", output=rec_job)
    live = []
    for run in (0, 1):
        ctx = trial_ctx(recorder, rec_job / "t1" / f"trial{run}", run=run)
        live.append([await call(ctx, n, resolved(srv.url, a)) for n, a in CALLS])
    assert live[0] == live[1]
    assert live[0][3] == (True, f"web_fetch: {srv.url}/missing answered HTTP 404: no such page")
    lines = [
        json.loads(x)
        for x in (rec_job / "t1" / "trial0" / WEB_RECORD_FILE).read_text().splitlines()
    ]
    assert [(x["kind"], x["task_id"], x["run_index"]) for x in lines] == [
        ("search", "t1", 0),
        ("fetch", "t1", 0),
        ("fetch", "t1", 0),
        ("fetch", "t1", 0),
        ("search", "t1", 0),
        ("fetch", "t1", 0),
    ]
    # bodies are content-addressed: the page body's own SHA-256 names its blob, stored once
    page = b"<html><head><title>Tern 4.2</title></head><body><h1>Tern 4.2</h1>"
    page += b"<p>Released on 2026-03-02 with offline mode.</p></body></html>"
    digest = hashlib.sha256(page).hexdigest()
    assert lines[1]["response"]["body_sha256"] == digest
    assert (rec_job / BLOB_DIR / digest).read_bytes() == page
    blobs = sorted(p.name for p in (rec_job / BLOB_DIR).iterdir())
    assert len(blobs) == len({x["response"]["body_sha256"] for x in lines})

    seen = len(srv.requests)
    replayer = WebService("replay", source=rec_job, output=tmp_path / "rep")
    for run in (0, 1):
        ctx = trial_ctx(replayer, tmp_path / "rep" / "t1" / f"r{run}", run=run)
        assert [await call(ctx, n, resolved(srv.url, a)) for n, a in CALLS] == live[run]
    assert len(srv.requests) == seen  # nothing reached the network
    # the replayed job recorded what it served: it replays too
    again = WebService("replay", source=tmp_path / "rep")
    ctx = trial_ctx(again, None)
    assert await call(ctx, *CALLS[0]) == live[0][0]


async def test_a_broken_recording_is_one_error_before_any_trial(brave_env, tmp_path) -> None:
    """helper-134: a record whose response is no object, a file that is not UTF-8, a digest
    that names no blob (or a path) were tracebacks, or a trial's failed web_fetch scored 0."""
    srv = brave_env
    rec_job = tmp_path / "rec"
    recorder = WebService("record", output=rec_job)
    name, args = CALLS[1]
    await call(trial_ctx(recorder, rec_job / "t1" / "trial0"), name, resolved(srv.url, args))
    records = rec_job / "t1" / "trial0" / WEB_RECORD_FILE
    (good,) = records.read_text().splitlines()
    digest = json.loads(good)["response"]["body_sha256"]
    assert WebService("replay", source=rec_job).records is not None  # as recorded: it reads

    def replay_error(text: bytes) -> str:
        records.write_bytes(text)
        with pytest.raises(UserError) as info:
            WebService("replay", source=rec_job)
        return str(info.value)

    line = json.loads(good)
    said = replay_error(json.dumps({**line, "response": [1, 2]}).encode() + b"\n")
    assert said == f"{records}:1: not a web record (TypeError: response: not a JSON object)"
    said = replay_error(good.encode() + b"\n\xff\n")
    assert said.startswith(f"{records}: cannot read the web records (")
    resp = {**line["response"], "body_sha256": "/etc/shadow"}
    said = replay_error(json.dumps({**line, "response": resp}).encode() + b"\n")
    assert said == f"{records}:1: response.body_sha256: not a SHA-256 digest: '/etc/shadow'"
    for field, value, why in (  # values a trial could not serve: a traceback, the agent's 0
        ("status", "abc", "status: not an HTTP status: 'abc'"),
        ("provider", 7, "provider: not a search provider clawrig has: 7"),
        ("error", {"a": 1}, "error: text is required, got {'a': 1}"),
        ("content_type", [1], "content_type: text is required, got [1]"),
        ("charset", "no-such-charset", "charset: not a character set: 'no-such-charset'"),
        ("provider", [1], "provider: not a search provider clawrig has: [1]"),  # (helper-138)
        ("charset", "utf\x00", "charset: not a character set: 'utf\\x00'"),
    ):
        resp = {**line["response"], field: value}
        said = replay_error(json.dumps({**line, "response": resp}).encode() + b"\n")
        assert said == f"{records}:1: response.{why}"
    (rec_job / BLOB_DIR / digest).unlink()
    os.mkfifo(rec_job / BLOB_DIR / digest)  # (reading it hung the job's start)
    said = replay_error(good.encode() + b"\n")
    assert said.endswith("the recorded body is missing or altered")
    (rec_job / BLOB_DIR / digest).unlink()
    said = replay_error(good.encode() + b"\n")
    assert said == (
        f"{records}:1: response.body_sha256: {rec_job / BLOB_DIR / digest}: the recorded body "
        "is missing or altered"
    )


async def test_replay_miss_is_a_tool_error_or_follows_web_miss(brave_env, tmp_path) -> None:
    srv = brave_env
    rec_job = tmp_path / "rec"
    ctx = trial_ctx(WebService("record", output=rec_job), rec_job / "t1" / "a")
    await call(ctx, "web_search", {"query": "tern"})
    seen = len(srv.requests)

    # the URL and query are the model's choice: a miss is a tool error it sees (its outcome),
    # never an exception that voids the trial; each miss is counted
    rep = tmp_path / "rep0"
    ctx = trial_ctx(WebService("replay", source=rec_job, output=rep), rep / "t1" / "a")
    err, text = await call(ctx, "web_search", {"query": "tern docs"})
    assert err and text == (
        "web_search: no recorded search for 'tern docs': this run's web is a recording "
        "(--web replay)"
    )
    err, text = await call(ctx, "web_fetch", {"url": f"{srv.url}/notes.txt"})
    assert err and text == (
        f"web_fetch: no recorded page for {srv.url}/notes.txt: this run's web is a recording "
        "(--web replay)"
    )
    err, _ = await call(ctx, "web_search", {"query": "tern"})  # recorded: served
    assert not err
    assert ctx.web_backend.misses == ["search 'tern docs'", f"page {srv.url}/notes.txt"]
    # a miss is not recorded as served: replaying this replayed job misses it again
    assert "notes.txt" not in (rep / "t1" / "a" / WEB_RECORD_FILE).read_text()

    ctx = trial_ctx(WebService("replay", source=rec_job, miss="empty"), None)
    err, text = await call(ctx, "web_search", {"query": "tern docs"})
    assert not err and json.loads(text)["results"] == []
    err, text = await call(ctx, "web_fetch", {"url": f"{srv.url}/notes.txt"})
    assert err and text == f"web_fetch: {srv.url}/notes.txt answered HTTP 404: not recorded"
    assert len(ctx.web_backend.misses) == 2
    assert len(srv.requests) == seen

    out = tmp_path / "rep"
    ctx = trial_ctx(WebService("replay", source=rec_job, miss="live", output=out), out / "t1" / "b")
    err, text = await call(ctx, "web_fetch", {"url": f"{srv.url}/notes.txt"})
    assert not err and json.loads(text)["text"] == "tern changelog: offline mode, purge --apply"
    assert srv.requests[-1] == {"api": "page", "path": "/notes.txt"}
    assert "notes.txt" in (out / "t1" / "b" / WEB_RECORD_FILE).read_text()
    assert ctx.web_backend.misses == [f"page {srv.url}/notes.txt"]


def test_bad_web_options_are_one_line_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="--web: unknown mode 'sometimes'"):
        WebService("sometimes")
    with pytest.raises(UserError, match="--web replay: give its folder with --web-dir DIR"):
        WebService("replay")
    with pytest.raises(UserError, match="--web replay: no such job folder"):
        WebService("replay", source=tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no recorded web calls"):
        WebService("replay", source=tmp_path / "empty")
    with pytest.raises(UserError, match="--web-miss: choose from error, live, empty"):
        WebService("live", miss="maybe")
    assert (
        normalise_url("HTTPS://Docs.Example.org:443/a?b=1#frag") == "https://docs.example.org/a?b=1"
    )


def write_corpus(root: Path) -> Path:
    site = root / "docs.tern.example" / "guide"
    site.mkdir(parents=True)
    (site / "index.html").write_text(
        "<html><head><title>Tern guide</title></head><body><h1>Tern guide</h1>"
        "<p>Use purge --apply to purge shares. Purge is final.</p></body></html>"
    )
    (root / "notes").mkdir()
    (root / "notes" / "weather.md").write_text("# Weather\n\nRain in Lisbon on Tuesday.\n")
    (root / "wiki.jsonl").write_text(
        json.dumps({"url": "https://wiki.example/Tern", "title": "Tern (software)",
                    "text": "Tern is a backup tool. Version 4.2 added offline mode."}) + "\n"
        + json.dumps({"url": "https://wiki.example/Arctic_tern", "title": "Arctic tern",
                      "text": "A seabird that migrates from pole to pole."}) + "\n"
    )  # fmt: skip
    return root


async def test_corpus_finds_documents_by_content_and_serves_them(tmp_path) -> None:
    corpus = WebService("corpus", source=write_corpus(tmp_path / "corpus"))
    assert len(corpus.corpus) == 5  # 4 documents, the guide also under its folder URL
    ctx = ToolContext(
        sandbox=None, web=WebPolicy(mode="corpus"), web_backend=corpus.session("t", 0, None)
    )  # type: ignore[arg-type]
    err, text = await call(ctx, "web_search", {"query": "how to purge shares"})
    found = json.loads(text)
    assert not err and found["provider"] == "corpus"
    # any word matches: the guide (purge, shares, to) ranks above "pole to pole" (to)
    assert [r["url"] for r in found["results"]] == [
        "https://docs.tern.example/guide/index.html",
        "https://wiki.example/Arctic_tern",
    ]
    assert "purge --apply" in found["results"][0]["description"]
    err, text = await call(ctx, "web_search", {"query": "offline mode"})
    assert [r["url"] for r in json.loads(text)["results"]] == ["https://wiki.example/Tern"]
    err, text = await call(ctx, "web_search", {"query": "rain lisbon"})
    assert [r["title"] for r in json.loads(text)["results"]] == ["Weather"]
    assert json.loads(text)["results"][0]["url"] == "https://corpus.invalid/notes/weather.md"
    # "tern" is in three titles (all two words long) but only two texts: Arctic tern is last
    err, text = await call(ctx, "web_search", {"query": "tern", "count": 5})
    urls = [r["url"] for r in json.loads(text)["results"]]
    assert sorted(urls[:2]) == [
        "https://docs.tern.example/guide/index.html",
        "https://wiki.example/Tern",
    ]
    assert urls[2:] == ["https://wiki.example/Arctic_tern"]
    err, text = await call(ctx, "web_fetch", {"url": "https://docs.tern.example/guide/"})
    page = json.loads(text)
    assert not err and page["title"] == "Tern guide"
    assert page["text"] == "# Tern guide\n\nUse purge --apply to purge shares. Purge is final."
    err, text = await call(ctx, "web_fetch", {"url": "https://wiki.example/Nope"})
    assert (
        err and text == "web_fetch: https://wiki.example/Nope answered HTTP 404: not in the corpus"
    )


def test_corpus_errors_name_the_file_and_line(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "https://a.example/", "text": "x"}\n{"title": "no url"}\n')
    with pytest.raises(UserError, match=rf"{bad}:2: url: an http\(s\) URL is required"):
        WebService("corpus", source=bad)
    (tmp_path / "none").mkdir()
    with pytest.raises(UserError, match="no documents"):
        WebService("corpus", source=tmp_path / "none")


def test_a_link_out_of_the_corpus_is_refused(tmp_path) -> None:
    """helper-134 (high): a corpus file linked to /etc/shadow was indexed and served to the
    agent by web_fetch and web_search. A link within the corpus is a page as any other."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:HASH-OF-THE-HOSTS-ROOT\n")
    corpus = write_corpus(tmp_path / "corpus")
    (corpus / "notes" / "same.md").symlink_to(corpus / "notes" / "weather.md")
    assert len(WebService("corpus", source=corpus).corpus) == 6
    link = corpus / "docs.tern.example" / "guide" / "notes.txt"
    link.symlink_to(secret)
    with pytest.raises(UserError) as info:
        WebService("corpus", source=corpus)
    assert str(info.value) == f"{link}: a link out of the corpus folder (to {secret}): refused"
    link.unlink()
    os.link(corpus / "notes" / "weather.md", corpus / "notes" / "again.md")  # both inside: a page
    assert len(WebService("corpus", source=corpus).corpus) == 7
    os.link(secret, link)  # a hard link to a file outside (helper-137)
    with pytest.raises(UserError, match=r"a hard link to a file outside the corpus folder"):
        WebService("corpus", source=corpus)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ({"url": "https://a.example/", "text": "x", "content_type": 5}, "content_type: text is"),
        ({"url": "https://a.example/", "text": "x", "published": {"a": 1}}, "published: text is"),
        ({"url": "https://a.example:99999/", "text": "x"}, "url: not a URL (Port out of range"),
        ({"url": "http://[abc/", "text": "x"}, "url: an http(s) URL is required"),
        ({"url": "https://a.example/", "text": "x\ud800"}, "text: holds a lone surrogate"),
        ({"url": "https://a.example/", "text": "x", "published": "\ud800"}, "published: holds a"),
        ({"url": "https://a.example/", "text": "x", "content_type": "\udfff"}, "content_type: "),
    ],
)
def test_a_corpus_line_with_a_bad_field_is_one_error_naming_it(tmp_path, line, said) -> None:
    """helper-134: each of these was a traceback (AttributeError, ValueError, sqlite3's
    ProgrammingError, UnicodeEncodeError) from `clawrig run --web corpus`."""
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"url": "https://b.example/", "text": "fine"})
    bad.write_text(good + "\n" + json.dumps(line) + "\n")  # (json.dumps escapes \ud800)
    with pytest.raises(UserError) as info:
        WebService("corpus", source=bad)
    assert str(info.value).startswith(f"{bad}:2: {said}"), str(info.value)


def test_a_corpus_nested_too_deeply_is_one_error(tmp_path) -> None:
    bad = tmp_path / "deep.jsonl"
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(UserError, match=rf"^{bad}:1: not JSON: nested too deeply$"):
        WebService("corpus", source=bad)


def test_run_web_flags_are_checked_before_any_sandbox(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path as P

    from clawrig.testing.paths import REPO

    clawrig = str(P(sys.executable).with_name("clawrig"))
    demo = str(REPO / "suites" / "demo")
    cases = [
        (["--web", "sometimes"], "'--web': 'sometimes' is not one of 'off', 'live', 'record'"),
        (["--web", "replay"], "--web replay: give its folder with --web-dir DIR"),
        (["--web", "corpus", "--web-dir", str(tmp_path / "nope")], "--web corpus: no such file"),
        (["--web", "live", "--web-provider", "bing"], "'bing' is not one of 'brave', 'tavily'"),
    ]
    for flags, message in cases:
        args = [clawrig, "run", demo, "--agent", "oracle", "-o", str(tmp_path / "o"), *flags]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], r.stderr
        assert not (tmp_path / "o").exists()
