"""The Ground Truth manifest reader: attributes found or named, class maps merged, every bad line
a DataError naming it, source-refs matched to image files, datasets as the other readers give."""

import json
import os

import numpy as np
import pytest

import ground_truth as gt
from detector_training.data.readers import manifest
from detector_training.data.formats import build_datasets
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters


def entries_of(records):
    return [manifest.parse_entry(r, "m line %d" % n) for n, r in enumerate(records, 1)]


def good_record(**changes):
    record = gt.line(gt.BUCKET_PREFIX + "a/x.jpg", 100, 80, [(5, 10, 20, 30, 40)])
    record.update(changes)
    return record


def test_a_generated_manifest_reads_with_sparse_ids_merged_in_id_order(tmp_path):
    records = gt.generate(str(tmp_path / "images"), 8)
    path = gt.write_manifest(str(tmp_path / "train" / "output.manifest"), records, blank_after=3)
    entries = manifest.read_entries(os.path.dirname(path))
    assert len(entries) == 8  # the blank line is skipped
    assert entries[4].where == "train/output.manifest line 6"  # numbered as in the file
    classes, index = manifest.class_list(entries)
    assert classes == ("circle", "square", "triangle")
    assert index == {0: 0, 5: 1, 7: 2}
    assert entries[1].boxes == ()  # "annotations": []


def test_the_adjusted_attribute_is_preferred_over_the_original():
    record = gt.line("s3://b/k.jpg", 100, 80, [(0, 10, 20, 30, 40)], adjusted=True)
    entry = manifest.parse_entry(record, "line 1")
    assert entry.boxes == ((10.0, 20.0, 40.0, 60.0, 0),)  # not the original's shifted box
    assert manifest.label_attribute(record, "line 1") == gt.ADJUSTMENT_ATTRIBUTE  # by its metadata
    unmarked = dict(record)
    unmarked[gt.ADJUSTMENT_ATTRIBUTE + "-metadata"] = gt.metadata(
        record[gt.ADJUSTMENT_ATTRIBUTE + "-metadata"]["class-map"])  # no adjustment-status
    with pytest.raises(DataError, match="several bounding-box attributes"):
        manifest.label_attribute(unmarked, "line 1")  # a name alone decides nothing


def test_a_named_attribute_is_used_and_must_be_on_every_line():
    record = gt.line("s3://b/k.jpg", 100, 80, [(0, 10, 20, 30, 40)], adjusted=True)
    assert manifest.parse_entry(record, "l", named="boxes").boxes[0][0] == 7.0  # the original, as named
    with pytest.raises(DataError, match="line 4 has no attribute 'labels'"):
        manifest.label_attribute(record, "m line 4", "labels")


def test_the_type_spelling_of_the_built_in_algorithm_is_accepted():
    record = good_record()
    record["boxes-metadata"]["type"] = "groundtruth/object_detection"
    assert manifest.parse_entry(record, "l").width == 100


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("boxes"), r"line 3 has 'boxes-metadata' but no attribute 'boxes'"),
    (lambda r: r.pop("boxes-metadata"), r"line 3 has no label attribute"),
    (lambda r: r["boxes-metadata"].update(type="groundtruth/image-classification"),
     r"line 3 has no object-detection label.*unknown type"),
    (lambda r: r["boxes"]["annotations"][0].update(width=-4), r"line 3: annotation 1 has a negative"),
    (lambda r: r["boxes"]["annotations"][0].update(left=90), r"line 3: annotation 1 .* outside the 100x80"),
    (lambda r: r["boxes"]["annotations"][0].update(top=-1), r"line 3: annotation 1 .* outside"),
    (lambda r: r["boxes"]["annotations"][0].update(height="40"), r"line 3: annotation 1 height is \"40\""),
    (lambda r: r["boxes"]["annotations"][0].pop("class_id"), r"line 3: annotation 1 lacks class_id"),
    (lambda r: r["boxes"].pop("image_size"), r"line 3: the label has no image_size"),
    (lambda r: r["boxes"].update(annotations=None), r"line 3: the label has no annotations list"),
    (lambda r: r.pop("source-ref"), r"line 3 has no 'source-ref'"),
    (lambda r: r["boxes-metadata"].update({"class-map": {"x": "dog"}}), r"line 3: class-map entry"),
])
def test_every_bad_line_is_a_data_error_naming_it(change, message):
    record = good_record()
    change(record)
    with pytest.raises(DataError, match=message) as caught:
        manifest.parse_entry(record, "m line 3")
    assert "Fix:" in str(caught.value)


