"""A model's ONNX file (model.onnx and onnx.json) run with onnxruntime, numpy and Pillow only.

    python run_onnx.py MODEL_DIR IMAGE [THRESHOLD]

prints the detections as `detector-predict --json` writes them; detect() returns them."""

import json
import sys

import numpy as np
from PIL import Image, ImageOps


def bilinear(rgb, new_w, new_h):
    """OpenCV's bilinear resize (pixel centres, no smoothing), which the R-CNN models see in
    training; Pillow's bilinear smooths when it shrinks."""
    def axis(new, old):
        position = np.clip((np.arange(new) + 0.5) * old / new - 0.5, 0, old - 1)
        low = np.floor(position).astype(int)
        return low, np.minimum(low + 1, old - 1), (position - low)[:, None]
    y0, y1, wy = axis(new_h, rgb.shape[0])
    x0, x1, wx = axis(new_w, rgb.shape[1])
    rows = rgb[y0] * (1 - wy[:, :, None]) + rgb[y1] * wy[:, :, None]
    return np.round(rows[:, x0] * (1 - wx) + rows[:, x1] * wx)


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
    if info["resize"] == "square" and new_w < width and new_h < height:  # area-averaged
        pixels = np.asarray(image.resize((new_w, new_h), Image.BOX), dtype=np.float64)
    elif info["resize"] == "square" and new_w > width and new_h > height:  # bicubic
        pixels = np.asarray(image.resize((new_w, new_h), Image.BICUBIC), dtype=np.float64)
    else:
        pixels = bilinear(np.asarray(image, dtype=np.float64), new_w, new_h)

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
