"""Pascal VOC XML exports, laid out as each tool writes them, recognised and read: the layout's
name, its splits as roles, every photo with its boxes and the declared classes; and the quirks of
real exports, each counted."""

import os
import shutil

import pytest

import exports
from detector_training.data import labelled
from detector_training.data.readers import voc_exports
from detector_training.data.generated.synthetic_voc import generate
from detector_training.errors import DataError


def _boxes(labelled_set):
    """{image file name: sorted (class, xmin, ymin, xmax, ymax)} of a LabelledSet."""
    return {os.path.basename(i.path): sorted((b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in i.boxes)
            for i in labelled_set.images}


def _expected(made, name=lambda p: p.name):
    return {name(p): sorted((n, float(x0), float(y0), float(x1), float(y1))
                            for n, x0, y0, x1, y1 in p.objects) for p in made}


def test_labelimg_default_xml_beside_each_photo(tmp_path):
    made = exports.labelimg_beside(str(tmp_path))
    export = voc_exports.find_export(str(tmp_path))
    assert export.layout == voc_exports.LABELIMG_BESIDE and export.roles() == {"train": ["default"]}
    read = export.read()
    assert read.layout == voc_exports.LABELIMG_BESIDE
    assert _boxes(read) == _expected(made)
    assert read.class_names() == ("circle", "square")
    grey = [i for i in read.images if os.path.basename(i.path) == made[1].name][0]
    assert grey.size == made[1].image.size and not read.drops and not read.adjusted


@pytest.mark.parametrize("images, annotations", [("images", "annotations"), ("fotos", "xml-out")])
def test_labelimg_separate_save_folder_with_any_names(tmp_path, images, annotations):
    made = exports.labelimg_separate(str(tmp_path), images=images, annotations=annotations)
    export = voc_exports.find_export(str(tmp_path))
    assert export.layout == voc_exports.LABELIMG_SEPARATE
    read = export.read()
    assert _boxes(read) == _expected(made)
    assert {os.path.dirname(i.path) for i in read.images} == {str(tmp_path / images)}


def test_cvat_voc_1_1_default_subset_with_labelmap_order(tmp_path):
    made = exports.cvat_voc(str(tmp_path), labels=("square", "circle", "triangle"), tags=True)
    export = voc_exports.find_export(str(tmp_path))
    assert export.layout == voc_exports.CVAT
    # labelmap.txt's order, without its comment line and background; per-label files not subsets
    assert export.classes == ("square", "circle", "triangle")
    assert export.roles() == {"train": ["default"]}
    read = export.read()
    assert read.class_names() == ("square", "circle", "triangle")
    assert len(read.images) == len(made) and not read.drops
    name, x0, y0, x1, y1 = made[0].objects[0]
    first = sorted(_boxes(read)[made[0].name])[0]
    assert first[0] == sorted(made[0].objects)[0][0]
    assert any(b[1] == pytest.approx(x0 + 0.35) for b in _boxes(read)[made[0].name])


def test_cvat_subsets_keep_their_case_and_become_roles(tmp_path):
    exports.cvat_voc(str(tmp_path / "task_shapes-2026_12_01"), subsets=(("Train", 4), ("Validation", 2)))
    export = voc_exports.find_export(str(tmp_path))  # the zip's folder one level down
    assert export.roles() == {"train": ["Train"], "validation": ["Validation"]}
    assert len(export.read("Train").images) == 4 and len(export.read("Validation").images) == 2
    with pytest.raises(DataError, match="has no split 'val'"):
        export.read("val")


def test_roboflow_voc_train_valid_test_with_renamed_files(tmp_path):
    made = exports.roboflow_voc(str(tmp_path))
    export = voc_exports.find_export(str(tmp_path))
    assert export.layout == voc_exports.ROBOFLOW
    assert export.roles() == {"test": ["test"], "train": ["train"], "validation": ["valid"]}
    for split in ("train", "valid", "test"):
        read = export.read(split)
        assert _boxes(read) == _expected(made[split])
        assert all(".rf." in os.path.basename(i.path) for i in read.images)
        assert not read.drops


def test_a_vocdevkit_tree_reads_its_year_splits_with_names_in_lower_case(tmp_path):
    devkit = generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0)
    xml = os.path.join(devkit, "VOC2007", "Annotations", "000001.xml")
    with open(xml) as handle:
        text = handle.read()
    with open(xml, "w") as handle:
        handle.write(text.replace("<name>", "<name>X"))
    export = voc_exports.find_export(str(tmp_path))
    assert export.layout == voc_exports.VOCDEVKIT
    assert set(export.splits) >= {"2007_trainval", "2007_test", "2007_train", "2007_val"}
    read = export.read(["2007_trainval"])
    assert len(read.images) == 4 and not read.drops  # the test images are not "unlabelled"
    assert set(read.class_names()) <= {"circle", "square", "triangle", "xcircle", "xsquare",
                                       "xtriangle"}
    assert any(name.startswith("x") for name in read.class_names())


