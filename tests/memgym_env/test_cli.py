"""The ``memgym`` command: every command listed, examples under each --help, one-line errors."""

from __future__ import annotations

import pytest

from memgym_env.cli import COMMANDS, build_parser, main


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_help_has_examples(name, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([name, "--help"])
    assert done.value.code == 0
    assert "example" in capsys.readouterr().out.lower()


def test_wrong_arguments_give_one_line_saying_where_to_look(capsys):
    with pytest.raises(SystemExit) as done:
        main(["rollout", "--policy", "nope"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "invalid choice" in err and "memgym rollout --help" in err
