"""The data check (``detector-check-data PATH``): what a job would train on, before the GPU bill.

Given a folder laid out as ``/opt/ml/input/data`` (channels as sub-folders) or one channel's
folder, it says the format found (the formats' own recognition), images and objects per class
and split, negatives, the images carrying an EXIF orientation tag and the frame (upright or as
stored) each is read in, what the reader left out and why (its ``Drops``) and what it changed
but kept (its ``adjusted``), and the problems that would stop the job, each with its fix. The
job runs the same check on rank 0 once its data is read and writes the report into the model
directory (``data_report.md``, ``data_report.png``).

No MXNet: the formats' ``labelled`` views read annotations and image headers only, never pixels.
"""

import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field

from detector_training.core.files import atomic_save, atomic_write_text
from detector_training.data import formats
from detector_training.data.formats.data_format import EMPTY_VALIDATION, Channel
from detector_training.data.labelled import Drops, boxes_of
from detector_training.errors import JobError
from detector_training.job import config as config_mod

LOG = logging.getLogger("detector_training")
REPORT_MD = "data_report.md"
REPORT_PNG = "data_report.png"
SPLITS = (("train", "training"), ("validation", "validation"))
# Channels a format reads beside those it finds its data in (a manifest's images).
SIDE_CHANNELS = ("images",)


@dataclass
class Problem:
    """What would stop the job, and how to fix it."""

    cause: str
    fix: str = ""

    def text(self):
        return self.cause + (" Fix: " + self.fix if self.fix else "")


@dataclass
class SplitReport:
    """One split as the job would train on it."""

    what: str  # "training" or "validation"
    layout: str
    images: int
    negatives: int  # images without a box of the trained classes
    objects: OrderedDict  # class -> boxes of the trained classes
    drops: Drops
    box_sides: list = field(default_factory=list)  # sqrt(width * height) in pixels, per box
    orientation: str = ""  # the images with an EXIF orientation tag, and the frame they are read in
    adjusted: Drops = field(default_factory=Drops)  # what was changed but kept, by reason


@dataclass
class DataReport:
    path: str
    dataset: str = ""
    found: str = ""  # where the format was found, as recognition says
    classes: tuple = ()
    splits: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    aliases: list = field(default_factory=list)  # (temporary channel path, the folder it is)

    @property
    def ok(self):
        return not self.problems

    def shown(self, text):
        text = str(text)
        for scratch, folder in sorted(self.aliases, key=lambda a: -len(a[0])):
            text = text.replace(scratch, folder)
        return text

    def markdown(self):
        lines = ["# Data report", "", "- data: `%s`" % self.path]
        if self.dataset:
            lines.append("- format: dataset=%s (%s)" % (self.dataset, self.found or "named"))
        if self.classes:
            lines.append("- classes: %s" % ", ".join(self.classes))
        lines += ["- %s" % note for note in self.notes]
        for split in self.splits:
            lines += ["", "## %s: %s" % (split.what.capitalize(), split.layout), "",
                      "%d images, %d of them negatives (no box of the trained classes), %d objects."
                      % (split.images, split.negatives, sum(split.objects.values())), ""]
            if split.orientation:
                lines += [split.orientation, ""]
            lines += ["| class | objects |", "|---|---:|"]
            lines += ["| %s | %d |" % (_cell(name), count) for name, count in split.objects.items()]
            if split.drops:
                lines += ["", "Left out:", "", "| reason | count | first places |", "|---|---:|---|"]
                lines += ["| %s | %d | %s |" % (_cell(reason), count,
                                                _cell(", ".join(split.drops.examples(reason))))
                          for reason, count in split.drops.counts().items()]
            if split.adjusted:
                lines += ["", "Changed but kept:", "", "| reason | count | first places |",
                          "|---|---:|---|"]
                lines += ["| %s | %d | %s |" % (_cell(reason), count,
                                                _cell(", ".join(split.adjusted.examples(reason))))
                          for reason, count in split.adjusted.counts().items()]
        lines += ["", "## Problems", ""]
        lines += (["- %s" % _cell(problem.text()) for problem in self.problems]
                  or ["None: the job would start on this data."])
        return self.shown("\n".join(lines) + "\n")

    def log(self, logger=LOG):
        for line in self.log_lines():
            (logger.error if line.startswith("problem: ") else logger.info)("data check: %s", line)

    def log_lines(self):
        lines = ["%s: %s" % (self.path, "dataset=%s (%s)" % (self.dataset, self.found)
                             if self.dataset else "no format found")]
        for split in self.splits:
            lines.append("%s: %s, %d images (%d negatives), objects per class: %s" % (
                split.what, split.layout, split.images, split.negatives,
                ", ".join("%s %d" % item for item in split.objects.items()) or "none"))
            if split.orientation:
                lines.append("%s: %s" % (split.what, split.orientation))
            lines += ["%s: left out: %s: %d (%s)" % (split.what, reason, count, ", ".join(
                split.drops.examples(reason))) for reason, count in split.drops.counts().items()]
            lines += ["%s: changed but kept: %s: %d (%s)" % (
                split.what, reason, count, ", ".join(split.adjusted.examples(reason)))
                for reason, count in split.adjusted.counts().items()]
        lines += self.notes
        lines += ["problem: " + problem.text() for problem in self.problems]
        return [self.shown(line) for line in lines]


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


