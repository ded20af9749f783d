"""Report pages: one self-contained ``index.html`` per report directory, the experiment log, two runs side by side.

Every report directory the lab writes gets an ``index.html`` that opens from disk with no server
and no network: styles, script and data are inline, images are data URIs or inline SVG, and
every table is in the HTML, so the page reads without script too. The pages are drawn from the
report's own files (``report.json``, ``summary.md``, the CSVs and plots), never from the run's
objects, so a page can be rebuilt from any report, old ones included (``lab view --rebuild``).

- :mod:`lab.views.files`: the report's files as read (:class:`~lab.views.files.ReportFiles`), bounded;
  :mod:`lab.views.svg`: an SVG inlined only as written anew from its checked tree.
- :mod:`lab.views.core`: page sections, the number formatter, the Jinja2 environment and the inline
  assets.
- :mod:`lab.views.page`: :func:`~lab.views.page.write_page`, one page per report; a kind's own
  sections come from the module its declaration in :mod:`lab.kinds` names.
- :mod:`lab.views.publish`: a report folder written with its page and its line in the log.
- :mod:`lab.views.log`: :func:`~lab.views.log.rebuild_log`, ``<root>/index.html`` with one row
  per run.
- :mod:`lab.views.compare`: :func:`~lab.views.compare.compare_page`, two reports of one kind
  side by side.

Templates are Jinja2 with autoescaping on: every string a report carries (a prompt, a token)
is escaped; data a script reads is embedded with ``tojson`` (which escapes ``<``, ``>``, ``&``).
"""
