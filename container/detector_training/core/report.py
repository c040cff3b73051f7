"""A human-readable report of a finished job, written next to the model.

``write_report`` turns what the job already saved (``history.json``, ``validation.json``,
``classes.json``) into three files in the model directory:

* ``training_curves.png``: the family's losses per epoch, and the headline of each of its AP
  columns per validated epoch (e.g. box and mask mAP) with the learning rate of each epoch
  beside it (its own axis), so a decay step shows next to a dip;
* ``per_class_ap.md``: a Markdown table of AP per class, one column per AP the family reports,
  with a final mAP row;
* ``per_class_ap.csv``: the same table as CSV.

Inputs are plain Python values; every file is written to a temporary name in the model directory
and renamed into place, so a reader never sees half a file.
"""

import csv
import io
import math
import os

from detector_training.core.files import atomic_write

CURVES_FILE = "training_curves.png"
TABLE_MD_FILE = "per_class_ap.md"
TABLE_CSV_FILE = "per_class_ap.csv"
# Not tab:brown (the learning rate's) nor tab:purple/tab:gray (the score curves'), so that no
# loss is drawn in a colour that means something else.
LOSS_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "gold", "tab:pink",
                "tab:olive", "tab:cyan")
MAP_COLOUR = "tab:purple"  # used by nothing else in the figure
SCORE_COLOURS = (MAP_COLOUR, "tab:gray")  # the score curves, in the order of the AP columns
# The AP columns of the table and the score curves: (column, per-class key, headline key). The
# first is always shown; another when the validation (or the history) has its headline.
BOX_AP_COLUMNS = (("AP", "per_class", "mAP"),)
LR_COLOUR = "tab:brown"  # the learning rate, on the mAP panel's right-hand axis; nothing else


def write_report(model_dir, history, validation, classes, loss_names, ap_columns=BOX_AP_COLUMNS):
    """Write the curves PNG and the per-class AP table (Markdown and CSV) into ``model_dir``.

    ``history``: list of per-epoch dicts (``epoch``, the losses, ``mAP`` on validated epochs);
    ``validation``: ``{"mAP", "per_class": {name: AP}, "images", "epoch"}`` or None;
    ``classes``: the class names in training order; ``loss_names``: the family's losses, drawn
    in that order; ``ap_columns``: the family's (column, per-class key, headline key) triples.
    Returns the paths written.
    """
    os.makedirs(model_dir, exist_ok=True)
    history = list(history or [])
    classes = list(classes or [])
    columns = [c for i, c in enumerate(ap_columns) if i == 0 or c[2] in (validation or {})]
    rows = _ap_rows(validation, classes, columns)
    paths = [os.path.join(model_dir, name) for name in (CURVES_FILE, TABLE_MD_FILE, TABLE_CSV_FILE)]
    _atomic_write(paths[0], _curves_png(history, loss_names, ap_columns))
    _atomic_write(paths[1], _markdown(rows, validation, columns).encode("utf-8"))
    _atomic_write(paths[2], _csv(rows, validation, columns).encode("utf-8"))
    return paths


def _number(value):
    """A finite float, else None (missing, NaN, inf or not a number)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _ap_rows(validation, classes, columns):
    """[(class, [AP or None per column])]: the training classes in order, then any other class
    validated."""
    tables = [dict((validation or {}).get(key) or {}) for _, key, _ in columns]
    names = list(classes) + [name for name in tables[0] if name not in classes]
    return [(name, [_number(table.get(name)) for table in tables]) for name in names]


def _headlines(validation, columns):
    return [_number((validation or {}).get(key)) for _, _, key in columns]


def _fmt(value):
    return "n/a" if value is None else "%.4f" % value


def _md_cell(text):
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _markdown(rows, validation, columns):
    lines = ["# Average precision per class", ""]
    if validation:
        lines.append("Validation after epoch %s on %s image(s)." % (validation.get("epoch", "?"),
                                                                   validation.get("images", "?")))
    else:
        lines.append("No validation result: the job did not validate.")
    lines += ["", "| class | %s |" % " | ".join(c[0] for c in columns),
              "| --- |" + " ---: |" * len(columns)]
    lines += ["| %s | %s |" % (_md_cell(name), " | ".join(_fmt(ap) for ap in aps)) for name, aps in rows]
    lines.append("| **mAP** | %s |" % " | ".join("**%s**" % _fmt(v) for v in _headlines(validation, columns)))
    return "\n".join(lines) + "\n"


def _csv(rows, validation, columns):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["class"] + [c[0] for c in columns])
    for name, aps in rows + [("mAP", _headlines(validation, columns))]:
        writer.writerow([name] + ["nan" if ap is None else repr(ap) for ap in aps])
    return out.getvalue()


def _curves_png(history, loss_names, ap_columns):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    epochs = [entry.get("epoch", index) for index, entry in enumerate(history)]
    fig = Figure(figsize=(10, 4), dpi=100)
    losses, maps = fig.subplots(1, 2)
    for key, colour in zip(loss_names, LOSS_COLOURS):
        values = [_number(entry.get(key)) for entry in history]
        values = [float("nan") if v is None else v for v in values]
        losses.plot(epochs, values, marker="o", label=key, color=colour)
    losses.set_title("Training losses")
    losses.set_xlabel("epoch")
    losses.set_ylabel("loss (epoch mean)")
    losses.grid(True, alpha=0.3)
    if history:
        losses.legend(fontsize="small")
    else:
        losses.text(0.5, 0.5, "no epochs", ha="center", va="center", transform=losses.transAxes)

    top, drawn = None, 0
    for (_, _, key), colour in zip(ap_columns, SCORE_COLOURS):
        validated = [(e, _number(entry.get(key))) for e, entry in zip(epochs, history)]
        validated = [(e, m) for e, m in validated if m is not None]
        if validated:
            maps.plot([e for e, _ in validated], [m for _, m in validated], marker="o",
                      color=colour, label=key)
            top = max([m for _, m in validated] + ([top] if top is not None else []))
            drawn += 1
    if top is not None:
        maps.set_ylim(0.0, max(0.05, min(1.0, top * 1.15)))
        if drawn > 1:
            maps.legend(fontsize="small")
    else:
        maps.text(0.5, 0.5, "no validated epoch", ha="center", va="center",
                  transform=maps.transAxes)
    maps.set_title("Validation mAP and learning rate")
    maps.set_xlabel("epoch")
    maps.set_ylabel("mAP")
    maps.grid(True, alpha=0.3)
    rates = [(e, _number(entry.get("lr"))) for e, entry in zip(epochs, history)]
    rates = [(e, r) for e, r in rates if r is not None and r > 0]
    if rates:  # the lr an epoch ended with; log scale so every decay is one visible step
        lr_axis = maps.twinx()
        lr_axis.plot([e for e, _ in rates], [r for _, r in rates], drawstyle="steps-mid",
                     linestyle="--", color=LR_COLOUR)
        lr_axis.set_yscale("log")
        lr_axis.set_ylabel("learning rate (dashed)")
    for axes in (losses, maps):  # whole epochs on the x axis, also for a single epoch
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _atomic_write(path, data):
    atomic_write(path, lambda handle: handle.write(data))
