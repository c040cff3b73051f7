"""Inference with a trained model: load, decode, detect. What ``serve``, ``detector-predict``,
the evaluation report and the serving benchmark all run.

* **load**: a model directory (or SageMaker's ``model.tar.gz`` of it, extracted under
  ``core/archive.py``'s policy) through ``core/model_dir.py``'s readers: the exported pair
  ``model-symbol.json`` + ``model-0000.params``, ``classes.json`` and ``config.json``;
* **decode**: image bytes to RGB pixels with Pillow under a policy (formats, a pixel cap read
  from the header, truncated files refused, grey/palette/RGBA/CMYK/16-bit converted), turned
  upright by the EXIF orientation tag (``data/readers/images.decode``, the training readers' one);
* **detect**: the image resized as the R-CNN families' validation resizes it (short side = the
  last training scale, longer side capped at ``max_size``), or to the data shape's square
  (``short`` x ``short``) for a family whose ``test_resize`` says so (SSD, YOLOv3), the forward pass, and boxes back in the pixel coordinates of the original
  image as decoded (upright: a photo stored sideways with an orientation tag is answered in the
  frame its viewer sees), with masks as COCO's compressed RLE for a model that segments.

Two runtimes run the network: MXNet (the exported symbol and parameters) and, for a model
directory that also holds the verified ONNX export (``model.onnx`` + ``onnx.json``,
onnx_export.py), ONNX Runtime on the CPU. Both take the same input, prepared here with MXNet as
the family's validation prepares it, and answer the same detections (what the export verified).

Nothing here imports MXNet at import time: ``serve``'s master process reads the defaults and
checks a model directory without it.
"""

import os
import shutil
import tempfile
import warnings

from detector_training.core import archive, model_dir
from detector_training.core.files import json_preview
from detector_training.errors import ModelError, one_line

DEFAULT_THRESHOLD = 0.5  # the minimum score answered when a request or command names none
DEFAULT_MAX_DETECTIONS = 100

MAX_SIDE = 8192  # pixels: a model asking for larger test images is not one this module runs
# The networks' input normalisation (GluonCV's ImageNet statistics), of RGB pixels scaled to [0, 1].
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# Decoding policy for image bytes: the formats of data/readers/images.py, and at most this many
# pixels (checked from the header, before any pixel is decoded). A 50-megapixel photo passes; a
# decompression bomb (a small file that declares a huge canvas) does not.
MAX_IMAGE_PIXELS = 64_000_000

MXNET, ONNXRUNTIME = "mxnet", "onnxruntime"
RUNTIMES = (MXNET, ONNXRUNTIME)


class InferenceError(Exception):
    """A model or an image that cannot be used; the message is meant for the user as is."""


class BadImage(InferenceError):
    """Bytes that are not an image this policy decodes; the message says which and why."""


class Model:
    """A loaded detector: its network (run by ``runtime``), its classes, its test-time image sizes
    and whether its input is a square (``short`` x ``short``) rather than short side ``short``."""

    def __init__(self, net, classes, short, max_size, source, ctx=None, square=False, runtime=MXNET):
        self.net = net
        self.ctx = ctx
        self.classes = list(classes)
        self.short = int(short)
        self.max_size = int(max_size)
        self.source = source
        self.square = bool(square)
        self.runtime = runtime

    def forward(self, data):
        """The network's outputs (class ids, scores, boxes[, masks]) for ``data`` (a batch from
        ``network_input``) as numpy arrays."""
        if self.runtime == ONNXRUNTIME:
            return self.net(data.asnumpy())
        if self.ctx is not None:
            data = data.as_in_context(self.ctx)
        return [output.asnumpy() for output in self.net(data)]

    def __repr__(self):
        return "Model(%r, classes=%r, short=%d, max_size=%d%s, %s)" % (
            self.source, self.classes, self.short, self.max_size, ", square" if self.square else "",
            self.runtime)


class OnnxNetwork:
    """``model.onnx`` in an ONNX Runtime session, called as the MXNet network is: a batch in, the
    outputs ``onnx.json`` lists (in order) out."""

    def __init__(self, session, input_name, outputs):
        self.session = session
        self.input_name = input_name
        self.outputs = list(outputs)

    def __call__(self, batch):
        return self.session.run(self.outputs, {self.input_name: batch})


