"""flask whatsapp: link with the secrets from the environment or a hidden prompt, sync, list."""

from app.models import AuditEntry, PhoneNumber, WhatsAppAccount
from tests.fake_graph import number

TOKEN = "EAAG-cli-token-never-printed-4321"
APP_SECRET = "cli-app-secret-never-printed"
ENV = {"WHATSAPP_ACCESS_TOKEN": TOKEN, "WHATSAPP_APP_SECRET": APP_SECRET}


def test_link_reads_the_secrets_from_the_environment(runner, tenant, fake_graph):
    fake_graph.add_waba("8001", TOKEN, [number("81", "+62 811-800-0001", rating="YELLOW")])
    result = runner.invoke(
        args=["whatsapp", "link", "--tenant", "acme", "--waba-id", "8001", "--label", "Main"],
        env=ENV,
    )
    assert result.exit_code == 0, result.output
    account = WhatsAppAccount.get()
    assert result.output.startswith(f"Linked for acme: {account.id} (WABA 8001, token …4321): ")
    assert "1 added, 0 updated, 0 deactivated, 0 skipped." in result.output
    assert TOKEN not in result.output and APP_SECRET not in result.output
    assert AuditEntry.get(AuditEntry.action == "whatsapp.linked").actor_type == "cli"


def test_link_asks_for_the_secrets_without_echo(runner, tenant, fake_graph):
    fake_graph.add_waba("8001", TOKEN, [number("81", "+62 811-800-0001")])
    result = runner.invoke(
        args=["whatsapp", "link", "--tenant", "acme", "--waba-id", "8001"],
        input=f"{TOKEN}\n{APP_SECRET}\n",
        env={"WHATSAPP_ACCESS_TOKEN": "", "WHATSAPP_APP_SECRET": ""},
    )
    assert result.exit_code == 0, result.output
    assert "Access token: " in result.output and "App secret: " in result.output
    assert TOKEN not in result.output and APP_SECRET not in result.output
    assert fake_graph.tokens_seen() == [TOKEN]


def test_link_takes_no_secret_as_an_argument(runner, tenant):
    result = runner.invoke(
        args=["whatsapp", "link", "--tenant", "acme", "--waba-id", "8001", "--access-token", "x"]
    )
    assert result.exit_code == 2 and "No such option" in result.output


def test_link_errors_are_one_line(runner, tenant, fake_graph):
    fake_graph.add_waba("8001", TOKEN, [])
    fake_graph.fail[TOKEN] = "auth"
    result = runner.invoke(
        args=["whatsapp", "link", "--tenant", "acme", "--waba-id", "8001"], env=ENV
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: Meta refused the access token")
    assert WhatsAppAccount.select().count() == 0


def test_sync_and_list(runner, tenant, fake_graph):
    waba = fake_graph.add_waba("8001", TOKEN, [number("81", "+62 811-800-0001")])
    runner.invoke(args=["whatsapp", "link", "--tenant", "acme", "--waba-id", "8001"], env=ENV)
    account = WhatsAppAccount.get()
    waba.numbers.append(number("82", "+62 811-800-0002", rating="RED"))
    result = runner.invoke(args=["whatsapp", "sync", account.id])
    assert result.exit_code == 0, result.output
    assert "1 added, 0 updated, 0 deactivated, 0 skipped." in result.output
    listed = runner.invoke(args=["whatsapp", "list", "--tenant", "acme"])
    assert listed.exit_code == 0
    assert f"{account.id}  waba=8001  tenant={tenant.id}  token=…4321  connected" in listed.output
    assert "+628118000002  active  quality=RED  Toko Maju" in listed.output
    assert TOKEN not in listed.output and APP_SECRET not in listed.output
    unknown = runner.invoke(args=["whatsapp", "sync", "waa_unknown"])
    assert unknown.exit_code == 1
    assert unknown.output == "Error: WhatsApp Business account waa_unknown not found.\n"


def test_numbers_add_makes_a_phone_channel_number(runner, tenant):
    result = runner.invoke(args=["numbers", "add", "--tenant", "acme", "+6221555010"])
    assert result.exit_code == 0, result.output
    added = PhoneNumber.get(PhoneNumber.display_number == "+6221555010")
    assert (added.channel, added.whatsapp_phone_number_id, added.quality_rating) == (
        "phone",
        None,
        None,
    )
