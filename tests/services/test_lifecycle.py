"""Services in real bwrap sandboxes: endpoints, health failures, isolation between parallel
sandboxes, seeded faults, saved audits, and graders written the upstream way."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from pathlib import Path

import pytest

from clawrig.errors import SetupError
from clawrig.grading.programmatic import run_grader
from clawrig.sandbox import SandboxConfig
from clawrig.sandbox.bwrap import BwrapSandbox
from clawrig.services import (
    restart_services,
    save_audits,
    service_binds,
    start_services,
    stop_services,
)
from clawrig.spec.task import ServiceSpec

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

NOW = "2026-03-24T09:00:00"
GMAIL = {
    "kind": "gmail",
    "fixtures": {
        "now": NOW,
        "user": {"name": "Alex", "email": "alex@acme.example"},
        "messages": [
            {
                "id": "m1",
                "from": "Dana <dana@nw.example>",
                "subject": "Review",
                "date": "2026-03-23T16:05:00",
                "body": "Can we move it?",
            }
        ],
        "reactions": [
            {
                "when": {"to": "dana@nw.example", "contains": "friday"},
                "reply": {"from": "Dana <dana@nw.example>", "body": "Friday works."},
            }
        ],
    },
}
CALENDAR = {
    "kind": "calendar",
    "fixtures": {
        "now": NOW,
        "events": [
            {
                "id": "e1",
                "title": "Review",
                "start_time": "2026-03-25T11:00:00",
                "end_time": "2026-03-25T12:00:00",
                "attendees": ["dana@nw.example"],
            }
        ],
    },
}
CONTACTS = {
    "kind": "contacts",
    "fixtures": {"contacts": [{"id": "c1", "name": "Priya Raman", "email": "priya@nw.example"}]},
}
SLACK = {
    "kind": "slack",
    "fixtures": {
        "now": NOW,
        "channels": [{"name": "support"}],
        "messages": [
            {
                "id": "s1",
                "channel": "support",
                "from": "kenji",
                "content": "Webhooks?",
                "date": "2026-03-23T14:40:00",
            }
        ],
    },
}

# In-sandbox client: POSTs (method, url, body) triples with urllib, prints [status, body] each.
CLIENT = r"""
import json, sys, urllib.error, urllib.request
out = []
for method, url, body in json.loads(sys.argv[1]):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            out.append([r.status, json.loads(r.read()), r.headers.get("Retry-After")])
    except urllib.error.HTTPError as e:
        out.append([e.code, json.loads(e.read()), e.headers.get("Retry-After")])
