"""The application object."""

import functools

import pytest


def test_hooks_and_views_run_as_they_are_unless_flask_must_wrap_them(app):
    def hook() -> None:
        pass

    async def coroutine() -> None:
        pass

    class View:
        def get(self) -> None:
            pass

        async def post(self) -> None:
            pass

    assert app.ensure_sync(hook) is hook
    method = View().get  # a resource's view, asked for as a bound method
    assert app.ensure_sync(method) is method
    with pytest.raises(RuntimeError, match="async"):
        app.ensure_sync(View().post)
    assert app.ensure_sync(functools.partial(hook)).func is hook  # anything else: Flask's
    with pytest.raises(RuntimeError, match="async"):  # Flask's own answer without asgiref
        app.ensure_sync(coroutine)
