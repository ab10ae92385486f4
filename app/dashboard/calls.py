"""Calls: the call history with the API's filters, and a call with its conversation, costs,
events and function calls."""

from flask import g, render_template

from app.dashboard import bp
from app.dashboard.listing import page_links, read_query
from app.resources.calls.schemas import CallQueryArgsSchema
from app.services import agents as agent_service
from app.services import events as event_service
from app.services import function_calls as function_call_service
from app.services import phone_numbers as number_service
from app.services.calls import analysis as call_analysis
from app.services.calls import constants as call_constants
from app.services.calls import history as call_history

QUERY_ARGS = CallQueryArgsSchema()
# The AI cost's components as a page names them.
COST_LABELS = {
    "llm": "Language model",
    "stt": "Speech to text",
    "tts": "Text to speech",
    "telephony": "Telephony",
    "other": "Other",
}
FILTERS = (
    "status",
    "from",
    "to",
    "agentId",
    "agentVersion",
    "phoneNumberId",
    "direction",
    "callerNumber",
    "successful",
)


@bp.route("/calls")
def calls():
    query = read_query(QUERY_ARGS, FILTERS)
    page = previous = following = None
    if not query.errors:
        page = call_history.list_calls(tenant=g.tenant, **query.args)
        previous, following = page_links("dashboard.calls", query, page)
    agents = {agent.id: agent.name for agent in agent_service.list_agents(tenant=g.tenant)}
    numbers = number_service.list_numbers(tenant=g.tenant)
    return render_template(
        "dashboard/calls/list.html",
        query=query,
        page=page,
        previous=previous,
        following=following,
        agents=agents,
        numbers=numbers,
        statuses=call_constants.STATUSES,
        directions=call_constants.DIRECTIONS,
    ), (422 if query.errors else 200)


@bp.route("/calls/<call_id>")
def call(call_id):
    found = call_history.get_call(tenant=g.tenant, call_id=call_id)
    agents = {agent.id: agent.name for agent in agent_service.list_agents(tenant=g.tenant)}
    numbers = {number.id: number for number in number_service.list_numbers(tenant=g.tenant)}
    return render_template(
        "dashboard/calls/detail.html",
        call=found,
        agent_name=agents.get(found.agent_id),
        number=numbers.get(found.phone_number_id),
        turns=call_history.get_transcript(tenant=g.tenant, call_id=found.id).turns,
        analysis=call_analysis.shown(found),
        cost_labels=COST_LABELS,
        events=event_service.for_call(tenant=g.tenant, call_id=found.id),
        function_calls=function_call_service.list_for_call(tenant=g.tenant, call_id=found.id),
    )
