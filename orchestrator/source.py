"""Input files (experiment, hosts) read, rendered and parsed the same way, and every problem located by one
helper (`Source`): `file:line: field.path: problem`, one line, exit 2, before anything is built. Pure apart from
reading the file."""
from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml
from jinja2.sandbox import SandboxedEnvironment, SecurityError
from pydantic import ValidationError

from orchestrator.errors import PlanError, SpecError

# --- loading --------------------------------------------------------------------------------------------------
#
# Every input file (experiment, hosts) goes the same way, so that bad input of any kind ends in one SpecError
# line (exit 2) before anything is built:
#   read_input      a regular file, at most MAX_INPUT_BYTES, UTF-8
#   render          sandboxed Jinja2, only when the file uses it (bounded output and time)
#   load_yaml       one document, no duplicate keys, bounded alias expansion, no recursion
#   pydantic, then the checks that need the plan (schedule targets and times)
# and every problem is located by one helper, `Source.error`: `file:line: field.path: problem`.

MAX_INPUT_BYTES = 512 << 10         # experiment files are a few kB, a hosts file of 1000 hosts ~120 kB
MAX_RENDERED_BYTES = 4 << 20       # what a template may render to
MAX_YAML_NODES = 1_000_000         # YAML nodes after alias expansion (a "billion laughs" file has 10^9)
MAX_MORE = 4                       # problems reported after the first one
MAX_FLOW_DEPTH = 100               # nested [ ] and { }: PyYAML's scanner is quadratic in this depth
MAX_INT_BITS = 4096                # results of ** and * in templates
TEMPLATE_TIMEOUT_S = 20.0          # a template that renders longer than this is refused

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """Error messages are one line: control characters (a newline in a key, say) are shown escaped."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class PlanInputError(SpecError, PlanError):
    """The plan cannot be built from the file (located there): bad input, so both a SpecError and a PlanError."""


class FieldError(SpecError):
    """A problem with one field of an input file, found after parsing (e.g. a schedule target the plan does not
    have). `loc` is the field's path; the loader that knows the file turns it into `file:line: path: msg`."""

    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = tuple(loc), msg
        super().__init__(f"{format_loc(self.loc)}: {msg}")


