"""Tasks from exploring a live MCP server: every id, value, type and answer is one the server itself returned.

`explore(episodes, seed, ...)` first seeds a state through the server's own tools (each tool tried with arguments
drawn from its schema; a call that changes the state folder's digest marks its tool a write), and keeps that
folder as the world's initial state. Then it walks: 2-3 calls on a fresh server over the seeded state, each next
tool preferably one whose argument can take a value the previous result held (the value flows as a path into
that result, which is what the program records), arrays and objects drawn from their schemas, queries drawn from
values seen. The answer is a value of the last result. Every walk is replayed on another fresh server, and kept
only if each result and the final state digest are the same (the sim-vs-live control).

Values: a string argument takes a value an earlier call of the walk, or any call, accepted for it, or a value seen
under the same key (a result's `name`, `id`, ...), else a word; an argument described as SQL takes a statement over
the tables the walk created or saw; an object takes the matching fields of one record a result held (so an entity's
name and its own observations go together); a path argument takes the state folder's files or folders (which, by
the tool's and the argument's names). Text results are read through their `Key: value` lines
(`synth.program.text_fields`), and names they mention (quoted, or alone on a line, like branches) are candidates
for arguments that name a branch, revision or other reference.
"""

from __future__ import annotations

import base64
import fnmatch
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.world.spec import ToolCall, ToolSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolError
from synth.lexicon import NOTES, WORDS, words
from synth.mcp_live import EpisodeMCPTools
from synth.mcp_worlds import TIMEZONES
from synth.program import AnswerStep, CallStep, Expr, Program, text_fields

WRITE_VERBS = ("create", "add", "insert", "write", "update", "edit", "delete", "remove", "append", "set", "toggle",
               "complete", "move", "rename", "put", "save")
PATH_WORDS = {"path", "directory", "dir", "file", "repo", "source", "destination"}
FOLDER_WORDS = {"directory", "dir", "folder", "repo", "repository", "tree"}
ADD_VERBS = {"create", "add", "insert", "append", "write", "new", "put", "save"}
SEED_CALLS = 10
RETRIES = 5
# Arguments that name a reference in a versioned store: any of them may take a value seen under any other.
REFERENCES = {"revision", "commit", "sha", "ref", "target", "branch", "hash", "tag"}
MENTIONED = re.compile(r"'([^'\n]{1,60})'|^[*\s]*([\w./-]{1,60})\s*$", re.M)
MAX_TEXT_ANSWER = 80


@dataclass
class Step:
    """One recorded call: its arguments, where each flowed argument came from, and what the server did."""

    tool: str
    arguments: dict[str, Any]
    flows: dict[str, tuple[int, list[str | int]]] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    wrote: bool = False


@dataclass
class ToolRecord:
    """What exploring found out about one tool: calls that worked, calls that failed (last error), writes, and the
    tool its errors said to call first ("No changes staged for commit. Use git_add to stage changes first")."""

    ok: int = 0
    failed: int = 0
    wrote: int = 0
    last_error: str = ""
    needs: str | None = None
    wants: set[str] = field(default_factory=set)  # optional arguments an error asked for ("pass base_branch")


@dataclass
class Walk:
    """A kept walk: its steps and the answer's path into the last result (None for a write task with no answer)."""

    steps: list[Step]
    answer_path: list[str | int] | None
    answer: Any


def writes_by_name(tool: ToolSpec) -> bool:
    """What the server says (its read-only hint) or, without a hint, what the tool's name says it does."""
    annotations = (tool.source or {}).get("annotations") or {}
    if "read_only_hint" in annotations:
        return not annotations["read_only_hint"]
    return bool(_tokens(str((tool.source or {}).get("tool", tool.name))) & set(WRITE_VERBS))


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[list[str | int], Any]]:
    """(path, scalar) of every string, number or boolean inside a JSON value, in document order; a text of several
    lines yields its `Key: value` lines instead (when it has any), each under its key."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    elif isinstance(value, str) and "\n" in value.strip() and (fields := text_fields(value)):
        for k, v in fields.items():
            yield [*path, k], v
    elif isinstance(value, str | int | float) and value != "":
        yield list(path), value


def records(value: Any) -> Iterator[dict[str, Any]]:
    """Every object inside a JSON value, outermost first."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from records(v)
    elif isinstance(value, list):
        for v in value:
            yield from records(v)


