"""The services' state and audit, driven through ``dispatch`` (the same code the FastAPI app
calls), with expected values worked out by hand from the fixtures."""

from __future__ import annotations

import random

import pytest

from clawrig.services.mock.core import Faults, FixtureError, make_service

NOW = "2026-03-24T09:00:00"
INBOX = [
    {
        "id": "m1",
        "from": "Dana <dana@nw.example>",
        "subject": "Review",
        "date": "2026-03-23T16:05:00",
        "body": "Can we move the review?",
    },
    {
        "id": "m2",
        "from": "IT <it@acme.example>",
        "subject": "Maintenance",
        "date": "2026-03-10T08:00:00",
        "body": "Old news",
    },
    {
        "id": "m3",
        "from": "Sam <sam@acme.example>",
        "subject": "Lunch",
        "date": "2026-03-24T08:30:00+01:00",
        "body": "Lunch Thursday?",
    },
]
REACTIONS = [
    {
        "when": {"to": "dana@nw.example", "contains": ["friday", "10:00"]},
        "reply": {"from": "Dana <dana@nw.example>", "body": "Friday 10:00 works."},
    },
    {
        "when": {"to": "dana@nw.example", "contains": "thursday", "not_contains": ["friday"]},
        "reply": {
            "from": "Dana <dana@nw.example>",
            "subject": "Thursday",
            "body": "Thursday it is.",
        },
    },
]


def gmail(**faults):
    return make_service(
        "gmail", {"now": NOW, "messages": INBOX, "reactions": REACTIONS}, faults or None
    )


def test_gmail_list_filters_by_days_back_and_sorts_newest_first() -> None:
    svc = gmail()
    # m3 is 08:30+01:00 = 07:30 UTC on the 24th; m1 the 23rd; m2 is 14 days old
    status, out = svc.dispatch("/gmail/messages", {"days_back": 7})
    assert status == 200
    assert [m["id"] for m in out["messages"]] == ["m3", "m1"] and out["total"] == 2
    assert out["messages"][0]["date"] == "2026-03-24T07:30:00"
    assert out["messages"][1]["snippet"] == "Can we move the review?"
    status, out = svc.dispatch("/gmail/messages", {"days_back": 30, "max_results": 1})
    assert [m["id"] for m in out["messages"]] == ["m3"] and out["total"] == 3
    assert svc.dispatch("/gmail/messages", {"days_back": -1})[0] == 422


def test_gmail_get_marks_read_and_404s() -> None:
    svc = gmail()
    status, msg = svc.dispatch("/gmail/messages/get", {"message_id": "m1"})
    assert status == 200 and msg["body"] == "Can we move the review?" and msg["read"] is True
    assert svc.dispatch("/gmail/messages", {})[1]["messages"][1]["read"] is True
    assert svc.dispatch("/gmail/messages/get", {"message_id": "nope"}) == (
        404,
        {"error": "message not found: nope"},
    )
    status, out = svc.dispatch("/gmail/messages/get", {})
    assert status == 422 and out["detail"] == [{"field": "message_id", "message": "Field required"}]


