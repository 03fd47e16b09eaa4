"""Checks receiptq's OpenAPI document, and real answers against it.

    check.py SPEC                  validate SPEC (OpenAPI 3.1) with openapi-spec-validator
    check.py SPEC EXCHANGES        also validate each recorded response in EXCHANGES with openapi-core

Prints one JSON object on stdout: {"operations": ["GET /path", ...], "checked": N, "failures": [...]}.
Exits 2 when SPEC itself is invalid, 1 when a recorded response does not match it, 0 otherwise.

EXCHANGES is a JSON array written by Tests/SystemTests/OpenAPITests.swift, one object per
request/response pair: {"method", "path", "query", "status", "headers": {lowercase name: value}, "body"}.

Run it with the interpreter of .local/venv (scripts/setup-python), where the pinned validators live.
"""

import json
import sys
from urllib.parse import parse_qs
from xml.etree import ElementTree

import yaml
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_spec_validator import validate

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def operations(spec):
    """Every documented "METHOD /path", the form Hummingbird's router describes its routes in."""
    found = []
    for path, item in spec.get("paths", {}).items():
        for method in HTTP_METHODS:
            if method in item:
                found.append(f"{method.upper()} {path}")
    return sorted(found)


def xml_fields(data):
    """`<root><final>1</final><message>…</message></root>` as {"final": "1", "message": "…"}.

    openapi-core hands XML bodies on as elements, which no schema matches; the documented XML
    answers are flat, so their children's text is the object the schema describes.
    """
    root = ElementTree.fromstring(data)
    return {child.tag: child.text or "" for child in root}


def openapi_for_responses(spec):
    """openapi-core set up to judge what the server sends.

    The published document leaves objects open so clients tolerate fields added later; "forbid"
    closes them here, so a field the server sends but the document does not describe is caught.
    """
    config = Config(
        additional_properties_default_policy="forbid",
        extra_media_type_deserializers={
            "application/xml": xml_fields,
            # The document itself: its schema is a string, and openapi-core would pass on bytes.
            "application/yaml": lambda data: data.decode("utf-8"),
        },
    )
    return OpenAPI.from_dict(spec, config=config)


def check_exchange(openapi, documented, exchange):
    """The problems of one recorded response, as human sentences (none when it matches)."""
    method, path, status = exchange["method"].upper(), exchange["path"], exchange["status"]
    where = f"{method} {path} → {status}"
    headers = exchange.get("headers", {})
    content_type = headers.get("content-type", "")
    # The documented operation, matched the way the router matches ({id} stands for one segment).
    template = next((op for op in documented if op.split(" ", 1)[0] == method and matches(op.split(" ", 1)[1], path)), None)
    if template is None:
        return [f"{where}: no documented operation for {method} {path}"]
    request = MockRequest(
        "http://127.0.0.1:8080",
        method.lower(),
        path,
        args={key: values[0] for key, values in parse_qs(exchange.get("query", "")).items()},
        headers={},
    )
    response = MockResponse(
        exchange.get("body", "").encode(), status_code=status, headers=headers, content_type=content_type
    )
    problems = []
    for error in openapi.iter_response_errors(request, response):
        # The schema errors say what is wrong and where; the wrapper only repeats the whole value.
        schema_errors = getattr(error.__cause__, "schema_errors", None) or getattr(error, "schema_errors", None)
        if schema_errors:
            for sub in schema_errors:
                problems.append(f"{where}: {type(error).__name__}: {sub.message} at /{'/'.join(map(str, sub.absolute_path))}")
        else:
            problems.append(f"{where}: {type(error).__name__}: {error.__cause__ or error}")
    return problems


def matches(template, path):
    template_parts, path_parts = template.strip("/").split("/"), path.strip("/").split("/")
    if len(template_parts) != len(path_parts):
        return False
    return all(t == p or (t.startswith("{") and t.endswith("}") and p) for t, p in zip(template_parts, path_parts))


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 64
    with open(argv[1], encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    try:
        if not str(spec.get("openapi", "")).startswith("3.1."):
            raise ValueError(f"openapi is {spec.get('openapi')!r}, not 3.1.x")
        validate(spec)
    except Exception as error:  # the validator's own error types vary by version
        print(f"openapi: {argv[1]} is not a valid OpenAPI 3.1 document: {error}", file=sys.stderr)
        return 2
    documented = operations(spec)
    failures, checked = [], 0
    if len(argv) == 3:
        with open(argv[2], encoding="utf-8") as handle:
            exchanges = json.load(handle)
        openapi = openapi_for_responses(spec)
        for exchange in exchanges:
            checked += 1
            failures.extend(check_exchange(openapi, documented, exchange))
    print(json.dumps({"operations": documented, "checked": checked, "failures": failures}, ensure_ascii=False))
    print(f"openapi: {argv[1]} is valid OpenAPI {spec['openapi']}; {checked} response(s) checked, {len(failures)} failure(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
