"""The project's errors (errors.py): cause and fix, across processes."""

import pickle

from detector_training.errors import DataError, failure_text_for


def test_errors_say_cause_and_fix_and_survive_pickling():
    err = DataError("the split file x is missing.", "add it.")
    again = pickle.loads(pickle.dumps(err))
    assert failure_text_for(again) == failure_text_for(err)
    assert failure_text_for(err).startswith("DataError: the split file x is missing. Fix: add it.")
    text = failure_text_for(KeyError("boom"))
    assert "KeyError" in text and "Fix:" in text

