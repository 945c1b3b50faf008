"""SSH transport on paramiko: one connection per node, one exec per batch.

Why not SSHClient: we open the socket ourselves to set TCP_NODELAY (paramiko does not, and each
channel then stalls ~40 ms, docs/PERFORMANCE.md), keep connect, banner and auth timeouts apart, verify
host keys against a known_hosts parsed once, and never prompt (BatchMode semantics).
"""
from __future__ import annotations

import base64
import errno
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..model import CommandOutput, NodeStateKind
from ..node import JumpHop, Node, parse_jump
from . import ConnectError
from .batch import ProbeSpec, remote_command
from .hostkeys import HostKeyRejected, KnownHosts
from .stream import POLL_S, Batcher

# paramiko logs every failed handshake at ERROR with its traceback (~21 lines a node); with no handler
# Python's last-resort handler prints that on stderr. The reason is in the report; --debug shows the log.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_KEY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
RETRY_DELAYS_S = (0.2, 0.6)  # connection-level failures only (refused, reset), never auth/host key
_RETRYABLE = (errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED)
_LOCAL_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # this host's, not the node's


class _DeadlinePacketizer(paramiko.Packetizer):
    """The handshake's time limit as a deadline the transport thread reads, not the threading.Timer
    paramiko starts for every handshake: a thread per connection, about 0.3 ms of client CPU to
    start and cancel, left running until it fires when the handshake fails. The transport thread
    looks at it each time it wakes (data, or every _active_check_timeout)."""

    _deadline: float | None = None
    _done = False

    def start_handshake(self, timeout: float) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + float(timeout)

    def handshake_timed_out(self) -> bool:
        return self._deadline is not None and not self._done and time.monotonic() >= self._deadline

    def complete_handshake(self) -> None:
        if self._deadline is not None:
            self._done = True


class _QuietTransport(paramiko.Transport):
    """paramiko wakes each connection's thread every 0.1 s to look at its `active` flag: with 128
    connections held open for a run that is most of the client's CPU. close() shuts the socket, so
    a slower check costs nothing in responsiveness."""

    _active_check_timeout = 2.0

    def __init__(self, sock) -> None:
        super().__init__(sock)
        self.packetizer.__class__ = _DeadlinePacketizer  # built by Transport.__init__; same state, own timer


@dataclass(frozen=True)
class _Key:
    label: str
    key: paramiko.PKey


