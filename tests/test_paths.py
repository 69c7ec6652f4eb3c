"""vgpu.paths: the one device-path rule (a mount point, or a node under it)."""
from vgpu.paths import mount_point, node_path


def test_a_mount_point_and_its_nodes_name_the_same_device(tmp_path):
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    for node in ("renderD128", "card0"):
        (tmp_path / "dev" / "dri" / node).touch()
    assert node_path(tmp_path) == tmp_path / "dev" / "dri" / "renderD128"
    assert node_path(tmp_path / "dev" / "dri" / "card0") == tmp_path / "dev" / "dri" / "card0"
    for name in (tmp_path, tmp_path / "dev" / "dri" / "renderD128", tmp_path / "dev" / "dri" / "card0"):
        assert mount_point(name) == tmp_path
