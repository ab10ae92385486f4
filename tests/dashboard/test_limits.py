"""A cap reached from the dashboard is said in plain words, with 409."""

SECRET = "whsec_" + "s" * 32


def test_the_dashboard_says_a_cap_is_reached_in_plain_words(app, post):
    app.config["MAX_WEBHOOKS_PER_TENANT"] = 0
    response = post(
        "/dashboard/webhooks/new",
        {"url": "https://hooks.example.com/in", "events": "call.ended", "secret": SECRET},
        token_from="/dashboard/webhooks/new",
    )
    assert response.status_code == 409
    assert "The tenant has 0 webhooks, the most it may have is 0." in response.get_data(True)
