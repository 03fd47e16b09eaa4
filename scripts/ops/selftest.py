"""Self-test of scripts/ops/check.py: each case breaks one ops/ file in a scratch copy of the
repository and expects check.py to report it (with the given words), so a check that silently
stopped checking is noticed. scripts/validate-ops runs it after check.py.

    selftest.py [ROOT]

Prints one line per case that was not caught; exits 1 if there is one.
"""

import shutil
import sys
import tempfile
from pathlib import Path

import check

# (file, text, replacement, words the report must contain)
CASES = [
    ("ops/prometheus/alerts.yml", "receiptq_circuit_state) == 2", "receiptq_circuit_status) == 2", "is not in ops/prometheus/metrics.yml"),
    ("ops/prometheus/alerts.yml", 'outcome="dead"', 'outcome="died"', "is not one of"),
    ("ops/prometheus/alerts.yml", 'status_class=~"5xx|transport"', 'status_class=~"5xx|timeout"', "matches none of"),
    ("ops/prometheus/alerts.yml", "max(delta(receiptq_dead_jobs[15m]))", "max(rate(receiptq_dead_jobs[15m]))", "rate() of a gauge"),
    ("ops/prometheus/alerts.yml", "sum by (le, kind) (rate(receiptq_job_latency", "sum by (kind) (rate(receiptq_job_latency", "drops le"),
    ("ops/prometheus/alerts.yml", 'max by (queue) (receiptq_queue_depth{queue!="import"}) > 1000', 'max by (queues) (receiptq_queue_depth{queue!="import"}) > 1000', "groups by 'queues'"),
    ("ops/prometheus/alerts.yml", "(rate(receiptq_apple_calls_total[5m]))\n", "(rate(receiptq_apple_calls_total[5m))\n", "does not parse"),
    ("ops/prometheus/alerts.yml", "    for: 5m\n        labels:\n          severity: critical", "    labels:\n          severity: critical", "needs a 'for'"),
    ("ops/prometheus/alerts.yml", "runbook: >-\n            Check /health/ready", "runbok: >-\n            Check /health/ready", "annotations.runbook"),
    ("ops/prometheus/alerts.yml", "The {{ $labels.queue }} queue", "The {{ $labels.kind }} queue", "$labels.kind"),
    ("ops/grafana/receiptq-dashboard.json", '"max(receiptq_live_workers)"', '"max(receiptq_live_worker)"', "receiptq_live_worker is not"),
    ("ops/grafana/receiptq-dashboard.json", '"uid": "${DS_PROMETHEUS}"', '"uid": "prometheus"', "datasource must be"),
    ("ops/grafana/receiptq-dashboard.json", '"x": 20,', '"x": 16,', "overlaps"),
    ("ops/grafana/receiptq-dashboard.json", '"schemaVersion": 39', '"schemaVersion": 39,', "not valid JSON"),
    ("ops/grafana/receiptq-dashboard.json", "[$__rate_interval]", "[$interval]", "not a dashboard variable"),
    ("ops/k8s/serve-deployment.yaml", "path: /health/ready", "path: /healthz", "health routes"),
    ("ops/k8s/work-deployment.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 30", "worker drain"),
    ("ops/k8s/work-deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"),
    ("ops/k8s/work-deployment.yaml", "              memory: 1Gi\n", "", "resources.limits"),
    ("ops/k8s/schedule-deployment.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: false\n      bogus: 1", "Additional properties"),
    ("ops/k8s/configmap.yaml", 'HTTP_PORT: "8080"', "HTTP_PORT: 8080", "is not of type"),
    ("ops/k8s/configmap.yaml", "LOG_LEVEL: info", "LOG_LEVL: info", "LOG_LEVL is no variable"),
    ("ops/k8s/secret.yaml", "POSTGRES_PASSWORD: REPLACE_ME", "POSTGRES_PASSWORD: hunter2", "never commit a secret"),
    ("ops/k8s/work-scaledobject.yaml", 'listName: "{rq}:queue:validate"', 'listName: "rq:queue:validate"', "none of the queues"),
    ("ops/k8s/work-scaledobject.yaml", "hostFromEnv: REDIS_HOSTNAME", "hostFromEnv: REDIS_HOST", "does not have"),
    ("ops/k8s/work-scaledobject.yaml", 'listLength: "500"', "listLength: 500", "must be a string"),
    ("ops/k8s/work-scaledobject.yaml", "minReplicaCount: 2", "minReplicaCount: 0", "never zero workers"),
    ("ops/k8s/kustomization.yaml", "  - pdb.yaml\n", "", "does not list pdb.yaml"),
    ("ops/k8s/serve-service.yaml", "targetPort: http", "targetPort: web", "targetPort web"),
    ("ops/k8s/pdb.yaml", "component: schedule\n", "component: scheduler\n", "matches no Deployment"),
    ("ops/systemd/receiptq-work@.service", "TimeoutStopSec=60s", "TimeoutStopSec=20s", "worker drain"),
    ("ops/systemd/receiptq-work@.service", "Environment=METRICS_PORT=95%i", "Environment=METRICS_PORT=9500", "95%i"),
    ("ops/systemd/receiptq-serve.service", "KillSignal=SIGTERM", "KillSignal=SIGKILL", "KillSignal=SIGTERM"),
    ("ops/systemd/receiptq-serve.service", "LimitNOFILE=65536", "LimitNOFILE=1024", "LimitNOFILE"),
    ("ops/systemd/receiptq-schedule.service", "ProtectSystem=strict", "ProtectSystem=full", "ProtectSystem=strict"),
    ("ops/systemd/receiptq-schedule.service", "postgresql.service receiptq-migrate.service", "postgresql.service", "After="),
    ("ops/systemd/receiptq-migrate.service", "RemainAfterExit=yes", "RemainAfterExit=no", "RemainAfterExit"),
    ("ops/systemd/receiptq.env.example", "#REPOLL_JITTER=0.25\n", "", "REPOLL_JITTER"),
    ("ops/systemd/receiptq.env.example", "POSTGRES_PASSWORD=\n", "POSTGRES_PASSWORD=hunter2\n", "never commit a secret"),
    ("ops/systemd/receiptq.env.example", "LOG_LEVEL=info\n", "LOG_LEVEL=info\nMETRICS_PORT=9500\n", "METRICS_PORT must not"),
    ("ops/docker/Dockerfile", "    && test -d /staging/bin/receiptq_Dashboard.resources", "", "receiptq_Dashboard.resources"),
    ("ops/docker/Dockerfile", "USER 10001:10001", "USER receiptq", "numeric non-root USER"),
    ("ops/docker/Dockerfile.dockerignore", "!Tests/\n", "", "excludes Tests"),
    ("ops/docker/healthcheck", "GET /health/ready HTTP", "GET /health HTTP", "health routes"),
    ("ops/redis/redis.conf", "maxmemory-policy noeviction", "maxmemory-policy allkeys-lru", "noeviction"),
    ("ops/prometheus/metrics.yml", "  receiptq_repolls_enqueued_total:\n    type: counter", "  receiptq_repolls_enqueued_total:\n    type: gauge", "only counters end in _total"),
]

