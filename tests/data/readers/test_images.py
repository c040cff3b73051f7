"""Images for annotations: sizes from headers (no decode), found by name or stem, and every mode
a photo comes in (grey, palette, CMYK, 16-bit) decoded to 3 channels by the training reader."""

import os

import numpy as np
import pytest
from PIL import Image

import oriented
from detector_training.data.readers import images
from detector_training.errors import DataError



def _mode_images(folder):
    """One 40x30 file per mode a real photo comes in, with the colour it should decode to."""
    base = Image.new("RGB", (40, 30), (200, 40, 90))
    grey = int(np.asarray(base.convert("L"))[0, 0])
    made = {"grey.jpg": base.convert("L"), "palette.png": base.convert("P"),
            "cmyk.jpg": base.convert("CMYK"), "rgba.png": base.convert("RGBA"),
            "grey16.png": Image.fromarray(np.full((30, 40), grey * 257, dtype="uint16")),
            "photo.BMP": base}
    colours = {}
    for name, image in made.items():
        image.save(os.path.join(folder, name))
        # Pillow's own RGB of the mode (a palette quantises); 16 bits scale down to 8
        colours[name] = (grey,) * 3 if name == "grey16.png" else image.convert("RGB").getpixel((20, 15))
    return colours


def test_every_mode_is_sized_from_its_header_without_decoding(tmp_path, monkeypatch):
    _mode_images(str(tmp_path))
    monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded %s" % self.mode))
    for name in os.listdir(tmp_path):
        assert images.image_size(str(tmp_path / name)) == (40, 30), name


def test_the_training_reader_decodes_every_mode_to_three_channels_of_8_bits(tmp_path):
    import mxnet as mx

    for name, colour in _mode_images(str(tmp_path)).items():
        pixels = images.decode_nd(str(tmp_path / name), True).asnumpy()  # what the datasets call
        assert pixels.shape == (30, 40, 3) and pixels.dtype == np.uint8, name
        assert np.abs(pixels[15, 20].astype(int) - colour).max() <= 3, (name, pixels[15, 20])


def test_a_broken_image_is_named(tmp_path):
    (tmp_path / "cut.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    with pytest.raises(DataError, match=r"image .*cut.jpg cannot be read"):
        images.image_size(str(tmp_path / "cut.jpg"))


def test_image_bytes_are_sized_from_a_stream_and_named_by_where(tmp_path):
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buffer, "JPEG")
    assert images.image_size(io.BytesIO(buffer.getvalue()), "x.rec record 1") == (40, 30)
    with pytest.raises(DataError, match=r"image x.rec record 2 cannot be read"):
        images.image_size(io.BytesIO(b"not an image"), "x.rec record 2")


def test_a_header_stating_too_many_pixels_is_refused(tmp_path, monkeypatch):
    Image.new("L", (100, 100)).save(tmp_path / "big.png")
    monkeypatch.setattr(images, "MAX_PIXELS", 5000)
    with pytest.raises(DataError, match="100x100"):
        images.image_size(str(tmp_path / "big.png"))


def _touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()
    return str(path)


def test_found_by_name_then_by_stem_with_any_extension(tmp_path):
    jpg = _touch(tmp_path / "images" / "a.jpg")
    upper = _touch(tmp_path / "images" / "b.JPEG")
    _touch(tmp_path / "images" / "notes.txt")
    index = images.ImageIndex(str(tmp_path))
    xml = str(tmp_path / "xml" / "a.xml")
    assert index.find("a.jpg", xml) == jpg
    assert index.find("C:\\Users\\ana\\b.jpg", xml) == upper  # the name only, then its stem
    assert index.find("", str(tmp_path / "xml" / "b.xml")) == upper  # the annotation's stem
    assert index.find("zzz.jpg", str(tmp_path / "xml" / "y.xml")) is None
    assert index.paths == [jpg, upper]
    assert index.named("a.jpg") == [jpg] and index.named("b.jpg") == []
    assert index.stemmed("b") == [upper] and index.stemmed("notes") == []


