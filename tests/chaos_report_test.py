"""bench/chaos.py's report of a frontend that ended the run badly."""

from bench import chaos


class EndedRun:
    """What print_frontend_errors reads of a Run: the frontend's output."""

    def out(self):
        return "\n".join(
            [
                "Run 20261207-223755-4fbfc145: 2 worker sets",
                "[1,1]<stdout>:experiment.py (learner 0): error: --learner_host: port 13328 of "
                "10.196.214.1:13328 is in use ([Errno 98] Address already in use)",
                *(f"[1,0]<stdout>:  traceback line {i}" for i in range(30)),
            ]
        )


def test_the_error_line_is_printed_even_above_the_last_lines(capsys):
    chaos.print_frontend_errors(EndedRun(), last_lines=10)
    printed = capsys.readouterr().out.splitlines()
    assert printed[1] == "the frontend's errors and its last lines:"
    assert "error: --learner_host: port 13328" in printed[2]
    assert printed[3:] == [f"[1,0]<stdout>:  traceback line {i}" for i in range(20, 30)]
    assert not any("Run 2026" in line for line in printed)
