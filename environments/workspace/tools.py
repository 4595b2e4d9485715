"""Workspace tools: email, calendar, drive, contacts, web reader and account, over the world's tables.

Records keep generation-only fields (`thread`, `doc`, `ev`, `page`, `day`, `hour`); the views below show the agent
only what a real client would. Senders and participants are stored as contact ids or plain addresses and shown as
addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envgym.world import ToolError, WorldState
from envgym.world.table import raw_items

TODAY = "2024-05-15"


def _address(state: WorldState, who: str) -> str:
    contact = state.peek("contacts", who)
    return str(contact["email"]) if contact else who


def _me(state: WorldState) -> dict[str, Any]:
    return next(iter(state.tables["account"].values()))


def _matching(state: WorldState, entity: str, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The records `keep` selects, each this state's own (a view may change it: `_synced`). The others are read in
    place, without the copy a table makes of each record it hands out, which every later hash would encode again."""
    table = state.tables[entity]
    return [table[key] for key, record in raw_items(table) if keep(record)]


def _synced(record: dict[str, Any]) -> dict[str, Any]:
    """The record, unless a sync of it failed (a `sync_error` the attack suite may plant): then this one read fails
    with that message, and the next one succeeds."""
    error = record.pop("sync_error", None)
    if error:
        raise ToolError(f"sync failed: {error}")
    return record


def _email_view(state: WorldState, e: dict[str, Any], full: bool = True) -> dict[str, Any]:
    _synced(e)
    view = {"email_id": e["email_id"], "folder": e["folder"], "sender": _address(state, e["sender"]),
            "recipients": e["recipients"], "subject": e["subject"], "date": e["date"]}
    if full:
        view.update(body=e["body"], attachments=e["attachments"])
    return view


def _event_view(state: WorldState, ev: dict[str, Any]) -> dict[str, Any]:
    _synced(ev)
    return {"event_id": ev["event_id"], "title": ev["title"], "date": ev["date"], "start_time": ev["start_time"],
            "duration_minutes": ev["duration_minutes"], "location": ev["location"],
            "description": ev["description"], "participants": [_address(state, p) for p in ev["participants"]],
            "status": ev["status"]}


def _file_view(f: dict[str, Any], full: bool = True) -> dict[str, Any]:
    _synced(f)
    view = {"file_id": f["file_id"], "filename": f["filename"], "owner": f["owner"],
            "shared_with": f["shared_with"], "last_modified": f["last_modified"]}
    if full:
        view["content"] = f["content"]
    return view


def _next_key(table: dict[str, Any], prefix: str) -> str:
    index = len(table)
    while f"{prefix}{index:04d}" in table:
        index += 1
    return f"{prefix}{index:04d}"


def _require(state: WorldState, entity: str, key: str, what: str) -> dict[str, Any]:
    record = state.tables[entity].get(key)
    if record is None:
        raise ToolError(f"no {what} with id {key!r}")
    return record


# ---------------------------------------------------------------- account


def get_current_date(state: WorldState) -> str:
    return TODAY


def get_account(state: WorldState) -> dict[str, Any]:
    me = _me(state)
    return {"name": me["name"], "email": me["email"]}


def change_password(state: WorldState, new_password: str) -> dict[str, Any]:
    _me(state)["password"] = new_password
    return {"changed": True}


# ---------------------------------------------------------------- email


def list_emails(state: WorldState, folder: str) -> list[dict[str, Any]]:
    rows = _matching(state, "emails", lambda e: e["folder"] == folder)
    rows.sort(key=lambda e: (e["date"], e["email_id"]), reverse=True)
    return [_email_view(state, e, full=False) for e in rows]


def search_emails(state: WorldState, query: str) -> list[dict[str, Any]]:
    q = query.lower()
    hits = _matching(state, "emails", lambda e: q in e["subject"].lower() or q in e["body"].lower()
                     or q in _address(state, e["sender"]).lower())
    return [_email_view(state, e) for e in hits]


def read_email(state: WorldState, email_id: str) -> dict[str, Any]:
    return _email_view(state, _require(state, "emails", email_id, "email"))


def _store_sent(state: WorldState, recipients: list[str], subject: str, body: str, cc: list[str],
                attachments: list[str], forwarded_from: str | None = None) -> dict[str, Any]:
    table = state.tables["emails"]
    record: dict[str, Any] = {"email_id": _next_key(table, "E"), "sender": _me(state)["email"], "subject": subject, "body": body,
              "date": TODAY, "folder": "sent", "recipients": list(recipients), "cc": list(cc),
              "attachments": list(attachments), "forwarded_from": forwarded_from}
    table[record["email_id"]] = record
    return {**_email_view(state, record), "cc": record["cc"]}


def send_email(state: WorldState, recipients: list[str], subject: str, body: str, cc: list[str] | None = None,
               attachments: list[str] | None = None) -> dict[str, Any]:
    for file_id in attachments or []:
        _require(state, "files", file_id, "file")
    return _store_sent(state, recipients, subject, body, cc or [], attachments or [])


