"""The Pascal VOC tars and VOCdevkit tree, in one place: the three tars, what each leaves in the tree,
where a ``VOCdevkit`` is found under a directory, and whether a tree is complete.

Used by the fetch (to place and check what it extracted) and by the dataset readers (to find the
devkit in a channel or a fetched directory).
"""

import os
import re

from detector_training.errors import DataError

# The three Pascal VOC tars, their SHA-1s (REFERENCE.md section 4), what each leaves in the tree
# (year, split files under ImageSets/Main) and their sizes in MB (to fetch the largest first).
VOC_TARS = (
    ("VOCtrainval_06-Nov-2007.tar", "34ed68851bce2a36e2a223fa52c661d592c66b3c"),
    ("VOCtest_06-Nov-2007.tar", "41a8d6e12baa5ab18ee7f8f8029b9e11805b4ef1"),
    ("VOCtrainval_11-May-2012.tar", "4e443f8a2eca6b1dac8a6c57641b67dd40621a49"),
)
VOC_TAR_CONTENT = {
    "VOCtrainval_06-Nov-2007.tar": (2007, ("trainval",)),
    "VOCtest_06-Nov-2007.tar": (2007, ("test",)),
    "VOCtrainval_11-May-2012.tar": (2012, ("trainval",)),
}
VOC_TAR_MB = {"VOCtrainval_06-Nov-2007.tar": 439, "VOCtest_06-Nov-2007.tar": 430,
              "VOCtrainval_11-May-2012.tar": 1900}
_YEAR_DIR = re.compile(r"VOC\d{4}")


def expected_content(tar_names):
    """{year: set of split names} the extracted tree must hold, from the VOC tars among the names."""
    expected = {}
    for name in tar_names:
        if name in VOC_TAR_CONTENT:
            year, splits = VOC_TAR_CONTENT[name]
            expected.setdefault(year, set()).update(splits)
    return expected


def short_tar(name):
    """'VOCtrainval_06-Nov-2007.tar' -> '2007 trainval' for messages; other names unchanged."""
    if name in VOC_TAR_CONTENT:
        year, splits = VOC_TAR_CONTENT[name]
        return "%d %s" % (year, splits[0])
    return name


def _real_dir(path):
    return os.path.isdir(path) and not os.path.islink(path)


def _candidates(root):
    """Where a devkit may be: root, root/VOCdevkit, root/*, root/*/VOCdevkit (links not followed)."""
    found = [root, os.path.join(root, "VOCdevkit")]
    if _real_dir(root):
        for entry in sorted(os.listdir(root)):
            if _real_dir(os.path.join(root, entry)):
                found += [os.path.join(root, entry), os.path.join(root, entry, "VOCdevkit")]
    return [c for c in found if _real_dir(c)]


def _year_names(directory):
    return sorted(e for e in os.listdir(directory)
                  if _YEAR_DIR.fullmatch(e) and _real_dir(os.path.join(directory, e)))


def find_year_dirs(root):
    """{'VOC2007': path, ...} in the first place under ``root`` that holds VOC<year> directories."""
    for candidate in _candidates(root):
        names = _year_names(candidate)
        if names:
            return {name: os.path.join(candidate, name) for name in names}
    return {}


def find_devkit(root, years=()):
    """The directory under ``root`` holding VOC<year> folders for every year in ``years``."""
    for candidate in _candidates(root):
        names = _year_names(candidate)
        if names and all("VOC%d" % y in names for y in years):
            return candidate
    raise DataError(
        "no VOCdevkit with %s found under %s." % (", ".join("VOC%d" % y for y in years) or "VOC<year>", root),
        "provide the VOC tars or an extracted VOCdevkit in the 'voc' channel, or adjust train_splits/val_splits.",
    )


def _count_files(path):
    try:
        with os.scandir(path) as entries:
            return sum(1 for e in entries if e.is_file(follow_symlinks=False))
    except OSError:
        return 0


def check_voc_tree(root, expected):
    """Summarise ``root/VOCdevkit`` and list what is wrong with it.

    Returns (summary, problems): summary is {'VOC2007': {'Annotations': n, 'JPEGImages': m,
    'splits': [...]}} and problems a list of sentences (empty when the tree is usable).
    ``expected`` is {year: splits} (see :func:`expected_content`).
    """
    devkit = os.path.join(root, "VOCdevkit")
    years = _year_names(devkit) if _real_dir(devkit) else []
    summary, problems = {}, []
    if not years:
        problems.append("%s holds no VOC<year> directory" % devkit)
    for year in sorted(expected):
        if "VOC%d" % year not in years:
            problems.append("VOC%d is missing" % year)
    for name in years:
        base = os.path.join(devkit, name)
        main = os.path.join(base, "ImageSets", "Main")
        splits = sorted(f[:-4] for f in os.listdir(main) if f.endswith(".txt")) if _real_dir(main) else []
        info = {"Annotations": _count_files(os.path.join(base, "Annotations")),
                "JPEGImages": _count_files(os.path.join(base, "JPEGImages")), "splits": splits}
        summary[name] = info
        for sub in ("Annotations", "JPEGImages"):
            if not info[sub]:
                problems.append("%s/%s is missing or empty" % (name, sub))
        if not splits:
            problems.append("%s/ImageSets/Main has no split files" % name)
        for split in sorted(expected.get(int(name[3:]), ())):
            if split not in splits:
                problems.append("%s/ImageSets/Main/%s.txt is missing" % (name, split))
    return summary, problems
