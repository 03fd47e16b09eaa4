"""schemathesis hooks for receiptq's contract run (OpenAPITests): the Cloud Softphone service answers
form text or XML unless the request was JSON, so both are deserialised and validated against
`SoftphoneResult` like JSON answers, instead of being skipped.

Loaded through SCHEMATHESIS_HOOKS=schemathesis_hooks with this folder on PYTHONPATH.
"""

from urllib.parse import parse_qsl
from xml.etree import ElementTree

import schemathesis


@schemathesis.deserializer("application/x-www-form-urlencoded")
def form(ctx, response):
    pairs = parse_qsl(response.content.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"a field appears twice: {sorted(names)}")
    return dict(pairs)


@schemathesis.deserializer("application/xml")
def xml(ctx, response):
    # Our own server's answer over loopback: a flat <root> of text elements, nothing to expand.
    root = ElementTree.fromstring(response.content)
    if root.tag != "root":
        raise ValueError(f"the document element is <{root.tag}>, not <root>")
    fields = {}
    for child in root:
        if len(child) or child.tag in fields:
            raise ValueError(f"<{child.tag}> is nested or repeated")
        fields[child.tag] = child.text or ""
    return fields
