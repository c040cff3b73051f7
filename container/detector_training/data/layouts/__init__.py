"""Readers of labelled data as labelling tools export it, each returning a
:class:`~detector_training.data.labelled.LabelledSet` per split.

``voc_xml`` reads one Pascal VOC annotation (defusedxml, under a size limit); ``voc_exports``
recognises and reads the folder shapes VOC XML comes in (a VOCdevkit tree, CVAT's "Pascal VOC
1.1", labelImg's two, Roboflow's); ``yolo_labels`` reads Ultralytics/Roboflow YOLO text labels;
``images`` finds an annotation's image and reads its size from the file's header. No MXNet, no
image decoding: the data check runs them as they are.
"""
