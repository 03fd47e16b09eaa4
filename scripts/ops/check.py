"""Checks receiptq's operations files (ops/) for what generic linters cannot see.

    check.py [ROOT]                      ROOT is the repository (default: two levels above this file)
    check.py ROOT --rendered FILE        checks FILE, the output of `kubectl kustomize ops/k8s`

scripts/validate-ops runs it after the linters (yamllint, hadolint, shellcheck, systemd-analyze,
redis-server). It checks:

- the metric catalogue (ops/prometheus/metrics.yml) is well formed;
- every PromQL expression of the alert rules and of the Grafana dashboard parses (promql-parser)
  and uses only catalogued metrics, labels and label values, with rate/increase on counters,
  delta/deriv on gauges and histogram_quantile on buckets;
- the alert rules' structure (for, severity, summary/description/runbook) and the dashboard's
  (datasource ${DS_PROMETHEUS}, unique ids, grid without overlaps, every metric shown);
- the Kubernetes manifests against the Kubernetes API schemas (kubernetes-validate, strict, the
  oldest and newest versions checked), the KEDA ScaledObject against KEDA's redis scaler, and
  receiptq's own rules: non-root, read-only root filesystem, resources, probes on routes the
  API registers, a grace period above the worker drain, references that resolve;
- the systemd units' settings (restart, SIGTERM, stop timeout above the drain, environment
  file, user, hardening, LimitNOFILE, ordering after migrate, METRICS_PORT) and the example
  environment file against the variables AppConfiguration (AppConfiguration*.swift) reads;
- the Dockerfile ships every SwiftPM resource bundle, runs as a numeric non-root user, and its
  ignore file keeps what it copies; redis.conf keeps AOF and noeviction.

Prints "ok: ..." per check and "error: FILE: ..." per problem; exits 1 when there is a problem.
Run it with the interpreter of .local/venv (scripts/setup-python), where its packages live.
"""

import json
import re
import sys
from pathlib import Path

import kubernetes_validate
import promql_parser
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}
GAUGE_FUNCTIONS = {"delta", "idelta", "deriv", "predict_linear", "double_exponential_smoothing", "holt_winters"}
# Grafana's built-in interval variables, replaced before parsing.
GRAFANA_INTERVALS = ("$__rate_interval", "${__rate_interval}", "$__interval", "${__interval}", "$__range", "${__range}")
SECRET_VARIABLES = {"REDIS_PASSWORD", "REDIS_SENTINEL_PASSWORD", "POSTGRES_PASSWORD", "DASHBOARD_PASSWORD", "DASHBOARD_SESSION_SECRET", "SOFTPHONE_NONCE_SECRET"}
# Read outside AppConfiguration: the CLI's `dlq` (RECEIPTQ_ADMIN_URL), the metrics endpoint (to come).
EXTRA_VARIABLES = {"RECEIPTQ_ADMIN_URL", "METRICS_PORT"}
ROLES = {"serve", "work", "schedule", "migrate"}
# The largest WORKER_CONCURRENCY (AppConfiguration's range) plus the process's other descriptors.
MIN_NOFILE = 4096 + 256
# What a stop must leave beyond the worker drain: requeueing what is left, closing connections.
DRAIN_MARGIN_SECONDS = 10


class Report:
    def __init__(self, root, quiet=False):
        self.root = root
        self.errors = []
        self.quiet = quiet

    def error(self, path, message):
        where = path.relative_to(self.root) if isinstance(path, Path) and path.is_relative_to(self.root) else path
        self.errors.append(f"{where}: {message}")

    def ok(self, message):
        if not self.quiet:
            print(f"ok: {message}")


