"""The experiment file's `multicast:` section (validated like the rest of the experiment, see orchestrator.spec).

    multicast:
      groups:
        - {name: data, address: 239.1.0.1, members: all}              # port 7001, every member may send
        - {name: ctl, address: 239.1.0.2, members: [h1, h5], port: 7100, senders: [h1]}
        - {name: feed, address: 239.1.0.3, members: [h2, h3], senders: [h9]}   # h9 sends only

Member names are checked against the plan (orchestrator.mcast.tree), which knows them.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_PORT = 7001
GROUP_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MULTICAST = ipaddress.IPv4Network("224.0.0.0/4")
LINK_LOCAL = ipaddress.IPv4Network("224.0.0.0/24")     # never forwarded by routers (IGMP, OSPF, ...)


class Strict(BaseModel):
    """As orchestrator.spec.Strict (which imports this module, so it cannot be imported from there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupSpec(Strict):
    name: str
    address: str
    members: Literal["all"] | list[str] = "all"
    # Who may send to the group (`all`: its members): a sender's node gets a (self,G) route; others' packets are
    # only delivered to themselves (the kernel does not forward them). A sender outside `members` sends only: it is
    # on the group's tree but receives nothing (QSM's senders into regions they do not belong to).
    senders: Literal["all"] | list[str] = "all"
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not GROUP_NAME_RE.match(v):
            raise ValueError(f"group name {v!r} is invalid: 1-64 characters a-z, 0-9, '-', '_', starting with a "
                             "letter")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            addr = ipaddress.IPv4Address(str(v))
        except ValueError:
            raise ValueError(f"{v!r} is not an IPv4 address") from None
        if addr not in MULTICAST:
            raise ValueError(f"{v} is not a multicast address (224.0.0.0/4)")
        if addr in LINK_LOCAL:
            raise ValueError(f"{v} is link-local multicast (224.0.0.0/24): routers never forward it; use e.g. "
                             "239.1.0.1")
        return str(addr)

    @field_validator("members", "senders")
    @classmethod
    def _names(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("an empty list: name at least one member, or `all`")
            dup = sorted({x for x in v if v.count(x) > 1})
            if dup:
                raise ValueError(f"{dup} listed twice")
        return v


class MulticastSpec(Strict):
    groups: list[GroupSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "MulticastSpec":
        for what in ("name", "address"):
            seen: set[str] = set()
            for g in self.groups:
                if getattr(g, what) in seen:
                    raise ValueError(f"two groups have the {what} {getattr(g, what)!r}")
                seen.add(getattr(g, what))
        return self
