"""A model's ONNX file (model.onnx and onnx.json) run with onnxruntime, numpy and Pillow only.

    python run_onnx.py MODEL_DIR IMAGE [THRESHOLD]

prints the detections as `detector-predict --json` writes them; detect() returns them."""

import json
import sys

import numpy as np
from PIL import Image, ImageOps


def taps(new, old, cubic):
    """For each output pixel along one axis, the source pixels and their weights (in 2048ths)
    as OpenCV's resize (which MXNet uses) computes them: bilinear, or bicubic with a = -0.75."""
    position = ((np.arange(new) + 0.5) * (1.0 / (new / old)) - 0.5).astype(np.float32)
    low = np.floor(position).astype(int)
    x = (position - low).astype(np.float32)
    weights, offsets = [1 - x, x], [0, 1]
    if cubic:
        a = np.float32(-0.75)
        w0 = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a
        w1 = ((a + 2) * x - (a + 3)) * x * x + 1
        w2 = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1
        weights, offsets = [w0, w1, w2, 1 - w0 - w1 - w2], [-1, 0, 1, 2]
    index = np.clip(low[:, None] + np.array(offsets), 0, old - 1)
    return index, np.round(np.stack(weights, 1).astype(np.float32) * 2048).astype(np.int64)


def area(new, old):
    """The share of each source pixel in each output pixel when ``old`` pixels average into ``new``."""
    edges = np.arange(new + 1) * (old / new)
    pixel = np.arange(old)[None]
    overlap = np.minimum(edges[1:, None], pixel + 1) - np.maximum(edges[:-1, None], pixel)
    return np.clip(overlap, 0, None) / (old / new)


def resize(rgb, new_w, new_h, mode):
    """``rgb`` (uint8) resized to new_w x new_h with OpenCV's arithmetic for ``mode`` (linear,
    cubic or area), so that the network sees the pixels it sees in MXNet: the same pixels for
    linear, one level apart on a few pixels in ten thousand for area and cubic (float rounding)."""
    if mode == "area":
        out = np.einsum("yi,ijc,xj->yxc", area(new_h, rgb.shape[0]), rgb.astype(np.float64),
                        area(new_w, rgb.shape[1]), optimize=True)
        return np.clip(np.rint(out), 0, 255)
    xs, x_weights = taps(new_w, rgb.shape[1], mode == "cubic")
    ys, y_weights = taps(new_h, rgb.shape[0], mode == "cubic")
    rows = sum(rgb[:, xs[:, k]].astype(np.int64) * x_weights[None, :, k, None] for k in range(xs.shape[1]))
    if mode == "linear":  # OpenCV's vectorised rows: 16-bit products, their high halves summed
        out = sum((rows[ys[:, k]] >> 4) * y_weights[:, k, None, None] >> 16 for k in range(2))
        out = (out + 2) >> 2
    else:
        parts = [rows[ys[:, k]].astype(np.float32) * (y_weights[:, k, None, None] / np.float32(1 << 22))
                 for k in range(4)]
        out = np.rint((parts[0] + parts[1]) + (parts[2] + parts[3]))
    return np.clip(out, 0, 255)


def detect(model_dir, image_path, threshold=0.5):
    """The detections scoring at least ``threshold``, best first: each a dict of class (name),
    score and box (x0, y0, x1, y1 in the image's pixels)."""
    import onnxruntime  # here: importing this module (or the launcher) does not load it

    with open(model_dir + "/onnx.json") as handle:
        info = json.load(handle)
    session = onnxruntime.InferenceSession(model_dir + "/model.onnx", providers=["CPUExecutionProvider"])

    # The image upright (as its EXIF orientation says), resized as the model was validated.
    image = ImageOps.exif_transpose(Image.open(image_path)).convert("RGB")
    width, height = image.size
    if info["resize"] == "square":  # SSD, YOLOv3
        new_w, new_h = info["width"], info["height"]
        scale_x, scale_y = width / new_w, height / new_h
    else:  # Faster R-CNN, Mask R-CNN: shorter side `short`, longer side at most `max_size`
        scale = info["short"] / min(width, height)
        if round(scale * max(width, height)) > info["max_size"]:
            scale = info["max_size"] / max(width, height)
        new_w, new_h = int(round(width * scale)), int(round(height * scale))
        scale_x = scale_y = height / new_h
    mode = "linear"  # what MXNet chose: area to shrink a square input, bicubic to enlarge it
    if info["resize"] == "square" and new_w < width and new_h < height:
        mode = "area"
    elif info["resize"] == "square" and new_w > width and new_h > height:
        mode = "cubic"
    pixels = resize(np.asarray(image), new_w, new_h, mode)

    data = (pixels / 255.0 - info["mean"]) / info["std"]
    data = data.transpose(2, 0, 1)[None].astype(np.float32)
    ids, scores, boxes = session.run(info["outputs"][:3], {info["input_name"]: data})

    detections = []
    for class_id, score, box in zip(ids[0, :, 0], scores[0, :, 0], boxes[0]):
        if class_id < 0 or score < threshold:
            continue
        x0, x1 = sorted(np.clip([box[0] * scale_x, box[2] * scale_x], 0, width - 1))
        y0, y1 = sorted(np.clip([box[1] * scale_y, box[3] * scale_y], 0, height - 1))
        detections.append({"class": info["classes"][int(class_id)], "score": float(score),
                           "box": [float(x0), float(y0), float(x1), float(y1)]})
    detections.sort(key=lambda found: -found["score"])
    return detections


if __name__ == "__main__":
    threshold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
    print(json.dumps(detect(sys.argv[1], sys.argv[2], threshold), indent=1))
