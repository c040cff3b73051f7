"""Run a trained model on one image and draw what it finds (boxes; a Mask R-CNN's masks too).

The model is what a job leaves in its model directory (or SageMaker's ``model.tar.gz`` of it):
the exported pair ``model-symbol.json`` + ``model-0000.params``, ``classes.json`` and
``config.json``. Images go through GluonCV's own test preset (short side = the last training
scale, longer side capped at ``max_size``), and boxes come back in the pixel coordinates of the
original image (its stored pixel grid: like MXNet's decoder, EXIF orientation is not applied).

    detector-predict MODEL IMAGE --output OUT.png [--threshold 0.5] [--json OUT.json]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
import zlib

from detector_training.core import archive, model_dir
from detector_training.data import formats
from detector_training.core.files import atomic_write, json_preview
from detector_training.errors import ModelError

# Distinct, saturated colours; a class keeps its colour across images and runs.
PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
           (170, 110, 40), (128, 0, 0), (0, 0, 128), (128, 128, 0), (255, 225, 25))


class PredictError(Exception):
    """A model or an image that cannot be used; the message is meant for the user as is."""


class Model:
    """A loaded detector: the symbol block, its classes and its test-time image sizes."""

    def __init__(self, net, classes, short, max_size, source, ctx=None):
        self.net = net
        self.ctx = ctx
        self.classes = list(classes)
        self.short = int(short)
        self.max_size = int(max_size)
        self.source = source

    def __repr__(self):
        return "Model(%r, classes=%r, short=%d, max_size=%d)" % (self.source, self.classes,
                                                                 self.short, self.max_size)


# --- loading ---------------------------------------------------------------------------------

def load_model(path, ctx=None):
    """Load a model directory or a ``model.tar.gz`` (extracted safely into a temporary directory,
    removed again once the model is in memory). Raises PredictError when it is not a model."""
    if not os.path.exists(path):
        raise PredictError("model not found: %s" % path)
    if os.path.isdir(path):
        return _load_directory(path, path, ctx)
    if not os.path.isfile(path):
        raise PredictError("not a model: %s is neither a model directory nor a model.tar.gz" % path)
    tmp = tempfile.mkdtemp(prefix="detector-predict-")
    try:
        extracted = extract_model_files(path, tmp)
        return _load_directory(_find_model_dir(extracted, path), path, ctx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def extract_model_files(path, parent):
    """Extract the files inference reads (model_dir.EXPORT_FILES) from a model archive into a new
    directory under ``parent`` (returned): the whole archive is refused when any member is a link,
    a special file, has an unsafe name or is over its size cap. A job's archive also holds
    model.params and model-best.params (twice the export): they are skipped."""
    try:
        return model_dir.extract_model(path, parent, model_dir.EXPORT_FILES)
    except archive.UnsafeArchive as exc:
        raise PredictError("unsafe model archive %s: %s" % (path, exc.reason)) from None
    except archive.UnreadableArchive as exc:
        raise PredictError("not a model: %s is neither a model directory nor a model.tar.gz (%s)"
                           % (path, exc.reason)) from None
    except archive.NoRoom as exc:
        raise PredictError("cannot extract model archive %s: %s" % (path, exc.reason)) from None
    except OSError as exc:
        raise PredictError("cannot read model archive %s: %s" % (path, one_line(exc))) from exc


def _find_model_dir(root, archive_path):
    """The shallowest directory under ``root`` holding the exported symbol."""
    found = model_dir.shallowest_with(root, (model_dir.SYMBOL_FILE,))
    if found is None:
        raise PredictError("not a model: %s holds no %s" % (archive_path, model_dir.SYMBOL_FILE))
    return found[0]


MAX_SIDE = 8192  # pixels: a model asking for larger test images is not one this tool runs


def _test_size(config, field, default, source):
    value = config.get(field)
    if isinstance(value, list):  # short: the training scales, the last one tests
        value = value[-1] if value else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not 1 <= value <= MAX_SIDE:
        raise PredictError("invalid model %s: config.json field %s is %s; it must be a whole number of "
                           "pixels from 1 to %d" % (source, field, json_preview(config.get(field)), MAX_SIDE))
    return int(value)


def _test_sizes(config, source):
    """Short side and longer-side cap the model is run at: the last training scale, else the
    network's GluonCV default (600/1000 for VOC-style networks, 800/1333 for COCO ones)."""
    trained_on = config.get("dataset")
    coco = "coco" in str(config.get("network", "")) or (
        trained_on in formats.names() and formats.get(trained_on).metric == "coco")
    return (_test_size(config, "short", 800 if coco else 600, source),
            _test_size(config, "max_size", 1333 if coco else 1000, source))


def read_model_directory(directory, source=None):
    """The exported model of a directory and its test-time image sizes, read without MXNet:
    ``(export, short, max_size)``. Raises PredictError when a file is missing or unreadable."""
    source = directory if source is None else source
    missing = model_dir.missing_files(directory)
    if missing:
        raise PredictError("not a model: %s lacks %s" % (source, ", ".join(missing)))
    try:
        export = model_dir.read_export(directory)
    except ModelError as exc:
        raise PredictError("invalid model %s: %s" % (source, exc.cause.rstrip("."))) from None
    short, max_size = _test_sizes(export.config, source)
    return export, short, max_size


