"""Each report kind's own part of its page: ``<kind with - as _>.py`` defines ``page(files) -> KindPage`` and,
where two runs of the kind compare, ``compare(a, b) -> tuple[Section, ...]`` (:mod:`lab.views.page`,
:mod:`lab.views.compare`). A kind with no module here gets the summary and its files."""
