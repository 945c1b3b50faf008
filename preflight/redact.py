"""The one redaction rule of every output preflight writes (reports, `--record` recordings,
inventory error messages): the value of a secret-named variable or key is replaced by REDACTED.

A name is secret when it looks like one (PASS, SECRET, TOKEN, CREDENTIAL, PRIVATE, AUTH, a name
ending in _KEY or KEY itself), the convention of docs/SPEC.md "where secrets are redacted". The
name stays readable, so a report still says *which* variable is set; only its value is hidden.
"""
from __future__ import annotations

import re
import shlex
from typing import Mapping

SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$|^KEY$|AUTH", re.I)
REDACTED = "********"
# `export NAME=value` as the launch-environment script writes it (value shell-quoted, to `;`)
_EXPORT = re.compile(r"\bexport ((?:[A-Za-z_][A-Za-z0-9_]*)=(?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s;'\"]+)+)")


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def value(name: str, val: str) -> str:
    """`val`, or the marker when `name` is secret."""
    return REDACTED if is_secret(name) else val


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """A mapping safe to show: values of secret-looking names replaced, sorted by name."""
    return {k: value(k, v) for k, v in sorted(env.items())}


def env0(text: str) -> str:
    """`env -0` output (NAME=value records, NUL-separated) with secret values replaced."""
    items = []
    for item in text.split("\0"):
        key, sep, val = item.partition("=")
        items.append(f"{key}={REDACTED}" if sep and key and is_secret(key) else item)
    return "\0".join(items)


def _export(m: re.Match) -> str:
    name, _, quoted = m.group(1).partition("=")
    try:
        shlex.split(quoted)
    except ValueError:
        return m.group(0)
    return f"export {name}={REDACTED}" if is_secret(name) else m.group(0)


def shell_text(text: str) -> str:
    """Shell text (a probe command, possibly quoted inside `bash -c '...'`) with the values of
    secret-named `export NAME=value` assignments replaced."""
    # the launch-environment script sits inside `bash -c '<script>'`; its own quotes then read
    # as '"'"' sequences: redact in the unquoted script, then quote it back
    try:
        words = shlex.split(text)
    except ValueError:
        words = []
    out = _EXPORT.sub(_export, text)
    for w in words:
        if "export " in w:
            red = _EXPORT.sub(_export, w)
            if red != w:
                out = out.replace(shlex.quote(w), shlex.quote(red))
    return out
