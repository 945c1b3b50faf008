"""The one place terminal escapes and stray control characters leave a probe's output.

Why: vendor tools write terminal markup even into a pipe. A real H200's `nvidia-smi topo -m`
(driver 580, tests/fixtures/nvidia/nvidia-smi_topo_-m__H200_1gpu_ANSI_header_580__real-capture.txt)
wraps its header row in `ESC[4m ... ESC[0m` when stdout is a file; a parser looking for `GPU0` at a
word boundary then finds none. Node output is also hostile: an escape sequence shown in the
operator's terminal (evidence, a remediation quoting a line) could move the cursor, set the
window title (OSC) or hide text. So every probe's stdout and stderr are cleaned once, as they are
decoded (transport/batch.FrameParser), before any parser or report sees them; nothing downstream
keeps or shows the raw bytes (`bench/gpu_capture.sh` writes raw captures for fixtures).

Removed: CSI sequences (`ESC [ params intermediates final`: SGR colours, underline, cursor moves),
OSC sequences (`ESC ] ... BEL` or `... ESC \\`: titles, hyperlinks), other escape sequences
(`ESC ( B`, `ESC 7`, ...), the 8-bit C1 controls (U+0080-U+009F), and the C0 controls no vendor
format uses. Kept: TAB (`topo -m` separates cells with it), LF, CR (CRLF lines of some tools) and
NUL (`env -0`, preflight's own launch-environment probe, separates variables with it).
"""
from __future__ import annotations

import re

# The bytes that start something to remove, in UTF-8: C0 controls but TAB/LF/CR/NUL, DEL, and 0xC2
# (the lead byte of U+0080-U+00BF, the C1 controls among them). Most outputs hold none: then the
# text is decoded as is. bytes.translate finds them at about 1 ns a byte (74 KB of `nvidia-smi -q`:
# 78 us), a regex search over the decoded text at about 5 ns (350 us).
_SUSPECT = bytes([*range(1, 9), 0x0b, 0x0c, *range(0x0e, 0x20), 0x7f, 0xc2])
_STRIP = re.compile(
    "\x1b\\[[0-?]*[ -/]*[@-~]"               # CSI: ESC [ parameters, intermediates, final byte
    "|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?"  # OSC: ESC ] text, ended by BEL or ST (ESC \\), or cut short
    "|\x1b[ -/]*[0-~]"                        # other escape sequences (nF, Fp, Fe, Fs)
    "|[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # lone ESC, other C0 controls, DEL, C1 controls
)


def suspect(data: bytes) -> bool:
    """Whether `data` (a probe's raw stream) may hold something clean() removes."""
    return len(data.translate(None, _SUSPECT)) != len(data)


def clean(text: str) -> str:
    """`text` without terminal escape sequences and control characters other than TAB, LF, CR and NUL."""
    return _STRIP.sub("", text)
