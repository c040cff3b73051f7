"""COCO exports of CVAT, Roboflow and Label Studio, laid out as each tool writes them: found in
the channels without paths named, their roles from subset and folder names, Roboflow's placeholder
category left out, and read for training by coco_format's readers (masks too)."""

import os

import pytest

import builtin_exports as bx
from detector_training.data.readers import coco_format
from detector_training.data import labelled as labelled_set
from detector_training.data.readers import coco_exports as ce
from detector_training.errors import DataError

ITEMS = bx.sample_objects(4)


def rel(channels, export):
    return (export.tool, export.subset, os.path.relpath(export.annotation_file, channels),
            os.path.relpath(export.image_root, channels), export.role)


def test_cvat_subsets_and_their_image_folders(tmp_path):
    channels = str(tmp_path)
    bx.cvat_coco(os.path.join(channels, "train"), {"Train": ITEMS, "Validation": ITEMS[:2],
                                                   "Test": ITEMS[:1]})
    found = ce.recognise(channels)
    assert [rel(channels, e) for e in found["train"]] == [
        (ce.CVAT, "Test", "train/annotations/instances_Test.json", "train/images/Test", "test"),
        (ce.CVAT, "Train", "train/annotations/instances_Train.json", "train/images/Train", "train"),
        (ce.CVAT, "Validation", "train/annotations/instances_Validation.json",
         "train/images/Validation", "validation")]
    train, validation = ce.locate(channels)
    assert (train.subset, validation.subset) == ("Train", "Validation")


def test_cvat_default_subset_with_flat_images_in_a_zip_folder(tmp_path):
    channels = str(tmp_path)
    bx.cvat_coco(os.path.join(channels, "train", "task_12-2024_01_01_coco 1.0"), {"default": ITEMS},
                 flat_images=True)
    train, validation = ce.locate(channels)
    assert validation is None
    assert rel(channels, train) == (ce.CVAT, "default",
                                    "train/task_12-2024_01_01_coco 1.0/annotations/instances_default.json",
                                    "train/task_12-2024_01_01_coco 1.0/images", "train")
    labelled = ce.read_labelled(train, channels)
    assert labelled.classes == ("dog", "cat") and len(labelled.images) == 4
    assert labelled.images[0].path.endswith("images/img_000.jpg")


def test_roboflow_splits_and_its_placeholder_category(tmp_path):
    channels = str(tmp_path)
    bx.roboflow_coco(os.path.join(channels, "train"), {"train": ITEMS, "valid": ITEMS[:2],
                                                       "test": ITEMS[:1]}, project="pets")
    train, validation = ce.locate(channels)
    assert rel(channels, train) == (ce.ROBOFLOW, "train", "train/train/_annotations.coco.json",
                                    "train/train", "train")
    assert validation.subset == "valid" and validation.role == "validation"
    assert ce.export_classes(train) == ("dog", "cat")
    labelled = ce.read_labelled(train, channels)
    assert labelled.classes == ("dog", "cat")
    assert labelled.object_counts() == {"dog": 2, "cat": 3}
    assert labelled.drops.counts() == {ce.PLACEHOLDER: 1}
    assert os.path.basename(labelled.images[0].path) == bx.roboflow_name("img_000")


def test_validation_channel_wins_over_the_training_channels_subset(tmp_path):
    channels = str(tmp_path)
    bx.roboflow_coco(os.path.join(channels, "train"), {"train": ITEMS, "valid": ITEMS[:2]})
    bx.roboflow_coco(os.path.join(channels, "validation"), {"valid": ITEMS[:3]})
    _train, validation = ce.locate(channels)
    assert os.path.relpath(validation.annotation_file, channels) == \
        "validation/valid/_annotations.coco.json"


@pytest.mark.parametrize("windows", [False, True])
def test_label_studio_result_and_images(tmp_path, windows):
    channels = str(tmp_path)
    bx.label_studio_coco(os.path.join(channels, "train"), ITEMS, class_names=("dog", "cat"),
                         windows=windows)
    train, validation = ce.locate(channels)
    assert validation is None
    assert rel(channels, train) == (ce.LABEL_STUDIO, "result", "train/result.json", "train", "train")
    labelled = ce.read_labelled(train, channels)
    assert labelled.classes == ("cat", "dog")  # Label Studio sorts its categories by name
    assert labelled.object_counts() == {"cat": 3, "dog": 2}
    assert all(os.path.isfile(i.path) for i in labelled.images) and not labelled.drops