def test_nothing_there_is_no_export(tmp_path):
    assert voc_exports.find_export(str(tmp_path)) is None
    (tmp_path / "notes.xml").write_text("<annotations><version>1.1</version></annotations>")
    assert voc_exports.find_export(str(tmp_path)) is None
    assert voc_exports.find_export(str(tmp_path / "missing")) is None


# Quirks ------------------------------------------------------------------------------------------

def test_the_image_is_found_by_stem_with_any_extension_in_any_case(tmp_path):
    made = exports.labelimg_beside(str(tmp_path), count=3)
    folder = tmp_path / "photos"
    os.rename(folder / made[0].name, folder / (made[0].stem + ".JPG"))
    png = folder / (made[1].stem + ".png")
    made[1].image.save(png)
    os.remove(folder / made[1].name)
    read = voc_exports.find_export(str(tmp_path)).read()
    names = sorted(os.path.basename(i.path) for i in read.images)
    assert names == sorted([made[0].stem + ".JPG", made[1].stem + ".png", made[2].name])


def test_a_wrong_or_zero_size_in_the_xml_loses_to_the_image_header(tmp_path):
    made = exports.photos(2)
    folder = tmp_path / "photos"
    for photo, size in zip(made, [(0, 0), (999, 10)]):
        exports.save(photo, str(folder))
        (folder / (photo.stem + ".xml")).write_text(exports.labelimg_xml(photo, str(folder), size=size))
    read = voc_exports.find_export(str(tmp_path)).read()
    assert [i.size for i in read.images] == [p.image.size for p in made]
    assert read.adjusted.counts() == {voc_exports.SIZE_DIFFERS: 1}
    assert "999x10" in read.adjusted.examples(voc_exports.SIZE_DIFFERS)[0]


def test_boxes_outside_without_area_of_other_classes_are_dropped_and_counted(tmp_path):
    photo = exports.photos(1)[0]
    width, height = photo.image.size
    folder = tmp_path / "photos"
    exports.save(photo, str(folder))
    extra = [("circle", width - 10, 5, width + 30, 40),      # partly outside: clipped
             ("circle", width + 5, 5, width + 30, 40),       # wholly outside
             ("square", 20, 20, 20, 50),                     # no width
             ("dog", 10, 10, 40, 40),                        # another class: kept (boxes_of counts it)
             ("circle", width - 10, 5, width + 30, 40)]      # the same box again
    (folder / (photo.stem + ".xml")).write_text(
        exports.labelimg_xml(photo, str(folder), extra_objects=extra))
    read = labelled.select(voc_exports.find_export(str(tmp_path)).read(), ("Circle", "square"))
    assert read.drops.counts() == {labelled.OUTSIDE: 1, labelled.NO_AREA: 1, labelled.REPEATED_BOX: 1}
    assert read.adjusted.counts() == {labelled.CLIPPED: 1}
    boxes = read.images[0].boxes
    assert len(boxes) == len(photo.objects) + 2
    assert ("Circle", width - 11.0, float(width)) in [(b.label, b.xmin, b.xmax) for b in boxes]
    assert read.class_names() == ("Circle", "square")
    drops = labelled.Drops()
    assert [b.label for b in labelled.boxes_of(read.images[0], read.class_names(), drops)].count("dog") == 0
    assert drops.counts() == {labelled.NOT_TRAINED % "dog": 1}


