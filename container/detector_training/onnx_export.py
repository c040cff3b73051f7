"""ONNX export of a trained model directory: ``model.onnx`` and ``onnx.json`` beside the MXNet
export, written only once ONNX Runtime answers what MXNet answers on sample images.

The conversion is MXNet's own (``mxnet.onnx``'s ``MXNetGraph`` and its operator converters, what
``mx.onnx.export_model`` runs) with this project's fixes, each for a fault measured on GluonCV's
detectors (REFERENCE.md §16):

* **opset 13, IR 8**: the converters implement opsets 12-13; ``export_model`` declares the
  installed onnx's default (23, where ONNX Runtime fails to load Faster R-CNN) and writes IR 11;
* **per-class NMS**: MXNet's converter for ``_contrib_box_nms`` ignores the class id and takes
  the candidates' ``topk`` as ONNX's maximum outputs, so SSD and YOLOv3 lose detections; ours
  offsets boxes by class (boxes of two classes never overlap) and drops candidates past ``topk``;
* **static reshapes**: ``Reshape`` with shape code -4 (Mask R-CNN) has no converter; such nodes
  are given the static shape MXNet infers for them at the exported input size;
* **``_greater_equal_scalar``** (Faster R-CNN's graph) has no converter: one is added;
* **weights are not inputs**: every initializer listed as a graph input stops ONNX Runtime's
  constant folding and fusions;
* **unique node names**: YOLOv3's upsample leaves unnamed nodes that ONNX Runtime's constant
  folding turns into clashing tensors.

The project's converters are registered through MXNet's own registry (``MXNetGraph.register``)
only while a graph is converted, and MXNet's are put back afterwards.

A family that runs on squares (SSD, YOLOv3: ``test_resize``) is exported at its square; one that
keeps the aspect (the R-CNN families) with a dynamic height and width, and ``onnx.json`` says the
short side and the cap on the longer side to resize to (docs/onnx.md).
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile

from detector_training import inference
from detector_training.core import model_dir
from detector_training.core.files import atomic_save, atomic_write, write_json
from detector_training.errors import JobError, ModelError, one_line

ONNX_FILE, ONNX_JSON = model_dir.ONNX_FILE, model_dir.ONNX_JSON
OPSET = 13  # the newest opset mxnet.onnx's converters implement
IR_VERSION = 8  # onnxruntime <= 1.20 refuses IR 11 files; every operator used is in IR 8
INPUT_NAME = "data"  # the name SymbolBlock.imports gives the exported network's input
SCORE_TOLERANCE = 1e-3
BOX_TOLERANCE = 1.0  # pixels of the network's input
# Mask R-CNN's masks are probabilities cut at 0.5: 0.01 apart moves only pixels that close to the cut
# (float32 arithmetic in another order reaches 0.002 at 144 x 144 pixels).
MASK_TOLERANCE = 0.01
SAMPLE_IMAGES = 4  # generated sample images when the caller gives none
MAX_SAMPLE_IMAGES = 8  # of the job's validation images


class OnnxExportError(ModelError):
    """A model that cannot be exported to ONNX, or whose export answers differently."""

    category = "OnnxExportError"


# --- the project's converters -------------------------------------------------------------------

def _convert_box_nms(node, **kwargs):
    """``_contrib_box_nms`` as MXNet computes it: candidates past ``topk`` (by score) dropped,
    suppression only within a class when ``id_index`` names one (``force_suppress`` false),
    output rows in score order with the suppressed ones -1."""
    import numpy as np
    from onnx import TensorProto
    from onnx.helper import make_node, make_tensor

    name = node["name"]
    lookup = kwargs["outputs_lookup"]
    data = lookup[node["inputs"][0][0]][node["inputs"][0][1]].name
    attrs = node.get("attrs", {})
    overlap = float(attrs.get("overlap_thresh", "0.5"))
    valid = float(attrs.get("valid_thresh", "0"))
    topk = int(attrs.get("topk", "-1"))
    coord = int(attrs.get("coord_start", "2"))
    score = int(attrs.get("score_index", "1"))
    id_index = int(attrs.get("id_index", "-1"))
    per_class = id_index >= 0 and attrs.get("force_suppress", "False") in ("False", "0", "false")
    if attrs.get("in_format", "corner") != attrs.get("out_format", "corner"):
        raise OnnxExportError("%s: box_nms converting box formats is not supported." % name,
                              "export a network whose NMS keeps the box format.")
    if int(attrs.get("background_id", "-1")) != -1:
        raise OnnxExportError("%s: box_nms with a background class is not supported." % name,
                              "export a network whose NMS has no background_id.")

    def const(suffix, values, dtype=TensorProto.INT64):
        tensor_name = "%s_c_%s" % (name, suffix)
        values = list(np.atleast_1d(values))
        kwargs["initializer"].append(make_tensor(tensor_name, dtype, [len(values)], values))
        return tensor_name

    def t(suffix):
        return "%s_%s" % (name, suffix)

    big = 2 ** 31 - 1
    for scalar, value in (("r_start", 0.0), ("r_step", 1.0), ("last_rank", float(big))):
        kwargs["initializer"].append(make_tensor(t(scalar), TensorProto.FLOAT, [], [value]))
    nodes = [
        # rows: (batch, N, K) whatever the input's leading axes
        make_node("Shape", [data], [t("shape")]),
        make_node("Slice", [t("shape"), const("m2", -2), const("end", big)], [t("nk")]),
        make_node("Concat", [const("m1", -1), t("nk")], [t("shape3")], axis=0),
        make_node("Reshape", [data, t("shape3")], [t("rows")]),
        make_node("Slice", [t("rows"), const("cs", coord), const("ce", coord + 4), const("ax2", 2)],
                  [t("boxes")]),
        make_node("Gather", [t("rows"), const("si", score)], [t("score2")], axis=2),
        make_node("Squeeze", [t("score2"), const("ax2b", 2)], [t("scores")]),
        # candidates past topk get a score below valid_thresh
        make_node("Slice", [t("nk"), const("z", 0), const("o", 1)], [t("n")]),
    ]
    scores = t("scores")
    if topk > 0:
        nodes += [
            make_node("Min", [t("n"), const("topk", topk)], [t("k")]),
            make_node("TopK", [scores, t("k")], [t("top_values"), t("top_index")], axis=1),
            make_node("ConstantOfShape", [t("shape_bn")], [t("zeros")],
                      value=make_tensor("zero", TensorProto.FLOAT, [1], [0.0])),
            make_node("Shape", [scores], [t("shape_bn")]),
            make_node("Shape", [t("top_values")], [t("shape_bk")]),
            make_node("ConstantOfShape", [t("shape_bk")], [t("ones")],
                      value=make_tensor("one", TensorProto.FLOAT, [1], [1.0])),
            make_node("ScatterElements", [t("zeros"), t("top_index"), t("ones")], [t("in_top")], axis=1),
            make_node("Cast", [t("in_top")], [t("in_top_b")], to=TensorProto.BOOL),
            make_node("Where", [t("in_top_b"), scores, const("below", [valid - 1.0], TensorProto.FLOAT)],
                      [t("scores_k")]),
        ]
        scores = t("scores_k")
    boxes = t("boxes")
    if per_class:
        # boxes of different classes are moved apart by more than all boxes span: never overlap
        nodes += [
            make_node("ReduceMax", [boxes], [t("hi")], keepdims=0),
            make_node("ReduceMin", [boxes], [t("lo")], keepdims=0),
            make_node("Sub", [t("hi"), t("lo")], [t("span0")]),
            make_node("Add", [t("span0"), const("one_f", [1.0], TensorProto.FLOAT)], [t("span")]),
            make_node("Slice", [t("rows"), const("ids", id_index), const("ide", id_index + 1), const("ax2c", 2)],
                      [t("ids")]),
            make_node("Mul", [t("ids"), t("span")], [t("offset")]),
            make_node("Add", [boxes, t("offset")], [t("boxes_apart")]),
        ]
        boxes = t("boxes_apart")
    nodes += [
        make_node("Unsqueeze", [scores, const("ax1", 1)], [t("scores_bcn")]),
        make_node("NonMaxSuppression", [boxes, t("scores_bcn"), const("max_out", big),
                                        const("iou", [overlap], TensorProto.FLOAT),
                                        const("valid", [valid], TensorProto.FLOAT)],
                  [t("selected")], center_point_box=0 if attrs.get("in_format", "corner") == "corner" else 1),
        # each kept row's rank in the selection (its score order), every other row ranked last
        make_node("Gather", [t("selected"), const("batch_box", [0, 2])], [t("where")], axis=1),
        make_node("Shape", [t("selected")], [t("sel_shape")]),
        make_node("Slice", [t("sel_shape"), const("z3", 0), const("o3", 1)], [t("sel_count")]),
        make_node("Squeeze", [t("sel_count"), const("ax0", 0)], [t("sel_count_s")]),
        make_node("Cast", [t("sel_count_s")], [t("sel_count_f")], to=TensorProto.FLOAT),
        make_node("Range", [t("r_start"), t("sel_count_f"), t("r_step")], [t("ranks")]),
        make_node("Shape", [scores], [t("shape_bn2")]),
        make_node("Expand", [t("last_rank"), t("shape_bn2")], [t("rank_init")]),
        make_node("ScatterND", [t("rank_init"), t("where"), t("ranks")], [t("rank")]),
        make_node("Slice", [t("nk"), const("z4", 0), const("o4", 1)], [t("n_all")]),
        make_node("TopK", [t("rank"), t("n_all")], [t("rank_sorted"), t("order")], axis=1, largest=0,
                  sorted=1),
        make_node("Unsqueeze", [t("order"), const("ax2d", 2)], [t("order3")]),
        make_node("Expand", [t("order3"), t("shape3_actual")], [t("order_rows")]),
        make_node("Shape", [t("rows")], [t("shape3_actual")]),
        make_node("GatherElements", [t("rows"), t("order_rows")], [t("sorted_rows")], axis=1),
        make_node("Less", [t("rank_sorted"), t("last_rank")], [t("kept")]),
        make_node("Unsqueeze", [t("kept"), const("ax2e", 2)], [t("kept3")]),
        make_node("Where", [t("kept3"), t("sorted_rows"), const("minus1", [-1.0], TensorProto.FLOAT)],
                  [t("out3")]),
        make_node("Reshape", [t("out3"), t("shape")], [name]),
    ]
    return _topological(nodes, name)


def _topological(nodes, name):
    """``nodes`` ordered so that each comes after the nodes whose outputs it reads (ONNX wants
    the graph sorted); each named after the operator's node."""
    produced = {out: node for node in nodes for out in node.output}
    ordered, done = [], set()

    def visit(node):
        if id(node) in done:
            return
        done.add(id(node))
        for source in node.input:
            if source in produced:
                visit(produced[source])
        ordered.append(node)

    for node in nodes:
        visit(node)
    for index, node in enumerate(ordered):
        node.name = "%s_%d" % (name, index)
    return ordered