class KeyStore:
    """Client keys loaded once and shared (key files, then ssh-agent). Never prompts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, list[_Key] | str] = {}
        self._agent: list[_Key] | None = None
        self._agent_lock = threading.Lock()

    def for_node(self, node: Node) -> tuple[list[_Key], list[str]]:
        """Keys to offer and the problems met (an encrypted key without agent, say)."""
        files = [node.identity_file] if node.identity_file else list(DEFAULT_KEY_FILES)
        keys: list[_Key] = []
        problems: list[str] = []
        for f in files:
            loaded = self._file(os.path.expanduser(f), explicit=bool(node.identity_file))
            if isinstance(loaded, str):
                problems.append(loaded)
            else:
                keys.extend(loaded)
        agent = self._agent_keys()
        if node.identities_only:  # as OpenSSH: an agent key only when it is the configured identity's own
            own = _public_blobs(files)
            agent = [k for k in agent if k.key.asbytes() in own]
        keys.extend(agent)
        return keys, problems

    def _file(self, path: str, explicit: bool) -> list[_Key] | str:
        with self._lock:
            if path not in self._files:
                self._files[path] = self._load(path, explicit)
            return self._files[path]

    @staticmethod
    def _load(path: str, explicit: bool) -> list[_Key] | str:
        if not os.path.exists(path):
            return f"identity file {path} not found" if explicit else []
        try:
            return [_Key(path, paramiko.PKey.from_path(path))]
        except paramiko.PasswordRequiredException:
            return _encrypted(path)
        except TypeError as exc:  # paramiko >= 3.2 lets cryptography's "password was not given" through
            if "password" not in str(exc).lower():
                raise
            return _encrypted(path)
        except (paramiko.SSHException, OSError, ValueError) as exc:
            return f"cannot read {path}: {exc}"

    def _agent_keys(self) -> list[_Key]:
        with self._lock:
            if self._agent is None:
                try:
                    agent_keys = paramiko.Agent().get_keys() if os.environ.get("SSH_AUTH_SOCK") else ()
                except paramiko.SSHException:
                    agent_keys = ()
                self._agent = [_Key(f"agent key {k.get_name()}", _serialised(k, self._agent_lock)) for k in agent_keys]
            return self._agent


def _public_blobs(files: list[str]) -> set[bytes]:
    """The public key blobs of the identity files (from their `.pub` next to them)."""
    blobs = set()
    for f in files:
        try:
            text = Path(os.path.expanduser(f) + ".pub").read_text()
            blobs.add(base64.b64decode(text.split()[1]))
        except (OSError, IndexError, ValueError):
            continue
    return blobs


class _ChannelStream:
    """The driver's exec channel as a Stream (paramiko errors become OSError)."""

    def __init__(self, transport: paramiko.Transport, node: Node, script: str):
        try:
            self.chan = transport.open_session(timeout=node.connect_timeout)
            self.chan.settimeout(POLL_S)
            command, driver = remote_command(script)
            self.chan.exec_command(command)
            self.chan.sendall(driver)
        except (paramiko.SSHException, socket.timeout) as exc:
            raise OSError(str(exc) or "send failed") from None

    def send(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except (paramiko.SSHException, socket.timeout) as exc:
            raise OSError(str(exc) or "send failed") from None

    def read(self) -> bytes | None:
        c = self.chan
        try:
            while c.recv_stderr_ready():  # the login shell's own stderr: drain so the window never fills
                c.recv_stderr(65536)
            data = c.recv(65536)
        except socket.timeout:
            return None
        except paramiko.SSHException as exc:
            raise OSError(str(exc)) from None
        if data == b"" and c.recv_stderr_ready():
            return None
        return data

    def close(self) -> None:
        self.chan.close()


def _encrypted(path: str) -> str:
    """An encrypted key is used through ssh-agent, never by asking for its passphrase."""
    return (f"{path} is encrypted (passphrase-protected) and preflight never prompts: add it to ssh-agent "
            f"(ssh-add {path}), whose keys preflight uses")


def _serialised(key: paramiko.AgentKey, lock: threading.Lock) -> paramiko.AgentKey:
    """paramiko talks to the agent over one socket with no locking: 64 threads signing at once
    interleave their messages ("lost ssh-agent"). One signature at a time (~1 ms each)."""
    sign = key.sign_ssh_data

    def locked(*args, **kw):
        with lock:
            return sign(*args, **kw)

    key.sign_ssh_data = locked  # type: ignore[method-assign]
    return key


class SSHSession:
    def __init__(self, transport: paramiko.Transport, node: Node):
        self.transport = transport
        self.node = node
        self.batcher = Batcher(lambda script: _ChannelStream(transport, node, script))

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        return self.batcher.run(probes, cancel)

    def close(self) -> None:
        self.batcher.close()
        # paramiko's close() does not join its reader thread once the packetizer is closed: the
        # thread leaves only when its blocked recv times out. A shutdown wakes that recv at once,
        # and the join below is short: a run over more nodes than --forks then holds about --forks
        # transport threads, not every connection it closed in the last moments (82-96 threads at
        # 160 nodes on 16 forks, where the test allows 64).
        try:
            self.transport.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError, EOFError):  # already gone; a jump channel closes below
            pass
        self.transport.close()
        if self.transport is not threading.current_thread():
            self.transport.join(0.2)  # woken above: it ends in milliseconds


