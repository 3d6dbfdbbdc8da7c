"""--db and $ROOFTUNE_DB: any text resolves to a store URL that parses, or is refused with a one-line
StoreError; a secret planted in a URL (its password, a query parameter named like a password in
any spelling or encoding) is in neither the URL as shown nor any error. Nothing connects: the
URL is parsed and checked as Store() does before it creates an engine."""

from __future__ import annotations

import random
from urllib.parse import quote, quote_plus

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from rooftune.errors import RooftuneError
from rooftune.store.urls import parse_url, redact_url, resolve_url, secret_parameter

#: Every secret starts with this, and nothing else in a built URL holds capitals: a secret in an
#: output is there only if it leaked.
MARK = "ZQ"
LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"

#: What a secret is made of past its mark: capitals, and every character a URL gives a meaning to.
SECRET_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ@:/?#&=%+ ;!$'()*,[]\\~\x00\n\u00e9\u4e2d"
words = st.text(alphabet=LOWER, min_size=1, max_size=8)
hosts = st.one_of(words, st.builds(lambda a, b: f"{a}.{b}", words, words), st.just("[::1]"), st.just(""),
                  st.text(max_size=6).map(lambda s: s.lower()))
ports = st.one_of(st.none(), st.integers(-10, 70_000).map(str), st.text(alphabet=LOWER + ":-", max_size=5))
schemes = st.sampled_from(["postgresql", "postgresql+psycopg", "sqlite", "mysql", "nosuch", "postgres"])
#: Names of query parameters that carry a password, as libpq and the usual services spell them.
SECRET_NAMES = ["password", "sslpassword", "passwd", "api_key", "access_token", "token", "secret", "pwd"]
USERS = st.one_of(st.just(""), words, st.builds(lambda a, b: f"{a}@{b}", words, words))


def secret_name(rnd: random.Random) -> str:
    """A password-like parameter name in any case, any of its letters percent-encoded (once or
    twice), '+' or an encoded space around it."""
    out = []
    for c in rnd.choice(SECRET_NAMES):
        c = c.upper() if rnd.random() < 0.5 else c
        hexed = f"%{ord(c):02X}" if rnd.random() < 0.5 else f"%{ord(c):02x}"
        out.append(rnd.choice([c, c, hexed, hexed.replace("%", "%25")]))
    return rnd.choice(["", "+", "%20"]) + "".join(out) + rnd.choice(["", "+", "%20"])


@st.composite
def planted(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A URL built of random parts with secrets planted in its password and its query; the
    secrets. The URL's parts are drawn; the secrets and how each name is spelled (case,
    encoding) come from one drawn seed, which keeps an example cheap to draw."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    planted_secrets = [MARK + "".join(rnd.choices(SECRET_CHARS, k=rnd.randint(1, 12))) for _ in range(5)]

    def written(s: str, safe_out: str) -> str:  # as a correct URL carries it, or as a user may type it
        return quote_plus(s, safe="") if rnd.random() < 0.5 else "".join(c for c in s if c not in safe_out)

    user, host, port = draw(USERS), draw(hosts), draw(ports)
    password = ":" + written(planted_secrets[0], "/") if rnd.random() < 0.7 else ""
    userinfo = f"{user}{password}@" if user or password else ""
    url = f"{draw(schemes)}://{userinfo}{host}{'' if port is None else ':' + port}/{draw(words)}"
    params = [f"{secret_name(rnd)}={written(s, '&#')}" if rnd.random() < 0.6 else f"sslmode={draw(words)}"
              for s in planted_secrets[1:rnd.randint(1, 5)]]
    if params:
        url += "?" + "&".join(params)
    return url, planted_secrets  # (those not written in it cannot be in an output either)


def forms(secret: str) -> set[str]:
    """``secret`` as it may appear: as typed, or percent-encoded either way."""
    return {secret, quote(secret, safe=""), quote_plus(secret, safe="")}


def check(text: str) -> str:
    """What --db ``text`` gives: the URL as shown once parsed, or the one-line error."""
    try:
        url = resolve_url(text)
        parse_url(url)
        return redact_url(url)
    except RooftuneError as e:
        message = str(e)
        assert message and "\n" not in message and "\r" not in message, message
        return message


@given(st.one_of(st.text(max_size=80), st.builds(lambda s, t: f"{s}://{t}", st.text(max_size=10), st.text(max_size=60))))
def test_any_text_is_a_store_url_or_one_line_error(text: str) -> None:
    check(text)
    shown = redact_url(text)
    # read back, what is shown holds no password and no secret parameter's value
    try:
        parsed = make_url(shown)
    except Exception:  # noqa: BLE001 (no URL at all: nothing in it is read as a secret)
        return
    assert parsed.password in (None, "***")
    for name, values in parsed.query.items():
        if secret_parameter(name):
            assert all(v == "***" for v in ([values] if isinstance(values, str) else values)), (text, shown)


@given(planted())
def test_a_planted_secret_is_in_no_output(case: tuple[str, list[str]]) -> None:
    url, planted_secrets = case
    outputs = [redact_url(url), check(url)]
    for secret in planted_secrets:
        for form in forms(secret):
            for out in outputs:
                assert form not in out, (url, out)
