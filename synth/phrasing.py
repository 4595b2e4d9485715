"""Phrasings of task clauses: several grammatical wordings of each, drawn by the task's RNG, so instructions of
the same program shape still read differently. Each wording has a twin in the user's own voice (`REQUESTS`, first
person, same index): what the scripted user says it needs, with no fact the user holds (those it gives only when
asked). `mask` is how near-duplicates are judged: names, ids, emails, dates, times and numbers replaced by
placeholders."""

from __future__ import annotations

import random
import re

CLAUSES: dict[str, list[str]] = {
    "several": ["you have several {plural}; the one you mean has {field} {value}",
                "of your {plural}, you mean the one whose {field} is {value}",
                "you mean the {label} with {field} {value} (you have more than one)",
                "the {label} in question is the one with {field} {value}"],
    "lookup_ref": ["you want to know the {field} of the {other} behind your {label}",
                   "you need the {field} of the {other} your {label} refers to",
                   "you are asking for the {field} of the {other} linked to your {label}",
                   "you would like to hear the {field} of the {other} attached to your {label}"],
    "lookup": ["you want to know the {field} of your {label}", "you need the {field} recorded on your {label}",
               "you are asking which {field} your {label} has", "you would like to hear the {field} of your {label}"],
    "aggregate": ["you want to know {what}", "you need {what}", "you are asking for {what}",
                  "you would like to find out {what}"],
    "update": ["the {field} of your {label} changed to {new}", "your {label}'s {field} set to {new}",
               "the {field} on your {label} updated to {new}"],
    "transition": ["your {label} marked as {state}", "your {label} moved to {state}",
                   "the status of your {label} set to {state}"],
    "delete": ["your {label} deleted", "your {label} removed for good", "your {label} taken off your account"],
    "want": ["you want {act}", "you would like {act}", "you need {act}"],
    "compare": ["among your {plural} you mean the one with the {word} {field}",
                "you mean whichever of your {plural} has the {word} {field}",
                "it is about your {label} with the {word} {field}"],
    "iterate": ["you want every one of your {status} {plural} marked as {target}",
                "all of your {plural} that are {status} should become {target}",
                "you would like each {status} {label} of yours moved to {target}"],
    "create": ["you want to add {a_label} for the {other} {name}{details}, and to be told the new {label} id",
               "you would like a new {label} on the {other} {name}{details}; you want the new {label} id",
               "you need {a_label} created for the {other} {name}{details}, and the new {label} id read back to you"],
    "intro": ["You are {name}.", "Your name is {name}.", "You play {name}, a customer.", "{name} is who you are."],
    "close": ["Give the agent the facts it asks for, and agree when it asks to confirm a change you want.",
              "Answer the agent's questions with what you know; agree to the changes you asked for.",
              "Share what you know when asked, and approve only the changes you came for.",
              "Tell the agent what it asks for and agree before it makes a change you requested."],
}


# The user's side of each clause, index for index. Placeholders for facts the user holds ({value}, {new}, {name},
# {details}) are left out on purpose: the user names the record or the change, and gives the values when asked.
REQUESTS: dict[str, list[str]] = {
    "several": ["I have several {plural} and I mean one of them", "it is about one of my {plural}",
                "I mean one particular {label} (I have more than one)", "it concerns one {label} of mine"],
    "lookup_ref": ["I want to know the {field} of the {other} behind my {label}",
                   "I need the {field} of the {other} my {label} refers to",
                   "I am asking for the {field} of the {other} linked to my {label}",
                   "I would like to hear the {field} of the {other} attached to my {label}"],
    "lookup": ["I want to know the {field} of my {label}", "I need the {field} recorded on my {label}",
               "I am asking which {field} my {label} has", "I would like to hear the {field} of my {label}"],
    "aggregate": ["I want to know {what}", "I need {what}", "I am asking for {what}", "I would like to find out {what}"],
    "update": ["the {field} of my {label} changed", "my {label}'s {field} changed", "the {field} on my {label} updated"],
    "transition": ["my {label} marked as {state}", "my {label} moved to {state}", "the status of my {label} set to {state}"],
    "delete": ["my {label} deleted", "my {label} removed for good", "my {label} taken off my account"],
    "want": ["I want {act}", "I would like {act}", "I need {act}"],
    "compare": ["among my {plural} I mean the one with the {word} {field}",
                "I mean whichever of my {plural} has the {word} {field}",
                "it is about my {label} with the {word} {field}"],
    "iterate": ["I want every one of my {status} {plural} marked as {target}",
                "all of my {plural} that are {status} should become {target}",
                "I would like each {status} {label} of mine moved to {target}"],
    "create": ["I want to add {a_label} for one of your {others}, and to be told the new {label} id",
               "I would like a new {label} on one of your {others}; I want the new {label} id",
               "I need {a_label} created for one of your {others}, and the new {label} id read back to me"],
}


def phrase(rng: random.Random, kind: str, **values: object) -> str:
    """One wording of a clause, filled in."""
    return rng.choice(CLAUSES[kind]).format(**values)


def phrase_pair(rng: random.Random, kind: str, mine: dict[str, object] | None = None, **values: object
                ) -> tuple[str, str]:
    """One wording of a clause for the instruction and its twin in the user's voice (`REQUESTS`), from one draw,
    so the instruction reads exactly as `phrase` would have written it. `mine` overrides values in the user's
    wording (a phrase that says "your" in the instruction says "my" there)."""
    index = rng.randrange(len(CLAUSES[kind]))
    return CLAUSES[kind][index].format(**values), REQUESTS[kind][index].format(**{**values, **(mine or {})})


_MASKS = [(re.compile(r"\S+@\S+"), "<email>"), (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<date>"),
          (re.compile(r"\b\d{1,2}:\d{2}\b"), "<time>"), (re.compile(r"\b[A-Z]{2,5}-?\d{4,5}\b"), "<id>"),
          (re.compile(r"\d+(?:\.\d+)?"), "<num>"), (re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*"), "<name>")]


def mask(text: str) -> str:
    """The text with names, ids, emails, dates, times and numbers replaced by placeholders."""
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return text
