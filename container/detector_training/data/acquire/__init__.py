"""Acquiring data: the bytes of a channel, S3 or HTTP, verified (``sources``); the Pascal VOC
fetch (``voc_fetch``) and the VOC tars and VOCdevkit tree it leaves (``voc_tree``); work done
once per host (``host_once``); SageMaker Pipe mode's FIFOs copied to files (``pipe_mode``)."""
