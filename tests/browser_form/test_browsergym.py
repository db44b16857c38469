"""BrowserGym compatibility: its action names and argument order, replies with reasoning,
the `observation="browsergym"` mode, the chat tools; checked against browsergym-core itself
and, for the episodes, in the real Chromium sandbox."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.base import EnvOptionError
from sandgym.envs.browser_form.actions import (
    ACTION_MODELS,
    GRAMMAR,
    ActionError,
    Target,
    chat_tools,
    parse_action,
    tool_text,
)
from sandgym.envs.browser_form.axtree import to_axtree_txt
from sandgym.envs.browser_form.env import BROWSERGYM_FIELDS, BrowserFormEnv
from sandgym.spaces import UnicodeText

DOC = Path(__file__).resolve().parents[2] / "docs" / "families" / "browser_form.md"


def call_name(call: str) -> str:
    """The function name an action call starts with."""
    m = re.match(r"\w+", call)
    assert m, call
    return m.group(0)


def documented_actions() -> list[str]:
    """The action list of the family's doc (the block after its browsergym-actions marker)."""
    text = DOC.read_text()
    start = text.index("```text\n", text.index("<!-- browsergym-actions")) + len("```text\n")
    return [ln for ln in text[start : text.index("```", start)].splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def bg():
    """browsergym-core's own parser and action functions (installed as a dev dependency)."""
    parsers = pytest.importorskip("browsergym.core.action.parsers")
    functions = pytest.importorskip("browsergym.core.action.functions")
    highlevel = pytest.importorskip("browsergym.core.action.highlevel")
    return parsers, functions, highlevel


def _bg_call(parsers, text: str) -> tuple[str, list, dict]:
    (name, args), *more = parsers.highlevel_action_parser.parse_string(text, parse_all=True).as_list()
    assert not more, text
    positional = [a for a in args if not isinstance(a, parsers.NamedArgument)]
    named = {a.name: a.value for a in args if isinstance(a, parsers.NamedArgument)}
    return name, positional, named


# -- against browsergym-core ----------------------------------------------------------------------


def test_the_doc_lists_every_action_we_offer():
    listed = {call_name(a) for a in documented_actions()}
    assert listed == set(ACTION_MODELS) - {"done"}


def test_every_documented_action_parses_here_and_in_browsergym_with_the_same_arguments(bg):
    parsers, functions, highlevel = bg
    names = {call_name(a) for a in documented_actions()}
    action_set = highlevel.HighLevelActionSet(
        subsets=["custom"], custom_actions=[getattr(functions, n) for n in sorted(names)], strict=True
    )
    for text in documented_actions():
        ours = parse_action(text)
        name, positional, named = _bg_call(parsers, text)
        assert ours.kind == name, text
        action_set.to_python_code(text)  # BrowserGym's strict parser and its name check
        # Its signature binds the same values to the same parameters as our model does.
        bound = inspect.signature(getattr(functions, name)).bind(*positional, **named)
        for key, value in bound.arguments.items():
            expect = float(value) if isinstance(value, int) and not isinstance(value, bool) else value
            got = ours.args[key]
            assert got == expect or (isinstance(got, float) and got == pytest.approx(expect)), (text, key)


def test_the_tools_have_browsergyms_names_and_parameters(bg):
    _, functions, _ = bg
    tools = chat_tools()
    assert [t["function"]["name"] for t in tools] == list(ACTION_MODELS)
    for tool in tools:
        name, params = tool["function"]["name"], tool["function"]["parameters"]
        if name == "done":  # sandgym's own
            assert params["properties"] == {}
            continue
        sig = inspect.signature(getattr(functions, name))
        assert list(params["properties"]) == list(sig.parameters), name
        required = [p for p, v in sig.parameters.items() if v.default is inspect.Parameter.empty]
        assert params["required"] == required, name


def test_browsergyms_own_examples_parse_here_with_our_refs(bg):
    """The examples in BrowserGym's docstrings are actions here once their bids ('a12',
    '45': ids of BrowserGym's pages) are refs of ours; as they are, they are refused."""
    _, _, highlevel = bg
    action_set = highlevel.HighLevelActionSet(subsets=["chat", "infeas", "bid", "nav"])
    examples = [ex for action in action_set.action_set.values() for ex in action.examples]
    assert len(examples) > 15
    bid = re.compile(r"'[a-z]{0,2}\d+'")
    for ex in examples:
        name = call_name(ex)
        if bid.search(ex):
            with pytest.raises(ActionError, match="not a ref of this page"):
                parse_action(ex)
        ours = parse_action(bid.sub("'e12'", ex))
        assert ours.kind == name, ex


# -- the parser ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply,kind,ref,text",
    [
        ("select_option('e4', 'Garden Room (up to 2)')", "select_option", "e4", "Garden Room (up to 2)"),
        ("press('e5', 'Enter')", "press", "e5", "Enter"),
        ("press('Enter')", "press", None, "Enter"),
        ("click('f1e12')", "click", "f1e12", None),
        ("fill(bid='e3', value='x')", "fill", "e3", "x"),
        ("The form needs a name.\nfill('e3', 'Bob')", "fill", "e3", "Bob"),
        ("Reasoning...\n```\nclick('e7')\n```\n", "click", "e7", None),
        ("Reasoning...\n```python\ncheck('e7')\n```", "check", "e7", None),
        ("<think>maybe click('e1')</think>\nI will subscribe.\n<action>\ncheck('e9')\n</action>", "check", "e9", None),
        ("I am finished.\nAction: `send_msg_to_user('Done.')`", "send_msg_to_user", None, "Done."),
        ("**Action:** hover('e2')", "hover", "e2", None),
        ("click(\n    'e3',\n    button='middle',\n)".replace(",\n)", "\n)"), "click", "e3", None),
        ("noop()", "noop", None, None),
        ("go_back()", "go_back", None, None),
    ],
)
def test_replies_with_reasoning_give_the_action(reply, kind, ref, text):
    a = parse_action(reply)
    assert a.kind == kind and a.text == text
    assert (a.target.ref if a.target else None) == ref


