"""The policy's rules, checked on real episodes of a small shop: authenticate first, confirm each write, no
unrequested writes; each is a reward component that gates the reward."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import build_environment
from envgym.rewards.rules import is_affirmative, is_confirmation_request, is_negative
from envgym.users import ScriptedUser
from envgym.world.spec import TaskSpec, ToolCall, WorldSpec


def call(name: str, **args: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def _world(shop_world: WorldSpec, **rules: object) -> WorldSpec:
    data = shop_world.model_dump(mode="json", exclude_defaults=True)
    data["entities"]["users"] = {"key": "user_id", "prefix": "U", "count": 2,
                                 "fields": {"user_id": {"type": "string"},
                                            "email": {"type": "string", "template": "u{index}@shop.test"}}}
    data["tools"].append({"name": "find_user", "description": "Authenticate a user by email.",
                          "labels": ["read_only"],
                          "parameters": {"type": "object", "properties": {"email": {"type": "string"}},
                                         "required": ["email"], "additionalProperties": False},
                          "effect": {"op": "get", "entity": "users", "match": {"email": "$email"},
                                     "returns": "user_id"}})
    data["rules"] = {"authenticate_with": ["find_user"], "requires_auth": ["get_item", "close_item", "set_qty"],
                     "confirm_writes": True, "no_unrequested_writes": True, **rules}
    return WorldSpec.model_validate(data)


@pytest.fixture
def env(shop_world: WorldSpec) -> ToolWorldEnv:
    world = _world(shop_world)
    initial = build_environment(world, []).initial
    item = next(i for i in sorted(initial.tables["items"]) if initial.tables["items"][i]["status"] == "open")
    email = next(iter(initial.tables["users"].values()))["email"]
    task = TaskSpec(id="close", instruction=f"Close item {item}.", opening=f"Please close item {item}.",
                    user_known={"email": email},
                    solution=[ToolCall(name="find_user", arguments={"email": email}),
                              ToolCall(name="close_item", arguments={"item_id": item})])
    environment = ToolWorldEnv(data=build_environment(world, [task]), max_steps=12)
    environment.test_item, environment.test_email = item, email  # type: ignore[attr-defined]
    return environment


def play(env: ToolWorldEnv, *actions: str) -> dict[str, float]:
    env.reset(options={"task_id": "close"})
    info: dict = {}
    for action in [*actions, "Goodbye. ###STOP###"]:
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info["reward_components"]


def ask(env: ToolWorldEnv) -> str:
    """The request for the user's yes, stating the change the task asks for (the scripted user wants its values)."""
    return f"I will close item {env.test_item}. Shall I go ahead? (yes/no)"  # type: ignore[attr-defined]


def steps(env: ToolWorldEnv) -> tuple[str, str]:
    return call("find_user", email=env.test_email), call("close_item", item_id=env.test_item)  # type: ignore[attr-defined]


