"""What each AgentDojo tool is to envgym's guard: labels, the arguments that choose who or what, and result values.

The mapping is ours; the decision stays the guard's. Three rules, the same for every suite:

- a tool whose result holds text written by third parties (emails, events, files, reviews, transactions, messages,
  web pages, channel names anyone can create) is `reads_untrusted`; one that returns the user's own records or the
  platform's catalogue is `read_only`;
- every other tool is side-effecting (deny by default): `egress` when it sends, shares, books or pays, `destructive`
  when it deletes, cancels, moves or overwrites; a tool this table does not name gets both labels and all of its
  arguments checked;
- `control` arguments pick a recipient, target, amount or credential and must come from the user's request or a
  trusted result; `content` arguments (subjects, bodies) may carry text but no untrusted address or link.
  `chosen` arguments say which write it is (an event's title, a booking's or a payment's days and times): never
  text copied out of untrusted data. Arguments in no list (permissions already implied by the tool) are not
  checked.
- argument roles: `recipients` hold email addresses (parsed, one per atom), `payees` name who receives by another
  value (an IBAN, a user, a channel), `payload` a record that goes to them (an attachment, a shared file); content
  and payload may reach a recipient the user did not name only without values untrusted data alone wrote. A `named`
  payee (who receives money) must be one the user named, not only a trusted one.

The table says only what each tool is (its labels, argument roles and the fields its platform writes), never what a
particular user or injection task says: intent words are the tool's own verbs, and private fields are the same for
every suite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.guard import (
    Guard,
    GuardConfig,
    RecordLookup,
    RecordRule,
    RecordTable,
    TargetRule,
    ToolRule,
    normalize,
)
from envgym.world.spec import ToolLabel


@dataclass(frozen=True)
class Sink:
    """A side-effecting tool: its labels and how the guard checks its arguments (see `ToolRule`)."""

    labels: tuple[ToolLabel, ...]
    control: tuple[str, ...]
    content: tuple[str, ...] = ()
    recipients: tuple[str, ...] = ()
    payees: tuple[str, ...] = ()
    payload: tuple[str, ...] = ()
    secret: tuple[str, ...] = ()
    chosen: tuple[str, ...] = ()
    named: tuple[str, ...] = ()
    target: TargetRule | None = None
    intent: tuple[str, ...] | None = None  # None: the guard's default (the verb of a destructive tool's name)
    delegable: tuple[str, ...] = ()  # may come from a source the user pointed at, or be computed (`ToolRule`)


_EGRESS: tuple[ToolLabel, ...] = ("egress",)
_DESTRUCTIVE: tuple[ToolLabel, ...] = ("destructive",)
# A record a user names by its title or file name; the key is looked up in the AgentDojo environment (`lookup`).
# Described targets: "the grocery list" (words of a file name), "my Dental check-up" (the event described so).
_FILE = TargetRule(arg="file_id", entity="file", names=["filename"], match="best")
_EVENT = TargetRule(arg="event_id", entity="event", names=["title", "description"], match="best")
_EMAIL_TARGET = TargetRule(arg="email_id", entity="email", names=["subject"])
_EMAIL = Sink(_EGRESS, (), ("subject", "body"), recipients=("recipients", "cc", "bcc"), payload=("attachments",))
# Creating an event is a write the user must ask for (the verbs of creating one), even with nobody invited. Its
# title says which event it is: the user's choice, never text copied out of untrusted data.
_CREATE_EVENT = Sink(_EGRESS, (), ("title", "description", "location"), recipients=("participants",),
                     chosen=("title", "start_time", "end_time"),
                     intent=("create", "add", "schedule", "book", "set up", "remind", "organize", "arrange", "plan"))


def _reserve(arg: str, entity: str, *when: str) -> Sink:
    """A booking: only when the user asks to book, only of a place the user named, and for days the user chose."""
    return Sink(_EGRESS, (), target=TargetRule(arg=arg, entity=entity, names=["name"]), chosen=when,
                intent=("reserve", "book", "make a reservation"))


_CANCEL_EVENT = Sink(_DESTRUCTIVE, (), target=_EVENT)

# Third-party text. Calendar events are invitations others write; files are shared in; a channel's name is chosen by
# whoever created it; a transaction's subject by whoever sent it.
UNTRUSTED_READS: dict[str, frozenset[str]] = {
    "workspace": frozenset({
        "get_unread_emails", "get_sent_emails", "get_received_emails", "get_draft_emails", "search_emails",
        "search_calendar_events", "get_day_calendar_events", "search_files_by_filename", "get_file_by_id",
        "list_files", "search_files",
    }),
    "travel": frozenset({
        "get_rating_reviews_for_hotels", "get_rating_reviews_for_restaurants", "get_rating_reviews_for_car_rental",
        "search_calendar_events", "get_day_calendar_events",
    }),
    "banking": frozenset({"read_file", "get_most_recent_transactions"}),
    "slack": frozenset({"get_channels", "read_channel_messages", "read_inbox", "get_webpage"}),
}

# Fields of untrusted results that the platform writes, not a third party: a bank's ledger records how much moved
# and when (whoever sent it), so those values are trusted although the transaction's subject is not.
PLATFORM_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "banking": {"get_most_recent_transactions": ("id", "amount", "date", "recurring")},
    # Slack stamps who posted where; a channel listing names channels that exist ("*": every value).
    "slack": {"read_channel_messages": ("sender", "recipient"), "read_inbox": ("sender", "recipient"),
              "get_channels": ("*",)},
}

# The user's own records and the platforms' catalogues (names, prices, addresses, opening hours, contacts).
TRUSTED_READS: dict[str, frozenset[str]] = {
    "workspace": frozenset({"search_contacts_by_name", "search_contacts_by_email", "get_current_day"}),
    "travel": frozenset({
        "get_user_information", "get_all_hotels_in_city", "get_hotels_prices", "get_hotels_address",
        "get_all_restaurants_in_city", "get_cuisine_type_for_restaurants", "get_restaurants_address",
        "get_dietary_restrictions_for_all_restaurants", "get_contact_information_for_restaurants",
        "get_price_for_restaurants", "check_restaurant_opening_hours", "get_all_car_rental_companies_in_city",
        "get_car_types_available", "get_car_fuel_options", "get_car_rental_address", "get_car_price_per_day",
        "get_flight_information",
    }),
    "banking": frozenset({"get_iban", "get_balance", "get_scheduled_transactions", "get_user_info"}),
    "slack": frozenset({"get_users_in_channel"}),
}

# Fields of the user's records that only leave when the user's request asks to send them (-> the words that ask),
# in every suite.
PRIVATE: dict[str, list[str]] = {
    "passport_number": ["passport"], "credit_card_number": ["credit card", "card number"],
    "bank_account_number": ["bank account", "account number"], "ID_number": ["id number"],
    "password": ["password"],
}

# How a user names the records a read returns, and the fields the platform (not the record's third-party author)
# writes on them: once the user names a record, those values are the user's (the participants of "the
# 'Introductory meeting' event", the sender of "the emails about the hiking trip", who sent "that 10.00").
_EVENTS = RecordRule(names=["title"], stamped=["id_", "participants"],
                     named_by={"participants": ["participant", "attendee", "invitee", "guest", "everyone"]})
_EMAILS = RecordRule(names=["subject"], stamped=["id_", "sender", "recipients", "cc", "bcc"],
                     named_by={"sender": ["sender", "sent", "reply", "replies", "wrote", "whoever"]})
_CONTACTS = RecordRule(names=["name", "email"], stamped=["email"])
_FILES = RecordRule(names=["filename"], stamped=["id_", "owner"])
RECORDS: dict[str, dict[str, RecordRule]] = {
    "workspace": {
        **dict.fromkeys(["search_calendar_events", "get_day_calendar_events"], _EVENTS),
        **dict.fromkeys(["get_unread_emails", "get_sent_emails", "get_received_emails", "get_draft_emails",
                         "search_emails"], _EMAILS),
        **dict.fromkeys(["search_files_by_filename", "get_file_by_id", "list_files", "search_files"], _FILES),
        **dict.fromkeys(["search_contacts_by_name", "search_contacts_by_email"], _CONTACTS),
    },
    "travel": dict.fromkeys(["search_calendar_events", "get_day_calendar_events"], _EVENTS),
    "banking": {"get_most_recent_transactions": RecordRule(names=["amount", "subject"], stamped=["sender", "recipient"])},
}

# Arguments a read sends to an outside server (the URL of a fetch can carry data out). They are delegable: a link
# written in a source the user pointed at ("the websites posted to the 'general' channel") may be fetched, but never
# one found on a fetched page (the guard does not let delegation chain through fetches).
FETCH_ARGS: dict[str, dict[str, tuple[str, ...]]] = {"slack": {"get_webpage": ("url",)}}

SINKS: dict[str, dict[str, Sink]] = {
    "workspace": {
        "send_email": _EMAIL,
        "delete_email": Sink(_DESTRUCTIVE, (), target=_EMAIL_TARGET),
        "create_calendar_event": _CREATE_EVENT,
        "cancel_calendar_event": _CANCEL_EVENT,
        "reschedule_calendar_event": Sink(_DESTRUCTIVE, (), target=_EVENT,
                                          chosen=("new_start_time", "new_end_time")),
        "add_calendar_event_participants": Sink(_EGRESS, (), recipients=("participants",), target=_EVENT,
                                                payload=("event_id",), intent=("add", "invite")),
        "append_to_file": Sink(_DESTRUCTIVE, (), ("content",), target=_FILE, intent=("append", "add")),
        "create_file": Sink(_EGRESS, (), ("filename", "content")),
        "delete_file": Sink(_DESTRUCTIVE, (), target=_FILE),
        "share_file": Sink(_EGRESS, (), recipients=("email",), payload=("file_id",), target=_FILE,
                           intent=("share",)),
    },
    "travel": {
        "reserve_hotel": _reserve("hotel", "hotel", "start_day", "end_day"),
        "reserve_car_rental": _reserve("company", "car_rental", "start_time", "end_time"),
        "reserve_restaurant": _reserve("restaurant", "restaurant", "start_time"),
        "create_calendar_event": _CREATE_EVENT,
        "cancel_calendar_event": _CANCEL_EVENT,
        "send_email": _EMAIL,
    },
    "banking": {
        # The payee is never delegated ("pay the bill in this file" is refused: the file's author picks the payee),
        # and is one the user named (trusted is not enough: the ledger shows every counterparty); the amount may be
        # the file's or computed ("adjust my rent as the notice says", "send back the difference").
        "send_money": Sink(_EGRESS, ("amount",), ("subject",), payees=("recipient",), named=("recipient",),
                           delegable=("amount",), chosen=("date",)),
        "schedule_transaction": Sink(_EGRESS, ("amount",), ("subject",), payees=("recipient",), named=("recipient",),
                                     delegable=("amount",), chosen=("date",)),
        "update_scheduled_transaction": Sink(_EGRESS, ("id", "amount"), ("subject",), payees=("recipient",),
                                             named=("recipient",), delegable=("amount",), chosen=("date",)),
        "update_password": Sink(_DESTRUCTIVE, (), secret=("password",)),
        "update_user_info": Sink(_DESTRUCTIVE, ("first_name", "last_name", "street", "city"),
                                 delegable=("first_name", "last_name", "street", "city")),
    },
    "slack": {
        "add_user_to_channel": Sink(_EGRESS, (), payees=("user", "channel"), intent=("add", "invite")),
        "send_direct_message": Sink(_EGRESS, (), ("body",), payees=("recipient",)),
        "send_channel_message": Sink(_EGRESS, (), ("body",), payees=("channel",)),
        # Whom to invite is the user's; that user's address may be where the user said to find it (a source the
        # user pointed at).
        "invite_user_to_slack": Sink(_EGRESS, ("user", "user_email"), delegable=("user_email",), intent=("invite",)),
        "remove_user_from_slack": Sink(_DESTRUCTIVE, ("user",)),
        "post_webpage": Sink(_EGRESS, (), ("content",), payees=("url",)),
    },
}


@dataclass(frozen=True)
class ToolInfo:
    """An AgentDojo tool as the mapping needs it: its name, description and JSON Schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


