"""`ansible_ssh_common_args` / `ansible_ssh_extra_args` as OpenSSH reads them, for preflight's SSH.

Ansible appends these words to its `ssh` command line (docs.ansible.com, ssh connection plugin,
`ssh_common_args`, `ssh_extra_args`); this is how many sites reach nodes behind a bastion. What
decides where and as whom preflight connects is honoured (table HONOURED, option -> node key);
what only tunes OpenSSH's own client is ignored, by name (IGNORED); anything else is refused with
the variable's name, because dialling the node another way than the operator wrote is worse than
stopping. OpenSSH keeps the first value given for an option (ssh_config(5)), so does this.
"""
from __future__ import annotations

import shlex
from typing import Any, Callable

from .errors import InventoryError

# ssh_config keyword (lower case) -> node key. `-J`, `-p`, `-i`, `-l` are the same options.
HONOURED = {"proxyjump": "proxy_jump", "port": "port", "user": "user", "identityfile": "identity_file",
            "stricthostkeychecking": "host_key_policy", "userknownhostsfile": "known_hosts",
            "connecttimeout": "connect_timeout"}
FLAG_OPTIONS = {"J": "proxyjump", "p": "port", "i": "identityfile", "l": "user"}
# Keywords that tune OpenSSH's own client (multiplexing, keep-alives, logging, algorithm lists,
# authentication methods other than keys) and change neither the host reached nor the account:
# paramiko negotiates its own algorithms, and preflight authenticates with keys only.
IGNORED = frozenset({
    "controlmaster", "controlpersist", "controlpath", "serveraliveinterval", "serveralivecountmax",
    "tcpkeepalive", "compression", "loglevel", "forwardagent", "forwardx11", "forwardx11trusted",
    "identitiesonly", "preferredauthentications", "pubkeyauthentication", "passwordauthentication",
    "kbdinteractiveauthentication", "challengeresponseauthentication", "gssapiauthentication",
    "gssapidelegatecredentials", "batchmode", "checkhostip", "hashknownhosts", "addkeystoagent",
    "requesttty", "visualhostkey", "updatehostkeys", "connectionattempts", "hostkeyalgorithms",
    "pubkeyacceptedkeytypes", "pubkeyacceptedalgorithms", "kexalgorithms", "ciphers", "macs",
    "globalknownhostsfile", "addressfamily", "ipqos", "escapechar", "exitonforwardfailure",
    "nohostauthenticationforlocalhost", "loglevel", "rekeylimit", "verifyhostkeydns",
})
# ssh(1) flags without an argument that do not change where or as whom (-C compression, -q quiet,
# -v verbose, -T/-t tty, -A/-a agent forwarding, -x/-X/-Y X11, -4/-6 address family, -n, -k/-K GSSAPI).
IGNORED_FLAGS = frozenset("CqvTtAaxXY46nkKNfGgMsV")
# ssh(1) flags that take an argument and are only local plumbing (-E log file, -S control socket,
# -c cipher, -m MAC, -e escape char, -L/-R/-D forwardings the session never uses).
IGNORED_WITH_ARG = frozenset("EScmeLRD")
# StrictHostKeyChecking -> host_key_policy; `ask` would prompt, which a batch run cannot: strict.
STRICT = {"yes": "strict", "ask": "strict", "accept-new": "accept-new", "no": "off", "off": "off"}


def parse(value: Any, var: str, fail: Callable[[str], InventoryError]) -> dict[str, Any]:
    """The node settings the words of `value` give; `fail(message)` builds the file:line error."""
    if not isinstance(value, str):
        raise fail(f"{var}: expected a string of ssh arguments, got {value!r}")
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise fail(f"{var}: cannot split {value!r} as ssh arguments: {exc}") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-") or len(w) < 2:
            raise fail(f"{var}: {w!r} is not an ssh option; preflight honours -J, -p, -i, -l and -o Keyword=value")
        flag, rest = w[1], w[2:]
        if flag in IGNORED_FLAGS and not rest:
            i += 1
            continue
        if flag in IGNORED_FLAGS and all(c in IGNORED_FLAGS for c in rest):  # -Cq
            i += 1
            continue
        if flag == "o" or flag in FLAG_OPTIONS or flag in IGNORED_WITH_ARG:
            arg = rest or (words[i + 1] if i + 1 < len(words) else None)
            if arg is None:
                raise fail(f"{var}: {w} needs an argument")
            i += 1 if rest else 2
            if flag in IGNORED_WITH_ARG:
                continue
            if flag == "o":
                key, _, val = arg.replace("=", " ", 1).partition(" ")
                key, val = key.strip().lower(), val.strip()
                shown = f"-o {arg}"
            else:
                key, val, shown = FLAG_OPTIONS[flag], arg, f"-{flag} {arg}"
            _option(out, key, val, shown, var, fail)
            continue
        raise fail(f"{var}: {w}: preflight cannot honour this ssh option; it honours -J, -p, -i, -l and "
                   f"-o ProxyJump/Port/User/IdentityFile/StrictHostKeyChecking/UserKnownHostsFile/ConnectTimeout")
    return out


def _option(out: dict[str, Any], key: str, val: str, shown: str, var: str,
            fail: Callable[[str], InventoryError]) -> None:
    if key in IGNORED:
        return
    if key == "proxycommand":
        if val.lower() == "none":
            return
        raise fail(f"{var}: {shown}: preflight cannot run a ProxyCommand; reach the bastion with "
                   f"-J host (or -o ProxyJump=host) instead, which preflight honours")
    if key not in HONOURED:
        raise fail(f"{var}: {shown}: preflight cannot honour the ssh option {key!r}")
    node_key = HONOURED[key]
    if node_key in out:  # OpenSSH: the first value obtained is used
        return
    if node_key == "port":
        if not val.isdigit() or not 0 < int(val) < 65536:
            raise fail(f"{var}: {shown}: port {val!r} is not a number from 1 to 65535")
        out[node_key] = int(val)
    elif node_key == "connect_timeout":
        if not val.isdigit() or int(val) < 1:
            raise fail(f"{var}: {shown}: ConnectTimeout {val!r} is not a positive number of seconds")
        out[node_key] = int(val)
    elif node_key == "host_key_policy":
        if val.lower() not in STRICT:
            raise fail(f"{var}: {shown}: StrictHostKeyChecking {val!r} is not one of {', '.join(STRICT)}")
        out[node_key] = STRICT[val.lower()]
    elif node_key == "known_hosts":
        out[node_key] = val.split()[0] if val.split() else val
    elif node_key == "proxy_jump" and val.lower() == "none":
        return
    else:
        out[node_key] = val
