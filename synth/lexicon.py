"""Words for the world grammar: articles and plurals that read right, and the value pools fields are drawn from."""

from __future__ import annotations

# Nouns whose article is not what the first letter suggests.
_AN_EXCEPTIONS = ("hour", "honest", "heir")
_A_EXCEPTIONS = ("user", "unit", "uni", "euro", "one", "use", "usb", "ups")
_IRREGULAR = {"person": "people", "child": "children", "analysis": "analyses", "status": "statuses",
              "address": "addresses", "series": "series", "staff": "staff", "equipment": "equipment"}


def words(name: str) -> str:
    """A snake_case identifier as words: `watering_plan` -> `watering plan`."""
    return name.replace("_", " ")


UNITS = {"min": "in minutes", "mins": "in minutes", "hrs": "in hours", "sec": "in seconds", "gb": "in GB",
         "mb": "in MB", "kg": "in kilograms", "km": "in kilometres", "pct": "as a percentage", "usd": "in US dollars"}
ABBREVIATIONS = {"qty": "quantity", "num": "number", "amt": "amount", "pct": "percentage"}


def lexical(name: str) -> str:
    """A field name as a person says it: a unit suffix spelled out, abbreviations expanded (`duration_min` ->
    `duration in minutes`, `size_gb` -> `size in GB`). For what users are told and asked in prose; the names of
    facts they give stay `words` (the scripted user matches those)."""
    parts = name.split("_")
    unit = UNITS.get(parts[-1]) if len(parts) > 1 else None
    body = [ABBREVIATIONS.get(p, p) for p in (parts[:-1] if unit else parts)]
    return " ".join([*body, *([unit] if unit else [])])


def article(phrase: str) -> str:
    """'a' or 'an' for the phrase's first word (by sound for the common exceptions)."""
    first = phrase.strip().lower()
    if first.startswith(_AN_EXCEPTIONS):
        return "an"
    if first.startswith(_A_EXCEPTIONS):
        return "a"
    return "an" if first[:1] in "aeiou" else "a"


def a(phrase: str) -> str:
    """The phrase with its indefinite article: `a(words('order'))` -> `an order`."""
    return f"{article(phrase)} {phrase}"


def plural(noun: str) -> str:
    """English plural of a snake_case noun (the last word is inflected)."""
    head, _, last = noun.rpartition("_")
    if last in _IRREGULAR:
        out = _IRREGULAR[last]
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        out = last + "es"
    elif last.endswith("y") and last[-2:-1] not in "aeiou":
        out = last[:-1] + "ies"
    else:
        out = last + "s"
    return f"{head}_{out}" if head else out


def past(verb: str) -> str:
    """Past participle of a (possibly multi-word, snake_case) verb: `check_in` -> `checked in`."""
    first, _, rest = verb.partition("_")
    irregular = {"send": "sent", "pay": "paid", "hold": "held", "shut": "shut", "set": "set", "rebuild": "rebuilt",
                 "withdraw": "withdrawn", "write": "written", "ship": "shipped", "plan": "planned",
                 "drop": "dropped", "stop": "stopped", "submit": "submitted", "admit": "admitted"}
    if first in irregular:
        done = irregular[first]
    elif first.endswith("e"):
        done = first + "d"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        done = first[:-1] + "ied"
    else:
        done = first + "ed"
    return " ".join([done, *rest.split("_")]).strip() if rest else done


FIRST_NAMES = ["Ada", "Bruno", "Chen", "Dalia", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kenji", "Lena",
               "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara",
               "Zoe", "Amara", "Bianca", "Dmitri", "Esme", "Felix"]
LAST_NAMES = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski", "Reyes", "Brennan",
              "Castillo", "Dubois", "Eriksen", "Fischer", "Gallo", "Horvat", "Ibrahim", "Jensen", "Kaur", "Larsen",
              "Mendes", "Nakamura", "Ortiz", "Petrov", "Quist", "Rossi", "Sato", "Varga", "Weber", "Yilmaz"]
STREETS = ["Maple Street", "Harbor Road", "Cedar Lane", "Mill Way", "Station Avenue", "Orchard Close", "Bridge Street",
           "Hill Road", "Park Lane", "River Walk", "Elm Court", "Quarry Drive"]
CITIES = ["Porto", "Lyon", "Tampere", "Graz", "Leeds", "Bergen", "Utrecht", "Malmo", "Gdansk", "Brno", "Cork",
          "Ghent", "Turin", "Basel", "Aarhus", "Split"]
CURRENCIES = ["USD", "EUR", "GBP", "CHF", "SEK", "JPY"]
WORDS = ["amber", "birch", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper", "kestrel",
         "lumen", "meadow", "nimbus", "onyx", "pine", "quartz", "raven", "summit", "tundra", "umber", "vale",
         "willow", "zephyr", "atlas", "beacon", "cedar", "drift", "echo", "flint"]
NOTES = ["needs a follow-up call", "handled by the night team", "priority customer", "paperwork pending",
         "flagged for review", "awaiting a signature", "delivered to the side door", "split across two visits",
         "requested by phone", "moved from the old system"]
AUDIENCES = ["campus", "community", "enterprise", "family", "municipal", "nonprofit", "regional", "rural", "startup",
             "premium", "mobile", "wholesale", "coastal", "alpine", "urban", "seasonal", "veteran", "student",
             "corporate", "clinic", "island", "metro", "budget", "express", "luxury", "youth", "senior", "night",
             "weekend", "partner"]
