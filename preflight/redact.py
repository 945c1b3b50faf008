"""The one redaction rule of every output preflight writes (reports, `--record` recordings,
inventory error messages): the value of a secret-named variable or key is replaced by REDACTED.

A name is secret when it looks like one (PASS, SECRET, TOKEN, CREDENTIAL, PRIVATE, AUTH, a name
ending in _KEY, _PWD or KEY itself), the rule docs/SPEC.md states under "where secrets are redacted".
The name stays readable, so a report still says *which* variable is set; only its value is hidden.
A value is secret by its shape too, whatever its name (SHAPES: cloud access key ids, vendor
tokens, JWTs, a password inside a URL, a `password=...` pair, a private key block): such text is
replaced wherever it appears, in outputs, recordings, reports and the history.

Three shapes carry such values: a mapping (the launch environment a report shows), `env -0`
output (NUL-separated NAME=value records: each node's full environment), and shell text (the
launch-environment script's `export NAME=<quoted value>`, also when that script is itself quoted
inside `bash -c '...'`). Every function here is deterministic, so a recording keyed by redacted
command text is found again by redacting the command of a replay the same way.
"""
from __future__ import annotations

import functools
import re
import shlex
from typing import Any, Iterable, Mapping

SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$|^KEY$|AUTH|_PWD$", re.I)
REDACTED = "********"
ENV_RECORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MIN_VALUE_LEN = 6  # shorter secret values are not searched for in free text (they would hit noise)

# Secret values by shape: (what, pattern, replacement). The replacement keeps what tells a reader
# which credential it was (the scheme and user of a URL, the key's name), never the secret part.
SHAPES: tuple[tuple[str, str, str], ...] = (
    # AWS access key ids: AKIA (long-term), ASIA (STS) and the other unique-id prefixes
    # (docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids)
    ("aws key id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b", REDACTED),
    # GitHub tokens (github.blog/2021-04-05-behind-githubs-new-authentication-token-formats)
    ("github token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b", REDACTED),
    # Slack tokens xoxb-/xoxp-/xoxa-/xoxr-/xoxs-/xoxe- (api.slack.com/authentication/token-types)
    ("slack token", r"\bxox[abeprs]-[A-Za-z0-9-]{10,}", REDACTED),
    # Hugging Face user access tokens (huggingface.co/docs/hub/security-tokens)
    ("hf token", r"\bhf_[A-Za-z0-9]{30,}\b", REDACTED),
    # JWT: three base64url parts, the first two JSON objects ({"... is eyJ) (RFC 7519)
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", REDACTED),
    # userinfo of a URL (RFC 3986 3.2.1): scheme://user:password@host keeps scheme and user
    ("url password", r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]+):[^/\s@'\"]+@", r"\1:" + REDACTED + "@"),
    # password=..., "token": "...", api_key: ..., DB_PWD=... in config text, logs and command lines
    # (not a bare `pwd=`, a working directory, nor `auth:`, which sshd's messages use for methods)
    ("key=value", r"((?i:passw(?:or)?d|_pwd|secret|token|api[_-]?key|access[_-]?key)[\"']?\s*[=:]\s*[\"']?)"
                  r"(?!\*{8})[^\s\"',;&]{6,}", r"\1" + REDACTED),
    # PEM private keys (RFC 7468)
    ("private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
     REDACTED),
)
_BY_NAME = {what: re.compile(p) for what, p, _ in SHAPES}
_SHAPES = [(_BY_NAME[what], r) for what, _, r in SHAPES]
_ANY_SHAPE = re.compile("|".join(f"(?:{p})" for _, p, _ in SHAPES))
# What every SHAPES match holds near its start: (hint, the shape it starts, how far before the hint
# that shape's match may begin). key=value's words only with their `=` or `:`, as its pattern has
# them: a bare "key" is in every node's "host key verified".
_CASED_HINTS: tuple[tuple[str, str, int], ...] = (
    (r"A[KSGIRPN][A-Z]A", "aws key id", 0), (r"gh(?:[pousr]_|ithub_pat_)", "github token", 0),
    (r"xox", "slack token", 0), (r"hf_", "hf token", 0), (r"eyJ", "jwt", 0), (r"://", "url password", 64),
    (r"PRIVATE KEY", "private key", 64))
_WORDS = (r"passw(?:or)?d", r"_pwd", r"secret", r"token", r"key")  # key=value's, matched lowercase
_FOLLOW = r"[\"']?\s*[=:]"
# has_shape() reads a whole report (11 KB a node) and output() a node's probe outputs (about 30
# KB): one alternation of the hints reads it at about 50 ns a character (0.7 ms a node,
# bench/replay_cpu.py --served-times), a pattern that starts with a literal at memory speed, so
# there it is one scan per hint, the words in the lowered text.
_SCANS: tuple[tuple[re.Pattern[str], bool, re.Pattern[str], int], ...] = (
    *((re.compile(h), False, _BY_NAME[what], lead) for h, what, lead in _CASED_HINTS),
    *((re.compile(w + _FOLLOW), True, _BY_NAME["key=value"], 8) for w in _WORDS))
