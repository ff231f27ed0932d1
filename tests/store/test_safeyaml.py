"""The bounded YAML loader: safe values only, and refusals before anything is built."""

from __future__ import annotations

import pytest
import yaml

from store.limits import MAX_YAML_DEPTH, MAX_YAML_VALUES
from store.safeyaml import YamlTooLarge, load_yaml


def anchors(levels: int, each: int = 10) -> str:
    """A mapping of anchors nested `levels` deep, `each` aliases apiece: each**levels values."""
    lines = [f"a0: &a0 [{', '.join(['x'] * each)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * each) + "]")
    return "\n".join(lines) + "\n"


def refusal(text: str) -> str:
    with pytest.raises(YamlTooLarge) as caught:
        load_yaml(text)
    return str(caught.value.problem)


def test_plain_yaml_loads_as_safe_load_reads_it() -> None:
    text = "name: a\nlist: [1, 2.5, true, null]\nwhen: 2024-01-02\nnested: {k: [v]}\n"
    assert load_yaml(text) == yaml.safe_load(text)


def test_aliases_that_repeat_a_little_load_and_share_their_value() -> None:
    loaded = load_yaml("hosts: &hosts [a, b]\nmirrors: *hosts\n")
    assert loaded == {"hosts": ["a", "b"], "mirrors": ["a", "b"]}


def test_python_tags_stay_refused() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("x: !!python/object/apply:os.system ['true']\n")


@pytest.mark.parametrize("levels", [4, 6, 9, 30])
def test_anchors_that_multiply_past_the_bound_are_refused_naming_it(levels: int) -> None:
    problem = refusal(anchors(levels))
    assert problem == f"with its aliases written out it holds more than {MAX_YAML_VALUES:,} values"


def test_the_bound_counts_values_with_aliases_written_out_at_exactly_the_limit() -> None:
    # 10,000 values: a mapping, its key, a list and 9,997 scalars in it; one more is refused.
    at_limit = "k: [" + ", ".join(["x"] * (MAX_YAML_VALUES - 3)) + "]\n"
    assert len(load_yaml(at_limit)["k"]) == MAX_YAML_VALUES - 3
    over = "k: &k [" + ", ".join(["x"] * (MAX_YAML_VALUES - 2)) + "]\n"
    assert "more than" in refusal(over)
    shared = "k: &k [" + ", ".join(["x"] * 4998) + "]\nj: *k\n"  # 1 + 2 + 4999 * 2 = 10,001
    assert "more than" in refusal(shared)


def test_an_alias_inside_its_own_anchor_is_refused_not_built() -> None:
    assert refusal("tree: &tree {child: [*tree]}\n") == (
        "the alias *tree repeats the value it stands in, endlessly"
    )
    assert "endlessly" in refusal("- &loop [a, *loop]\n")


def test_nesting_past_the_depth_is_refused_written_or_through_aliases() -> None:
    assert refusal("[" * 500 + "]" * 500) == f"it nests deeper than {MAX_YAML_DEPTH} levels"
    deep = "d0: &d0 " + "[" * 20 + "x" + "]" * 20 + "\nd1: " + "[" * 20 + "*d0" + "]" * 20
    assert refusal(deep) == (
        f"with its aliases written out it nests deeper than {MAX_YAML_DEPTH} levels"
    )
    exactly = "[" * (MAX_YAML_DEPTH - 1) + "x" + "]" * (MAX_YAML_DEPTH - 1)
    assert load_yaml(exactly) is not None


def test_a_refusal_is_a_yaml_error_marked_where_the_value_starts() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        load_yaml(anchors(9))
    assert isinstance(caught.value, yaml.MarkedYAMLError)
    assert caught.value.problem_mark is not None
    assert caught.value.problem_mark.line == 3  # a3 is the first to hold over 10,000 values
