"""Intent by meaning: whether the user's request asks for an action, and which sentences say on what.

Method (a small, rule-based parse of the user's normalized turns; no model):

1. **Sentences and clauses.** The text is cut into sentences at ".", "!", "?", ";" and line breaks, and each
   sentence into clauses at commas and at "but", "and", "then", "also", "except", "unless". Quoted names ('...',
   "...") are blanked first: "the 'Delete old logs' event" names an event and asks for nothing.
2. **Action words, whole words only.** An action is asked for by one of its words as a whole word (so "add" never
   matches inside "address"): the base form ("delete", "call off"), its "-s" form, or its past participle ("deleted",
   "cancelled") where the clause wants a result ("make sure ... is deleted", "I need it cancelled", "get ... moved").
   Other inflections ("deleting", "was deleted") describe, they do not ask.
3. **Negation.** A clause that holds a negation before the word ("not", "n't", "never", "no need to", "without",
   "stop", "avoid", "instead of", "rather than", "nor") does not ask for it.
4. **Questions versus requests.** A sentence ending in "?" asks for an action only when it is a polite request
   ("can you", "could you", "would you", "will you", "please", "would you mind", anywhere in it: "Also, could you
   add ..."); and in any sentence, a word that
   follows "whether", "if", "when", "why", "how", "what", "which" or "who" in its clause is inside an embedded
   question or condition ("tell me whether it was cancelled", "what happens if I delete it"), not a request.
5. **The action's object.** A record is named for the action when its name is in a sentence that asks for the
   action, outside negated clauses ("delete X but not Y" names X only), or that sentence refers back ("delete it",
   "share that file", "if it's rated above 4, book") and an earlier sentence names the record.

Limits: English only, and no syntax tree. A request phrased without the action's words ("get rid of it") is not
seen (the call is held: a false refusal, never a pass). Negation scope is the clause, so "don't forget to delete X"
reads as negated (held). A statement in the base form ("they delete these weekly") reads as a request. Coreference
is one step: "it" refers to anything named in earlier sentences, not to one record.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

_QUOTED = re.compile(r"(?<!\w)'[^'\n]+'(?!\w)|\"[^\"\n]+\"")
# A sentence ends at ".", "!", "?" or ";" followed by a space or the end (not inside "notes.txt" or "2.5"), or a line.
_SENTENCE = re.compile(r"(?:[^.!?;\n]|[.!?;](?=[^\s.!?;]))+[.!?;]*")
_CLAUSE_BREAK = re.compile(r",|\b(?:but|and|then|also|except|unless|however|instead)\b")
_NEGATION = re.compile(r"\b(?:not|never|nor|no need to|no longer|without|stop|avoid|refrain from|instead of|"
                       r"rather than|don't|doesn't|didn't|won't|shouldn't|mustn't|can't|cannot|do not|does not)\b"
                       r"|n't\b")
_POLITE = re.compile(r"\b(?:please|(?:can|could|would|will)\s+you|would you mind|can i ask you to|"
                     r"i(?:'d| would) like you to)\b")
_EMBEDDED = re.compile(r"\b(?:whether|if|when|why|how|what|which|who|whom)\b")
_WANTS_RESULT = re.compile(r"\b(?:make sure|ensure|need|needs|want|wants|would like|get|gets|have)\b")
_BACK_REFERENCE = re.compile(r"\b(?:it|them|that|this|those|these|same|the (?:file|document|spreadsheet|email|"
                             r"message|event|meeting))\b")


@dataclass(frozen=True)
class Request:
    """A sentence of the user's that asks for an action: its span in the text, and the spans of its negated
    clauses (where a named record is excluded)."""

    start: int
    end: int
    negated: tuple[tuple[int, int], ...]
    refers_back: bool


@functools.lru_cache(maxsize=1024)
def _forms(word: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(base and -s forms, past participles) of an action word as whole-word patterns."""
    *head, last = word.split()
    stem = " ".join([*head, ""]) if head else ""
    base = [last, last + "s", last + "es"]
    participles = [last + "d" if last.endswith("e") else last + "ed", last + last[-1] + "ed"]
    if last.endswith("y"):
        base.append(last[:-1] + "ies")
        participles.append(last[:-1] + "ied")

    def pattern(forms: list[str]) -> re.Pattern[str]:
        return re.compile(r"(?<![\w-])" + re.escape(stem) + "(?:" + "|".join(map(re.escape, forms)) + r")(?![\w-])")

    return pattern(base), pattern(participles)


def _blank_quotes(text: str) -> str:
    return _QUOTED.sub(lambda m: " " * len(m.group(0)), text)


def _clauses(sentence: str, offset: int) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for match in _CLAUSE_BREAK.finditer(sentence):
        bounds.append((offset + start, offset + match.start()))
        start = match.end()
    bounds.append((offset + start, offset + len(sentence)))
    return bounds


def _asks_in_clause(clause: str, words: Iterable[str], polite_question: bool) -> bool:
    for word in words:
        base, participle = _forms(word)
        for pattern, needs_result in ((base, False), (participle, True)):
            for match in pattern.finditer(clause):
                before = clause[:match.start()]
                if _NEGATION.search(before) or _EMBEDDED.search(before):
                    continue
                if needs_result and not _WANTS_RESULT.search(before):
                    continue
                if pattern is base and not polite_question and re.search(r"\b(?:i|we|they|he|she)\s*$", before):
                    continue  # "I delete these weekly": a statement about the speaker
                return True
    return False


def requests(user: str, words: Iterable[str]) -> list[Request]:
    """The sentences of `user` (normalized text) that ask for the action named by `words`."""
    words = tuple(w for w in words if w)
    text = _blank_quotes(user)
    found: list[Request] = []
    for match in _SENTENCE.finditer(text):
        sentence = match.group(0)
        question = sentence.rstrip().endswith("?")
        polite = bool(_POLITE.search(sentence))
        if question and not polite:
            continue
        clauses = _clauses(sentence, match.start())
        asking = [c for c in clauses if _asks_in_clause(text[c[0]:c[1]], words, question)]
        if not asking:
            continue
        negated = tuple(c for c in clauses if c not in asking and _NEGATION.search(text[c[0]:c[1]]))
        refers = bool(_BACK_REFERENCE.search(sentence))
        found.append(Request(match.start(), match.end(), negated, refers))
    return found


def asks(user: str, words: Iterable[str]) -> bool:
    """Whether `user` (normalized) asks for the action named by `words` in at least one sentence."""
    return bool(requests(user, words))


def object_scope(user: str, words: Iterable[str]) -> str:
    """The text in which the action's object may be named: the asking sentences without their negated clauses, and
    when one of them refers back ("delete it"), the text before it. Other text is blanked to spaces so that spans
    keep their offsets."""
    scope = [" "] * len(user)
    for request in requests(user, words):
        start = 0 if request.refers_back else request.start
        for i in range(start, request.end):
            scope[i] = user[i]
        for a, b in request.negated:
            for i in range(a, b):
                scope[i] = " "
    return "".join(scope)


def said_outside_questions(user: str, words: Iterable[str]) -> bool:
    """Whether a sentence of `user` that is not a question holds a word starting with one of `words` ("sender",
    "participant"): how a request refers to a field of a record ("reply to", "the participants of")."""
    patterns = [re.compile(r"(?<![\w-])" + re.escape(w)) for w in words if w]
    for match in _SENTENCE.finditer(_blank_quotes(user)):
        sentence = match.group(0)
        if not sentence.rstrip().endswith("?") and any(p.search(sentence) for p in patterns):
            return True
    return False
