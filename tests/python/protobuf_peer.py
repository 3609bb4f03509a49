#!/usr/bin/env python3
"""A peer of Swarm in another language, speaking A2AP in protobuf.

Generates Python code from proto/a2ap.proto with grpcio-tools' protoc (no
code is checked in), submits a mission on `boss.missions` as an
`application/protobuf` MissionRequest with an explicit two-task plan,
decodes the MissionReply, then follows every message of the swarm on
`a2ap.>` (deployment, assignments, progress, results, the final report),
checks each is protobuf and decodes it, and succeeds when the FinalReport
says Completed with every task completed.

Run by tests/tests/protobuf.rs against a real nats-server and the boss,
manager and worker binaries started with `--codec protobuf`:

    python3 tests/python/protobuf_peer.py --nats nats://127.0.0.1:4222 --proto-dir proto

Needs the PyPI packages protobuf, grpcio-tools and nats-py. Prints one JSON
line with what it saw on success; exits non-zero with the reason otherwise.
"""

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import tempfile

import nats


def generate(proto_dir: str, out_dir: str):
    """Compiles a2ap.proto with grpc_tools' protoc and imports the module."""
    import grpc_tools

    # The well-known types (timestamp.proto, struct.proto) ship with grpc_tools.
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            os.path.join(proto_dir, "a2ap.proto"),
        ],
        check=True,
    )
    sys.path.insert(0, out_dir)
    return importlib.import_module("a2ap_pb2")


def mission(pb):
    """A mission with its own plan: two explicit `echo` calls, one after the other."""
    req = pb.MissionRequest(mission="echo twice, from Python", protocol_version="1.0")
    req.max_execution_seconds = 120
    plan = req.plan
    plan.manager_directive = "Run both echoes."
    plan.planner = "explicit"
    worker = plan.workers.add(name="echoer", role="Echoes text", tools=["echo"])
    worker.pool = "general"
    first = plan.tasks.add(
        task_id="first",
        title="First echo",
        description=json.dumps({"tool": "echo", "arguments": {"text": "hello from python"}}),
        assigned_to="echoer",
    )
    second = plan.tasks.add(
        task_id="second",
        title="Second echo",
        description=json.dumps({"tool": "echo", "arguments": {"text": "and again"}}),
        assigned_to="echoer",
        dependencies=["first"],
    )
    # A gate of the oneof kind, to send one through: at most 1000 characters.
    second.gates.add().length.max_chars = 1000
    assert first.task_id != second.task_id
    return req


def fail(reason: str):
    print(f"protobuf_peer: FAILED: {reason}", file=sys.stderr)
    sys.exit(1)


async def run(args, pb):
    nc = await nats.connect(args.nats, connect_timeout=5)
    # Subscribe before submitting: the deployment may be published before
    # the reply arrives. Messages are kept until the swarm id is known.
    inbox: asyncio.Queue = asyncio.Queue()

    async def on_message(msg):
        await inbox.put(msg)

    sub = await nc.subscribe("a2ap.>", cb=on_message)

    body = mission(pb).SerializeToString()
    reply = await nc.request(
        "boss.missions",
        body,
        timeout=15,
        headers={"Content-Type": "application/protobuf", "A2ap-Version": "1.0"},
    )
    headers = reply.headers or {}
    if headers.get("Content-Type") != "application/protobuf":
        fail(f"the mission reply's Content-Type is {headers.get('Content-Type')!r}")
    if "Nats-Service-Error" in headers:
        refused = pb.MissionErrorReply.FromString(reply.data)
        fail(f"mission refused: {refused.error.message} ({pb.ErrorCode.Name(refused.error.code)})")
    accepted = pb.MissionReply.FromString(reply.data)
    if accepted.status != "accepted" or not accepted.swarm_id:
        fail(f"unexpected reply {accepted}")
    swarm_id = accepted.swarm_id

    body_of = {
        pb.MESSAGE_TYPE_SWARM_DEPLOYMENT: "swarm_deployment",
        pb.MESSAGE_TYPE_TASK_ASSIGNMENT: "task_assignment",
        pb.MESSAGE_TYPE_PROGRESS_UPDATE: "progress_update",
        pb.MESSAGE_TYPE_RESULT_SUBMISSION: "result_submission",
        pb.MESSAGE_TYPE_FINAL_REPORT: "final_report",
        pb.MESSAGE_TYPE_ERROR: "error",
        pb.MESSAGE_TYPE_CONTROL: "control",
    }
    seen = {}
    deadline = asyncio.get_running_loop().time() + args.timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            fail(f"no FinalReport within {args.timeout} s; saw {seen}")
        try:
            msg = await asyncio.wait_for(inbox.get(), timeout=left)
        except asyncio.TimeoutError:
            continue
        # a2ap.<swarm>.<kind>[.<task>] and a2ap.work.<pool>.<swarm>.<task>.
        if swarm_id not in msg.subject.split("."):
            continue
        content_type = (msg.headers or {}).get("Content-Type")
        if content_type != "application/protobuf":
            fail(f"{msg.subject} came as {content_type!r}, not application/protobuf")
        env = pb.Envelope.FromString(msg.data)
        kind = env.WhichOneof("body")
        if kind != body_of.get(env.message_type):
            fail(f"{msg.subject}: message_type {env.message_type} but body {kind}")
        if env.swarm_id != swarm_id or not env.message_id or not env.HasField("timestamp"):
            fail(f"{msg.subject}: envelope {env}")
        seen[kind] = seen.get(kind, 0) + 1
        if kind == "swarm_deployment":
            plan = env.swarm_deployment.plan
            if [t.task_id for t in plan.tasks] != ["first", "second"]:
                fail(f"the deployment's plan is not ours: {plan}")
        if kind == "task_assignment" and env.task_assignment.persona.name != "echoer":
            fail(f"an assignment for another persona: {env.task_assignment}")
        if kind == "result_submission":
            result = env.result_submission
            if result.status != pb.TASK_STATUS_COMPLETED:
                fail(f"a result that did not complete: {result}")
        if kind == "final_report":
            report = env.final_report
            statuses = {t.task_id: pb.TaskStatus.Name(t.status) for t in report.task_results}
            if report.swarm_status != pb.SWARM_STATUS_COMPLETED:
                fail(f"the swarm ended {pb.SwarmStatus.Name(report.swarm_status)}: {statuses}")
            # The seed's status beside ours, in its own five values.
            if report.overall_status != pb.TASK_STATUS_COMPLETED:
                fail(f"the seed's overall_status is {pb.TaskStatus.Name(report.overall_status)}")
            if report.insights != "\n".join(report.insight_list):
                fail(f"the seed's insights {report.insights!r} are not the list's lines")
            if statuses != {"first": "TASK_STATUS_COMPLETED", "second": "TASK_STATUS_COMPLETED"}:
                fail(f"tasks ended {statuses}")
            results = {t.task_id: t.result for t in report.task_results}
            if "hello from python" not in results["first"]:
                fail(f"the first result is {results['first']!r}")
            break
    await sub.unsubscribe()
    await nc.drain()
    for needed in ("swarm_deployment", "task_assignment", "result_submission", "final_report"):
        if needed not in seen:
            fail(f"no {needed} seen: {seen}")
    print(json.dumps({"swarm_id": swarm_id, "seen": seen, "overall_status": "Completed"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="a2ap-py-") as out:
        pb = generate(os.path.abspath(args.proto_dir), out)
        asyncio.run(run(args, pb))


if __name__ == "__main__":
    main()
