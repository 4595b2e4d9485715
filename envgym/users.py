"""User simulators: the other side of the conversation.

`ScriptedUser` is deterministic and task-driven: it opens with the task's first message, answers questions with
what the task says the user knows (only the facts asked for), says what it needs in its own words when the agent
asks something it has no fact for (the task's `meta["request"]`, first person; a task without one said it in its
opening), never the role-play instruction, approves a confirmation only for a change it asked for, stated with its values
(a write of the task's reference solution whose every argument value the request names, so "shall I cancel
reservation R0022?" gets a yes, "shall I set the bags of R0022 to 0?" a no when the user wants 2, and a request that
names no values a no), says it is done once its goal is met and gives up after a few unhelpful replies. `LLMUser` plays the user with any ChatModel; a reply that breaks the part (empty, a tool
call, the agent's voice, a tool of the solution named) is replaced by the scripted user's reply to the same turn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from envgym.rewards.rules import is_action_request, is_confirmation_request
from envgym.world.spec import TaskSpec

STOP = "###STOP###"
# How an assistant, not a customer, opens or signs off (synth.quality uses it for reworded openings too).
AGENT_VOICE = re.compile(
    r"^(sure|certainly|of course|absolutely|here is|here's|as an ai|assistant:|agent:|i'd be happy|i can help)"
    r"|how (can|may) i (help|assist)|let me (check|look)|i have (updated|cancelled|created)", re.IGNORECASE)


@dataclass
class UserTurn:
    text: str
    done: bool = False


class UserSimulator(Protocol):
    def opening(self) -> str: ...

    def respond(self, agent_text: str, goal_reached: Callable[[], bool]) -> UserTurn: ...


def _aliases(key: str, spoken: str = "") -> list[str]:
    """How an agent may name the fact `key`: its words, run together, without a trailing "id"/"number", and
    `spoken`, the name the task gives it (`meta["fact_names"]`: "duration in minutes" for `duration_min`)."""
    words = key.lower().replace("-", "_").split("_")
    aliases = {" ".join(words), "".join(words), spoken.lower()}
    if len(words) > 1 and words[-1] in ("id", "number"):
        aliases.add(" ".join(words[:-1]))
    return sorted(a for a in aliases if a)


@dataclass
class ScriptedUser:
    """A deterministic user who follows the task script."""

    task: TaskSpec
    patience: int = 3
    given: set[str] = field(default_factory=set)
    unhelpful: int = 0
    write_tools: Collection[str] | None = None  # the world's write tools (None: every call of the solution)
    stated: bool = False  # whether the user has said what they need

    def opening(self) -> str:
        return self.task.opening

    @property
    def request(self) -> str:
        """What the user needs, in their own words: the task's `meta["request"]`; a task without one has said it in
        its opening, and the user says so rather than repeat it."""
        return str(self.task.meta.get("request") or "What I need is in my first message; ask me for anything you "
                   "need to know.")

    def respond(self, agent_text: str, goal_reached: Callable[[], bool]) -> UserTurn:
        if goal_reached():
            return UserTurn(f"Thank you, that is everything I needed. {STOP}", done=True)
        text = agent_text.lower()
        # Asked for the go-ahead, the user answers it even if the request names facts it knows ("cancel order X?").
        if is_action_request(text):
            return self._confirm(agent_text)
        names = self.task.meta.get("fact_names") or {}
        asked = asked_facts(text, self.task.user_known, names)
        if asked:
            self.given.update(asked)
            # A value the user wants ("the new memo") is not theirs the way their email is (`meta["wanted_facts"]`).
            wanted = set(self.task.meta.get("wanted_facts") or [])
            return UserTurn(" ".join(f"{'The' if key in wanted else 'My'} {names.get(key) or key.replace('_', ' ')} "
                                     f"is {self.task.user_known[key]}." for key in asked))
        if is_confirmation_request(text):
            return self._confirm(agent_text)
        if not self.stated:  # "How can I help?": the request, once, and no fact the agent has not asked for
            self.stated = True
            return UserTurn(self.request)
        self.unhelpful += 1
        if self.unhelpful > self.patience:
            return UserTurn(f"I don't think this is going anywhere. Goodbye. {STOP}", done=True)
        return UserTurn("Sorry, I am not sure what you are asking me. Ask me for what you need to know and I will "
                        "tell you if I have it.")

    def _confirm(self, agent_text: str) -> UserTurn:
        """Yes to a change the task asked for, stated with its values; no to anything else (`requested_change`)."""
        if requested_change(self.task, agent_text, self.write_tools):
            return UserTurn("Yes, please go ahead.")
        self.unhelpful += 1
        return UserTurn("No, please don't do that; it is not the change I asked for.")


def asked_facts(text: str, known: dict[str, str], names: dict[str, str] | None = None) -> list[str]:
    """The facts of `known` that the agent's (lower-cased) `text` asks for, in `known`'s order: every fact whose
    name it says (`_aliases`: "zip code", "order id" or "order", or its spoken name in `names`); failing that, the facts a question names by the
    last word of their name ("How many months?" asks for `renew_months`) or, with "which", by the words before it
    ("Which print job do you mean?" asks for `print_job_date`)."""
    names = names or {}
    named = [key for key in known if any(alias in text for alias in _aliases(key, names.get(key, "")))]
    if named:
        return named
    questions = [q for q in re.split(r"(?<=[?.!])\s+", text) if q.rstrip().endswith("?")]
    found = []
    for key in known:
        parts = key.lower().replace("-", "_").split("_")
        head = " ".join(parts[:-1])
        for q in questions:
            if re.search(rf"\b{re.escape(parts[-1])}s?\b", q) or (
                    head and "which" in q and re.search(rf"\b{re.escape(head)}", q)):
                found.append(key)
                break
    return found


def requested_change(task: TaskSpec, text: str, write_tools: Collection[str] | None = None) -> bool:
    """Whether `text` states one of the changes the task asks for: every argument value of one call of the reference
    solution whose tool is in `write_tools` (None: any call of the solution). Values are matched as whole words,
    case-insensitive; a number may be written as an integer or with two decimals."""
    said = _words(text)
    calls = [c for c in task.solution if write_tools is None or c.name in write_tools]
    return any(values and all(_said(v, said) for v in values) for values in map(_call_values, calls))


def _call_values(call: Any) -> list[Any]:
    """The scalar values of a call's arguments (inside lists and objects too), booleans and nulls left out."""
    stack, values = [call.arguments], []
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif value is not None and not isinstance(value, bool) and str(value).strip():
            values.append(value)
    return values


