"""Secret hygiene helpers: URL userinfo masking and redaction of known secrets."""

from __future__ import annotations

import base64

from reverie.core.redact import mask_url, mask_urls, redact, split_userinfo, url_secrets


def test_mask_url_hides_user_and_password_and_keeps_the_rest() -> None:
    assert mask_url("http://user:secret@host:8080/v1?x=1") == "http://***@host:8080/v1?x=1"
    assert mask_url("postgresql://postgres:pw@db/app") == "postgresql://***@db/app"
    assert mask_url("https://api.example.com/v1") == "https://api.example.com/v1"


def test_mask_urls_masks_every_url_in_a_text_and_leaves_other_text_alone() -> None:
    text = "tried http://a:b@one/v1 then https://c:d@two/v1; mail ana@example.com"
    assert (
        mask_urls(text) == "tried http://***@one/v1 then https://***@two/v1; mail ana@example.com"
    )


def test_redact_masks_every_secret_longer_ones_first_and_ignores_short_ones() -> None:
    text = "key sk-abc-123456 and its prefix sk-abc, short ab"
    assert redact(text, ["sk-abc", "sk-abc-123456", "ab"]) == "key *** and its prefix ***, short ab"


def test_split_userinfo_returns_the_bare_url_and_the_basic_header_it_stood_for() -> None:
    bare, header = split_userinfo("http://us%40er:p%3Aw@host/v1")
    assert bare == "http://host/v1"
    assert header == "Basic " + base64.b64encode(b"us@er:p:w").decode()
    assert split_userinfo("http://host/v1") == ("http://host/v1", None)


def test_url_secrets_are_the_password_plain_decoded_and_as_basic_credentials() -> None:
    found = set(url_secrets("http://user:p%40ss-word@host/v1"))
    assert {"p%40ss-word", "p@ss-word", base64.b64encode(b"user:p@ss-word").decode()} == found
    assert url_secrets("http://host/v1") == ()
    assert url_secrets(None) == ()