# --- load --------------------------------------------------------------------------------------

def load_model(path, ctx=None, runtime=MXNET, threads=None):
    """Load a model directory or a ``model.tar.gz`` (extracted safely into a temporary directory,
    removed again once the model is in memory), to run with ``runtime`` (RUNTIMES; ONNX Runtime
    with ``threads`` threads, default its own choice). Raises InferenceError when it is not a
    model, or has no ONNX export that fits it for ONNX Runtime."""
    if runtime not in RUNTIMES:
        raise ValueError("runtime %r is not one of %s" % (runtime, ", ".join(RUNTIMES)))
    if not os.path.exists(path):
        raise InferenceError("model not found: %s" % path)
    if os.path.isdir(path):
        return _load_directory(path, path, ctx, runtime, threads)
    if not os.path.isfile(path):
        raise InferenceError("not a model: %s is neither a model directory nor a model.tar.gz" % path)
    tmp = tempfile.mkdtemp(prefix="detector-model-")
    try:
        extracted = extract_model_files(path, tmp, onnx=runtime == ONNXRUNTIME)
        return _load_directory(_find_model_dir(extracted, path), path, ctx, runtime, threads)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def extract_model_files(path, parent, onnx=False):
    """Extract the files inference reads (model_dir.EXPORT_FILES, and the ONNX export's when
    ``onnx``) from a model archive into a new directory under ``parent`` (returned): the whole
    archive is refused when any member is a link, a special file, has an unsafe name or is over
    its size cap. A job's archive also holds model.params and model-best.params (twice the
    export): they are skipped."""
    names = model_dir.EXPORT_FILES + (model_dir.ONNX_FILES if onnx else ())
    try:
        return model_dir.extract_model(path, parent, names)
    except archive.UnsafeArchive as exc:
        raise InferenceError("unsafe model archive %s: %s" % (path, exc.reason)) from None
    except archive.UnreadableArchive as exc:
        raise InferenceError("not a model: %s is neither a model directory nor a model.tar.gz (%s)"
                             % (path, exc.reason)) from None
    except archive.NoRoom as exc:
        raise InferenceError("cannot extract model archive %s: %s" % (path, exc.reason)) from None
    except OSError as exc:
        raise InferenceError("cannot read model archive %s: %s" % (path, one_line(exc))) from exc


def _find_model_dir(root, archive_path):
    """The shallowest directory under ``root`` holding the exported symbol."""
    found = model_dir.shallowest_with(root, (model_dir.SYMBOL_FILE,))
    if found is None:
        raise InferenceError("not a model: %s holds no %s" % (archive_path, model_dir.SYMBOL_FILE))
    return found[0]


def _test_size(config, field, default, source):
    value = config.get(field)
    if isinstance(value, list):  # short: the training scales, the last one tests
        value = value[-1] if value else None
    if value is None and default is None:
        raise InferenceError("invalid model %s: config.json has no %s, the test size its training job "
                             "validated at; export the model with this image's training job" % (source, field))
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not 1 <= value <= MAX_SIDE:
        raise InferenceError("invalid model %s: config.json field %s is %s; it must be a whole number "
                             "of pixels from 1 to %d" % (source, field, json_preview(config.get(field)),
                                                         MAX_SIDE))
    return int(value)


def _test_sizes(config, source):
    """Short side and longer-side cap the model is run at, as its training job validated and
    recorded them in config.json (``test_short``, else the last of ``short``; ``max_size``; a
    square-input family's data shape, else its network's)."""
    field = "test_short" if config.get("test_short") is not None else "short"
    square = square_family(config)
    if square is not None:  # the size validation resized to
        size = _test_size(config, field, square.default_size(config.get("network")), source)
        return size, size
    return _test_size(config, field, None, source), _test_size(config, "max_size", None, source)


def square_family(config):
    """The model's family where it validates (and so is run) on square inputs (its
    ``test_resize``), else None; a network no family registers is run as the R-CNN families are."""
    from detector_training import families

    try:
        family = families.get(config.get("network"))
    except (KeyError, TypeError):
        return None
    return family if family.test_resize == "square" else None


def square_input(config):
    return square_family(config) is not None


