"""Every training and fitting command prints its help: the data cards tell users to run them."""

import importlib

import pytest

COMMANDS = ["base_copy", "doubt_cut", "fit", "fit_router", "fit_spans", "shrink", "train", "train_router", "train_spans"]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints_every_option(name, capsys):
    module = importlib.import_module(f"crag_lab.learned.{name}")
    with pytest.raises(SystemExit) as stopped:
        module.main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:")
    assert "--train-dir" in out or "--base" in out or "--texts" in out or "--rank" in out or "--reader" in out


def test_router_help_names_the_chat_typing_share(capsys):
    from crag_lab.learned import router_data, train_router

    with pytest.raises(SystemExit):
        train_router.main(["--help"])
    assert f"{router_data.CASUAL_SHARE * 100:.0f} % of the token reader" in " ".join(capsys.readouterr().out.split())