_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _SIMPLE_KEY.match(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"
    return out or "(top level)"


_format_loc = format_loc     # the old name


# pydantic puts union-branch tags in error locations ("literal['all']", "SparseMembers", "str",
# "function-after[...]", "[key]"): they are not keys of the file.
_TAG = re.compile(r"^(?:str|int|float|bool|none|list|dict|set|tuple|bytes|[A-Z][A-Za-z0-9]*|.*\[.*\].*)$")


def _is_tag(part) -> bool:
    return isinstance(part, str) and bool(_TAG.match(part))


def _items(node: yaml.MappingNode):
    """A mapping's (key, value) nodes: its own first, then those it merges in with `<<`."""
    merges = []
    for k, v in node.value:
        if k.tag == "tag:yaml.org,2002:merge":
            merges += v.value if isinstance(v, yaml.SequenceNode) else [v]
        else:
            yield k, v
    for m in merges:
        if isinstance(m, yaml.MappingNode):
            yield from _items(m)


def _resolve(tree: yaml.Node | None, loc: tuple) -> tuple[tuple, int | None]:
    """Walk the YAML node tree along an error location: (the location without pydantic's union tags, the line of
    the deepest key or item found, 1-based). A key that is not in the file (a missing field) is kept."""
    node = tree
    line = tree.start_mark.line + 1 if tree is not None else None
    out: list = []
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in _items(node)
                        if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
            if hit is not None:
                out.append(part)
                node, line = hit[1], hit[0].start_mark.line + 1
                continue
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            out.append(part)
            node = node.value[part]
            line = node.start_mark.line + 1
            continue
        if _is_tag(part):
            continue
        out.append(part)
        node = None
    return tuple(out), line


# Kept for callers of the old helpers.
def _clean_loc(loc: tuple) -> tuple:
    return tuple(p for p in loc if not _is_tag(p))


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    return _resolve(node, loc)[1]


@dataclass
class Source:
    """An input file as parsed: where errors are located. `text` is what YAML read (a template's rendered
    text); `template` the file's own text when it was a template, so lines can be mapped back to it."""

    path: str
    text: str
    template: str | None = None
    tree: yaml.Node | None = None
    _map: dict[int, tuple[int, bool]] | None = field(default=None, repr=False)

    def _source_line(self, line: int) -> tuple[int, bool] | None:
        """Rendered line -> (source line, exact); None when the line comes from several source lines (a loop)."""
        if self._map is None:
            import difflib

            self._map = {}
            src, out = self.template.splitlines(), self.text.splitlines()  # type: ignore[union-attr]
            if len(src) * len(out) <= 50_000_000:
                sm = difflib.SequenceMatcher(None, src, out, autojunk=False)
                for tag, i1, i2, j1, j2 in sm.get_opcodes():
                    if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                        for k in range(j2 - j1):
                            self._map[j1 + k + 1] = (i1 + k + 1, True)
                    elif i2 - i1 == 1:                    # one source line rendered as several
                        for k in range(j2 - j1):
                            self._map[j1 + k + 1] = (i1 + 1, False)
        return self._map.get(line)

    def where(self, line: int | None) -> str:
        if line is None:
            return self.path
        if self.template is None:
            return f"{self.path}:{line}"
        src = self._source_line(line)
        if src is None:
            return f"{self.path} (rendered line {line})"
        return f"{self.path}:{src[0]}" if src[1] else f"{self.path}:{src[0]} (rendered line {line})"

    def line_of(self, loc: tuple) -> int | None:
        return _resolve(self.tree, loc)[1]

    def message(self, loc: tuple, msg: str, line: int | None = None) -> str:
        clean, found = _resolve(self.tree, tuple(loc))
        return one_line(f"{self.where(line or found)}: {format_loc(clean)}: {msg}")

    def error(self, loc: tuple, msg: str, line: int | None = None) -> SpecError:
        return SpecError(self.message(loc, msg, line))

    def plain(self, msg: str, line: int | None = None) -> SpecError:
        """An error about the file as a whole (or a line of it), without a field."""
        return SpecError(one_line(f"{self.where(line)}: {msg}"))

    def validation_error(self, exc: ValidationError) -> SpecError:
        """pydantic's errors as one line: the first problem, then up to MAX_MORE others after `; also:`."""
        errors = exc.errors()
        lines = []
        for err in errors[:MAX_MORE + 1]:       # each is located by walking the tree: not all of 10^5 errors
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            lines.append(self.message(tuple(err["loc"]), msg))
        lines = list(dict.fromkeys(lines))
        more = f" (and {len(errors) - MAX_MORE - 1} more)" if len(errors) > MAX_MORE + 1 else ""
        return SpecError(lines[0] + ("; also: " + "; ".join(lines[1:]) if lines[1:] else "") + more)

    def located(self, exc: Exception) -> SpecError:
        """A FieldError located in this file; any other error's message prefixed with the file (and the line of
        a field path the message starts with, as the plan's errors do: `links.overrides[0].link: ...`)."""
        if isinstance(exc, FieldError):
            return self.error(exc.loc, exc.msg)
        text = str(exc)
        m = re.match(r"^([a-z_]+(?:\.[a-z_]+|\[\d+\])*)[: ]", text)
        if m:
            loc = tuple(int(p) if p.isdigit() else p for p in re.findall(r"[a-z_]+|\d+", m.group(1)))
            clean, line = _resolve(self.tree, loc)
            if clean == loc and line is not None:
                return self.plain(text, line)
        return self.plain(text)


# --- reading ---------------------------------------------------------------------------------------------------

def read_input(path: str | Path, what: str) -> str:
    """The text of an input file (`what`: "experiment", "hosts"). Refuses, as a SpecError naming the file, what
    is missing or unreadable, not a regular file (a FIFO or /dev/zero would be read forever), larger than
    MAX_INPUT_BYTES, or not UTF-8 — all before reading more than MAX_INPUT_BYTES + 1 bytes."""
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SpecError(one_line(f"{name}: no such {what} file")) from None
    except (OSError, ValueError) as exc:        # ValueError: a NUL in the name
        raise SpecError(one_line(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}")) from None
    too_big = SpecError(one_line(f"{name}: larger than {MAX_INPUT_BYTES // 1024} KiB: not an {what} file"))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(one_line(f"{name}: is a directory, not an {what} file"))
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(one_line(f"{name}: not a regular file (a device, FIFO or socket): give the {what} "
                                     "file itself"))
        if st.st_size > MAX_INPUT_BYTES:
            raise too_big
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_INPUT_BYTES + 1)     # /proc files say size 0: the cap holds for them too
        except OSError as exc:
            raise SpecError(one_line(f"{name}: cannot read: {exc.strerror}")) from None
        if len(data) > MAX_INPUT_BYTES:
            raise too_big
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
                        f"an {what} file is YAML text") from None


