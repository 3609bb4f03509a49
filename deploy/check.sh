#!/usr/bin/env bash
# CI checks of the deployment files (issue "Deploy it"), offline:
#   1. nats-server -t accepts the dev nats.conf and the production config
#      (k8s/base/nats/, as the prod and the dev overlays mount it), the two
#      agree on max_payload, and accounts.conf gives the roles permissions
#      for every stream and bucket named in common/src/subjects.rs;
#   2. the Dockerfile parses with Docker's own parser (PyPI `dockerfile`), its
#      build stage runs CI's release build, and it runs as non-root;
#      compose.yaml parses and mounts files that exist;
#   3. no secret or placeholder password is committed; without the files
#      deploy/secrets.sh writes, an overlay does not render (a missing
#      file); with them (made in a temporary copy of k8s/, never the
#      checkout's own) `kubectl kustomize` renders both overlays and the
#      output validates against the Kubernetes schemas (PyPI
#      `kubernetes-validate`, strict); the routes carry the route password
#      the cluster requires; every Secret a pod names is generated; the
#      KEDA ScaledObject (a CRD without a schema there) is checked against
#      the stream, consumer and Deployment it must name.
# Python tools go to .nats/deploy-py (ignored by git). Needs kubectl (on the
# machine image; Debian/Google's `kubectl` package otherwise).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$PWD"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

step() { echo; echo "--> $*"; }

step "secrets: none committed; deploy/secrets.sh makes them in a copy of k8s/"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and present (a deletion not yet committed does not count).
    committed="$(git ls-files -z -- 'k8s/*.env' 'k8s/*/secrets/*' \
        | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then echo "$f"; fi; done)"
    if [[ -n "$committed" ]]; then
        echo "secret files are committed (deploy/secrets.sh writes them; .gitignore):" >&2
        echo "$committed" >&2
        exit 1
    fi
fi
# Outside comments: a value, not a sentence about them.
if grep -rniE '^[^#]*(change-me|placeholder)' k8s deploy/compose.yaml --exclude-dir=secrets; then
    echo "placeholder passwords in k8s/ or deploy/compose.yaml (above)" >&2
    exit 1
fi
command -v kubectl >/dev/null || { echo "kubectl is needed (kubectl kustomize)" >&2; exit 1; }
# The copy, without any secrets a developer made in the checkout.
cp -r k8s "$tmp/k8s"
rm -rf "$tmp"/k8s/overlays/*/secrets
for overlay in dev prod; do
    if out="$(kubectl kustomize "$tmp/k8s/overlays/$overlay" 2>&1)"; then
        echo "$overlay renders without its secrets files: it would deploy without passwords" >&2
        exit 1
    fi
    if [[ "$out" != *secrets/nats-passwords.env* ]]; then
        echo "$overlay without secrets fails, but not for the missing secrets file:" >&2
        echo "$out" >&2
        exit 1
    fi
done
echo "ok: without secrets files the overlays stop at secrets/nats-passwords.env"
deploy/secrets.sh "$tmp/k8s/overlays/dev" "$tmp/k8s/overlays/prod"

step "nats-server -t: dev and production configs"
nats_bin="${NATS_SERVER_BIN:-$(deploy/nats-server.sh)}"
"$nats_bin" -t -c nats.conf
# The production config reads these at start: the passwords deploy/secrets.sh
# made, so a password it makes that nats-server would misread fails here.
set -a
# shellcheck source=/dev/null
. "$tmp/k8s/overlays/prod/secrets/nats-passwords.env"
set +a
export SERVER_NAME=nats-0 NATS_STORE_DIR="$tmp/store"
"$nats_bin" -t -c k8s/base/nats/nats.conf
mkdir -p "$tmp/dev-nats"
cp k8s/base/nats/*.conf "$tmp/dev-nats/"
cp k8s/overlays/dev/nats/cluster.conf "$tmp/dev-nats/cluster.conf"
"$nats_bin" -t -c "$tmp/dev-nats/nats.conf"

step "the dev config is in step with production (max_payload)"
dev_payload="$(sed -n -E 's/^max_payload: *([^ #]+).*/\1/p' nats.conf)"
prod_payload="$(sed -n -E 's/^max_payload: *([^ #]+).*/\1/p' k8s/base/nats/nats.conf)"
if [[ -z "$dev_payload" || "$dev_payload" != "$prod_payload" ]]; then
    echo "max_payload differs: nats.conf '$dev_payload', k8s/base/nats/nats.conf '$prod_payload'" >&2
    exit 1