def read_model_directory(directory, source=None):
    """The exported model of a directory and its test-time image sizes, read without MXNet:
    ``(export, short, max_size)``. Raises InferenceError when a file is missing or unreadable."""
    source = directory if source is None else source
    missing = model_dir.missing_files(directory)
    if missing:
        raise InferenceError("not a model: %s lacks %s" % (source, ", ".join(missing)))
    try:
        export = model_dir.read_export(directory)
    except ModelError as exc:
        raise InferenceError("invalid model %s: %s" % (source, exc.cause.rstrip("."))) from None
    short, max_size = _test_sizes(export.config, source)
    return export, short, max_size


def _symbol_block(symbol_file, params_file, ctx):
    """``SymbolBlock.imports`` of an exported network, its graph read under the model's JSON
    policy (model_dir.read_symbol) and each ROIAlign guarded against MXNet 1.9's CPU bug
    (:func:`roialign_guarded`)."""
    import json

    import mxnet as mx

    graph = roialign_guarded(model_dir.read_symbol(symbol_file))
    net = mx.gluon.SymbolBlock(mx.sym.load_json(json.dumps(graph)), [mx.sym.var("data")])
    net.collect_params().load(params_file, ctx=ctx, cast_dtype=True, dtype_source="saved")
    return net


def roialign_guarded(graph):
    """The symbol ``graph`` (its JSON, as a dict) with each ``_contrib_ROIAlign`` guarded against
    MXNet 1.9's CPU kernel, which for a region whose batch index is negative (an empty row, as
    GluonCV's FPN gives each level for the regions of other levels) zeroes the n-th number of the
    whole output, inside the first region's features, and leaves the empty row's own unwritten.
    Guarded: a throw-away first row (the first region, its negatives clipped to 0) takes those
    zeroes and is dropped after the pooling, and empty rows are set to zeros. The values are then
    those of ONNX Runtime's RoiAlign (tests/test_onnx_export.py). Other graphs are returned as
    they are."""
    nodes = graph["nodes"]
    if not any(node["op"] == "_contrib_ROIAlign" for node in nodes):
        return graph
    new, remap = [], {}

    def add(op, name, inputs, attrs=None):
        node = {"op": op, "name": name, "inputs": inputs}
        if attrs:
            node["attrs"] = attrs
        new.append(node)
        return [len(new) - 1, 0, 0]

    for old, node in enumerate(nodes):
        node = dict(node, inputs=[[remap[i], o, 0] for i, o, *_ in node["inputs"]])
        if node["op"] != "_contrib_ROIAlign":
            new.append(node)
            remap[old] = len(new) - 1
            continue
        name, (data, rois) = node["name"], node["inputs"]
        first = add("slice_axis", name + "_guard_first", [rois], {"axis": "0", "begin": "0", "end": "1"})
        spare = add("relu", name + "_guard_spare", [first])
        rows = add("Concat", name + "_guard_rows", [spare, rois], {"dim": "0", "num_args": "2"})
        pooled = add("_contrib_ROIAlign", name + "_guard_pooled", [data, rows], node.get("attrs"))
        kept = add("slice_axis", name + "_guard_kept", [pooled], {"axis": "0", "begin": "1", "end": "None"})
        index = add("slice_axis", name + "_guard_index", [rois], {"axis": "1", "begin": "0", "end": "1"})
        flat = add("Reshape", name + "_guard_flat", [index], {"shape": "(-1,)"})
        valid = add("_greater_equal_scalar", name + "_guard_valid", [flat], {"scalar": "0"})
        zeros = add("zeros_like", name + "_guard_zeros", [kept])
        remap[old] = add("where", name, [valid, kept, zeros])[0]
    graph = dict(graph, nodes=new, arg_nodes=[i for i, node in enumerate(new) if node["op"] == "null"],
                 heads=[[remap[i], o, 0] for i, o, *_ in graph["heads"]])
    graph.pop("node_row_ptr", None)
    return graph