def _convert_greater_equal_scalar(node, **kwargs):
    """``x >= scalar`` as MXNet gives it: 1 or 0 in x's type."""
    import numpy as np
    from onnx import helper
    from onnx.helper import make_node

    name = node["name"]
    lookup = kwargs["outputs_lookup"]
    source = lookup[node["inputs"][0][0]][node["inputs"][0][1]]
    scalar = float(node.get("attrs", {}).get("scalar", "0"))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(source.dtype))
    value = int(scalar) if np.dtype(source.dtype).kind in "iu" else scalar
    return [
        make_node("Constant", [], [name + "_scalar"], value=helper.make_tensor(name + "_value", elem, [1], [value])),
        make_node("GreaterOrEqual", [source.name, name + "_scalar"], [name + "_ge"]),
        make_node("Cast", [name + "_ge"], [name], to=elem, name=name),
    ]


# (MXNet operator, converter, whether it replaces MXNet's own): registered for OPSET
PROJECT_CONVERTERS = (("_contrib_box_nms", _convert_box_nms, True),
                      ("_greater_equal_scalar", _convert_greater_equal_scalar, False))


@contextlib.contextmanager
def project_converters():
    """The project's converters in MXNet's registry (``MXNetGraph.register``) while the block runs;
    MXNet's own back afterwards. One that only fills a gap is not put over a converter MXNet has."""
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph

    table = MXNetGraph.registry_.setdefault(OPSET, {})
    saved = {op: table.get(op) for op, _convert, _replaces in PROJECT_CONVERTERS}
    try:
        for op, convert, replaces in PROJECT_CONVERTERS:
            if replaces or not any(op in MXNetGraph.registry_.get(v, {}) for v in range(12, OPSET + 1)):
                MXNetGraph.register(op, OPSET)(convert)
        yield
    finally:
        for op, converter in saved.items():
            if converter is None:
                table.pop(op, None)
            else:
                table[op] = converter