def test_among_several_the_one_beside_then_the_closest_folders(tmp_path):
    beside = _touch(tmp_path / "train" / "a.jpg")
    _touch(tmp_path / "val" / "a.jpg")
    index = images.ImageIndex(str(tmp_path))
    assert index.find("a.jpg", str(tmp_path / "train" / "a.xml")) == beside
    deeper = _touch(tmp_path / "images" / "train" / "c.jpg")
    _touch(tmp_path / "images" / "val" / "c.jpg")
    index = images.ImageIndex(str(tmp_path))
    assert index.find("c.jpg", str(tmp_path / "xml" / "train" / "c.xml")) == deeper
    with pytest.raises(DataError, match="matches several images equally"):
        index.find("c.jpg", str(tmp_path / "xml" / "c.xml"))


@pytest.mark.parametrize("orientation", oriented.ORIENTATIONS)
def test_each_orientation_tag_is_read_from_the_header_and_decoded_upright(tmp_path, orientation):
    import mxnet as mx

    picture = oriented.upright((64, 48))
    path = oriented.save(str(tmp_path / "phone.jpg"), picture, orientation)
    header = images.read_header(path)
    turns = orientation >= 5
    assert header.orientation == orientation and header.tagged == (orientation != 1)
    assert images.image_size(path) == (64, 48)  # the upright picture's
    assert images.image_size(path, oriented=False) == ((48, 64) if turns else (64, 48))
    assert oriented.same_picture(images.decode(path), picture)
    assert oriented.same_picture(images.decode(path, oriented=False),
                                 oriented.stored(picture, orientation))
    nd = images.decode_nd(path, True)  # what the training and validation readers return
    assert isinstance(nd, mx.nd.NDArray) and nd.dtype == np.uint8
    assert oriented.same_picture(nd.asnumpy(), picture)


def test_a_tag_is_read_from_a_header_without_decoding(tmp_path, monkeypatch):
    path = oriented.save(str(tmp_path / "phone.png"), oriented.upright((40, 30)), 6)
    monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded %s" % self.mode))
    assert images.read_header(path) == images.Header(30, 40, 6)
    assert images.image_size(path) == (40, 30)


def test_a_tag_outside_1_to_8_is_none(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 9
    Image.new("RGB", (40, 30)).save(tmp_path / "odd.jpg", exif=exif.tobytes())
    assert images.read_header(str(tmp_path / "odd.jpg")) == images.Header(40, 30, 1)
    assert images.decode(str(tmp_path / "odd.jpg")).shape == (30, 40, 3)


def test_the_frames_a_format_declares(tmp_path):
    turned, mirrored = images.Header(40, 30, 6), images.Header(40, 30, 2)
    assert images.Frame.ORIENTED.oriented(turned) is True
    assert images.Frame.STORED.oriented(turned) is False
    assert images.Frame.BY_SIZE.oriented(turned, (30, 40)) is True
    assert images.Frame.BY_SIZE.oriented(turned, (40.0, 30.0)) is False
    assert images.Frame.BY_SIZE.oriented(turned, (50, 50)) is None  # neither: undecided
    assert images.Frame.BY_SIZE.oriented(mirrored, (40, 30)) is None  # both: undecided
    assert images.Frame.BY_SIZE.oriented(images.Header(40, 30)) is True  # no tag: the same
    assert images.Frame.BY_SIZE.oriented() is None


def test_an_image_of_a_format_the_decoder_does_not_read_is_refused_by_its_header(tmp_path):
    Image.new("RGB", (40, 30)).save(tmp_path / "anim.jpg", "GIF")  # a GIF under a JPEG's name
    with pytest.raises(DataError, match=r"image .*anim.jpg cannot be read"):
        images.image_size(str(tmp_path / "anim.jpg"))
    with pytest.raises(images.UnreadableImage, match="not an image"):
        images.decode(str(tmp_path / "anim.jpg"))
