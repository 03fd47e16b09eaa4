"""The peer of scripts/bench's `ingest` row: the receipt intake endpoint as a Python team would
write it with aiohttp, uvloop and redis-py (hiredis parser). It does less than receiptq's: it checks
the token, the content type and the JSON fields, checks the receipt is base64, and LPUSHes a job
with a new id; no receipt decode, no signature check, no idempotency key, no pending resource.

One process per core shares the port (SO_REUSEPORT), as gunicorn's workers would:

  PEER_PORT=8080 PEER_TOKENS=tokens.txt PEER_REDIS_URL=redis://127.0.0.1:16379/0 \
  PEER_QUEUE='{rqpeer}:queue' python ingest_endpoint.py
"""

import binascii
import json
import os
import time
import uuid

import redis.asyncio as redis
import uvloop
from aiohttp import web

TOKENS = {}
with open(os.environ["PEER_TOKENS"]) as lines:
    for number, token in enumerate(line.strip() for line in lines):
        if token:
            TOKENS[token] = f"app-{number}"
QUEUE = os.environ["PEER_QUEUE"]
STRINGS = {"user_identifier": 255, "country_code": 2, "identifier_for_vendor": 36, "ip_address": 45}


def unprocessable(field, reason):
    return web.json_response({"errors": [{"field": field, "reason": reason}]}, status=422)


async def submit(request):
    app = TOKENS.get(request.headers.get("Authorization", "").removeprefix("Bearer "))
    if app is None:
        return web.json_response({"error": "unauthorized"}, status=401)
    if request.content_type != "application/json":
        return web.json_response({"error": "Content-Type must be application/json"}, status=415)
    try:
        body = json.loads(await request.read())
    except ValueError:
        return unprocessable("body", "must be valid JSON")
    if not isinstance(body, dict):
        return unprocessable("body", "must be a JSON object")
    receipt = body.get("receipt")
    if not isinstance(receipt, str):
        return unprocessable("receipt", "is required")
    try:
        binascii.a2b_base64(receipt.replace(" ", "+"))
    except binascii.Error:
        return unprocessable("receipt", "must be base64")
    for field, limit in STRINGS.items():
        value = body.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            return unprocessable(field, f"must be a string of at most {limit} characters")
    job_id = str(uuid.uuid4())
    job = {"id": job_id, "app": app, "receipt": receipt, "enqueued_at": time.time()}
    job.update((field, body.get(field)) for field in STRINGS)
    await request.app["redis"].lpush(QUEUE, json.dumps(job))
    return web.json_response({"id": job_id, "status": "pending"}, status=202)


async def connect(app):
    pool = redis.BlockingConnectionPool.from_url(os.environ["PEER_REDIS_URL"], max_connections=64)
    app["redis"] = redis.Redis(connection_pool=pool)
    yield
    await app["redis"].aclose()


def main():
    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post("/client/itunes_connect/receipts", submit)
    app.cleanup_ctx.append(connect)
    web.run_app(app, host="127.0.0.1", port=int(os.environ["PEER_PORT"]), reuse_port=True, access_log=None,
                print=None, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
