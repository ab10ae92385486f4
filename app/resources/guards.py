"""Input guards of the HTTP layer: a bounded request head, bounded JSON bodies, and no NUL
characters anywhere.

Python's JSON decoder recurses once per nesting level and refuses an integer longer than
sys.get_int_max_str_digits(), and PostgreSQL can neither store nor compare text holding
U+0000, so without these a deep body, a huge number or a NUL would end in a 500.
"""

import math
import sys
from typing import Any

import flask
from flask import request
from webargs import core
from webargs.flaskparser import FlaskParser

from app.errors import BadRequest, HeaderTooLarge, NotFound, URITooLong, ValidationFailed

# The request head the app answers itself, in its error body. The HTTP server's own limits
# (deploy/gunicorn.conf.py) are set above these, so that only a head beyond them gets the
# server's plain answer: a request line over 8,190 bytes (gunicorn's maximum, which leaves
# room for a target of 8,000 bytes and any method) and a header field over 16 KiB.
MAX_TARGET_BYTES = 8000
MAX_HEADER_BYTES = 8192
MAX_JSON_DEPTH = 32
NUL = "\x00"
NUL_MESSAGE = "Must not contain NUL (U+0000) characters."
TOO_DEEP = f"The request body is nested more than {MAX_JSON_DEPTH} levels deep."
# Python's decoder reads NaN and Infinity, which JSON has not, and 1e400 as infinity:
# stored, they would come back out as NaN or Infinity, which no JSON parser reads.
NOT_FINITE = (
    "The request body is not valid JSON: NaN, Infinity and numbers beyond a 64-bit float "
    "(about 1.8e308) are not accepted."
)


def _walk(body: Any, surrogates: bool) -> list[str]:
    """Check a parsed body without recursion; return the top-level fields holding a NUL."""
    with_nul: list[str] = []
    stack: list[tuple[Any, int, str]] = [(body, 1, "_schema")]
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise BadRequest(TOO_DEEP)
            items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
            for key, item in items:
                owner = key if depth == 1 and key is not None else field
                if key is not None:
                    stack.append((key, depth, owner))
                stack.append((item, depth + 1, owner))
        elif isinstance(value, str):
            if NUL in value and field not in with_nul:
                with_nul.append(field)
            if surrogates:
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise BadRequest(
                        "The request body is not valid JSON: it has an unpaired surrogate "
                        "escape (\\ud800 to \\udfff)."
                    ) from None
        elif isinstance(value, float) and not math.isfinite(value):
            raise BadRequest(NOT_FINITE)
    return with_nul


def check_json_body(body: Any, raw: bytes) -> None:
    """400 for a body nested too deeply, holding an unpaired surrogate or a number that is not
    finite; 422 for a NUL."""
    # Only a \uD800-\uDFFF escape can make an unpaired surrogate: skip the encode checks
    # without one (JSON's u is lower case; its hex digits are either).
    with_nul = _walk(body, surrogates=b"\\ud" in raw or b"\\uD" in raw)
    if with_nul:
        raise ValidationFailed(
            "Invalid value for " + ", ".join(with_nul) + ".",
            details={field: [NUL_MESSAGE] for field in with_nul},
        )


def too_many_digits() -> str:
    """The message for a body whose integer Python will not convert (int_max_str_digits)."""
    return (
        "The request body is not valid JSON: it has an integer of more than "
        f"{sys.get_int_max_str_digits():,} digits."
    )


class ArgumentsParser(FlaskParser):
    """webargs' parser, with the guards of check_json_body on every JSON body it loads."""

    def load_json(self, req: flask.Request, schema: Any) -> Any:
        try:
            body = super().load_json(req, schema)
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise BadRequest(TOO_DEEP) from None
        except ValueError:  # json raises no other (its JSONDecodeError webargs made a 400)
            raise BadRequest(too_many_digits()) from None
        if body is not core.missing:
            check_json_body(body, req.get_data(cache=True))
        return body


def refuse_oversized_head() -> None:
    """414 for a request target (path and query as sent) over MAX_TARGET_BYTES, 431 for a
    header whose name and value together are over MAX_HEADER_BYTES; before anything else."""
    environ = request.environ
    # The target as sent: gunicorn and werkzeug (its server and its test client) both pass it
    # as RAW_URI; another server may not, and then the re-quoted path and query stand in.
    target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path
    if len(target) > MAX_TARGET_BYTES:
        raise URITooLong(
            f"The request target (path and query) is longer than {MAX_TARGET_BYTES:,} bytes."
        )
    for name, value in request.headers.items():
        if len(name) + len(value) > MAX_HEADER_BYTES:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise HeaderTooLarge(
                f"The header {shown} is larger than {MAX_HEADER_BYTES:,} bytes (name and value)."
            )


def refuse_nul_characters() -> None:
    """An id with a NUL names nothing (404); a query parameter with one is invalid (422)."""
    if NUL in request.path:
        raise NotFound()
    query = request.query_string
    if b"%00" not in query and b"\x00" not in query:
        return  # no parameter can hold one: skip decoding them
    invalid = [name for name, value in request.args.items(multi=True) if NUL in name + value]
    if invalid:
        raise ValidationFailed(
            "Invalid value for " + ", ".join(invalid) + ".",
            details={name: [NUL_MESSAGE] for name in invalid},
        )
