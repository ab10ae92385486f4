"""Dashboard: an agent's Versions tab (what changed, the prompt's diff, Restore after a
confirmation), the per-version stats on its Calls tab, and a number's pin."""

from app.models import AuditEntry
from app.services import phone_numbers as number_service
from tests.call_flow import answer, end, start
from tests.dashboard.conftest import sign_in

AGENTS = "/dashboard/agents"


def text(response) -> str:
    return response.get_data(as_text=True)


def patch(client, headers, agent_id, **fields):
    response = client.patch(f"/api/v1/agents/{agent_id}", json=fields, headers=headers)
    assert response.status_code == 200, response.json


def test_the_versions_tab_lists_what_changed_newest_first(signed_in, headers, agent_id):
    patch(signed_in, headers, agent_id, systemPrompt="Be brief.", voiceId="Kore")
    page = signed_in.get(f"{AGENTS}/{agent_id}/versions")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Reception</h1>" in body and "<title>Versions · Agent Reception" in body
    assert 'aria-current="page">Versions</a>' in body
    rows = body.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert 'Version 2</a> <span class="muted">(latest)</span>' in rows[0]
    assert "prompt, voice" in rows[0]
    assert "Version 1</a>" in rows[1] and "created" in rows[1]


def test_a_version_page_shows_the_prompt_diff_against_the_version_before(
    signed_in, headers, agent_id
):
    patch(signed_in, headers, agent_id, systemPrompt="Be helpful.\nSpeak Indonesian.")
    body = text(signed_in.get(f"{AGENTS}/{agent_id}/versions/2"))
    assert "<h1>Version 2 of Reception</h1>" in body
    assert "Changes against version 1" in body
    assert '<span class="added">+Speak Indonesian.\n</span>' in body
    assert '<span class="context"> Be helpful.\n</span>' in body
    assert "Restore version 2" not in body  # it is the latest
    first = text(signed_in.get(f"{AGENTS}/{agent_id}/versions/1"))
    assert "Changes against" not in first and "the agent as it was created" in first
    assert f'href="{AGENTS}/{agent_id}/versions/1/restore">Restore version 1</a>' in first


def test_restore_asks_first_then_makes_a_new_version(signed_in, post, client, headers, agent_id):
    patch(signed_in, headers, agent_id, systemPrompt="Be brief.")
    confirm = signed_in.get(f"{AGENTS}/{agent_id}/versions/1/restore")
    assert confirm.status_code == 200
    assert "Make version 1 the agent&#39;s version again?" in text(confirm)
    assert signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json["version"] == 2
    response = post(f"{AGENTS}/{agent_id}/versions/1/restore")
    assert response.status_code == 302
    assert response.headers["Location"] == f"{AGENTS}/{agent_id}/versions"
    assert "Version 1 restored as version 3." in text(signed_in.get(response.headers["Location"]))
    agent = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert (agent["version"], agent["systemPrompt"]) == (3, "Be helpful.")
    entry = AuditEntry.get(AuditEntry.action == "agent.restored")
    assert (entry.actor_type, entry.actor_label) == ("user", "owner@acme.test")
    versions = signed_in.get(f"/api/v1/agents/{agent_id}/versions", headers=headers).json
    assert versions["versions"][0]["actor"]["label"] == "owner@acme.test"


def test_a_viewer_sees_versions_but_cannot_restore(client, viewer, headers, agent_id):
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    sign_in(client, viewer.email)
    assert client.get(f"{AGENTS}/{agent_id}/versions").status_code == 200
    page = text(client.get(f"{AGENTS}/{agent_id}/versions/1"))
    assert "Restore version 1" not in page
    assert client.get(f"{AGENTS}/{agent_id}/versions/1/restore").status_code == 403


def test_unknown_versions_are_404_pages(signed_in, agent_id):
    for path in ("versions/9", "versions/9/restore", "versions/99999999999"):
        response = signed_in.get(f"{AGENTS}/{agent_id}/{path}")
        assert response.status_code == 404 and response.content_type.startswith("text/html")


def test_the_calls_tab_shows_calls_by_version(signed_in, headers, runtime_headers, agent_id, did):
    call_id = start(signed_in, runtime_headers, did).json["id"]
    answer(signed_in, runtime_headers, call_id)
    end(signed_in, runtime_headers, call_id, talkTimeSeconds=95, durationSeconds=100)
    patch(signed_in, headers, agent_id, systemPrompt="Be brief.")
    start(signed_in, runtime_headers, did)
    body = text(signed_in.get(f"{AGENTS}/{agent_id}/calls"))
    assert "Calls by version, last 30 days" in body
    table = body.split('id="stats"')[1].split("</table>")[0]
    rows = table.split("<tbody>")[1].split("<tr>")[1:]
    assert f'href="{AGENTS}/{agent_id}/versions/2">Version 2</a>' in rows[0]
    assert f'href="/dashboard/calls?agentId={agent_id}&amp;agentVersion=1">1</a>' in rows[1]
    assert "1 (100%)" in rows[1] and "1:35" in rows[1]


def test_the_calls_list_filters_by_version(signed_in, headers, runtime_headers, agent_id, did):
    first = start(signed_in, runtime_headers, did).json["id"]
    patch(signed_in, headers, agent_id, systemPrompt="Be brief.")
    second = start(signed_in, runtime_headers, did).json["id"]
    page = text(signed_in.get(f"/dashboard/calls?agentId={agent_id}&agentVersion=1"))
    assert first in page and second not in page
    refused = signed_in.get("/dashboard/calls?agentVersion=1")
    assert refused.status_code == 422
    assert "A version is an agent&#39;s: send agentId with it." in text(refused)


def test_a_number_is_pinned_from_the_numbers_page(signed_in, post, headers, tenant, agent_id, did):
    patch(signed_in, headers, agent_id, systemPrompt="Be brief.")
    [number] = number_service.list_numbers(tenant=tenant)
    response = post(
        f"/dashboard/phone-numbers/{number.id}/assign-agent",
        {"agentId": agent_id, "agentVersion": "1"},
    )
    assert response.status_code == 302
    page = text(signed_in.get("/dashboard/phone-numbers"))
    assert f"{did} is answered by Reception, pinned to version 1." in page
    assert f'href="{AGENTS}/{agent_id}/versions/1">pinned to version 1</a>' in page
    assert f'id="version-{number.id}" name="agentVersion" value="1"' in page
    api = signed_in.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"][0]
    assert api["agentVersion"] == 1
    refused = post(
        f"/dashboard/phone-numbers/{number.id}/assign-agent",
        {"agentId": agent_id, "agentVersion": "7"},
    )
    assert refused.status_code == 422
    assert f"Agent {agent_id} has versions 1 to 2; 7 is none of them." in text(refused)
    post(f"/dashboard/phone-numbers/{number.id}/assign-agent", {"agentId": agent_id})
    page = text(signed_in.get("/dashboard/phone-numbers"))
    assert 'latest version <span class="muted">(now 2)</span>' in page