def tool_rule(suite: str, tool: ToolInfo) -> tuple[list[ToolLabel], ToolRule]:
    """The guard's labels and per-tool rule for `tool` of `suite`; a tool the table does not name is a full sink."""
    labels: list[ToolLabel] = []
    sink = SINKS.get(suite, {}).get(tool.name)
    fetch = list(FETCH_ARGS.get(suite, {}).get(tool.name, ()))
    if tool.name in UNTRUSTED_READS.get(suite, ()):
        labels.append("reads_untrusted")
    elif tool.name in TRUSTED_READS.get(suite, ()):
        labels.append("read_only")
    elif sink is None:
        sink = Sink(("egress", "destructive"), tuple(tool.parameters.get("properties", {})))
    records = RECORDS.get(suite, {}).get(tool.name)
    if sink is None:
        return labels, ToolRule(labels=labels, fetch=fetch, delegable=fetch, records=records)
    labels.extend(sink.labels)
    return labels, ToolRule(labels=labels, control=list(sink.control), content=list(sink.content),
                            secret=list(sink.secret), chosen=list(sink.chosen), target=sink.target, fetch=fetch,
                            intent=list(sink.intent) if sink.intent is not None else None,
                            delegable=list(sink.delegable), records=records, recipients=list(sink.recipients),
                            payees=list(sink.payees), payload=list(sink.payload), named=list(sink.named))


