"""Evaluate a trained model on labelled data without training, and compare two evaluations.

    estimator = evaluate("s3://bucket/job/output/model.tar.gz", "s3://bucket/test-data/",
                         image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge")
    directory = download_model(estimator.model_data, "evaluated")   # evaluation.json and the report
    print(compare("last-month/evaluation.json", directory, output="compare.png"))

``evaluate`` starts the image's ``mode=evaluate`` job (docs/evaluation.md): the ``model`` channel
is the model, the ``test`` channel the data. ``compare`` reads two ``evaluation.json`` files (or
the folders holding them), prints their per-class AP side by side with the difference, and draws
the same as a PNG (Pillow).
"""

import json
import math
import os

from .job import JobSpec, LaunchError, launch

EVALUATION_FILE = "evaluation.json"


def evaluate(model_data, test_inputs, image_uri, role, instance_type, instance_count=1,
             hyperparameters=None, wait=True, logs=True, session=None, **spec_fields):
    """Start an evaluation job: the model ``model_data`` (S3 or file:// URI of a model.tar.gz, or
    a model directory in local mode) scored on ``test_inputs`` (the test channel's URI, or a
    TrainingInput). ``hyperparameters``: the data format's (``dataset``, ``classes``,
    ``val_splits``, ...); ``spec_fields``: more JobSpec fields (``output_path``, ``tags``, ...).
    Returns the estimator; its ``model_data`` holds evaluation.json and the report."""
    if not model_data or not test_inputs:
        raise LaunchError("evaluate needs the model (model_data: the model.tar.gz a training job "
                          "wrote) and the labelled data to score it on (test_inputs).")
    values = dict(hyperparameters or {})
    if values.get("mode", "evaluate") != "evaluate":
        raise LaunchError("evaluate runs mode=evaluate; drop mode=%s." % values["mode"])
    values["mode"] = "evaluate"
    spec = JobSpec(image_uri=image_uri, role=role, instance_type=instance_type,
                   instance_count=instance_count, hyperparameters=values,
                   base_job_name=spec_fields.pop("base_job_name", "detector-evaluate"), **spec_fields)
    # The data check reads training channels; the job itself checks the test channel.
    return launch(spec, {"model": model_data, "test": test_inputs}, wait=wait, logs=logs,
                  session=session, data_check=False)


def read_evaluation(source):
    """An evaluation: a dict as given, else the ``evaluation.json`` at ``source`` (the file, or a
    folder holding it)."""
    if isinstance(source, dict):
        return source
    path = os.path.join(source, EVALUATION_FILE) if os.path.isdir(source) else source
    if not os.path.isfile(path):
        raise LaunchError("%s: no %s (download the evaluation job's model.tar.gz with "
                          "download_model)." % (source, EVALUATION_FILE))
    with open(path, encoding="utf-8") as handle:
        found = json.load(handle)
    if not isinstance(found, dict) or not isinstance(found.get("per_class"), dict):
        raise LaunchError("%s is not an evaluation job's %s (no per_class)." % (path, EVALUATION_FILE))
    return found


def _number(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def comparison_rows(report_a, report_b):
    """[(name, AP a, AP b, b - a)]: mAP first, then every class of either (in a's order, then
    b's); None where an evaluation has no AP (no labelled object, or not its class)."""
    a, b = read_evaluation(report_a), read_evaluation(report_b)
    rows = [("mAP", _number(a.get("mAP")), _number(b.get("mAP")))]
    names = list(a["per_class"]) + [n for n in b["per_class"] if n not in a["per_class"]]
    rows += [(n, _number(a["per_class"].get(n)), _number(b["per_class"].get(n))) for n in names]
    return [(n, x, y, (y - x) if x is not None and y is not None else None) for n, x, y in rows]


def comparison_table(rows, labels=("A", "B")):
    """The rows as a Markdown table."""
    def cell(value, sign=False):
        return "n/a" if value is None else ("%+.4f" % value if sign else "%.4f" % value)

    lines = ["| class | %s | %s | difference |" % labels, "|---|---:|---:|---:|"]
    lines += ["| %s | %s | %s | %s |" % (n, cell(x), cell(y), cell(d, True)) for n, x, y, d in rows]
    return "\n".join(lines) + "\n"


def compare(report_a, report_b, output=None, labels=("A", "B")):
    """Print two evaluations side by side (mAP and each class's AP, and the difference b - a);
    with ``output``, draw the same into that PNG. Returns the rows (comparison_rows)."""
    rows = comparison_rows(report_a, report_b)
    print(comparison_table(rows, tuple(labels)), end="")
    if output:
        draw_comparison(rows, output, tuple(labels))
    return rows


COLOURS = ("#4575b4", "#f46d43")  # a, b


def draw_comparison(rows, path, labels=("A", "B"), bar=14, width=720):
    """A PNG: per row, a's and b's AP as bars on one 0-1 scale, the difference beside them."""
    from PIL import Image, ImageDraw

    left, right, top = 150, 110, 40
    scale = width - left - right
    image = Image.new("RGB", (width, top + len(rows) * (2 * bar + 12) + 10), "white")
    draw = ImageDraw.Draw(image)
    for i, (label, colour) in enumerate(zip(labels, COLOURS)):
        draw.rectangle([left + i * 120, 12, left + i * 120 + 12, 24], fill=colour)
        draw.text((left + i * 120 + 18, 12), str(label), fill="black")
    draw.text((width - right + 10, 12), "difference", fill="black")
    y = top
    for name, a, b, difference in rows:
        draw.text((8, y + bar // 2), str(name)[:22], fill="black")
        for offset, (value, colour) in enumerate(zip((a, b), COLOURS)):
            top_y = y + offset * bar
            if value is None:
                draw.text((left + 4, top_y), "n/a", fill="grey")
            else:
                draw.rectangle([left, top_y, left + max(1, int(scale * min(max(value, 0.0), 1.0))),
                                top_y + bar - 2], fill=colour)
                draw.text((left + int(scale * min(max(value, 0.0), 1.0)) + 4, top_y), "%.3f" % value,
                          fill="black")
        if difference is not None:
            draw.text((width - right + 10, y + bar // 2), "%+.3f" % difference,
                      fill="#1a9850" if difference > 0 else ("#d73027" if difference < 0 else "black"))
        y += 2 * bar + 12
    image.save(path, format="PNG")
    return path
