"""Every ```sh and ```python block of README.md and docs/*.md, run on a temporary
mount (tests/docs/blocks.py; the conventions: docs/doc-tests.md)."""
from __future__ import annotations

import os
import re

import pytest

from tests.docs.blocks import (ROOT, Block, DocError, DocRunner, all_blocks, doc_files, extract,
                               match_output, shape)
from tests.helpers import make_mount_dir

# Blocks that fail because of a bug being fixed elsewhere: (file, a piece of the block's
# text) -> the bug. Remove a row once its fix is in.
XFAIL: dict[tuple[str, str], str] = {
}

BLOCKS = all_blocks()


def _xfail(block: Block) -> str | None:
    for (path, piece), why in XFAIL.items():
        if block.path == path and piece in block.text:
            return why
    return None


@pytest.fixture(scope="module")
def runner():
    r = DocRunner(make_mount_dir())
    try:
        yield r
    finally:
        r.close()                      # unmounts, whatever the blocks did
        try:
            os.rmdir(r.mount)
        except OSError:
            pass


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_doc_block(block: Block, runner: DocRunner):
    if block.not_run:
        pytest.skip(f"not run: {block.not_run}")
    if block.root and os.getuid() != 0:
        pytest.skip("needs root (doc-test: root)")
    why = _xfail(block)
    try:
        runner.run(block)
        return
    except DocError as e:
        error = str(e)
    if why:
        pytest.xfail(f"{why}: {error}")
    pytest.fail(error, pytrace=False)


def test_every_xfail_row_names_a_block():
    for path, piece in XFAIL:
        assert any(b.path == path and piece in b.text for b in BLOCKS), (path, piece)


# ---- the runner itself: it must be able to fail, and say where ---------------------------

def test_shape_keeps_words_and_drops_numbers():
    assert shape("[   12.104227] vgpu ffff:01:00.0: fence 0x7f3035c048b0 pid 4242") == \
        shape("[1012.000001] vgpu ffff:01:00.0: fence 0xdead pid 7")
    assert shape("| 12MiB / 256MiB  |") == shape("|   0MiB / 1024MiB |")
    assert shape("entity=000000008c7591d5, id=1") == shape("entity=0000000003992190, id=22")
    assert shape("Mon Nov 30 13:50:27 2026") == shape("Wed Dec 02 00:04:19 2026")
    assert shape("fence seq 1: signaled") != shape("fence seq 1: timed out")
    assert shape("crw-rw---- 1 root video") != shape("crw-rw-rw- 1 root video")


def test_match_output_lines_in_order_with_gaps():
    assert match_output(["a 1", "...", "PASS"], ["a 2", "x", "y", "PASS"]) is None
    assert match_output(["a 1", "...", "PASS"], ["a 2", "PASS"]) is None
    assert match_output(["a 1", "b 2"], ["a 1", "c 2"]) == "no line of the shape of expected line 2: 'b 2'"
    assert match_output(["a 1"], ["a 1", "extra"]) is not None
    assert match_output(["sdma0   #  ##", "ioctls  -- G"], ["sdma0     ###", "ioctls  G--V"], labels_only=True) is None


def test_markers_parse_and_misplaced_ones_fail(tmp_path):
    md = tmp_path / "m.md"
    md.write_text("<!-- doc-test: not-run needs a real GPU -->\n```sh\nmake demo\n```\n\n"
                  "<!-- doc-test: timeout 5 -->\n<!-- doc-test: mount --partitions 2 -->\n```python\nx = 1\n```\n"
                  "```\nnot a test\n```\n")
    a, b = extract(md)
    assert (a.where, a.lang, a.not_run) == ("m.md:2", "sh", "needs a real GPU")
    assert (b.where, b.timeout, b.mount_args, b.lines) == ("m.md:8", 5.0, ("--partitions", "2"), ["x = 1"])
    for bad in ("<!-- doc-test: not-run -->\n```sh\nls\n```\n", "<!-- doc-test: sometimes -->\n```sh\nls\n```\n",
                "<!-- doc-test: not-run why -->\n\ntext\n"):
        md.write_text(bad)
        with pytest.raises(DocError, match=r"m\.md:1"):
            extract(md)


def test_every_doc_file_parses():
    assert len(doc_files()) > 10 and len(BLOCKS) > 30


FAILING = """# a doc with mistakes

```python
print(undefined_name)
```

```sh
$ vgpu info --mount /tmp/vgpu --no-such-option
```

```sh
$ cat /tmp/vgpu/sys/class/drm/card0/device/vendor
0x1002 (a changed line)
```
"""


def test_a_wrong_block_fails_with_its_file_and_line(tmp_path, runner):
    md = tmp_path / "failing.md"
    md.write_text(FAILING)
    errors = []
    for block in extract(md):
        with pytest.raises(DocError) as e:
            runner.run(block)
        errors.append(str(e.value))
    assert errors[0].startswith("failing.md:3: the python block failed") and "NameError" in errors[0]
    assert 'File "failing.md", line 4' in errors[0]
    assert errors[1].startswith("failing.md:8: `vgpu info --mount /tmp/vgpu --no-such-option` exited 2")
    assert errors[2].startswith("failing.md:12: the output of `cat") and "(a changed line)" in errors[2]


def test_readme_names_the_packages_the_makefile_installs():
    """README's "The two commands" lists DEB_PKGS and PY_PKGS of the Makefile."""
    make = (ROOT / "Makefile").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    for var in ("DEB_PKGS", "PY_PKGS"):
        packages = " ".join(re.search(rf"^{var} := (.*)$", make, re.M).group(1).split())
        assert f"`{packages}`" in readme, f"README.md does not list the Makefile's {var}: {packages}"
