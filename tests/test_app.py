"""The application object."""

import functools

import pytest


def test_hooks_and_views_run_as_they_are_unless_flask_must_wrap_them(app):
    def hook() -> None:
        pass

    async def coroutine() -> None:
        pass

    assert app.ensure_sync(hook) is hook
    method = app.make_response  # anything but a plain function is Flask's to decide
    assert app.ensure_sync(method) == method
    assert app.ensure_sync(functools.partial(hook)).func is hook
    with pytest.raises(RuntimeError, match="async"):  # Flask's own answer without asgiref
        app.ensure_sync(coroutine)
