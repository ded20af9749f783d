"""Each report kind's own part of its page, in the module its declaration names (:attr:`lab.kinds.Kind.page`):
``page(files, report) -> KindPage`` with the report read as the kind's typed report (``page(files)`` for a kind
not yet typed) and, where two runs of the kind compare, ``compare(a, b) -> tuple[Section, ...]``
(:mod:`lab.views.page`, :mod:`lab.views.compare`). A kind that names none gets the summary and its files."""
