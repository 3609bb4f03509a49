"""An A2A client of the Swarm gateway, written with the Python a2a-sdk (1.x).

Run by tests/tests/a2a.rs against a live gateway:

    python3 a2a_client.py <base-url> <token> <binding> core
    python3 a2a_client.py <base-url> <token> <binding> input <plan-json>
    python3 a2a_client.py <base-url> <token> <binding> push

The push scenario runs its own webhook, and in its middle prints
`restart <task-id>` and waits for a line on stdin: the test restarts the
gateway (after the task has ended) and then writes one.

<binding> is JSONRPC or HTTP+JSON. Each check prints one line; the script
exits non-zero at the first check that fails, saying what it saw.
"""

import asyncio
import http.server
import json
import sys
import threading
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
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
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


async def first_task(client, message, request=None):
    async for event in client.send_message(request or send_request(message)):
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


class Webhook:
    """A webhook on 127.0.0.1 that records every POST (path, headers, and
    the body parsed strictly as the SDK's StreamResponse), and answers the
    first `fail_first` POSTs of each path with 503."""

    def __init__(self, fail_first=0):
        self.received = []
        self.failed = {}
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.lock:
                    failed = hook.failed.get(self.path, 0)
                    if failed < fail_first:
                        hook.failed[self.path] = failed + 1
                        self.send_response(503)
                        self.end_headers()
                        return
                    event = StreamResponse()
                    json_format.Parse(body, event)  # unknown fields fail
                    hook.received.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()}, event)
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def events(self, path):
        with self.lock:
            return [(h, e) for p, h, e in self.received if p == path]

    async def until_end(self, path, task_id, within=60.0):
        deadline = asyncio.get_running_loop().time() + within
        while True:
            for headers, event in self.events(path):
                if (event.HasField("status_update")
                        and event.status_update.task_id == task_id
                        and event.status_update.status.state in TERMINAL):
                    return headers, event
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"no terminal status of {task_id} at {path} after {within} s: "
                    f"{[e.WhichOneof('payload') for _, e in self.events(path)]}"
                )
            await asyncio.sleep(0.1)


async def push(url, token, binding):
    hook = Webhook(fail_first=2)
    card, client = await make_client(url, token, binding, streaming=False)
    check(card.capabilities.push_notifications, "the card offers push notifications")

    # A config given with the message: every update reaches the webhook,
    # with the configured authentication and token, after two refusals.
    message = text_message("1. Compute 6 * 7\n2. Checksum the previous result")
    request = SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(
            return_immediately=True,
            task_push_notification_config=TaskPushNotificationConfig(
                url=hook.url + "/a",
                token="token-of-a",
                authentication=AuthenticationInfo(scheme="Bearer", credentials="hook-secret"),
            ),
        ),
    )
    task = await first_task(client, message=None, request=request)
    headers, end = await hook.until_end("/a", task.id)
    check(end.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
          "the webhook hears the task complete", end)
    check(headers.get("authorization") == "Bearer hook-secret",
          "with the configured Authorization", headers)
    check(headers.get("x-a2a-notification-token") == "token-of-a",
          "and the config's token", headers)
    check(headers.get("content-type", "").startswith("application/a2a+json"),
          "as application/a2a+json", headers)
    kinds = [e.WhichOneof("payload") for _, e in hook.events("/a")]
    check("artifact_update" in kinds, "the artifacts are pushed", kinds)
    artifacts = " ".join(
        p.text for _, e in hook.events("/a") if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts if p.text
    )
    check("42" in artifacts, "the results reach the webhook", artifacts)
    check(kinds.count("status_update") >= 2, "status updates before the end", kinds)
    check(hook.failed.get("/a") == 2, "refused deliveries are retried", hook.failed)

    configs = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    check([c.id for c in configs.configs] == [task.id],
          "the message's config is listed, named after its task", configs)
    check(configs.configs[0].authentication.credentials == "hook-secret",
          "the config reads back whole", configs)

    # Configs made on a running task: create, get, list, delete.
    slow = await first_task(
        client, text_message('{"tool": "sleep", "arguments": {"ms": 3000}}')
    )
    made = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=slow.id, id="second", url=hook.url + "/b")
    )
    check(made.id == "second" and made.task_id == slow.id, "a config is created", made)
    await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=slow.id, id="third", url=hook.url + "/c")
    )
    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=slow.id, id="second")
    )
    check(got.url == hook.url + "/b", "a config is read back", got)
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=slow.id, id="third")
    )
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=slow.id, id="third")
    )
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=slow.id)
    )
    check([c.id for c in listed.configs] == ["second"],
          "a deleted config is gone (and deleting twice is no error)", listed)
    try:
        await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=slow.id, id="third")
        )
        check(False, "a deleted config is not found")
    except TaskNotFoundError:
        check(True, "a deleted config is not found")

    # The gateway is down while the task ends; restarted, it still tells.
    print(f"restart {slow.id}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    _, end = await hook.until_end("/b", slow.id)
    check(end.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
          "an update stored while the gateway was down is pushed after its restart", end)
    ends_at_c = [e for _, e in hook.events("/c")
                 if e.HasField("status_update") and e.status_update.status.state in TERMINAL]
    check(not ends_at_c, "a deleted config is told nothing more", ends_at_c)
    print("done", flush=True)


def main():
    url, token, binding, scenario = sys.argv[1:5]
    if scenario == "core":
        asyncio.run(core(url, token, binding))
    elif scenario == "push":
        asyncio.run(push(url, token, binding))
    elif scenario == "input":
        asyncio.run(input_required(url, token, binding, json.loads(sys.argv[5])))
    else:
        sys.exit(f"no scenario {scenario}")


if __name__ == "__main__":
    main()
