"""The one redaction rule of every output preflight writes (reports, `--record` recordings,
inventory error messages): the value of a secret-named variable or key is replaced by REDACTED.

A name is secret when it looks like one (PASS, SECRET, TOKEN, CREDENTIAL, PRIVATE, AUTH, a name
ending in _KEY or KEY itself), the rule docs/SPEC.md states under "where secrets are redacted".
The name stays readable, so a report still says *which* variable is set; only its value is hidden.

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

SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$|^KEY$|AUTH", re.I)
REDACTED = "********"
ENV_RECORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MIN_VALUE_LEN = 6  # shorter secret values are not searched for in free text (they would hit noise)


def is_secret(name: str) -> bool:
    return _is_secret(str(name))


# The answer per name, kept: every node's environment (env -0, the launch environment) names the
# same few hundred variables, asked again for each node by the report, env.comm and the recorder.
@functools.lru_cache(maxsize=4096)
def _is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def value(name: str, val: Any) -> Any:
    """`val`, or the marker when `name` is secret."""
    return REDACTED if is_secret(name) else val


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """A mapping safe to show: values of secret-looking names replaced, sorted by name."""
    return {k: value(k, v) for k, v in sorted(env.items())}


def secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The secret-named entries of an environment (name -> value)."""
    return {k: v for k, v in env.items() if is_secret(k) and v}


def env0(text: str) -> str:
    """`env -0` output (NAME=value records, NUL-separated) with secret values replaced."""
    if "\0" not in text:
        return text
    items = []
    for item in text.split("\0"):
        key, sep, _ = item.partition("=")
        items.append(f"{key}={REDACTED}" if sep and ENV_RECORD.fullmatch(key) and is_secret(key) else item)
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
    return text


def free_text(text: str, values: Iterable[str]) -> str:
    """Text with every occurrence of the given secret values replaced."""
    for v in sorted({v for v in values if len(v) >= MIN_VALUE_LEN}, key=len, reverse=True):
        text = text.replace(v, REDACTED)
    return text


def output(text: str, env: Mapping[str, str]) -> str:
    """A probe's stdout or stderr: `env -0` records by name, the inventory's secret values anywhere."""
    return free_text(env0(text), secrets(env).values())


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