# --- templates -------------------------------------------------------------------------------------------------

class _TemplateLimit(Exception):
    pass


class _Sandbox(SandboxedEnvironment):
    """Jinja2's sandbox (no access to Python internals: `''.__class__` is refused) with bounds on time and on
    the size of numbers and repeated strings, so a template cannot hang or exhaust the orchestrator."""

    intercepted_binops = frozenset(["*", "**"])

    def __init__(self, **kw):
        super().__init__(**kw)
        self.deadline = time.monotonic() + TEMPLATE_TIMEOUT_S

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _TemplateLimit(f"rendering took longer than {TEMPLATE_TIMEOUT_S:g} s")

    def call_binop(self, context, operator, left, right):
        self.tick()
        ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (left, right))
        if operator == "**" and ints and right > 0 and abs(left) > 1 and \
                abs(left).bit_length() * right > MAX_INT_BITS:
            raise _TemplateLimit(f"{left} ** {right} is too large")
        if operator == "*":
            if ints and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
                raise _TemplateLimit("a product too large")
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and \
                        len(seq) * n > MAX_RENDERED_BYTES:
                    raise _TemplateLimit("a repeated string or list too large")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's signature
        __self.tick()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj, attribute):
        self.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        self.tick()
        return super().getitem(obj, argument)


