"""Render `hccn_tool -i N ... -g` output and /etc/hccn.conf from a node's state dict.

Same split as npu-smi: Python renders once per state change, the sh script `cat`s. `-ping` is the
exception: it really pings (see tools/hccn_tool), so only its header and body grammar live there.
Grammar: docs/FORMATS.md §3.
"""
from __future__ import annotations

from typing import Any

ERR_DEVICE = "Get invalid device id.\n"
ERR_UNSUPPORTED = "The command is not supported on this product.\n"
ERR_MAJOR_TYPE = ('Get invalid major cmd type. The valid major cmd type should be "-a" or "-i".\n'
                  "Enter [ hccn_tool -h ] for more details.\n")
ERR_MAJOR = "Get invalid major cmd.\n"
ERR_NO_IP = "Get ipconf failed, because no ip was preset there!\n"
# A caller that is not root: hccn_check_usr_identify() ("only root user is legal") makes the command
# return UDA_TOOL_SYS_NOT_ACCESS, printed from the error table of the Ascend driver source
# (github.com/verylucky01/driver: src/custom/network/hccn/ascend910B/hccn_tool/cmd.c, err table;
# common/hccn_comm.c, hccn_check_usr_identify); docs/FORMATS.md §3.10 lists it.
ERR_NOT_ROOT = "permission denied: pls check this cmd run permission.\n"


def _kv(key: str, value: Any) -> str:
    return f"{key:<21}: {value}"


def render_link(d: dict[str, Any]) -> str:
    return f"link status: {d['link']}\n"


def render_net_health(d: dict[str, Any]) -> str:
    return f"net health status: {d['net_health']}\n"


def render_ip(d: dict[str, Any]) -> str:
    """Empty stdout when no IP is configured (as captured); the error goes to stderr."""
    return f"ipaddr:{d['ip']}\nnetmask:{d['netmask']}\n" if d["shown_ip"] else ""


def render_link_stat(state: dict[str, Any], d: dict[str, Any], prefix: str = "devid") -> str:
    p = f"[{prefix} {d['id']}]"
    lines = [f"{p}current time        : {state['now']}", f"{p}link up count       : {d['link_up_count']}"]
    if d["link_records"]:
        lines.append(f"{p}link change records :")
        lines += [f"{p}    {when}    {what}" for when, what in d["link_records"]]
    else:
        lines.append(f"{p}link change records : NA")
    return "\n".join(lines) + "\n"


def render_optical(o: dict[str, Any]) -> str:
    """A 4-lane QSFP module. An absent module prints NA readings (inferred: the one capture of
    `not present` still lists values, which looks assembled)."""
    present = o["present"]  # inferred: the NA readings of an absent module

    def val(fmt: str, x: float) -> str:
        return fmt.format(x) if present else "NA"

    lines = ["optical info:", _kv("present", "present" if present else "not present"),
             _kv("temperature", f"{o['temperature']} C" if present else "NA"),
             _kv("high power enable reg", "enabled" if present else "not enabled"),
             _kv("vendor name", o["vendor"] if present else "NA"),
             _kv("vendor part number", o["part"] if present else "NA"),
             _kv("vendor serial number", o["serial"] if present else "NA"),
             _kv("vendor org unique id", "0xac 0x4a 0x0" if present else "NA"),
             _kv("xsfp identifier", "QSFP+ or later" if present else "NA"),
             _kv("xsfp wave length", "850 nm" if present else "NA"),
             _kv("manufact date code", "2023.6.18" if present else "NA"),
             _kv("Vcc", val("{:.2f} mV", 3262.90))]
    for lane in range(len(o["tx"])):
        lines += [_kv(f"Tx Power{lane}", val("{:.4f} mW", o["tx"][lane])),
                  _kv(f"Rx Power{lane}", val("{:.4f} mW", o["rx"][lane]))]
    lines += [_kv("Vcc High Thres", "3465.00 mV"), _kv("Vcc Low Thres", "3135.00 mV"),
              _kv("Temp High Thres", "70 C"), _kv("Temp Low Thres", "0 C"),
              _kv("TxPower High Thres", "3.5481 mW"), _kv("TxPower Low Thres", "0.2818 mW"),
              _kv("RxPower High Thres", "3.5481 mW"), _kv("RxPower Low Thres", "0.1445 mW")]
    lines += [_kv(f"Tx Bias{lane}", val("{:.4f} mA", b)) for lane, b in enumerate(o["bias"])]
    lines += [_kv("Tx Los Flag", o["tx_los"] if present else "NA"),
              _kv("Rx Los Flag", o["rx_los"] if present else "NA"),
              _kv("Tx LoL Flag", o["tx_lol"] if present else "NA"),
              _kv("Rx LoL Flag", o["rx_lol"] if present else "NA")]
    lines += [_kv(f"Host SNR Lane{lane}", "not supported") for lane in range(len(o["snr"]))]
    lines += [_kv(f"Media SNR Lane{lane}", val("{:.4f} dB", s)) for lane, s in enumerate(o["snr"])]
    return "\n".join(lines) + "\n"