# --- where the channels are ------------------------------------------------------------------

def _data_channels():
    return {name for fmt in formats.all_formats() for name in fmt.channels}


def is_channels_folder(path):
    """Whether ``path`` is laid out as /opt/ml/input/data: every sub-folder is named as a
    channel, one of them a channel some format reads data from (a single channel's folder has
    others, or only images/: VOCdevkit/, Roboflow's valid/, Label Studio's images/)."""
    folders = {n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))}
    data = _data_channels()
    return bool(folders & data) and folders <= data | set(formats.NOT_DATA) | set(SIDE_CHANNELS)


def channel_formats(path):
    """{format name: (channel name, where)}: the channel name under which each format
    recognises ``path`` as one channel's folder ('train' when the format reads it there)."""
    found = OrderedDict()
    for fmt in formats.all_formats():
        # 'train' first: the channel users send their data in, where the format reads it.
        for name in sorted(fmt.channels, key=lambda n: n != "train"):
            where = fmt.recognise(Channel(name, path))
            if where:
                found[fmt.name] = (name, where)
                break
    # A folder some format takes as 'train' is that; others' readings under other names (the
    # built-in algorithm's annotation channel sees any JSON) are not a second format.
    if any(name == "train" for name, _ in found.values()):
        found = OrderedDict((k, v) for k, v in found.items() if v[0] == "train")
    return found


# --- the check -------------------------------------------------------------------------------

def check(path, hyperparameters=None, channel=None):
    """The :class:`DataReport` of the data at ``path`` (a channels folder, or one channel's
    folder; ``channel`` names the channel it is, else it is found by recognition), with the
    job's ``hyperparameters`` (``dataset``, ``classes``, ``skip_empty``, ...)."""
    path = os.path.abspath(path)
    report = DataReport(path)
    hyperparameters = dict(hyperparameters or {})
    if not os.path.isdir(path):
        report.problems.append(Problem("%s is not a folder." % path,
                                       "give the folder you will upload as the job's channels "
                                       "(or one channel)."))
        return report
    scratch = None
    try:
        if channel is None and is_channels_folder(path):
            channels_dir = path
        else:
            scratch = tempfile.mkdtemp(prefix="detector-check-data-")
            channels_dir = scratch
            if channel is None:
                found = channel_formats(path)
                if len(found) == 1:
                    channel = next(iter(found.values()))[0]
                elif found:
                    report.problems.append(Problem(
                        "%s holds data of %d formats: %s." % (path, len(found), "; ".join(
                            "%s (%s)" % (name, where) for name, (_c, where) in found.items())),
                        "keep one format in the folder, or name it with --set dataset=NAME."))
                    return report
                else:
                    channel = "train"
            os.symlink(path, os.path.join(scratch, channel))
            report.aliases.append((os.path.join(scratch, channel), path))
            report.notes.append("%s checked as channel '%s'" % (path, channel))
        _check_channels(report, channels_dir, hyperparameters)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return report


