"""The VOC tree: where a devkit is found, and whether a tree is complete."""

import os
import shutil

import pytest

from detector_training.errors import DataError
from detector_training.data.generated.synthetic_voc import generate
from detector_training.data.acquire.voc_tree import check_voc_tree, expected_content, find_devkit, find_year_dirs, short_tar


def test_check_voc_tree(tmp_path):
    generate(str(tmp_path), 4, 2, 2, seed=1)
    expected = expected_content(["VOCtrainval_06-Nov-2007.tar", "VOCtest_06-Nov-2007.tar",
                                 "VOCtrainval_11-May-2012.tar", "custom.tar"])
    assert expected == {2007: {"trainval", "test"}, 2012: {"trainval"}}
    summary, problems = check_voc_tree(str(tmp_path), expected)
    assert problems == []
    assert summary["VOC2007"]["JPEGImages"] == 6 and "test" in summary["VOC2007"]["splits"]
    os.remove(str(tmp_path / "VOCdevkit" / "VOC2007" / "ImageSets" / "Main" / "test.txt"))
    shutil.rmtree(str(tmp_path / "VOCdevkit" / "VOC2012" / "Annotations"))
    _, problems = check_voc_tree(str(tmp_path), expected)
    assert "VOC2007/ImageSets/Main/test.txt is missing" in problems
    assert "VOC2012/Annotations is missing or empty" in problems


@pytest.mark.parametrize("where", ["", "VOCdevkit", "extracted", "extracted/VOCdevkit"])
def test_the_devkit_is_found_at_each_usual_depth(tmp_path, where):
    base = tmp_path / "root"
    generate(str(tmp_path / "gen"), 2, 1, 1, seed=1)
    target = base / where if where else base
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(str(tmp_path / "gen" / "VOCdevkit"), str(target), dirs_exist_ok=True)
    assert find_devkit(str(base), (2007, 2012)) == str(target)
    assert sorted(find_year_dirs(str(base))) == ["VOC2007", "VOC2012"]


def test_symlinked_directories_are_not_followed(tmp_path):
    generate(str(tmp_path / "elsewhere"), 2, 1, 0, seed=1)
    (tmp_path / "root").mkdir()
    os.symlink(str(tmp_path / "elsewhere" / "VOCdevkit"), str(tmp_path / "root" / "VOCdevkit"))
    assert find_year_dirs(str(tmp_path / "root")) == {}
    with pytest.raises(DataError, match="no VOCdevkit with VOC2007 found"):
        find_devkit(str(tmp_path / "root"), (2007,))


def test_a_missing_year_is_named():
    with pytest.raises(DataError, match="VOC2007, VOC2012"):
        find_devkit("/nonexistent", (2007, 2012))
    assert short_tar("VOCtest_06-Nov-2007.tar") == "2007 test" and short_tar("x.tar") == "x.tar"
