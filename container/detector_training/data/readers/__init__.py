"""Readers of labelled data as labelling tools and systems export it, each returning a
:class:`~detector_training.data.labelled.LabelledSet` per split.

``voc_xml`` reads one Pascal VOC annotation (defusedxml, under a size limit); ``voc_exports``
recognises and reads the folder shapes VOC XML comes in (a VOCdevkit tree, CVAT's "Pascal VOC
1.1", labelImg's two, Roboflow's); ``yolo_labels`` reads Ultralytics/Roboflow YOLO text labels;
``images`` finds an annotation's image, reads its size and EXIF orientation tag from the file's
header, and is the one decoder of every reader, ``serve`` and ``detector-predict``;
``builtin_json`` and ``builtin_recordio`` read the SageMaker built-in algorithm's inputs,
``coco_exports`` the COCO exports of CVAT, Roboflow and Label Studio, ``coco_format`` COCO JSON in
the layout GluonCV reads, ``manifest`` Ground Truth manifests. Recognising and reading
labels need no MXNet and decode no image, so the data check runs them as they are (only the
training readers decode, through ``images.decode``). ``split_names`` says which of an
export's splits train and which validate.
"""


def split_names(export, role):
    """The names of an export's splits that serve ``role`` ("train", "validation"): those of that
    role (``valid`` and ``val`` are validation), and for "train" the export's only split when its
    name gives no role (a CVAT subset called "batch 1"). [] when none."""
    roles = export.roles()
    if roles.get(role):
        return list(roles[role])
    if role == "train" and len(export.splits) == 1 and not set(roles) & {"validation", "test"}:
        return list(export.splits)
    return []
