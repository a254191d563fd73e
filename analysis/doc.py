"""A small document model rendered twice: Markdown (`report.md`) and self-contained HTML (`report.html`, figures
embedded), so both reports always say the same thing."""
from __future__ import annotations

import base64
import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str]
    warn: bool = False  # rendered as warnings


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
    note: str | None = None  # e.g. "first 20 of 2000 rows; all in metrics/x.csv"


@dataclass
class Figure:
    path: Path
    caption: str


@dataclass
class Doc:
    title: str
    blocks: list[Heading | Para | Bullets | Table | Figure] = field(default_factory=list)

    def add(self, *blocks: Heading | Para | Bullets | Table | Figure) -> None:
        self.blocks.extend(blocks)


def fmt(v: Any) -> str:
    """A cell: floats with 4 significant digits, 3 decimals below 1, 3 significant digits below 0.001; None as an
    em dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}" if abs(v) >= 1 else f"{v:.3f}" if abs(v) >= 1e-3 else f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def _md_cell(v: Any) -> str:
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Doc, base: Path) -> str:
    """Markdown; figure paths relative to `base` (the directory the .md is written to)."""
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * (b.level + 1)} {b.text}", ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {'**warning:** ' if b.warn else ''}{item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(b.columns) + " |")
            out.append("|" + "---|" * len(b.columns))
            out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in b.rows]
            out += (["", f"*{b.note}*"] if b.note else []) + [""]
        elif isinstance(b, Figure):
            out += [f"![{b.caption}]({os.path.relpath(b.path, base)})", "", f"*{b.caption}*", ""]
    return "\n".join(out)


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f0f0f0}td{text-align:right}td:first-child{text-align:left}.warn{color:#a40000}
figure{margin:1em 0}figcaption{font-style:italic;font-size:90%}img{max-width:100%}.note{font-size:85%;color:#555}"""


def _inline(text: str) -> str:
    """Escape, then the two Markdown inline forms the reports use: `code` and **bold**."""
    parts = html.escape(text).split("`")
    s = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = s.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def to_html(doc: Doc) -> str:
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(doc.title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level + 1}>{html.escape(b.text)}</h{b.level + 1}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            cls = " class='warn'" if b.warn else ""
            out.append(f"<ul{cls}>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(c)}</th>" for c in b.columns)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row) + "</tr>"
                           for row in b.rows)
            out.append(f"<table><tr>{head}</tr>{body}</table>")
            if b.note:
                out.append(f"<p class='note'>{_inline(b.note)}</p>")
        elif isinstance(b, Figure):
            data = base64.b64encode(b.path.read_bytes()).decode()
            out.append(f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(b.caption)}'>"
                       f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def write(doc: Doc, directory: Path, stem: str = "report") -> tuple[Path, Path]:
    md, page = directory / f"{stem}.md", directory / f"{stem}.html"
    md.write_text(to_markdown(doc, directory))
    page.write_text(to_html(doc))
    return md, page
