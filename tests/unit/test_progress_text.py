"""The CLI's progress notes and status lines print their text as it is: never rich markup (a playbook's task note
`[machines_install] Copy the bundle` lost its tag; a path `[/tmp/x]` raised MarkupError and ended the command)."""
from __future__ import annotations

import io

from rich.console import Console

from orchestrator.clikit import BarProgress


def test_a_note_is_plain_text_whatever_brackets_it_holds():
    buf = io.StringIO()
    with BarProgress(Console(file=buf, width=200, color_system=None)) as progress:
        for line in ("  [machines_install] Copy the bundle", "cannot write [/tmp/x]: no space",
                     "WARNING: [bold]not bold[/]", 'errors {"h5": "control socket [Errno 2] No such file"}'):
            progress.note(line)
    text = buf.getvalue()
    for line in ("  [machines_install] Copy the bundle", "cannot write [/tmp/x]: no space",
                 "WARNING: [bold]not bold[/]", "[Errno 2]"):
        assert line in text, text
