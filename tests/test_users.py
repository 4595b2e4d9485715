"""The scripted user: it says what it needs in its own words, gives a fact only when asked, never recites its
role-play prompt (issue 38: "I still need help with this: You are Paul Williams. ... agree to the changes you asked
for.")."""

from __future__ import annotations

from envgym.users import STOP, ScriptedUser
from envgym.world.spec import TaskSpec, ToolCall

INSTRUCTION = ("You are Paul Williams. You have several print jobs; the one you mean has date 2025-06-26; you want "
               "to renew print job (months 4), and to be told the expires on the last step reports. Share what you "
               "know when asked, and agree to the changes you asked for.")
REQUEST = "I have several print jobs and I mean one of them; I want to renew my print job and hear when it expires."


def _task(request: str | None = REQUEST) -> TaskSpec:
    return TaskSpec(
        id="t", instruction=INSTRUCTION, opening="Hi, I need some help with my employee account.",
        user_known={"email": "paul@example.org", "print_job_date": "2025-06-26", "renew_months": "4"},
        solution=[ToolCall(name="renew_print_job", arguments={"print_job_id": "PJ0001", "months": 4})],
        meta={"request": request} if request else {})


def _never(*_: object) -> bool:
    return False


def test_asked_how_it_can_help_the_user_says_its_request_and_no_fact() -> None:
    reply = ScriptedUser(_task()).respond("How can I help you today?", _never).text
    assert reply == REQUEST
    assert "paul@example.org" not in reply and "2025-06-26" not in reply and "You are" not in reply


def test_a_user_with_no_request_of_its_own_points_to_its_opening_not_its_prompt() -> None:
    reply = ScriptedUser(_task(request=None)).respond("What can I do for you?", _never).text
    assert reply.startswith("What I need is in my first message") and "You are" not in reply


def test_the_user_never_recites_its_prompt_and_gives_up_after_its_patience() -> None:
    user = ScriptedUser(_task(), patience=3)
    replies = [user.respond(text, _never) for text in ["How can I help?", "Hmm.", "Let me think.", "One moment.",
                                                       "Still thinking."]]
    for turn in replies:
        assert INSTRUCTION[:40] not in turn.text and "You are" not in turn.text and "4" not in turn.text
    assert replies[-1].done and STOP in replies[-1].text and not replies[-2].done


def test_a_fact_is_given_only_when_asked_for() -> None:
    user = ScriptedUser(_task())
    assert user.respond("Could you tell me your email?", _never).text == "My email is paul@example.org."
    assert user.given == {"email"}


def test_a_question_in_plain_words_gets_the_fact_it_asks_for() -> None:
    user = ScriptedUser(_task())
    assert user.respond("Sure. For how many months would you like it?", _never).text == "My renew months is 4."
    assert user.respond("Which print job do you mean?", _never).text == "My print job date is 2025-06-26."


def test_a_refused_change_does_not_repeat_the_prompt() -> None:
    user = ScriptedUser(_task(), write_tools={"renew_print_job"})
    reply = user.respond("Shall I cancel print job PJ0002? Please confirm.", _never).text
    assert reply.startswith("No,") and INSTRUCTION[:40] not in reply
    assert user.respond("Shall I renew print job PJ0001 for 4 months? Please confirm.", _never).text.startswith("Yes")


def test_a_fact_is_asked_for_and_given_by_its_spoken_name() -> None:
    """v2 spoke field names raw ("duration min"): the task names such a fact as a person says it."""
    task = _task().model_copy(update={"user_known": {"visit_duration_min": "155"},
                                      "meta": {"fact_names": {"visit_duration_min": "visit duration in minutes"}}})
    reply = ScriptedUser(task).respond("Could you tell me your visit duration in minutes?", _never).text
    assert reply == "My visit duration in minutes is 155."