def found_nothing(result: Any) -> bool:
    """A result whose lists are all empty (a search or filter that matched nothing): no walk goes on from it."""
    lists = [v for v in (result.values() if isinstance(result, dict) else [result]) if isinstance(v, list)]
    return bool(lists) and not any(lists)


def _strings(value: Any) -> Iterator[tuple[list[str | int], str]]:
    """(path, text) of every string inside a JSON value, texts of several lines whole."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from ((([k, *p]), t) for p, t in _strings(v))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from ((([i, *p]), t) for p, t in _strings(v))
    elif isinstance(value, str):
        yield [], value


def _tree(root: Path, exclude: list[str]) -> tuple[list[str], list[str]]:
    """(folders with "." first, files) under `root` as relative paths, leaving out hidden ones (a server's own, like
    .git) and the digest's exclusions; at most 50 of each."""
    dirs: list[str] = ["."]
    files: list[str] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or any(
                fnmatch.fnmatchcase(rel.as_posix(), g) for g in exclude):
            continue
        (dirs if path.is_dir() else files).append(rel.as_posix())
    return dirs[:50], files[:50]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[:10_000]
    except OSError:
        return ""


def _last_key(path: list[str | int]) -> str:
    return next((str(p) for p in reversed(path) if isinstance(p, str)), "")


def _tokens(name: str) -> set[str]:
    """Lower-case words of a name, plurals made singular (`entityNames` -> entity, name)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    found = {t.lower() for t in re.split(r"[^A-Za-z0-9]+", spaced) if t} - {"the", "of", "a"}
    return {t[:-1] if len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t for t in found}


def _matches(arg: str, key: str) -> bool:
    """Whether a result's key can feed an argument: `name` feeds `table_name`, `id` feeds `todo_id`, `name`."""
    if not key:
        return False
    a, k = _tokens(arg), _tokens(key)
    return arg == key or k <= a or bool(a & k & {"id", "name", "key", "path", "uri", "title"}) or (
        bool(a & {"query", "q", "search"}) and bool(k & {"name", "title", "text", "content", "description"})) or (
        bool(a & REFERENCES) and bool(k & REFERENCES))


def _fits(schema: dict[str, Any], value: Any) -> bool:
    """Whether a seen value has the JSON type an argument's schema asks for."""
    kind = _kind(schema)
    if kind == "array":
        return isinstance(value, list) and bool(value)
    if kind == "object":
        return isinstance(value, dict)
    if kind in ("integer", "number"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str) if kind == "string" else isinstance(value, bool)


def _kind(schema: dict[str, Any]) -> str:
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        typed = [o for o in options if o.get("type") != "null"]
        return _kind(typed[0]) if typed else "null"
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return str(kind)


