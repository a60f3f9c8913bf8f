"""Production refuses the development key of the signing secrets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.settings import DEV_SIGNING_KEY
from tests.conftest import settings_of

PRODUCTION = {"env": "production", "metrics_token": "scrape-token"}


def test_production_refuses_the_development_signing_key() -> None:
    with pytest.raises(ValidationError, match="SCHEDULER_SIGNING_KEY"):
        settings_of(**PRODUCTION)
    key = "c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q="
    assert settings_of(**PRODUCTION, signing_key=key).signing.key.get_secret_value() == key
    assert settings_of(env="dev").signing.key.get_secret_value() == DEV_SIGNING_KEY
