"""console: a secret is masked where it stands whole, and nowhere else."""

from frontend import console, following


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


# TensorFlow's start-up lines from two learner ranks, as mpirun.log has them (captured with TF
# 2.21 on an AVX-512 Xeon: mpirun --tag-output, a session running int32 ops).
TF_STARTUP = """\
[1,0]<stderr>:WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
[1,0]<stderr>:I0000 00:00:1795779133.303895    6853 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
[1,1]<stderr>:I0000 00:00:1795779133.340283    6854 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
[1,1]<stderr>:To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
[1,0]<stderr>:I0000 00:00:1795779135.743417    6853 mlir_graph_optimization_pass.cc:437] MLIR V1 optimization pass is not enabled
[1,1]<stderr>:E0000 00:00:1795779135.753550    6854 util.cc:131] oneDNN supports DT_INT32 only on platforms with AVX-512. Falling back to the default Eigen-based implementation if present.
"""  # noqa: E501
KEPT = """\
[1,0]<stderr>:I1126 21:57:50.604185 140327704569792 progress.py:124] frames 706048 (14.1%)
[1,1]<stderr>:E0000 00:00:1795779135.753550    6854 grpc_server.cc:9] Could not start gRPC server
[1,0]<stderr>:W1126 21:57:51.000001 1403 learner.py:7] [learner rank 0/2] slow: port.cc:1] oneDNN
[1,0]<stdout>:A.L.E: Arcade Learning Environment (version 0.12.1+8a8fafb)
Traceback (most recent call last):
"""


def test_tf_startup_lines_are_told_from_every_other_line_of_the_learners_log():
    assert all(map(console.is_tf_startup_line, TF_STARTUP.splitlines()))
    assert not any(map(console.is_tf_startup_line, KEPT.splitlines()))


def test_the_followed_log_leaves_out_tf_startup_lines_which_stay_in_the_log(tmp_path, capsys):
    log = tmp_path / "mpirun.log"
    printer = following.LogPrinter(str(log), console.Console())
    log.write_text(TF_STARTUP)
    printer()
    assert capsys.readouterr().out == ""
    with log.open("a") as f:
        f.write(TF_STARTUP + KEPT)
    printer()
    out = capsys.readouterr().out
    assert out.splitlines() == [console.short_learner_line(line) for line in KEPT.splitlines()]
    assert log.read_text() == TF_STARTUP + TF_STARTUP + KEPT