@pytest.mark.parametrize("text, message", [
    ("{not json", r"line 2 is not valid JSON"),
    ('{"a": NaN}', r"line 2 is not valid JSON \(NaN, which JSON does not allow\)"),
    ("[1, 2]", r"line 2 is not a JSON object"),
    ('{"a": ' + "[" * 100 + "]" * 100 + "}", r"line 2 is not usable JSON: it is nested more than"),
    ("[" * 100000 + "]" * 100000, r"line 2 is not usable JSON"),  # deeper than the parser's stack
])
def test_a_line_that_is_not_a_json_object_is_named(tmp_path, text, message):
    path = tmp_path / "output.manifest"
    path.write_text(json.dumps(good_record()) + "\n" + text + "\n")
    with pytest.raises(DataError, match=message):
        list(manifest.read_lines(str(path), "output.manifest"))


def test_a_line_longer_than_the_cap_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "output.manifest"
    path.write_bytes(json.dumps(good_record()).encode() + b"\n" + b"x" * 100000 + b"\xff")
    with pytest.raises(DataError, match="line 2 is longer than 4096 bytes"):
        list(manifest.read_lines(str(path), "output.manifest"))


def test_one_id_with_two_names_names_both_lines():
    first, second = good_record(), good_record()
    second["boxes-metadata"]["class-map"] = {"5": "cube"}
    with pytest.raises(DataError, match=r"class id 5 is 'square' in m line 1 but 'cube' in m line 2"):
        manifest.class_list(entries_of([first, good_record(), second][::2]))


def test_one_name_with_two_ids_is_refused():
    first, second = good_record(), gt.line("s3://b/y.jpg", 100, 80, [(0, 1, 1, 5, 5)])
    second["boxes"]["annotations"][0]["class_id"] = 9
    second["boxes-metadata"]["class-map"] = {"9": "square"}
    with pytest.raises(DataError, match=r"class 'square' has the ids 5 \(m line 1\) and 9 \(m line 2\)"):
        manifest.class_list(entries_of([first, second]))


def test_without_class_maps_the_classes_hyperparameter_names_the_ids():
    record = good_record()
    del record["boxes-metadata"]
    entries = [manifest.parse_entry(record, "r 2", named="boxes")]
    with pytest.raises(DataError, match="names no classes"):
        manifest.class_list(entries)
    with pytest.raises(DataError, match="class_id beyond the 2 classes"):
        manifest.class_list(entries, ("a", "b"))
    assert manifest.class_list(entries, tuple("abcdef")) == (tuple("abcdef"), {i: i for i in range(6)})


def test_classes_pick_a_subset_of_the_class_maps():
    entries = entries_of([gt.line("s3://b/k.jpg", 100, 80, [(0, 1, 1, 5, 5), (7, 9, 9, 5, 5)])])
    entries[0].class_map.update({5: "square"})
    classes, index = manifest.class_list(entries, ("Triangle", "circle"))
    assert classes == ("circle", "triangle") and index == {0: 0, 7: 1}
    label = manifest.entry_label(entries[0], index)
    np.testing.assert_array_equal(label, [[1, 1, 6, 6, 0], [9, 9, 14, 14, 1]])


