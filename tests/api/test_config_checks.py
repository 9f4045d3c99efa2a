"""The settings' value checks, on their own and through ``Settings`` (which names the
setting a refused value was given for)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from api import config_checks as checks
from api.config import Settings


def test_blank_secrets_are_unset_and_others_stripped() -> None:
    assert checks.blank_is_unset(None) is None
    assert checks.blank_is_unset(SecretStr("  ")) is None
    token = checks.blank_is_unset(SecretStr(" t0k "))
    assert token is not None and token.get_secret_value() == "t0k"


@pytest.mark.parametrize(
    ("given", "keys"),
    [(" a, b ,,", ["a", "b"]), ('["a", " b "]', ["a", "b"]), (SecretStr("x"), ["x"])],
)
def test_keys_split_from_a_list_or_commas(given: object, keys: list[str]) -> None:
    assert checks.split_keys(given) == keys


def test_rates() -> None:
    assert checks.rate(" 5/second;100/minute ") == "5/second;100/minute"
    assert checks.rate(" ") is None
    with pytest.raises(ValueError, match="not a rate like"):
        checks.rate("often")


def test_vllm_urls() -> None:
    assert checks.replica_urls("http://a:8000/, https://b ") == "http://a:8000,https://b"
    assert checks.replica_urls("") is None
    with pytest.raises(ValueError, match=r"not an http\(s\) URL: .a:8000."):
        checks.replica_urls("a:8000")
    with pytest.raises(ValueError, match="listed twice"):
        checks.replica_urls("http://a/,http://a")


def test_zmq_endpoints() -> None:
    given = "tcp://a:5557, ipc:///run/kv|tcp://a:5558"
    assert checks.zmq_endpoints(given) == "tcp://a:5557,ipc:///run/kv|tcp://a:5558"
    with pytest.raises(ValueError, match="tcp:// or ipc://"):
        checks.zmq_endpoints("tcp://a:1|http://b:2")


def test_shell_words() -> None:
    assert checks.shell_words("--max-num-seqs 4 --name 'a b'") == "--max-num-seqs 4 --name 'a b'"
    with pytest.raises(ValueError, match="not shell-quoted"):
        checks.shell_words("--name 'a b")


def test_keywords_nest_under_their_field() -> None:
    assert checks.nest_prefixed({"warmup_ttl_s": 5, "port": 1}, "warmup_", "warmup") == {
        "port": 1,
        "warmup": {"ttl_s": 5},
    }
    assert checks.nest_prefixed({"port": 1}, "warmup_", "warmup") == {"port": 1}


def test_settings_name_the_refused_setting() -> None:
    with pytest.raises(ValidationError, match=r"vllm_url\n.*listed twice"):
        Settings(vllm_url="http://a,http://a")
    with pytest.raises(ValidationError, match=r"chat_rate_limit\n.*not a rate"):
        Settings(chat_rate_limit="often")
    settings = Settings(vllm_url="http://a/ ,http://b", admin_token=" ", api_keys="k1,k2")
    assert settings.vllm_urls == ["http://a", "http://b"]
    assert settings.admin_token is None
    assert [k.get_secret_value() for k in settings.api_keys] == ["k1", "k2"]
