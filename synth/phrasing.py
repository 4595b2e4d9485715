"""Phrasings of task clauses: several grammatical wordings of each, drawn by the task's RNG, so instructions of
the same program shape still read differently. `mask` is how near-duplicates are judged: names, ids, emails,
dates, times and numbers replaced by placeholders."""

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


def phrase(rng: random.Random, kind: str, **values: object) -> str:
    """One wording of a clause, filled in."""
    return rng.choice(CLAUSES[kind]).format(**values)


_MASKS = [(re.compile(r"\S+@\S+"), "<email>"), (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<date>"),
          (re.compile(r"\b\d{1,2}:\d{2}\b"), "<time>"), (re.compile(r"\b[A-Z]{2,5}-?\d{4,5}\b"), "<id>"),
          (re.compile(r"\d+(?:\.\d+)?"), "<num>"), (re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*"), "<name>")]


def mask(text: str) -> str:
    """The text with names, ids, emails, dates, times and numbers replaced by placeholders."""
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return text