fi
echo "ok: max_payload $dev_payload in both"

step "accounts.conf names every stream and bucket of subjects.rs"
# `swarm setup` creates them as admin and the roles read them: a new one
# needs the roles' JetStream API permissions in k8s/base/nats/accounts.conf.
missing=0
while read -r kind name; do
    case "$kind" in
        STREAM) stream="$name" ;;
        REPORTS) stream="OBJ_$name" ;;
        *) stream="KV_$name" ;;
    esac
    if ! grep -qw "$stream" k8s/base/nats/accounts.conf; then
        echo "k8s/base/nats/accounts.conf: no permissions for $stream (from common/src/subjects.rs)" >&2
        missing=1
    fi
done < <(sed -n -E 's/^pub const ([A-Z0-9]+)_(STREAM|BUCKET): &str = "([^"]+)";/\1 \2 \3/p' common/src/subjects.rs \
    | awk '{ if ($2 == "STREAM") print "STREAM", $3; else if ($1 == "REPORTS") print "REPORTS", $3; else print "KV", $3 }')
[[ $missing == 0 ]] || exit 1
echo "ok"

step "python tools (dockerfile, kubernetes-validate) in .nats/deploy-py"
py="$repo/.nats/deploy-py"
if ! PYTHONPATH="$py" python3 -c 'import dockerfile, kubernetes_validate, yaml' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check --no-input \
        --target "$py" "dockerfile==3.4.0" "kubernetes-validate==1.37.0" pyyaml
fi
export PYTHONPATH="$py"