def test_label_studio_absolute_file_names_are_found_by_base_name(tmp_path):
    channels = str(tmp_path)
    root = os.path.join(channels, "train")
    bx.label_studio_coco(root, ITEMS[:2])
    path = os.path.join(root, "result.json")
    text = open(path).read().replace('"images/', '"/home/labeller/label-studio/media/upload/3/')
    open(path, "w").write(text)
    train, _ = ce.locate(channels)
    assert sorted(os.path.basename(i.path) for i in ce.read_labelled(train, channels).images) == \
        sorted(os.listdir(os.path.join(root, "images")))


def test_quirks_counted_and_missing_images(tmp_path):
    channels = str(tmp_path)
    items = [("a", (64, 48), [(0, -3, 2, 10, 10), (1, 10, 10, 0, 4)]), ("b", (64, 48), [(0, 1, 1, 5, 5)])]
    bx.cvat_coco(os.path.join(channels, "train"), {"default": items})
    os.remove(os.path.join(channels, "train", "images", "default", "b.jpg"))
    train, _ = ce.locate(channels)
    labelled = ce.read_labelled(train, channels)
    assert [(b.xmin, b.xmax) for b in labelled.images[0].boxes] == [(0.0, 7.0)]
    assert labelled.drops.counts() == {ce.NO_IMAGE: 1, labelled_set.NO_AREA: 1}
    assert labelled.adjusted.counts() == {labelled_set.CLIPPED: 1}


def test_no_export_in_train_lists_what_it_holds(tmp_path):
    os.makedirs(tmp_path / "train" / "photos")
    (tmp_path / "train" / "notes.txt").write_text("x")
    assert ce.recognise(str(tmp_path)) == {}
    with pytest.raises(DataError, match=r"no COCO export .* \(it holds: notes.txt, photos\)"):
        ce.locate(str(tmp_path))


def test_two_training_exports_in_one_channel_are_refused(tmp_path):
    bx.roboflow_coco(str(tmp_path / "train" / "a"), {"train": ITEMS})
    bx.label_studio_coco(str(tmp_path / "train"), ITEMS)
    with pytest.raises(DataError, match=r"several train exports: Label Studio COCO \(train/result.json\); Roboflow"):
        ce.locate(str(tmp_path))


def test_a_broken_export_is_named(tmp_path):
    bx.roboflow_coco(str(tmp_path / "train"), {"train": ITEMS})
    path = tmp_path / "train" / "train" / "_annotations.coco.json"
    path.write_text(path.read_text()[:-40])
    train, _ = ce.locate(str(tmp_path))
    with pytest.raises(DataError, match=r"_annotations.coco.json is not valid JSON"):
        ce.read_labelled(train, str(tmp_path))


# ------------------------------------------------------------------ read by coco_format for training

def exports(tmp_path):
    channels = str(tmp_path)
    bx.cvat_coco(os.path.join(channels, "cvat", "train"), {"default": ITEMS}, polygons=True)
    bx.roboflow_coco(os.path.join(channels, "roboflow", "train"), {"train": ITEMS}, polygons=True)
    bx.label_studio_coco(os.path.join(channels, "studio", "train"), ITEMS, windows=True, polygons=True)
    return [ce.locate(os.path.join(channels, tool))[0] for tool in ("cvat", "roboflow", "studio")]


def test_every_export_trains_through_the_coco_readers_boxes_and_masks(tmp_path):
    for export in exports(tmp_path):
        classes = ce.export_classes(export)
        files = {export.split: export.annotation_file}
        boxes = coco_format.coco_dataset_class()(export.image_root, [export.split], classes,
                                                 annotation_files=files, use_crowd=False)
        assert boxes.classes == classes and len(boxes) == 4, export.tool
        image, label = boxes[0]
        assert image.shape == (48, 64, 3) and label.shape == (1, 5)
        instances = coco_format.coco_instance_class()(export.image_root, [export.split], classes,
                                                      annotation_files=files)
        assert len(instances) == 4 and len(instances[2][2]) == 2, export.tool  # two masks