def test_gmail_send_and_scripted_reactions() -> None:
    svc = gmail()
    # mentions Thursday and Friday: the first reaction (Friday + 10:00) fires, not the second
    status, out = svc.dispatch(
        "/gmail/send",
        {
            "to": "Dana <DANA@nw.example>",
            "subject": "Review",
            "body": "Not Thursday; Friday 10:00?",
        },
    )
    assert (status, out) == (200, {"status": "sent", "message_id": "sent_001"})
    assert svc.audit["sent_messages"] == [
        {
            "id": "sent_001",
            "from": "me@example.com",
            "to": ["Dana <DANA@nw.example>"],
            "cc": [],
            "subject": "Review",
            "body": "Not Thursday; Friday 10:00?",
            "date": NOW,
        }
    ]
    reply = {
        "id": "reply_001",
        "from": "Dana <dana@nw.example>",
        "to": "me@example.com",
        "subject": "Re: Review",
        "date": NOW,
        "body": "Friday 10:00 works.",
        "in_reply_to": "sent_001",
        "read": False,
    }
    assert svc.audit["scripted_replies"] == [
        {"reaction": 0, "trigger_message_id": "sent_001", "message": reply}
    ]
    assert svc.dispatch("/gmail/messages", {})[1]["messages"][0]["id"] == "reply_001"
    # "once": the same mail again triggers nothing; a Thursday-only mail triggers reaction 1
    svc.dispatch("/gmail/send", {"to": "dana@nw.example", "subject": "x", "body": "friday 10:00"})
    svc.dispatch("/gmail/send", {"to": "dana@nw.example", "subject": "x", "body": "Thursday?"})
    assert [r["reaction"] for r in svc.audit["scripted_replies"]] == [0, 1]
    assert svc.audit["scripted_replies"][1]["message"]["subject"] == "Thursday"
    # a mail to someone else triggers nothing
    svc.dispatch("/gmail/send", {"to": "sam@acme.example", "subject": "x", "body": "Thursday"})
    assert len(svc.audit["scripted_replies"]) == 2
    assert [m["id"] for m in svc.audit["sent_messages"]] == [
        "sent_001",
        "sent_002",
        "sent_003",
        "sent_004",
    ]


def test_calendar_window_conflicts_and_delete() -> None:
    svc = make_service(
        "calendar",
        {
            "now": NOW,
            "events": [
                {
                    "id": "e1",
                    "title": "Review",
                    "start_time": "2026-03-25T11:00:00",
                    "end_time": "2026-03-25T12:00:00",
                },
                {
                    "id": "e2",
                    "title": "Sync",
                    "start_time": "2026-03-26T13:30:00",
                    "end_time": "2026-03-26T15:00:00",
                },
                {
                    "id": "e3",
                    "title": "Late",
                    "start_time": "2026-03-24T23:30:00",
                    "end_time": "2026-03-25T00:30:00",
                },
            ],
        },
    )
    # default window: today (the 24th), 00:00 to 24:00: e3 overlaps midnight
    assert [e["id"] for e in svc.dispatch("/calendar/events", {})[1]["events"]] == ["e3"]
    out = svc.dispatch("/calendar/events", {"date": "2026-03-25", "days": 2})[1]
    assert [e["id"] for e in out["events"]] == ["e3", "e1", "e2"]
    # 14:00-15:00 on the 26th overlaps e2 (13:30-15:00); end == start is not a conflict
    status, out = svc.dispatch(
        "/calendar/events/create",
        {
            "title": "Moved",
            "start_time": "2026-03-26T14:00",
            "end_time": "2026-03-26T15:00",
            "attendees": ["dana@nw.example"],
        },
    )
    assert status == 200 and out["conflicts"] == ["e2"] and out["event_id"] == "evt_new_001"
    assert out["event"]["start_time"] == "2026-03-26T14:00:00"
    out = svc.dispatch(
        "/calendar/events/create",
        {"title": "After", "start_time": "2026-03-25T12:00:00", "end_time": "2026-03-25T12:30:00"},
    )[1]
    assert out["conflicts"] == []
    assert svc.dispatch(
        "/calendar/events/create",
        {"title": "Bad", "start_time": "2026-03-25T12:00:00", "end_time": "2026-03-25T11:00:00"},
    ) == (400, {"error": "end_time must be after start_time"})
    assert svc.dispatch(
        "/calendar/events/create", {"title": "Bad", "start_time": "tomorrow", "end_time": "x"}
    ) == (400, {"error": "start_time: 'tomorrow' is not an ISO 8601 date-time"})
    assert svc.dispatch("/calendar/events/delete", {"event_id": "e1"}) == (
        200,
        {"status": "deleted", "event_id": "e1"},
    )
    assert [e["id"] for e in svc.audit["deleted_events"]] == ["e1"]
    assert [e["id"] for e in svc.audit["created_events"]] == ["evt_new_001", "evt_new_002"]
    assert svc.dispatch("/calendar/events/delete", {"event_id": "e1"})[0] == 404