def check_channels(channels, hyperparameters=None):
    """The :class:`DataReport` of local folders given as ``{channel name: folder}`` (the inputs a
    launcher is about to send), checked together as the job's channels."""
    report = DataReport(", ".join("%s=%s" % (name, os.path.abspath(folder))
                                  for name, folder in sorted(channels.items())))
    missing = [folder for folder in channels.values() if not os.path.isdir(folder)]
    if missing:
        report.problems.append(Problem("%s is not a folder." % missing[0],
                                       "give each channel's local folder."))
        return report
    scratch = tempfile.mkdtemp(prefix="detector-check-data-")
    try:
        for name, folder in channels.items():
            os.symlink(os.path.abspath(folder), os.path.join(scratch, name))
            report.aliases.append((os.path.join(scratch, name), os.path.abspath(folder)))
        _check_channels(report, scratch, dict(hyperparameters or {}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def _check_channels(report, channels_dir, hyperparameters):
    try:
        if "dataset" not in hyperparameters:
            name, channel, where = formats.recognise(channels_dir)
            hyperparameters["dataset"] = name
            report.found = "recognised%s: %s" % (" in channel '%s'" % channel if channel else "",
                                                 where)
        config = config_mod.from_hyperparameters(hyperparameters)
    except JobError as exc:
        report.problems.append(Problem(exc.cause, exc.fix))
        return
    report.dataset = config.dataset
    fmt = formats.get(config.dataset)
    describe(report, fmt, channels_dir, config)


def describe(report, fmt, channels_dir, config):
    """Fill ``report`` with what ``fmt`` reads from ``channels_dir`` under ``config``."""
    sets = {}
    for split, _what in SPLITS:
        if split == "validation" and config.val_fraction > 0:
            continue
        try:
            sets[split] = fmt.labelled(channels_dir, split, config)
        except NotImplementedError:
            report.notes.append("dataset=%s: its contents are described when the job reads them "
                                "(not by this check)." % fmt.name)
            return
        except JobError as exc:
            report.problems.append(Problem(exc.cause, exc.fix))
            return
    train = sets.get("train")
    if train is None:
        report.problems.append(Problem(
            "no training data for dataset=%s (none of the channels %s)."
            % (fmt.name, ", ".join(fmt.channels)),
            "give the job a '%s' channel holding the %s." % (fmt.channels[0],
                                                            fmt.title or fmt.name)))
        return
    classes = tuple(config.classes) or train.class_names()
    report.classes = classes
    empty = sets.get("validation")
    if empty is not None and not empty.images:  # as the job does: carved instead
        report.notes.append(EMPTY_VALIDATION % (empty.layout, fmt_default_fraction(fmt),
                                                config.seed))
        sets["validation"] = None
    elif sets.get("validation") is None:
        report.notes.append("validation: %s of the training images, carved with seed %d" % (
            "%g" % (config.val_fraction or fmt_default_fraction(fmt)), config.seed))
    if config.skip_empty:
        report.notes.append("negatives are left out of training (skip_empty=true)")
    for split, what in SPLITS:
        labelled = sets.get(split)
        if labelled is None:
            continue
        summary = summarise(labelled, classes, what, fmt.frame)
        report.splits.append(summary)
        if not summary.images:
            report.problems.append(Problem("the %s data (%s) has no image." % (what, summary.layout),
                                           "put the images and their labels in the channel."))
        elif summary.negatives == summary.images:
            report.problems.append(Problem(
                "no %s image (%s) has an object of the classes %s." % (
                    what, summary.layout, ", ".join(classes) or "(none found)"),
                "check the labels, or name the classes with 'classes'."))


def fmt_default_fraction(fmt):
    return getattr(fmt, "DEFAULT_VAL_FRACTION", 0.1)


def summarise(labelled, classes, what, frame=None):
    """A SplitReport of a LabelledSet: boxes of classes not in ``classes`` counted as dropped
    (as the job drops them), images without a kept box counted as negatives, images with an EXIF
    orientation tag counted by the frame they are read in (the format's ``frame``); what the reader
    changed but kept (a clipped box, a tool's mask kept as an object) counted as it counted it."""
    drops = Drops().merge(labelled.drops)
    objects = OrderedDict((name, 0) for name in classes)
    sides, negatives = [], 0
    for image in labelled.images:
        kept = boxes_of(image, objects, drops)
        for box in kept:
            objects[box.label] += 1
            sides.append(math.sqrt(max(box.xmax - box.xmin, 0.0) * max(box.ymax - box.ymin, 0.0)))
        negatives += not kept
    return SplitReport(what, labelled.layout or "", len(labelled.images), negatives, objects,
                       drops, sides, orientation_line(labelled.images, frame),
                       Drops().merge(labelled.adjusted))


def orientation_line(images, frame):
    """What the report says of the images' EXIF orientation tags and the frame each is read in."""
    read = [image for image in images if image.orientation is not None]
    how = " (%s)" % frame.value if frame is not None else ""
    if not read:
        return ("EXIF orientation: not read, the sizes being the annotation file's; images are "
                "decoded in the format's frame%s." % how) if images else ""
    tagged = [image for image in read if image.orientation != 1]
    upright = sum(1 for image in tagged if image.oriented)
    unread = " (%d not read)" % (len(images) - len(read)) if len(read) < len(images) else ""
    return ("EXIF orientation: %d of %d images%s carry a tag other than 1; read upright (turned "
            "by the tag): %d, as stored: %d%s." % (len(tagged), len(read), unread, upright,
                                                   len(tagged) - upright, how))


# --- the picture -----------------------------------------------------------------------------

def render_png(report, path):
    """Objects per class (per split) and the distribution of box sizes, as a small PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, max(3.0, 0.25 * len(report.classes) + 1.5)), dpi=80)
    counts, sizes = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    height = 0.8 / max(len(report.splits), 1)
    for n, split in enumerate(report.splits):
        counts.barh([i + n * height for i in range(len(split.objects))], list(split.objects.values()),
                    height=height, label=split.what)
        if split.box_sides:
            sizes.hist(split.box_sides, bins=30, alpha=0.6, label=split.what)
    counts.set_yticks(range(len(report.classes)))
    counts.set_yticklabels(report.classes)
    counts.invert_yaxis()
    counts.set_title("objects per class")
    sizes.set_title("box size (sqrt of area, pixels)")
    for axes in (counts, sizes):
        if report.splits:
            axes.legend(fontsize="small")
    figure.tight_layout()
    atomic_save(path, lambda tmp: figure.savefig(tmp, format="png"))


def write_report(report, folder):
    """``data_report.md`` and ``data_report.png`` into ``folder``; their paths."""
    md, png = os.path.join(folder, REPORT_MD), os.path.join(folder, REPORT_PNG)
    atomic_write_text(md, report.markdown())
    render_png(report, png)
    return md, png


# --- the command -----------------------------------------------------------------------------

def parse_sets(pairs):
    values = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit("--set takes KEY=VALUE, not %r" % pair)
        values[key.strip()] = value
    return values


def main(argv=None):
    """``detector-check-data PATH``: prints the report; exit code 1 when the job would not start."""
    parser = argparse.ArgumentParser(
        prog="detector-check-data",
        description="Check labelled data before a training job: the format found, images and "
                    "objects per class and split, what is left out and why, and what would stop "
                    "the job.")
    parser.add_argument("path", help="a folder laid out as /opt/ml/input/data (channels as "
                                     "sub-folders), or one channel's folder")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                        help="a hyperparameter of the job (dataset, classes, skip_empty, ...)")
    parser.add_argument("--channel", help="the channel PATH is (default: found by recognition)")
    parser.add_argument("--output", help="also write data_report.md and data_report.png here")
    args = parser.parse_args(argv)
    report = check(args.path, parse_sets(args.set), args.channel)
    sys.stdout.write(report.markdown())
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        write_report(report, args.output)
    return 0 if report.ok else 1


def cli():
    sys.exit(main())