def _load_directory(directory, source, ctx):
    export, short, max_size = read_model_directory(directory, source)

    import mxnet as mx

    ctx = ctx or mx.cpu()
    try:
        with warnings.catch_warnings():  # "Cannot decide type for ... data": harmless, float32
            warnings.simplefilter("ignore", UserWarning)
            net = mx.gluon.SymbolBlock.imports(export.symbol_file, ["data"], export.params_file,
                                               ctx=ctx)
    except Exception as exc:  # MXNetError, AssertionError, ValueError: all mean a broken export
        raise PredictError("invalid model %s: cannot load the exported network (%s)"
                           % (source, one_line(exc))) from exc
    return Model(net, export.classes, short, max_size, source, ctx)


# --- inference -------------------------------------------------------------------------------

# Decoding policy for image bytes: these formats only, and at most this many pixels (checked from
# the header, before any pixel is decoded). A 50-megapixel photo passes; a decompression bomb
# (a small file that declares a huge canvas) does not.
IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "TIFF", "WEBP")
MAX_IMAGE_PIXELS = 64_000_000


class BadImage(PredictError):
    """Bytes that are not an image this policy decodes; the message says which and why."""


def decode_image(stream, max_pixels=MAX_IMAGE_PIXELS):
    """The image in ``stream`` (a path or a binary file object) as an RGB uint8 array of shape
    (height, width, 3), decoded by Pillow under the policy above. Grey-scale, palette, RGBA,
    CMYK and 16-bit images are converted (16-bit values scaled to 8 bits), not refused; a
    truncated file is refused (GluonCV sets Pillow's LOAD_TRUNCATED_IMAGES process-wide when
    ``gluoncv.data`` is imported, which would fill the missing part with grey)."""
    import numpy as np
    from PIL import Image, ImageFile

    previous = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with Image.open(stream, formats=IMAGE_FORMATS) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise BadImage("image too large: %d x %d pixels is more than the %d allowed"
                               % (width, height, max_pixels))
            img.load()
            if img.mode in ("I;16", "I;16L", "I;16B", "I"):  # 16-bit grey: scale, do not clip
                grey = np.asarray(img, dtype=np.float64).clip(0, 65535) / 257.0
                return np.repeat(np.rint(grey).astype(np.uint8)[:, :, None], 3, axis=2)
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except BadImage:
        raise
    except Image.UnidentifiedImageError:
        raise BadImage("not an image: the bytes are none of %s" % ", ".join(IMAGE_FORMATS)) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise BadImage("cannot decode the image: %s" % one_line(exc)) from None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = previous


def _read_image(image_path):
    """The image file as an RGB array; PredictError naming the file when it cannot be used."""
    if not os.path.isfile(image_path):
        raise PredictError("image not found: %s" % image_path)
    try:
        return decode_image(image_path)
    except BadImage as exc:
        raise PredictError("cannot read image %s: %s" % (image_path, exc)) from None


def detect(model, image_path, threshold=0.5):
    """Detections with score >= ``threshold`` in the image file at ``image_path`` (see
    :func:`detect_image`)."""
    return detect_image(model, _read_image(image_path), threshold)


def detect_image(model, rgb, threshold=0.5, max_detections=None):
    """Detections with score >= ``threshold`` in an RGB uint8 array, best first, at most
    ``max_detections``: ``[{"class", "score", "box"}]`` with ``box`` = [x0, y0, x1, y1] in
    original-image pixels, clipped to the image; a model that segments (Mask R-CNN) adds ``mask``,
    the object's pixels in the original image as COCO's compressed RLE
    (``{"size": [height, width], "counts": ...}``). The image goes through GluonCV's test preset
    (short side ``model.short``, longer side at most ``model.max_size``)."""
    import mxnet as mx
    import numpy as np
    from gluoncv.data.transforms.presets.rcnn import transform_test

    from detector_training.core.evaluation import image_masks

    height, width = rgb.shape[:2]
    data, resized = transform_test(mx.nd.array(rgb, dtype="uint8"), short=model.short,
                                   max_size=model.max_size)
    if model.ctx is not None:
        data = data.as_in_context(model.ctx)
    outputs = model.net(data)
    ids, scores, boxes = (o[0].asnumpy() for o in outputs[:3])
    masks = outputs[3][0].asnumpy() if len(outputs) > 3 else None  # per box, in its box
    scale_x = width / float(resized.shape[1])
    scale_y = height / float(resized.shape[0])
    found = []
    for index, (cid, score, box) in enumerate(zip(ids[:, 0], scores[:, 0], boxes)):
        cid, score = int(cid), float(score)
        if cid < 0 or score < 0 or score < threshold or cid >= len(model.classes):
            continue  # -1: padding of the fixed-size output
        x0, x1 = sorted((_clip(box[0] * scale_x, width - 1), _clip(box[2] * scale_x, width - 1)))
        y0, y1 = sorted((_clip(box[1] * scale_y, height - 1), _clip(box[3] * scale_y, height - 1)))
        found.append((index, {"class": model.classes[cid], "score": score, "box": [x0, y0, x1, y1]}))
    found.sort(key=lambda item: -item[1]["score"])
    if max_detections is not None:
        found = found[:max_detections]
    detections = [det for _index, det in found]
    if masks is not None and found:
        # Each mask fills its box as answered (clipped to the image): GluonCV's fill breaks on a
        # box that reaches far outside the image.
        kept = [index for index, _det in found]
        pixel_boxes = np.array([det["box"] for det in detections], dtype=np.float32)
        for det, rle in zip(detections, image_masks(masks[kept], pixel_boxes, width, height)):
            det["mask"] = rle
    return detections


