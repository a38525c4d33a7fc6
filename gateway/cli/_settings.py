"""What several commands share: the settings (flags over environment over defaults) and the
checks a start makes on a routes file before anything loads."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from zest.engines import use_zest_cache
from zest.errors import ConfigError
from zest.gateway.serving import Preflight, Settings
from zest.router import LoadedRoutes, check_routes, rule_warnings

__all__ = ["checked_or_raise", "preflight_or_raise", "settings_from"]


def settings_from(**flags: object) -> Settings:
    """The settings: the flags given (None: not given) over the ZEST_ variables over the
    defaults (Settings' sources). zest's cache folder goes to the engines at once, as every
    command that reads model files starts here."""
    given = {key: value for key, value in flags.items() if value is not None}
    try:
        settings = Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"ZEST_{'.'.join(str(p) for p in err['loc']).upper()} (or its flag): "
            f"{err['msg'][0].lower()}{err['msg'][1:]}, got {err['input']!r}"
            for err in exc.errors()
        ]
        raise ConfigError(problems) from None
    use_zest_cache(settings.cache)
    return settings


def preflight_or_raise(
    loaded: LoadedRoutes, settings: Settings, *, refuse_unloadable: bool = False
) -> Preflight:
    """The checks a start and a reload make before anything loads: ConfigError if any fails
    (the warnings are the caller's to show); `refuse_unloadable`: preflight's, for check."""
    from zest.engines import detect_inventory
    from zest.gateway.serving import preflight

    devices = detect_inventory(settings.emulate_devices).devices
    checked = preflight(loaded, devices, refuse_unloadable=refuse_unloadable)
    if checked.problems:
        raise ConfigError(checked.problems)
    return checked


def checked_or_raise(
    path: Path, settings: Settings, *, models: bool = True, refuse_unloadable: bool = False
) -> tuple[LoadedRoutes, Preflight]:
    """The routes file, and what its model files said (`models`: read them), or ConfigError
    with every problem of both at once: the model files of the file's sound parts are read
    even when other parts have problems, so that one run lists them all. `refuse_unloadable`
    (zest check): a model file a route needs that would not load refuses the file, where a
    start serves on without those routes."""
    loaded, problems = check_routes(path)
    checked = Preflight()
    if not models and loaded is not None:  # the warnings the file alone gives (preflight's)
        checked = Preflight(warnings=[f"{loaded.path}: {w}" for w in rule_warnings(loaded.config)])
    if models and loaded is not None:
        try:
            checked = preflight_or_raise(loaded, settings, refuse_unloadable=refuse_unloadable)
        except ConfigError as exc:
            problems += exc.problems
    if problems or loaded is None:
        raise ConfigError(problems)
    return loaded, checked