def test_arguments_are_validated_by_the_models():
    assert parse_action("scroll(0, -200.5)").args == {"delta_x": 0.0, "delta_y": -200.5}
    assert parse_action("noop(250)").args == {"wait_ms": 250.0}
    assert parse_action("select_option('e2', ['a', 'b'])").args["options"] == ["a", "b"]
    assert parse_action("drag_and_drop('e1', 'e2')").to == Target(ref="e2")
    assert parse_action("click('e1', 'right', ['Shift'])").args == {
        "bid": "e1",
        "button": "right",
        "modifiers": ["Shift"],
    }


@pytest.mark.parametrize(
    "reply,why",
    [
        ("click(click('e1'))", "nested call is not an argument"),
        ("click(os.path)", r"attribute access \(\.path\)"),
        ("os.system('id')", "unexpected attribute access"),
        ("click(x + 'e1')", "not an argument"),
        ("click(lambda: 1)", "not an argument"),
        ("click(['e1'][0])", "not an argument"),
        ("fill('e1', f'{secret}')", "f-string"),
        ("fill('e1', b'bytes')", "bytes"),
        ("click(*refs)", r"\* or \*\*"),
        ("click(**kw)", r"\* or \*\*"),
        ("click({'bid': 'e1'})", "a dict is not an argument"),
        ("fill('e1', 'a' 'b', x=1)", "no argument 'x'"),
        ("click('e1', bid='e2')", "twice"),
        ("click('e1', button='left-ish')", "button"),
        ("click('e1', modifiers=['Hyper'])", "modifiers"),
        ("scroll(0, 1e9)", "delta_y"),
        ("scroll(0, 1e999)", "delta_y"),
        ("noop(-5)", "wait_ms"),
        ("noop(True)", "wait_ms"),
        ("press(bid='e1')", r"got 1 \(missing: key_comb\)"),
        ("select_option('e1', [['a']])", "not an argument"),
        ("mouse_click(10, 20)", "not offered"),
        ("new_tab()", "one tab"),
        ("click('a51')", "not a ref of this page"),
        ("click('51')", "not a ref of this page"),
        ("fill('e1', '" + "x" * 25_000 + "')", "limit is 20000"),
        ("click(" + "(" * 300 + "'e1'" + ")" * 301, "one call"),
        ("click(" + "-" * 15_000 + "1)", "one call"),
        ("click('e1')\nclick('e2')", "2 actions"),
        ("Let me think about it.\nThe page looks right.", "no action in the reply.*last line"),
        ("Thinking.\nclick('e1', e2)", "looks like one, but"),
        ("Ok.\n```\nclick(\n```", "in the ``` block"),
        ("<action>explode()</action>", "unknown action"),
        ("click('e1')\x00", "null byte"),
        ("x" * 100_001, "characters long"),
    ],
)
def test_hostile_replies_are_clear_errors(reply, why):
    with pytest.raises(ActionError, match=why):
        parse_action(reply)