print(json.dumps(out))
"""


async def call(sb: BwrapSandbox, *requests: tuple[str, str, object]) -> list[list]:
    r = await sb.exec(["python3", "-I", "-c", CLIENT, json.dumps(requests)])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


async def test_every_builtin_endpoint_answers_inside_the_sandbox(make_task, sandbox) -> None:
    task = make_task([GMAIL, CALENDAR, CONTACTS, SLACK])
    sb = await sandbox()
    handles = await start_services(sb, task)
    assert [(h.name, h.spec.port, h.mode) for h in handles] == [
        ("gmail", 9100, "live"),
        ("calendar", 9101, "live"),
        ("contacts", 9103, "live"),
        ("slack", 9110, "live"),
    ]
    g, c, k, s = (f"http://localhost:{p}" for p in (9100, 9101, 9103, 9110))
    out = await call(
        sb,
        ("GET", f"{g}/health", None),
        ("POST", f"{g}/gmail/messages", {"days_back": 7, "max_results": 5}),
        ("POST", f"{g}/gmail/messages/get", {"message_id": "m1"}),
        (
            "POST",
            f"{g}/gmail/send",
            {"to": "dana@nw.example", "subject": "Re: Review", "body": "Friday?"},
        ),
        ("POST", f"{c}/calendar/events", {"date": "2026-03-25", "days": 1}),
        (
            "POST",
            f"{c}/calendar/events/create",
            {
                "title": "Review",
                "start_time": "2026-03-27T10:00:00",
                "end_time": "2026-03-27T11:00:00",
                "attendees": ["dana@nw.example"],
                "location": "Room 4B",
            },
        ),
        ("POST", f"{k}/contacts/search", {"query": "priya"}),
        ("POST", f"{k}/contacts/get", {"contact_id": "c1"}),
        ("POST", f"{s}/slack/messages", {}),
        ("POST", f"{s}/slack/messages/get", {"message_id": "s1"}),
        ("POST", f"{s}/slack/send", {"to": "#support", "content": "Looking into it"}),
        (
            "POST",
            f"{s}/slack/drafts/save",
            {"to": "#support", "content": "Yes: invoice.paid", "reply_to_message_id": "s1"},
        ),
        ("GET", f"{g}/gmail/send", None),
        ("POST", f"{g}/gmail/unknown", {"x": 1}),
    )
    status = [o[0] for o in out]
    assert status == [200] * 12 + [405, 404]
    assert out[0][1] == {"status": "ok", "service": "gmail"}
    assert [m["id"] for m in out[1][1]["messages"]] == ["m1"]
    assert out[2][1]["body"] == "Can we move it?"
    assert out[3][1] == {"status": "sent", "message_id": "sent_001"}
    assert [e["id"] for e in out[4][1]["events"]] == ["e1"]
    assert out[5][1]["event_id"] == "evt_new_001" and out[5][1]["conflicts"] == []
    assert out[6][1]["contacts"] == [
        {"id": "c1", "name": "Priya Raman", "email": "priya@nw.example"}
    ]
    assert out[7][1]["name"] == "Priya Raman"
    assert [m["id"] for m in out[8][1]["messages"]] == ["s1"]
    assert out[9][1]["replies"] == []
    assert out[10][1] == {"status": "sent", "message_id": "slack_sent_001"}
    assert out[11][1] == {"status": "saved", "draft_id": "draft_001"}
    audits = await call(
        sb,
        *(
            ("GET", f"{u}/{n}/audit", None)
            for u, n in ((g, "gmail"), (c, "calendar"), (k, "contacts"), (s, "slack"))
        ),
    )
    gmail, calendar, contacts, slack = (a[1] for a in audits)
    assert [(x["endpoint"], x["status"]) for x in gmail["calls"]] == [
        ("/gmail/messages", 200),
        ("/gmail/messages/get", 200),
        ("/gmail/send", 200),
        ("/gmail/send", 405),
        ("/gmail/unknown", 404),
    ]
    assert gmail["calls"][2]["request_body"] == {
        "to": "dana@nw.example",
        "subject": "Re: Review",
        "body": "Friday?",
    }
    assert gmail["scripted_replies"][0]["message"]["body"] == "Friday works."
    assert [e["location"] for e in calendar["created_events"]] == ["Room 4B"]
    assert [x["endpoint"] for x in contacts["calls"]] == ["/contacts/search", "/contacts/get"]
    assert [d["reply_to_message_id"] for d in slack["drafts"]] == ["s1"]
    assert [m["content"] for m in slack["sent_messages"]] == ["Looking into it"]
    await stop_services(handles)


async def test_a_service_that_exits_gives_a_setup_error_with_its_log(make_task, sandbox) -> None:
    sb = await sandbox()
    task = make_task(
        [
            {
                "name": "crm",
                "port": 9200,
                "command": "echo 'crm: starting'; "
                "echo 'crm: cannot open /tmp_workspace/crm.db' >&2; exit 3",
            }
        ]
    )
    with pytest.raises(SetupError) as info:
        await start_services(sb, task)
    assert str(info.value) == (
        "command service 'crm' on port 9200 exited before answering its health check; its "
        "log ends: crm: cannot open /tmp_workspace/crm.db\n"  # the line the console shows
        "crm: starting\ncrm: cannot open /tmp_workspace/crm.db"
    )


async def test_bad_fixture_file_gives_the_service_log_and_frees_the_port(
    make_task, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "fixtures").mkdir(parents=True)
    (ws / "fixtures" / "gmail.json").write_text(json.dumps({"messages": [{"id": "m1"}]}))
    sb = await sandbox(ws)
    task = make_task([{"kind": "gmail", "fixtures": "fixtures/gmail.json"}, CALENDAR])
    with pytest.raises(SetupError) as info:
        await start_services(sb, task)
    assert str(info.value) == (
        "gmail service 'gmail' on port 9100 exited before answering its health check; its "
        "log ends: clawrig mock gmail: bad fixtures: messages[0]: missing 'date'\n"
        "clawrig mock gmail: bad fixtures: messages[0]: missing 'date'"
    )
    # the calendar started with it was stopped: its port is free again
    handles = await start_services(sb, make_task([GMAIL, CALENDAR]))
    assert len(handles) == 2


async def test_a_fixture_file_that_is_a_folder_is_a_setup_error(
    make_task, sandbox, tmp_path: Path
) -> None:
    """The task's fault, named, not retried: it was an infrastructure error
    (IsADirectoryError), which --resume runs again (helper-118)."""
    ws = tmp_path / "ws"
    (ws / "fixtures" / "gmail.json").mkdir(parents=True)
    sb = await sandbox(ws)
    with pytest.raises(SetupError) as info:
        await start_services(sb, make_task([{"kind": "gmail", "fixtures": "fixtures/gmail.json"}]))
    assert str(info.value) == (
        "service gmail: fixtures file /tmp_workspace/fixtures/gmail.json is a folder"
    )


def test_fixture_files_read_on_the_host_stay_in_the_workspace(make_task, tmp_path: Path) -> None:
    """:func:`read_fixture_files` (re-grading's and verify's fixtures): a file of the
    workspace is read; a link out of it, a link loop, a folder and a missing file are None
    (re-grading then says "not found"), never a host file nor an exception."""
    from clawrig.services import read_fixture_files

    ws = tmp_path / "ws"
    (ws / "f" / "dir.json").mkdir(parents=True)
    (ws / "f" / "ok.json").write_text('{"messages": []}')
    secret = tmp_path / "secret.json"
    secret.write_text('{"host": 1}')
    (ws / "f" / "out.json").symlink_to(secret)
    (ws / "f" / "loop.json").symlink_to(ws / "f" / "loop.json")
    names = ["ok", "out", "loop", "dir", "missing"]
    task = make_task(
        [
            {"name": n, "kind": "gmail", "port": 9400 + i, "fixtures": f"f/{n}.json"}
            for i, n in enumerate(names)
        ]
    )
    got = read_fixture_files(task, ws)
    assert got == {
        "/tmp_workspace/f/ok.json": b'{"messages": []}',
        **{f"/tmp_workspace/f/{n}.json": None for n in names[1:]},
    }


async def test_a_service_that_never_listens_times_out_with_its_log(make_task, sandbox) -> None:
    sb = await sandbox()
    task = make_task([{"name": "slow", "port": 9300, "command": "echo warming up; sleep 60"}])
    with pytest.raises(SetupError) as info:
        await start_services(sb, task, timeout_s=1)
    assert str(info.value) == (
        "command service 'slow' on port 9300 did not answer GET /health within 1 s; its "
        "log ends: warming up\nwarming up"
    )


async def test_missing_services_env_is_named(make_task, tmp_path: Path) -> None:
    async with BwrapSandbox(SandboxConfig(workspace_dir=tmp_path / "ws")) as sb:
        with pytest.raises(SetupError) as info:
            await start_services(sb, make_task([GMAIL]))
    assert "the services environment is not in the sandbox" in str(info.value)
    assert "add clawrig.services.service_binds(task) to SandboxConfig.binds" in str(info.value)


async def test_service_binds_only_for_builtin_services(make_task, services_env_path: Path) -> None:
    assert await service_binds(make_task([])) == []
    assert await service_binds(make_task([{"name": "x", "command": "true", "port": 9}])) == []
    (bind,) = await service_binds(make_task([SLACK]))
    assert bind.source == services_env_path and bind.read_only
    assert bind.dest == f"/opt/clawrig-env/{services_env_path.name}"


async def test_parallel_sandboxes_have_their_own_state_on_the_same_port(
    make_task, sandbox, tmp_path: Path
) -> None:
    task = make_task([GMAIL])
    a, b = await sandbox(tmp_path / "a"), await sandbox(tmp_path / "b")
    await asyncio.gather(start_services(a, task), start_services(b, task))
    url = "http://127.0.0.1:9100/gmail/send"
    await asyncio.gather(
        call(a, ("POST", url, {"to": "ann@x.example", "subject": "A", "body": "from a"})),
        call(
            b,
            ("POST", url, {"to": "bob@x.example", "subject": "B", "body": "from b"}),
            ("POST", url, {"to": "bob@x.example", "subject": "B2", "body": "again"}),
        ),
    )
    assert await save_audits(a, task) == {"gmail": "saved"}
    assert await save_audits(b, task) == {"gmail": "saved"}
    audit_a = json.loads((tmp_path / "a/.services/gmail/audit.json").read_text())
    audit_b = json.loads((tmp_path / "b/.services/gmail/audit.json").read_text())
    assert [(m["id"], m["to"]) for m in audit_a["sent_messages"]] == [
        ("sent_001", ["ann@x.example"])
    ]
    assert [(m["id"], m["subject"]) for m in audit_b["sent_messages"]] == [
        ("sent_001", "B"),
        ("sent_002", "B2"),
    ]


async def test_faults_are_seeded_and_reproducible(make_task, sandbox, tmp_path: Path) -> None:
    spec = dict(GMAIL, faults={"error_rate": 0.5, "status_codes": [429, 500], "seed": 5})
    task = make_task([spec])
    rng = random.Random(5)
    expected = [(rng.choice([429, 500]) if rng.random() < 0.5 else 200) for _ in range(12)]
    assert 200 in expected and 429 in expected and 500 in expected
    runs = []
    for name in ("one", "two"):
        sb = await sandbox(tmp_path / name)
        await start_services(sb, task)
        out = await call(sb, *[("POST", "http://127.0.0.1:9100/gmail/messages", {})] * 12)
        runs.append(out)
        # health and audit are never faulted
        (audit,) = await call(sb, ("GET", "http://127.0.0.1:9100/gmail/audit", None))
        assert [c["status"] for c in audit[1]["calls"]] == expected
        assert [c["fault"] for c in audit[1]["calls"]] == [s != 200 for s in expected]
    assert [o[0] for o in runs[0]] == [o[0] for o in runs[1]] == expected
    assert {o[2] for o in runs[0] if o[0] == 429} == {"1"}  # Retry-After on a 429


async def test_audit_is_saved_after_the_agent_and_hidden_before(
    make_task, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    sb = await sandbox(ws)
    task = make_task([GMAIL, SLACK])
    handles = await start_services(sb, task)
    assert not (ws / ".services").exists()
    # the "agent" works, and plants a forged audit and another file where audits go
    await call(
        sb,
        (
            "POST",
            "http://localhost:9110/slack/drafts/save",
            {"to": "#support", "content": "draft", "reply_to_message_id": "s1"},
        ),
    )
    await sb.exec(
        "mkdir -p /tmp_workspace/.services/gmail && echo '{\"forged\": 1}' > "
        "/tmp_workspace/.services/gmail/audit.json && touch /tmp_workspace/.services/x"
    )
    assert await save_audits(sb, task, handles) == {"gmail": "saved", "slack": "saved"}
    assert sorted(p.name for p in (ws / ".services").iterdir()) == ["gmail", "slack"]
    gmail = json.loads((ws / ".services/gmail/audit.json").read_text())
    assert gmail == {
        "service": "gmail",
        "now": NOW,
        "calls": [],
        "sent_messages": [],
        "drafts": [],
        "created_events": [],
        "deleted_events": [],
        "scripted_replies": [],
    }
    slack = json.loads((ws / ".services/slack/audit.json").read_text())
    assert slack["drafts"] == [
        {
            "id": "draft_001",
            "to": "#support",
            "content": "draft",
            "reply_to_message_id": "s1",
            "date": NOW,
        }
    ]


FAKE = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"sent_messages": [{"to": ["dana@nw.example"]}]}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 9100), H).serve_forever()
"""


