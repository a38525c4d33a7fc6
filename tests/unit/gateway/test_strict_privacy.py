"""Settings.privacy arms everything: the planner (tests/unit/router/test_plan.py) and the remote
engine's own refusal, which reads no ZEST_PRIVACY itself. The app applies its settings to the
runtime it serves, so `create_app(runtime, Settings(privacy="strict"))` in code is as strict as
the variable, and a runtime built strict stays strict (privacy only tightens)."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.gateway.test_readiness import runtime, warm
from zest.engines import RemoteEngine
from zest.errors import PrivacyError
from zest.gateway.http import create_app
from zest.gateway.serving import Runtime, Settings

# create_app's handlers infer their dependencies (Litestar 2 warns of its 3.0).
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

REFUSED = "model 'upstream' is remote and ZEST_PRIVACY=strict: no remote engine may be reached"


@pytest.fixture(autouse=True)
def no_privacy_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEST_PRIVACY", raising=False)


def served(settings: Settings | None, *, strict: bool = False) -> Runtime:
    """The runtime, built as `zest serve` builds it, once create_app has taken the settings."""
    made = runtime(strict=strict)
    create_app(made, settings)
    return made


def remote_engine_of(made: Runtime) -> RemoteEngine:
    spec = made._current_spec("upstream")
    assert spec is not None
    engine = made._create_engine(spec)
    assert isinstance(engine, RemoteEngine)
    return engine


def test_create_app_with_strict_settings_in_code_arms_the_runtime_and_its_engines() -> None:
    made = served(Settings(privacy="strict"))
    assert made.strict_privacy
    assert list(warm(made).readiness().forbidden) == ["cloud"]  # the planner's: no remote
    with pytest.raises(PrivacyError) as info:
        remote_engine_of(made).load()
    assert info.value.message == REFUSED


def test_zest_privacy_reaches_the_engine_through_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZEST_PRIVACY", "strict")
    assert remote_engine_of(served(None)).strict_privacy  # create_app's default: the variable
    assert not remote_engine_of(served(Settings(privacy="standard"))).strict_privacy  # flag wins


def test_an_engine_loaded_before_the_settings_is_armed_too() -> None:
    made = runtime(strict=False)
    placement = made.default_placement(made.routes, "upstream")
    lease = asyncio.run(made.acquire(made.routes, "upstream", placement))  # nothing is sent
    create_app(made, Settings(privacy="strict"))
    assert isinstance(lease.engine, RemoteEngine)
    assert lease.engine.strict_privacy


def test_standard_settings_do_not_loosen_a_strict_runtime() -> None:
    assert served(Settings(privacy="standard"), strict=True).strict_privacy


def test_standard_settings_leave_the_engine_free() -> None:
    engine = remote_engine_of(served(Settings()))
    assert not engine.strict_privacy
    engine.load()  # checks nothing remote: no key variable, nothing sent