def test_box_only_export_under_mask_rcnn_says_it_has_no_masks(tmp_path):
    bx.label_studio_coco(str(tmp_path / "train"), ITEMS)
    export, _ = ce.locate(str(tmp_path))
    with pytest.raises(DataError, match=r"has no usable 'segmentation'"):
        coco_format.coco_instance_class()(export.image_root, [export.split], ce.export_classes(export),
                                          annotation_files={export.split: export.annotation_file})


def test_an_export_without_validation_is_carved_by_image_id_seeded(tmp_path):
    bx.cvat_coco(str(tmp_path / "train"), {"default": bx.sample_objects(10)})
    export, _ = ce.locate(str(tmp_path))
    document = coco_format.read_document(export.annotation_file)
    train_ids, val_ids = coco_format.carve_image_ids(document, 0.2, seed=3)
    assert len(val_ids) == 2 and not set(train_ids) & set(val_ids)
    assert sorted(train_ids + val_ids) == list(range(1, 11))
    assert coco_format.carve_image_ids(document, 0.2, seed=3) == (train_ids, val_ids)
    assert coco_format.carve_image_ids(document, 0.2, seed=4) != (train_ids, val_ids)
    cls = coco_format.coco_dataset_class()
    files = {export.split: export.annotation_file}
    val = cls(export.image_root, [export.split], ce.export_classes(export), annotation_files=files,
              image_ids=val_ids, skip_empty=False)
    assert len(val) == 2 and sorted(val._coco[0].getImgIds()) == val_ids  # the metric's truth
    train = cls(export.image_root, [export.split], ce.export_classes(export), annotation_files=files,
                image_ids=train_ids)
    assert len(train) == 8


# ------------------------------------------------ CVAT's masks and brushes: RLE with iscrowd 1

def test_the_cvat_fixture_writes_rle_that_pycocotools_decodes_to_the_object(tmp_path):
    import json

    import pycocotools.mask as cocomask

    bx.cvat_coco(str(tmp_path), {"default": ITEMS[:1]}, masks=True)
    ann = json.load(open(tmp_path / "annotations" / "instances_default.json"))["annotations"][0]
    _cls, left, top, w, h = ITEMS[0][2][0]
    mask = cocomask.decode(cocomask.frPyObjects(ann["segmentation"], 48, 64))
    assert ann["iscrowd"] == 1 and int(mask.sum()) == w * h == ann["area"]
    assert mask[top, left] == 1 and mask[top + h - 1, left + w - 1] == 1
    assert mask[top - 1, left] == 0 and mask[top, left - 1] == 0


def test_cvat_masks_are_objects_in_its_export_and_the_data_check_counts_them(tmp_path):
    channels = str(tmp_path)
    bx.cvat_coco(os.path.join(channels, "train"), {"Train": ITEMS, "Validation": ITEMS[:2]},
                 masks=True)
    train, validation = ce.locate(channels)
    assert train.tool.crowd_is_mask and validation.tool.crowd_is_mask  # as CVAT's exporter writes
    labelled = ce.read_labelled(train, channels)
    assert labelled.object_counts() == {"dog": 2, "cat": 3} and not labelled.drops
    assert labelled.adjusted.counts() == {ce.MASK_OBJECT: 5}


def test_a_crowd_region_of_another_tool_is_still_left_out(tmp_path):
    channels = str(tmp_path)
    bx.roboflow_coco(os.path.join(channels, "train"), {"train": ITEMS})
    path = os.path.join(channels, "train", "train", "_annotations.coco.json")
    document = coco_format.read_document(path)
    document["annotations"][0]["iscrowd"] = 1
    bx.write_json(path, document)
    train, _ = ce.locate(channels)
    assert not train.tool.crowd_is_mask
    labelled = ce.read_labelled(train, channels)
    assert sum(labelled.object_counts().values()) == 4
    assert labelled.drops.counts()[ce.CROWD] == 1 and not labelled.adjusted