def test_an_image_listed_twice_or_named_by_two_annotations_is_kept_once(tmp_path):
    made = exports.cvat_voc(str(tmp_path / "cvat"), subsets=(("default", 3),))
    main = tmp_path / "cvat" / "ImageSets" / "Main" / "default.txt"
    main.write_text(main.read_text() + made[0].stem + "\n")
    read = voc_exports.find_export(str(tmp_path / "cvat")).read()
    assert len(read.images) == 3 and read.drops.counts() == {labelled.REPEATED_IMAGE: 1}
    made = exports.labelimg_beside(str(tmp_path / "li"), count=2)
    shutil.copy(tmp_path / "li" / "photos" / (made[0].stem + ".xml"),
                tmp_path / "li" / "photos" / (made[0].stem + " (copy).xml"))
    read = voc_exports.find_export(str(tmp_path / "li")).read()
    assert len(read.images) == 2 and read.drops.counts() == {labelled.REPEATED_IMAGE: 1}


def test_missing_images_annotations_and_unlabelled_photos_are_counted(tmp_path):
    made = exports.cvat_voc(str(tmp_path), subsets=(("default", 4),))
    os.remove(tmp_path / "JPEGImages" / made[0].name)
    os.remove(tmp_path / "Annotations" / (made[1].stem + ".xml"))
    exports.save(exports.photos(1, seed=9, prefix="extra_")[0], str(tmp_path / "JPEGImages"))
    read = voc_exports.find_export(str(tmp_path)).read()
    assert len(read.images) == 2
    assert read.drops.counts() == {voc_exports.NO_IMAGE: 1, voc_exports.NO_ANNOTATION: 1,
                                   voc_exports.UNLABELLED: 2}


def test_a_broken_annotation_among_good_ones_is_named(tmp_path):
    made = exports.roboflow_voc(str(tmp_path))
    broken = tmp_path / "valid" / (made["valid"][1].stem + ".xml")
    broken.write_text(broken.read_text()[:100])
    export = voc_exports.find_export(str(tmp_path))
    assert len(export.read("train").images) == 6  # the other split's problem is not this one's
    with pytest.raises(DataError, match=r"%s line \d+ column \d+ is not well-formed" % broken.name):
        export.read("valid")


def test_the_folder_the_xml_names_decides_between_two_images_of_one_name(tmp_path):
    made = exports.labelimg_separate(str(tmp_path), count=1)  # <folder>images</folder>
    exports.save(made[0], str(tmp_path / "copies"))
    read = voc_exports.find_export(str(tmp_path)).read()
    assert [os.path.dirname(i.path) for i in read.images] == [str(tmp_path / "images")]


def test_two_images_matching_equally_is_an_error_naming_both(tmp_path):
    photo = exports.photos(1)[0]
    exports.save(photo, str(tmp_path / "day1"))
    exports.save(photo, str(tmp_path / "day2"))
    (tmp_path / "xml").mkdir()
    (tmp_path / "xml" / (photo.stem + ".xml")).write_text(exports.labelimg_xml(photo, "/home/ana/all"))
    with pytest.raises(DataError, match="matches several images equally"):
        voc_exports.find_export(str(tmp_path)).read()


def test_labelmap_lines_and_subset_files(tmp_path):
    path = tmp_path / "labelmap.txt"
    path.write_text("# label:color_rgb:parts:actions\nbackground:0,0,0::\nCar:1,2,3::\n\nperson:4,5,6::\n")
    assert voc_exports.read_labelmap(str(path)) == ("Car", "person")
    path.write_text(":1,2,3::\n")
    with pytest.raises(DataError, match="labelmap.txt line 1 has no label name"):
        voc_exports.read_labelmap(str(path))
    main = tmp_path / "Main"
    main.mkdir()
    for name in ("train", "val", "cat_train", "cat_val", "hot_dog_train"):
        (main / (name + ".txt")).write_text("")
    assert sorted(voc_exports.subset_files(str(main))) == ["train", "val"]


def test_split_names_by_role_and_an_only_split_of_any_name_trains(tmp_path):
    from detector_training.data.readers import split_names

    exports.cvat_voc(str(tmp_path / "a"), subsets=(("Train", 2), ("val", 1), ("Test", 1)))
    export = voc_exports.find_export(str(tmp_path / "a"))
    assert split_names(export, "train") == ["Train"] and split_names(export, "validation") == ["val"]
    exports.cvat_voc(str(tmp_path / "b"), subsets=(("batch 1", 2),))
    assert split_names(voc_exports.find_export(str(tmp_path / "b")), "train") == ["batch 1"]
    exports.cvat_voc(str(tmp_path / "c"), subsets=(("Validation", 2),))
    only_val = voc_exports.find_export(str(tmp_path / "c"))
    assert split_names(only_val, "train") == [] and split_names(only_val, "validation") == ["Validation"]
