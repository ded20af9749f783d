"""The entropy tracker: per-step entropy, varentropy and alternatives of a decode.

Rooms: :mod:`.results` (settings and result types), :mod:`.stats` (the per-step
statistics, the hook the decode core calls), :mod:`.loop` (``track_generate`` on
the decode core :mod:`lab.decode`), :mod:`.speculative` (``track_speculative``: the same
statistics read off a speculative decode's verify passes). The public names are re-exported here, so
``lab.tracker.track_generate`` and ``lab.tracker.TrackResult`` keep working.
"""

from lab.decode import decode_one, prefill
from lab.tracker.loop import DecodeRun, _check_input_ids, _token_pieces, run_decode, track_generate
from lab.tracker.results import DecodeSettings, StepRecord, TrackResult, build_warpers
from lab.tracker.speculative import commit_recorder, track_speculative
from lab.tracker.stats import LOG_PROB_FLOOR, StepRecorder, _Recorder, row_statistics

__all__ = [
    "DecodeRun", "DecodeSettings", "LOG_PROB_FLOOR", "StepRecord", "StepRecorder", "TrackResult", "build_warpers",
    "commit_recorder", "decode_one", "prefill", "row_statistics", "run_decode", "track_generate", "track_speculative",
]
