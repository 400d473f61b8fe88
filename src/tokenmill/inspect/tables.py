"""Rows (a list of dicts, what the helpers return) shown as a table: HTML in a notebook, aligned text elsewhere.
Long cells are cut to ``max_chars``; nested values are shown as JSON."""

from __future__ import annotations

import html
import json


def _cell(value, max_chars: int) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = "" if value is None else str(value)
    return text if len(text) <= max_chars else text[:max_chars] + "..."


class Table:
    """``table(rows)``: displays as HTML in Jupyter (``_repr_html_``), as text in a terminal (``repr``)."""

    def __init__(self, rows, columns=None, max_chars: int = 300):
        self.rows = [dict(r) for r in rows]
        self.columns = list(columns) if columns else list(dict.fromkeys(k for r in self.rows for k in r))
        self.max_chars = max_chars

    def _cells(self) -> list[list[str]]:
        return [[_cell(r.get(c), self.max_chars) for c in self.columns] for r in self.rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f'<td style="text-align:left;white-space:pre-wrap">{html.escape(x)}</td>'
                                        for x in row) + "</tr>" for row in self._cells())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = [[x.replace("\n", " ") for x in row] for row in self._cells()]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self.rows)


def table(rows, columns=None, max_chars: int = 300) -> Table:
    return Table(rows, columns, max_chars)