def test_contacts_search_every_word_anywhere() -> None:
    svc = make_service(
        "contacts",
        {
            "contacts": [
                {
                    "id": "c1",
                    "name": "Priya Raman",
                    "email": "priya.raman@nw.example",
                    "company": "Northwind",
                },
                {
                    "id": "c2",
                    "name": "Priya Ramanathan",
                    "email": "priya.r@acme.example",
                    "company": "Acme",
                    "notes": "pager",
                },
                {
                    "id": "c3",
                    "name": "Dana Whitfield",
                    "email": "dana@nw.example",
                    "company": "Northwind",
                },
            ]
        },
    )
    out = svc.dispatch("/contacts/search", {"query": "priya"})[1]
    assert [c["id"] for c in out["contacts"]] == ["c1", "c2"] and out["total"] == 2
    out = svc.dispatch("/contacts/search", {"query": "PRIYA northwind"})[1]
    assert out["contacts"] == [
        {
            "id": "c1",
            "name": "Priya Raman",
            "email": "priya.raman@nw.example",
            "company": "Northwind",
        }
    ]
    assert svc.dispatch("/contacts/search", {"query": "pager"})[1]["total"] == 1
    assert svc.dispatch("/contacts/get", {"contact_id": "c2"})[1]["notes"] == "pager"
    assert svc.dispatch("/contacts/search", {"query": ""})[0] == 422


def test_slack_send_draft_and_threads() -> None:
    svc = make_service(
        "slack",
        {
            "now": NOW,
            "user": {"name": "alex"},
            "channels": [{"name": "support"}, {"name": "general"}],
            "messages": [
                {
                    "id": "s1",
                    "channel": "support",
                    "from": "jordan",
                    "content": "Refunds?",
                    "date": "2026-03-23T10:00:00",
                },
                {
                    "id": "s2",
                    "channel": "#support",
                    "from": "maya",
                    "content": "30 days.",
                    "date": "2026-03-23T10:05:00",
                    "reply_to": "s1",
                },
                {
                    "id": "s3",
                    "channel": "general",
                    "from": "maya",
                    "content": "Draft first.",
                    "date": "2026-03-22T09:00:00",
                },
            ],
        },
    )
    out = svc.dispatch("/slack/messages", {"channel": "#support"})[1]
    assert [m["id"] for m in out["messages"]] == ["s2", "s1"]
    assert svc.dispatch("/slack/messages", {"days_back": 1})[1]["total"] == 2
    assert svc.dispatch("/slack/messages/get", {"message_id": "s1"})[1]["replies"] == ["s2"]
    assert svc.dispatch("/slack/messages", {"channel": "random"}) == (
        404,
        {"error": "no such channel: random"},
    )
    assert svc.dispatch(
        "/slack/drafts/save", {"to": "support", "content": "Hi", "reply_to_message_id": "s1"}
    ) == (200, {"status": "saved", "draft_id": "draft_001"})
    assert svc.audit["drafts"] == [
        {
            "id": "draft_001",
            "to": "#support",
            "content": "Hi",
            "reply_to_message_id": "s1",
            "date": NOW,
        }
    ]
    assert (
        svc.dispatch(
            "/slack/drafts/save", {"to": "#support", "content": "Hi", "reply_to_message_id": "s9"}
        )[0]
        == 404
    )
    assert svc.audit["sent_messages"] == []
    assert svc.dispatch("/slack/send", {"to": "@maya", "content": "ok?"})[1]["message_id"] == (
        "slack_sent_001"
    )
    svc.dispatch("/slack/send", {"to": "#general", "content": "hello"})
    assert [m["to"] for m in svc.audit["sent_messages"]] == ["@maya", "#general"]
    # a channel message shows up in the channel, a direct message does not
    assert svc.dispatch("/slack/messages", {"channel": "general"})[1]["total"] == 2


