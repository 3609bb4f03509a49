"""A small MCP server for tests/tests/mcp.rs, written with the `mcp` SDK,
run by a worker over stdio. Its tools cover what the worker must treat
differently by their annotations:

- `add_note` (not read-only, not destructive): appends a line to
  notes.log in its working folder; journaled by the worker, no approval.
- `delete_notes` (destructive): empties notes.log; waits for approval.
- `server_pid` (read-only): this process's id, so a test can kill it.
- `broken` (read-only): always an error result (isError).
- `slow` (read-only): answers after the given seconds.

With `--http PORT` it serves streamable HTTP on 127.0.0.1:PORT/mcp
instead of stdio.

Every call is appended to calls.log in its working folder, so a test sees
what reached the server.
"""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("swarm-test-tools", subscriptions=False)


def record(line: str) -> None:
    with open("calls.log", "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {line}\n")


@server.tool(
    name="add_note",
    description="Appends a note to notes.log",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
)
def add_note(text: str) -> str:
    record(f"add_note {text}")
    with open("notes.log", "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted: {text}"


@server.tool(
    name="delete_notes",
    description="Deletes every note",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
)
def delete_notes() -> str:
    record("delete_notes")
    open("notes.log", "w", encoding="utf-8").close()
    return "every note deleted"


@server.tool(
    name="server_pid",
    description="The id of this server's process",
    annotations=ToolAnnotations(read_only_hint=True),
)
def server_pid() -> str:
    record("server_pid")
    return f"pid {os.getpid()}"


@server.tool(
    name="broken",
    description="Always fails",
    annotations=ToolAnnotations(read_only_hint=True),
)
def broken() -> str:
    record("broken")
    raise ToolError("the disk is on fire")


@server.tool(
    name="slow",
    description="Answers after the given number of seconds",
    annotations=ToolAnnotations(read_only_hint=True),
)
def slow(seconds: float) -> str:
    record(f"slow {seconds}")
    time.sleep(seconds)
    return f"slept {seconds}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
