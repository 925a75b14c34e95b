"""A run folder as one self-contained HTML page: headline score, charts, metric table, per-task drill-down.

The page opens offline: styles, charts (inline SVG) and the small filter/sort script are all inline, and no
resource is fetched. Every text that comes from a run (replies, prompts, explanations, tags, settings) goes
through Jinja2 autoescaping, since model replies can hold markup. Tasks are collapsed `<details>` rows, so a
5,000-task run stays a page the browser can lay out quickly. One module per part of the page: `page` (the
head and the whole), `status` (finished or not, and the failures), `spending` (tokens and cost, whole run and
this session), `charts` (slice charts and the metric table), `tasks` (the drill-down), `meta` (the
meta-evaluation's page). Each page notes that it holds benchmark conversations that are not to be published.
"""

from healthbench.reporting.report.meta import render_meta_report, write_meta_report
from healthbench.reporting.report.page import rebuild, render_report, write_report
from healthbench.reporting.report.status import unfinished

__all__ = ["rebuild", "render_meta_report", "render_report", "unfinished", "write_meta_report", "write_report"]
