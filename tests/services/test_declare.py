"""How a task declares services: the ``services`` list of an intent file."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError
from clawrig.services import parse_services

INTENT = Path("suite/intent/000008.json")


def test_defaults_by_kind() -> None:
    specs = parse_services(
        [
            {"kind": "gmail", "fixtures": {"now": "2026-03-24T09:00:00"}},
            {"kind": "calendar"},
            {"kind": "contacts", "name": "people"},
            {"kind": "slack", "fixtures": "fixtures/slack.json", "faults": {"error_rate": 0.1}},
            {"name": "crm", "command": "python3 crm.py", "port": 9200},
        ],
        INTENT,
    )
    assert [(s.name, s.kind, s.port) for s in specs] == [
        ("gmail", "gmail", 9100),
        ("calendar", "calendar", 9101),
        ("people", "contacts", 9103),
        ("slack", "slack", 9110),
        ("crm", None, 9200),
    ]
    assert specs[0].health_path == "/health" and specs[0].reset_path == "/gmail/reset"
    assert specs[3].fixtures == {"$file": "fixtures/slack.json"}
    assert specs[3].faults == {"error_rate": 0.1}
    assert specs[4].command == "python3 crm.py" and specs[4].reset_path is None


@pytest.mark.parametrize(
    ("services", "message"),
    [
        ({"kind": "gmail"}, "services: must be a list of service objects"),
        (
            [{"kind": "todo"}],
            "services[0].kind: 'todo' is not a service kind (gmail, "
            "calendar, contacts, slack); give a `command` to start another one",
        ),
        (
            [{"kind": "gmail"}, {"kind": "slack", "port": 9100}],
            "services[1].port: 9100 is already the port of 'gmail'",
        ),
        (
            [{"kind": "gmail"}, {"kind": "gmail", "port": 9200}],
            "services[1].name: 'gmail' is used twice",
        ),
        ([{"command": "run-crm"}], "services[0].name: required for a service started by a command"),
        (
            [{"command": "run-crm", "name": "crm"}],
            "services[0].port: must be a port number, got None",
        ),
        (
            [{"kind": "gmail", "fixtures": {"mesages": []}}],
            "services[0].fixtures.mesages: unknown fixture for gmail (known: messages, now, "
            "reactions, user)",
        ),
        (
            [{"kind": "gmail", "fixtures": {"messages": [{"id": "m1"}]}}],
            "services[0].fixtures: messages[0]: missing 'date'",
        ),
        (
            [{"kind": "gmail", "faults": {"error_rate": 1.5}}],
            "services[0].faults: error_rate: must be a number in [0, 1], got 1.5",
        ),
        (
            [{"kind": "slack", "fixtures": "../secret.json"}],
            "services[0].fixtures: '../secret.json' is not a path relative to /tmp_workspace",
        ),
        (  # a fixture's own file: also inside the workspace (issue 14)
            [{"kind": "slack", "fixtures": {"messages": "/etc/clawrig-host.json"}}],
            "services[0].fixtures.messages: '/etc/clawrig-host.json' is not a path relative "
            "to /tmp_workspace",
        ),
        (
            [{"kind": "gmail", "fixtures": {"messages": "data/../../up.json"}}],
            "services[0].fixtures.messages: 'data/../../up.json' is not a path relative to "
            "/tmp_workspace",
        ),
        (
            [{"kind": "slack", "name": "a/b"}],
            "services[0].name: 'a/b': letters, digits, '_', '.', '-' only",
        ),
        (
            [{"kind": "slack", "image": "x"}],
            "services[0].image: unknown key (known: command, "
            "faults, fixtures, health_path, kind, name, port, reset_path)",
        ),
    ],
)
def test_bad_declarations_name_file_and_field(services: object, message: str) -> None:
    with pytest.raises(TaskFormatError) as info:
        parse_services(services, INTENT, line=12)
    assert str(info.value) == f"{INTENT}:12: {message}"
