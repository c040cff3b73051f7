"""``detector-predict``: run a trained model on one image and draw what it finds (boxes; a Mask
R-CNN's masks too). The command line and the drawing; loading, decoding and the forward pass are
``inference.py``'s, as ``serve`` runs them.

    detector-predict MODEL IMAGE --output OUT.png [--threshold 0.5] [--json OUT.json]
"""

import argparse
import json
import sys
import zlib

from detector_training import inference
from detector_training.core.files import atomic_write
from detector_training.errors import one_line
from detector_training.values import parse_score_threshold

# Distinct, saturated colours; a class keeps its colour across images and runs.
PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
           (170, 110, 40), (128, 0, 0), (0, 0, 128), (128, 128, 0), (255, 225, 25))


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
    """Draw ``detections`` (as from ``inference.detect_image``) on the original image and write
    a PNG. Masks (where detections have them) are blended in first, then boxes, lowest score
    first, then the labels ("class 0.87"). Returns how many were drawn."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.fromarray(inference.read_image(image_path))
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


# --- command line ----------------------------------------------------------------------------

def _threshold(value):
    try:
        return parse_score_threshold(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("expected %s, got %r" % (exc, value)) from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="detector-predict",
        description="Detect objects in one image with a trained model and draw them.")
    parser.add_argument("model", help="model directory of a job, or its model.tar.gz")
    parser.add_argument("image", help="image file (JPEG, PNG, ...)")
    parser.add_argument("--output", "-o", required=True, help="PNG to write, boxes (and masks) drawn")
    parser.add_argument("--threshold", type=_threshold, default=inference.DEFAULT_THRESHOLD,
                        help="minimum score of a detection (default %g)" % inference.DEFAULT_THRESHOLD)
    parser.add_argument("--json", dest="json_path", default=None,
                        help="also write the detections as JSON here")
    args = parser.parse_args(argv)
    try:
        rgb = inference.read_image(args.image)  # before the (slower) model load
        model = inference.load_model(args.model)
        detections = inference.detect_image(model, rgb, args.threshold)
        drawn = draw(args.image, detections, args.output)
        if args.json_path:
            payload = json.dumps(detections, indent=1, ensure_ascii=False).encode("utf-8")
            atomic_write(args.json_path, lambda handle: handle.write(payload))
    except inference.InferenceError as exc:
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