# --- conversion ---------------------------------------------------------------------------------

def static_reshapes(symbol, data_shape):
    """``symbol`` with each Reshape whose shape holds code -4 (which has no ONNX converter) given
    the static shape MXNet infers for its output at ``data_shape``; the others as they are."""
    import mxnet as mx

    graph = json.loads(symbol.tojson())
    internals = symbol.get_internals()
    _args, out_shapes, _aux = internals.infer_shape(**{INPUT_NAME: data_shape})
    shapes = dict(zip(internals.list_outputs(), out_shapes))
    changed = False
    for node in graph["nodes"]:
        shape = node.get("attrs", {}).get("shape", "")
        if node["op"] == "Reshape" and -4 in _shape_codes(shape):
            node["attrs"]["shape"] = str(tuple(shapes[node["name"] + "_output"]))
            node["attrs"].pop("reverse", None)
            changed = True
    return mx.sym.load_json(json.dumps(graph)) if changed else symbol


def _shape_codes(text):
    try:
        return [int(v) for v in str(text).strip("()[] ").split(",") if v.strip()]
    except ValueError:
        return []


def convert(symbol, params, data_shape, dynamic):
    """The ONNX ModelProto of an MXNet ``symbol`` with ``params`` (name -> NDArray) for an input of
    ``data_shape`` (N, C, H, W); H and W left free when ``dynamic``. OnnxExportError for an
    operator no converter takes."""
    import onnx
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph

    symbol = static_reshapes(symbol, data_shape)
    dynamic_shape = [(data_shape[0], data_shape[1], None, None)] if dynamic else None
    with project_converters():
        try:
            graph = MXNetGraph().create_onnx_graph_proto(
                symbol, params, [tuple(data_shape)], [onnx.TensorProto.FLOAT], opset_version=OPSET,
                dynamic=dynamic, dynamic_input_shapes=dynamic_shape)
        except (AttributeError, NotImplementedError, ValueError) as exc:
            raise OnnxExportError("the network has an operator ONNX export does not take (%s)." % one_line(exc),
                                  "export a network of the families this image trains.") from exc
    return finish(graph, symbol.list_outputs())


