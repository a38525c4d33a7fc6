"""Settings.privacy arms everything: the planner (tests/unit/router/test_plan.py) and the remote
engine's own refusal, which no longer reads ZEST_PRIVACY itself: the runtime built from the
settings hands it to every remote engine it makes, so Settings(privacy="strict") in code is
as strict as the variable."""

from __future__ import annotations

import pytest

from tests.unit.gateway.test_readiness import runtime
from zest.engines import RemoteEngine
from zest.errors import PrivacyError
from zest.gateway.serving import Runtime, Settings

REFUSED = "model 'upstream' is remote and ZEST_PRIVACY=strict: no remote engine may be reached"


def remote_engine_of(settings: Settings) -> RemoteEngine:
    made: Runtime = runtime(strict=settings.privacy == "strict")  # as zest serve builds it
    spec = made._current_spec("upstream")
    assert spec is not None
    engine = made._create_engine(spec)
    assert isinstance(engine, RemoteEngine)
    return engine


def test_strict_settings_in_code_arm_the_remote_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEST_PRIVACY", raising=False)
    with pytest.raises(PrivacyError) as info:
        remote_engine_of(Settings(privacy="strict")).load()
    assert info.value.message == REFUSED


def test_zest_privacy_reaches_the_engine_through_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZEST_PRIVACY", "strict")
    assert remote_engine_of(Settings()).strict_privacy
    assert not remote_engine_of(Settings(privacy="standard")).strict_privacy  # a flag wins


def test_standard_settings_leave_the_engine_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEST_PRIVACY", raising=False)
    engine = remote_engine_of(Settings())
    assert not engine.strict_privacy
    engine.load()  # checks nothing remote: no key variable, nothing sent
