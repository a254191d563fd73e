"""tradvsync's orchestrator-side hook: `transport: mcast` needs an IP multicast group (`group`, default the first
declared); when the experiment declares none, the plan derives one named `group` (or `data`) with every member."""
from __future__ import annotations

from . import Adapter
from .pbcast import data_group

ADAPTER = Adapter(multicast_groups=lambda params, ctx: data_group(params, ctx, "transport"))
