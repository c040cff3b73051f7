"""Generated VOC-format data (data/generated/synthetic_voc.py): what GluonCV reads, and the styles."""

import pytest
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_voc import generate
from detector_training.job.config import from_hyperparameters


def test_generated_voc_reads_with_gluoncv(tmp_path):
    devkit = generate(str(tmp_path), train_2007=6, test_2007=3, train_2012=4, seed=1)
    config = from_hyperparameters({"dataset": "custom"})
    data = build_datasets(config, str(tmp_path))
    assert devkit.startswith(str(tmp_path)) and set(data.classes) <= {"circle", "square", "triangle"}
    assert len(data.train) == 10 and len(data.val) == 3
    img, label = data.train[0]
    assert img.shape[2] == 3 and label.shape[1] == 6  # box, class, difficult
    assert (label[:, 4] >= 0).all() and (label[:, 4] < len(data.classes)).all()
    assert len(data.aspect_ratios) == 10
    for i in (0, 9):
        image, _ = data.train[i]
        assert data.aspect_ratios[i] == pytest.approx(image.shape[1] / image.shape[0])


def test_the_other_style_differs_from_the_demo_in_shapes_colours_and_sizes(tmp_path):
    from detector_training.data.generated.synthetic_voc import STYLES
    from PIL import Image

    config = from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval"})
    generate(str(tmp_path / "demo"), 30, 10, 0, seed=5)
    generate(str(tmp_path / "other"), 30, 10, 0, seed=5, style="other")
    demo, other = build_datasets(config, str(tmp_path / "demo")), build_datasets(config, str(tmp_path / "other"))
    assert demo.classes == ("circle", "square", "triangle")
    assert other.classes == ("cross", "diamond", "ellipse")  # read back from the annotations

    def boxes(data):
        return [row for i in range(len(data.train)) for row in data.train[i][1]]

    demo_boxes, other_boxes = boxes(demo), boxes(other)
    assert all(b[2] - b[0] == b[3] - b[1] for b in demo_boxes)  # square boxes, 24 px and up
    assert min(b[2] - b[0] for b in demo_boxes) >= 24
    assert any(abs((b[2] - b[0]) - (b[3] - b[1])) > 4 for b in other_boxes)  # elongated ones too
    assert min(max(b[2] - b[0], b[3] - b[1]) for b in other_boxes) < 24  # smaller objects
    # Every object's centre pixel has one of the style's palette colours (JPEG: within a margin).
    palette = STYLES["other"].palette
    image_file = sorted((tmp_path / "other" / "VOCdevkit" / "VOC2007" / "JPEGImages").iterdir())[0]
    with Image.open(image_file) as img:
        annotation = other.train[0][1]
        for x0, y0, x1, y1 in annotation[:, :4]:
            centre = img.getpixel((int((x0 + x1) / 2), int((y0 + y1) / 2)))
            assert min(sum(abs(a - b) for a, b in zip(centre, c)) for c in palette) < 40


def test_the_colours_style_draws_each_class_in_its_own_colour(tmp_path):
    """The learning floors' data: the demo's shapes, each class always in its palette colour, so
    a short recipe can tell the classes apart (and a detector that mixes them up scores low)."""
    from detector_training.data.generated.synthetic_voc import STYLES
    from PIL import Image

    config = from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval"})
    generate(str(tmp_path), 12, 2, 0, seed=3, style="colours")
    data = build_datasets(config, str(tmp_path))
    assert data.classes == ("circle", "square", "triangle")
    palette = STYLES["colours"].palette
    voc = tmp_path / "VOCdevkit" / "VOC2007"
    ids = (voc / "ImageSets" / "Main" / "trainval.txt").read_text().split()  # the reader's order
    seen = set()
    for i, image_id in enumerate(ids):
        path = voc / "JPEGImages" / (image_id + ".jpg")
        with Image.open(path) as img:
            for x0, y0, x1, y1, cls in data.train[i][1][:, :5]:
                # the centre of the box's lower half lies inside each of the three shapes
                centre = img.convert("RGB").getpixel((int((x0 + x1) / 2), int(y0 + (y1 - y0) * 0.7)))
                distances = [sum(abs(a - b) for a, b in zip(centre, c)) for c in palette]
                assert distances.index(min(distances)) == int(cls) and min(distances) < 60, (path, cls, centre)
                seen.add(int(cls))
    assert seen == {0, 1, 2}
