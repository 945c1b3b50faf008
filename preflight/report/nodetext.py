"""Node-supplied text is data in every output (docs/SPEC.md §6): control characters made visible.

Why: a summary, an error or a detail often quotes what a node printed (a process name, a
device's message, an ssh banner). A node, or whoever can name a process on it, chooses those
bytes: an ESC sequence would retitle or clear the operator's terminal from the table view, a CR
would overwrite a line of it, NUL or other C0 characters make JUnit invalid XML, and bidi
overrides reorder what a reader sees. So before any text format renders a report, every string
in it (names, summaries, remediations, details, errors) has each such character replaced by a
visible escape (`\\x1b`, `\\u202e`); newline and tab stay (findings wrap). Each format then adds
its own quoting (markdown escapes HTML, Nagios protects perfdata, Prometheus quotes labels, JUnit
and HTML escape markup). JSON keeps the exact text, escaped as JSON escapes it (json_report).
"""
from __future__ import annotations

import dataclasses
import operator
import re
from typing import Any

import orjson

from ..model import Report

# C0 but tab and newline, DEL, C1 (U+0080-U+009F: 0x9b is an 8-bit CSI), the bidi embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069), and the two XML non-characters; all but C0
# are what JSON writes raw (_RAW_RANGES).
_RAW_RANGES = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f{_RAW_RANGES}]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: str) -> str:
    """`text` with every control character (but newline and tab) as a visible escape."""
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


def one_line(text: str) -> str:
    """clean(), and newline and tab as spaces: for a line that must stay one line."""
    return clean(text).replace("\n", " ").replace("\t", " ")


# The same characters in orjson's output: C0 as \u00XX or \b \f \r (\n and \t are kept), the
# rest raw. A literal backslash before b, f or r also matches: that only costs a needless clean.
_JSON_CONTROL = re.compile(r'\\u00[01][0-9a-f]|\\u007f|\\[bfr]|' f"[{_RAW_RANGES}]")
# _JSON_CONTROL's two halves. One search for the whole alternation reads a report's encoding (11 MB
# at 1,000 nodes) at about 11 ns a character, 0.12 ms a node of every text format; the escapes
# begin with a backslash, which the engine finds at memory speed, and of the raw characters an
# ASCII text (nearly every report: Python knows it without reading the text) can only hold DEL.
_JSON_ESCAPED = re.compile(r'\\(?:u00[01][0-9a-f]|u007f|[bfr])')
_RAW = re.compile(f"[{_RAW_RANGES}]")


def _has_control(encoded: str) -> bool:
    """`_JSON_CONTROL.search(encoded) is not None`, found faster (tests/core/test_hostile_node_text.py
    holds the two to one answer)."""
    if _JSON_ESCAPED.search(encoded):
        return True
    return "\x7f" in encoded if encoded.isascii() else _RAW.search(encoded) is not None


def _dirty(obj: Any) -> bool:
    """Whether a string inside obj holds a control character (asked first: almost none does).
    One orjson encoding and one search: walking the details in Python cost 8x more (6,000 results)."""
    try:
        return _has_control(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode())
    except TypeError:  # what orjson refuses (ints past 64 bits, deep nesting): walk it
        if isinstance(obj, str):
            return _CONTROL.search(obj) is not None
        if isinstance(obj, dict):
            return any(_dirty(k) or _dirty(v) for k, v in obj.items())
        if isinstance(obj, (list, tuple)):
            return any(_dirty(v) for v in obj)
        return False


def _deep(obj: Any) -> Any:
    """obj with its strings cleaned (dicts, lists and tuples rebuilt)."""
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, dict):
        return {_deep(k): _deep(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_deep(v) for v in obj)
    return obj


def _cleaned(obj: Any, names: tuple[str, ...]) -> Any:
    """A dataclass with the named fields cleaned; itself when none needed it."""
    values = [getattr(obj, n) for n in names]
    if not _dirty(values):
        return obj
    return dataclasses.replace(obj, **{n: _deep(v) for n, v in zip(names, values)})


_RESULT = ("check", "node", "summary", "remediation", "details", "action", "ack")
_NODE = ("name", "host", "error")
_TOP = ("cluster", "inventory_path", "internal_errors")
_result_fields, _node_fields, _top_fields = (operator.attrgetter(*f) for f in (_RESULT, _NODE, _TOP))


def report(rep: Report) -> Report:
    """The report with every string it carries cleaned; `rep` itself when none needed it."""
    if not _dirty([_top_fields(rep), [_node_fields(n) for n in rep.nodes],
                   [_result_fields(r) for r in rep.results]]):
        return rep  # the usual case: one encoding and one search for the whole report
    results = tuple(_cleaned(r, _RESULT) for r in rep.results)
    nodes = tuple(_cleaned(n, _NODE) for n in rep.nodes)
    same = all(a is b for a, b in zip(results, rep.results)) and all(a is b for a, b in zip(nodes, rep.nodes))
    rep = rep if same else dataclasses.replace(rep, results=results, nodes=nodes)
    return _cleaned(rep, _TOP)
