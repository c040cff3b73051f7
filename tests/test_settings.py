"""DETECTOR_* process settings (settings.py), and the old FRCNN_* names read for one release."""

from detector_training import settings


def test_the_new_name_is_read_and_wins_over_the_old_one(caplog):
    settings._warned.clear()
    assert settings.name(settings.WORK_DIR) == "DETECTOR_WORK_DIR"
    assert settings.setting("FETCH_WORKERS", {"DETECTOR_FETCH_WORKERS": "4"}) == "4"
    with caplog.at_level("WARNING"):
        assert settings.setting("FETCH_WORKERS", {"DETECTOR_FETCH_WORKERS": "4",
                                                  "FRCNN_FETCH_WORKERS": "8"}) == "4"
    assert "deprecated" not in caplog.text
    assert settings.setting("FETCH_WORKERS", {}, default="2") == "2"
    assert settings.setting("FETCH_WORKERS", {"DETECTOR_FETCH_WORKERS": ""}, default="2") == "2"


def test_an_old_name_alone_still_works_and_warns_once_naming_the_new_one(caplog):
    settings._warned.clear()
    with caplog.at_level("WARNING"):
        for _ in range(3):
            assert settings.setting("LAUNCH_ID", {"FRCNN_LAUNCH_ID": "abc"}) == "abc"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["FRCNN_LAUNCH_ID is deprecated and will stop working in the next release: "
                        "set DETECTOR_LAUNCH_ID instead."]


def test_fetch_settings_take_both_names():
    from detector_training.data.acquire.sources import FetchOptions

    assert FetchOptions.from_environ({"DETECTOR_FETCH_WORKERS": "3"}).s3_workers == 3
    assert FetchOptions.from_environ({"FRCNN_FETCH_DEADLINE_S": "12"}).deadline_s == 12.0


def test_a_fetch_setting_that_is_not_a_number_names_the_variable():
    import pytest

    from detector_training.data.acquire.sources import FetchOptions
    from detector_training.errors import DataError

    with pytest.raises(DataError, match="invalid DETECTOR_FETCH_CHUNK_MB='big'"):
        FetchOptions.from_environ({"DETECTOR_FETCH_CHUNK_MB": "big"})