def load_yaml_documents(path, report):
    try:
        with open(path, encoding="utf-8") as handle:
            return [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    except (OSError, yaml.YAMLError) as error:
        report.error(path, f"cannot be read as YAML: {error}")
        return []


def no_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


# ---- the application's own facts, read from its sources ---------------------------------------------


class AppFacts:
    """What the checks compare the ops files with, read from the Swift sources."""

    def __init__(self, root, report):
        # AppConfiguration.swift and its components' files (AppConfiguration+*.swift) read the variables.
        config = "".join(
            path.read_text(encoding="utf-8") for path in sorted((root / "Sources/ReceiptQueueApp").glob("AppConfiguration*.swift"))
        )
        self.variables = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', config))
        self.defaults = {
            name: value.strip().strip('"')
            for name, value in re.findall(r'(?:string|int|double)\(\s*"([A-Z][A-Z0-9_]+)",\s*([^,)]+)', config)
        }
        if "WORKER_SHUTDOWN_TIMEOUT_SECONDS" not in self.defaults or "REDIS_KEY_PREFIX" not in self.defaults:
            report.error(Path("Sources/ReceiptQueueApp/AppConfiguration.swift"), "cannot find the defaults the checks need")
        api = (root / "Sources/IngestAPI/IngestAPI.swift").read_text(encoding="utf-8")
        self.get_routes = set(re.findall(r'router\.get\("([^"]+)"\)', api))
        self.health_routes = {route for route in self.get_routes if route.startswith("/health/")}
        if not self.health_routes:
            report.error(Path("Sources/IngestAPI/IngestAPI.swift"), "no /health/ route found")
        package = (root / "Package.swift").read_text(encoding="utf-8")
        name = re.search(r'Package\(\s*name:\s*"([^"]+)"', package).group(1)
        # Every target with resources: SwiftPM makes <package>_<target>.resources beside the binary.
        # (Test targets' bundles stay in the build directory.)
        self.resource_bundles = set()
        parts = re.split(r"\.(target|executableTarget|testTarget)\(", package)
        for kind, body in zip(parts[1::2], parts[2::2]):
            target = re.search(r'name:\s*"([^"]+)"', body)
            if kind != "testTarget" and target and re.search(r"\bresources:", body):
                self.resource_bundles.add(f"{name}_{target.group(1)}.resources")

    def worker_drain(self, overrides):
        return int(overrides.get("WORKER_SHUTDOWN_TIMEOUT_SECONDS") or self.defaults.get("WORKER_SHUTDOWN_TIMEOUT_SECONDS", "25"))

    def known_variables(self):
        return self.variables | EXTRA_VARIABLES


# ---- metrics and PromQL -----------------------------------------------------------------------------


class Catalogue:
    """ops/prometheus/metrics.yml: every exported series with its kind and labels."""

    def __init__(self, path, report):
        self.metrics = {}
        self.series = {}  # series name -> (metric, kind, {label: [values] | None})
        docs = load_yaml_documents(path, report)
        metrics = docs[0].get("metrics") if docs and isinstance(docs[0], dict) else None
        if not isinstance(metrics, dict) or not metrics:
            report.error(path, "must have a non-empty 'metrics' mapping")
            return
        for name, spec in metrics.items():
            if not re.fullmatch(r"receiptq_[a-z][a-z0-9_]*", str(name)):
                report.error(path, f"{name}: metric names are receiptq_ + snake_case")
                continue
            if not isinstance(spec, dict) or spec.get("type") not in ("counter", "gauge", "histogram"):
                report.error(path, f"{name}: type must be counter, gauge or histogram")
                continue
            if not spec.get("help"):
                report.error(path, f"{name}: needs a help text")
            labels = spec.get("labels") or {}
            if not isinstance(labels, dict) or not all(
                values is None or (isinstance(values, list) and values and all(isinstance(v, str) for v in values))
                for values in labels.values()
            ):
                report.error(path, f"{name}: labels map a name to a list of strings, or to null")
                continue
            kind = spec["type"]
            if kind == "counter" and not name.endswith("_total"):
                report.error(path, f"{name}: a counter's name ends in _total")
            if kind != "counter" and name.endswith("_total"):
                report.error(path, f"{name}: only counters end in _total")
            if "le" in labels or any(label.startswith("__") for label in labels):
                report.error(path, f"{name}: le and __ labels are reserved")
            self.metrics[name] = spec
            if kind == "histogram":
                self.series[f"{name}_bucket"] = (name, "bucket", {**labels, "le": None})
                self.series[f"{name}_sum"] = (name, "counter", labels)
                self.series[f"{name}_count"] = (name, "counter", labels)
            else:
                self.series[name] = (name, kind, labels)


def nodes_in(node, kind):
    """Every node of the PromQL tree under `node` that is a `kind` (VectorSelector, AggregateExpr, ...)."""
    found = []

    def visit(child):
        if isinstance(child, kind):
            found.append(child)

    promql_parser.walk(node, visit)
    return found


def selector_name(selector):
    if selector.name:
        return selector.name
    for matcher in selector.matchers.matchers:
        if matcher.name == "__name__" and str(matcher.op).endswith("Equal") and "Not" not in str(matcher.op):
            return matcher.value
    return None


def check_promql(expr, where, catalogue, report, path):
    """Parses expr and checks its metrics; returns (metrics used, labels grouped by)."""
    used, grouped = set(), set()
    try:
        tree = promql_parser.parse(expr)
    except (ValueError, TypeError) as error:
        report.error(path, f"{where}: PromQL does not parse: {error}")
        return used, grouped

    def series_of(node):
        result = []
        for selector in nodes_in(node, promql_parser.VectorSelector):
            known = catalogue.series.get(selector_name(selector) or "")
            if known:
                result.append(known)
        return result

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            check_selector(node)
        elif isinstance(node, promql_parser.Call):
            check_call(node)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels = set(node.modifier.labels)
            grouped.update(labels)
            available = set(TARGET_LABELS)
            for _, _, series_labels in series_of(node.expr):
                available |= set(series_labels)
            for label in sorted(labels - available):
                report.error(path, f"{where}: groups by {label!r}, a label none of its metrics has")

    def check_selector(selector):
        name = selector_name(selector)
        if name is None:
            report.error(path, f"{where}: a selector without a metric name")
            return
        if name not in catalogue.series:
            report.error(path, f"{where}: {name} is not in ops/prometheus/metrics.yml")
            return
        metric, _, labels = catalogue.series[name]
        used.add(metric)
        matchers = list(selector.matchers.matchers)
        for group in selector.matchers.or_matchers or []:
            matchers.extend(group)
        for matcher in matchers:
            label, value, op = matcher.name, matcher.value, str(matcher.op)
            if label == "__name__" or label in TARGET_LABELS:
                continue
            if label not in labels:
                report.error(path, f"{where}: {name} has no label {label!r}")
                continue
            allowed = labels[label]
            if allowed is None:
                continue
            if op.endswith(("Re", "NotRe")):
                for alternative in value.split("|"):
                    try:
                        pattern = re.compile(alternative)
                    except re.error:
                        report.error(path, f"{where}: {label}=~{value!r} is not a valid regular expression")
                        break
                    if not any(pattern.fullmatch(candidate) for candidate in allowed):
                        report.error(path, f"{where}: {label}=~{alternative!r} matches none of {allowed}")
            elif value not in allowed:
                report.error(path, f"{where}: {label}={value!r} is not one of {allowed}")

    def check_call(call):
        function = call.func.name
        if function in COUNTER_FUNCTIONS or function in GAUGE_FUNCTIONS:
            for _, kind, _ in [entry for arg in call.args for entry in series_of(arg)]:
                if function in COUNTER_FUNCTIONS and kind == "gauge":
                    report.error(path, f"{where}: {function}() of a gauge (use delta or deriv)")
                if function in GAUGE_FUNCTIONS and kind != "gauge":
                    report.error(path, f"{where}: {function}() of a counter (use rate or increase)")
        if function == "histogram_quantile":
            kinds = [kind for _, kind, _ in series_of(call.args[1])] if len(call.args) == 2 else []
            if not kinds or any(kind != "bucket" for kind in kinds):
                report.error(path, f"{where}: histogram_quantile() needs a _bucket series")
            else:
                under = set()
                for aggregate in nodes_in(call.args[1], promql_parser.AggregateExpr):
                    under.update(aggregate.modifier.labels if aggregate.modifier else [])
                if under and "le" not in under:
                    report.error(path, f"{where}: histogram_quantile() over an aggregation that drops le")

    promql_parser.walk(tree, visit)
    return used, grouped


def check_alerts(path, catalogue, report):
    docs = load_yaml_documents(path, report)
    if len(docs) != 1 or not isinstance(docs[0], dict) or set(docs[0]) != {"groups"}:
        report.error(path, "must be one document with a 'groups' list only")
        return
    groups = docs[0]["groups"]
    if not isinstance(groups, list) or not groups:
        report.error(path, "'groups' must be a non-empty list")
        return
    alert_names, group_names, count = set(), set(), 0
    for group in groups:
        name = group.get("name") if isinstance(group, dict) else None
        if not name or name in group_names:
            report.error(path, f"group {name!r}: needs a unique name")
        group_names.add(name)
        unknown = set(group) - {"name", "interval", "limit", "rules", "labels", "query_offset"}
        if unknown:
            report.error(path, f"group {name}: unknown keys {sorted(unknown)}")
        if "interval" in group:
            check_duration(group["interval"], f"group {name}: interval", path, report)
        rules = group.get("rules")
        if not isinstance(rules, list) or not rules:
            report.error(path, f"group {name}: 'rules' must be a non-empty list")
            continue
        for rule in rules:
            count += 1
            if not isinstance(rule, dict) or "alert" not in rule or "record" in rule:
                report.error(path, f"group {name}: every rule is an alert (alert, expr, for, labels, annotations)")
                continue
            alert = rule["alert"]
            where = f"alert {alert}"
            if not re.fullmatch(r"Receiptq[A-Z][A-Za-z0-9]*", str(alert)) or alert in alert_names:
                report.error(path, f"{where}: names are unique and read Receiptq<CamelCase>")
            alert_names.add(alert)
            unknown = set(rule) - {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            if unknown:
                report.error(path, f"{where}: unknown keys {sorted(unknown)}")
            if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
                report.error(path, f"{where}: needs an expr")
                continue
            _, grouped = check_promql(rule["expr"], where, catalogue, report, path)
            if "for" not in rule:
                report.error(path, f"{where}: needs a 'for' (one bad scrape must not page anyone)")
            else:
                check_duration(rule["for"], f"{where}: for", path, report)
            labels = rule.get("labels") or {}
            if labels.get("severity") not in ("critical", "warning", "info"):
                report.error(path, f"{where}: labels.severity must be critical, warning or info")
            annotations = rule.get("annotations") or {}
            for key in ("summary", "description", "runbook"):
                if not isinstance(annotations.get(key), str) or not annotations[key].strip():
                    report.error(path, f"{where}: annotations.{key} is required")
            for text in annotations.values():
                for label in re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", str(text)):
                    if label not in grouped | TARGET_LABELS:
                        report.error(path, f"{where}: an annotation uses $labels.{label}, which the expr does not keep")
    report.ok(f"{path.name}: {count} alert rules in {len(groups)} groups")


def check_duration(value, where, path, report):
    try:
        promql_parser.parse_duration(str(value))
    except (ValueError, TypeError):
        report.error(path, f"{where}: {value!r} is not a Prometheus duration")


def check_dashboard(path, catalogue, report):
    try:
        dashboard = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicate_keys)
    except (OSError, ValueError) as error:
        report.error(path, f"is not valid JSON: {error}")
        return
    datasource = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    inputs = dashboard.get("__inputs") or []
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("type") == "datasource" and i.get("pluginId") == "prometheus" for i in inputs):
        report.error(path, "__inputs must declare DS_PROMETHEUS, a prometheus datasource")
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 36:
        report.error(path, "schemaVersion must be 36 or later")
    for key in ("uid", "title"):
        if not dashboard.get(key):
            report.error(path, f"needs a {key}")
    variables = {v.get("name") for v in (dashboard.get("templating") or {}).get("list", [])}

    panels = []
    for panel in dashboard.get("panels") or []:
        panels.append(panel)
        panels.extend(panel.get("panels") or [])
    ids, cells, used, exprs = set(), {}, set(), 0
    for panel in panels:
        pid, title = panel.get("id"), panel.get("title")
        where = f"panel {pid} {title!r}"
        if not isinstance(pid, int) or pid in ids:
            report.error(path, f"{where}: ids are unique integers")
        ids.add(pid)
        if not title or not panel.get("type"):
            report.error(path, f"{where}: needs a type and a title")
        grid = panel.get("gridPos") or {}
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")) or grid["x"] < 0 or grid["x"] + grid["w"] > 24:
            report.error(path, f"{where}: gridPos must be integers within the 24 columns")
        else:
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    if (x, y) in cells:
                        report.error(path, f"{where}: overlaps panel {cells[(x, y)]}")
                        break
                    cells[(x, y)] = pid
                else:
                    continue
                break
        if panel.get("type") == "row":
            continue
        if panel.get("datasource") != datasource:
            report.error(path, f"{where}: datasource must be {datasource}")
        targets = panel.get("targets") or []
        if not targets:
            report.error(path, f"{where}: has no query")
        refs = set()
        for target in targets:
            ref = target.get("refId")
            if not ref or ref in refs:
                report.error(path, f"{where}: refIds are unique")
            refs.add(ref)
            if target.get("datasource") != datasource:
                report.error(path, f"{where} {ref}: datasource must be {datasource}")
            expr = target.get("expr") or ""
            for interval in GRAFANA_INTERVALS:
                expr = expr.replace(interval, "5m")
            for variable in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expr):
                if variable not in variables:
                    report.error(path, f"{where} {ref}: ${variable} is not a dashboard variable")
            exprs += 1
            metrics, _ = check_promql(expr, f"{where} {ref}", catalogue, report, path)
            used |= metrics
    for metric in sorted(set(catalogue.metrics) - used):
        report.error(path, f"no panel shows {metric}")
    report.ok(f"{path.name}: {len(panels)} panels, {exprs} queries")