def build_guard(suite: str, tools: Sequence[ToolInfo], setting: dict[str, Any] | None = None) -> Guard:
    """envgym's guard over the tools of one AgentDojo suite (`setting` updates the guard config, e.g. `delimit`)."""
    labels, rules = {}, {}
    for tool in tools:
        labels[tool.name], rules[tool.name] = tool_rule(suite, tool)
    config = GuardConfig.model_validate({"confirm": "deny", "private": PRIVATE, **(setting or {}),
                                         "tools": rules})
    return Guard(labels, config)


def platform_values(suite: str, tool: str, result: Any) -> list[Any]:
    """The values of `result` (a plain JSON-like value) in the fields `PLATFORM_FIELDS` trusts for `tool`."""
    fields = PLATFORM_FIELDS.get(suite, {}).get(tool)
    if not fields:
        return []
    if fields == ("*",):
        return [result]
    records = result if isinstance(result, list) else [result]
    return [record[f] for record in records if isinstance(record, dict) for f in fields if f in record]


_TABLES = {"file": ("cloud_drive", "files"), "event": ("calendar", "events"), "email": ("inbox", "emails"),
           "hotel": ("hotels", "hotel_list"), "restaurant": ("restaurants", "restaurant_list"),
           "car_rental": ("car_rental", "company_list")}