def finish(graph, output_order):
    """A ModelProto of a converted ``graph``: weights no longer listed as inputs, constants no node
    reads dropped (ONNX Runtime warns of each at every load), every node uniquely named, outputs in
    the network's order (``output_order``, MXNet's names), opset and IR versions ONNX Runtime loads."""
    import onnx
    from onnx import helper

    used = _read_names(graph) | {value.name for value in graph.output}
    kept = [tensor for tensor in graph.initializer if tensor.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    weights = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in weights]
    del graph.input[:]
    graph.input.extend(inputs)
    # ONNX Runtime names the constants it folds after their nodes: a node named as a tensor (or
    # unnamed, or named twice) clashes with it
    seen = weights | {value.name for value in graph.input} | {out for node in graph.node for out in node.output}
    for index, node in enumerate(graph.node):
        if not node.name or node.name in seen:
            node.name = "%s_node%d" % (node.op_type.lower(), index)
        seen.add(node.name)
    by_name = {value.name: value for value in graph.output}
    ordered = [by_name[_onnx_output_name(name, by_name)] for name in output_order]
    del graph.output[:]
    graph.output.extend(ordered)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="detector-training")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _read_names(graph):
    """The names of the tensors the nodes of ``graph`` and of its subgraphs read."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for subgraph in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                names |= _read_names(subgraph)
    return names


def _onnx_output_name(mxnet_name, names):
    """The converted graph's name of the MXNet output ``mxnet_name`` (``x_output`` -> ``x``,
    ``x_output1`` -> ``x1``)."""
    base, _, index = mxnet_name.rpartition("_output")
    candidate = base + index
    if candidate in names:
        return candidate
    if base in names and index in ("", "0"):
        return base
    raise OnnxExportError("the converted graph has no output for %s." % mxnet_name,
                          "export a network of the families this image trains.")


# --- verification -------------------------------------------------------------------------------

def detections(outputs, width, height):
    """The valid rows of a network's first three outputs for one image, best first:
    [(class id, score, box)] (class id and score >= 0), boxes clipped to the network's input of
    ``width`` x ``height`` as inference clips them to the image."""
    import numpy as np

    ids, scores, boxes = (np.asarray(o)[0] for o in outputs[:3])
    boxes = np.clip(boxes.reshape(-1, 4), 0, [width - 1, height - 1, width - 1, height - 1])
    rows = [(int(c), float(s), [float(v) for v in b])
            for c, s, b in zip(ids.reshape(-1), scores.reshape(-1), boxes.reshape(-1, 4)) if c >= 0 and s >= 0]
    return sorted(rows, key=lambda row: -row[1])


TIE = 1e-6  # two of MXNet's scores this close (same class) are a tie
NMS_OVERLAP = 0.3  # the lowest default IoU at which the families' NMS suppresses (Faster R-CNN's nms_thresh)


def difference(expected, got, score_tol=SCORE_TOLERANCE, box_tol=BOX_TOLERANCE, threshold=0.0, cut=None):
    """What differs between two lists of detections with score >= ``threshold`` (``detections``:
    (class, score, box) with any class labels), as a sentence; None when each detection of one has
    its own in the other of the same class, score within ``score_tol`` and box corners within
    ``box_tol`` pixels. A detection within ``score_tol`` of the threshold may lack one (it may
    fall just under it on the other side), as may one within ``score_tol`` of ``cut``, the lowest
    score of an output holding as many detections as the network answers at most (the next
    candidate, a hair's breadth lower, may be in the other's instead).

    Ties: where MXNet answers several boxes of one class with the same score (within TIE: an
    untrained network's flat regions), which of the tied candidates non-maximum suppression keeps,
    and so which others it then suppresses, is its sort's choice. Such a group is matched by its
    class and score only: the other side must answer at least one detection of that class and
    score, with any boxes, and may answer more or fewer of them."""
    def near(a, b):
        return a[0] == b[0] and abs(a[1] - b[1]) <= score_tol

    def box_gap(a, b):
        return max(abs(x - y) for x, y in zip(a[2], b[2]))

    edge = threshold if cut is None else max(threshold, cut)
    ours = [row for row in expected if row[1] >= threshold]
    tied = [row for row in ours if _ties(ours, row) > 1]
    left = [row for row in got if row[1] >= threshold]
    swaps = []
    for rank, row in enumerate(ours):
        if any(row is other for other in tied):
            continue
        candidates = [other for other in left if near(row, other)]
        if not candidates:
            if row[1] < edge + score_tol:
                continue
            close = min(left, key=lambda other: (other[0] != row[0], abs(other[1] - row[1])), default=None)
            return "MXNet's detection %d (class %s, score %.5f, box %s) has no counterpart in ONNX Runtime%s" % (
                rank, row[0], row[1], _box(row[2]),
                "" if close is None else " (nearest: class %s, score %.5f)" % (close[0], close[1]))
        best = min(candidates, key=lambda other: box_gap(row, other))
        gap = box_gap(row, best)
        if gap > box_tol and row[1] < edge + score_tol:
            continue  # its own fell past the edge on the other side; this is the next one's
        if gap > box_tol:
            rival = max(candidates, key=lambda other: _iou(row[2], other[2]))
            if _iou(row[2], rival[2]) > NMS_OVERLAP and len(swaps) < max(2, len(ours) // 10):
                swaps.append(row)  # two near-equal rivals: NMS kept the other one there
                left.remove(rival)
                continue
            return "MXNet's detection %d (class %s, score %.5f) has its box %.2f pixels away in ONNX Runtime (%s, %s)%s" % (
                rank, row[0], row[1], gap, _box(row[2]), _box(best[2]),
                " (and %d earlier rivals swapped)" % len(swaps) if swaps else "")
        left.remove(best)
    for row in tied:
        if row[1] >= edge + score_tol and not any(near(row, other) for other in left):
            return "MXNet's %d tied detections of class %s, score %.5f have no counterpart in ONNX Runtime" % (
                _ties(tied, row), row[0], row[1])
    extra = [row for row in left if row[1] >= edge + score_tol and not any(near(row, other) for other in tied)]
    if extra:
        return "ONNX Runtime answers %d detection(s) MXNet does not, the first class %s, score %.5f, box %s" % (
            len(extra), extra[0][0], extra[0][1], _box(extra[0][2]))
    return None


def _ties(rows, row):
    """How many of ``rows`` ((class, score, ...)) have ``row``'s class and its score within TIE."""
    return sum(other[0] == row[0] and abs(other[1] - row[1]) <= TIE for other in rows)


def _iou(a, b):
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(width, 0.0) * max(height, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def mask_difference(expected, got, tolerance=MASK_TOLERANCE):
    """What differs between the masks (fourth output: a map per detection) of two networks'
    outputs whose detections agree (``difference``); None when the masks of each pair of
    matching detections (same class, score within SCORE_TOLERANCE, box within BOX_TOLERANCE; a
    tied score pairs nothing) are within ``tolerance`` everywhere."""
    import numpy as np

    def rows(outputs):  # (class, score, box, row index) of the valid rows
        ids, scores, boxes = (np.asarray(o)[0] for o in outputs[:3])
        return [(int(c), float(s), b, index) for index, (c, s, b) in
                enumerate(zip(ids.reshape(-1), scores.reshape(-1), boxes.reshape(-1, 4))) if c >= 0 and s >= 0]

    ours, theirs = rows(expected), rows(got)
    for row in ours:
        cid, score, box, index = row
        if _ties(ours, row) > 1:
            continue
        match = [other for other in theirs if other[0] == cid and abs(other[1] - score) <= SCORE_TOLERANCE
                 and np.abs(other[2] - box).max() <= BOX_TOLERANCE]
        if not match:
            continue  # difference() tells
        mine, other = np.asarray(expected[3])[0][index], np.asarray(got[3])[0][match[0][3]]
        if mine.shape != other.shape:
            return "the masks are %s in MXNet, %s in ONNX Runtime" % (mine.shape, other.shape)
        gap = float(np.abs(mine - other).max())
        if gap > tolerance:
            return "detection %d's mask differs by %.5f" % (index, gap)
    return None


def _box(box):
    return "[%s]" % ", ".join("%.1f" % v for v in box)


def generated_images(classes, count=SAMPLE_IMAGES, seed=0):
    """``count`` generated pictures (RGB uint8 arrays) of shapes, for a model without images."""
    import numpy as np

    from detector_training.data.generated.synthetic_voc import make_image

    rng = random.Random(seed)
    return [np.asarray(make_image(rng, list(classes))[0].convert("RGB")) for _ in range(count)]


def verify(model, onnx_model, images, network, score_tol=SCORE_TOLERANCE):
    """OnnxExportError naming ``network`` and the first difference unless ONNX Runtime, running
    ``onnx_model``, answers what MXNet's ``model`` (inference.Model) answers on every image of
    ``images`` (RGB arrays), each prepared as inference prepares it."""
    import numpy as np

    try:
        runtime = inference.onnx_session(onnx_model.SerializeToString())
    except Exception as exc:  # onnxruntime's own Fail, InvalidGraph, ...: a file it cannot load
        raise OnnxExportError("%s: ONNX Runtime cannot load the exported file (%s)." % (network, one_line(exc)),
                              "export with the pinned onnx and onnxruntime (constraints.txt).") from exc
    for number, rgb in enumerate(images):
        data, _scale = inference.network_input(model, rgb)
        size = data.shape[3], data.shape[2]
        mxnet_outputs = [o.asnumpy() for o in model.net(data.as_in_context(model.ctx))]
        onnx_outputs = runtime.run(None, {INPUT_NAME: data.asnumpy()})
        ours, theirs = detections(mxnet_outputs, *size), detections(onnx_outputs, *size)
        most = min(np.asarray(mxnet_outputs[1])[0].size, np.asarray(onnx_outputs[1])[0].size)
        full = [rows[-1][1] for rows in (ours, theirs) if rows and len(rows) >= most]
        problem = difference(ours, theirs, score_tol, cut=max(full) if full else None)
        if problem is None and len(mxnet_outputs) > 3:
            problem = mask_difference(mxnet_outputs, onnx_outputs)
        if problem:
            raise OnnxExportError(
                "%s: the ONNX export answers differently from MXNet on sample image %d (%d x %d): %s."
                % (network, number + 1, rgb.shape[1], rgb.shape[0], problem),
                "keep the MXNet model (model-symbol.json, model-0000.params) for this network; "
                "report the network and this message.")


# --- the model directory ------------------------------------------------------------------------

def description(model, config, onnx_model):
    """What ``onnx.json`` says: how to feed ``model.onnx`` and read its outputs (docs/onnx.md)."""
    outputs = [value.name for value in onnx_model.graph.output]
    info = {"input_name": INPUT_NAME, "layout": "NCHW", "mean": list(inference.MEAN), "std": list(inference.STD),
            "pixel_scale": 255.0, "classes": list(model.classes), "network": config.get("network"),
            "outputs": outputs, "output_meaning": ["class_ids", "scores", "boxes", "masks"][:len(outputs)],
            "opset": OPSET}
    if model.square:
        info.update(resize="square", height=model.short, width=model.short, dynamic_input=False)
    else:
        info.update(resize="short_side", short=model.short, max_size=model.max_size,
                    height=model.short, width=model.max_size, dynamic_input=True)
    return info


def export_model_directory(directory, images=None, *, score_tol=SCORE_TOLERANCE):
    """Write ``model.onnx`` and ``onnx.json`` into the model directory ``directory`` once ONNX
    Runtime answers what MXNet answers on ``images`` (RGB arrays; default: generated ones).
    Nothing is written when it does not (OnnxExportError). Returns the two paths."""
    import mxnet as mx

    model = _load(directory)
    export = model_dir.read_export(directory)
    network = export.config.get("network") or "the network"
    height, width = (model.short, model.short) if model.square else (model.short, model.max_size)
    symbol = mx.sym.load(export.symbol_file)
    loaded = mx.nd.load(export.params_file)
    params = {key.split(":", 1)[-1]: value for key, value in loaded.items()}
    onnx_model = convert(symbol, params, (1, 3, height, width), dynamic=not model.square)
    images = list(images) if images else generated_images(model.classes)
    verify(model, onnx_model, images, network, score_tol)
    onnx_path, json_path = os.path.join(directory, ONNX_FILE), os.path.join(directory, ONNX_JSON)
    atomic_write(onnx_path, lambda handle: handle.write(onnx_model.SerializeToString()))
    write_json(json_path, description(model, export.config, onnx_model))
    return onnx_path, json_path


def _load(directory):
    try:
        return inference.load_model(directory)
    except inference.InferenceError as exc:
        raise ModelError(str(exc), model_dir.FIX) from None


# --- detector-export-onnx ------------------------------------------------------------------------

def export_model(path, output=None, image_paths=()):
    """``detector-export-onnx``: the export of a model directory (written into it) or a
    ``model.tar.gz`` (extracted under inference's archive policy; written beside it), or into
    ``output``. Returns the two paths written."""
    images = [inference.read_image(image) for image in image_paths]
    if os.path.isdir(path):
        written = export_model_directory(path, images)
        if output is None or os.path.abspath(output) == os.path.abspath(path):
            return written
        return _move(written, output)
    if not os.path.isfile(path):
        raise inference.InferenceError("model not found: %s" % path)
    scratch = tempfile.mkdtemp(prefix="detector-onnx-")
    try:
        extracted = inference.extract_model_files(path, scratch)
        found = model_dir.shallowest_with(extracted, (model_dir.SYMBOL_FILE,))
        if found is None:
            raise inference.InferenceError("not a model: %s holds no %s" % (path, model_dir.SYMBOL_FILE))
        written = export_model_directory(found[0], images)
        return _move(written, output or os.path.dirname(os.path.abspath(path)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _move(paths, directory):
    os.makedirs(directory, exist_ok=True)
    moved = []
    for path in paths:  # model.onnx first: onnx.json beside it says the file is complete
        target = os.path.join(directory, os.path.basename(path))
        atomic_save(target, lambda tmp, source=path: shutil.copyfile(source, tmp))
        moved.append(target)
    return tuple(moved)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="detector-export-onnx",
        description="Export a trained model to ONNX (model.onnx + onnx.json), verified against MXNet "
                    "on sample images before anything is written.")
    parser.add_argument("model", help="model directory of a job, or its model.tar.gz")
    parser.add_argument("--output", "-o", default=None,
                        help="directory to write into (default: the model directory, or the "
                             "directory holding the model.tar.gz)")
    parser.add_argument("--image", action="append", default=[], dest="images",
                        help="an image to verify on (repeatable; default: generated pictures)")
    args = parser.parse_args(argv)
    try:
        onnx_path, json_path = export_model(args.model, args.output, args.images)
    except inference.InferenceError as exc:
        print("detector-export-onnx: error: %s" % exc, file=sys.stderr)
        return 1
    except JobError as exc:
        print("detector-export-onnx: error: %s" % exc.failure_text(), file=sys.stderr)
        return 1
    except OSError as exc:
        print("detector-export-onnx: error: %s" % one_line(exc), file=sys.stderr)
        return 1
    print("wrote %s and %s (ONNX Runtime answers as MXNet on the sample images)" % (onnx_path, json_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