_CALL_PIECES = st.sampled_from(
    ["click", "fill", "select_option", "scroll", "(", ")", ",", "'e1'", '"x"', "[", "]", "=", "bid", "1e308", "-"]
    + ["\\", "\n", "```", "<action>", "</action>", "Action:", "lambda", ".", "*", "__import__", "0x1f", "'''"]
)


@given(st.lists(_CALL_PIECES, max_size=40).map("".join))
def test_the_parser_never_raises_anything_else(text):
    try:
        parse_action(text)
    except ActionError:
        pass


def test_tools_are_generated_from_the_models_and_round_trip():
    tools = {t["function"]["name"]: t["function"] for t in chat_tools()}
    assert set(tools) == set(ACTION_MODELS)
    assert tools["click"]["parameters"]["properties"]["button"]["enum"] == ["left", "middle", "right"]
    assert tools["select_option"]["parameters"]["required"] == ["bid", "options"]
    samples: dict[str, dict[str, Any]] = {
        "fill": {"bid": "e3", "value": 'it\'s "quoted"\n\x00é'},
        "select_option": {"bid": "e4", "options": ["a", "b"]},
        "scroll": {"delta_x": 0, "delta_y": 250.5},
        "click": {"bid": "e1", "button": "right", "modifiers": ["Shift"]},
        "send_msg_to_user": {"text": "done"},
        "done": {},
    }
    for name, args in samples.items():
        action = parse_action(tool_text(name, args))
        assert action.kind == name
        assert {k: action.args[k] for k in args} == {k: float(v) if name == "scroll" else v for k, v in args.items()}
    # A model's bad arguments still make an action; step() then says what is wrong.
    with pytest.raises(ActionError, match=r"takes 1 to 3 argument\(s\), got 0"):
        parse_action(tool_text("click", {}))
    with pytest.raises(ActionError, match="bid is missing"):
        parse_action(tool_text("click", {"button": "left"}))
    with pytest.raises(ActionError, match="no argument 'colour'"):
        parse_action(tool_text("click", {"bid": "e1", "colour": "red"}))
    with pytest.raises(ValueError, match="unknown tool"):
        tool_text("rm_rf", {})


def test_axtree_txt_has_browsergyms_layout():
    snapshot = "\n".join(
        [
            "- generic [active] [ref=e1]:",
            '  - link "Home" [ref=e3] [cursor=pointer]:',
            "    - /url: /",
            '  - checkbox "Email me" [checked] [ref=e9]',
            '  - heading "Welcome" [level=1] [ref=e13]',
            "  - paragraph [ref=e14]: Hello, Alice.",
            "  - text: Signed in as alice",
        ]
    )
    assert to_axtree_txt(snapshot).splitlines() == [
        "[e1] generic, focused",
        "\t[e3] link 'Home', url='/'",
        "\t[e9] checkbox 'Email me', checked",
        "\t[e13] heading 'Welcome', level=1",
        "\t[e14] paragraph",
        "\t\tStaticText 'Hello, Alice.'",
        "\tStaticText 'Signed in as alice'",
    ]


