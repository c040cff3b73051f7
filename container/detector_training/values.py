"""Value parsers: a raw hyperparameter (a string as SageMaker sends it, possibly JSON-quoted, or a
Python value) to a typed value, or ValueError saying what was expected. Shared by the job's
configuration, the launcher and the data readers; nothing here imports beyond the stdlib."""

import json
import math
import re


_TRUE = ("true", "1", "yes", "y", "on")
_FALSE = ("false", "0", "no", "n", "off")


def decode(raw):
    """JSON-decode a SageMaker hyperparameter string, keeping the raw string when it is not JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            return raw
    return raw


def parse_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError("a boolean (true/false, 1/0, yes/no)")


def parse_int(value):
    if isinstance(value, bool):
        raise ValueError("an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError("an integer")


def parse_float(value):
    if isinstance(value, bool):
        raise ValueError("a number")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise ValueError("a number") from None
    else:
        raise ValueError("a number")
    if not math.isfinite(result):
        raise ValueError("a finite number")
    return result


SCORE_THRESHOLD = "a score between 0 and 1"
DETECTION_COUNT = "a whole number of detections, 1 or more"


def parse_score_threshold(value):
    """A detection score threshold: a number in [0, 1] (the one parser of serve's settings and
    custom attributes, detector-predict's --threshold and the launcher's)."""
    try:
        result = parse_float(value)
    except ValueError:
        raise ValueError(SCORE_THRESHOLD) from None
    if not 0.0 <= result <= 1.0:
        raise ValueError(SCORE_THRESHOLD)
    return result


def parse_detection_count(value):
    """The most detections answered per image: an integer >= 1."""
    try:
        result = parse_int(value)
    except ValueError:
        raise ValueError(DETECTION_COUNT) from None
    if result < 1:
        raise ValueError(DETECTION_COUNT)
    return result


def parse_str(value):
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError("a string")


def parse_regex(value):
    """A regular expression (Python's ``re``), kept as its text; empty means none."""
    text = parse_str(value)
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError("a regular expression (%s)" % exc) from None
    return text


def _split_list(value):
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError):
                raise ValueError("a list, as JSON ([14, 20]) or comma-separated (14,20)") from None
            if isinstance(decoded, list):
                return decoded
        return [part.strip() for part in text.split(",") if part.strip()]
    return [value]


def parse_int_list(value):
    try:
        return tuple(parse_int(v) for v in _split_list(value))
    except ValueError:
        raise ValueError("a list of integers, as JSON ([14, 20]) or comma-separated (14,20)") from None


def parse_str_list(value):
    try:
        return tuple(parse_str(v) for v in _split_list(value))
    except ValueError:
        raise ValueError("a list of names, as JSON ([\"a\", \"b\"]) or comma-separated (a,b)") from None


def parse_checksums(value):
    """'' (the known VOC SHA-1s), 'none' (opt out), or an object {tar name: sha1 hex}."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none"):
            return text.lower()
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("a JSON object of tar name to SHA-1, or 'none'") from None
    if isinstance(value, dict) and value and all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 40
            and all(c in "0123456789abcdefABCDEF" for c in v) for k, v in value.items()):
        return json.dumps({k: v.lower() for k, v in sorted(value.items())}, sort_keys=True)
    raise ValueError("a JSON object of tar name to 40-hex-digit SHA-1, or 'none'")


def choice(options):
    def parse(value):
        text = parse_str(value) if not isinstance(value, bool) else None
        if text in options:
            return text
        raise ValueError("one of: %s" % ", ".join(options))

    return parse


def optional(parser):
    def parse(value):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null", "auto")):
            return None
        return parser(value)

    parse.optional = True
    return parse


def check(parser, predicate, what):
    """Wrap a parser with a range check; ``what`` describes the valid range."""

    def parse(value):
        result = parser(value)
        if result is not None and not predicate(result):
            raise ValueError(what)
        return result

    return parse


def is_voc_split(split):
    year, _, name = split.partition("_")
    return len(year) == 4 and year.isdigit() and bool(name)


def voc_splits(splits):
    """'2007_trainval' -> (2007, 'trainval'), the form GluonCV's VOCDetection takes."""
    return [(int(s.partition("_")[0]), s.partition("_")[2]) for s in splits]