def _words(text: str) -> str:
    return " " + re.sub(r"\s+", " ", text.lower()) + " "


def _said(value: Any, said: str) -> bool:
    if isinstance(value, int | float):
        number = float(value)
        forms = {repr(number), f"{number:.2f}", str(value)} | ({str(int(number))} if number.is_integer() else set())
    else:
        forms = {re.sub(r"\s+", " ", str(value).lower().strip())}
    return any(re.search(rf"(?<![\w.#-]){re.escape(form)}(?![\w-]|\.\d)", said) for form in forms)


def user_reply_problem(text: str, task: TaskSpec) -> str | None:
    """Why a model's line cannot be the user's reply; None when it can."""
    if not text.strip() or text.strip() == STOP:
        return "empty"
    if "<tool_call" in text or '"arguments"' in text:
        return "a tool call"
    if AGENT_VOICE.search(text.strip()):
        return "speaks as the agent"
    for call in task.solution:
        if call.name.lower() in text.lower():
            return f"names the tool {call.name!r}"
    return None


@dataclass
class LLMUser:
    """A user played by a chat model, prompted with the task's instruction and known facts; the scripted user
    answers the turns where the model's reply fails `user_reply_problem` (counted in `replaced`)."""

    task: TaskSpec
    model: Any  # envgym.llm.ChatModel
    max_tokens: int = 96
    history: list[dict[str, str]] = field(default_factory=list)
    replaced: int = 0
    write_tools: Collection[str] | None = None

    def __post_init__(self) -> None:
        self.fallback = ScriptedUser(self.task, write_tools=self.write_tools)

    def opening(self) -> str:
        self.history = [{"role": "assistant", "content": self.task.opening}]
        return self.task.opening

    def respond(self, agent_text: str, goal_reached: Callable[[], bool]) -> UserTurn:
        if goal_reached():
            return UserTurn(f"Thank you, that is everything I needed. {STOP}", done=True)
        known = "\n".join(f"- {k}: {v}" for k, v in self.task.user_known.items())
        system = (
            "You are a customer talking to a support agent. Stay in character, answer briefly, and reveal "
            f"only what is asked.\nYour goal: {self.task.instruction}\nWhat you know:\n{known}\n"
            f"When your goal is met or you want to end the chat, write {STOP}."
        )
        self.history.append({"role": "user", "content": agent_text})
        reply = self.model.chat(
            [{"role": "system", "content": system}, *self.history], max_tokens=self.max_tokens
        )
        if user_reply_problem(reply.text, self.task) is not None:
            self.replaced += 1
            turn = self.fallback.respond(agent_text, goal_reached)
            self.history.append({"role": "assistant", "content": turn.text})
            return turn
        self.history.append({"role": "assistant", "content": reply.text})
        return UserTurn(reply.text.strip(), done=STOP in reply.text)
