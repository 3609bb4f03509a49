"""An outside A2A agent written with the Python a2a-sdk (1.x) server: the
remote agent a persona of a Swarm plan hands its tasks to.

Run by tests/tests/a2a_remote.rs:

    python3 a2a_agent.py <port> <log-file> <token> <seconds>

It serves its card and JSON-RPC on 127.0.0.1:<port>, refuses a request
without `Authorization: Bearer <token>` (when <token> is not empty), and
does each task in <seconds>: it answers with an artifact that names the
task's title, or, for a task whose text says "ask a person", first asks
"Which colour should the shed be?" (input required) and then paints it the
colour it is told. Every new task it is sent is one line of <log-file>:
`<context id> <message id>`, so a test can count what it was sent.
"""

import asyncio
import re
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)


class Painter(AgentExecutor):
    def __init__(self, log, seconds):
        self.log = log
        self.seconds = seconds

    async def execute(self, context, event_queue):
        task = context.current_task
        text = context.get_user_input()
        if task is None:
            task = new_task_from_user_message(context.message)
            with open(self.log, "a") as f:
                f.write(f"{task.context_id} {context.message.message_id}\n")
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text=f"painted the shed {text.strip()}")])
            await updater.complete()
            return
        await updater.start_work()
        await asyncio.sleep(self.seconds)
        if "ask a person" in text.lower():
            await updater.requires_input(
                updater.new_agent_message([Part(text="Which colour should the shed be?")])
            )
            return
        title = re.search(r"^=== TASK [^:]+: (.*) ===$", text, re.MULTILINE)
        did = title.group(1) if title else text.splitlines()[0]
        await updater.add_artifact([Part(text=f"the remote painter did: {did}")])
        await updater.complete()

    async def cancel(self, context, event_queue):
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


class Bearer(BaseHTTPMiddleware):
    def __init__(self, app, token):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request, call_next):
        if self.token and request.url.path != "/.well-known/agent-card.json":
            if request.headers.get("authorization") != f"Bearer {self.token}":
                return JSONResponse({"error": "unauthenticated"}, status_code=401)
        return await call_next(request)


def main():
    port, log, token, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="Remote painter",
        description="Paints sheds, for Swarm's tests.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="paint", name="Paint", description="Paints", tags=["paint"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Painter(log, seconds),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    app = Starlette(
        routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    )
    app.add_middleware(Bearer, token=token)
    print(f"serving {url}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main()
