"""Schemathesis hooks for settle: a serializer for the NDJSON body of POST /v1/admin/import."""
import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    """A generated string is sent as it is; anything else as one JSON line per item."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    items = value if isinstance(value, list) else [value]
    return "\n".join(json.dumps(v) for v in items).encode()
