"""bench/tile_sweep.py: the pieces that need no GPU (file stems, tile changes)."""

import pytest

from script_loader import BENCH, load_script

tile_sweep = load_script(BENCH / "tile_sweep.py", "tile_sweep")


def test_two_models_kernels_of_one_name_get_their_own_files():
    resnet = tile_sweep.case_stem("corpus:resnet50", "1", "matmul")
    inception = tile_sweep.case_stem("corpus:inception_v3", "1", "matmul")
    assert resnet == "corpus_resnet50_matmul_b1" and inception == "corpus_inception_v3_matmul_b1"


def test_a_tile_change_parses_its_fields_together():
    assert tile_sweep._tile_change("thread_rows=16,micro_cols=8,prefetch=true") == \
        {"thread_rows": 16, "micro_cols": 8, "prefetch": True}
    with pytest.raises(SystemExit, match="expected FIELD=VALUE"):
        tile_sweep._tile_change("no_such_field=1")