def test_observation_option_and_space():
    with pytest.raises(EnvOptionError, match="observation"):
        BrowserFormEnv(observation="html")
    env = BrowserFormEnv(observation="browsergym", screenshot=True)  # no browser until reset
    try:
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)
        assert set(space.spaces) == {"task", "feedback", "screenshot", *BROWSERGYM_FIELDS}
        assert all(isinstance(space[k], UnicodeText) for k in BROWSERGYM_FIELDS)
        assert env.config["observation"] == "browsergym"
        assert env.chat_tools() == chat_tools()
        assert env.tool_action("check", {"bid": "e9"}) == "check(bid='e9')"
    finally:
        env.close()
    assert "select_option(ref" in GRAMMAR and "send_msg_to_user" in GRAMMAR


# -- in Chromium -----------------------------------------------------------------------------------


def bid_of(axtree: str, role: str, name: str) -> str:
    """What a BrowserGym agent does: find the [bid] at the start of the element's axtree line."""
    m = re.search(rf"^\t*\[(\w+)\] {role} {re.escape(repr(name))}", axtree, re.M)
    assert m, f"no {role} {name!r} in\n{axtree}"
    return m.group(1)


# Per task: (what to do, role, name, the action with {} for the bid) steps, then the message.
PLANS = {
    "forms/settings-newsletter": [
        ("open the settings", "link", "Settings", "click('{}')"),
        ("tick the newsletter box", "checkbox", "Email me the newsletter", "check('{}')"),
        ("save", "button", "Save settings", "click('{}')"),
    ],
    "forms/booking-garden": [
        ("open the booking page", "link", "Book a room", "click('{}')"),
        ("pick the room", "combobox", "Room", "select_option('{}', 'Garden Room (up to 2)')"),
        ("set check-in", "textbox", "Check-in", "fill('{}', '2027-04-01')"),
        ("set check-out", "textbox", "Check-out", "fill('{}', '2027-04-03')"),
        ("set guests", "combobox", "Guests", "select_option('{}', ['2'])"),
        ("name the guest", "textbox", "Guest name", "fill(bid='{}', value='Alice Liddell')"),
        ("book", "button", "Book room", "press('{}', 'Enter')"),
    ],
}
# The reply formats agents use: a fence, AgentLab's <action> tag, a last line.
FORMATS = [
    "I need to {what}; the element is [{bid}].\n```\n{action}\n```",
    "<think>The goal says to {what}.</think>\nI will {what}.\n<action>{action}</action>",
    "Next I {what}.\n{action}",
]


@pytest.fixture(scope="module")
def bg_env():
    e = BrowserFormEnv(observation="browsergym", screenshot=True)
    yield e
    e.close()


@pytest.mark.chromium
@pytest.mark.parametrize("task_id", sorted(PLANS))
def test_a_scripted_browsergym_agent_solves_the_task(bg_env, task_id):
    obs, _ = bg_env.reset(options={"task_id": task_id})
    assert obs["goal"] == bg_env.task.visible.goal.strip() and obs["last_action_error"] == ""
    assert obs["url"].startswith(bg_env.session.origin) and obs["screenshot"].dtype == np.uint8
    for n, (what, role, name, template) in enumerate(PLANS[task_id]):
        bid = bid_of(obs["axtree_txt"], role, name)
        action = template.format(bid)
        reply = FORMATS[n % len(FORMATS)].format(what=what, bid=bid, action=action)
        obs, reward, terminated, truncated, info = bg_env.step(reply)
        assert not (terminated or truncated)
        assert obs["last_action_error"] == "", (action, obs["last_action_error"])
        assert obs["last_action"] == reply.strip()[:200] and info["tool"] == action.split("(")[0]
        assert obs in bg_env.observation_space
    obs, reward, terminated, truncated, info = bg_env.step(
        "The form is saved.\nsend_msg_to_user('All done: the form is submitted.')"
    )
    assert terminated and not truncated
    assert info["outcome"] == "passed" and reward == 1.0, bg_env.last_verdict.detail
    assert info["message"] == "All done: the form is submitted." and info["tool"] == "send_msg_to_user"
    assert set(obs) == set(bg_env.observation_space.spaces) and obs in bg_env.observation_space


