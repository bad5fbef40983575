"""Which benchmarks' own numbers head a job's results (spec/summary.py headline_benchmarks):
the command's headline and the viewer's job page ask the same function."""

from __future__ import annotations

import pytest

from clawrig.spec.summary import headline_benchmarks


@pytest.mark.parametrize(
    ("formats", "shown"),
    [
        (["fourfolder"], set()),
        (["wildclaw"], {"wildclaw"}),
        (["dataclaw", "fourfolder", "wildclaw"], {"dataclaw", "wildclaw"}),
        (["wildclaw", ["nested"], {"a": 1}, 3], {"wildclaw"}),  # malformed entries skipped
        ([], None),  # says nothing: an older summary
        ([1, None], None),
        ("wildclaw", None),
        ({"wildclaw": 1}, None),
        (None, None),
    ],
)
def test_the_formats_a_summary_names(formats, shown):
    assert headline_benchmarks({"formats": formats}) == shown


def test_a_summary_without_formats_does_not_say():
    assert headline_benchmarks({"model": "m"}) is None