def _inner(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        typed = [o for o in options if o.get("type") != "null"]
        return typed[0] if typed else schema
    return schema


class Explorer:
    """Draws arguments for one server's tools and records what the server answers (see the module docstring)."""

    def __init__(self, episodes: EpisodeMCPTools, seed: int):
        self.episodes = episodes
        self.tools = {s.name: s for s in episodes.specs}
        self.rng = random.Random(seed)
        self.seen: dict[str, list[Any]] = {}  # key name -> values results held under it, first seen first
        self.tables: list[str] = []
        self.records = {name: ToolRecord() for name in self.tools}
        self.final_digest = ""  # the state digest the last walk ended on
        self.accepted: list[Any] = []  # arguments of calls that worked: names and paths the state now holds
        self.worked: dict[str, list[Any]] = {}  # argument name -> values a call accepted for it
        self.in_walk: dict[str, list[Any]] = {}  # the same, for the calls of the walk under way
        self.stable: set[str] = set()  # string values results held on the initial state
        self.refused: set[tuple[str, str]] = set()  # (argument, value) an error message named: not drawn again
        self.refused_here: set[tuple[str, str]] = set()  # the same, on the server under way only
        self.objects: list[dict[str, Any]] = []  # records results held, newest last
        self.mentioned: list[str] = []  # names text results mentioned (quoted, or alone on a line)
        self.folder: Path | None = None  # the state folder of the server being called, for path arguments
        self.call_paths: list[str] = []  # existing paths drawn for the call under way
        self.used: dict[str, int] = {}  # tool -> kept tasks that call it
        self.unstable: dict[str, int] = {}  # tool -> walks with it that a fresh server did not replay alike
        self.speaks_sql = any(re.search(r"\bsql\b", s.description, re.I) for s in self.tools.values())

    # --- values ---------------------------------------------------------------------------------------------
    def learn(self, value: Any, accepted: bool = False, pristine: bool = False) -> None:
        """Remember the values a result (or, `accepted`, the arguments of a call that worked) held, by key;
        `pristine`: the result was read on the initial state."""
        if accepted:
            self.accepted.append(value)
        else:
            for record in records(value):
                if record not in self.objects:
                    self.objects = [*self.objects[-99:], record]
            for text in (leaf for _, leaf in _strings(value)):
                for quoted, alone in MENTIONED.findall(text):
                    name = quoted or alone
                    if re.search(r"[^\W_]", name) and name not in self.mentioned and len(self.mentioned) < 100:
                        self.mentioned.append(name)
                        if pristine:
                            self.stable.add(name)
        for path, leaf in leaves(value):
            key = _last_key(path)
            bucket = self.seen.setdefault(key, [])
            if leaf not in bucket and len(bucket) < 50:
                bucket.append(leaf)
            if pristine and isinstance(leaf, str):
                self.stable.add(leaf)
            if self.speaks_sql and key in ("name", "table_name") and isinstance(leaf, str) and leaf not in self.tables:
                self.tables.append(leaf)

    def _seen_for(self, arg: str) -> list[Any]:
        seen = [v for key, values in self.seen.items() if _matches(arg, key) for v in values if isinstance(v, str)]
        if _tokens(arg) & REFERENCES and (not seen or self.rng.random() < 0.5):
            seen = self.mentioned  # a branch a listing named, where no result named one under a key
        seen = [v for v in seen if (arg, v) not in self.refused and (arg, v) not in self.refused_here]
        # Values read on the initial state exist on every fresh server; others (a commit made while surveying)
        # may not.
        stable = [v for v in seen if v in self.stable]
        return stable if stable and self.rng.random() < 0.8 else seen

    def _path(self, name: str, tool: ToolSpec) -> str:
        """A relative path for a path argument, from the state folder of the server being called (its working
        directory): a folder where the tool or argument names a folder, a repository, a search or a listing, a file
        where they name a file, else either; a new name, most times, where the tool creates or the argument is a
        destination."""
        rng = self.rng
        dirs, files = _tree(self.folder, self.episodes.exclude) if self.folder else (["."], [])
        words_, verbs = _tokens(name) | _tokens(tool.name), _tokens(tool.name)
        pool = dirs if words_ & FOLDER_WORDS or verbs & {"search", "list"} else (
            files or dirs if "file" in words_ else dirs + files)
        moved = bool(_tokens(name) & {"destination", "dest"})  # a move or copy onto an existing path fails
        made = bool(verbs & {"create", "write", "new", "save", "mkdir"}) and not _tokens(name) & {"repo", "repository"}
        if moved or (made and rng.random() < 0.6):
            base, leaf = rng.choice(dirs), rng.choice(WORDS) + ("" if pool is dirs else ".txt")
            return leaf if base == "." else f"{base}/{leaf}"
        worked = [v for memory in (self.in_walk, self.worked) for v in memory.get(name, []) if v in pool]
        pick = rng.choice(worked) if worked and rng.random() < 0.9 else rng.choice(pool)  # a repository's root
        self.call_paths.append(pick)
        return pick

    def _line(self) -> str | None:
        """A line of a file the call names (else of any file) in the state folder: text an edit can replace."""
        if self.folder is None:
            return None
        files = [f for f in self.call_paths if (self.folder / f).is_file()] or _tree(self.folder,
                                                                                    self.episodes.exclude)[1]
        lines = [line.strip() for f in files[:1] or [] for line in _read(self.folder / f).splitlines()]
        lines = [line for line in lines if line]
        return self.rng.choice(lines) if lines else None

    def _record_for(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """The fields of one seen record that fill every required property of an object schema, or None."""
        props: dict[str, Any] = schema.get("properties", {})
        required = schema.get("required", list(props))
        candidates = []
        for record in self.objects:
            filled: dict[str, Any] = {}
            for prop in required:
                key = next((k for k in record if _matches(prop, k) and _fits(props.get(prop, {}), record[k])), None)
                if key is None:
                    break
                value = record[key]
                filled[prop] = value[:1] if isinstance(value, list) else value  # one item: a change can take it
            else:
                candidates.append(filled)
        return self.rng.choice(candidates) if candidates else None

    def _sql(self, arg_doc: str) -> str:
        doc = arg_doc.lower()
        rng = self.rng
        if "create table" in doc or (not self.tables and rng.random() < 0.8):
            name = f"{rng.choice(WORDS)}_items"
            if name not in self.tables:
                self.tables.append(name)
            return f"CREATE TABLE IF NOT EXISTS {name} (id INTEGER PRIMARY KEY, label TEXT NOT NULL, qty INTEGER)"
        table = rng.choice(self.tables) if self.tables else "sqlite_master"
        if "select" in doc:
            return rng.choice([f"SELECT COUNT(*) AS n FROM {table}", f"SELECT label, qty FROM {table} ORDER BY id",
                               f"SELECT SUM(qty) AS total FROM {table}", f"SELECT MAX(qty) AS most FROM {table}"])
        return rng.choice([f"INSERT INTO {table} (label, qty) VALUES ('{rng.choice(WORDS)}', {rng.randint(1, 40)})",
                           f"UPDATE {table} SET qty = qty + {rng.randint(1, 5)} WHERE id = 1",
                           f"INSERT INTO {table} (label, qty) VALUES ('{rng.choice(NOTES)}', {rng.randint(1, 40)})"])

    def value(self, name: str, schema: dict[str, Any], tool: ToolSpec, depth: int = 0) -> Any:
        """A value for one argument, drawn from its schema, the values seen and (for SQL) the tables known."""
        rng = self.rng
        described = str(schema.get("description", ""))  # on the outer schema of an optional (anyOf) argument
        schema = _inner(schema)
        if "enum" in schema:
            return rng.choice(schema["enum"])
        kind = _kind(schema)
        if kind == "boolean":
            return rng.choice([True, False])
        if kind in ("integer", "number"):
            # Small numbers: a count, an index or a duration (the protocol test server sleeps that many seconds).
            low, high = schema.get("minimum", 1), schema.get("maximum", 5)
            pick = rng.randint(int(low), int(min(high, low + 4)))
            return pick if kind == "integer" else float(pick)
        if kind == "array":
            count = 1 if depth else rng.choice([1, 1, 2])
            return [self.value(name, schema.get("items", {}), tool, depth + 1) for _ in range(count)]
        if kind == "object":
            props = schema.get("properties", {})
            # A record already held is what a change or a deletion takes; an addition wants new values.
            adds = bool(_tokens(tool.name) & ADD_VERBS)
            record = self._record_for(schema) if not adds and rng.random() < 0.6 else None
            if record is not None:
                return record
            required = schema.get("required", list(props))
            return {k: self.value(k, v, tool, depth + 1) for k, v in props.items() if k in required}
        doc = f"{schema.get('description', '')} {tool.description}"
        own = str(schema.get("description", "")) or described
        if "HH:MM" in own:
            return f"{rng.randint(0, 23):02d}:{rng.choice([0, 15, 30, 45]):02d}"
        if "IANA" in own or "timezone" in _tokens(name):
            return rng.choice(TIMEZONES)
        if schema.get("format") in ("uri", "uri-reference") and re.search(r"\bdata uri", own, re.I):
            return "data:text/plain;base64," + base64.b64encode(rng.choice(NOTES).encode()).decode()
        quoted = re.findall(r"'([\w.-]{1,30})'", own)  # "local branches ('local'), ... or all ('all')"
        if quoted and rng.random() < 0.8:
            return rng.choice(quoted)
        if re.search(r"\bsql\b|\bselect\b|create table", doc, re.I) and name in ("query", "sql", "statement"):
            return self._sql(str(schema.get("description", "")) or tool.description)
        if _tokens(name) & PATH_WORDS:
            return self._path(name, tool)
        if "old" in _tokens(name) and (line := self._line()) is not None:
            return line
        for memory in (self.in_walk, self.worked):  # what a call accepted: first this walk's, then any
            known = [v for v in memory.get(name, []) if isinstance(v, str) and (name, v) not in self.refused
                     and (name, v) not in self.refused_here]
            if depth == 0 and known and rng.random() < 0.5:
                return rng.choice(known)
        # An argument its description calls a commit sha or revision is a reference, whatever its name.
        refers = not _tokens(name) & REFERENCES and bool(_tokens(own) & {"sha", "commit", "revision"})
        seen = self._seen_for("commit" if refers else name)
        # An id or a reference names something that exists: a made-up word is almost never one.
        if seen and rng.random() < (0.95 if _tokens(name) & (REFERENCES | {"id", "uuid", "key"}) else 0.7):
            return rng.choice(seen)
        return rng.choice(NOTES) if _tokens(name) & {"text", "content", "contents", "description", "observation",
                                                     "observations", "insight", "message"} else rng.choice(WORDS)

    def arguments(self, tool: ToolSpec) -> dict[str, Any]:
        props: dict[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        required |= self.records[tool.name].wants
        self.call_paths = []
        return {k: self.value(k, v, tool) for k, v in props.items() if k in required or self.rng.random() < 0.25}

    # --- calls ----------------------------------------------------------------------------------------------
    def call(self, state: WorldState, name: str, arguments: dict[str, Any]) -> Step:
        """Call one tool on `state`'s server and record the result, the error, and whether the state changed."""
        before = self.episodes.state_digest(state)
        step = Step(tool=name, arguments=arguments)
        record = self.records[name]
        try:
            step.result = self.episodes.call(state, self.tools[name], dict(arguments))
            if isinstance(step.result, dict) and "error" in step.result:  # an error reported as a result
                raise ToolError(str(step.result["error"]))
            record.ok += 1
            self.learn(step.result, pristine=before == self.episodes.initial_digest)
            self.learn(arguments, accepted=True)  # a name or path a call accepted is one the server knows now
            for arg, value in arguments.items():
                for memory in (self.worked, self.in_walk):
                    if value not in memory.setdefault(arg, []):
                        memory[arg] = [*memory[arg][-19:], value]
        except ToolError as exc:
            step.error = str(exc)
            record.failed += 1
            record.last_error = step.error[:200]
            # "Todo with ID '4' not found": a value the error names is one this state does not hold, nor will a
            # fresh server's, unless the initial state held it (a walk deleted it first): then only this server's.
            named = {(arg, value) for arg, value in arguments.items() if isinstance(value, str) and value
                     and f"'{value}'" in step.error}
            self.refused |= {(arg, value) for arg, value in named if value not in self.stable}
            self.refused_here |= named
            record.needs = self._named_first(step.error, name) or record.needs
            record.wants |= {arg for arg in self.tools[name].parameters.get("properties", {})
                             if re.search(rf"\b{re.escape(arg)}\b", step.error) and arg not in arguments}
        step.wrote = self.episodes.state_digest(state) != before
        record.wrote += step.wrote
        return step

    def _named_first(self, error: str, tool: str) -> str | None:
        """The tool of this server (not `tool`) an error message names first, by its own or its server's name."""
        found = []
        for other, spec in self.tools.items():
            for said in {other, str((spec.source or {}).get("tool", other))}:
                hit = re.search(rf"\b{re.escape(said)}\b", error)
                if hit and other != tool:
                    found.append((hit.start(), other))
        return min(found)[1] if found else None

    def seed_state(self, into: Path, calls: int = SEED_CALLS) -> list[Step]:
        """Try every tool once, then call the tools that wrote `calls` more times; copy the state folder to `into`
        (the world's initial state). Returns the recorded calls."""
        state = WorldState({})
        steps: list[Step] = []
        try:
            self.folder, self.refused_here = self.episodes.folder(state), set()
            for name, tool in self.tools.items():
                steps.append(self.call(state, name, self.arguments(tool)))
            for _ in range(RETRIES):  # a delete of a made-up name changes nothing: retry with the values seen since
                for name, tool in self.tools.items():
                    if self.records[name].ok == 0 or (self.records[name].wrote == 0 and writes_by_name(tool)):
                        steps.append(self.call(state, name, self.arguments(tool)))
            writers = sorted(n for n, r in self.records.items() if r.wrote and r.ok)
            adders = [n for n in writers if _tokens(n) & ADD_VERBS] or writers
            for _ in range(calls if adders else 0):
                name = self.rng.choice(adders)
                steps.append(self.call(state, name, self.arguments(self.tools[name])))
            shutil.copytree(self.episodes.folder(state), into, dirs_exist_ok=True)
        finally:
            self.episodes.stop(state)
        return steps

    def survey(self) -> None:
        """Forget the values seen while seeding (ids a server hands out may not survive its restart) except accepted
        arguments; then, on a fresh server over the initial state, call every tool once and retry the ones that never
        worked or did not write yet should, learning from the results."""
        accepted, self.seen, self.worked, self.refused = self.accepted, {}, {}, set()
        for value in accepted:
            self.learn(value)
        self.objects, self.mentioned = [], []
        # Whether a tool writes is decided here, on the seeded state: a first listing may create a file (a
        # todo server's done.txt) and read only ever after.
        wrote_seeding = {n: r.wrote for n, r in self.records.items()}
        for record in self.records.values():
            record.wrote = 0
        state = WorldState({})
        try:
            self.folder, self.refused_here = self.episodes.folder(state), set()
            for name, tool in self.tools.items():
                self.call(state, name, self.arguments(tool))
            for round_ in range(2 * RETRIES):  # a tool that never worked gets twice the tries of a silent writer
                for name, record in self.records.items():
                    if record.ok == 0 or (round_ < RETRIES and record.wrote == 0 and (
                            wrote_seeding[name] or writes_by_name(self.tools[name]))):
                        if record.needs:  # the precondition its error named first
                            self.call(state, record.needs, self.arguments(self.tools[record.needs]))
                        self.call(state, name, self.arguments(self.tools[name]))
        finally:
            self.episodes.stop(state)

    def _least_used(self, names: list[str]) -> str:
        """Goal-directed: among `names`, one that kept tasks have used least (coverage of the server's tools), a tool
        in walks that did not replay alike counting as used (a fresh id in every result never will)."""
        def score(name: str) -> int:
            return self.used.get(name, 0) + self.unstable.get(name, 0)

        fewest = min(score(n) for n in names)
        return self.rng.choice([n for n in names if score(n) == fewest])

    def _next_tool(self, previous: list[Step], usable: list[str]) -> str:
        if previous and previous[-1].result is not None and self.rng.random() < 0.8:
            keys = {_last_key(p) for p, _ in leaves(previous[-1].result)}
            fed = [n for n in usable if any(_matches(a, k) for a in self.tools[n].parameters.get("properties", {})
                                            for k in keys)]
            if fed:
                return self._least_used(fed) if self.rng.random() < 0.7 else self.rng.choice(fed)
        return self._least_used(usable) if self.rng.random() < 0.8 else self.rng.choice(usable)

    def _flow(self, tool: ToolSpec, arguments: dict[str, Any], previous: list[Step]) -> dict[str, tuple[int, list[
            str | int]]]:
        """Replace arguments by values of earlier results where a result's key feeds the argument."""
        flows: dict[str, tuple[int, list[str | int]]] = {}
        props = tool.parameters.get("properties", {})
        for arg, schema in props.items():
            if _kind(schema) not in ("string", "integer", "number") or "enum" in _inner(schema):
                continue
            sources = [(i, p, v) for i, s in enumerate(previous) for p, v in leaves(s.result)
                       if _matches(arg, _last_key(p)) and isinstance(v, str | int) and not isinstance(v, bool)]
            if sources and (arg in arguments or arg in tool.parameters.get("required", [])):
                i, path, value = self.rng.choice(sources)
                arguments[arg] = int(value) if _kind(schema) == "integer" and str(value).isdigit() else (
                    value if _kind(schema) != "string" else str(value))
                flows[arg] = (i, path)
        return flows

    def walk(self, usable: list[str], length: int) -> list[Step] | None:
        """`length` calls on a fresh server over the initial state; None when a call fails."""
        state = WorldState({})
        steps: list[Step] = []
        self.in_walk = {}
        try:
            self.folder, self.refused_here = self.episodes.folder(state), set()
            then: str | None = None  # a tool whose precondition this step meets
            for left in range(length, 0, -1):
                name, then = then or self._next_tool(steps, usable), None
                needs = self.records[name].needs
                if needs in usable and left > 1 and not (steps and steps[-1].tool == needs):
                    name, then = needs, name
                tool = self.tools[name]
                arguments = self.arguments(tool)
                flows = self._flow(tool, arguments, steps)
                step = self.call(state, name, arguments)
                step.flows = flows
                if step.error is not None or found_nothing(step.result):
                    return None
                steps.append(step)
            self.final_digest = self.episodes.state_digest(state)
            return steps
        finally:
            self.episodes.stop(state)

    def replays(self, steps: list[Step]) -> bool:
        """The sim-vs-live control: the same calls on another fresh server give the same results and state."""
        state = WorldState({})
        try:
            for step in steps:
                try:
                    again = self.episodes.call(state, self.tools[step.tool], dict(step.arguments))
                except ToolError:
                    return False
                if again != step.result:
                    return False
            return self.episodes.state_digest(state) == self.final_digest
        finally:
            self.episodes.stop(state)

    def answer(self, steps: list[Step]) -> tuple[list[str | int] | None, Any]:
        """A value of the last result to ask for (not one the request itself states); (None, None) if none fits."""
        said = {str(v) for s in steps for _, v in leaves(s.arguments)}
        last = steps[-1].result
        options = [(p, v) for p, v in leaves(last) if str(v) not in said and len(str(v)) <= MAX_TEXT_ANSWER
                   and not isinstance(v, bool)]
        if isinstance(last, str) and "\n" not in last.strip():
            options = [([], last)] if 0 < len(last) <= MAX_TEXT_ANSWER and last not in said else []
        if not options:
            return None, None
        return self.rng.choice(options)


def program_of(walk: Walk, writes: set[str]) -> Program:
    """The walk as a program: literal arguments, flowed ones as paths into the saved results, then the answer."""
    steps: list[Any] = []
    for i, step in enumerate(walk.steps):
        args: dict[str, Expr | dict[str, Expr]] = {}
        for arg, value in step.arguments.items():
            if arg in step.flows:
                source, path = step.flows[arg]
                cast = "int" if isinstance(value, int) and not isinstance(value, bool) else (
                    "float" if isinstance(value, float) else "str")
                args[arg] = Expr(src="var", key=f"r{source}", path=path, cast=cast)
            else:
                args[arg] = Expr(src="lit", value=value)
        steps.append(CallStep(tool=step.tool, args=args, save=f"r{i}", write=step.tool in writes))
    if walk.answer_path is None:
        steps.append(AnswerStep(values=[], template="Done."))
    else:
        last = len(walk.steps) - 1
        steps.append(AnswerStep(values=[Expr(src="var", key=f"r{last}", path=walk.answer_path)],
                                template="It is {0}."))
    return Program(steps=steps)


def _said(value: Any) -> str:
    import json

    return json.dumps(value) if isinstance(value, list | dict) else repr(value) if isinstance(value, str) else str(
        value)


def request_of(walk: Walk) -> str:
    """What the user asks for: each call with its stated arguments and where the flowed ones come from."""
    parts = []
    for step in walk.steps:
        args = [f"{words(a)} {_said(v)}" for a, v in step.arguments.items() if a not in step.flows]
        args += [f"the {words(_last_key(step.flows[a][1]) or a)} it gave as {words(a)}" for a in step.flows]
        parts.append(f"{words(step.tool)}" + (f" with {', '.join(args)}" if args else ""))
    request = "please " + ", then ".join(parts)
    if walk.answer_path is None:
        return request + "."
    what = _last_key(walk.answer_path) if walk.answer_path else ""
    index = next((p for p in walk.answer_path if isinstance(p, int)), None) if walk.answer_path else None
    item = f" of item {index + 1}" if index is not None else ""
    return request + (f", and tell me the {words(what)}{item} in the last answer." if what else
                      ", and tell me exactly what the last call said.")


def seed_calls(steps: list[Step]) -> list[ToolCall]:
    """The seeding calls that worked, as tool calls (kept with the world for the record)."""
    return [ToolCall(name=s.tool, arguments=s.arguments) for s in steps if s.error is None]
