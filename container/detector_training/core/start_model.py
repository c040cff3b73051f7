"""Starting a job from an earlier job's model (the 'model' channel): fine-tuning.

The channel holds that job's ``model.tar.gz`` (as SageMaker packs /opt/ml/model) or its files
(``model-best.params`` or ``model.params``, with ``classes.json``; core/model_dir.py names and caps
them). A tarball is extracted under the model directory's limits, only the files needed here (and
``model-symbol.json``, against which core/model_dir.py checks the length of ``classes.json``). With the
same class list every parameter is loaded. With a different one the backbone, RPN and box head (and
a Mask R-CNN's mask head up to its last layer) are reused and the class head is re-initialised for
the new classes (GluonCV's ``reset_class``; rows of
classes both lists share, and the background, keep their trained weights). The log says what was
reused.
"""

import glob
import logging
import os
import shutil
import tempfile

from detector_training.core import archive
from detector_training.core.model_dir import (CLASSES_FILE, START_PARAMS, SYMBOL_FILE, extract_model,
                                              read_model_classes, shallowest_with)
from detector_training.errors import DataError, ModelError, one_line

LOG = logging.getLogger(__name__)

ARCHIVE_PATTERNS = ("*.tar.gz", "*.tgz", "*.tar")


def start_from_channel(net, channel, ctx):
    """Load the model in ``channel`` into ``net`` (materialised, on ``ctx``); returns the summary."""
    scratch = tempfile.mkdtemp(prefix="detector-start-model-")
    try:
        params, classes = start_model_files(channel, scratch)
        summary = load_start_model(net, params, classes, ctx)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    LOG.info("start model: %s", describe(summary))
    return summary


def start_model_files(channel, scratch):
    """(params file, class list or None) from a model directory or a model tarball in ``channel``."""
    found = _model_files_in(channel)
    if found:
        return found
    archives = sorted(p for pattern in ARCHIVE_PATTERNS
                      for p in glob.glob(os.path.join(glob.escape(channel), pattern)))
    for path in archives:
        if not os.path.isfile(path):
            raise DataError("%s in the 'model' channel is %s, not a model tarball%s." % (
                os.path.basename(path), "a directory" if os.path.isdir(path) else "not a regular file",
                " (what an S3 prefix with keys under it becomes)" if os.path.isdir(path) else ""),
                "point the 'model' channel at the model.tar.gz object itself (or at a prefix holding "
                "only it).")
        found = _model_files_in(_extract(path, scratch), walk=True)
        if found:
            return found
    raise DataError("the 'model' channel %s holds neither %s nor a model.tar.gz holding one."
                    % (channel, " nor ".join(START_PARAMS)),
                    "put an earlier job's model.tar.gz (or its model-best.params/model.params with "
                    "classes.json) into the 'model' channel, or drop the channel.")


def _model_files_in(root, walk=False):
    """The preferred params file at the top of ``root`` (with ``walk``: in its shallowest directory
    that has one, as a tarball may hold a folder), and the classes.json beside it (None without),
    refused when the exported network beside it predicts another number of classes."""
    if walk:
        found = shallowest_with(root, START_PARAMS)
    else:
        found = next(((root, n) for n in START_PARAMS if os.path.isfile(os.path.join(root, n))), None)
    if found is None:
        return None
    directory, name = found
    classes_path = os.path.join(directory, CLASSES_FILE)
    classes = None
    if os.path.isfile(classes_path):
        try:
            classes = read_model_classes(directory)
        except ModelError as exc:
            raise DataError("the 'model' channel's %s" % exc.cause, exc.fix) from None
    return os.path.join(directory, name), classes


def _extract(path, scratch):
    try:
        return extract_model(path, scratch, START_PARAMS + (CLASSES_FILE, SYMBOL_FILE))
    except archive.ArchiveError as exc:
        raise DataError("cannot use %s from the 'model' channel: %s." % (os.path.basename(path), exc.reason),
                        exc.fix if isinstance(exc, archive.NoRoom) else
                        "put the model.tar.gz an earlier job wrote into the 'model' channel.") from None
    except OSError as exc:
        raise DataError("cannot extract %s from the 'model' channel (%s)." % (
            os.path.basename(path), exc.strerror or exc),
            "check that the file is readable and the disk under %s has room." % scratch) from None


