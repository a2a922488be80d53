"""console: a secret is masked where it stands whole, and nowhere else."""

import console


def test_a_secret_is_masked_where_it_stands_whole_not_inside_other_words():
    out = console.Console()
    out.add_secrets(["12345678", "", "pass-word!"])
    text = (
        "--seed=12345678 --total_environment_frames=112345678 port 123456789 "
        "password '12345678' user:12345678@host pass-word!x"
    )
    assert out.mask(text) == (
        "--seed=******** --total_environment_frames=112345678 port 123456789 "
        "password '********' user:********@host ********x"
    )
    assert out.mask(out.mask(text)) == out.mask(text)  # Masking twice changes nothing more.


def test_a_secret_inside_another_is_masked_with_it():
    assert console.mask("a long-secret-1 b", ["long-secret", "long-secret-1"]) == "a ******** b"
    assert console.mask("nothing to hide", []) == "nothing to hide"
