"""OpenEnv's MCP actions (RFC 003) against `sandgym serve`: the env's tools
listed with openenv's `ListToolsAction` and a whole episode played with its
`CallToolAction`, over openenv's own client; the session limit set with
openenv's name for it (`--max-concurrent-envs`). Real servers, real sandboxes."""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import pytest

from tests.core.test_server import STARTUP_S, Server, oracle_and_null
from tests.helpers import unwrapped


def tool_call(env_id: str, action: Any) -> tuple[str, dict[str, Any]]:
    """An oracle action as the tool call that makes it (name, arguments)."""
    if isinstance(action, dict):  # SWE: {"tool": NAME, **arguments}
        args = dict(action)
        return args.pop("tool"), args
    from sandgym.envs.browser_form.actions import parse_call  # browser: a call in BrowserGym's grammar

    call = parse_call(action)
    args = dict(call.args)
    if call.kind == "select":  # sandgym's first grammar, not a tool: BrowserGym's select_option
        return "select_option", {"bid": args["bid"], "options": args["option"]}
    return call.kind, args


@pytest.mark.parametrize(
    "env_id", ["sandgym/SWERepo-v0", pytest.param("sandgym/BrowserForm-v0", marks=pytest.mark.chromium)]
)
def test_tools_are_listed_and_called_with_openenvs_actions(tmp_path, env_id):
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    task_id, oracle, _ = oracle_and_null(env_id)
    probe = gymnasium.make(env_id)
    try:
        schemas = {t["function"]["name"]: t["function"] for t in unwrapped(probe).chat_tools() or []}
    finally:
        probe.close()
    server = Server(tmp_path / "serve.log", "--env", env_id, "--max-concurrent-envs", "1", "--session-timeout", "120")
    try:
        server.wait_healthy(time.monotonic() + STARTUP_S)
        with server.client() as env:
            listed = env.step(ListToolsAction())  # no reset needed to list
            tools = {t["name"]: t for t in listed.observation["tools"]}
            assert set(tools) == set(schemas) and tools
            for name, tool in tools.items():
                assert tool["input_schema"] == schemas[name]["parameters"]
                assert tool["description"] == schemas[name]["description"]
            # One session at most: a second client is refused while this one is open.
            with server.client() as second, pytest.raises((RuntimeError, ConnectionError), match="(?i)capacity"):
                second.reset(task_id=task_id)
            env.reset(task_id=task_id)
            wrong = env.step(CallToolAction(tool_name="no_such_tool", arguments={}))
            assert wrong.observation["error"]["error_type"] == "tool_not_found" and not wrong.done
            assert "no_such_tool" in wrong.observation["error"]["message"]
            assert env.state()["step_count"] == 0  # no step was played
            for action in oracle:
                name, args = tool_call(env_id, action)
                r = env.step(CallToolAction(tool_name=name, arguments=args))
                assert r.observation["tool_name"] == name and r.observation["error"] is None
            assert r.done and r.reward == 1.0, r.observation
            assert r.observation["result"]["outcome"] == "passed" and r.observation["result"]["task_id"] == task_id
            assert env.state()["step_count"] == len(oracle)
    finally:
        server.stop()


def test_mcp_payloads_ride_in_the_action_model_and_bad_ones_are_refused():
    """openenv hands the env's own action model every step payload; MCP ones are kept whole."""
    from sandgym.client import SandgymAction
    from sandgym.server import ProtocolError, SandgymEnvironment

    listed = SandgymAction.model_validate({"type": "list_tools", "metadata": {}})
    assert (listed.text, listed.call, listed.mcp) == ("", None, {"type": "list_tools"})
    env = SandgymEnvironment("sandgym/SWERepo-v0")
    try:
        with pytest.raises(ProtocolError, match="MCP action 'call_tool': field tool_name: Field required"):
            env.step(SandgymAction.model_validate({"type": "call_tool", "arguments": {}}))
        with pytest.raises(ProtocolError, match="reset first, then call tools"):
            env.step(SandgymAction.model_validate({"type": "call_tool", "tool_name": "bash", "arguments": {}}))
    finally:
        env.close()