def render_tls(d: dict[str, Any]) -> str:
    sw, pre, days = d["tls"]
    # The switch line is as captured; inferred: the expiration-status line (DRV format string).
    return (f"dev_id:{d['id']}, tls switch[{sw}](0:disable, 1:enable), tls preconfigured[{pre}](0:non-preset, "
            f"1:preset), tls alarm time threshold[{days}]days\n"
            f"dev_id:{d['id']}, tls expiration status[0](0:normal, 1:near expiration, 2:has expired)\n")


def render_fec(d: dict[str, Any]) -> str:
    return f"fec mode: {d['fec']}\n"


def render_speed(d: dict[str, Any]) -> str:
    # DRV format strings (no capture of either line)
    return f"Speed: {d['speed']} Mb/s\n" if d["link"] == "UP" else "Speed: Unknown!\n"


def render_stat(d: dict[str, Any]) -> str:
    # inferred: which counters a full -stat -g lists (captures are elided); the key:value form is captured
    keys = ["mac_tx_mac_pause_num", "mac_rx_mac_pause_num", "mac_tx_pfc_pkt_num", "mac_rx_pfc_pkt_num",
            "roce_rx_err_pkt_num", "roce_tx_err_pkt_num", "roce_qp_status_err_num"]
    lines = ["packet statistics:"] + [f"{k}:0" for k in keys]
    lines += [f"nic_tx_all_pkg_num:{122404 + d['id']}", f"nic_rx_all_pkg_num:{6414803 + d['id']}"]
    return "\n".join(lines) + "\n"


def render_device(state: dict[str, Any], d: dict[str, Any]) -> dict[str, str]:
    """Files under out/hccn/<id>/: <cmd> is stdout, <cmd>.err (if present) is stderr + exit 1."""
    files = {"link": render_link(d), "net_health": render_net_health(d), "ip": render_ip(d),
             "link_stat": render_link_stat(state, d), "optical": render_optical(d["optical"]),
             "tls": render_tls(d), "fec": render_fec(d), "speed": render_speed(d), "stat": render_stat(d),
             "addr": d["ip"] + "\n"}
    if not d["shown_ip"]:
        files["ip.err"] = ERR_NO_IP
    return files


def render_hccn_conf(state: dict[str, Any]) -> str | None:
    """/etc/hccn.conf as hccn_tool writes it: address_N / netmask_N per device."""
    conf = state.get("hccn_conf")
    if not conf:
        return None
    masks = {str(d["id"]): d["netmask"] for d in state["devices"]}
    lines = []
    for dev in sorted(conf, key=int):
        lines += [f"address_{dev}={conf[dev]}", f"netmask_{dev}={masks.get(dev, '255.255.0.0')}"]
    return "\n".join(lines) + "\n"
