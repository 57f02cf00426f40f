"""The ``{bench}`` role: a figure of ``benchmarks/RESULTS.md``, read when the site is built.

The method cards quote measured costs without copying them: ``{bench}`HEADING; ROW; COLUMN```
is replaced by the cell of the table under the ``###`` heading that starts with ``HEADING``,
in the first row whose leading cells are ``ROW`` (one or more cells, separated by `` / ``;
not ``|``, which would split a markdown table's cell), and
in the column named ``COLUMN``. For example
``{bench}`Image batch ops; mixup_batch / Composer; ours × faster``` gives the ratio of that
row. When ``benchmarks/RESULTS.md`` is measured again, the cards follow; a reference that no
longer matches exactly one table, a row or a column is a build warning (an error under
``-W``), so a card never quotes a figure the results do not hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "RESULTS.md"
_ROLE = re.compile(r"\{bench\}`([^`]+)`")
_CODE = re.compile(r"(?<!`)(`{2,})(?!`).+?(?<!`)\1(?!`)", re.S)  # code spans of 2+ backticks


@dataclass(frozen=True)
class Table:
    heading: str
    columns: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_tables(text: str) -> list[Table]:
    """Every markdown table of ``text`` under its nearest ``###`` heading."""
    tables: list[Table] = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("### "):
            heading = line[4:].strip()
        elif (
            line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].strip()) <= set("|-: ")
        ):
            columns = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append(Table(heading, columns, rows))
            continue
        i += 1
    return tables


def lookup(tables: list[Table], reference: str) -> str:
    """The cell a ``HEADING; ROW; COLUMN`` reference names; ``ValueError`` saying what is wrong."""
    parts = [part.strip() for part in reference.split(";")]
    if len(parts) != 3:
        raise ValueError(f"{reference!r} is not 'heading; row cells; column'")
    heading, row_key, column = parts
    matches = [t for t in tables if t.heading.startswith(heading)]
    if len(matches) != 1:
        raise ValueError(f"{len(matches)} tables of RESULTS.md have a heading starting {heading!r}")
    table = matches[0]
    if column not in table.columns:
        raise ValueError(f"table {table.heading!r} has no column {column!r}: {table.columns}")
    key = [cell.strip() for cell in row_key.split(" / ")]
    for row in table.rows:
        if row[: len(key)] == key:
            return row[table.columns.index(column)]
    raise ValueError(f"table {table.heading!r} has no row starting {key}")


def references(text: str) -> list[str]:
    """The ``{bench}`` references of a markdown text (not those shown in double-backtick code)."""
    return _ROLE.findall(_CODE.sub("", text))


def _role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: Any = None,
    content: Any = None,
) -> tuple[list[Any], list[Any]]:
    from docutils import nodes

    try:
        value = lookup(parse_tables(RESULTS.read_text(encoding="utf-8")), text)
    except ValueError as error:
        message = inliner.reporter.warning(f"bench: {error}", line=lineno)
        return [nodes.problematic(rawtext, rawtext)], [message]
    return [nodes.Text(value)], []


def setup(app: Any) -> dict[str, Any]:
    app.add_role("bench", _role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
