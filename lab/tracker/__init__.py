"""The entropy tracker: per-step entropy, varentropy and alternatives of a decode.

Rooms: :mod:`.results` (settings and result types), :mod:`.stats` (the per-step
statistics, the hook the decode core calls), :mod:`.loop` (``track_generate`` on
the decode core :mod:`lab.decode`), :mod:`.speculative` (``track_speculative``: the same
statistics read off a speculative decode's verify passes). Nothing is re-exported here: import
each name from its module (``lab.tracker.loop.track_generate``, ``lab.tracker.results.TrackResult``).
"""
