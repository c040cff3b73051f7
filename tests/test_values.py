"""The value parsers (values.py): hyperparameters as SageMaker sends them, to typed values."""

import math

import pytest

from detector_training import values


@pytest.mark.parametrize("raw, expected", [('"0.01"', "0.01"), ("[14, 20]", [14, 20]), ("plain", "plain"),
                                           ("true", True), (3, 3)])
def test_decode_takes_json_quoted_strings_and_keeps_the_rest(raw, expected):
    assert values.decode(raw) == expected


@pytest.mark.parametrize("raw, expected", [("False", False), ("true", True), (" yes ", True), ("0", False),
                                           (1, True), (False, False)])
def test_booleans_as_generic_estimators_render_them(raw, expected):
    assert values.parse_bool(raw) is expected


@pytest.mark.parametrize("raw", ["maybe", 2, None, 0.5])
def test_anything_else_is_not_a_boolean(raw):
    with pytest.raises(ValueError, match="a boolean"):
        values.parse_bool(raw)


def test_numbers_refuse_booleans_fractions_and_non_finite_values():
    assert values.parse_int(" 7 ") == 7 and values.parse_int(4.0) == 4
    for raw in (True, 2.5, "2.5", "seven"):
        with pytest.raises(ValueError, match="an integer"):
            values.parse_int(raw)
    assert values.parse_float("1e-3") == pytest.approx(0.001)
    for raw in ("nan", "inf", float("-inf"), math.nan):
        with pytest.raises(ValueError, match="a finite number"):
            values.parse_float(raw)
    with pytest.raises(ValueError, match="a number"):
        values.parse_float(False)


def test_lists_come_as_json_or_comma_separated():
    assert values.parse_int_list("14,20") == (14, 20) == values.parse_int_list("[14, 20]")
    assert values.parse_int_list(17) == (17,)
    assert values.parse_str_list("2007_trainval, 2012_trainval") == ("2007_trainval", "2012_trainval")
    with pytest.raises(ValueError, match="a list of integers"):
        values.parse_int_list("14,x")
    with pytest.raises(ValueError, match="as JSON"):
        values.parse_int_list("[14, ")


def test_checksums_are_known_none_or_a_map_of_sha1s():
    assert values.parse_checksums("") == "" and values.parse_checksums(" None ") == "none"
    assert values.parse_checksums('{"a.tar": "%s"}' % ("AB" * 20)) == '{"a.tar": "%s"}' % ("ab" * 20)
    for raw in ('{"a.tar": "abc"}', "{}", "not json", '["a"]'):
        with pytest.raises(ValueError, match="SHA-1"):
            values.parse_checksums(raw)


def test_choice_optional_and_range_checks_compose():
    mode = values.choice(("step", "cosine"))
    assert mode(" cosine ") == "cosine"
    with pytest.raises(ValueError, match="one of: step, cosine"):
        mode("linear")
    short = values.optional(values.check(values.parse_int, lambda v: v > 0, "a positive integer"))
    assert short("auto") is None and short("none") is None and short("600") == 600 and short.optional
    with pytest.raises(ValueError, match="a positive integer"):
        short("0")


def test_voc_splits_are_year_and_name():
    assert values.is_voc_split("2007_trainval") and not values.is_voc_split("trainval")
    assert not values.is_voc_split("07_test") and not values.is_voc_split("2007_")
    assert values.voc_splits(["2007_trainval", "2012_val"]) == [(2007, "trainval"), (2012, "val")]


def test_a_hyperparameter_nested_deeper_than_the_parser_goes_is_a_value_error():
    deep = "[" * 1200 + "]" * 1200  # SageMaker allows 2,500 characters per value
    assert values.decode(deep) == deep
    for parse in (values.parse_int_list, values.parse_str_list, values.parse_checksums):
        with pytest.raises(ValueError):
            parse(deep)
    from detector_training.errors import ConfigError
    from detector_training.job.config import from_hyperparameters

    with pytest.raises(ConfigError, match="classes"):
        from_hyperparameters({"classes": deep})


def test_parse_regex_keeps_the_text_of_a_valid_expression_and_names_the_error_of_another():
    from detector_training.values import parse_regex

    assert parse_regex(" ^conv1_|^conv2_ ") == "^conv1_|^conv2_" and parse_regex("") == ""
    with pytest.raises(ValueError) as err:
        parse_regex("[conv")
    assert str(err.value).startswith("a regular expression (unterminated character set")


@pytest.mark.parametrize("raw, expected", [("0", 0.0), (" 0.3 ", 0.3), ("1", 1.0), (0.25, 0.25), (1, 1.0)])
def test_a_score_threshold_is_a_number_from_0_to_1(raw, expected):
    assert values.parse_score_threshold(raw) == expected


@pytest.mark.parametrize("raw", ["1.5", "-0.1", "nan", "inf", "high", "", True, None])
def test_anything_else_is_no_score_threshold(raw):
    with pytest.raises(ValueError, match="a score between 0 and 1"):
        values.parse_score_threshold(raw)


@pytest.mark.parametrize("raw, expected", [("1", 1), (" 20 ", 20), (7, 7), (3.0, 3)])
def test_a_detection_count_is_a_whole_number_from_1(raw, expected):
    assert values.parse_detection_count(raw) == expected


@pytest.mark.parametrize("raw", ["0", "-3", "2.5", 2.5, "many", True, None])
def test_anything_else_is_no_detection_count(raw):
    with pytest.raises(ValueError, match="a whole number of detections, 1 or more"):
        values.parse_detection_count(raw)
