"""Self-contained HTML pages: `sdcscan report --html` (one run) and `sdcscan compare --html` (a fleet).

One file each, readable offline and from a CI artifact store: inline CSS, inline SVG, and a
Content-Security-Policy that forbids every request and admits only the page's own sorting script by its
hash (`page.POLICY`, `page.SCRIPT`). The JSON document stays the
contract; a page is a view of it.

Why plain SVG written in Python, not a plotting library: nothing to ship or inline (a JavaScript
library inlined costs hundreds of kB per page and runs code at view time; a Python one, such as
matplotlib, is a heavy dependency for an optional output), nothing is fetched when the page is opened,
and the size stays under our control: every chart is binned to a fixed number of marks
(`run_series`, `fleet.overview`), so a 10,000-host fleet's page is a few hundred kB. The charts needed
are few and simple (lines, bars, histograms, a strip of cells), a couple of hundred lines in `svg`.

Reports are hostile input: every string from a report or from a fleet's findings is escaped
(`svg.esc`), and nothing from a report is ever put into a script, a style or an attribute unquoted.
"""

from __future__ import annotations

from sdcscan.render.html.fleet_page import fleet_page
from sdcscan.render.html.page import write_page
from sdcscan.render.html.run_page import run_page

__all__ = ["fleet_page", "run_page", "write_page"]