# What check.py reads besides ops/ (and every AppConfiguration*.swift, as check.py globs them).
INPUTS = [
    "Package.swift",
    "Sources/IngestAPI/IngestAPI.swift",
]


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]).resolve()
    missed = []
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch)
        shutil.copytree(root / "ops", copy / "ops")
        configuration = sorted(path.relative_to(root).as_posix() for path in (root / "Sources/ReceiptQueueApp").glob("AppConfiguration*.swift"))
        for name in INPUTS + configuration:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / name, copy / name)
        baseline = check.run(copy, quiet=True).errors
        if baseline:
            print("the unbroken files already fail check.py:", *baseline, sep="\n  ")
            return 1
        for path, old, new, words in CASES:
            target = copy / path
            original = target.read_text(encoding="utf-8")
            if old not in original:
                missed.append(f"{path}: the case's text {old!r} is gone: update the case")
                continue
            target.write_text(original.replace(old, new, 1), encoding="utf-8")
            try:
                errors = check.run(copy, quiet=True).errors
            finally:
                target.write_text(original, encoding="utf-8")
            if not any(words in error for error in errors):
                missed.append(f"{path}: {old!r} → {new!r} was not reported as {words!r} (got {errors or 'nothing'})")
    for line in missed:
        print(f"not caught: {line}")
    print(f"selftest: {len(CASES) - len(missed)} of {len(CASES)} broken files caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