# ---- Kubernetes -------------------------------------------------------------------------------------

KEDA_REDIS_METADATA = {
    "address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv", "username", "usernameFromEnv",
    "password", "passwordFromEnv", "listName", "listLength", "activationListLength", "enableTLS", "unsafeSsl",
    "databaseIndex",
}
KEDA_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}


def check_kubernetes(directory, facts, catalogue, report):
    kustomization_path = directory / "kustomization.yaml"
    docs = load_yaml_documents(kustomization_path, report)
    kustomization = docs[0] if docs else {}
    if kustomization.get("kind") != "Kustomization" or not str(kustomization.get("apiVersion", "")).startswith("kustomize.config.k8s.io/"):
        report.error(kustomization_path, "must be a kustomize.config.k8s.io Kustomization")
    listed = kustomization.get("resources") or []
    files = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
    for name in sorted(set(listed) - set(files)):
        report.error(kustomization_path, f"lists {name}, which does not exist")
    for name in sorted(set(files) - set(listed)):
        report.error(kustomization_path, f"does not list {name}")
    images = {image.get("name") for image in kustomization.get("images") or []}

    objects = []  # (path, document)
    versions = sorted({"1.30.0", kubernetes_validate.latest_version()})
    for name in files:
        path = directory / name
        for doc in load_yaml_documents(path, report):
            if not isinstance(doc, dict) or not doc.get("kind") or not (doc.get("metadata") or {}).get("name"):
                report.error(path, "every document needs a kind and metadata.name")
                continue
            objects.append((path, doc))
            if doc.get("apiVersion", "").startswith("keda.sh/"):
                continue  # no Kubernetes schema: checked below against KEDA's redis scaler
            for version in versions:
                for problem in schema_problems(doc, version):
                    report.error(path, problem)
    by_kind = {}
    for path, doc in objects:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = (path, doc)

    configmaps = {name: doc.get("data") or {} for name, (_, doc) in by_kind.get("ConfigMap", {}).items()}
    secrets = {name: {**(doc.get("stringData") or {}), **(doc.get("data") or {})} for name, (_, doc) in by_kind.get("Secret", {}).items()}
    known = facts.known_variables()
    for kind, entries in (("ConfigMap", configmaps), ("Secret", secrets)):
        for name, data in entries.items():
            path = by_kind[kind][name][0]
            for key in sorted(set(data) - known):
                report.error(path, f"{kind} {name}: {key} is no variable receiptq reads")
            if kind == "ConfigMap":
                for key in sorted(set(data) & SECRET_VARIABLES):
                    report.error(path, f"{kind} {name}: {key} is a secret: it belongs in the Secret")
            if kind == "Secret":
                for key, value in data.items():
                    if value != "REPLACE_ME":
                        report.error(path, f"Secret {name}: {key} must be the placeholder REPLACE_ME (never commit a secret)")
    settings = {k: str(v) for data in configmaps.values() for k, v in data.items()}
    prefix = settings.get("REDIS_KEY_PREFIX") or facts.defaults.get("REDIS_KEY_PREFIX", "{rq}")

    workloads = {}  # name -> (path, doc, pod spec, role)
    for kind in ("Deployment", "Job"):
        for name, (path, doc) in by_kind.get(kind, {}).items():
            template = doc["spec"]["template"]
            pod = template["spec"]
            containers = pod.get("containers") or []
            role = None
            check_pod(path, f"{kind} {name}", pod, images, report)
            for container in containers:
                args = container.get("args") or []
                if not args or args[0] not in ROLES:
                    report.error(path, f"{kind} {name}: args must start with a role ({', '.join(sorted(ROLES))})")
                else:
                    role = args[0]
                for source in container.get("envFrom") or []:
                    if "configMapRef" in source and source["configMapRef"]["name"] not in configmaps:
                        report.error(path, f"{kind} {name}: envFrom names ConfigMap {source['configMapRef']['name']}, not defined here")
                    if "secretRef" in source and source["secretRef"]["name"] not in secrets:
                        report.error(path, f"{kind} {name}: envFrom names Secret {source['secretRef']['name']}, not defined here")
                for variable in container.get("env") or []:
                    if variable["name"] not in known:
                        report.error(path, f"{kind} {name}: {variable['name']} is no variable receiptq reads")
            if kind == "Deployment":
                selector = doc["spec"]["selector"].get("matchLabels") or {}
                labels = template.get("metadata", {}).get("labels") or {}
                if not selector or any(labels.get(k) != v for k, v in selector.items()):
                    report.error(path, f"Deployment {name}: the selector must match the pod template's labels")
            workloads[name] = (path, doc, pod, role, kind)

    roles = {role: (name, path, doc, pod) for name, (path, doc, pod, role, kind) in workloads.items() if role}
    for role in sorted(ROLES - set(roles)):
        report.error(directory, f"no workload runs {role}")
    if "migrate" in roles and workloads[roles["migrate"][0]][4] != "Job":
        report.error(roles["migrate"][1], "migrate runs as a Job")
    if "serve" in roles:
        name, path, _, pod = roles["serve"]
        container = pod["containers"][0]
        for probe in ("livenessProbe", "readinessProbe"):
            get = (container.get(probe) or {}).get("httpGet") or {}
            if get.get("path") not in facts.health_routes:
                report.error(path, f"{name}: {probe} must GET one of the API's health routes {sorted(facts.health_routes)}")
        if (container.get("readinessProbe") or {}).get("httpGet", {}).get("path") != "/health/ready":
            report.error(path, f"{name}: readinessProbe must be /health/ready (it checks Redis)")
        trust = settings.get("RECEIPTQ_TRUST_ROOTS_DIR")
        if not trust or not any(m.get("mountPath") == trust for m in container.get("volumeMounts") or []):
            report.error(path, f"{name}: serve needs RECEIPTQ_TRUST_ROOTS_DIR set and mounted")
        if settings.get("HTTP_HOST") not in ("0.0.0.0", "::"):
            report.error(path, "HTTP_HOST must be 0.0.0.0 (or ::) in a pod, or the probes and the Service cannot reach serve")
    if "work" in roles:
        name, path, doc, pod = roles["work"]
        drain = facts.worker_drain(settings)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace < drain + DRAIN_MARGIN_SECONDS:
            report.error(path, f"{name}: terminationGracePeriodSeconds {grace} must exceed the worker drain ({drain} s) by {DRAIN_MARGIN_SECONDS} s")
        ports = [p.get("containerPort") for c in pod["containers"] for p in c.get("ports") or [] if p.get("name") == "metrics"]
        metrics_ports = [v.get("value") for c in pod["containers"] for v in c.get("env") or [] if v["name"] == "METRICS_PORT"]
        if not ports or metrics_ports != [str(ports[0])]:
            report.error(path, f"{name}: needs a 'metrics' port equal to its METRICS_PORT")
    if "schedule" in roles and roles["schedule"][2]["spec"].get("replicas", 1) < 1:
        report.error(roles["schedule"][1], "schedule needs at least one replica")

    for name, (path, doc) in by_kind.get("Service", {}).items():
        selector = doc["spec"].get("selector") or {}
        targets = [w for w in workloads.values() if w[4] == "Deployment" and all((w[1]["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
        if not selector or not targets:
            report.error(path, f"Service {name}: its selector matches no Deployment")
            continue
        port_names = {p.get("name") for c in targets[0][2]["containers"] for p in c.get("ports") or []}
        for port in doc["spec"].get("ports") or []:
            if isinstance(port.get("targetPort"), str) and port["targetPort"] not in port_names:
                report.error(path, f"Service {name}: targetPort {port['targetPort']} is no container port name")
    for name, (path, doc) in by_kind.get("PodDisruptionBudget", {}).items():
        selector = doc["spec"].get("selector", {}).get("matchLabels") or {}
        if not any(w[4] == "Deployment" and all((w[1]["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()) for w in workloads.values()):
            report.error(path, f"PodDisruptionBudget {name}: its selector matches no Deployment")

    queues = catalogue.series.get("receiptq_queue_depth", (None, None, {}))[2].get("queue") or ["validate"]
    for name, (path, doc) in by_kind.get("ScaledObject", {}).items():
        check_scaled_object(path, name, doc, workloads, configmaps, secrets, prefix, queues, report)
    if "ScaledObject" not in by_kind:
        report.error(directory, "no KEDA ScaledObject for the workers")
    report.ok(f"ops/k8s: {len(objects)} objects (Kubernetes {', '.join(versions)} schemas, strict), KEDA, references, probes")


_SCHEMA_PROBLEMS = {}


def schema_problems(doc, version):
    """kubernetes-validate's verdict on doc, remembered (the self-test checks the same objects often)."""
    key = (version, json.dumps(doc, sort_keys=True, default=str))
    if key not in _SCHEMA_PROBLEMS:
        problems = []
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except SchemaNotFoundError:
            problems.append(f"{doc['kind']}: no schema in Kubernetes {version}")
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(p) for p in error.path)
            problems.append(f"{doc['kind']}/{doc['metadata']['name']} (Kubernetes {version}): {where}: {error.message}")
        _SCHEMA_PROBLEMS[key] = problems
    return _SCHEMA_PROBLEMS[key]


def check_pod(path, where, pod, images, report):
    security = pod.get("securityContext") or {}
    if security.get("runAsNonRoot") is not True or not isinstance(security.get("runAsUser"), int) or security["runAsUser"] == 0:
        report.error(path, f"{where}: the pod runs as a numeric non-root user (runAsNonRoot, runAsUser)")
    if (security.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        report.error(path, f"{where}: seccompProfile RuntimeDefault")
    if pod.get("automountServiceAccountToken") is not False:
        report.error(path, f"{where}: receiptq never calls the Kubernetes API: automountServiceAccountToken: false")
    mounts = set()
    for container in pod.get("containers") or []:
        name = container.get("name")
        if container.get("image") not in images:
            report.error(path, f"{where} {name}: image {container.get('image')!r} is not one kustomization.yaml sets")
        context = container.get("securityContext") or {}
        if context.get("readOnlyRootFilesystem") is not True or context.get("allowPrivilegeEscalation") is not False:
            report.error(path, f"{where} {name}: readOnlyRootFilesystem: true and allowPrivilegeEscalation: false")
        if (context.get("capabilities") or {}).get("drop") != ["ALL"]:
            report.error(path, f"{where} {name}: capabilities.drop: [ALL]")
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if not all((resources.get(part) or {}).get(r) for r in ("cpu", "memory")):
                report.error(path, f"{where} {name}: resources.{part} needs cpu and memory")
        mounts |= {m.get("name") for m in container.get("volumeMounts") or []}
    volumes = {v.get("name") for v in pod.get("volumes") or []}
    for missing in sorted(mounts - volumes):
        report.error(path, f"{where}: mounts volume {missing}, which the pod does not define")


def check_scaled_object(path, name, doc, workloads, configmaps, secrets, prefix, queues, report):
    where = f"ScaledObject {name}"
    if doc.get("apiVersion") != "keda.sh/v1alpha1":
        report.error(path, f"{where}: apiVersion keda.sh/v1alpha1")
    spec = doc.get("spec") or {}
    for key in sorted(set(spec) - KEDA_SPEC):
        report.error(path, f"{where}: unknown spec key {key}")
    target = spec.get("scaleTargetRef") or {}
    workload = workloads.get(target.get("name"))
    if not workload or workload[4] != "Deployment" or workload[3] != "work":
        report.error(path, f"{where}: scaleTargetRef must name the work Deployment")
        return
    containers = {c["name"]: c for c in workload[2]["containers"]}
    container = containers.get(target.get("envSourceContainerName") or next(iter(containers)))
    if container is None:
        report.error(path, f"{where}: envSourceContainerName names no container of {target['name']}")
        return
    environment = {v["name"] for v in container.get("env") or []}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            environment |= set(configmaps.get(source["configMapRef"]["name"], {}))
        if "secretRef" in source:
            environment |= set(secrets.get(source["secretRef"]["name"], {}))
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
        report.error(path, f"{where}: 1 <= minReplicaCount <= maxReplicaCount (never zero workers)")
    lists = set()
    for trigger in spec.get("triggers") or []:
        metadata = trigger.get("metadata") or {}
        if trigger.get("type") != "redis":
            report.error(path, f"{where}: triggers use KEDA's redis (lists) scaler")
            continue
        for key in sorted(set(metadata) - KEDA_REDIS_METADATA):
            report.error(path, f"{where}: the redis scaler has no {key}")
        for key, value in metadata.items():
            if not isinstance(value, str):
                report.error(path, f"{where}: metadata.{key} must be a string")
            elif key.endswith("FromEnv") and value not in environment:
                report.error(path, f"{where}: {key} names {value}, which the work container does not have")
        if not ({"address", "addressFromEnv"} & set(metadata) or {"host", "hostFromEnv"} & set(metadata) and {"port", "portFromEnv"} & set(metadata)):
            report.error(path, f"{where}: needs Redis's address (address/addressFromEnv, or host and port)")
        if not re.fullmatch(r"[1-9][0-9]*", str(metadata.get("listLength", ""))):
            report.error(path, f"{where}: listLength must be a positive integer (as a string)")
        list_name = metadata.get("listName")
        expected = {f"{prefix}:queue:{queue}" for queue in queues}
        if list_name not in expected:
            report.error(path, f"{where}: listName {list_name!r} is none of the queues {sorted(expected)}")
        lists.add(list_name)
    if f"{prefix}:queue:validate" not in lists:
        report.error(path, f"{where}: must scale on {prefix}:queue:validate")


# ---- systemd ----------------------------------------------------------------------------------------


def parse_unit(path):
    sections, current = {}, None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def systemd_seconds(value):
    units = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "ms": 0.001}
    total = 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    if not parts or value.strip() in ("infinity",):
        return float("inf") if value.strip() == "infinity" else None
    for number, unit in parts:
        if unit not in units:
            return None
        total += float(number) * units[unit]
    return total


def parse_env_file(path):
    """KEY=VALUE lines, and #KEY=VALUE lines (a documented default)."""
    active, documented = {}, set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"(#?)([A-Z][A-Z0-9_]*)=(.*)", raw.strip())
        if match:
            documented.add(match.group(2))
            if not match.group(1):
                active[match.group(2)] = match.group(3)
    return active, documented


def check_systemd(directory, facts, report):
    env_path = directory / "receiptq.env.example"
    active, documented = parse_env_file(env_path)
    known = facts.known_variables()
    for name in sorted(documented - known):
        report.error(env_path, f"{name} is no variable receiptq reads")
    for name in sorted(facts.variables - documented):
        report.error(env_path, f"{name} (read by AppConfiguration) is missing: list it, commented out if the default suits")
    if "METRICS_PORT" in active:
        report.error(env_path, "METRICS_PORT must not be set here: EnvironmentFile= overrides each unit's own")
    for name in sorted(SECRET_VARIABLES & set(active)):
        if active[name]:
            report.error(env_path, f"{name} must stay empty in the example (never commit a secret)")

    units = {p.name: parse_unit(p) for p in sorted(directory.glob("*.service"))}
    expected = {"receiptq-serve.service", "receiptq-work@.service", "receiptq-schedule.service", "receiptq-migrate.service"}
    for name in sorted(expected - set(units)):
        report.error(directory, f"{name} is missing")
    binaries, users, metrics_ports = set(), set(), {}
    for name, unit in units.items():
        path = directory / name
        service = unit.get("Service", {})

        def one(key, service=service):
            """The setting's value: the last assignment wins in systemd."""
            return (service.get(key) or [None])[-1]

        role = re.fullmatch(r"receiptq-([a-z]+)@?\.service", name)
        role = role.group(1) if role else None
        exec_start = (one("ExecStart") or "").split()
        if len(exec_start) < 2 or exec_start[1] != role:
            report.error(path, f"ExecStart must run the {role} role")
        else:
            binaries.add(exec_start[0])
        users.add(one("User"))
        if one("User") in (None, "root", "0"):
            report.error(path, "User= must name the dedicated user")
        if one("EnvironmentFile") != "/etc/receiptq/receiptq.env":
            report.error(path, "EnvironmentFile=/etc/receiptq/receiptq.env")
        if one("KillSignal") != "SIGTERM":
            report.error(path, "KillSignal=SIGTERM (the roles shut down gracefully on it)")
        for key, wanted in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"), ("ProtectHome", "yes"), ("CapabilityBoundingSet", "")):
            if one(key) != wanted:
                report.error(path, f"{key}={wanted}")
        if role == "migrate":
            if one("Type") != "oneshot" or one("RemainAfterExit") != "yes":
                report.error(path, "migrate is Type=oneshot with RemainAfterExit=yes, so the others order after it")
            continue
        if one("Restart") not in ("always", "on-failure") or one("RestartSec") is None:
            report.error(path, "Restart=always (or on-failure) with a RestartSec")
        nofile = one("LimitNOFILE")
        if not nofile or not nofile.isdigit() or int(nofile) < MIN_NOFILE:
            report.error(path, f"LimitNOFILE must be at least {MIN_NOFILE} (WORKER_CONCURRENCY up to 4096 sockets)")
        unit_section = unit.get("Unit", {})
        for key in ("After", "Wants"):
            values = " ".join(unit_section.get(key, [])).split()
            if "receiptq-migrate.service" not in values:
                report.error(path, f"{key}= must include receiptq-migrate.service")
        stop = systemd_seconds(one("TimeoutStopSec") or "")
        if stop is None:
            report.error(path, "TimeoutStopSec must be set")
        elif role == "work":
            drain = facts.worker_drain(active)
            if stop < drain + DRAIN_MARGIN_SECONDS:
                report.error(path, f"TimeoutStopSec ({stop:g} s) must exceed the worker drain ({drain} s) by {DRAIN_MARGIN_SECONDS} s")
        ports = [value.partition("=")[2] for value in service.get("Environment", []) if value.startswith("METRICS_PORT=")]
        if len(ports) != 1:
            report.error(path, "sets METRICS_PORT once (Environment=METRICS_PORT=…)")
        else:
            metrics_ports[name] = ports[0]
    if len(binaries) > 1 or len(users) > 1:
        report.error(directory, f"every unit runs the same binary as the same user (found {sorted(binaries)}, {sorted(users)})")
    if metrics_ports.get("receiptq-work@.service") != "95%i":
        report.error(directory / "receiptq-work@.service", "Environment=METRICS_PORT=95%i (instances 01…99 → 9501…9599)")
    fixed = [port for name, port in metrics_ports.items() if "%" not in port]
    if len(set(fixed)) != len(fixed) or any(not p.isdigit() or 9500 <= int(p) <= 9599 for p in fixed):
        report.error(directory, f"serve's and schedule's METRICS_PORT must differ, outside the workers' 9500…9599 ({fixed})")
    report.ok(f"ops/systemd: {len(units)} units, {len(documented)} variables in receiptq.env.example")


# ---- Docker and Redis -------------------------------------------------------------------------------


def check_docker(directory, facts, report):
    path = directory / "Dockerfile"
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    stages = [line for line in lines if line.upper().startswith("FROM ")]
    if len(stages) < 2:
        report.error(path, "must be multi-stage (build, runtime)")
    elif not re.search(r"debian:\S*bookworm\S*-slim|debian:\$\{DEBIAN_VERSION\}-slim", stages[-1]):
        report.error(path, "the runtime stage is debian:bookworm-slim")
    runtime = lines[lines.index(stages[-1]):] if stages else lines
    if 'ENTRYPOINT ["receiptq"]' not in runtime:
        report.error(path, 'ENTRYPOINT ["receiptq"]')
    users = [line.split()[1] for line in runtime if line.upper().startswith("USER ")]
    if not users or not re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]):
        report.error(path, "the runtime stage ends as a numeric non-root USER (Kubernetes' runAsNonRoot checks it)")
    instructions = "\n".join(lines)
    for bundle in sorted(facts.resource_bundles):
        if f"test -d /staging/bin/{bundle}" not in instructions:
            report.error(path, f"{bundle} (a SwiftPM resource bundle) must be copied beside the binary and checked")
    if not facts.resource_bundles:
        report.error(Path("Package.swift"), "no target with resources found")
    probed = re.findall(r"GET (/\S*) HTTP", (directory / "healthcheck").read_text(encoding="utf-8"))
    if not probed or any(route not in facts.health_routes for route in probed):
        report.error(directory / "healthcheck", f"must GET one of the API's health routes {sorted(facts.health_routes)}, not {probed}")
    ignore = directory / "Dockerfile.dockerignore"
    kept = {line.strip()[1:].rstrip("/") for line in ignore.read_text(encoding="utf-8").splitlines() if line.strip().startswith("!")}
    for line in lines:
        if line.upper().startswith("COPY ") and "--from=" not in line:
            for source in [token for token in line.split()[1:-1] if not token.startswith("--")]:
                source = source.split("[")[0]
                if not any(source == k or source.startswith(k + "/") or k.startswith(source) for k in kept):
                    report.error(ignore, f"excludes {source}, which the Dockerfile copies")
    report.ok(f"ops/docker: runtime image, {len(facts.resource_bundles)} resource bundles, ignore file")


def check_redis(path, report):
    settings = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            settings[key.lower()] = value.strip().strip('"')
    for key, allowed in (("appendonly", {"yes"}), ("appendfsync", {"everysec", "always"}), ("maxmemory-policy", {"noeviction"})):
        if settings.get(key) not in allowed:
            report.error(path, f"{key} must be {' or '.join(sorted(allowed))}: a queue must neither lose nor evict jobs")
    report.ok("ops/redis/redis.conf: AOF on, noeviction")


def run(root, quiet=False):
    """Every check on the repository at root; returns the Report (its errors, in order)."""
    report = Report(root, quiet)
    ops = root / "ops"
    facts = AppFacts(root, report)
    catalogue = Catalogue(ops / "prometheus/metrics.yml", report)
    report.ok(f"metrics.yml: {len(catalogue.metrics)} metrics")
    check_alerts(ops / "prometheus/alerts.yml", catalogue, report)
    check_dashboard(ops / "grafana/receiptq-dashboard.json", catalogue, report)
    check_kubernetes(ops / "k8s", facts, catalogue, report)
    check_redis_kubernetes(ops / "k8s/redis-sentinel", report)
    check_systemd(ops / "systemd", facts, report)
    check_docker(ops / "docker", facts, report)
    check_redis(ops / "redis/redis.conf", report)
    return report


def check_redis_kubernetes(directory, report):
    """ops/k8s/redis-sentinel: its own kustomization (not part of ops/k8s), strict schemas, and the
    references between its objects (selectors, the Secret's keys, the ConfigMap's files)."""
    kustomization_path = directory / "kustomization.yaml"
    docs = load_yaml_documents(kustomization_path, report)
    listed = (docs[0] if docs else {}).get("resources") or []
    files = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
    for name in sorted(set(listed) ^ set(files)):
        report.error(kustomization_path, f"{name}: listed and present must agree")
    versions = sorted({"1.30.0", kubernetes_validate.latest_version()})
    objects = {}
    for name in files:
        path = directory / name
        for doc in load_yaml_documents(path, report):
            objects[(doc["kind"], doc["metadata"]["name"])] = (path, doc)
            for version in versions:
                for problem in schema_problems(doc, version):
                    report.error(path, problem)
    sets = [(path, doc) for (kind, _), (path, doc) in objects.items() if kind == "StatefulSet"]
    if not sets:
        report.error(directory, "no StatefulSet")
        return
    for path, doc in sets:
        labels = doc["spec"]["template"]["metadata"].get("labels") or {}
        selector = doc["spec"]["selector"].get("matchLabels") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            report.error(path, "the StatefulSet's selector must match its pod labels")
        if ("Service", doc["spec"].get("serviceName")) not in objects:
            report.error(path, f"serviceName {doc['spec'].get('serviceName')} is no Service here")
        pod = doc["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            context = container.get("securityContext") or {}
            if context.get("allowPrivilegeEscalation") is not False or not context.get("readOnlyRootFilesystem"):
                report.error(path, f"container {container['name']}: no privilege escalation, a read-only root file system")
            for variable in container.get("env") or []:
                ref = (variable.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    secret = objects.get(("Secret", ref["name"]))
                    if not secret or ref["key"] not in (secret[1].get("stringData") or {}):
                        report.error(path, f"container {container['name']}: Secret {ref['name']} has no key {ref['key']}")
        for volume in pod.get("volumes") or []:
            name = (volume.get("configMap") or {}).get("name")
            if name and ("ConfigMap", name) not in objects:
                report.error(path, f"volume {volume['name']}: ConfigMap {name} is not here")
        for kind in ("Service", "PodDisruptionBudget"):
            for (k, name), (other, obj) in objects.items():
                if k != kind:
                    continue
                chosen = obj["spec"].get("selector") or {}
                chosen = chosen.get("matchLabels", chosen)
                if not chosen or any(labels.get(key) != value for key, value in chosen.items()):
                    report.error(other, f"{kind} {name}: its selector matches no pod of the StatefulSet")
    for (kind, name), (path, doc) in objects.items():
        if kind == "Secret":
            for key, value in (doc.get("stringData") or {}).items():
                if value != "REPLACE_ME":
                    report.error(path, f"Secret {name}: {key} must be the placeholder REPLACE_ME (never commit a secret)")
    report.ok(f"ops/k8s/redis-sentinel: {len(objects)} objects (Kubernetes {', '.join(versions)} schemas, strict), references")


def check_rendered(root, rendered):
    """The output of `kubectl kustomize ops/k8s`: what a cluster would get, after kustomize's
    namespace, label and image transformations."""
    report = Report(root)
    kustomization = load_yaml_documents(root / "ops/k8s/kustomization.yaml", report)[0]
    namespace = kustomization.get("namespace")
    versions = sorted({"1.30.0", kubernetes_validate.latest_version()})
    docs = load_yaml_documents(rendered, report)
    for doc in docs:
        where = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        if (doc.get("metadata") or {}).get("namespace") != namespace:
            report.error(rendered, f"{where}: not in namespace {namespace}")
        if not doc.get("apiVersion", "").startswith("keda.sh/"):
            for version in versions:
                for problem in schema_problems(doc, version):
                    report.error(rendered, problem)
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            image = container.get("image", "")
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                report.error(rendered, f"{where}: image {image!r} must carry a fixed tag (kustomization.yaml's images)")
    report.ok(f"kubectl kustomize ops/k8s: {len(docs)} objects in namespace {namespace}, tagged images")
    return report


def main():
    arguments = sys.argv[1:]
    if len(arguments) == 3 and arguments[1] == "--rendered":
        report = check_rendered(Path(arguments[0]).resolve(), Path(arguments[2]))
    else:
        root = Path(arguments[0] if arguments else Path(__file__).resolve().parents[2]).resolve()
        report = run(root)
    for error in report.errors:
        print(f"error: {error}")
    if report.errors:
        print(f"check.py: {len(report.errors)} problem(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
