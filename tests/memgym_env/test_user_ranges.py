"""One reader of user ranges ("8-15", "0,2,5-7") for configs, policy cards, serve-env and the demo."""

from __future__ import annotations

import pytest

from memgym_env.world.user_ranges import parse_users


def test_ranges_and_lists_keep_their_order():
    assert parse_users("8-15") == list(range(8, 16))
    assert parse_users("0, 2,5-6") == [0, 2, 5, 6]
    assert parse_users("3") == [3] and parse_users(4) == [4]
    assert parse_users("") == []


@pytest.mark.parametrize("spec, message", [("8-x", "'8-x'"), ("-1", "'-1'"), ("8-3", "runs backwards"),
                                           ("1-2-3", "'1-2-3'")])
def test_a_bad_spec_is_named_with_its_setting(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_users(spec, what="held_out_users")
    assert str(err.value).startswith("held_out_users")


def test_serve_env_and_the_trainer_read_users_alike():
    from memgym_env.commands import serve_env
    from train import common

    assert common.parse_users is parse_users and serve_env.parse_users is parse_users
