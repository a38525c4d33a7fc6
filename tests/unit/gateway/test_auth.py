"""API keys, the admin key and the bind warning: settings parsing and the access rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from zest.errors import AuthenticationError, ConfigError, PermissionDeniedError, RequestError
from zest.gateway.http._access_log import redact_query
from zest.gateway.http._auth import (
    AccessPolicy,
    credential_of,
    exposure_warning,
    is_loopback,
    parse_keys,
    read_key_file,
)
from zest.gateway.serving import Settings

SEND_KEY = "send 'Authorization: Bearer <key>'; the keys are set with ZEST_API_KEYS"
SEND_ADMIN = "send 'Authorization: Bearer <admin key>', the key set with ZEST_ADMIN_KEY"


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("", ()),
        ("sk-a", ("sk-a",)),
        ("sk-a,sk-b", ("sk-a", "sk-b")),
        (" sk-a , ,sk-b ,", ("sk-a", "sk-b")),
        ("sk-a\n# a comment, with a comma\n\nsk-b,sk-c\nsk-a\n", ("sk-a", "sk-b", "sk-c")),
    ],
)
def test_keys_are_split_on_commas_and_lines(text: str, keys: tuple[str, ...]) -> None:
    assert parse_keys(text) == keys


def test_settings_read_the_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEST_API_KEYS", "sk-one,sk-two")
    monkeypatch.setenv("ZEST_ADMIN_KEY", "sk-admin")
    settings = Settings()
    assert AccessPolicy.from_settings(settings) == AccessPolicy(
        ("sk-one", "sk-two"), "sk-admin", loopback=True
    )
    assert "sk-one" not in repr(settings)
    assert "sk-admin" not in repr(settings)


def test_a_hash_in_zest_api_keys_is_part_of_a_key_not_a_comment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZEST_API_KEYS", "#abc,def")
    assert AccessPolicy.from_settings(Settings()).api_keys == ("#abc", "def")


@pytest.mark.parametrize("value", [" , ", ",", "\n , \n"])
def test_zest_api_keys_set_but_holding_no_key_is_an_error_not_auth_off(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ZEST_API_KEYS", value)
    with pytest.raises(ConfigError) as refused:
        AccessPolicy.from_settings(Settings())
    assert refused.value.problems[0].startswith("ZEST_API_KEYS is set but holds no key")


def test_security_settings_default_to_open_loopback_without_cors() -> None:
    settings = Settings()
    assert AccessPolicy.from_settings(settings) == AccessPolicy((), "", loopback=True)
    assert settings.max_body_bytes == 8 * 1024 * 1024
    assert settings.cors_origins == ""


def test_a_key_file_adds_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\nsk-file-1\nsk-file-2\nsk-env\n", encoding="utf-8")
    settings = Settings(api_keys="sk-env", api_keys_file=path)  # type: ignore[arg-type]
    policy = AccessPolicy.from_settings(settings)
    assert policy.api_keys == ("sk-env", "sk-file-1", "sk-file-2")


def test_an_unreadable_key_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_key_file(tmp_path / "missing")
    assert info.value.problems == [
        f"ZEST_API_KEYS_FILE: cannot read {tmp_path / 'missing'}: No such file or directory: "
        "point it at a file of keys"
    ]


def test_an_empty_key_file_does_not_switch_auth_off(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# nothing yet\n\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_key_file(path)
    assert info.value.problems == [
        f"ZEST_API_KEYS_FILE: {path} holds no key: write one key a line, or unset it"
    ]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_binding_beyond_loopback_without_keys_warns() -> None:
    assert exposure_warning("0.0.0.0", 8000, AccessPolicy()) == (
        "zest is listening on 0.0.0.0:8000 without API keys: anyone who can reach this port "
        "can use it; set ZEST_API_KEYS"
    )
    assert exposure_warning("127.0.0.1", 8000, AccessPolicy()) is None
    assert exposure_warning("0.0.0.0", 8000, AccessPolicy(("sk-a",))) is None


@pytest.mark.parametrize(
    ("headers", "credential"),
    [
        ({}, None),
        ({"authorization": "Bearer sk-a"}, "sk-a"),
        ({"authorization": "bearer  sk-a "}, "sk-a"),
        ({"x-api-key": "sk-a"}, "sk-a"),
        ({"authorization": "Bearer sk-a", "x-api-key": "sk-b"}, "sk-a"),
        ({"authorization": "BEARER sk-a"}, "sk-a"),
        ({"authorization": "Bearer"}, ""),  # matches no key: an invalid key
    ],
)
def test_the_credential_of_a_request(headers: dict[str, str], credential: str | None) -> None:
    assert credential_of(headers) == credential


@pytest.mark.parametrize("value", ["sk-a", "Basic c2stYQ==", "Token sk-a", "", "Bearer\tsk-a"])
def test_an_authorization_header_not_bearer_is_a_401_that_never_quotes_it(value: str) -> None:
    with pytest.raises(AuthenticationError) as refused:
        credential_of({"authorization": value, "x-api-key": "sk-b"})
    assert refused.value.message == (
        "the Authorization header must be 'Bearer <key>' (the word Bearer, a space, the key); "
        "other schemes and a bare key are refused: send 'Authorization: Bearer <key>' or "
        "'x-api-key: <key>'"
    )
    assert refused.value.headers == {"www-authenticate": "Bearer"}


KEYS = AccessPolicy(("sk-a", "sk-b"), "sk-admin", loopback=True)
KEYS_NO_ADMIN = AccessPolicy(("sk-a",), "", loopback=True)
ADMIN_ONLY = AccessPolicy((), "sk-admin", loopback=False)
OPEN = AccessPolicy((), "", loopback=True)
OPEN_EXPOSED = AccessPolicy((), "", loopback=False)


@pytest.mark.parametrize(
    ("policy", "credential", "admin"),
    [
        (OPEN, None, False),
        (OPEN, "anything", False),
        (OPEN, None, True),  # a keyless loopback server: admin routes open like the rest
        (OPEN_EXPOSED, None, False),
        (KEYS, "sk-a", False),
        (KEYS, "sk-b", False),
        (KEYS, "sk-admin", False),  # the admin key may do anything an API key may
        (KEYS, "sk-admin", True),
        (ADMIN_ONLY, None, False),
        (ADMIN_ONLY, "sk-admin", True),
    ],
)
def test_allowed(policy: AccessPolicy, credential: str | None, admin: bool) -> None:
    policy.authorize(credential, admin=admin)


@pytest.mark.parametrize(
    ("policy", "credential", "admin", "error", "message"),
    [
        (KEYS, None, False, AuthenticationError, f"missing API key: {SEND_KEY}"),
        (KEYS, "sk-c", False, AuthenticationError, f"invalid API key: {SEND_KEY}"),
        (KEYS, "sk-a ", False, AuthenticationError, f"invalid API key: {SEND_KEY}"),
        (KEYS, None, True, AuthenticationError, f"missing API key: {SEND_KEY}"),
        (
            KEYS,
            "sk-a",
            True,
            PermissionDeniedError,
            f"this is an admin route and an API key is not enough: {SEND_ADMIN}",
        ),
        (
            ADMIN_ONLY,
            None,
            True,
            AuthenticationError,
            f"missing admin key: this is an admin route; {SEND_ADMIN}",
        ),
        (
            ADMIN_ONLY,
            "sk-a",
            True,
            AuthenticationError,
            f"invalid admin key: this is an admin route; {SEND_ADMIN}",
        ),
        (
            KEYS_NO_ADMIN,
            "sk-a",
            True,
            PermissionDeniedError,
            "admin routes need an admin key because the server has API keys: set ZEST_ADMIN_KEY "
            "on the server and send it as 'Authorization: Bearer <admin key>'",
        ),
        (
            OPEN_EXPOSED,
            None,
            True,
            PermissionDeniedError,
            "admin routes need an admin key because the server listens beyond loopback: set "
            "ZEST_ADMIN_KEY on the server and send it as 'Authorization: Bearer <admin key>'",
        ),
    ],
)
def test_refused(
    policy: AccessPolicy,
    credential: str | None,
    admin: bool,
    error: type[RequestError],
    message: str,
) -> None:
    with pytest.raises(error) as info:
        policy.authorize(credential, admin=admin)
    assert info.value.message == message


def test_a_401_is_openai_shaped_and_asks_for_a_bearer_token() -> None:
    error = AuthenticationError(f"missing API key: {SEND_KEY}")
    assert error.status_code == 401
    assert error.headers == {"www-authenticate": "Bearer"}
    assert error.to_body() == {
        "error": {
            "message": f"missing API key: {SEND_KEY}",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


def test_a_403_is_a_permission_error() -> None:
    error = PermissionDeniedError("no")
    assert (error.status_code, error.error_type, error.code) == (
        403,
        "permission_error",
        "admin_key_required",
    )


def test_the_startup_log_counts_keys_and_never_shows_them() -> None:
    assert KEYS.describe() == "auth: 2 API key(s); admin key: set"
    assert OPEN.describe() == "auth: off (no ZEST_API_KEYS); admin key: not set"


@pytest.mark.parametrize(
    ("target", "logged"),
    [
        ("/v1/models", "/v1/models"),
        ("/v1/models?api_key=sk-1&limit=2", "/v1/models?api_key=[redacted]&limit=2"),
        ("/x?token=a&Authorization=b&n=3", "/x?token=[redacted]&Authorization=[redacted]&n=3"),
        ("/x?prompt_tokens=5&x-api-key=k", "/x?prompt_tokens=5&x-api-key=[redacted]"),
    ],
)
def test_credential_like_query_values_are_redacted(target: str, logged: str) -> None:
    assert redact_query(target) == logged