def _clip(value, upper):
    return float(min(max(float(value), 0.0), float(upper)))


# --- drawing ---------------------------------------------------------------------------------

def colour_for(name):
    """The RGB colour a class is drawn in (stable across runs)."""
    return PALETTE[zlib.crc32(str(name).encode("utf-8")) % len(PALETTE)]


def line_width(width, height):
    """Box outline width in pixels for an image of this size."""
    return max(2, int(round(min(width, height) / 200.0)))


def pixel_box(box):
    """The integer pixel rectangle (inclusive) a box is drawn at."""
    x0, y0, x1, y1 = (int(round(float(v))) for v in box)
    return x0, y0, max(x0, x1), max(y0, y1)


MASK_OPACITY = 0.5  # a mask is its class colour blended over the image at this weight


def draw(image_path, detections, out_png):
    """Draw ``detections`` (as from ``detect``) on the original image and write a PNG. Masks
    (where detections have them) are blended in first, then boxes, lowest score first, then the
    labels ("class 0.87"). Returns how many were drawn."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.fromarray(_read_image(image_path))
    ordered = sorted(detections, key=lambda d: d["score"])
    img = _blend_masks(img, [d for d in ordered if "mask" in d])
    canvas = ImageDraw.Draw(img)
    lw = line_width(*img.size)
    font = ImageFont.load_default()
    for det in ordered:
        canvas.rectangle(pixel_box(det["box"]), outline=colour_for(det["class"]), width=lw)
    for det in ordered:
        x0, y0, _x1, _y1 = pixel_box(det["box"])
        text = "%s %.2f" % (det["class"], det["score"])
        left, top, right, bottom = canvas.textbbox((0, 0), text, font=font)
        tw, th = right - left + 4, bottom - top + 4
        ty = y0 - th if y0 - th >= 0 else y0 + lw  # above the box, else just inside it
        canvas.rectangle((x0, ty, x0 + tw - 1, ty + th - 1), fill=colour_for(det["class"]))
        canvas.text((x0 + 2 - left, ty + 2 - top), text, fill=(255, 255, 255), font=font)
    atomic_write(out_png, lambda handle: img.save(handle, format="PNG"))
    return len(ordered)


def _blend_masks(img, detections):
    """The image with each detection's mask in its class colour at MASK_OPACITY."""
    if not detections:
        return img
    import numpy as np
    import pycocotools.mask as cocomask
    from PIL import Image

    pixels = np.asarray(img, dtype=np.float32)
    for det in detections:
        mask = cocomask.decode(dict(det["mask"], counts=det["mask"]["counts"].encode("ascii")))
        inside = mask.astype(bool)
        pixels[inside] = (1 - MASK_OPACITY) * pixels[inside] \
            + MASK_OPACITY * np.array(colour_for(det["class"]), dtype=np.float32)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))


def one_line(exc):
    """The first non-empty line of an exception's text (MXNet's run to many lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if "Check failed" in line), lines[0] if lines else "")
    return text or type(exc).__name__


# --- command line ----------------------------------------------------------------------------

def _threshold(value):
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number in [0, 1], got %r" % value)
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError("expected a number in [0, 1], got %r" % value)
    return number


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="detector-predict",
        description="Detect objects in one image with a trained model and draw them.")
    parser.add_argument("model", help="model directory of a job, or its model.tar.gz")
    parser.add_argument("image", help="image file (JPEG, PNG, ...)")
    parser.add_argument("--output", "-o", required=True, help="PNG to write, boxes (and masks) drawn")
    parser.add_argument("--threshold", type=_threshold, default=0.5,
                        help="minimum score of a detection (default 0.5)")
    parser.add_argument("--json", dest="json_path", default=None,
                        help="also write the detections as JSON here")
    args = parser.parse_args(argv)
    try:
        rgb = _read_image(args.image)  # before the (slower) model load
        model = load_model(args.model)
        detections = detect_image(model, rgb, args.threshold)
        drawn = draw(args.image, detections, args.output)
        if args.json_path:
            payload = json.dumps(detections, indent=1).encode("utf-8")
            atomic_write(args.json_path, lambda handle: handle.write(payload))
    except PredictError as exc:
        print("detector-predict: error: %s" % exc, file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the output directory cannot be written
        print("detector-predict: error: %s" % one_line(exc), file=sys.stderr)
        return 1
    print("drew %d detection(s) with score >= %g on %s -> %s"
          % (drawn, args.threshold, args.image, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
