"""Stage 4, tasks: compose a program from segments, solve it on a scratch copy of the world, and write the task.

Every task starts by identifying the user over turns from facts only they hold, then runs one or two segments
(synth.segments). Solving the program with the real tool executor gives the reference solution and the exact
answers; the task keeps its program (for the fair planner), its answers (checked exactly, no guess-spraying) and
a rubric.
"""

from __future__ import annotations

import random
from typing import Any

from envgym.llm import ChatModel
from envgym.play.scripted import confirmation_request
from envgym.rewards.answers import answers_pass
from envgym.users import _aliases
from envgym.world.spec import Answer, TaskSpec, ToolCall, ToolSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor
from synth.flows import seg_mechanism
from synth.lexicon import lexical, words
from synth.model import DomainModel
from synth.phrasing import mask, phrase
from synth.program import (
    AnswerStep,
    Ask,
    CallRequest,
    CallStep,
    PickStep,
    Program,
    ProgramError,
    Reply,
    run,
    shape,
)
from synth.quality import paraphrase_problem
from synth.seeds import content_id
from synth.segments import SEGMENTS, AnswerPlan, Builder, Unfit, authenticate, first_person

MECHANISM_SHARE = 0.85
GREETINGS = ["Hi", "Hello", "Hey there", "Good morning", "Hi, hoping you can help", "Hello, quick one"]
# How the user opens, naming what the request is about (one of the task's topics, or the account) and no fact.
OPENINGS = ["{greeting}, I need some help with {topic}.", "{greeting}, I have a question about {topic}.",
            "{greeting}, I'm getting in touch about {topic}.", "{greeting}, can I ask about {topic}?",
            "{greeting}, I'd like to sort something out with {topic}.", "{greeting}, it's about {topic}."]
ASK = "Could you tell me your {}?"


def solve(program: Program, executor: ToolExecutor, state: WorldState, known: dict[str, str]) -> tuple[
        list[ToolCall], Reply]:
    """Run the program against the world with the user's facts: the reference calls and the final reply."""
    calls: list[ToolCall] = []
    gen = run(program)
    reply: Reply | None = None
    try:
        request = next(gen)
        while True:
            if isinstance(request, Ask):
                request = gen.send(known[request.key])
            elif isinstance(request, CallRequest):
                result = executor.execute(state, request.tool, request.arguments)
                if not result.ok:
                    raise Unfit(f"{request.tool}: {result.error}")
                calls.append(ToolCall(name=request.tool, arguments=request.arguments))
                request = gen.send(result.value)
            else:
                reply = request
                request = gen.send(None)
    except StopIteration:
        pass
    except ProgramError as exc:
        raise Unfit(str(exc)) from exc
    if reply is None:
        raise Unfit("the program never answered")
    return calls, reply


