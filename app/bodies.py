"""Request bodies sent without a Content-Length (chunked) are measured whole.

werkzeug limits such a body to MAX_CONTENT_LENGTH by reading no further than the limit: the
rest is left unread and the first MiB is taken as the whole body. This WSGI middleware reads
a chunked body before the app does, up to one byte over the limit, and hands the app either
the body with its Content-Length or, when it is longer, a Content-Length over the limit (and
no body), so werkzeug refuses it with 413 exactly as a body that said its length.
"""

import io
from collections.abc import Iterable
from typing import Any

from werkzeug.wsgi import get_content_length

WSGIApp = Any


class MeasuredBodies:
    def __init__(self, wsgi_app: WSGIApp, limit: int) -> None:
        self.wsgi_app = wsgi_app
        self.limit = limit

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and get_content_length(environ) is None:
            body = read_up_to(environ["wsgi.input"], self.limit + 1)
            environ["wsgi.input"] = io.BytesIO(b"" if len(body) > self.limit else body)
            # The app now reads a body of known length, no longer a chunked one.
            environ["CONTENT_LENGTH"] = str(len(body))
            del environ["HTTP_TRANSFER_ENCODING"]
            environ.pop("wsgi.input_terminated", None)
        return self.wsgi_app(environ, start_response)


def read_up_to(stream: Any, size: int) -> bytes:
    """At most size bytes of stream, fewer only at its end."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        part = stream.read(min(left, 64 * 1024))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