class SSHTransport:
    def __init__(self) -> None:
        self.keys = KeyStore()
        self._jumps: dict[tuple[JumpHop, ...], SSHSession] = {}
        self._jump_lock = threading.Lock()
        self._sessions: list[SSHSession] = []
        self._handshaking: set[paramiko.Transport] = set()
        self._live_lock = threading.Lock()

    def connect(self, node: Node, cancel: threading.Event) -> SSHSession:
        sock = self._socket(node, cancel)
        session = self._handshake(node, sock, node.host)
        with self._live_lock:  # closed sessions dropped: a 1024-node run keeps only what is open
            self._sessions = [s for s in self._sessions if s.transport.is_active()] + [session]
        return session

    def abort(self) -> None:
        """End every handshake still waiting (a silent sshd): its worker gets a ConnectError now,
        not after connect + banner timeout."""
        with self._live_lock:
            waiting = list(self._handshaking)
        for t in waiting:
            t.close()

    def close(self) -> None:
        self.abort()
        with self._live_lock:
            sessions = self._sessions + list(self._jumps.values())
        for s in sessions:
            s.close()

    # -- TCP
    def _socket(self, node: Node, cancel: threading.Event):
        if node.proxy_jump:
            return self._via_jump(node)
        for attempt, delay in enumerate((*RETRY_DELAYS_S, None)):
            try:
                sock = socket.create_connection((node.host, node.port), timeout=node.connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except socket.gaierror as exc:
                raise ConnectError(NodeStateKind.UNREACHABLE, f"cannot resolve {node.host}: {exc.strerror}") from None
            except socket.timeout:
                raise ConnectError(NodeStateKind.UNREACHABLE,
                                   f"{node.host}:{node.port}: no answer within {node.connect_timeout:g}s "
                                   f"(connect timeout; host down or packets dropped)") from None
            except OSError as exc:
                if exc.errno in _LOCAL_LIMITS:
                    raise  # never "unreachable": the runner says which limit (exit 4)
                if exc.errno in _RETRYABLE and delay is not None and not cancel.is_set():
                    time.sleep(delay)
                    continue
                what = {errno.ECONNREFUSED: "connection refused (is sshd running on that port?)",
                        errno.EHOSTUNREACH: "no route to host", errno.ENETUNREACH: "network unreachable",
                        errno.ECONNRESET: "connection reset"}.get(exc.errno, exc.strerror or str(exc))
                raise ConnectError(NodeStateKind.UNREACHABLE, f"{node.host}:{node.port}: {what}") from None
        raise AssertionError("unreachable")

    def _via_jump(self, node: Node):
        """ProxyJump as OpenSSH does it: a connection to the first hop, each further hop reached by a
        direct-tcpip channel through the one before, the node through the last. Each prefix of the
        chain is one shared connection (128 nodes behind one bastion: one connection to it)."""
        spec = node.proxy_jump or ""
        hops = node.jump_hops or parse_jump(spec)  # validated at load: a ValueError here is a bug
        prev: SSHSession | None = None
        for i, hop in enumerate(hops):
            key = hops[: i + 1]
            with self._jump_lock:
                jump = self._jumps.get(key)
                if jump is None or not jump.transport.is_active():
                    jnode = Node(name=f"jump {hop.host}", host=hop.host, port=hop.port, user=hop.user or node.user,
                                 identity_file=hop.identity_file or node.identity_file, known_hosts=node.known_hosts,
                                 host_key_policy=node.host_key_policy, connect_timeout=node.connect_timeout,
                                 banner_timeout=node.banner_timeout, auth_timeout=node.auth_timeout)
                    try:
                        sock = (self._socket(jnode, threading.Event()) if prev is None else
                                self._channel(prev, hop.host, hop.port, node, spec))
                        jump = self._handshake(jnode, sock, hop.host)
                    except ConnectError as exc:
                        which = spec if len(hops) == 1 else f"{hop.host} (hop {i + 1} of {spec})"
                        raise ConnectError(NodeStateKind.UNREACHABLE, f"jump host {which}: {exc.reason}") from None
                    self._jumps[key] = jump
            prev = jump
        assert prev is not None, "parse_jump returns at least one hop"
        return self._channel(prev, node.host, node.port, node, spec)

    @staticmethod
    def _channel(via: SSHSession, host: str, port: int, node: Node, spec: str):
        try:
            return via.transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0),
                                              timeout=node.connect_timeout)
        except (paramiko.SSHException, OSError) as exc:
            raise ConnectError(NodeStateKind.UNREACHABLE,
                               f"via jump host {spec}: cannot reach {host}:{port}: {exc}") from None

    # -- SSH
    def _handshake(self, node: Node, sock, host: str) -> SSHSession:
        t = _QuietTransport(sock)
        with self._live_lock:
            self._handshaking.add(t)
        try:
            return self._negotiate(t, node, host)
        finally:
            with self._live_lock:
                self._handshaking.discard(t)

    def _negotiate(self, t: paramiko.Transport, node: Node, host: str) -> SSHSession:
        t.banner_timeout = node.banner_timeout
        t.auth_timeout = node.auth_timeout
        t.handshake_timeout = node.banner_timeout + node.connect_timeout
        opts = t.get_security_options()
        opts.ciphers = _gcm_first(opts.ciphers)
        known = KnownHosts.get(node.known_hosts)
        wanted = known.key_types(host, node.port)
        if wanted and node.host_key_policy != "off":
            offered = [k for k in opts.key_types if k in wanted or _base_type(k) in wanted]
            if offered:
                opts.key_types = offered
        try:
            t.start_client(timeout=node.banner_timeout + node.connect_timeout)
        except paramiko.SSHException as exc:
            t.close()
            raise ConnectError(NodeStateKind.UNREACHABLE, f"{node.host}:{node.port}: {_handshake_failure(exc, node)}") \
                from None
        except (OSError, EOFError) as exc:
            t.close()
            raise ConnectError(NodeStateKind.UNREACHABLE, f"{node.host}:{node.port}: connection lost during "
                                                          f"handshake ({exc or type(exc).__name__})") from None
        if not t.is_active() or not t.initial_kex_done:  # start_client's own time limit returns quietly
            t.close()
            raise ConnectError(NodeStateKind.UNREACHABLE,
                               f"{node.host}:{node.port}: sshd sent its banner but finished no key exchange within "
                               f"{t.handshake_timeout:g}s (an overloaded sshd, or something holding the connection)")
        try:
            known.verify(host, node.port, t.get_remote_server_key(), node.host_key_policy)
        except HostKeyRejected as exc:
            t.close()
            raise ConnectError(NodeStateKind.HOSTKEY_REJECTED, str(exc)) from None
        self._auth(t, node)
        return SSHSession(t, node)

    def _auth(self, t: paramiko.Transport, node: Node) -> None:
        user = node.user or _local_user()
        keys, problems = self.keys.for_node(node)
        tried: list[str] = []
        for k in keys:
            try:
                t.auth_publickey(user, k.key)
                if t.is_authenticated():
                    return
            except paramiko.AuthenticationException as exc:
                if str(exc) == AUTH_TIMEOUT:  # paramiko's auth_handler: no answer in auth_timeout
                    t.close()
                    raise ConnectError(NodeStateKind.TIMEOUT,
                                       f"{user}@{node.host}:{node.port}: no answer to authentication within "
                                       f"{node.auth_timeout:g}s (auth_timeout; the server may be stuck on a "
                                       f"PAM, LDAP or DNS lookup)") from None
                tried.append(k.label)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                t.close()
                raise ConnectError(NodeStateKind.UNREACHABLE, f"{user}@{node.host}: connection lost during "
                                                              f"authentication ({exc})") from None
        t.close()
        detail = f"public key rejected (tried {', '.join(tried)})" if tried else "no usable key"
        if problems:
            detail += "; " + "; ".join(problems)
        raise ConnectError(NodeStateKind.AUTH_FAILED, f"{user}@{node.host}:{node.port}: {detail}")