def _template_line(exc: BaseException) -> int | None:
    """The template line an exception was raised at (Jinja rewrites tracebacks to point into the template)."""
    line = getattr(exc, "lineno", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def render(text: str, path: str, variables: dict[str, Any] | None = None) -> Source:
    """Render Jinja2 when the file uses it ({{ }} or {% %}), sandboxed; undefined variables are errors, and so are
    variables given (--set) that the file does not use (a typo would otherwise be silently ignored)."""
    if "{{" not in text and "{%" not in text:
        if variables:
            raise SpecError(f"--set {next(iter(variables))}: {path} is not a template (it has no {{{{ }}}} or "
                            f"{{% %}}): there is nothing to set")
        return Source(path, text)
    env = _Sandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    if variables:
        try:
            used = jinja2.meta.find_undeclared_variables(env.parse(text))
        except jinja2.TemplateSyntaxError as exc:
            raise SpecError(one_line(f"{path}:{exc.lineno}: template error: {exc.message}")) from None
        unknown = sorted(set(variables) - used)
        if unknown:
            raise SpecError(f"--set {unknown[0]}: {path} has no variable {unknown[0]!r} (its variables: "
                            f"{', '.join(sorted(used)) or 'none'})")
    try:
        out, size = [], 0
        for chunk in env.from_string(text).generate(**(variables or {})):
            out.append(chunk)
            size += len(chunk)
            if size > MAX_RENDERED_BYTES:
                raise _TemplateLimit(f"renders to more than {MAX_RENDERED_BYTES >> 20} MiB")
            env.tick()
        rendered = "".join(out)
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(one_line(f"{path}:{exc.lineno}: template error: {exc.message}")) from None
    except jinja2.UndefinedError as exc:
        line = _template_line(exc)
        where = f"{path}:{line}" if line else path
        if isinstance(exc, SecurityError) or "unsafe" in str(exc.message):
            raise SpecError(one_line(f"{where}: template error: {exc.message} (experiment templates run in "
                                     "Jinja2's sandbox)")) from None
        raise SpecError(one_line(f"{where}: template error: {exc.message} (pass it with --set NAME=VALUE)")) \
            from None
    except SecurityError as exc:
        line = _template_line(exc)
        raise SpecError(one_line(f"{path}:{line or '?'}: template error: {exc} (experiment templates run in "
                                 "Jinja2's sandbox)")) from None
    except RecursionError:
        raise SpecError(f"{path}: template error: nested or recursive too deeply") from None
    except (_TemplateLimit, jinja2.TemplateError, ArithmeticError, ValueError, TypeError, LookupError,
            AttributeError, RuntimeError, MemoryError) as exc:
        line = _template_line(exc)
        msg = getattr(exc, "message", None) or str(exc) or exc.__class__.__name__
        raise SpecError(one_line(f"{path}:{line or '?'}: template error: {msg}")) from None
    return Source(path, rendered, template=text)


def render_template(text: str, path: str, variables: dict[str, Any] | None = None) -> str:
    return render(text, path, variables).text


# --- YAML ------------------------------------------------------------------------------------------------------

_MERGE = "tag:yaml.org,2002:merge"


def _yaml_problem(exc: yaml.YAMLError, src: Source) -> SpecError:
    if isinstance(exc, yaml.reader.ReaderError):
        line = src.text.count("\n", 0, exc.position) + 1
        ch = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return src.plain(f"malformed YAML: character #x{ch:04x} is not allowed", line)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    return src.plain(f"malformed YAML: {problem}", mark.line + 1 if mark is not None else None)


def _check_tree(tree: yaml.Node, src: Source) -> None:
    """Before anything is constructed: no key twice in a mapping (naming both lines), no recursive alias, and at
    most MAX_YAML_NODES nodes once aliases are expanded. Iterative, so any depth is fine here."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool, tuple]] = [(tree, False, ())]
    while stack:
        node, done, path = stack.pop()
        nid = id(node)
        if done:
            open_.discard(nid)
            kids = _children(node)
            size[nid] = 1 + sum(size.get(id(c), 0) for c in kids)
            if size[nid] > MAX_YAML_NODES:
                raise src.error(path, f"too large: more than {MAX_YAML_NODES} values once aliases are expanded")
            continue
        if nid in size:
            continue
        if nid in open_:
            raise src.error(path, "a recursive alias (a value that contains itself)")
        open_.add(nid)
        stack.append((node, True, path))
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE:
                    line = k.start_mark.line + 1
                    if (k.tag, k.value) in seen:
                        raise src.error(path + (k.value,), f"duplicate key (first on line {seen[k.tag, k.value]})",
                                        line=line)
                    seen[k.tag, k.value] = line
                key = k.value if isinstance(k, yaml.ScalarNode) else "?"
                stack.append((v, False, path + (key,)))
                stack.append((k, False, path))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, False, path + (i,)))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _scalar_culprit(loader: yaml.SafeLoader, tree: yaml.Node) -> yaml.Node | None:
    """The first scalar that cannot be constructed (a date like 2024-13-45, an int of 5000 digits)."""
    stack = [tree]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                loader.construct_object(node)
            except Exception:   # noqa: BLE001 - looking for the one that fails
                return node
        stack.extend(reversed(_children(node)))
    return None


def _flow_depth_check(src: Source) -> None:
    """Refuse deeply nested flow collections before PyYAML sees them: its scanner keeps a possible simple key
    per flow level and rescans them for every token, so `[[[[...` of 100 kB takes minutes. Approximate (quotes
    and comments are followed roughly): it only has to catch absurd depths."""
    depth, quote = 0, ""               # a quoted scalar may span lines
    for line_no, line in enumerate(src.text.split("\n"), 1):
        comment, prev = False, "\n"
        for ch in line:
            if comment:
                break
            if quote:
                if ch == quote and not (quote == '"' and prev == "\\"):
                    quote = ""
            elif ch == '"' or (ch == "'" and prev in " \t\n[{,:"):
                quote = ch
            elif ch == "#" and prev in " \t\n":
                comment = True
            elif ch in "[{":
                depth += 1
                if depth > MAX_FLOW_DEPTH:
                    raise src.plain(f"malformed YAML: [ ] and {{ }} nested more than {MAX_FLOW_DEPTH} deep", line_no)
            elif ch in "]}":
                depth = max(0, depth - 1)
            prev = ch


def load_yaml(src: Source) -> Any:
    """One YAML document from `src.text` (its node tree kept in `src.tree` for error lines)."""
    _flow_depth_check(src)
    try:
        loader = yaml.SafeLoader(src.text)     # the reader refuses non-printable characters here
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, src) from None
    try:
        try:
            tree = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _yaml_problem(exc, src) from None
        except RecursionError:
            raise src.plain("malformed YAML: nested too deeply") from None
        src.tree = tree
        if tree is None:
            return None
        _check_tree(tree, src)
        try:
            return loader.construct_document(tree)
        except yaml.YAMLError as exc:
            raise _yaml_problem(exc, src) from None
        except RecursionError:
            raise src.plain("malformed YAML: nested too deeply") from None
        except (ValueError, OverflowError, TypeError) as exc:
            bad = _scalar_culprit(yaml.SafeLoader(""), tree)
            line = bad.start_mark.line + 1 if bad is not None else None
            what = f"{bad.value[:40]!r} " if bad is not None else ""
            raise src.plain(f"malformed YAML: value {what}cannot be read: {exc}", line) from None
    finally:
        loader.dispose()
