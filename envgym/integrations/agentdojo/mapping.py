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
  Arguments in neither list (dates, times, permissions already implied by the tool) are not checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.guard import Guard, GuardConfig, ToolRule
from envgym.world.spec import ToolLabel, ToolSpec, WorldSpec


@dataclass(frozen=True)
class Sink:
    """A side-effecting tool: its labels and which of its arguments the guard checks, and how."""

    labels: tuple[ToolLabel, ...]
    control: tuple[str, ...]
    content: tuple[str, ...] = ()


_EGRESS: tuple[ToolLabel, ...] = ("egress",)
_DESTRUCTIVE: tuple[ToolLabel, ...] = ("destructive",)
_EMAIL = Sink(_EGRESS, ("recipients", "cc", "bcc", "attachments"), ("subject", "body"))
_CREATE_EVENT = Sink(_EGRESS, ("participants",), ("title", "description", "location"))
_CANCEL_EVENT = Sink(_DESTRUCTIVE, ("event_id",))

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

SINKS: dict[str, dict[str, Sink]] = {
    "workspace": {
        "send_email": _EMAIL,
        "delete_email": Sink(_DESTRUCTIVE, ("email_id",)),
        "create_calendar_event": _CREATE_EVENT,
        "cancel_calendar_event": _CANCEL_EVENT,
        "reschedule_calendar_event": Sink(_DESTRUCTIVE, ("event_id",)),
        "add_calendar_event_participants": Sink(_EGRESS, ("event_id", "participants")),
        "append_to_file": Sink(_DESTRUCTIVE, ("file_id",), ("content",)),
        "create_file": Sink(_EGRESS, (), ("filename", "content")),
        "delete_file": Sink(_DESTRUCTIVE, ("file_id",)),
        "share_file": Sink(_EGRESS, ("file_id", "email")),
    },
    "travel": {
        "reserve_hotel": Sink(_EGRESS, ("hotel",)),
        "reserve_car_rental": Sink(_EGRESS, ("company",)),
        "reserve_restaurant": Sink(_EGRESS, ("restaurant",)),
        "create_calendar_event": _CREATE_EVENT,
        "cancel_calendar_event": _CANCEL_EVENT,
        "send_email": _EMAIL,
    },
    "banking": {
        "send_money": Sink(_EGRESS, ("recipient", "amount"), ("subject",)),
        "schedule_transaction": Sink(_EGRESS, ("recipient", "amount"), ("subject",)),
        "update_scheduled_transaction": Sink(_EGRESS, ("id", "recipient", "amount"), ("subject",)),
        "update_password": Sink(_DESTRUCTIVE, ("password",)),
        "update_user_info": Sink(_DESTRUCTIVE, ("first_name", "last_name", "street", "city")),
    },
    "slack": {
        "add_user_to_channel": Sink(_EGRESS, ("user", "channel")),
        "send_direct_message": Sink(_EGRESS, ("recipient",), ("body",)),
        "send_channel_message": Sink(_EGRESS, ("channel",), ("body",)),
        "invite_user_to_slack": Sink(_EGRESS, ("user", "user_email")),
        "remove_user_from_slack": Sink(_DESTRUCTIVE, ("user",)),
        "post_webpage": Sink(_EGRESS, ("url",), ("content",)),
        # Fetching a page the agent chose can carry data out in its URL.
        "get_webpage": Sink(_EGRESS, ("url",)),
    },
}


@dataclass(frozen=True)
class ToolInfo:
    """An AgentDojo tool as the mapping needs it: its name, description and JSON Schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


def tool_labels(suite: str, tool: ToolInfo) -> tuple[list[ToolLabel], ToolRule]:
    """The guard's labels and per-tool rule for `tool` of `suite`; a tool the table does not name is a full sink."""
    labels: list[ToolLabel] = []
    sink = SINKS.get(suite, {}).get(tool.name)
    if tool.name in UNTRUSTED_READS.get(suite, ()):
        labels.append("reads_untrusted")
    elif tool.name in TRUSTED_READS.get(suite, ()):
        labels.append("read_only")
    elif sink is None:
        sink = Sink(("egress", "destructive"), tuple(tool.parameters.get("properties", {})))
    if sink is None:
        return labels, ToolRule(labels=labels)
    labels.extend(sink.labels)
    return labels, ToolRule(labels=labels, control=list(sink.control), content=list(sink.content))


def build_guard(suite: str, tools: Sequence[ToolInfo], setting: dict[str, Any] | None = None) -> Guard:
    """envgym's guard over the tools of one AgentDojo suite (`setting` updates the guard config, e.g. `delimit`)."""
    specs, rules = [], {}
    for tool in tools:
        labels, rule = tool_labels(suite, tool)
        specs.append(ToolSpec(name=tool.name, description=tool.description or tool.name, labels=labels,
                              parameters=tool.parameters, source={"agentdojo": suite}))
        rules[tool.name] = rule
    world = WorldSpec(name=f"agentdojo-{suite}", tools=specs)
    config = GuardConfig.model_validate({"confirm": "deny", **(setting or {}), "tools": rules})
    return Guard(world, config)


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
    return json.dumps(list(dict.fromkeys(result_values(value))), ensure_ascii=False)