AUTH_TIMEOUT = "Authentication timeout."  # paramiko.auth_handler's words (3.4 to 5.x), not a rejection


def _handshake_failure(exc: paramiko.SSHException, node: Node) -> str:
    """paramiko says "Error reading SSH protocol banner" both when the peer closed at once and when
    it stayed silent; the exception it wraps (EOFError, a reset, a timeout) tells them apart."""
    msg = str(exc)
    if "banner" not in msg.lower():
        return msg
    cause = exc.__context__ or exc.__cause__
    if isinstance(cause, (EOFError, ConnectionResetError, BrokenPipeError)):
        return ("connection closed by peer before the SSH banner (sshd refused the session: MaxStartups, "
                "tcp_wrappers, a firewall reset, or not an SSH server)")
    return f"no SSH banner within {node.banner_timeout:g}s (port open but not answering as sshd)"


SAFE_PARAMIKO = (3, 4)  # 3.4.0 has the strict-kex countermeasure for the Terrapin attack


def paramiko_warning(version: str | None = None) -> str | None:
    """The pin (paramiko>=3.4) can be bypassed (a distribution's package, --no-deps): say so."""
    version = version or paramiko.__version__
    try:
        have = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return None
    if have >= SAFE_PARAMIKO:
        return None
    return (f"paramiko {version} is older than 3.4 and open to the Terrapin attack (CVE-2023-48795); "
            f"upgrade it: pip install 'paramiko>=3.4'")


def _gcm_first(ciphers) -> list[str]:
    """AES-GCM carries its own MAC: paramiko then skips its per-packet pure-Python MAC compare."""
    gcm = [c for c in ciphers if c.endswith("-gcm@openssh.com")]
    return gcm + [c for c in ciphers if c not in gcm]


def _base_type(key_type: str) -> str:
    """rsa-sha2-512 and rsa-sha2-256 are signatures over an ssh-rsa key."""
    return "ssh-rsa" if key_type.startswith("rsa-sha2-") else key_type


def _local_user() -> str:
    import getpass

    return getpass.getuser()