def test_faults_follow_the_documented_draw_order() -> None:
    faults = Faults(
        {
            "error_rate": 0.4,
            "status_codes": [429, 500, 503],
            "seed": 11,
            "jitter_s": 0.5,
            "latency_s": 0.1,
        }
    )
    rng = random.Random(11)
    expected = []
    for _ in range(30):
        latency = round(0.1 + 0.5 * rng.random(), 6)
        status = rng.choice([429, 500, 503]) if rng.random() < 0.4 else None
        expected.append((latency, status))
    assert [faults.draw("/gmail/send") for _ in range(30)] == expected
    assert any(s for _, s in expected) and any(s is None for _, s in expected)
    only = Faults({"error_rate": 1.0, "status_codes": [500], "endpoints": ["/gmail/send"]})
    assert only.draw("/gmail/messages") == (0.0, None)
    assert only.draw("/gmail/send") == (0.0, 500)


def test_restore_rebuilds_the_end_state() -> None:
    svc = gmail()
    svc.call("/gmail/messages/get", {"message_id": "m3"})
    svc.call("/gmail/send", {"to": "dana@nw.example", "subject": "R", "body": "Friday 10:00"})
    svc.record("POST", "/gmail/send", {"to": "x"}, 500, fault=True)
    svc.call("/gmail/send", {"to": "dana@nw.example"})  # 422: changes nothing
    saved = svc.audit
    assert [(c["seq"], c["status"], c["fault"]) for c in saved["calls"]] == [
        (1, 200, False),
        (2, 200, False),
        (3, 500, True),
        (4, 422, False),
    ]
    again = gmail(error_rate=1.0)
    again.restore(saved)
    assert again.audit == saved
    listing = svc.dispatch("/gmail/messages", {})[1]
    assert [(m["id"], m["read"]) for m in listing["messages"]] == [
        ("reply_001", False),
        ("m3", True),
        ("m1", False),
    ]
    assert again.dispatch("/gmail/messages", {})[1] == listing
    assert again.faults.draw("/gmail/send") == (0.0, None)  # faults are off after a restore


@pytest.mark.parametrize(
    ("kind", "fixtures", "message"),
    [
        (
            "gmail",
            {"mesages": []},
            "unknown fixture key 'mesages' for gmail (known: messages, now, reactions, user)",
        ),
        ("gmail", {"messages": [{"id": "a"}]}, "messages[0]: missing 'date'"),
        (
            "gmail",
            {
                "messages": [
                    {"id": "a", "date": "x"},
                ]
            },
            "messages[0].date: 'x' is not an ISO 8601 date-time",
        ),
        (
            "calendar",
            {
                "events": [
                    {"id": "e", "start_time": "2026-01-01T10:00", "end_time": "2026-01-01T09:00"}
                ]
            },
            "events[0]: end_time must be after start_time",
        ),
        (
            "contacts",
            {"contacts": [{"id": "c", "name": "A"}, {"id": "c", "name": "B"}]},
            "contacts[1].id: duplicate id 'c'",
        ),
        ("slack", {"messages": {}}, "messages: must be a list of objects"),
        ("todo", {}, "unknown service kind 'todo' (built-in: gmail, calendar, contacts, slack)"),
    ],
)
def test_bad_fixtures_name_the_key(kind: str, fixtures: dict, message: str) -> None:
    with pytest.raises(FixtureError) as info:
        make_service(kind, fixtures)
    assert str(info.value) == message


def test_bad_faults_name_the_key() -> None:
    with pytest.raises(FixtureError, match=r"faults.error_rate: must be a number in \[0, 1\]"):
        Faults({"error_rate": 2})
    with pytest.raises(FixtureError, match="faults: unknown key 'rate'"):
        Faults({"rate": 0.1})