_WINDOW = 512  # how far past its hint a shape that starts before it is looked for (a URL's user:password@)


def _shaped(text: str) -> bool:
    """Whether `text` holds a SHAPES match: `_ANY_SHAPE.search(text) is not None`, found faster
    (tests/core/test_redaction.py holds the two to one answer on reports and generated texts).
    It may say yes where that says no only where lowering lengthens text (U+0130 is two characters
    lowered, so a 3-letter value reads as 6): that costs a redaction pass, never a secret."""
    low = None
    for hint, folded, shape, lead in _SCANS:
        if folded and low is None:
            low = text.lower()  # key=value is searched in it too: lower() may change offsets
        hay = low if folded else text
        for m in hint.finditer(hay):  # a shape that starts at its hint is matched there, to its end
            if (shape.search(hay, max(0, m.start() - lead), m.end() + _WINDOW) if lead
                    else shape.match(hay, m.start())):
                return True
    return False


def shapes(text: str) -> str:
    """`text` with every secret-shaped value replaced (SHAPES), whatever name it had."""
    if not _ANY_SHAPE.search(text):
        return text
    for pattern, repl in _SHAPES:
        text = pattern.sub(repl, text)
    return text


def _long_shapes(text: str) -> str:
    """shapes() of a long text (a probe's output, a probe's script): the scan of has_shape() says
    first whether there is a shape to replace. A recorded node's 56 outputs (29 KB): 0.3 ms where
    the plain search took 5.5 and one alternation of the hints 1.6; its 26 scripts (8.6 KB): 0.12
    ms where they took 1.56 and 0.48."""
    return shapes(text) if _shaped(text) else text


def has_shape(obj: Any) -> bool:
    """Whether any string inside `obj` holds a secret-shaped value (one encoding, one search)."""
    import orjson
    try:
        text = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    except TypeError:  # what orjson refuses: every string is looked at by deep() anyway
        return True
    return _shaped(text.replace('\\"', '"'))


def is_secret(name: str) -> bool:
    return _is_secret(str(name))


# The answer per name, kept: every node's environment (env -0, the launch environment) names the
# same few hundred variables, asked again for each node by the report, env.comm and the recorder.
@functools.lru_cache(maxsize=4096)
def _is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def value(name: str, val: Any) -> Any:
    """`val` (its secret-shaped parts replaced), or the marker when `name` is secret."""
    return REDACTED if is_secret(name) else shapes(val) if isinstance(val, str) else val


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """A mapping safe to show: values of secret-looking names replaced, sorted by name."""
    return {k: value(k, v) for k, v in sorted(env.items())}


def secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The secret entries of an environment (name -> value): by name, or by the value's shape."""
    return {k: v for k, v in env.items() if v and (is_secret(k) or shapes(v) != v)}


def env0(text: str) -> str:
    """`env -0` output (NAME=value records, NUL-separated) with secret values replaced."""
    if "\0" not in text:
        return text
    items = []
    for item in text.split("\0"):
        key, sep, val = item.partition("=")
        secret = sep and ENV_RECORD.fullmatch(key) and (is_secret(key) or shapes(val) != val)
        items.append(f"{key}={REDACTED}" if secret else item)
    return "\0".join(items)


def _nested(text: str, depth: int) -> str:
    """`text` as it reads after `depth` levels of shlex quoting of the script around it."""
    for _ in range(depth):
        text = text.replace("'", "'\"'\"'")
    return text


def command(text: str, env: Mapping[str, str]) -> str:
    """Shell text with each secret `export NAME=value` of `env` replaced (at any nesting level
    the launch-environment script reaches: plain, in `bash -c '...'`, or one level deeper)."""
    for name, val in secrets(env).items():
        plain = f"export {name}={shlex.quote(val)}"
        for depth in (2, 1, 0):
            text = text.replace(_nested(plain, depth), f"export {name}={REDACTED}")
    return _long_shapes(text)


def free_text(text: str, values: Iterable[str]) -> str:
    """Text with every occurrence of the given secret values replaced."""
    for v in sorted({v for v in values if len(v) >= MIN_VALUE_LEN}, key=len, reverse=True):
        text = text.replace(v, REDACTED)
    return text


def output(text: str, env: Mapping[str, str]) -> str:
    """A probe's stdout or stderr: `env -0` records by name, the inventory's secret values anywhere,
    secret-shaped values anywhere."""
    return _long_shapes(free_text(env0(text), secrets(env).values()))


def deep(obj: Any, env: Mapping[str, str]) -> Any:
    """Every string inside `obj` (dicts, lists, tuples) redacted as shell text and as output; a
    mapping's value under a secret-named variable (an upper-case name) replaced outright."""
    if isinstance(obj, str):
        return output(command(obj, env), env)
    if isinstance(obj, Mapping):
        return {k: REDACTED if isinstance(k, str) and k.isupper() and is_secret(k) and isinstance(v, str) and v
                else deep(v, env) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(deep(v, env) for v in obj)
    return obj