def _load_directory(directory, source, ctx, runtime=MXNET, threads=None):
    export, short, max_size = read_model_directory(directory, source)
    square = square_input(export.config)
    if runtime == ONNXRUNTIME:
        net = _onnx_network(directory, source, export.classes, short, max_size, square, threads)
        return Model(net, export.classes, short, max_size, source, None, square, runtime)

    import mxnet as mx

    ctx = ctx or mx.cpu()
    try:
        with warnings.catch_warnings():  # "Cannot decide type for ... data": harmless, float32
            warnings.simplefilter("ignore", UserWarning)
            net = _symbol_block(export.symbol_file, export.params_file, ctx)
    except Exception as exc:  # MXNetError, AssertionError, ValueError: all mean a broken export
        raise InferenceError("invalid model %s: cannot load the exported network (%s)"
                             % (source, one_line(exc))) from exc
    return Model(net, export.classes, short, max_size, source, ctx, square)


def onnx_session(model, threads=None):
    """An ONNX Runtime session on the CPU of ``model`` (a path or serialized bytes), with
    ``threads`` threads for one operator (default: ONNX Runtime's choice) and none across them."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are not the user's
    if threads:
        options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _onnx_network(directory, source, classes, short, max_size, square, threads):
    """The ONNX export of a model directory in an ONNX Runtime session, once its ``onnx.json``
    says it was exported from this model: the same classes, normalisation and test sizes, an
    input and the three or four outputs inference reads."""
    def refuse(what):
        return InferenceError("invalid ONNX export in %s: %s; %s" % (source, what, model_dir.ONNX_FIX))

    try:
        info = model_dir.read_onnx_description(directory)
    except ModelError as exc:
        raise InferenceError("cannot run %s with ONNX Runtime: %s %s" % (source, exc.cause, exc.fix)) from None
    if info.get("classes") != list(classes):
        raise refuse("onnx.json lists the classes %s, classes.json %s"
                     % (json_preview(info.get("classes")), json_preview(classes)))
    if info.get("mean") != list(MEAN) or info.get("std") != list(STD):
        raise refuse("onnx.json's mean %s and std %s are not this image's input normalisation %s, %s"
                     % (json_preview(info.get("mean")), json_preview(info.get("std")), list(MEAN), list(STD)))
    expected = ({"resize": "square", "height": short, "width": short} if square else
                {"resize": "short_side", "short": short, "max_size": max_size, "dynamic_input": True})
    differs = sorted(key for key, value in expected.items() if info.get(key) != value)
    if differs:
        raise refuse("onnx.json's %s %s; the model's config.json says %s" % (
            ", ".join(differs), json_preview({k: info.get(k) for k in differs}),
            json_preview({k: expected[k] for k in differs})))
    outputs, input_name = info.get("outputs"), info.get("input_name")
    if not isinstance(input_name, str) or not input_name or not isinstance(outputs, list) \
            or len(outputs) not in (3, 4) or not all(isinstance(name, str) and name for name in outputs):
        raise refuse("onnx.json's input_name %s or outputs %s is not a name and a list of three or four names"
                     % (json_preview(input_name), json_preview(outputs)))
    try:
        session = onnx_session(os.path.join(directory, model_dir.ONNX_FILE), threads)
    except Exception as exc:  # onnxruntime's Fail, InvalidGraph, InvalidProtobuf: a file it cannot run
        raise refuse("ONNX Runtime cannot load model.onnx (%s)" % one_line(exc)) from None
    names = {value.name for value in session.get_outputs()}
    if input_name not in {value.name for value in session.get_inputs()} or not set(outputs) <= names:
        raise refuse("model.onnx has no input %s or not every output of %s"
                     % (json_preview(input_name), json_preview(outputs)))
    return OnnxNetwork(session, input_name, outputs)


# --- decode ------------------------------------------------------------------------------------

def decode_image(stream, max_pixels=MAX_IMAGE_PIXELS, oriented=True):
    """The image in ``stream`` (a path or a binary file object) as an RGB uint8 array of shape
    (height, width, 3): ``data/readers/images.decode``, the training readers' decoder, upright
    (turned by its EXIF orientation tag as browsers and labelling tools show it: a model answers
    boxes in the picture its user sees) unless ``oriented`` is false (labels of the stored
    pixels). BadImage when it is not one that decoder reads."""
    from detector_training.data.readers import images

    try:
        return images.decode(stream, oriented=oriented, max_pixels=max_pixels)
    except images.UnreadableImage as exc:
        raise BadImage(str(exc)) from None


def read_image(image_path, oriented=True):
    """The image file as an RGB array (see ``decode_image``); InferenceError naming the file when
    it cannot be used."""
    if not os.path.isfile(image_path):
        raise InferenceError("image not found: %s" % image_path)
    try:
        return decode_image(image_path, oriented=oriented)
    except BadImage as exc:
        raise InferenceError("cannot read image %s: %s" % (image_path, exc)) from None


# --- detect ------------------------------------------------------------------------------------

def network_input(model, rgb):
    """The network's input for an RGB uint8 array, and the factors (x, y) from its pixels back to
    the original image's, as the family's validation transform makes them: GluonCV's R-CNN
    validation resize (short side ``short``, longer side at most ``max_size``, bilinear, one
    factor from the heights), or SSD's and YOLOv3's (the ``short`` square) for a square-input
    model."""
    import mxnet as mx
    from gluoncv.data.transforms import image as timage

    height, width = rgb.shape[:2]
    image = mx.nd.array(rgb, dtype="uint8")
    if model.square:
        size = model.short
        resized, scale = timage.imresize(image, size, size, interp=9), (width / float(size), height / float(size))
    else:
        _too_thin(model, width, height)
        resized = timage.resize_short_within(image, model.short, model.max_size, interp=1)
        scale = (height / float(resized.shape[0]),) * 2
    data = mx.nd.image.normalize(mx.nd.image.to_tensor(resized), mean=MEAN, std=STD)
    return data.expand_dims(0), scale


def _too_thin(model, width, height):
    """BadImage for a picture whose shorter side the R-CNN resize (GluonCV's
    ``resize_short_within``, same arithmetic) would make less than one pixel long."""
    import numpy as np

    short_side, long_side = sorted((width, height))
    scale = model.short / float(short_side)
    if np.round(scale * long_side) > model.max_size:
        scale = model.max_size / float(long_side)
    if int(np.round(short_side * scale)) < 1:
        raise BadImage("image too thin: %d x %d pixels is less than one pixel %s once resized for this "
                       "model (longer side at most %d); send a less elongated image"
                       % (width, height, "high" if height < width else "wide", model.max_size))


def detect_image(model, rgb, threshold=DEFAULT_THRESHOLD, max_detections=None, masks=True):
    """Detections with score >= ``threshold`` in an RGB uint8 array, best first, at most
    ``max_detections``: ``[{"class", "score", "box"}]`` with ``box`` = [x0, y0, x1, y1] in
    original-image pixels, clipped to the image; a model that segments (Mask R-CNN) adds ``mask``
    (unless ``masks`` is false), the object's pixels in the original image as COCO's compressed
    RLE (``{"size": [height, width], "counts": ...}``)."""
    import numpy as np

    from detector_training.core.evaluation import image_masks

    height, width = rgb.shape[:2]
    data, (scale_x, scale_y) = network_input(model, rgb)
    outputs = model.forward(data)
    ids, scores, boxes = (o[0] for o in outputs[:3])
    box_masks = outputs[3][0] if len(outputs) > 3 and masks else None  # in each box
    found = []
    for index, (cid, score, box) in enumerate(zip(ids[:, 0], scores[:, 0], boxes)):
        cid, score = int(cid), float(score)
        if cid < 0 or score < 0 or score < threshold:
            continue  # -1: padding of the fixed-size output
        if cid >= len(model.classes):  # load_model refused a classes.json of another length
            raise AssertionError("class id %d past the end of the model's %d classes"
                                 % (cid, len(model.classes)))
        x0, x1 = sorted((_clip(box[0] * scale_x, width - 1), _clip(box[2] * scale_x, width - 1)))
        y0, y1 = sorted((_clip(box[1] * scale_y, height - 1), _clip(box[3] * scale_y, height - 1)))
        found.append((index, {"class": model.classes[cid], "score": score, "box": [x0, y0, x1, y1]}))
    found.sort(key=lambda item: -item[1]["score"])
    if max_detections is not None:
        found = found[:max_detections]
    detections = [det for _index, det in found]
    if box_masks is not None and found:
        # Each mask fills its box as answered (clipped to the image): GluonCV's fill breaks on a
        # box that reaches far outside the image.
        kept = [index for index, _det in found]
        pixel_boxes = np.array([det["box"] for det in detections], dtype=np.float32)
        for det, rle in zip(detections, image_masks(box_masks[kept], pixel_boxes, width, height)):
            det["mask"] = rle
    return detections


def _clip(value, upper):
    return float(min(max(float(value), 0.0), float(upper)))


# --- evaluate: a model on labelled images ---------------------------------------------------------

def labelled_results(model, samples):
    """The model's detections on labelled images, for the evaluation report
    (``core/eval_report.py``): one ImageResult per sample of ``samples``, an iterable of
    ``(name, rgb, gt_boxes, gt_labels, gt_difficult, load)`` (corners in the image's pixels,
    labels as indices into ``model.classes``; ``load``: () -> the pixels again, for the grid).
    Every detection is kept (threshold 0, at most what the network answers), masks are not
    computed."""
    import numpy as np

    from detector_training.core.eval_report import ImageResult

    index = {name: i for i, name in enumerate(model.classes)}
    results = []
    for name, rgb, gt_boxes, gt_labels, gt_difficult, load in samples:
        found = detect_image(model, rgb, threshold=0.0, masks=False)
        results.append(ImageResult(
            name=name, width=rgb.shape[1], height=rgb.shape[0], gt_boxes=gt_boxes, gt_labels=gt_labels,
            gt_difficult=gt_difficult, boxes=np.array([d["box"] for d in found]).reshape((-1, 4)),
            labels=[index[d["class"]] for d in found], scores=[d["score"] for d in found], load=load))
    return results


def dataset_samples(dataset):
    """The samples ``labelled_results`` takes, from a dataset as the families read them (GluonCV's
    protocol: item = (image NDArray, label rows [x0, y0, x1, y1, class, (difficult)], ...); a row
    of class < 0 is a placeholder, no object)."""
    import numpy as np

    paths = getattr(dataset, "_paths", None)  # SubsetDataset's image files, for names only
    for position in range(len(dataset)):
        def load(position=position):
            return dataset[position][0].asnumpy()

        item = dataset[position]
        label = np.asarray(item[1].asnumpy() if hasattr(item[1], "asnumpy") else item[1], dtype=np.float64)
        if label.ndim != 2:  # an image without objects may come with an empty label
            label = label.reshape((-1, 5))
        label = label[label[:, 4] >= 0]
        difficult = label[:, 5] > 0 if label.shape[1] > 5 else np.zeros(len(label), dtype=bool)
        name = os.path.basename(str(paths[position])) if paths and position < len(paths) else "#%d" % position
        yield name, item[0].asnumpy(), label[:, :4], label[:, 4].astype(int), difficult, load


def labelled_set_samples(labelled, classes):
    """The samples ``labelled_results`` takes, from a ``data/labelled.py`` LabelledSet (image
    files decoded under this module's policy; class names to indices into ``classes``). A box of
    a class outside ``classes`` is an InferenceError naming it and its image."""
    import numpy as np

    index = {name: i for i, name in enumerate(classes)}
    for image in labelled.images:
        unknown = sorted({box.label for box in image.boxes if box.label not in index})
        if unknown:
            raise InferenceError("%s: class %s is not one of the model's classes (%s)"
                                 % (image.where or image.path, ", ".join(unknown), ", ".join(classes)))
        rgb = read_image(image.path, image.oriented)
        yield (os.path.basename(image.path), rgb,
               np.array([[b.xmin, b.ymin, b.xmax, b.ymax] for b in image.boxes]).reshape((-1, 4)),
               np.array([index[b.label] for b in image.boxes], dtype=int),
               np.array([b.difficult for b in image.boxes], dtype=bool),
               lambda path=image.path, oriented=image.oriented: read_image(path, oriented))


def evaluate(model, samples, out_dir, size_ious=None):
    """The model on labelled samples (``dataset_samples``, ``labelled_set_samples``): the
    evaluation report (core/eval_report.py) written into ``out_dir``, at the validation's IoU and
    the default score threshold; AP by size at ``size_ious`` (default: the validation IoU).
    Returns ``(evaluation, {file: PNG bytes}, markdown)``."""
    from detector_training.core.eval_report import VALIDATION_IOU, write_evaluation

    return write_evaluation(out_dir, labelled_results(model, samples), model.classes, VALIDATION_IOU,
                            DEFAULT_THRESHOLD, size_ious or (VALIDATION_IOU,))