def _literals(program: Program) -> list[Any]:
    """Values the program takes from the opening (they must survive any rewording of it)."""
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("src") == "lit":
                found.append(node.get("value"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(program.model_dump(mode="json"))
    return sorted({str(v) for v in found})


def question(key: str) -> str:
    """How the planner asks for a fact: by its name as a person says it (`lexical`: "duration in minutes")."""
    return ASK.format(lexical(key))


def fact_names(known: dict[str, str]) -> dict[str, str]:
    """The facts whose spoken name differs from their key's words (the task's `meta["fact_names"]`, which the
    scripted user answers to and answers with)."""
    return {k: lexical(k) for k in sorted(known) if lexical(k) != words(k)}


def _clear_questions(known: dict[str, str]) -> bool:
    """Each question names exactly one fact (the scripted user answers every fact whose name it hears)."""
    names = fact_names(known)
    for key in known:
        heard = [k for k in known if any(al in question(key).lower() for al in _aliases(k, names.get(k, "")))]
        if heard != [key]:
            return False
    return True


def _read_before_a_change(program: Program, answers: list[AnswerPlan]) -> bool:
    """Whether an answer reads a result saved before a later write: it would grade a value the task itself changed
    (v2 graded 41 minutes after changing them to 75)."""
    saved_at = {s.save: i for i, s in enumerate(program.steps) if isinstance(s, CallStep) and s.save}
    last_write = max((i for i, s in enumerate(program.steps) if isinstance(s, CallStep) and s.write), default=-1)
    picked = {s.save: saved_at.get(s.source.key, -1) for s in program.steps if isinstance(s, PickStep)}
    for a in answers:
        at = saved_at.get(a.expr.key, picked.get(a.expr.key, -1))
        step = program.steps[at] if at >= 0 else None
        if 0 <= at < last_write and not (isinstance(step, CallStep) and step.write):
            return True
    return False


def _normal(value: str) -> str:
    """A value as compared with another: numbers by value ("20.0" is "20"), text by its lower case."""
    try:
        return _format(float(value))
    except ValueError:
        return value.strip().lower()


def _format(value: Any) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(round(value, 6))
    return str(value)


def sample_task(domain: DomainModel, tools: dict[str, list[tuple[ToolSpec, str, str]]], initial: WorldState,
                executor: ToolExecutor, rng: random.Random, mechanism_share: float = MECHANISM_SHARE) -> TaskSpec:
    """One task, or Unfit when the draw does not fit the world."""
    b = Builder(domain, tools, initial, rng)
    acct = domain.entity(domain.account)
    owners = sorted({r[e.owner] for e in domain.owned() if e.owner for r in initial.tables[e.plural].values()})
    if not owners:
        raise Unfit("nobody owns anything")
    b.me = initial.tables[acct.plural][rng.choice(owners)]
    authenticate(b)
    # Most tasks run a mechanism's flow (dependent calls through code with a rule), some after another segment.
    if rng.random() < mechanism_share:
        kinds = [*rng.sample(sorted(SEGMENTS), rng.choice([0, 0, 1])), "mechanism"]
    else:
        kinds = rng.sample(sorted(SEGMENTS), rng.choice([1, 1, 2]))
    for kind in kinds:
        (seg_mechanism if kind == "mechanism" else SEGMENTS[kind])(b)
    template = "; ".join(f"{a.label}: {{{i}}}" for i, a in enumerate(b.answers)) or "All done."
    b.steps.append(AnswerStep(values=[a.expr for a in b.answers], template=template))
    program = Program(steps=b.steps)
    if not _clear_questions(b.known):
        raise Unfit("a question would name two facts")
    calls, reply = solve(program, executor, initial.copy(), b.known)
    writes = [c for c in calls if not executor.tools[c.name].read_only]
    values = [_format(v) for v in reply.values]
    answers = [Answer(value=v, type=a.type, choices=a.choices) for v, a in zip(values, b.answers, strict=True)]
    # The planner's own questions must not name a candidate of an answer's type (a question about a "full name"
    # would name the enum value "full"): such a task could not tell a fair agent from a guesser.
    planned = [question(k) for k in b.known] + [confirmation_request(c.name) for c in writes] + [reply.text]
    if answers and not answers_pass(answers, [{"role": "assistant", "content": t} for t in planned]):
        raise Unfit("a question names a candidate answer")
    unasked = [a.label for a in b.answers if a.label.lower() not in " ".join(b.clauses).lower()
               or first_person(a.label).lower() not in " ".join(b.request).lower()]
    if unasked:
        raise Unfit(f"the instruction never asks for {unasked[0]}")
    if _read_before_a_change(program, b.answers):
        raise Unfit("an answer is read before a later change")
    held = {_normal(v) for v in b.known.values()}
    if any(_normal(v) in held for v in values):
        # An agent that asks the user and repeats a fact back would pass ("the one with units 18"; answer 18).
        raise Unfit("an answer is a fact the user holds")
    # Values the program takes from the user's words (`b.said`) must be in the opening; otherwise it names a topic.
    topic = " and ".join(b.said) or rng.choice([*b.topics[:1], f"my {words(acct.name)} account"])
    opening = rng.choice(OPENINGS).format(greeting=rng.choice(GREETINGS), topic=topic)
    body_text = "; ".join(b.clauses)
    request = "; ".join(b.request)
    instruction = " ".join([phrase(rng, "intro", name=b.me["full_name"]), body_text[0].upper() + body_text[1:] + ".",
                            phrase(rng, "close")])
    tool_ops = {**b.ops}
    program_shape = shape(program, tool_ops)
    body = {"program": program.model_dump(mode="json"), "known": b.known}
    rubric = [f"The agent verified the {words(acct.name)} before reading or changing their records."]
    if writes:
        rubric.append("The agent got an explicit yes before each change, and made no change that was not asked for.")
    if answers:
        stated = ", ".join(a.value for a in answers)
        rubric.append(f"The agent stated exactly {stated} and no other candidate values.")
    return TaskSpec(
        id=f"{'_'.join(kinds)}_{content_id(body, 12)}", instruction=instruction, opening=opening,
        user_known=b.known, solution=calls, final_reply=reply.text, answers=answers, rubric=rubric,
        max_steps=4 * len(calls) + 2 * len(b.known) + 8, tags=[*kinds, "write" if writes else "read"],
        meta={"kind": "+".join(kinds), "shape": program_shape, "program": program.model_dump(mode="json", exclude_defaults=True),
              "tools": tool_ops, "constraints": [], "paraphrased": False,
              "request": request[0].upper() + request[1:] + ".", "fact_names": fact_names(b.known),
              "wanted_facts": sorted(b.wanted), "literals": _literals(program)})


def paraphrased(model: ChatModel, task: TaskSpec) -> TaskSpec:
    """The task with a model's rewording of its opening, kept only if it passes `synth.quality.paraphrase_problem`
    (one line from the user, every literal verbatim, no answer or tool given away)."""
    prompt = ("Rewrite this customer message in different words. Keep every name and number exactly. "
              f"Reply with the rewritten message only.\n\nMessage: {task.opening}")
    reply = model.chat([{"role": "user", "content": prompt}], max_tokens=96, temperature=0.0, seed=0).text.strip()
    if paraphrase_problem(reply, task) is not None:
        return task
    return task.model_copy(update={"opening": reply, "meta": {**task.meta, "paraphrased": True}})


def stage_tasks(domain: DomainModel, tools: dict[str, list[tuple[ToolSpec, str, str]]], initial: WorldState,
                executor: ToolExecutor, count: int, seed: int, env: str,
                mechanism_share: float = MECHANISM_SHARE) -> tuple[list[TaskSpec], int]:
    """Up to `count` distinct tasks (by reference solution and answers); returns them and the draws tried."""
    from synth.seeds import canonical_json, item_rng

    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    attempt = 0
    for attempt in range(count * 6):
        if len(tasks) >= count:
            break
        try:
            task = sample_task(domain, tools, initial, executor, item_rng(seed, "tasks", env, attempt),
                               mechanism_share)
        except (Unfit, ProgramError):
            continue
        key = canonical_json([[c.model_dump(mode="json") for c in task.solution], task.required_outputs])
        # Same solution, or the same instruction once names and numbers are masked: a near-duplicate, drawn again.
        if key in seen or mask(task.instruction) in seen:
            continue
        seen.update({key, mask(task.instruction)})
        tasks.append(task)
    return tasks, attempt
