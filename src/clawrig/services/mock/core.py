"""State of the built-in mock services: gmail, calendar, contacts, slack.

Self-contained (standard library + pydantic only): this package is copied into the trial's
sandbox and run there with the services environment (FastAPI + uvicorn, see ``server.py``); the
harness imports the same code to check fixtures when it reads a task.

Every service keeps an *audit* (``GET /<svc>/audit``), one JSON object with the same keys for
every service::

    {"service": "gmail", "now": "2026-03-24T09:00:00",
     "calls": [{"seq": 1, "method": "POST", "endpoint": "/gmail/send",
                "request_body": {...}, "status": 200, "fault": false, "latency_s": 0.0}, ...],
     "sent_messages": [...], "drafts": [...], "created_events": [...],
     "deleted_events": [...], "scripted_replies": [...]}

``calls`` holds every API call in arrival order (health, audit and reset are not API calls),
also failed ones (4xx, and injected faults with ``"fault": true``). The service clock is frozen
at ``now`` (the ``now`` fixture, else the start time, UTC): every date the service writes is
``now``, so a run is reproducible. Times are ISO 8601; naive times are UTC, aware ones are
converted to UTC and written without offset.

Fault injection (``faults``; issue 4 item 3): ``{"error_rate": 0.2, "status_codes": [429, 500],
"latency_s": 0.0, "jitter_s": 0.0, "seed": 0, "endpoints": [...]}``. For each API call (of the
listed endpoints, default all), in arrival order, a ``random.Random(seed)`` draws: first the
jitter (``latency = latency_s + jitter_s * random()``, only when ``jitter_s > 0``), then
``random() < error_rate`` decides a fault, then ``choice(status_codes)`` picks its status (only
when there is more than one code). A faulted call changes no state; a 429 carries
``Retry-After: 1``. The same seed and the same sequence of calls give the same faults.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

AUDIT_KEYS = (
    "calls",
    "sent_messages",
    "drafts",
    "created_events",
    "deleted_events",
    "scripted_replies",
)


class FixtureError(ValueError):
    """Fixtures or faults of a service are malformed; the message names the key."""


class ServiceError(Exception):
    """An API call the service refuses: HTTP ``status`` with a one-line ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Body(BaseModel):
    # each endpoint's request model is built at its first request (defer_build), in the
    # service's own process: the harness imports this module for its fixtures' checks and
    # never validates a request (13 schemas: ~8 ms of every `clawrig run`'s start-up)
    model_config = ConfigDict(extra="ignore", defer_build=True)


# ---- time --------------------------------------------------------------------------------------
def parse_time(value: Any, what: str) -> dt.datetime:
    """ISO 8601 date-time (or date) -> naive UTC datetime. Raises ServiceError(400)."""
    if not isinstance(value, str) or not value.strip():
        raise ServiceError(400, f"{what}: expected an ISO 8601 date-time string")
    try:
        t = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ServiceError(400, f"{what}: {value!r} is not an ISO 8601 date-time") from None
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    return t


