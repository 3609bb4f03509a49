"""An A2A client of the Swarm gateway, written with the Python a2a-sdk (1.x).

Run by tests/tests/a2a.rs against a live gateway:

    python3 a2a_client.py <base-url> <token> <binding> core
    python3 a2a_client.py <base-url> <token> <binding> input <plan-json>

<binding> is JSONRPC or HTTP+JSON. Each check prints one line; the script
exits non-zero at the first check that fails, saying what it saw.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import json_format, struct_pb2

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def check(condition, what, seen=None):
    if not condition:
        print(f"FAILED: {what}; saw: {seen}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def state_name(state):
    return TaskState.Name(state)


def text_message(text, task_id=""):
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
    )


def data_message(text, data):
    value = struct_pb2.Value()
    json_format.ParseDict(data, value)
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text), Part(data=value)],
    )


def send_request(message):
    return SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(return_immediately=True),
    )


async def first_task(client, message):
    async for event in client.send_message(send_request(message)):
        if event.HasField("task"):
            return event.task
    raise AssertionError("SendMessage answered with no task")


async def wait_for(client, task_id, states, within=60.0):
    deadline = asyncio.get_running_loop().time() + within
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"task {task_id} is {state_name(task.status.state)} after {within} s"
            )
        await asyncio.sleep(0.2)


def status_text(task):
    return " ".join(p.text for p in task.status.message.parts)


def artifact_texts(task):
    return {
        a.artifact_id: " ".join(p.text for p in a.parts if p.text)
        for a in task.artifacts
    }


async def make_client(url, token, binding, streaming):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=60.0)
    card = await A2ACardResolver(http, url).get_agent_card()
    config = ClientConfig(
        httpx_client=http,
        supported_protocol_bindings=[binding],
        streaming=streaming,
        polling=not streaming,
    )
    return card, ClientFactory(config).create(card)


async def core(url, token, binding):
    card, client = await make_client(url, token, binding, streaming=False)
    check(card.name == "Swarm", "the card names the agent", card.name)
    bindings = {i.protocol_binding: i for i in card.supported_interfaces}
    check(
        {"JSONRPC", "HTTP+JSON"} <= set(bindings),
        "the card lists both bindings",
        list(bindings),
    )
    check(bindings[binding].protocol_version == "1.0", "interfaces speak 1.0")
    check(card.capabilities.streaming, "the card offers streaming")
    skills = {s.id: s for s in card.skills}
    check(
        "calculator" in skills and "calc" in skills["calculator"].tags,
        "a skill per persona, tagged with its tools",
        list(skills),
    )
    if token:
        check(
            "bearer" in card.security_schemes,
            "the card names its bearer scheme",
            card.security_schemes,
        )
        _, anonymous = await make_client(url, "", binding, streaming=False)
        try:
            await first_task(anonymous, text_message("Compute 1 + 1"))
            check(False, "a caller without a token is refused")
        except (A2AError, A2AClientError, httpx.HTTPStatusError) as e:
            check("401" in str(e) or "authentication" in str(e).lower(),
                  "a caller without a token is refused", repr(e))
        _, wrong = await make_client(url, "not-a-token-of-this-gateway", binding, False)
        try:
            await wrong.get_task(GetTaskRequest(id="x"))
            check(False, "a wrong token is refused")
        except (A2AError, A2AClientError, httpx.HTTPStatusError) as e:
            check("401" in str(e) or "not valid" in str(e).lower(),
                  "a wrong token is refused", repr(e))

    # A mission of two steps in order, to its end.
    message = text_message("1. Compute (17 * 23) + 2^10\n2. Checksum the previous result")
    task = await first_task(client, message)
    check(task.id != "", "SendMessage answers with a task", task)
    again = await first_task(client, message)
    check(again.id == task.id, "the same message sent again is the same task", again.id)
    done = await wait_for(client, task.id, TERMINAL)
    check(
        done.status.state == TaskState.TASK_STATE_COMPLETED,
        "the mission completes",
        status_text(done),
    )
    texts = artifact_texts(done)
    check("summary" in texts and "final-report" in texts,
          "summary and final report artifacts", list(texts))
    results = " ".join(v for k, v in texts.items() if k.startswith("task-"))
    check("1415" in results, "the task results are artifacts", results)
    check(done.history and done.history[0].role == Role.ROLE_USER,
          "the history starts with the mission", done.history)
    check(done.context_id == task.id, "a task is its own context", done.context_id)

    # A mission that cannot be done fails, with the reason.
    failing = await first_task(client, text_message("Read the file no-such-file.txt"))
    failed = await wait_for(client, failing.id, TERMINAL)
    check(failed.status.state == TaskState.TASK_STATE_FAILED,
          "an impossible mission is a failed task", state_name(failed.status.state))
    check("no-such-file.txt" in status_text(failed),
          "the failure says why", status_text(failed))

    # Cancel a running one.
    slow = await first_task(
        client, text_message('{"tool": "sleep", "arguments": {"ms": 30000}}')
    )
    await wait_for(client, slow.id, {TaskState.TASK_STATE_WORKING}, within=30)
    cancelled = await client.cancel_task(CancelTaskRequest(id=slow.id))
    if cancelled.status.state not in TERMINAL:
        cancelled = await wait_for(client, slow.id, TERMINAL)
    check(cancelled.status.state == TaskState.TASK_STATE_CANCELED,
          "CancelTask cancels a running task", state_name(cancelled.status.state))
    try:
        await client.cancel_task(CancelTaskRequest(id=slow.id))
        check(False, "an ended task is not cancelable")
    except TaskNotCancelableError:
        check(True, "an ended task is not cancelable")

    # Listing, newest first, a page at a time.
    page = await client.list_tasks(ListTasksRequest(page_size=2))
    ids = [t.id for t in page.tasks]
    check(ids == [slow.id, failing.id], "ListTasks lists newest first", ids)
    check(page.next_page_token != "", "a next page is announced", page)
    rest = await client.list_tasks(
        ListTasksRequest(page_size=2, page_token=page.next_page_token)
    )
    check([t.id for t in rest.tasks] == [task.id] and rest.next_page_token == "",
          "the next page holds the rest", rest)
    completed = await client.list_tasks(
        ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED)
    )
    check([t.id for t in completed.tasks] == [task.id],
          "ListTasks filters by state", [t.id for t in completed.tasks])
    check(all(len(t.artifacts) == 0 for t in page.tasks),
          "artifacts only when asked for")

    # Errors of the spec.
    try:
        await client.get_task(GetTaskRequest(id="no-such-task"))
        check(False, "an unknown task is TaskNotFound")
    except TaskNotFoundError:
        check(True, "an unknown task is TaskNotFound")
    try:
        await client.send_message(send_request(text_message("more", task_id=task.id))).__anext__()
        check(False, "a message on an ended task is refused")
    except UnsupportedOperationError:
        check(True, "a message on an ended task is refused")

    # Streaming: the task first, then updates, artifacts and the end.
    _, streamer = await make_client(url, token, binding, streaming=True)
    events = []
    async for event in streamer.send_message(
        SendMessageRequest(message=text_message("1. Compute 6 * 7\n2. Checksum the previous result"))
    ):
        events.append(event)
    check(events and events[0].HasField("task"), "a stream starts with the task", events[:1])
    kinds = [e.WhichOneof("payload") for e in events]
    check("status_update" in kinds, "the stream carries status updates", kinds)
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    streamed = " ".join(p.text for a in artifacts for p in a.parts if p.text)
    check("42" in streamed, "the stream carries the results as artifacts", streamed)
    last = events[-1]
    check(
        last.HasField("status_update")
        and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
        "the stream ends at the terminal state",
        last,
    )
    # A subscriber to a running task, then to an ended one.
    sleeper = await first_task(
        client, text_message('{"tool": "sleep", "arguments": {"ms": 1500}}')
    )
    seen = []
    async for event in streamer.subscribe(SubscribeToTaskRequest(id=sleeper.id)):
        seen.append(event)
    check(seen[0].HasField("task") and seen[-1].HasField("status_update")
          and seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED,
          "SubscribeToTask follows a task to its end", [e.WhichOneof("payload") for e in seen])
    try:
        async for _ in streamer.subscribe(SubscribeToTaskRequest(id=sleeper.id)):
            pass
        check(False, "subscribing to an ended task is refused")
    except UnsupportedOperationError:
        check(True, "subscribing to an ended task is refused")
    print("done", flush=True)


async def input_required(url, token, binding, plan):
    _, client = await make_client(url, token, binding, streaming=False)
    task = await first_task(client, data_message("Paint the shed", plan))
    waiting = await wait_for(
        client, task.id, {TaskState.TASK_STATE_INPUT_REQUIRED} | TERMINAL
    )
    check(waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
          "a task that asks a person is input-required", state_name(waiting.status.state))
    check("Which colour" in status_text(waiting), "the status carries the question",
          status_text(waiting))
    async for _ in client.send_message(send_request(text_message("blue", task_id=task.id))):
        break
    done = await wait_for(client, task.id, TERMINAL)
    check(done.status.state == TaskState.TASK_STATE_COMPLETED,
          "the answered task completes", status_text(done))
    check("blue" in " ".join(artifact_texts(done).values()),
          "the answer reached the task", artifact_texts(done))
    print("done", flush=True)


def main():
    url, token, binding, scenario = sys.argv[1:5]
    if scenario == "core":
        asyncio.run(core(url, token, binding))
    elif scenario == "input":
        asyncio.run(input_required(url, token, binding, json.loads(sys.argv[5])))
    else:
        sys.exit(f"no scenario {scenario}")


if __name__ == "__main__":
    main()
