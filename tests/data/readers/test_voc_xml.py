"""One Pascal VOC annotation: what each tool writes is read, and a broken or hostile file is the
project's DataError naming the file, the line and the fix."""

import os

import pytest

import exports
from detector_training.data.readers import voc_xml
from detector_training.errors import DataError


def _read(tmp_path, text, name="a.xml", one_based=True):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return voc_xml.read_annotation(str(path), one_based)


def test_labelimg_annotation_gives_0_based_corners_and_keeps_the_path_unused(tmp_path):
    photo = exports.photos(1, grey=(0,))[0]
    annotation = _read(tmp_path, exports.labelimg_xml(photo, "/data/images"))
    assert annotation.filename == photo.name and annotation.folder == "images"
    assert annotation.size == photo.image.size and annotation.depth == 1
    got = [(b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in annotation.objects]
    assert got == [(n, float(max(0, x0)), float(max(0, y0)), float(x1), float(y1))
                   for n, x0, y0, x1, y1 in photo.objects]
    assert annotation.objects[-1].where == "%s object %d" % (tmp_path / "a.xml", len(photo.objects))


def test_cvat_decimals_nested_source_annotation_and_roboflow_corner_order(tmp_path):
    photo = exports.photos(1, seed=3)[0]
    cvat = _read(tmp_path, exports.cvat_xml(photo), "cvat.xml", one_based=False)
    name, x0, y0, x1, y1 = photo.objects[0]
    first = cvat.objects[0]
    assert (first.xmin, first.ymin, first.xmax) == pytest.approx((x0 + 0.35, y0, x1 - 0.35))
    assert len(cvat.objects) == len(photo.objects)  # <source><annotation> is not an object
    roboflow = _read(tmp_path, exports.roboflow_xml(photo), "rf.xml")
    assert [(b.xmin, b.ymin, b.xmax, b.ymax) for b in roboflow.objects][0] == (x0, y0, x1, y1)


@pytest.mark.parametrize("size, expected", [("<width>0</width><height>0</height>", None),
                                            ("<width>640</width>", None),
                                            ("<width>12.0</width><height>x</height>", None),
                                            ("<width>640.0</width><height>480</height>", (640.0, 480.0))])
def test_a_missing_or_zero_size_is_unknown_not_an_error(tmp_path, size, expected):
    annotation = _read(tmp_path, "<annotation><filename>a.jpg</filename><size>%s</size>"
                                 "</annotation>" % size)
    assert annotation.size == expected and annotation.objects == []


def _box_xml(xmin="10", extra=""):
    return ("<annotation>\n<filename>a.jpg</filename>\n<object>\n<name>cat</name>\n%s<bndbox>\n"
            "<xmin>%s</xmin>\n<ymin>5</ymin>\n<xmax>40</xmax>\n<ymax>30</ymax>\n</bndbox>\n"
            "</object>\n</annotation>\n" % (extra, xmin))


def test_a_word_where_a_coordinate_should_be_names_file_line_and_value(tmp_path):
    with pytest.raises(DataError) as caught:
        _read(tmp_path, _box_xml(xmin="left"))
    text = str(caught.value)
    assert "a.xml line 6: <xmin> of object 'cat' is 'left', not a number" in text
    assert "Fix: re-export it" in text


@pytest.mark.parametrize("value", ["nan", "inf", ""])
def test_non_finite_or_empty_coordinates_are_refused(tmp_path, value):
    with pytest.raises(DataError, match="not a number"):
        _read(tmp_path, _box_xml(xmin=value))


def test_a_truncated_file_names_the_line_and_column_where_it_ends(tmp_path):
    text = _box_xml()[:60]
    with pytest.raises(DataError) as caught:
        _read(tmp_path, text)
    assert "a.xml line %d" % (text.count("\n") + 1) in str(caught.value)
    assert "not well-formed XML" in str(caught.value)


BOMB = ('<?xml version="1.0"?>\n<!DOCTYPE annotation [\n <!ENTITY a "aaaaaaaaaa">\n'
        ' <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">\n'
        ' <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">\n]>\n<annotation><filename>&d;</filename>'
        '</annotation>\n')


@pytest.mark.parametrize("text", [BOMB, '<?xml version="1.0"?>\n<!DOCTYPE annotation SYSTEM '
                                         '"file:///etc/passwd">\n<annotation/>\n'])
def test_an_entity_bomb_or_external_dtd_is_refused_at_its_doctype_line(tmp_path, text):
    with pytest.raises(DataError) as caught:
        _read(tmp_path, text)
    assert "a.xml line 2 declares a DTD or entities" in str(caught.value)
    assert "remove the <!DOCTYPE" in str(caught.value)


def test_an_object_without_a_box_or_a_corner_is_named(tmp_path):
    with pytest.raises(DataError, match=r"a.xml line 2: object 'cat' has no <bndbox>"):
        _read(tmp_path, "<annotation>\n<object><name>cat</name></object></annotation>")
    with pytest.raises(DataError, match=r"has no <ymax>"):
        _read(tmp_path, _box_xml().replace("<ymax>30</ymax>\n", ""))
    with pytest.raises(DataError, match=r"an <object> without a <name>"):
        _read(tmp_path, "<annotation><object><bndbox/></object></annotation>")


def test_an_xml_that_is_not_a_voc_annotation_says_its_root(tmp_path):
    with pytest.raises(DataError, match=r"root element is <annotations>"):
        _read(tmp_path, "<annotations><version>1.1</version></annotations>")


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setattr(voc_xml, "MAX_BYTES", 64)
    with pytest.raises(DataError, match="larger than"):
        _read(tmp_path, _box_xml())


def test_difficult_flag_is_read(tmp_path):
    annotation = _read(tmp_path, _box_xml(extra="<difficult>1</difficult>\n"))
    assert annotation.objects[0].difficult
    assert not _read(tmp_path, _box_xml(extra="<difficult>0</difficult>\n")).objects[0].difficult


# One object as CVAT's "Pascal VOC 1.1" export writes it (datumaro's VOC exporter,
# datumaro/plugins/voc_format/converter.py: xmin = x, ymin = y, xmax = x + w, ymax = y + h of the
# box CVAT shows at x 40.5, y 12.25, width 100, height 50.75; str(float); an empty <depth>).
# CVAT's "Pascal VOC 1.1" annotation as its exporter writes it (tests/samples/README.md names the
# source; tests/data/test_tool_samples.py checks the fixture against it).
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "samples", "cvat_voc_1_1", "Annotations", "frame_0001.xml")) as _handle:
    CVAT_SAMPLE = _handle.read()