step "shell scripts parse"
scripts=(deploy/*.sh bench/peers/setup.sh .ci/run)
for f in "${scripts[@]}"; do
    bash -n "$f"
done
echo "ok: ${#scripts[@]} scripts"

step "Dockerfile and compose.yaml"
python3 - <<'PY'
import sys, os, yaml, dockerfile
cmds = dockerfile.parse_file("deploy/Dockerfile")
runs = " ".join(" ".join(c.value) for c in cmds if c.cmd == "RUN")
want = "cargo build --release --workspace --bins --locked"
if want not in runs:
    sys.exit(f"deploy/Dockerfile: the build stage must run `{want}`")
froms = [c for c in cmds if c.cmd == "FROM"]
if len(froms) < 2:
    sys.exit("deploy/Dockerfile: expected a multi-stage build")
last_from = max(i for i, c in enumerate(cmds) if c.cmd == "FROM")
users = [c.value[0] for c in cmds[last_from:] if c.cmd == "USER"]
if not users or users[-1].split(":")[0] in ("root", "0"):
    sys.exit("deploy/Dockerfile: the runtime stage must run as a non-root USER")
for b in ("boss", "manager", "worker", "gateway", "swarm"):
    if f"target/release/{b}" not in runs:
        sys.exit(f"deploy/Dockerfile: binary {b} is not copied")
print(f"ok: {len(cmds)} instructions, {len(froms)} stages, user {users[-1]}")
compose = yaml.safe_load(open("deploy/compose.yaml"))
for name, svc in compose["services"].items():
    for v in svc.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith("."):
            path = os.path.normpath(os.path.join("deploy", src))
            if not os.path.isfile(path):
                sys.exit(f"deploy/compose.yaml: {name} mounts {src}, which does not exist")
# NATS for this machine only, and no password with a default: compose
# refuses to start until they are set.
for name, svc in compose["services"].items():
    for port in svc.get("ports", []):
        if not str(port).startswith("127.0.0.1:"):
            sys.exit(f"deploy/compose.yaml: {name} publishes {port} beyond 127.0.0.1")
import re
text = open("deploy/compose.yaml").read()
refs = re.findall(r"\$\{([A-Z_]*PASSWORD[A-Z_]*)([^}]*)\}", text)
if not refs:
    sys.exit("deploy/compose.yaml: no password taken from the environment")
for var, rest in refs:
    if not rest.startswith(":?"):
        sys.exit(f"deploy/compose.yaml: ${{{var}{rest}}} must be required (`:?`), with no default")
print("ok: compose.yaml services:", ", ".join(compose["services"]))
PY

step "kubectl kustomize: dev and prod overlays (with generated secrets), validated offline"
for overlay in dev prod; do
    kubectl kustomize "$tmp/k8s/overlays/$overlay" > "$tmp/$overlay.yaml"
    # Unknown kinds (the KEDA CRD) only warn here; they are checked below.
    python3 "$py/bin/kubernetes-validate" --strict --quiet -k 1.32.0 "$tmp/$overlay.yaml"
    python3 - "$tmp/$overlay.yaml" "$overlay" <<'PY'
import sys, re, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
overlay = sys.argv[2]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
subjects = open("common/src/subjects.rs").read()
def const(name):
    return re.search(rf'pub const {name}: &str = "([^"]+)"', subjects).group(1)
a2ap = const("A2AP_STREAM")
nats = kinds["StatefulSet"][0]
nodes = nats["spec"]["replicas"]
expect = {"dev": 1, "prod": 3}[overlay]
assert nodes == expect, f"{overlay}: {nodes} NATS nodes, expected {expect}"
cm = next(c for c in kinds["ConfigMap"] if c["metadata"]["name"].startswith("nats-config"))
cluster_conf = "\n".join(l.split("#")[0] for l in cm["data"]["cluster.conf"].splitlines())
clustered = "cluster {" in cluster_conf
assert clustered == (nodes > 1), f"{overlay}: cluster.conf does not match {nodes} node(s)"
container = nats["spec"]["template"]["spec"]["containers"][0]
routes = [a for a in container["args"] if a.startswith("--routes")]
if clustered:
    # Routes authenticate: cluster.conf requires the route user and
    # password, and every route URL the pods get presents them.
    auth = re.search(r"authorization\s*\{\s*user:\s*(\w+)\s+password:\s*\$NATS_ROUTE_PASSWORD\s*\}", cluster_conf)
    assert auth, f"{overlay}: cluster.conf does not require the route password"
    assert "routes" not in cluster_conf, f"{overlay}: cluster.conf lists routes, which cannot carry the password"
    assert len(routes) == 1, f"{overlay}: the nats container needs one --routes argument, has {routes}"
    want = [f"nats://{auth.group(1)}:$(NATS_ROUTE_PASSWORD)@nats-{i}.nats-headless:6222" for i in range(nodes)]
    got = routes[0].split("=", 1)[1].split(",")
    assert got == want, f"{overlay}: --routes {got}, expected {want}"
    env = {e["name"]: e for e in container["env"]}
    ref = env["NATS_ROUTE_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] == "NATS_ROUTE_PASSWORD", ref
else:
    assert not routes, f"{overlay}: one node, but routes {routes}"
# Every Secret a pod refers to is generated, with every key it reads (a
# generator in the wrong namespace leaves the references unrenamed).
secrets = {s["metadata"]["name"]: s.get("data", {}) for s in kinds["Secret"]}
def refs(node):
    if isinstance(node, dict):
        for key in ("secretKeyRef", "secretRef"):
            if key in node:
                yield node[key]["name"], node[key].get("key")
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)
for name, key in refs(docs):
    assert name in secrets, f"{overlay}: a pod refers to Secret {name}, which is not generated"
    assert key is None or key in secrets[name], f"{overlay}: Secret {name} has no {key}"
# The generated passwords: all there, none a placeholder, none the same.
import base64
(pw_name,) = [n for n in secrets if n.startswith("nats-passwords")]
passwords = {k: base64.b64decode(v).decode() for k, v in secrets[pw_name].items()}
for var in ("NATS_BOSS_PASSWORD", "NATS_MANAGER_PASSWORD", "NATS_WORKER_PASSWORD", "NATS_CLIENT_PASSWORD", "NATS_ROUTE_PASSWORD"):
    value = passwords.get(var, "")
    assert len(value) >= 32, f"{overlay}: {var} is missing or short"
    assert not re.search("change-me|placeholder", value, re.I), f"{overlay}: {var} is a placeholder"
assert len(set(passwords.values())) == len(passwords), f"{overlay}: two passwords are the same"
deployments = {d["metadata"]["name"]: d for d in kinds["Deployment"]}
for role in ("boss", "manager", "worker"):
    spec = deployments[role]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["SWARM_REPLICAS"] == str(nodes), f"{overlay}/{role}: SWARM_REPLICAS {env['SWARM_REPLICAS']} on {nodes} node(s)"
    assert int(spec["terminationGracePeriodSeconds"]) > int(env["SWARM_DRAIN_TIMEOUT"]), f"{role}: grace period <= drain timeout"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
scalers = kinds.get("ScaledObject", []) + kinds.get("HorizontalPodAutoscaler", [])
assert len(scalers) == 1, f"{overlay}: exactly one worker autoscaler, found {len(scalers)}"
for so in kinds.get("ScaledObject", []):
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    target = so["spec"]["scaleTargetRef"]["name"]
    assert target in deployments, f"ScaledObject targets {target}, not a Deployment"
    (trig,) = so["spec"]["triggers"]
    meta = trig["metadata"]
    assert trig["type"] == "nats-jetstream"
    assert meta["stream"] == a2ap, meta
    assert meta["consumer"] == "worker-general", meta
    assert meta["account"] == "SWARM", meta
    assert all(isinstance(v, str) for v in meta.values()), "KEDA metadata values must be strings"
    host = meta["natsServerMonitoringEndpoint"].split(".")[0]
    assert host in {s["metadata"]["name"] for s in kinds["Service"]}, f"no Service {host}"
print(f"ok: {overlay}: {len(docs)} resources, {nodes} NATS node(s), autoscaler {scalers[0]['kind']}")
PY
done
step "components/monitoring: with each overlay, the PodMonitor scrapes every role; the dashboard queries only exported metrics"
for overlay in dev prod; do
    # The temporary copy's overlay, with the component added as docs/deploy.md says.
    python3 - "$tmp/k8s/overlays/$overlay/kustomization.yaml" <<'PY'
import sys, yaml
path = sys.argv[1]
k = yaml.safe_load(open(path))
k.setdefault("components", []).append("../../components/monitoring")
yaml.safe_dump(k, open(path, "w"), sort_keys=False)
PY
    kubectl kustomize "$tmp/k8s/overlays/$overlay" > "$tmp/$overlay-monitoring.yaml"
    # The PodMonitor (a CRD without a schema there) only warns; it is checked below.
    python3 "$py/bin/kubernetes-validate" --strict --quiet -k 1.32.0 "$tmp/$overlay-monitoring.yaml"
    python3 - "$tmp/$overlay-monitoring.yaml" "$overlay" <<'PY'
import sys, json, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
overlay = sys.argv[2]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
(pm,) = kinds["PodMonitor"]
assert pm["apiVersion"] == "monitoring.coreos.com/v1", pm["apiVersion"]
deployments = {d["metadata"]["name"]: d for d in kinds["Deployment"]}
namespace = deployments["boss"]["metadata"]["namespace"]
assert pm["metadata"]["namespace"] == namespace, f"{overlay}: the PodMonitor is not in {namespace}"
want = pm["spec"]["selector"]["matchLabels"]
def selected(workload):
    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in want.items())
picked = sorted(d["metadata"]["name"] for d in kinds["Deployment"] + kinds.get("StatefulSet", []) if selected(d))
assert picked == ["boss", "gateway", "manager", "worker"], f"{overlay}: the PodMonitor selects {picked}"
# The roles' health port, admitted from other namespaces (Prometheus's) by a NetworkPolicy.
admitted = set()
for np in kinds["NetworkPolicy"]:
    if np["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") == "role":
        for rule in np["spec"].get("ingress", []):
            admitted |= {p["port"] for p in rule.get("ports", [])}
for endpoint in pm["spec"]["podMetricsEndpoints"]:
    assert endpoint.get("path", "/metrics") == "/metrics", endpoint
    for name in picked:
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        assert endpoint["port"] in ports, f"{overlay}/{name}: no port named {endpoint['port']}"
        env = {e["name"]: e.get("value") for e in container["env"]}
        port = ports[endpoint["port"]]
        assert str(port) == env["SWARM_HEALTH_PORT"], f"{overlay}/{name}: port {endpoint['port']} is not SWARM_HEALTH_PORT"
        assert port in admitted, f"{overlay}/{name}: no NetworkPolicy admits Prometheus to port {port}"
(cm,) = [c for c in kinds["ConfigMap"] if c["metadata"]["name"] == "swarm-dashboard"]
assert cm["metadata"]["namespace"] == namespace
assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", "the Grafana sidecar loads ConfigMaps labelled grafana_dashboard=1"
assert json.loads(cm["data"]["swarm-dashboard.json"]) == json.load(open("k8s/components/monitoring/swarm-dashboard.json"))
print(f"ok: {overlay}: the PodMonitor scrapes {', '.join(picked)} on port {pm['spec']['podMetricsEndpoints'][0]['port']}; the dashboard's ConfigMap is labelled for Grafana")
PY
done
python3 - <<'PY'
# The dashboard: Grafana's JSON model, and only metrics the code exports
# (the string constants of runtime/src/metrics.rs and metrics/process.rs;
# swarm-runtime's test the_dashboard_queries_only_exported_metrics checks
# the same against the list the exporter keeps).
import json, re
dash = json.load(open("k8s/components/monitoring/swarm-dashboard.json"))
assert dash["schemaVersion"] >= 36, dash["schemaVersion"]
assert dash["uid"] and dash["title"]
variables = {v["name"]: v for v in dash["templating"]["list"]}
assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
for name in ("role", "pod"):
    assert variables[name]["type"] == "query", name
source = open("runtime/src/metrics.rs").read() + open("runtime/src/metrics/process.rs").read()
exported = set(re.findall(r'pub const [A-Z_]+: &str = "((?:swarm|process)_[a-z_]+)";', source))
assert len(exported) > 15, exported
ids, queried = set(), set()
for panel in dash["panels"]:
    assert panel["type"] in ("timeseries", "stat"), f"panel {panel['title']}: type {panel['type']}"
    assert panel["id"] not in ids, f"panel id {panel['id']} twice"
    ids.add(panel["id"])
    assert set(panel["gridPos"]) == {"h", "w", "x", "y"}, panel["title"]
    assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert panel["targets"], panel["title"]
    for target in panel["targets"]:
        names = re.findall(r"(?<![A-Za-z0-9_])((?:swarm|process)_[a-z_]+)", target["expr"])
        assert names, f"panel {panel['title']}: {target['expr']} reads no Swarm metric"
        for n in names:
            base = re.sub(r"_(bucket|sum|count)$", "", n)
            n = base if base in exported else n
            assert n in exported, f"panel {panel['title']} queries {n}, which runtime/src/metrics.rs does not export"
            queried.add(n)
for n in ("swarm_missions_intake_total", "swarm_mission_outcomes_total", "process_cpu_seconds_total", "process_resident_memory_bytes"):
    assert n in queried, f"the dashboard has no panel on {n}"
print(f"ok: the dashboard: {len(dash['panels'])} panels, {len(queried)} of {len(exported)} exported metrics queried")
PY

echo
echo "deploy checks passed"