def load_start_model(net, params_path, saved_classes, ctx):
    """Load ``params_path`` into ``net``: every array whose name and shape match. When the saved
    classes differ from the network's, the class head is shaped for the saved classes to load it,
    then reset to the network's classes (GluonCV's reset_class), keeping the rows of shared classes."""
    import mxnet as mx

    try:
        saved = mx.nd.load(params_path)
    except mx.base.MXNetError as exc:
        raise DataError("cannot read %s from the 'model' channel (%s)." % (
            os.path.basename(params_path), one_line(exc)[:200]),
            "put the model.tar.gz an earlier job wrote into the 'model' channel.") from None
    new_classes = list(net.classes)
    differ = saved_classes is not None and list(saved_classes) != new_classes
    if differ:
        _forget_target_generator(net)
        net.reset_class(list(saved_classes))
    own = net._collect_params_with_prefix()  # pylint: disable=protected-access  (save_parameters' names)
    reused, mismatched = [], []
    for name, param in own.items():
        if name not in saved:
            continue
        if tuple(saved[name].shape) != tuple(param.shape):
            mismatched.append(name)
            continue
        param.set_data(saved[name].as_in_context(ctx))
        reused.append(name)
    if not reused:
        raise DataError("no parameter of %s fits this network (%d saved arrays, none with a name and "
                        "shape of the network's)." % (os.path.basename(params_path), len(saved)),
                        "start from a model of the same network, or drop the 'model' channel.")
    kept_rows, replaced = [], set()
    if differ:
        kept_rows = [c for c in new_classes if c in saved_classes]
        _forget_target_generator(net)
        net.reset_class(new_classes, reuse_weights=list(kept_rows) or None)
        # The class head is what reset_class replaced (Faster R-CNN: class and box predictors;
        # Mask R-CNN: and the mask head's last layer; YOLOv3: each output's prediction layer),
        # whatever the family calls it.
        after = net._collect_params_with_prefix()  # pylint: disable=protected-access
        replaced = {n for n, p in after.items() if own.get(n) is not p}
    return {"path": params_path, "saved_classes": saved_classes, "classes": new_classes,
            "reused": [n for n in reused if n not in replaced],
            "reinitialised": [n for n in own if n in replaced],
            "mismatched": mismatched, "unused": [n for n in saved if n not in own],
            "kept_rows": kept_rows, "total": len(own)}


def _forget_target_generator(net):
    """A Faster R-CNN that ran a training forward holds an RCNNTargetGenerator made for its class
    count; reset_class replaces it with a factory, which gluon refuses for a registered child
    ("Changing attribute type for _target_generator"). Drop the instance: the factory makes a new
    one for the new class count at the next training forward."""
    from mxnet.gluon import Block

    if isinstance(net.__dict__.get("_target_generator"), Block):
        net._children.pop("_target_generator", None)  # pylint: disable=protected-access
        del net.__dict__["_target_generator"]


def _blocks(names):
    counts = {}
    for name in names:
        block = name.split(".")[0]
        counts[block] = counts.get(block, 0) + 1
    return ", ".join("%s (%d)" % item for item in counts.items()) or "none"


def describe(summary):
    """One log line: what was loaded from where, and what was re-initialised."""
    text = "%s: reused %d of %d parameter arrays: %s" % (
        summary["path"], len(summary["reused"]), summary["total"], _blocks(summary["reused"]))
    if summary["saved_classes"] is not None and summary["saved_classes"] != summary["classes"]:
        text += "; classes %s -> %s: class head re-initialised (%s), trained rows kept for %s" % (
            ",".join(summary["saved_classes"]), ",".join(summary["classes"]),
            _blocks(summary["reinitialised"]),
            ", ".join(["background"] + summary["kept_rows"]) if summary["kept_rows"] else "none")
    elif summary["mismatched"]:
        text += "; not loaded (shape differs): %s" % _blocks(summary["mismatched"])
    if summary["unused"]:
        text += "; saved arrays this network does not have: %d" % len(summary["unused"])
    return text
