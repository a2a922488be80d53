"""console: a secret is masked where it stands whole, and nowhere else."""

from frontend import console


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


def test_a_learner_line_keeps_its_rank_and_time_and_a_warnings_letter():
    header = "I1126 21:57:50.604185 140327704569792 progress.py:124]"
    message = "frames 706048 (14.1%) | 852 frames/s | return -20.35 | entropy 99% | lag 12.5"
    assert console.short_learner_line(f"[1,0]<stdout>:{header} {message}") == (
        f"[learner 0 21:57:50] {message}"
    )
    # absl pads short thread ids; stderr's lines too, with their severity.
    warning = "[1,12]<stderr>:W1126 01:02:03.000001  4242 learner.py:7] [learner rank 12/16] slow"
    assert console.short_learner_line(warning) == (
        "[learner 12 01:02:03 W] [learner rank 12/16] slow"
    )
    assert console.short_learner_line("[1,1]<stderr>:E1126 01:02:03.5 7 x.py:1] boom") == (
        "[learner 1 01:02:03 E] boom"
    )


def test_other_lines_of_the_learners_log_are_left_as_they_are():
    for line in (
        "[1,0]<stdout>:A.L.E: Arcade Learning Environment (version 0.12.1+8a8fafb)",
        # TF's C++ logging: not absl's header.
        "[1,0]<stderr>:I0000 00:00:1795734820.081251   28673 cpu_feature_guard.cc:227] AVX2",
        "I1126 21:57:50.604185 140327704569792 progress.py:124] frames 1 (no mpirun prefix)",
        '  File "learner.py", line 3, in run',
        "",
    ):
        assert console.short_learner_line(line) == line