def test_a_cvat_box_is_read_at_the_pixel_edges_cvat_shows_and_voc_s_one_based_ones_less_one(tmp_path):
    box = _read(tmp_path, CVAT_SAMPLE, "cvat.xml", one_based=False).objects[0]
    assert (box.xmin, box.ymin, box.xmax, box.ymax) == (40.5, 12.25, 140.5, 63.0)
    voc = _read(tmp_path, CVAT_SAMPLE.replace("40.5", "41").replace("140.5", "141"), "voc.xml")
    voc = voc.objects[0]
    assert (voc.xmin, voc.xmax) == (40.0, 140.0)  # the official VOC's 1-based indices, less 1


def test_the_cvat_fixture_writes_what_the_sample_shows(tmp_path):
    """tests/exports.py's CVAT writer, checked against the sample above: the same elements in the
    same order, the same empty <depth>, corners as plain floats."""
    import re

    photo = exports.photos(1, seed=3)[0]
    written = exports.cvat_xml(photo)
    tags = lambda text: re.findall(r"<(/?[a-z_]+)>", text)
    head = lambda text: tags(text)[:tags(text).index("object")]
    assert head(written) == head(CVAT_SAMPLE)
    one_object = lambda text: tags(text)[tags(text).index("object"):tags(text).index("/object") + 1]
    assert one_object(written) == one_object(CVAT_SAMPLE)
    assert "<depth></depth>" in written
