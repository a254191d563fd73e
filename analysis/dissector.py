"""A Wireshark Lua dissector generated from the wire registry (`gossipnode.wire.CODECS`): pure, registry in,
Lua text out (`orchestrator dissector --out FILE.lua` writes it).

Every registered protocol is dissected: the common envelope (`gossip.magic`, `gossip.version`,
`gossip.protocol` — the protocol's name — and `gossip.protocol_id`, `gossip.type` — the message type's name —
and `gossip.type_id`, `gossip.sender`, `gossip.length`), the protocol's own header (`gossip.<protocol>.<field>`,
e.g. `gossip.gsgc.seq`, `gossip.gsgc.round`, `gossip.direct.seq`) and each message type's body from its
`Layout` (`gossip.<protocol>.<field>`; arrays are one subtree whose items are that field, e.g. every entry of
GOSSIP's M is a `gossip.gsgc.M`). A field name used by two types of a protocol with different kinds is named
`gossip.<protocol>.<TYPE>.<field>` instead. Where the body does not fit its layout (or was not captured), the
message gets `gossip.error`.

The dissector is registered on ports: UDP unicast (7000), the multicast group ports (7001) and TCP (7000), where
the stream is cut into messages by the envelope's length with Wireshark's TCP reassembly (`dissect_tcp_pdus`),
so a frame shows every message it completes. Use it with

    tshark -X lua_script:gossip.lua -r run/pcaps/h1-any.pcap -Y 'gossip.type == "GOSSIP"'

or copy it to Wireshark's personal Lua plugins folder (Help → About → Folders).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from gossipnode import wire

_UINT = {"u8": 8, "u16": 16, "u32": 32}
_SIZE = {"u8": 1, "u16": 2, "u32": 4}


def _lua_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ident(*parts: str) -> str:
    return "f_" + "_".join(p.replace(".", "_") for p in parts)


class _Fields:
    """The ProtoFields of one protocol: one per field name (kinds must agree), else one per (type, name)."""

    def __init__(self, codec: wire.Codec) -> None:
        self.codec = codec
        kinds: dict[str, set[str]] = {}
        for f in codec.header:
            kinds.setdefault(f.name, set()).add(f.kind)
        for lay in codec.layouts:
            for f in lay.body:
                kinds.setdefault(f.name, set()).add(f.kind)
        self.shared = {name for name, k in kinds.items() if len(k) == 1}
        self.decls: dict[str, str] = {}      # lua identifier -> declaration

    def field(self, f: wire.F, type_name: str | None) -> str:
        """The Lua identifier of the ProtoField for `f` (declared on first use)."""
        proto = self.codec.name
        if f.name in self.shared or type_name is None:
            abbr, ident = f"gossip.{proto}.{f.name}", _ident(proto, f.name)
        else:
            abbr, ident = f"gossip.{proto}.{type_name}.{f.name}", _ident(proto, type_name, f.name)
        if ident not in self.decls:
            label = f.doc or f.name
            if f.kind in _UINT:
                decl = f"ProtoField.uint{_UINT[f.kind]}({_lua_str(abbr)}, {_lua_str(f'{f.name} ({label})' if f.doc else f.name)}, base.DEC)"
            elif f.kind == "bytes":
                decl = f"ProtoField.bytes({_lua_str(abbr)}, {_lua_str(f'{f.name} ({label})' if f.doc else f.name)})"
            else:
                raise ValueError(f"{proto}: field {f.name} has an unknown kind {f.kind!r}")
            self.decls[ident] = decl
        return ident


def _count_expr(f: wire.F) -> tuple[str, str]:
    """(Lua expression of the number of items — or of bytes for `bytes` fields — , what it means)."""
    c = f.count
    if c is None:
        return ("1", "one") if f.kind != "bytes" else ("0", "none")
    if isinstance(c, int):
        return str(c), str(c)
    if c == "rest":
        return "REST", "rest"
    if c.startswith("bits:"):
        name = c[5:]
        return f"math.floor(((v[{_lua_str(name)}] or 0) + 7) / 8)", f"bits of {name}"
    if "*" in c:
        name, k = c.split("*", 1)
        return f"(v[{_lua_str(name)}] or 0) * {int(k)}", c
    return f"(v[{_lua_str(c)}] or 0)", c


def _walk(fields: _Fields, items: Sequence[wire.F], type_name: str | None, indent: str) -> list[str]:
    """Lua statements that add `items` at `off` (advancing it), or set `err` and stop when the message is short."""
    out = []
    for f in items:
        ident = fields.field(f, type_name)
        count, _ = _count_expr(f)
        if f.kind == "bytes":
            out += [
                f"{indent}do",
                f"{indent}  local REST = stop - off",
                f"{indent}  local n = {count}",
                f"{indent}  if n < 0 or off + n > stop then return set_err(t, {_lua_str(f.name + ': beyond the message')}) end",
                f"{indent}  if off + n > cap then return set_err(t, {_lua_str(f.name + ': not captured')}) end",
                f"{indent}  if n > 0 then t:add({ident}, tvb(off, n)) end",
                f"{indent}  off = off + n",
                f"{indent}end",
            ]
            continue
        size = _SIZE[f.kind]
        if f.count is None:
            out += [
                f"{indent}if off + {size} > stop then return set_err(t, {_lua_str(f.name + ': beyond the message')}) end",
                f"{indent}if off + {size} > cap then return set_err(t, {_lua_str(f.name + ': not captured')}) end",
                f"{indent}v[{_lua_str(f.name)}] = tvb(off, {size}):uint()",
                f"{indent}t:add({ident}, tvb(off, {size}))",
                f"{indent}off = off + {size}",
            ]
        else:
            out += [
                f"{indent}do",
                f"{indent}  local REST = math.floor((stop - off) / {size})",
                f"{indent}  local n = {count}",
                f"{indent}  if n < 0 or off + n * {size} > stop then return set_err(t, {_lua_str(f.name + ': beyond the message')}) end",
                f"{indent}  if off + n * {size} > cap then return set_err(t, {_lua_str(f.name + ': not captured')}) end",
                f"{indent}  if n > 0 then",
                f"{indent}    local st = t:add(p_gossip, tvb(off, n * {size}), {_lua_str(f.name)} .. \" (\" .. n .. \" x {f.kind})\")",
                f"{indent}    for i = 0, n - 1 do st:add({ident}, tvb(off + i * {size}, {size})) end",
                f"{indent}  end",
                f"{indent}  off = off + n * {size}",
                f"{indent}end",
            ]
    return out


def generate(codecs: Iterable[wire.Codec] | None = None, udp_ports: Sequence[int] = (7000,),
             mcast_ports: Sequence[int] = (7001,), tcp_ports: Sequence[int] = (7000,)) -> str:
    """The Lua dissector for `codecs` (default: every registered protocol)."""
    codecs = sorted(wire.CODECS.values() if codecs is None else codecs, key=lambda c: c.id)
    lines = [
        "-- Wireshark dissector for the gossip testbed's wire (generated by analysis/dissector.py from the",
        "-- node's wire registry: do not edit; `orchestrator dissector --out FILE.lua` writes it again).",
        f"-- Protocols: {', '.join(f'{c.name} ({c.id})' for c in codecs)}. Envelope `!2sBBBHH` (magic GS,",
        f"-- version {wire.VERSION}, protocol, type, sender, length of the rest).",
        "",
        'local p_gossip = Proto("gossip", "Gossip testbed")',
        'local p_gossip_tcp = Proto("gossiptcp", "Gossip testbed over TCP")',
        f"local ENVELOPE = {wire.ENVELOPE_SIZE}",
        f"local VERSION = {wire.VERSION}",
        "local PROTOCOLS = {" + ", ".join(f"[{c.id}] = {_lua_str(c.name)}" for c in codecs) + "}",
        "local TYPES = {",
    ]
    for c in codecs:
        lines.append(f"  [{c.id}] = {{" + ", ".join(f"[{int(t)}] = {_lua_str(t.name)}" for t in c.types) + "},")
    lines += [
        "}",
        'local f_magic = ProtoField.string("gossip.magic", "Magic")',
        'local f_version = ProtoField.uint8("gossip.version", "Version", base.DEC)',
        'local f_protocol = ProtoField.string("gossip.protocol", "Protocol")',
        'local f_protocol_id = ProtoField.uint8("gossip.protocol_id", "Protocol id", base.DEC)',
        'local f_type = ProtoField.string("gossip.type", "Type")',
        'local f_type_id = ProtoField.uint8("gossip.type_id", "Type id", base.DEC)',
        'local f_sender = ProtoField.uint16("gossip.sender", "Sender", base.DEC)',
        'local f_length = ProtoField.uint16("gossip.length", "Length (bytes after the envelope)", base.DEC)',
        'local f_error = ProtoField.string("gossip.error", "Error")',
    ]
    generic = ["f_magic", "f_version", "f_protocol", "f_protocol_id", "f_type", "f_type_id", "f_sender",
               "f_length", "f_error"]
    bodies: list[str] = []
    all_fields: list[str] = []
    for c in codecs:
        fields = _Fields(c)
        body = [f"-- {c.name}: header {', '.join(f.name for f in c.header) or '(none)'}",
                f"local function body_{c.name}(tvb, t, mtype, off, stop, cap)",
                "  local v = {}"]
        body += _walk(fields, c.header, None, "  ")
        for i, lay in enumerate(c.layouts):
            body.append(f"  {'if' if i == 0 else 'elseif'} mtype == {int(lay.type)} then  -- {lay.name}"
                        + (f": {lay.doc}" if lay.doc else ""))
            body += _walk(fields, lay.body, lay.name, "    ")
        if c.layouts:
            body.append("  end")
        body += ['  if off ~= stop then return set_err(t, "body of " .. (stop - ENVELOPE) .. " bytes does not fit '
                 'its layout (" .. (off - ENVELOPE) .. " bytes)") end',
                 "  return true", "end", ""]
        lines += [f"local {ident} = {decl}" for ident, decl in fields.decls.items()]
        all_fields += list(fields.decls)
        bodies += body
    lines += ["p_gossip.fields = {" + ", ".join(generic + all_fields) + "}", ""]
    lines += [
        "local function set_err(t, msg)",
        "  t:add(f_error, msg)",
        "  return false",
        "end",
        "",
    ]
    lines += bodies
    lines.append("local BODIES = {" + ", ".join(f"[{c.id}] = body_{c.name}" for c in codecs) + "}")
    lines += [
        "",
        "-- One message at the start of tvb (a datagram, or one PDU of a TCP stream); returns its length or 0.",
        "local function dissect_message(tvb, pinfo, tree, datagram)",
        "  local cap = tvb:len()",
        "  local total = tvb:reported_length_remaining()",
        "  if cap < ENVELOPE or tvb(0, 2):string() ~= \"GS\" then return 0 end",
        "  local version, pid, mtype = tvb(2, 1):uint(), tvb(3, 1):uint(), tvb(4, 1):uint()",
        "  local sender, length = tvb(5, 2):uint(), tvb(7, 2):uint()",
        "  local pname = PROTOCOLS[pid]",
        "  local tname = pname and TYPES[pid][mtype]",
        "  if version ~= VERSION or not pname or not tname then return 0 end",
        "  local stop = ENVELOPE + length",
        "  local t = tree:add(p_gossip, tvb(0, math.min(cap, stop)), \"Gossip testbed, \" .. pname .. \" \" .. tname)",
        "  t:add(f_magic, tvb(0, 2))",
        "  t:add(f_version, tvb(2, 1))",
        "  t:add(f_protocol, tvb(3, 1), pname)",
        "  t:add(f_protocol_id, tvb(3, 1))",
        "  t:add(f_type, tvb(4, 1), tname)",
        "  t:add(f_type_id, tvb(4, 1))",
        "  t:add(f_sender, tvb(5, 2))",
        "  t:add(f_length, tvb(7, 2))",
        "  local what = pname .. \" \" .. tname .. \" from \" .. sender",
        "  if tostring(pinfo.cols.protocol) == \"GOSSIP\" then  -- a second message in this frame (TCP)",
        "    pinfo.cols.info:append(\"; \" .. what)",
        "  else",
        "    pinfo.cols.protocol:set(\"GOSSIP\")",
        "    pinfo.cols.info:set(what)",
        "  end",
        "  if datagram and total ~= stop then",
        "    set_err(t, \"the envelope says \" .. length .. \" bytes follow, the datagram carries \" .. (total - ENVELOPE))",
        "    return total",
        "  end",
        "  BODIES[pid](tvb, t, mtype, ENVELOPE, stop, cap)",
        "  return stop",
        "end",
        "",
        "function p_gossip.dissector(tvb, pinfo, tree)",
        "  return dissect_message(tvb, pinfo, tree, true)",
        "end",
        "",
        "local function pdu_length(tvb, pinfo, offset)",
        "  return ENVELOPE + tvb(offset + 7, 2):uint()",
        "end",
        "",
        "local function dissect_pdu(tvb, pinfo, tree)",
        "  return dissect_message(tvb, pinfo, tree, false)",
        "end",
        "",
        "function p_gossip_tcp.dissector(tvb, pinfo, tree)",
        "  dissect_tcp_pdus(tvb, tree, ENVELOPE, pdu_length, dissect_pdu, true)",
        "  return tvb:len()",
        "end",
        "",
        "local udp_table = DissectorTable.get(\"udp.port\")",
    ]
    for port in sorted(set(udp_ports) | set(mcast_ports)):
        lines.append(f"udp_table:add({int(port)}, p_gossip)")
    lines.append("local tcp_table = DissectorTable.get(\"tcp.port\")")
    for port in sorted(set(tcp_ports)):
        lines.append(f"tcp_table:add({int(port)}, p_gossip_tcp)")
    return "\n".join(lines) + "\n"