@pytest.mark.chromium
def test_browsergym_actions_act_on_the_page_and_errors_are_observed(bg_env):
    obs, _ = bg_env.reset(options={"task_id": "forms/settings-newsletter"})
    obs = bg_env.step(f"click('{bid_of(obs['axtree_txt'], 'link', 'Settings')}')")[0]
    box = bid_of(obs["axtree_txt"], "checkbox", "Email me the newsletter")
    obs = bg_env.step(f"check('{box}')")[0]
    assert re.search(rf"\[{box}\] checkbox 'Email me the newsletter', checked", obs["axtree_txt"])
    obs = bg_env.step(f"uncheck('{box}')")[0]
    m = re.search(rf"^\t*\[{box}\] checkbox .*$", obs["axtree_txt"], re.M)
    assert m, obs["axtree_txt"]
    line = m.group(0)
    assert obs["last_action_error"] == "" and "checked" not in line
    for action in ("hover('{b}')", "focus('{b}')", "press('{b}', 'Space')", "scroll(0, 200)", "noop(10)", "go_back()"):
        obs, _, term, _, info = bg_env.step(action.format(b=box))
        assert not term and obs["last_action_error"] == "", (action, obs["last_action_error"])
    assert obs["url"] == bg_env.session.origin + "/"  # back on the start page
    obs, _, term, _, info = bg_env.step("I think so.\nclick('e99999')")
    assert not term and "no element e99999" in obs["last_action_error"] and info["error"]
    obs, _, term, _, info = bg_env.step("Hmm, nothing to do.")
    assert not term and info["tool"] == "invalid"
    assert "no action in the reply" not in obs["last_action_error"]  # one line: its own syntax error
    assert "expected one call" in obs["last_action_error"] and "click(ref)" in obs["last_action_error"]
    obs, _, term, _, info = bg_env.step("Let me look.\nI see the page.\nNo idea yet.")
    assert "no action in the reply" in obs["last_action_error"]
    obs, _, term, _, info = bg_env.step("goto('https://example.com/')")
    assert not term and "refused" in obs["last_action_error"]
    obs, reward, term, _, info = bg_env.step("report_infeasible('I give up.')")
    assert term and info["outcome"] == "failed" and info["message"] == "I give up."


@pytest.mark.chromium
def test_check_env_passes_in_the_browsergym_mode(bg_env):
    from gymnasium.utils.env_checker import check_env

    check_env(bg_env, skip_render_check=True)


def test_miniwob_tools_leave_out_navigation():
    from sandgym.envs.browser_form.miniwob import MiniWoBEnv

    env = MiniWoBEnv("click-button", observation="browsergym")  # no browser until reset
    try:
        names = {t["function"]["name"] for t in env.chat_tools()}
        assert names == set(ACTION_MODELS) - {"goto", "go_back", "go_forward"}
        assert isinstance(env.observation_space, gym.spaces.Dict)
        assert set(env.observation_space.spaces) == {"task", "feedback", *BROWSERGYM_FIELDS}
    finally:
        env.close()


@pytest.mark.chromium
def test_a_browsergym_agent_on_a_miniwob_page():
    env = gym.make("sandgym/MiniWoB-click-button-v0", observation="browsergym")
    try:
        obs, _ = env.reset(seed=3)
        m = re.search(r'Click on the "(.*)" button', obs["goal"])
        assert m, obs["goal"]
        label = m.group(1)
        obs, _, term, _, _ = env.step("go_back()")
        assert not term and "not available in MiniWoB" in obs["last_action_error"]
        bid = bid_of(obs["axtree_txt"], "button", label)
        obs, reward, term, trunc, info = env.step(f"The button is [{bid}].\n```\nclick('{bid}')\n```")
        assert term and not trunc and float(reward) > 0 and info["outcome"] == "passed"
        assert obs in env.observation_space and obs["last_action"].endswith("```")
    finally:
        env.close()
