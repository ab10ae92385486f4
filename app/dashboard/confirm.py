"""The change made after a confirmation (delete, revoke, disable, cancel, restore), written once."""

from dataclasses import dataclass
from typing import Any

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask.views import MethodView

from app.dashboard import require_change


@dataclass(frozen=True)
class Confirmation:
    """What a confirmation page says: its heading, the question, the button, where Cancel goes."""

    title: str
    question: str
    button: str
    cancel: str


class ConfirmView(MethodView):
    """GET shows the question with a CSRF-protected form that posts back here; POST makes the
    change.

    A page subclasses it and is registered with
    bp.add_url_rule(rule, view_func=Page.as_view("endpoint")); owner-only pages add
    decorators = [owner_only].
    """

    init_every_request = False
    # The page only leads to a change, so viewers, who may not make it, are refused the page
    # too; False shows them the question (the change itself stays refused).
    changers_only = True

    def find(self, *args: Any, **ids: Any) -> Any:
        """What the change is about, from the URL's ids: NotFound for another tenant's."""
        raise NotImplementedError

    def confirmation(self, found: Any) -> Confirmation:
        """What the page says about it."""
        raise NotImplementedError

    def act(self, found: Any) -> ResponseReturnValue:
        """Make the change, flash what happened, and redirect."""
        raise NotImplementedError

    def get(self, **ids: Any) -> ResponseReturnValue:
        page = self.confirmation(self._found(ids))
        assert request.endpoint is not None  # a view's request always has one
        return render_template(
            "dashboard/confirm.html",
            title=page.title,
            question=page.question,
            action=url_for(request.endpoint, **ids),
            button=page.button,
            cancel=page.cancel,
        )

    def post(self, **ids: Any) -> ResponseReturnValue:
        return self.act(self._found(ids))

    def _found(self, ids: dict[str, Any]) -> Any:
        if self.changers_only:
            require_change()
        return self.find(**ids)