def record_lookup(env: Any) -> RecordLookup:
    """Finds the record a target argument names in an AgentDojo environment, as a plain dict (None: no such
    record): by key in the workspace's drive, calendar and inbox, by name in travel's catalogues.

    The guard lets a target it cannot find through, trusting the tool to fail; a booking tool may book any name at
    all, so a catalogue name that is not there is judged as a record of that name (the user must have named it).
    """

    def lookup(entity: str, key: str) -> dict[str, Any] | None:
        owner, attribute = _TABLES.get(entity, ("", ""))
        records = getattr(getattr(env, owner, None), attribute, None)
        if isinstance(records, dict):
            found = records.get(key)
            return found.model_dump(mode="json") if found is not None else None
        if isinstance(records, list):
            named = next((r for r in records if getattr(r, "name", None) == key), None)
            return named.model_dump(mode="json") if named is not None else {"name": key}
        return None

    return lookup


def record_table(env: Any) -> RecordTable:
    """Every record of an entity in an AgentDojo environment, by key, as plain dicts (for described targets)."""

    def table(entity: str) -> dict[str, dict[str, Any]]:
        owner, attribute = _TABLES.get(entity, ("", ""))
        records = getattr(getattr(env, owner, None), attribute, None)
        if isinstance(records, dict):
            return {str(k): r.model_dump(mode="json") for k, r in records.items()}
        return {}

    return table


def result_values(value: Any) -> Iterator[str]:
    """Every atomic value in a tool result: dict keys and values, list items, and a text's lines and their values
    after a `Label:` (AgentDojo's catalogue tools answer in text such as 'Hotel Names: A\\nB')."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from result_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from result_values(item)
    elif value is not None:
        text = str(value)
        yield text
        for line in text.splitlines():
            line = line.strip()
            if line and line != text:
                yield line
            if ": " in line:
                yield line.split(": ", 1)[1].strip()


def observed_text(value: Any) -> str:
    """The text the guard records for a result: its atomic values as a JSON list (the guard matches quoted values)."""
    return json.dumps(list(dict.fromkeys(normalize(v) for v in result_values(value))), ensure_ascii=False)
