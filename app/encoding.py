"""JSON responses encoded with orjson, through Flask's JSON provider interface."""

from typing import Any

import orjson
from flask.json.provider import DefaultJSONProvider

# The separators Flask's provider asks for in a response out of debug mode (compact).
COMPACT = (",", ":")

# Times, dataclasses and anything else orjson does not know go to Flask's own default, so
# they are written as Flask writes them.
OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)


class OrjsonProvider(DefaultJSONProvider):
    """Flask's JSON provider, with compact output (every response out of debug mode) written by
    orjson, which is much faster than json.dumps on a page of results.

    The JSON is the same except that text outside ASCII is written as UTF-8 instead of \\u
    escapes. Anything else (the indented debug output, any other dumps() arguments) and
    what orjson refuses (an integer beyond 64 bits, a string with a lone surrogate) goes
    through Flask's own json.dumps.
    """

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        if kwargs.get("separators") == COMPACT and kwargs.keys() <= {"separators", "sort_keys"}:
            option = OPTIONS
            if kwargs.get("sort_keys", self.sort_keys):
                option |= orjson.OPT_SORT_KEYS
            try:
                return orjson.dumps(obj, default=self.default, option=option).decode()
            except TypeError:
                pass
        return super().dumps(obj, **kwargs)