def test_source_refs_match_files_by_their_key(tmp_path):
    for rel in ("batch-1/a.jpg", "batch-1/b.jpg", "b.jpg", "other/c.jpg"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    found = manifest.match_images(entries_of([good_record(**{"source-ref": "s3://bk/p/batch-1/a.jpg"})]),
                                  str(tmp_path))
    assert found == [str(tmp_path / "batch-1" / "a.jpg")]
    with pytest.raises(DataError, match=r"m line 1: s3://bk/p/batch-1/b.jpg matches 2 image files"):
        manifest.match_images(entries_of([good_record(**{"source-ref": "s3://bk/p/batch-1/b.jpg"})]),
                              str(tmp_path))
    missing = [good_record(**{"source-ref": "s3://bk/p/%s.jpg" % n}) for n in ("x", "y", "other/c")]
    with pytest.raises(DataError, match=r"m line 1: no image file for s3://bk/p/x.jpg .* 2 of 3 "
                                        r"images are missing"):
        manifest.match_images(entries_of(missing), str(tmp_path))


def file_mode_config(**hyperparameters):
    return from_hyperparameters(dict({"dataset": "manifest", "network": "faster_rcnn_resnet18_v1b_voc"},
                                     **hyperparameters))


def test_file_mode_datasets_give_images_and_boxes_like_the_voc_reader(tmp_path):
    base = str(tmp_path / "ml")
    records = gt.file_mode_job(base, {}, count=6, validation=3)
    root = os.path.join(base, "input", "data")
    datasets = build_datasets(file_mode_config(skip_empty="false"), root)
    assert datasets.classes == ("circle", "square", "triangle")
    assert len(datasets.train) == 6 and len(datasets.val) == 3
    image, label = datasets.train[0]
    assert image.shape[2] == 3 and label.dtype == np.float32 and label.shape[1] == 5
    box = records[0]["boxes"]["annotations"][0]
    assert list(label[0, :4]) == [box["left"], box["top"], box["left"] + box["width"],
                                  box["top"] + box["height"]]
    np.testing.assert_array_equal(datasets.train[1][1], [[-1, -1, -1, -1, -1]])  # a negative
    assert datasets.aspect_ratios[0] == pytest.approx(image.shape[1] / image.shape[0])


def test_without_a_validation_manifest_a_seeded_split_is_carved(tmp_path, caplog):
    base = str(tmp_path / "ml")
    gt.file_mode_job(base, {}, count=10)
    root = os.path.join(base, "input", "data")
    with caplog.at_level("INFO", "detector_training"):
        first = build_datasets(file_mode_config(), root)
    again = build_datasets(file_mode_config(), root)
    assert len(first.val) == 1 and len(first.train) == 8  # one negative left out, 10% carved
    assert "1 of 10 images have no box of the trained classes: left out (skip_empty=true)" in caplog.text
    assert [first.val[0][1].tolist()] == [again.val[0][1].tolist()]
    kept = build_datasets(file_mode_config(skip_empty="false"), root)
    other_seed = build_datasets(file_mode_config(seed=7, skip_empty="false"), root)
    assert len(other_seed.train) == len(kept.train) == 9
    assert other_seed.val[0][1].tolist() != kept.val[0][1].tolist()  # another image carved


def test_an_image_that_does_not_decode_names_its_line(tmp_path):
    base = str(tmp_path / "ml")
    records = gt.file_mode_job(base, {}, count=4, validation=1)
    key = records[0]["source-ref"][len(gt.BUCKET_PREFIX):]
    with open(os.path.join(base, "input", "data", "images", key), "wb") as handle:
        handle.write(b"not an image")
    datasets = build_datasets(file_mode_config(), os.path.join(base, "input", "data"))
    with pytest.raises(DataError, match=r"cannot read .* image %s of train/output.manifest line 1"
                                        % records[0]["source-ref"]):
        datasets.train[0]


def test_missing_channels_say_which_to_give(tmp_path):
    config = file_mode_config()
    with pytest.raises(DataError, match="no manifest channel"):
        build_datasets(config, str(tmp_path))
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match="no 'images' channel"):
        build_datasets(config, str(tmp_path))
    (tmp_path / "images").mkdir()
    with pytest.raises(DataError, match=r"no manifest \(\*.manifest or \*.jsonl\)"):
        build_datasets(config, str(tmp_path))
