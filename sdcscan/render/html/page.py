"""The page around the charts: one stylesheet, a policy that forbids every request, tables, writing.

The Content-Security-Policy allows inline styles, `data:` images and one script, named by its SHA-256
(`SCRIPT`: sorting and filtering the tables marked sortable), and nothing else: no other script, no
event-handler attribute, no font, no frame, no fetch. A page opened from a CI artifact store or a laptop
offline looks the same, and text from a hostile report that escaped escaping still could not run or call
home: a script of its own would not have the hash.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Sequence

from sdcscan import __version__
from sdcscan.files import write_text_atomic
from sdcscan.render.html.svg import esc

MAX_TABLE_ROWS = 200  # rows of one table; the JSON holds every record

# Sorting and filtering for tables of class "sortable": a click (or Enter) on a heading sorts by that column,
# numbers as numbers and a cell's data-sort before its text, and again the other way; typing in the search
# field before such a table shows only the rows holding the text. Listeners only, no markup of its own.
SCRIPT = """
(function () {
  function key(row, i) {
    var cell = row.cells[i];
    return cell.hasAttribute('data-sort') ? cell.getAttribute('data-sort') : cell.textContent.trim();
  }
  function order(a, b) {
    var x = Number(a), y = Number(b);
    if (a !== '' && b !== '' && !isNaN(x) && !isNaN(y)) { return x - y; }
    return a.localeCompare(b);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, i) {
      th.tabIndex = 0;
      th.setAttribute('aria-sort', 'none');
      function sort() {
        var up = th.getAttribute('aria-sort') !== 'ascending';
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) { return (up ? 1 : -1) * order(key(a, i), key(b, i)); });
        rows.forEach(function (row) { body.appendChild(row); });
        Array.prototype.forEach.call(heads, function (h) { h.setAttribute('aria-sort', 'none'); });
        th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter') { sort(); } });
    });
  });
  document.querySelectorAll('input.filter').forEach(function (input) {
    var table = input.parentNode.querySelector('table.sortable'), shown = input.nextElementSibling;
    input.addEventListener('input', function () {
      var words = input.value.toLowerCase(), count = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var hit = row.textContent.toLowerCase().indexOf(words) >= 0;
        row.hidden = !hit;
        count += hit ? 1 : 0;
      });
      shown.textContent = words ? count + ' of ' + table.tBodies[0].rows.length + ' rows' : '';
    });
  });
})();
"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
POLICY = (
    f"default-src 'none'; script-src 'sha256-{SCRIPT_HASH}'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)

STYLE = """
:root{--pass:#2e7d32;--fail:#c62828;--invalid:#e65100;--interrupted:#6d6d6d;--warn:#b7791f;--info:#1565c0;
--ink:#1d1d1f;--muted:#6b6b70;--line:#d9d9de;--bg:#fafafa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--ink);background:var(--bg)}
header{background:#fff;border-bottom:1px solid var(--line);padding:18px 28px}
header h1{margin:0 0 4px;font-size:22px}
main{max-width:1240px;margin:0 auto;padding:8px 28px 40px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px}
h2{font-size:17px;margin:0 0 8px}
h3{font-size:14px;margin:14px 0 4px}
p.note,.muted{color:var(--muted)}
p.note{margin:4px 0 8px;font-size:13px}
.facts{display:flex;flex-wrap:wrap;gap:4px 22px;margin:6px 0 0;padding:0;list-style:none;color:var(--muted)}
.facts b{color:var(--ink);font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px;
text-transform:uppercase;letter-spacing:.03em;background:var(--interrupted)}
.v-pass{background:var(--pass)}.v-fail{background:var(--fail)}.v-invalid{background:var(--invalid)}.v-undecided{background:#7b1fa2}
.k-divergent,.k-mismatch,.k-persistent{background:var(--fail);fill:var(--fail)}.k-invariant{background:#7f1d1d;fill:#7f1d1d}
.k-slow,.k-calibration,.k-sentinel,.k-collision,.k-transient{background:var(--warn);fill:var(--warn)}
.k-undecided,.k-case{background:#7b1fa2;fill:#7b1fa2}.k-invalid{background:var(--invalid);fill:var(--invalid)}
.k-stale,.k-missing,.k-future,.k-unlisted,.k-alias{background:var(--info);fill:var(--info)}
table{border-collapse:collapse;width:100%;font-size:13px;margin:6px 0}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600}
table.sortable th{cursor:pointer}table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
input.filter{font:inherit;padding:3px 6px;margin:4px 8px 4px 0;width:22em}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td code,li code{font-size:12px;word-break:break-all}
ul.findings{padding-left:0;list-style:none;margin:4px 0}
ul.findings li{padding:6px 0;border-bottom:1px solid var(--line)}
.next{color:var(--muted)}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:8px 18px}
svg.chart{display:block;width:100%;height:auto;margin:4px 0 10px;overflow:visible}
svg text{font-family:inherit}
.tick{font-size:11px;fill:var(--muted)}.axis-label{font-size:12px;fill:var(--muted)}
.note{font-size:11px;fill:var(--ink)}.cell-label{font-size:11px;fill:#fff;font-weight:600}
.axis{stroke:#9a9aa0;stroke-width:1}.grid{stroke:#ececf0;stroke-width:1}
polyline.mark{fill:none;stroke-width:1.6;stroke-linejoin:round}
.s-pass{stroke:var(--pass);fill:var(--pass)}.s-fail{stroke:var(--fail);fill:var(--fail)}
.s-invalid{stroke:var(--invalid);fill:var(--invalid)}.s-interrupted{stroke:var(--interrupted);fill:var(--interrupted)}
.s-quiet{stroke:#9aa3ad;fill:#9aa3ad;stroke-opacity:.55}
.c0{stroke:#1f77b4;fill:#1f77b4}.c1{stroke:#ff7f0e;fill:#ff7f0e}.c2{stroke:#2ca02c;fill:#2ca02c}
.c3{stroke:#9467bd;fill:#9467bd}.c4{stroke:#8c564b;fill:#8c564b}.c5{stroke:#e377c2;fill:#e377c2}
.c6{stroke:#17becf;fill:#17becf}.c7{stroke:#bcbd22;fill:#bcbd22}
rect.o-stopped{fill:#212121}rect.o-ok{fill:#a5d6a7}rect.o-disputed{fill:#7b1fa2}rect.o-mismatch{fill:var(--fail)}rect.o-error{fill:var(--invalid)}
rect.bar-healthy{fill:#7a94b8}rect.bar-slow{fill:var(--fail)}
rect.age-fresh{fill:#7a94b8}rect.age-stale{fill:var(--info);fill-opacity:.45}rect.age-none{fill:var(--invalid)}
rect.ev-segfault{fill:#8e24aa}rect.ev-trap{fill:#f9a825}rect.ev-mce{fill:var(--fail)}rect.ev-xid{fill:#3949ab}
rect.t-value{fill:#90a4ae}circle.t-before{fill:#fff;stroke:#37474f;stroke-width:1.2}circle.t-after{fill:#37474f}
path.m-slow{fill:var(--fail)}
.expected{stroke:var(--ink);stroke-width:2}
.median{stroke:var(--ink);stroke-width:1.2;stroke-dasharray:4 3}.cut{stroke:var(--fail);stroke-width:1.2;stroke-dasharray:4 3}
.stale-line{stroke:var(--info);stroke-width:1.2;stroke-dasharray:4 3}
.swatch{stroke:none}
footer{max-width:1240px;margin:0 auto;padding:0 28px 28px;color:var(--muted);font-size:12px}
"""


def badge(word: str, prefix: str) -> str:
    """A coloured word: a verdict (`v-`), a finding kind or case status (`k-`)."""
    return f'<span class="badge {prefix}-{esc(word)}">{esc(word)}</span>'


def facts(items: Iterable[tuple[str, object]]) -> str:
    """`name value` pairs on one wrapping line (the values escaped)."""
    return '<ul class="facts">' + "".join(f"<li>{esc(k)} <b>{esc(v)}</b></li>" for k, v in items) + "</ul>"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    numeric: Iterable[int] = (),
    total: int | None = None,
    limit: int = MAX_TABLE_ROWS,
    sort_keys: Sequence[Sequence[str | None]] | None = None,
    sortable: bool = False,
) -> str:
    """A table of already escaped cells; at most `limit` rows, and a line saying how many more.

    Args:
        headers: column names (escaped here).
        rows: cells, each already HTML (escape report text with `esc` first).
        numeric: indexes of right-aligned columns.
        total: how many rows there are in all, when `rows` was cut before (default: len(rows)).
        limit: rows shown.
        sortable: headings sort the rows (`SCRIPT`), preceded by a field that filters them.
        sort_keys: per row, per cell, what the cell sorts by where its text would mislead (a finding's
            kind by its severity), or None.
    """
    right = set(numeric)
    cls = [' class="num"' if i in right else "" for i in range(len(headers))]
    head = "".join(f"<th{cls[i]}>{esc(h)}</th>" for i, h in enumerate(headers))

    def cell(r: int, i: int, content: str) -> str:
        sort = sort_keys[r][i] if sort_keys is not None else None
        data = f' data-sort="{esc(sort)}"' if sort is not None else ""
        return f"<td{cls[i]}{data}>{content}</td>"

    body = "".join(
        "<tr>" + "".join(cell(r, i, c) for i, c in enumerate(row)) + "</tr>"
        for r, row in enumerate(rows[:limit])
    )
    more = (total if total is not None else len(rows)) - min(len(rows), limit)
    tail = (
        f'<p class="note">{more} more not shown; the JSON document holds every one.</p>' if more > 0 else ""
    )
    if sortable:
        search = (
            '<input type="search" class="filter" placeholder="show rows holding..." aria-label="filter the rows">'
            '<span class="muted"></span>'
        )
        return f'{search}<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{tail}'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{tail}"


def section(title: str, body: str, *, note: str = "", anchor: str = "") -> str:
    """A titled box; `note` (plain text) says what the box shows and where its numbers come from."""
    ident = f' id="{esc(anchor)}"' if anchor else ""
    lead = f'<p class="note">{esc(note)}</p>' if note else ""
    return f"<section{ident}><h2>{esc(title)}</h2>{lead}{body}</section>"


def document(title: str, header: str, sections: Iterable[str], source: str) -> str:
    """The whole page: head with the policy and the stylesheet, the header, the sections, a footer, and
    `SCRIPT` where a table is sortable (report text cannot spell that class: its quotes are escaped)."""
    main = "".join(sections)
    script = f"<script>{SCRIPT}</script>" if 'class="sortable"' in main else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<header>{header}</header><main>{main}</main>{script}"
        f"<footer>Written by sdcscan {esc(__version__)} from {esc(source)}. This page is a view: the JSON "
        "document is the contract.</footer></body></html>\n"
    )


def write_page(path: str | os.PathLike[str], text: str) -> None:
    """Write a page atomically, as every sdcscan output (`files.write_text_atomic`).

    Raises:
        ReportError: the file could not be written (exit 3).
    """
    write_text_atomic(path, text)
