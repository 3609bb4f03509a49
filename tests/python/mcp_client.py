"""Drives `swarm mcp` with the Python `mcp` SDK's client, for
tests/tests/mcp_server.rs, and prints what it saw as one JSON object.

    mcp_client.py stdio <swarm binary> <nats url> <mission.json>
    mcp_client.py http <url> <token> <mission.json>

Over stdio it lists the tools, submits the mission with wait (counting
progress notifications), reads the report resources, lists the swarms,
submits a slow mission without wait and cancels it, and makes one call
with a wrong argument. Over HTTP it lists the tools and the swarms, with
the token and without it.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def text_of(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def stdio(binary: str, nats_url: str, mission: dict) -> dict:
    seen: dict = {}
    params = StdioServerParameters(command=binary, args=["-s", nats_url, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            seen["tools"] = [t.name for t in tools.tools]
            seen["hints"] = {
                t.name: bool(t.annotations and t.annotations.read_only_hint)
                for t in tools.tools
            }

            progress: list = []

            async def on_progress(done, total, message):
                progress.append([done, total, message])

            submitted = await session.call_tool(
                "submit_mission",
                {"mission": mission["mission"], "plan": mission["plan"], "wait": True},
                read_timeout_seconds=120,
                progress_callback=on_progress,
            )
            seen["submitted_error"] = bool(submitted.is_error)
            seen["submitted"] = json.loads(text_of(submitted)) if not submitted.is_error else text_of(submitted)
            seen["progress"] = progress
            swarm_id = seen["submitted"]["swarm_id"] if isinstance(seen["submitted"], dict) else None

            if swarm_id:
                report = await session.read_resource(f"swarm://swarms/{swarm_id}/report.json")
                seen["report_json"] = json.loads(report.contents[0].text)
                for _ in range(100):
                    try:
                        html = await session.read_resource(f"swarm://swarms/{swarm_id}/report.html")
                        seen["report_html_type"] = html.contents[0].mime_type
                        seen["report_html_start"] = html.contents[0].text[:200]
                        break
                    except Exception as e:  # the boss renders the page after the report
                        seen["report_html_error"] = str(e)
                        await asyncio.sleep(0.1)
                resources = await session.list_resources()
                seen["resources"] = [str(r.uri) for r in resources.resources]
                got = await session.call_tool("get_swarm", {"swarm_id": swarm_id})
                seen["get_swarm"] = json.loads(text_of(got))

            listed = await session.call_tool("list_swarms", {"limit": 10})
            seen["listed"] = [s["swarm_id"] for s in json.loads(text_of(listed))["swarms"]]

            slow = await session.call_tool(
                "submit_mission", {"mission": mission["slow_mission"], "plan": mission["slow_plan"]}
            )
            slow_id = json.loads(text_of(slow))["swarm_id"]
            seen["slow_id"] = slow_id
            cancelled = await session.call_tool("cancel_swarm", {"swarm_id": slow_id, "reason": "not needed"})
            seen["cancel_error"] = bool(cancelled.is_error)
            seen["cancel"] = text_of(cancelled)
            for _ in range(200):
                got = json.loads(text_of(await session.call_tool("get_swarm", {"swarm_id": slow_id})))
                seen["slow_status"] = got["status"]
                if got["status"] != "Running":
                    break
                await asyncio.sleep(0.1)

            wrong = await session.call_tool("get_swarm", {"swarm": "x"})
            seen["wrong_error"] = bool(wrong.is_error)
            seen["wrong"] = text_of(wrong)
            missing = await session.call_tool("get_swarm", {"swarm_id": "no-such-swarm"})
            seen["missing_error"] = bool(missing.is_error)
            seen["missing"] = text_of(missing)
    return seen


async def http(url: str, token: str) -> dict:
    seen: dict = {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                seen["tools"] = [t.name for t in tools.tools]
                listed = await session.call_tool("list_swarms", {})
                seen["listed"] = [s["swarm_id"] for s in json.loads(text_of(listed))["swarms"]]
    async with httpx2.AsyncClient(timeout=10) as bare:
        answer = await bare.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        seen["without_token"] = answer.status_code
    return seen


def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        with open(sys.argv[4], encoding="utf-8") as f:
            mission = json.load(f)
        seen = asyncio.run(stdio(sys.argv[2], sys.argv[3], mission))
    else:
        seen = asyncio.run(http(sys.argv[2], sys.argv[3]))
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