def fmt_time(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds")


def _fixture_time(value: Any, what: str) -> str:
    try:
        return fmt_time(parse_time(value, what))
    except ServiceError as exc:
        raise FixtureError(exc.message) from None


# ---- faults ------------------------------------------------------------------------------------
class Faults:
    """Seeded fault injection (see the module docstring for the draw order)."""

    KEYS = {"error_rate", "status_codes", "latency_s", "jitter_s", "seed", "endpoints"}

    def __init__(self, spec: dict[str, Any] | None):
        spec = dict(spec or {})
        unknown = sorted(set(spec) - self.KEYS)
        if unknown:
            raise FixtureError(
                f"faults: unknown key {unknown[0]!r} (known: {', '.join(sorted(self.KEYS))})"
            )
        self.error_rate = _number(spec.get("error_rate", 0.0), "faults.error_rate", 0.0, 1.0)
        codes = spec.get("status_codes", [429, 500])
        if (
            not isinstance(codes, list)
            or not codes
            or not all(isinstance(c, int) and 400 <= c <= 599 for c in codes)
        ):
            raise FixtureError("faults.status_codes: must be a non-empty list of 4xx/5xx codes")
        self.status_codes = codes
        self.latency_s = _number(spec.get("latency_s", 0.0), "faults.latency_s", 0.0, 60.0)
        self.jitter_s = _number(spec.get("jitter_s", 0.0), "faults.jitter_s", 0.0, 60.0)
        seed = spec.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise FixtureError("faults.seed: must be an integer")
        self.seed = seed
        endpoints = spec.get("endpoints")
        if endpoints is not None and (
            not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints)
        ):
            raise FixtureError("faults.endpoints: must be a list of endpoint paths")
        self.endpoints = endpoints
        self.rng = random.Random(seed)
        self.active = bool(self.error_rate or self.latency_s or self.jitter_s)

    def draw(self, endpoint: str) -> tuple[float, int | None]:
        """(latency in seconds, fault status or None) for the next call to ``endpoint``."""
        if not self.active or (self.endpoints is not None and endpoint not in self.endpoints):
            return 0.0, None
        latency = self.latency_s
        if self.jitter_s > 0:
            latency += self.jitter_s * self.rng.random()
        status = None
        if self.error_rate > 0 and self.rng.random() < self.error_rate:
            codes = self.status_codes
            status = self.rng.choice(codes) if len(codes) > 1 else codes[0]
        return round(latency, 6), status