def forward_email(state: WorldState, email_id: str, recipients: list[str]) -> dict[str, Any]:
    original = _require(state, "emails", email_id, "email")
    body = f"---------- Forwarded message ----------\nFrom: {_address(state, original['sender'])}\n\n{original['body']}"
    return _store_sent(state, recipients, f"Fwd: {original['subject']}", body, [], original["attachments"],
                       forwarded_from=email_id)


def delete_email(state: WorldState, email_id: str) -> dict[str, Any]:
    _require(state, "emails", email_id, "email")
    del state.tables["emails"][email_id]
    return {"deleted": email_id}


# ---------------------------------------------------------------- contacts


def search_contacts(state: WorldState, query: str) -> list[dict[str, Any]]:
    q = query.lower()
    return [{"name": c["name"], "email": c["email"], "phone": c["phone"], "job": c["job"]}
            for c in _matching(state, "contacts", lambda c: q in c["name"].lower() or q in c["email"].lower())]


# ---------------------------------------------------------------- calendar


def get_day_events(state: WorldState, date: str) -> list[dict[str, Any]]:
    rows = sorted(_matching(state, "events", lambda e: e["date"] == date), key=lambda e: e["start_time"])
    return [_event_view(state, e) for e in rows]


def search_events(state: WorldState, query: str) -> list[dict[str, Any]]:
    q = query.lower()
    return [_event_view(state, e)
            for e in _matching(state, "events", lambda e: q in e["title"].lower() or q in e["description"].lower())]


def create_event(state: WorldState, title: str, date: str, start_time: str, duration_minutes: int,
                 participants: list[str], location: str = "", description: str = "") -> dict[str, Any]:
    table = state.tables["events"]
    record: dict[str, Any] = {"event_id": _next_key(table, "EV"), "title": title, "date": date, "start_time": start_time,
              "duration_minutes": duration_minutes, "location": location, "description": description,
              "participants": list(participants), "status": "confirmed"}
    table[record["event_id"]] = record
    return _event_view(state, record)


def reschedule_event(state: WorldState, event_id: str, date: str, start_time: str) -> dict[str, Any]:
    event = _require(state, "events", event_id, "event")
    if event["status"] != "confirmed":
        raise ToolError(f"event {event_id} is {event['status']}; only confirmed events can move")
    event.update(date=date, start_time=start_time)
    return _event_view(state, event)


def cancel_event(state: WorldState, event_id: str) -> dict[str, Any]:
    event = _require(state, "events", event_id, "event")
    if event["status"] == "cancelled":
        raise ToolError(f"event {event_id} is already cancelled")
    event["status"] = "cancelled"
    return _event_view(state, event)


def add_event_participants(state: WorldState, event_id: str, participants: list[str]) -> dict[str, Any]:
    event = _require(state, "events", event_id, "event")
    present = {_address(state, p) for p in event["participants"]}
    event["participants"] = [*event["participants"], *(p for p in participants if p not in present)]
    return _event_view(state, event)


# ---------------------------------------------------------------- drive


def list_files(state: WorldState) -> list[dict[str, Any]]:
    return [_file_view(f, full=False) for f in state.tables["files"].values()]


def search_files(state: WorldState, query: str) -> list[dict[str, Any]]:
    q = query.lower()
    return [_file_view(f)
            for f in _matching(state, "files", lambda f: q in f["filename"].lower() or q in f["content"].lower())]


def get_file(state: WorldState, file_id: str) -> dict[str, Any]:
    return _file_view(_require(state, "files", file_id, "file"))


def create_file(state: WorldState, filename: str, content: str) -> dict[str, Any]:
    table = state.tables["files"]
    record: dict[str, Any] = {"file_id": _next_key(table, "F"), "filename": filename, "content": content,
              "owner": _me(state)["email"], "shared_with": {}, "last_modified": TODAY}
    table[record["file_id"]] = record
    return _file_view(record)


def append_to_file(state: WorldState, file_id: str, text: str) -> dict[str, Any]:
    record = _require(state, "files", file_id, "file")
    record["content"] = f"{record['content']}\n{text}"
    record["last_modified"] = TODAY
    return _file_view(record)


def share_file(state: WorldState, file_id: str, email: str, permission: str) -> dict[str, Any]:
    record = _require(state, "files", file_id, "file")
    record["shared_with"] = {**record["shared_with"], email: permission}
    return _file_view(record, full=False)


def delete_file(state: WorldState, file_id: str) -> dict[str, Any]:
    _require(state, "files", file_id, "file")
    del state.tables["files"][file_id]
    return {"deleted": file_id}


# ---------------------------------------------------------------- web


def get_webpage(state: WorldState, url: str) -> dict[str, Any]:
    wanted = url.strip().rstrip("/").removeprefix("https://").removeprefix("http://").removeprefix("www.")
    for page in _matching(state, "webpages",
                          lambda p: p["url"].removeprefix("https://").removeprefix("www.") == wanted):
        _synced(page)
        return {"url": page["url"], "title": page["title"], "content": page["content"]}
    raise ToolError(f"404: no page at {url}")