async def test_a_service_replaced_by_the_agent_gives_no_audit(
    make_task, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    sb = await sandbox(ws)
    task = make_task([GMAIL])
    handles = await start_services(sb, task)
    pid = handles[0].process.pid  # type: ignore[attr-defined]
    await sb.exec(f"kill -9 {pid}")
    await sb.write_file("/tmp/fake.py", FAKE)
    await sb.spawn(["python3", "/tmp/fake.py"])
    await sb.exec(
        'for i in $(seq 50); do python3 -c "import urllib.request as u; '
        "u.urlopen('http://127.0.0.1:9100/gmail/audit')\" 2>/dev/null && break; "
        "sleep 0.1; done"
    )
    status = await save_audits(sb, task, handles)
    assert status == {
        "gmail": "no audit: GET /gmail/audit on port 9100: port 9100 is not served by the "
        "process clawrig started"
    }
    assert not (ws / ".services").exists()


UPSTREAM_GRADER = """
import json, urllib.request

def grade(transcript=None, workspace_path=None, **kwargs):
    with urllib.request.urlopen("http://localhost:9100/gmail/audit", timeout=10) as r:
        audit = json.loads(r.read())
    req = urllib.request.Request("http://localhost:9100/gmail/messages", data=b"{}",
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        inbox = json.loads(r.read())["messages"]
    sent = [m for m in audit["sent_messages"] if "dana@nw.example" in m["to"]]
    proposed = 1.0 if sent and "friday" in sent[0]["body"].lower() else 0.0
    replied = 1.0 if inbox and inbox[0]["id"] == "reply_001" else 0.0
    return {"proposed": proposed, "reply_delivered": replied,
            "overall_score": (proposed + replied) / 2}
"""


async def test_upstream_grader_reads_the_audit_over_http_after_restart(
    make_task, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    sb = await sandbox(ws)
    spec = dict(GMAIL, faults={"error_rate": 0.5, "seed": 2})
    task = make_task([spec], grader=UPSTREAM_GRADER)
    handles = await start_services(sb, task)
    body = {"to": "dana@nw.example", "subject": "Review", "body": "Friday 10:00?"}
    for _ in range(6):  # retries until a send gets through the injected faults
        (out,) = await call(sb, ("POST", "http://localhost:9100/gmail/send", body))
        if out[0] == 200:
            break
    assert out[0] == 200
    assert await save_audits(sb, task, handles) == {"gmail": "saved"}
    saved = json.loads((ws / ".services/gmail/audit.json").read_text())
    # the runner kills every process before gt/ is injected: the service is gone ...
    await sb.kill_all()
    dead = await sb.exec(
        [
            "python3",
            "-c",
            "import urllib.request as u; u.urlopen('http://localhost:9100/health', timeout=2)",
        ]
    )
    assert dead.exit_code != 0 and "Connection refused" in dead.stderr
    # ... and comes back from its saved audit for grading, faults off
    restarted = await restart_services(sb, task)
    assert [h.mode for h in restarted] == ["restored"]
    (audit,) = await call(sb, ("GET", "http://localhost:9100/gmail/audit", None))
    assert audit[1] == saved
    score = await run_grader(sb, task)
    assert score.error is None, score.details
    assert score.score == 1.0 and score.subscores["reply_delivered"] == 1.0


COMMAND_SERVICE = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
notes = []
class H(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/crm/audit": self.reply(200, {"notes": notes})
        elif self.path == "/health": self.reply(200, {"ok": True})
        else: self.reply(404, {})
    def do_POST(self):
        notes.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.reply(200, {"saved": len(notes)})
    def log_message(self, *a): pass
print("crm up", flush=True)
HTTPServer(("127.0.0.1", 9200), H).serve_forever()
"""

CRM_GRADER = """
import json, urllib.error, urllib.request
def grade(transcript=None, workspace_path=None, **kwargs):
    audit = json.loads(urllib.request.urlopen("http://localhost:9200/crm/audit").read())
    try:
        urllib.request.urlopen(urllib.request.Request("http://localhost:9200/crm/note",
                                                      data=b"{}", method="POST"))
        post = 200
    except urllib.error.HTTPError as e:
        post = e.code
    return {"overall_score": len(audit["notes"]) / 2, "post_status": post}
"""


async def test_a_command_service_is_served_from_its_saved_audit(
    make_task, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "crm.py").write_text(COMMAND_SERVICE)
    sb = await sandbox(ws)
    task = make_task(
        [{"name": "crm", "command": "python3 crm.py", "port": 9200}], grader=CRM_GRADER
    )
    handles = await start_services(sb, task)
    await call(
        sb,
        ("POST", "http://localhost:9200/crm/note", {"text": "called Dana"}),
        ("POST", "http://localhost:9200/crm/note", {"text": "sent quote"}),
    )
    assert await save_audits(sb, task, handles) == {"crm": "saved"}
    assert json.loads((ws / ".services/crm/audit.json").read_text()) == {
        "notes": [{"text": "called Dana"}, {"text": "sent quote"}]
    }
    await sb.kill_all()
    restarted = await restart_services(sb, task)
    assert [h.mode for h in restarted] == ["audit-replay"]
    score = await run_grader(sb, task)
    assert score.error is None, score.details
    assert score.score == 1.0 and score.subscores["post_status"] == 503


def test_service_spec_fields_are_the_specs(make_task) -> None:
    # the declaration feeds the spec model the runner already carries (spec/task.py)
    (spec,) = make_task([GMAIL]).services
    assert isinstance(spec, ServiceSpec) and spec.fixtures["now"] == NOW
