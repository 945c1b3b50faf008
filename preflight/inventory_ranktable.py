"""An HCCL rank table as the inventory (docs/SPEC.md §2.11): its servers are the nodes, their devices
the NPUs.

Two ways in, both recognised from the content:

* the table itself (`preflight run hccl.json`): a JSON object with `server_list`; SSH settings then
  come from ssh_config alone;
* a small YAML that names it, for the SSH settings and checks a table cannot hold::

      rank_table: hccl.json        # relative to this file
      defaults: {user: ops, become: sudo, identity_file: ~/.ssh/id_ed25519}
      checks: {...}                # cluster:, job: as in any inventory; nodes: is refused here

Each server becomes a node named by its `server_id`, reached at its `server_id` when that is an IP
address (MindSpore's hccl_tools writes the server's IP there), else at its `host_ip` when the table
gives one (the HCCL guide's tables name servers `node_0` and give `host_ip`), else at the
`server_id` as a host name (DNS, or a `Host` in ssh_config); `devices` is the server's device count unless `defaults` sets it (a table may use 4 of
a node's 8 NPUs; npu.health counts the node's chips). Each node's launch environment gets
`RANK_TABLE_FILE` = the table's own path unless `defaults.env` sets it: the job reads the table at
that path on the nodes (shared storage, or the same copy on each), and so does `hccl.ranktable`.

The table is validated as HCCL validates it (preflight/ascend/ranktable.py); a table HCCL would
refuse is an inventory error, one line naming the file and why. The nodes are handed to the
ordinary inventory reader as a preflight inventory would list them, so every other rule (keys,
types, ranges, ssh_config) is the same code.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from .ascend import ranktable as rt
from .errors import InventoryError

KEY = "rank_table"
ENV = "RANK_TABLE_FILE"  # where HCCL (and the hccl.ranktable check) find the table
FORMAT = "rank-table"


def is_table_text(text: str) -> bool:
    """A JSON object naming server_list: the table itself (checked before any YAML reading, so a
    table that is not valid JSON is refused as a rank table, with JSON's line and column)."""
    return text.lstrip().startswith("{") and '"server_list"' in text


def names_table(doc: dict) -> bool:
    return KEY in doc


def read(ctx: Any, p: Path, text: str, doc: Any, mapping: Callable[[dict, int], Any],
         native: Callable[[Any, Any], tuple[list, dict]]) -> tuple[list, dict, rt.RankTable]:
    """-> (entries, top, table) through the inventory's own reader (`native`); `mapping(values, line)`
    builds the line-numbered mapping that reader takes; `doc` is the YAML that names the table, or
    None when `text` is the table."""
    if doc is None:
        table, line, wrapper = _table(lambda: rt.parse(text, str(p)), ""), 1, mapping({}, 1)
    else:
        line = doc.lines.get(KEY, doc.line)
        if "nodes" in doc:
            raise ctx.fail(doc, "nodes", f"either nodes or {KEY}, not both: the table's servers are the nodes")
        value = doc[KEY]
        if not isinstance(value, str) or not value.strip():
            raise ctx.fail(doc, KEY, "expected the path of an HCCL rank table (hccl.json)")
        target = p.parent / os.path.expanduser(value)
        table, wrapper = _table(lambda: rt.load(target), f"{p}:{line}: {KEY}: "), doc
    defaults = wrapper.get("defaults") if isinstance(wrapper.get("defaults"), dict) else {}  # else refused below
    env = {} if isinstance(defaults.get("env"), dict) and ENV in defaults["env"] else {"env": mapping({ENV: str(Path(table.path).resolve())}, line)}
    nodes = [mapping({**_node(s, line, ctx, defaults), **env}, line) for s in table.servers]
    out = mapping({**{k: v for k, v in wrapper.items() if k != KEY}, "nodes": nodes}, line)
    out.lines.update(getattr(wrapper, "lines", {}))
    entries, top = native(ctx, out)
    return entries, top, table


def _table(load: Callable[[], rt.RankTable], where: str) -> rt.RankTable:
    """The table, or an InventoryError: its one line (which names the table file) after `where`."""
    try:
        return load()
    except rt.RankTableError as exc:
        raise InventoryError(f"{where}{exc}") from None


def _node(s: rt.Server, line: int, ctx: Any, defaults: Any) -> dict[str, Any]:
    from .inventory import HOST_RE, NAME_RE  # the reader's own rules for names and addresses

    if not NAME_RE.fullmatch(s.server_id):
        raise InventoryError(f"{ctx.path}:{line}: {KEY}: server_id {s.server_id!r} is not usable as a node name "
                             f"(letters, digits, . _ -)")
    host = s.server_id if rt.is_ip(s.server_id) or not s.host_ip else s.host_ip
    if not HOST_RE.fullmatch(host):
        raise InventoryError(f"{ctx.path}:{line}: {KEY}: server {s.server_id}: {host!r} is not an address or host "
                             f"name (give the server a host_ip)")
    node = {"name": s.server_id, "host": host}
    if "devices" not in defaults:
        node["devices"] = len(s.devices)
    return node
