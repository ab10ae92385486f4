"""Provider secrets at rest: Fernet under SECRETS_KEY, rotated by listing keys."""

import pytest
from cryptography.fernet import Fernet

from app import vault


def test_a_secret_reads_back_and_is_not_stored_as_it_is(app):
    token = vault.encrypt("EAAG-secret-token")
    assert "EAAG" not in token
    assert vault.decrypt(token) == "EAAG-secret-token"


def test_a_new_key_first_still_reads_secrets_of_the_old_one(app):
    old = vault.encrypt("kept")
    app.config["SECRETS_KEY"] = Fernet.generate_key().decode() + "," + app.config["SECRETS_KEY"]
    assert vault.decrypt(old) == "kept"


@pytest.mark.parametrize("setting", [None, "", "not-a-key"])
def test_without_a_usable_key_nothing_is_stored(app, setting):
    app.config["SECRETS_KEY"] = setting
    assert not vault.configured()
    with pytest.raises(vault.NotConfigured) as raised:
        vault.encrypt("x")
    assert raised.value.status == 503
    assert raised.value.details == {"setting": "SECRETS_KEY"}


def test_a_secret_under_a_key_no_longer_listed_says_so(app):
    token = vault.encrypt("lost")
    app.config["SECRETS_KEY"] = Fernet.generate_key().decode()
    with pytest.raises(vault.NotConfigured, match="cannot be decrypted"):
        vault.decrypt(token)