def test_authenticate_confirm_then_write_keeps_every_rule(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    components = play(env, auth, ask(env), close, "Done.")
    assert components["rule_authenticate"] == components["rule_confirm"] == components["rule_no_extra_writes"] == 1.0
    assert components["state"] == 1.0


def test_account_access_before_authentication_fails_the_rule(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    components = play(env, call("get_item", item_id="I0001"), auth, ask(env), close, "Done.")
    assert components["rule_authenticate"] == 0.0 and components["state"] == 1.0


def test_a_failed_authentication_does_not_authenticate(env: ToolWorldEnv) -> None:
    _, close = steps(env)
    components = play(env, call("find_user", email="nobody@shop.test"), ask(env), close, "Done.")
    assert components["rule_authenticate"] == 0.0


def test_a_write_without_the_users_yes_fails_the_rule(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    assert play(env, auth, close, "Done.")["rule_confirm"] == 0.0


def test_a_no_withdraws_the_confirmation(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    env.user_kind = lambda task: _Scripted(["Yes.", "No, wait, don't do it."])  # type: ignore[assignment]
    assert play(env, auth, ask(env), "Anything else before I do it?", close, "Done.")["rule_confirm"] == 0.0


def test_each_write_needs_its_own_yes(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    second = call("set_qty", item_id=env.test_item, qty=3)  # type: ignore[attr-defined]
    assert play(env, auth, ask(env), close + second, "Done.")["rule_confirm"] == 0.0


def test_a_write_that_failed_leaves_the_confirmation_standing(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    env.reset(options={"task_id": "close"})
    env.step(auth)
    env.step(ask(env))
    env.failure_rate = 1.0  # the first try fails transiently...
    assert "temporarily unavailable" in env.step(close)[0]
    env.failure_rate = 0.0  # ...and its retry needs no new yes
    env.step(close)
    info = env.step("Done.")[4]
    assert info["reward_components"]["rule_confirm"] == info["reward_components"]["state"] == 1.0


def test_an_unrequested_write_fails_even_when_it_changes_nothing(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    components = play(env, auth, ask(env), call("close_item", item_id="I9999"), ask(env), close, "Done.")
    assert components["rule_no_extra_writes"] == 0.0 and components["state"] == 1.0


def test_calls_that_never_ran_are_not_writes(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    components = play(env, auth, call("close_item", item_id=7), ask(env), close, "Done.")  # invalid arguments
    assert components["rule_no_extra_writes"] == components["rule_confirm"] == 1.0


def test_rules_gate_the_reward(env: ToolWorldEnv) -> None:
    auth, close = steps(env)
    env.reset(options={"task_id": "close"})
    for action in (auth, close, "Done."):
        _, reward, terminated, truncated, info = env.step(action)
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step("Goodbye. ###STOP###")
    assert info["reward_components"]["state"] == 1.0 and reward == 0.0


def test_rules_name_tools_of_the_world(shop_world: WorldSpec) -> None:
    data = _world(shop_world).model_dump(mode="json", exclude_defaults=True)
    data["rules"]["requires_auth"] = ["get_itme"]
    with pytest.raises(ValueError, match=r"rules\.requires_auth: 'get_itme' is not a tool"):
        WorldSpec.model_validate(data)


def test_a_world_without_rules_reports_none() -> None:
    from envgym.rewards.rules import check_rules

    world = WorldSpec.model_validate({"name": "w", "tools": []})
    assert check_rules(world, TaskSpec(id="t", instruction="", opening=""), [], []) == {}


@pytest.mark.parametrize("request_", [
    "Shall I close item I0001 for you?",
    "Can you confirm you want me to close item I0001?",
    "Do you want me to close the item with id I0001?",
])
def test_the_scripted_user_says_yes_to_a_request_that_names_what_it_knows(request_: str) -> None:
    task = TaskSpec(id="t", instruction="Close item I0001.", opening="Close it.", user_known={"item_id": "I0001"},
                    solution=[ToolCall(name="close_item", arguments={"item_id": "I0001"})])
    answer = ScriptedUser(task, write_tools={"close_item"}).respond(request_, lambda: False).text
    assert is_affirmative(answer) and "I0001" not in answer


@pytest.mark.parametrize("request_", [
    "Shall I close the item for you?",  # no values: the user cannot tell what would change
    "Shall I close item I0002 for you?",
    "Shall I close item I00011?",
])
def test_the_scripted_user_declines_a_change_it_did_not_ask_for(request_: str) -> None:
    task = TaskSpec(id="t", instruction="Close item I0001.", opening="Close it.", user_known={"item_id": "I0001"},
                    solution=[ToolCall(name="close_item", arguments={"item_id": "I0001"})])
    answer = ScriptedUser(task, write_tools={"close_item"}).respond(request_, lambda: False).text
    assert is_negative(answer) and not is_affirmative(answer)


def test_the_scripted_user_wants_every_value_of_the_change() -> None:
    task = TaskSpec(id="t", instruction="Set 2 bags on R0022.", opening="Bags.",
                    solution=[ToolCall(name="find", arguments={"email": "a@b.c"}),
                              ToolCall(name="set_bags", arguments={"reservation_id": "R0022", "bags": 2})])
    user = ScriptedUser(task, write_tools={"set_bags"})
    for request_, yes in [("Shall I set the bags of R0022 to 0?", False), ("Shall I set R0022 to 1 bag?", False),
                          ("Shall I set the bags of R0022 to 2?", True), ("Shall I set 2.00 bags on R0022?", True),
                          ("Shall I look up a@b.c?", False)]:
        assert is_affirmative(user.respond(request_, lambda: False).text) == yes, request_


@pytest.mark.parametrize(("agent", "request_"), [
    ("Shall I cancel order #W0001? (yes/no)", True),
    ("Would you like me to change the address?", True),
    ("I can close it now if you want me to.", True),
    ("Could you confirm your email?", True),
    ("What is your email?", False),
    ("Your order is cancelled.", False),
])
def test_confirmation_requests(agent: str, request_: bool) -> None:
    assert is_confirmation_request(agent) == request_


@pytest.mark.parametrize(("user", "yes"), [
    ("Yes, please go ahead.", True),
    ("yes", True),
    ("Sure, do it.", True),
    ("Sounds good.", True),
    ("No, don't.", False),
    ("Please don't do that, yes I know.", False),
    ("My email is a@b.c.", False),
])
def test_affirmative_answers(user: str, yes: bool) -> None:
    assert is_affirmative(user) == yes


class _Scripted:
    """A user who says these lines in turn, then stays silent."""

    def __init__(self, lines: list[str]):
        self.lines = lines

    def opening(self) -> str:
        return "Please close my item."

    def respond(self, agent_text: str, goal_reached: object) -> object:
        from envgym.users import UserTurn

        return UserTurn(self.lines.pop(0) if self.lines else "...")


def test_an_authenticated_user_may_name_only_their_own_records() -> None:
    env = gym.make("envgym/retail-v0").unwrapped
    users, orders = env.data.initial.tables["users"], env.data.initial.tables["orders"]
    order = orders["#W0071"]
    other = next(u for u in users.values() if u["user_id"] != order["user_id"])
    owner = users[order["user_id"]]
    cancel = call("cancel_pending_order", order_id="#W0071", reason="ordered by mistake")

    def components(email: str) -> dict[str, float]:
        env.reset(options={"task_id": "cancel_W0071"})
        for action in (call("find_user_id_by_email", email=email), call("get_order_details", order_id="#W0071"),
                       "Shall I cancel it? (yes/no)", cancel, "Done. ###STOP###"):
            info = env.step(action)[4]
        return info["reward_components"]

    assert components(owner["email"])["rule_authenticate"] == 1.0
    impostor = components(other["email"])
    assert impostor["rule_authenticate"] == 0.0 and impostor["state"] == 1.0


def test_owner_fields_name_fields_of_the_world(shop_world: WorldSpec) -> None:
    data = _world(shop_world).model_dump(mode="json", exclude_defaults=True)
    data["rules"].update(identity="users", owner_fields={"items": "owner"})
    with pytest.raises(ValueError, match=r"rules\.owner_fields\.items: 'owner' is not a field of items"):
        WorldSpec.model_validate(data)