def _number(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise FixtureError(f"{what}: must be a number in [{lo:g}, {hi:g}], got {value!r}")
    return float(value)


def _items(value: Any, what: str, required: tuple[str, ...]) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise FixtureError(f"{what}: must be a list of objects")
    seen: set[str] = set()
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise FixtureError(f"{what}[{i}]: must be an object")
        for key in required:
            if key not in item:
                raise FixtureError(f"{what}[{i}]: missing {key!r}")
        if "id" in item:
            if not isinstance(item["id"], str) or not item["id"]:
                raise FixtureError(f"{what}[{i}].id: must be a non-empty string")
            if item["id"] in seen:
                raise FixtureError(f"{what}[{i}].id: duplicate id {item['id']!r}")
            seen.add(item["id"])
        out.append(copy.deepcopy(item))
    return out


def _addresses(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    parts = value if isinstance(value, list) else value.replace(";", ",").split(",")
    return [p.strip() for p in parts if isinstance(p, str) and p.strip()]


def _re(subject: str) -> str:
    """``Re: <subject>``, without doubling an existing ``Re:``."""
    return subject if subject[:3].casefold() == "re:" else f"Re: {subject}"


def _email_of(address: str) -> str:
    """``"Dana <dana@x.example>"`` -> ``dana@x.example`` (lower-case)."""
    if "<" in address and address.rstrip().endswith(">"):
        address = address.rsplit("<", 1)[1].rstrip().rstrip(">")
    return address.strip().lower()


# ---- base service ------------------------------------------------------------------------------
Handler = Callable[[Any], Any]


class MockService:
    """One service: fixtures -> state, ``dispatch(endpoint, body)`` -> (status, JSON payload).

    A kind (built-in or a third party's, see :mod:`clawrig.services.kinds`) subclasses it:
    ``kind`` names its routes (``/<kind>/...``), ``default_port`` its port when a task gives
    none, ``fixture_keys`` the fixtures it takes; ``_register`` fills ``endpoints``
    (``{"/<kind>/<name>": (pydantic Body model, handler)}``) and ``_load`` builds the state
    from the fixtures (raising :class:`FixtureError` naming the key)."""

    kind = ""
    default_port: int | None = None
    fixture_keys: frozenset[str] = frozenset({"now", "user"})

    def __init__(
        self,
        fixtures: dict[str, Any] | None = None,
        faults: dict[str, Any] | None = None,
        now: dt.datetime | None = None,
    ):
        fixtures = dict(fixtures or {})
        unknown = sorted(set(fixtures) - self.fixture_keys)
        if unknown:
            raise FixtureError(
                f"unknown fixture key {unknown[0]!r} for {self.kind} "
                f"(known: {', '.join(sorted(self.fixture_keys))})"
            )
        if "now" in fixtures:
            self.now = _fixture_time(fixtures["now"], "now")
        else:
            self.now = fmt_time(now or dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0))
        user = fixtures.get("user", {})
        if not isinstance(user, dict) or not all(isinstance(v, str) for v in user.values()):
            raise FixtureError("user: must be an object of strings (name, email)")
        self.user = {"name": user.get("name", "me"), "email": user.get("email", "me@example.com")}
        self.fixtures = fixtures
        self.faults = Faults(faults)
        self.endpoints: dict[str, tuple[type[Body], Handler]] = {}
        self._register()
        self._load(fixtures)
        self.audit = self._new_audit()

    # subclasses
    def _register(self) -> None:
        raise NotImplementedError

    def _load(self, fixtures: dict[str, Any]) -> None:
        raise NotImplementedError

    def _new_audit(self) -> dict[str, Any]:
        audit: dict[str, Any] = {"service": self.kind, "now": self.now}
        audit.update({key: [] for key in AUDIT_KEYS})
        return audit

    def reset(self) -> None:
        """Back to the fixtures, with an empty audit (``POST /<svc>/reset``)."""
        self._load(self.fixtures)
        self.audit = self._new_audit()

    def dispatch(self, endpoint: str, body: Any) -> tuple[int, Any]:
        """Run one API call; never raises for a bad request (4xx payload instead)."""
        if endpoint not in self.endpoints:
            return 404, {"error": f"no such endpoint: {endpoint}"}
        model, handler = self.endpoints[endpoint]
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return 422, {"error": "the request body must be a JSON object"}
        try:
            req = model.model_validate(body)
        except ValidationError as exc:
            detail = [
                {"field": ".".join(map(str, e["loc"])) or "body", "message": e["msg"]}
                for e in exc.errors()
            ]
            return 422, {"error": "invalid request", "detail": detail}
        try:
            return 200, handler(req)
        except ServiceError as exc:
            return exc.status, {"error": exc.message}

    def call(self, endpoint: str, body: Any, *, latency_s: float = 0.0) -> tuple[int, Any]:
        """One API call as the server makes it: :meth:`dispatch`, then :meth:`record`."""
        status, payload = self.dispatch(endpoint, body)
        self.record("POST", endpoint, body, status, latency_s=latency_s)
        return status, payload

    def record(
        self,
        method: str,
        endpoint: str,
        body: Any,
        status: int,
        *,
        fault: bool = False,
        latency_s: float = 0.0,
    ) -> None:
        calls = self.audit["calls"]
        calls.append(
            {
                "seq": len(calls) + 1,
                "method": method,
                "endpoint": endpoint,
                "request_body": copy.deepcopy(body),
                "status": status,
                "fault": fault,
                "latency_s": latency_s,
            }
        )

    def restore(self, audit: dict[str, Any]) -> None:
        """Rebuild the end state from a saved audit: the fixtures, then every successful call
        replayed in order; the audit itself becomes ``audit`` verbatim. Faults are switched off
        (used to serve graders after the agent has finished)."""
        self.reset()
        for call in audit.get("calls", []):
            if call.get("status") == 200 and not call.get("fault"):
                self.dispatch(call.get("endpoint", ""), call.get("request_body"))
        self.audit = copy.deepcopy(audit)
        self.faults.active = False


# ---- gmail -------------------------------------------------------------------------------------
class ListMessages(Body):
    days_back: int = Field(7, ge=0, le=36500)
    max_results: int = Field(20, ge=1, le=1000)


class GetMessage(Body):
    message_id: str


class SendMail(Body):
    to: str | list[str]
    subject: str
    body: str
    cc: str | list[str] | None = None


class GmailService(MockService):
    """``POST /gmail/messages {days_back=7, max_results=20}``, ``/gmail/messages/get
    {message_id}``, ``/gmail/send {to, subject, body[, cc]}``.

    Fixtures: ``messages`` (``id``, ``from``, ``to``, ``subject``, ``date``, ``body``, optional
    ``cc``, ``read``), ``reactions`` (scripted replies, below), ``user`` ({name, email}), ``now``.

    A reaction ``{"when": {"to": "dana@x.example", "contains": ["Friday"], "not_contains":
    [...]}, "reply": {"from": "Dana <dana@x.example>", "subject": "...", "body": "..."},
    "once": true}`` fires on a sent mail whose recipients include ``when.to`` and whose subject
    plus body contain every ``contains`` string and no ``not_contains`` string (case-insensitive);
    the first matching reaction delivers its reply to the inbox at once (id ``reply_NNN``,
    subject ``Re: <sent subject>`` when not given, never ``Re: Re:``) and is logged in
    ``scripted_replies``.
    """

    kind = "gmail"
    default_port = 9100
    fixture_keys = frozenset({"now", "user", "messages", "reactions"})

    def _register(self) -> None:
        self.endpoints = {
            "/gmail/messages": (ListMessages, self.list_messages),
            "/gmail/messages/get": (GetMessage, self.get_message),
            "/gmail/send": (SendMail, self.send),
        }

    def _load(self, fixtures: dict[str, Any]) -> None:
        msgs = _items(fixtures.get("messages", []), "messages", ("id", "date"))
        for i, m in enumerate(msgs):
            m["date"] = _fixture_time(m["date"], f"messages[{i}].date")
            m.setdefault("from", "")
            m.setdefault("to", self.user["email"])
            m.setdefault("subject", "")
            m.setdefault("body", "")
            m.setdefault("read", False)
        self.inbox = msgs
        self.reactions = self._check_reactions(fixtures.get("reactions", []))
        self.fired: set[int] = set()
        self.sent_count = 0

    @staticmethod
    def _check_reactions(value: Any) -> list[dict[str, Any]]:
        reactions = _items(value, "reactions", ("when", "reply"))
        for i, r in enumerate(reactions):
            when, reply = r["when"], r["reply"]
            if not isinstance(when, dict) or not isinstance(reply, dict):
                raise FixtureError(f"reactions[{i}]: when and reply must be objects")
            for key in ("contains", "not_contains"):
                v = when.get(key, [])
                when[key] = [v] if isinstance(v, str) else v
                if not isinstance(when[key], list) or not all(
                    isinstance(s, str) for s in when[key]
                ):
                    raise FixtureError(f"reactions[{i}].when.{key}: must be strings")
            if "to" in when and not isinstance(when["to"], str):
                raise FixtureError(f"reactions[{i}].when.to: must be an address")
            if not isinstance(reply.get("from"), str) or not isinstance(reply.get("body"), str):
                raise FixtureError(f"reactions[{i}].reply: needs string `from` and `body`")
            r.setdefault("once", True)
        return reactions

    @staticmethod
    def _summary(m: dict[str, Any]) -> dict[str, Any]:
        snippet = " ".join(str(m.get("body", "")).split())
        return {
            "id": m["id"],
            "from": m.get("from", ""),
            "to": m.get("to", ""),
            "subject": m.get("subject", ""),
            "date": m["date"],
            "snippet": snippet[:100] + ("..." if len(snippet) > 100 else ""),
            "read": bool(m.get("read")),
        }

    def list_messages(self, req: ListMessages) -> dict[str, Any]:
        cutoff = fmt_time(parse_time(self.now, "now") - dt.timedelta(days=req.days_back))
        found = [m for m in self.inbox if m["date"] >= cutoff]
        found.sort(key=lambda m: m["id"])
        found.sort(key=lambda m: m["date"], reverse=True)
        return {
            "messages": [self._summary(m) for m in found[: req.max_results]],
            "total": len(found),
        }

    def get_message(self, req: GetMessage) -> dict[str, Any]:
        for m in self.inbox:
            if m["id"] == req.message_id:
                m["read"] = True
                return copy.deepcopy(m)
        raise ServiceError(404, f"message not found: {req.message_id}")

    def send(self, req: SendMail) -> dict[str, Any]:
        to = _addresses(req.to)
        if not to:
            raise ServiceError(422, "to: at least one recipient is needed")
        self.sent_count += 1
        sent = {
            "id": f"sent_{self.sent_count:03d}",
            "from": self.user["email"],
            "to": to,
            "cc": _addresses(req.cc),
            "subject": req.subject,
            "body": req.body,
            "date": self.now,
        }
        self.audit["sent_messages"].append(copy.deepcopy(sent))
        self._react(sent)
        return {"status": "sent", "message_id": sent["id"]}

    def _react(self, sent: dict[str, Any]) -> None:
        recipients = {_email_of(a) for a in sent["to"] + sent["cc"]}
        text = f"{sent['subject']}\n{sent['body']}".casefold()
        for i, r in enumerate(self.reactions):
            if r["once"] and i in self.fired:
                continue
            when = r["when"]
            if "to" in when and _email_of(when["to"]) not in recipients:
                continue
            if not all(s.casefold() in text for s in when["contains"]):
                continue
            if any(s.casefold() in text for s in when["not_contains"]):
                continue
            self.fired.add(i)
            reply = r["reply"]
            message = {
                "id": f"reply_{len(self.audit['scripted_replies']) + 1:03d}",
                "from": reply["from"],
                "to": self.user["email"],
                "subject": reply.get("subject") or _re(sent["subject"]),
                "date": self.now,
                "body": reply["body"],
                "in_reply_to": sent["id"],
                "read": False,
            }
            self.inbox.append(message)
            self.audit["scripted_replies"].append(
                {"reaction": i, "trigger_message_id": sent["id"], "message": copy.deepcopy(message)}
            )
            return


# ---- calendar ----------------------------------------------------------------------------------
class ListEvents(Body):
    date: str | None = None
    days: int = Field(1, ge=1, le=3660)


class CreateEvent(Body):
    title: str = Field(min_length=1)
    start_time: str
    end_time: str
    attendees: list[str] = Field(default_factory=list)
    location: str = ""
    description: str = ""


class DeleteEvent(Body):
    event_id: str


class CalendarService(MockService):
    """``POST /calendar/events {date=today, days=1}``, ``/calendar/events/create {title,
    start_time, end_time, attendees, location[, description]}``, ``/calendar/events/delete
    {event_id}`` (the source of the audit's ``deleted_events``).

    Fixtures: ``events`` (``id``, ``title``, ``start_time``, ``end_time``, optional
    ``attendees``, ``location``, ``description``), ``user``, ``now``. ``events`` lists the events
    that overlap the ``days`` days from ``date`` (00:00), by start time; a created event gets id
    ``evt_new_NNN`` and the reply lists the existing events it ``conflicts`` with."""

    kind = "calendar"
    default_port = 9101
    fixture_keys = frozenset({"now", "user", "events"})

    def _register(self) -> None:
        self.endpoints = {
            "/calendar/events": (ListEvents, self.list_events),
            "/calendar/events/create": (CreateEvent, self.create),
            "/calendar/events/delete": (DeleteEvent, self.delete),
        }

    def _load(self, fixtures: dict[str, Any]) -> None:
        events = _items(fixtures.get("events", []), "events", ("id", "start_time", "end_time"))
        for i, e in enumerate(events):
            e["start_time"] = _fixture_time(e["start_time"], f"events[{i}].start_time")
            e["end_time"] = _fixture_time(e["end_time"], f"events[{i}].end_time")
            if e["end_time"] <= e["start_time"]:
                raise FixtureError(f"events[{i}]: end_time must be after start_time")
            e.setdefault("title", "")
            e.setdefault("attendees", [])
            e.setdefault("location", "")
        self.events = events
        self.created_count = 0

    def _sorted(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(events, key=lambda e: (e["start_time"], e["id"]))

    def list_events(self, req: ListEvents) -> dict[str, Any]:
        day = parse_time(req.date or self.now[:10], "date")
        start = day.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(days=req.days)
        lo, hi = fmt_time(start), fmt_time(end)
        found = [e for e in self.events if e["start_time"] < hi and e["end_time"] > lo]
        return {"events": copy.deepcopy(self._sorted(found)), "total": len(found)}

    def create(self, req: CreateEvent) -> dict[str, Any]:
        start = fmt_time(parse_time(req.start_time, "start_time"))
        end = fmt_time(parse_time(req.end_time, "end_time"))
        if end <= start:
            raise ServiceError(400, "end_time must be after start_time")
        conflicts = [
            e["id"]
            for e in self._sorted(self.events)
            if e["start_time"] < end and e["end_time"] > start
        ]
        self.created_count += 1
        event = {
            "id": f"evt_new_{self.created_count:03d}",
            "title": req.title,
            "start_time": start,
            "end_time": end,
            "attendees": list(req.attendees),
            "location": req.location,
            "description": req.description,
        }
        self.events.append(event)
        self.audit["created_events"].append(copy.deepcopy(event))
        return {
            "status": "created",
            "event_id": event["id"],
            "event": copy.deepcopy(event),
            "conflicts": conflicts,
        }

    def delete(self, req: DeleteEvent) -> dict[str, Any]:
        for i, e in enumerate(self.events):
            if e["id"] == req.event_id:
                del self.events[i]
                self.audit["deleted_events"].append(copy.deepcopy(e))
                return {"status": "deleted", "event_id": req.event_id}
        raise ServiceError(404, f"event not found: {req.event_id}")


# ---- contacts ----------------------------------------------------------------------------------
class SearchContacts(Body):
    query: str = Field(min_length=1)


class GetContact(Body):
    contact_id: str


class ContactsService(MockService):
    """``POST /contacts/search {query}`` (every word of the query, case-insensitive, somewhere
    in the contact's text fields), ``/contacts/get {contact_id}``.

    Fixtures: ``contacts`` (``id``, ``name``, optional ``email``, ``phone``, ``company``,
    ``title``, ``notes`` ...), ``user``, ``now``."""

    kind = "contacts"
    default_port = 9103
    fixture_keys = frozenset({"now", "user", "contacts"})
    SUMMARY = ("id", "name", "email", "company", "title")

    def _register(self) -> None:
        self.endpoints = {
            "/contacts/search": (SearchContacts, self.search),
            "/contacts/get": (GetContact, self.get),
        }

    def _load(self, fixtures: dict[str, Any]) -> None:
        self.contacts = _items(fixtures.get("contacts", []), "contacts", ("id", "name"))

    def search(self, req: SearchContacts) -> dict[str, Any]:
        words = req.query.casefold().split()
        found = []
        for c in self.contacts:
            text = " ".join(str(v) for v in c.values() if isinstance(v, str)).casefold()
            if all(w in text for w in words):
                found.append({k: c[k] for k in self.SUMMARY if k in c})
        return {"contacts": found, "total": len(found)}

    def get(self, req: GetContact) -> dict[str, Any]:
        for c in self.contacts:
            if c["id"] == req.contact_id:
                return copy.deepcopy(c)
        raise ServiceError(404, f"contact not found: {req.contact_id}")


# ---- slack -------------------------------------------------------------------------------------
class ListSlack(Body):
    channel: str | None = None
    days_back: int | None = Field(None, ge=0, le=36500)
    max_results: int = Field(50, ge=1, le=1000)


class GetSlack(Body):
    message_id: str


class SlackSend(Body):
    to: str = Field(min_length=1)
    content: str = Field(min_length=1)


class SaveDraft(Body):
    to: str = Field(min_length=1)
    content: str = Field(min_length=1)
    reply_to_message_id: str | None = None


class SlackService(MockService):
    """``POST /slack/messages {channel?, days_back?, max_results=50}``, ``/slack/messages/get
    {message_id}`` (the message and the ids of its ``replies``), ``/slack/send {to, content}``,
    ``/slack/drafts/save {to, content, reply_to_message_id?}``.

    ``to`` is a channel (``#support``, or the bare name of a known channel) or a user
    (``@maya``/``maya``). Fixtures: ``channels`` (``name``, optional ``topic``), ``messages``
    (``id``, ``channel``, ``from``, ``content``, ``date``, optional ``reply_to``), ``user``
    ({name}), ``now``. A message sent to a channel appears in it; a draft is only saved."""

    kind = "slack"
    default_port = 9110
    fixture_keys = frozenset({"now", "user", "channels", "messages"})

    def _register(self) -> None:
        self.endpoints = {
            "/slack/messages": (ListSlack, self.list_messages),
            "/slack/messages/get": (GetSlack, self.get_message),
            "/slack/send": (SlackSend, self.send),
            "/slack/drafts/save": (SaveDraft, self.save_draft),
        }

    def _load(self, fixtures: dict[str, Any]) -> None:
        channels = _items(fixtures.get("channels", []), "channels", ("name",))
        self.channels = {str(c["name"]).lstrip("#").casefold(): c for c in channels}
        msgs = _items(
            fixtures.get("messages", []), "messages", ("id", "channel", "content", "date")
        )
        for i, m in enumerate(msgs):
            m["date"] = _fixture_time(m["date"], f"messages[{i}].date")
            m["channel"] = "#" + str(m["channel"]).lstrip("#")
            m.setdefault("from", "")
            if m["channel"][1:].casefold() not in self.channels:
                self.channels[m["channel"][1:].casefold()] = {"name": m["channel"][1:]}
        self.messages = msgs
        self.sent_count = 0

    def _target(self, to: str) -> tuple[str, str]:
        """("channel", "#name") or ("user", "@name")."""
        name = to.strip()
        if name.startswith("#"):
            if name[1:].casefold() not in self.channels:
                raise ServiceError(404, f"no such channel: {name}")
            return "channel", "#" + self.channels[name[1:].casefold()]["name"]
        if not name.startswith("@") and name.casefold() in self.channels:
            return "channel", "#" + self.channels[name.casefold()]["name"]
        return "user", "@" + name.lstrip("@")

    def list_messages(self, req: ListSlack) -> dict[str, Any]:
        found = list(self.messages)
        if req.channel:
            name = req.channel.strip().lstrip("#").casefold()
            if name not in self.channels:
                raise ServiceError(404, f"no such channel: {req.channel}")
            found = [m for m in found if m["channel"] == "#" + self.channels[name]["name"]]
        if req.days_back is not None:
            cutoff = fmt_time(parse_time(self.now, "now") - dt.timedelta(days=req.days_back))
            found = [m for m in found if m["date"] >= cutoff]
        found.sort(key=lambda m: m["id"])
        found.sort(key=lambda m: m["date"], reverse=True)
        return {"messages": copy.deepcopy(found[: req.max_results]), "total": len(found)}

    def get_message(self, req: GetSlack) -> dict[str, Any]:
        for m in self.messages:
            if m["id"] == req.message_id:
                out = copy.deepcopy(m)
                out["replies"] = [r["id"] for r in self.messages if r.get("reply_to") == m["id"]]
                return out
        raise ServiceError(404, f"message not found: {req.message_id}")

    def send(self, req: SlackSend) -> dict[str, Any]:
        kind, target = self._target(req.to)
        self.sent_count += 1
        sent = {
            "id": f"slack_sent_{self.sent_count:03d}",
            "to": target,
            "from": self.user["name"],
            "content": req.content,
            "date": self.now,
        }
        self.audit["sent_messages"].append(copy.deepcopy(sent))
        if kind == "channel":
            self.messages.append(
                {
                    "id": sent["id"],
                    "channel": target,
                    "from": sent["from"],
                    "content": req.content,
                    "date": self.now,
                }
            )
        return {"status": "sent", "message_id": sent["id"]}

    def save_draft(self, req: SaveDraft) -> dict[str, Any]:
        _, target = self._target(req.to)
        if req.reply_to_message_id is not None and not any(
            m["id"] == req.reply_to_message_id for m in self.messages
        ):
            raise ServiceError(404, f"message not found: {req.reply_to_message_id}")
        draft = {
            "id": f"draft_{len(self.audit['drafts']) + 1:03d}",
            "to": target,
            "content": req.content,
            "reply_to_message_id": req.reply_to_message_id,
            "date": self.now,
        }
        self.audit["drafts"].append(copy.deepcopy(draft))
        return {"status": "saved", "draft_id": draft["id"]}


SERVICES: dict[str, type[MockService]] = {
    "gmail": GmailService,
    "calendar": CalendarService,
    "contacts": ContactsService,
    "slack": SlackService,
}
"""The built-in kinds (:data:`clawrig.services.kinds.SERVICE_KINDS` adds third parties')."""
KINDS = tuple(SERVICES)
DEFAULT_PORTS = {kind: cls.default_port for kind, cls in SERVICES.items()}


def make_service(
    kind: str,
    fixtures: dict[str, Any] | None = None,
    faults: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> MockService:
    """Build a service of ``kind``. Raises FixtureError (unknown kind, bad fixtures/faults)."""
    if kind not in SERVICES:
        raise FixtureError(f"unknown service kind {kind!r} (built-in: {', '.join(KINDS)})")
    return SERVICES[kind](fixtures, faults, now)
