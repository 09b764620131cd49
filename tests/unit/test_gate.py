"""The report channel of the gate and the init, without a container."""

import os
import stat

from gradebox.sandbox.gate import ReportChannel, entry_command, read_report

TOKEN = "0123456789abcdef0123456789abcdef"
SPAWNED = b"[INFO  tini (1)] Spawned child process '/bin/sh' with pid '7'\n"
NORMAL = b"[INFO  tini (1)] Main child exited normally (with status '137')\n"
KILLED = b"[INFO  tini (1)] Main child exited with signal (with signal 'Killed')\n"


def tag(said: str, token: str = TOKEN) -> bytes:
    return f"[gradebox:{token}] {said}\n".encode()


def test_what_the_gate_and_the_init_say():
    r = read_report(tag("exec") + SPAWNED + KILLED, TOKEN)
    assert (r.started, r.start_error, r.signalled) == (True, None, True)
    r = read_report(tag("exec") + SPAWNED + NORMAL, TOKEN)
    assert (r.started, r.signalled) == (True, False)
    r = read_report(tag("error nope: command not found") + SPAWNED, TOKEN)
    assert (r.started, r.start_error) == (False, "nope: command not found")
    assert read_report(b"", TOKEN) == read_report(SPAWNED, TOKEN)  # never released
    assert read_report(b"", TOKEN).started is False


def test_what_a_command_forges_there_makes_no_pass():
    # Without the token a start failure (or a release) is noise; a forged exit line beside
    # the init's own makes the worse outcome.
    forged = tag("error forged", "f" * 32) + tag("exec", "0" * 32) + b"[gradebox] error x\n"
    r = read_report(tag("exec") + forged + NORMAL + KILLED, TOKEN)
    assert (r.started, r.start_error, r.signalled) == (True, None, True)
    r = read_report(forged + SPAWNED + NORMAL, TOKEN)
    assert r.started is False  # the gate never said it released the command: an error
    # Glued to a partial line the command left, the init's report still counts.
    assert read_report(tag("exec") + b"junk" + KILLED, TOKEN).signalled is True


def test_a_second_exit_line_or_a_flood_reads_as_a_signal():
    """A command that can write to the channel (where it is bound) keeps forging 'exited
    normally' while it is SIGKILLed: its lines land before the init's, after it, or glued to
    it. tini says how the command ended once; more than one such line is the command's
    doing, and the report is the worse outcome."""
    for data in (NORMAL + KILLED, KILLED + NORMAL, NORMAL + NORMAL,
                 NORMAL.rstrip(b"\n") + KILLED):  # fmt: skip
        assert read_report(tag("exec") + data, TOKEN).signalled is True, data
    # A flood the channel could not keep whole may have pushed the init's line out.
    assert read_report(tag("exec") + NORMAL, TOKEN, dropped=True).signalled is True
    assert read_report(tag("exec") + NORMAL, TOKEN).signalled is False


def test_the_channel_is_a_write_only_fifo_that_never_blocks_the_writer(tmp_path):
    channel = ReportChannel(tmp_path)
    try:
        mode = os.stat(channel.path).st_mode
        assert stat.S_ISFIFO(mode) and stat.S_IMODE(mode) == 0o222
        assert channel.mount.target == "/dev/gradebox-report" and channel.mount.read_only
        writer = os.open(channel.path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, tag("exec"))
            # A flood is read as it comes and dropped between the head and the tail.
            for _ in range(64):
                os.write(writer, b"x" * 60_000 + b"\n")
                channel.read()
            os.write(writer, KILLED)
        finally:
            os.close(writer)
        assert len(channel.head) + len(channel.tail) <= 128 << 10
        r = channel.report(TOKEN)
        assert (r.started, r.signalled) == (True, True)
        channel.read()  # no writer left but ours: nothing to read, no end of file
    finally:
        channel.close()
    assert not channel.path.exists()


def test_the_entry_becomes_the_init_then_the_gate_then_the_command():
    argv = entry_command(["python3", "g.py"], init=True)
    assert argv[:2] == ["/bin/sh", "-c"] and argv[-2:] == ["python3", "g.py"]
    assert "/sbin/gradebox-init" in argv
    assert "/sbin/gradebox-init" not in entry_command(["true"], init=False)


def test_a_channel_written_as_fast_as_it_is_read_lets_the_caller_check_its_deadline(
    tmp_path, monkeypatch
):
    """The FIFO is writable in the container: a grader's writers that refill it between every
    read of ours held ``read`` in its loop for good, and the pump, which checks the deadline
    between reads, past the grader's timeout. A read now returns after a bounded number of
    reads; a report that finds the channel still flowing reads it as a flood."""
    from gradebox.sandbox import gate

    channel = ReportChannel(tmp_path)
    calls = []

    def endless(fd, n):
        calls.append(n)
        if len(calls) > 10_000:
            raise AssertionError("read never returned to its caller")
        return b"x" * n

    try:
        monkeypatch.setattr(gate.os, "read", endless)
        assert channel.read() is False and len(calls) <= 16
        r = channel.report(TOKEN)
        assert r.signalled is True and channel.dropped
    finally:
        monkeypatch.undo()
        channel.close()
