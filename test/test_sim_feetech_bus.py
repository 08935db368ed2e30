"""The simulated STS3215 bus against LeRobot's own FeetechMotorsBus (lerobot 0.4.4 + scservo_sdk) over a real pty:
ping, read/write, sync read/write, sign-magnitude registers, a bad checksum and a servo that stops answering."""

from __future__ import annotations

import pytest

feetech = pytest.importorskip("lerobot.motors.feetech", reason="LeRobot is installed by make setup")
scs = pytest.importorskip("scservo_sdk")

from lerobot.motors import Motor, MotorNormMode  # noqa: E402

from grounded_planner.sim.feetech import (  # noqa: E402
    INST_READ,
    FeetechBus,
    PtyBusServer,
    Sts3215,
    instruction_packet,
)

NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


@pytest.fixture
def bus_and_host():
    bus = FeetechBus(list(range(1, 7)))
    with PtyBusServer(bus, reply_delay=True) as server:  # answers as late as a real bus's
        host = feetech.FeetechMotorsBus(
            server.port, {n: Motor(i + 1, "sts3215", MotorNormMode.DEGREES) for i, n in enumerate(NAMES)}
        )
        host.connect()  # LeRobot's handshake: ping every id, read the model numbers and firmware versions
        try:
            yield bus, host
        finally:
            if host.is_connected:
                host.disconnect(disable_torque=False)


def test_handshake_ping_and_broadcast_ping_find_six_sts3215(bus_and_host):
    _, host = bus_and_host
    assert [host.ping(n) for n in NAMES] == [777] * 6
    assert host.broadcast_ping() == {i: 777 for i in range(1, 7)}
    assert host.ping(9) is None  # no servo with id 9 on the bus: no status packet


def test_read_write_and_sign_magnitude_registers(bus_and_host):
    bus, host = bus_and_host
    host.write("P_Coefficient", "elbow_flex", 16)
    host.write("Homing_Offset", "wrist_flex", -321)  # sign-magnitude, sign bit 11
    host.write("Goal_Position", "gripper", 1500, normalize=False)
    assert host.read("P_Coefficient", "elbow_flex", normalize=False) == 16
    assert host.read("Homing_Offset", "wrist_flex", normalize=False) == -321
    assert host.read("Goal_Position", "gripper", normalize=False) == 1500
    servo = bus.servos[4]
    assert servo.mem[31] | servo.mem[32] << 8 == 321 | 1 << 11  # bit 11 set on the wire, as the STS3215 keeps it
    assert host.read("Model_Number", "shoulder_pan", normalize=False) == 777
    host.write("Model_Number", "shoulder_pan", 1)  # read-only on the servo: the write is answered, not stored
    assert host.read("Model_Number", "shoulder_pan", normalize=False) == 777


def test_sync_write_then_sync_read_every_servo(bus_and_host):
    bus, host = bus_and_host
    goals = {n: 1000 + 100 * i for i, n in enumerate(NAMES)}
    host.sync_write("Goal_Position", goals, normalize=False)
    assert host.sync_read("Goal_Position", normalize=False) == goals
    with bus.lock:
        for i in range(1, 7):
            bus.servos[i].set_word("Present_Position", -5 * i)  # below zero after a homing offset
    assert host.sync_read("Present_Position", normalize=False) == {n: -5 * (i + 1) for i, n in enumerate(NAMES)}


def test_torque_and_lock_as_lerobot_switches_them(bus_and_host):
    bus, host = bus_and_host
    host.disable_torque()
    assert not any(s.torque_enabled for s in bus.servos.values()) and all(s.mem[55] == 0 for s in bus.servos.values())
    host.enable_torque(["gripper"])
    assert bus.servos[6].torque_enabled and bus.servos[6].mem[55] == 1 and not bus.servos[1].torque_enabled


def test_bad_checksum_gets_no_status_packet(bus_and_host):
    bus, host = bus_and_host
    good = bytearray(instruction_packet(3, INST_READ, [56, 2]))
    bad = bytearray(good)
    bad[-1] ^= 0x5A
    port, ph = host.port_handler, host.packet_handler
    port.writePort(bad)
    port.setPacketTimeout(8)
    _, result, _ = ph.readRx(port, 3, 2)
    assert result == scs.COMM_RX_TIMEOUT and bus.stats.bad_checksums == 1
    assert ph.getTxRxResult(result) == "[TxRxResult] There is no status packet!"
    port.writePort(good)  # the servo was not confused by the bad packet: the next good one is answered
    port.setPacketTimeout(8)
    data, result, error = ph.readRx(port, 3, 2)
    assert result == scs.COMM_SUCCESS and error == 0 and len(data) == 2


def test_unplugged_servo_times_out_with_lerobots_error(bus_and_host):
    bus, host = bus_and_host
    bus.silent.add(2)
    with pytest.raises(ConnectionError, match="There is no status packet"):
        host.read("Present_Position", "shoulder_lift", normalize=False)
    with pytest.raises(ConnectionError, match="There is no status packet"):
        host.sync_read("Present_Position", normalize=False)
    assert host.read("Present_Position", "elbow_flex", normalize=False) == 0  # the others still answer


def test_packets_split_and_glued_on_the_wire_are_answered():
    bus = FeetechBus([1, 2])
    ping1, read2 = instruction_packet(1, 1), instruction_packet(2, INST_READ, [3, 2])
    stream = b"\x00\xff" + ping1 + read2
    answers = b"".join(bus.feed(stream[i : i + 3]) for i in range(0, len(stream), 3))
    assert answers == bytes([0xFF, 0xFF, 1, 2, 0, 0xFC]) + bytes([0xFF, 0xFF, 2, 4, 0, 0x09, 0x03, 0xED])
    assert Sts3215(1).word("Model_Number") == 777


def test_answers_come_after_the_wire_and_adapter_delay_well_inside_lerobots_timeout(bus_and_host):
    """Each answer is held back by what a real bus takes (bytes at 1 Mbps, each servo's Return_Delay_Time, one USB
    frame): a measured round trip is never shorter than that. Only lower bounds are timed (load can only lengthen
    a round trip); the budget check compares the computed delay with LeRobot's own timeout formula."""
    import time
    import types

    from lerobot.motors.feetech.feetech import patch_setPacketTimeout

    from grounded_planner.sim.feetech import (
        ADDR,
        LEROBOT_PACKET_TIMEOUT_S,
        RETURN_DELAY_UNIT_S,
        USB_FRAME_S,
        reply_delay_s,
    )

    bus, host = bus_and_host
    host.configure_motors()  # LeRobot writes Return_Delay_Time 0 (2 us units; the factory's 250 is 500 us)
    started = time.monotonic()
    host.read("Present_Position", "elbow_flex", normalize=False)
    configured = time.monotonic() - started
    assert bus.stats.reply_delay_s >= USB_FRAME_S and configured >= bus.stats.reply_delay_s

    for name in NAMES:  # back to the factory's return delay: a sync read waits for six of them in turn
        host.write("Return_Delay_Time", name, 250)
    started = time.monotonic()
    host.sync_read("Present_Position", normalize=False)
    factory = time.monotonic() - started
    assert bus.stats.reply_delay_s >= 6 * 250 * RETURN_DELAY_UNIT_S + USB_FRAME_S
    assert factory >= bus.stats.reply_delay_s
    assert all(servo.mem[ADDR["Return_Delay_Time"]] == 250 for servo in bus.servos.values())

    # LeRobot 0.4.4's packet timeout for that sync read, from its own patched setPacketTimeout (ms)
    port = types.SimpleNamespace(tx_time_per_byte=1000.0 / 1_000_000 * 10.0, getCurrentTime=lambda: 0.0)
    patch_setPacketTimeout(port, (6 + 2) * 6)
    assert port.packet_timeout / 1000 == pytest.approx(LEROBOT_PACKET_TIMEOUT_S, abs=0.002)
    worst = reply_delay_s(14, 6 * 8, 6 * 254 * RETURN_DELAY_UNIT_S)  # the longest return delay on every servo
    assert worst < port.packet_timeout / 1000 / 5  # a fifth of the budget at most: the rest is the machine's


def test_an_answer_the_host_gave_up_on_is_dropped_not_left_for_its_next_read(bus_and_host):
    """The bus process kept off the CPU past LeRobot's 50 ms (here the servos' lock held, as a loaded machine or the
    physics thread can): LeRobot reports the lost packet, and the late answer is dropped. Written anyway, it would
    wait in the host's input buffer (scservo_sdk 1.0.0's clearPort() flushes output only) and the next read would
    take it for its own: Homing_Offset read back as the Goal_Position asked before, and every read one behind."""
    import threading
    import time

    bus, host = bus_and_host
    host.write("Goal_Position", "elbow_flex", 1500, normalize=False)
    host.write("Homing_Offset", "elbow_flex", -321)
    held, release = threading.Event(), threading.Event()

    def hold_the_servos() -> None:
        with bus.lock:
            held.set()
            release.wait(10.0)

    replies = bus.stats.replies
    holder = threading.Thread(target=hold_the_servos)
    holder.start()
    try:
        assert held.wait(10.0)
        with pytest.raises(ConnectionError, match="There is no status packet"):
            host.read("Goal_Position", "elbow_flex", normalize=False)
        time.sleep(0.1)  # the answer, still to come, is now well past the host's 50 ms
    finally:
        release.set()
        holder.join()
    deadline = time.monotonic() + 10.0
    while bus.stats.late_dropped + bus.stats.replies == replies and time.monotonic() < deadline:
        time.sleep(0.01)  # until the bus has dealt with the late answer
    assert host.read("Homing_Offset", "elbow_flex", normalize=False) == -321
    assert host.read("Goal_Position", "elbow_flex", normalize=False) == 1500
    assert bus.stats.late_dropped == 1


def test_without_reply_delay_answers_are_not_held():
    """PtyBusServer's default (reply_delay off, for bus-level tests that time nothing): nothing is held back."""
    bus = FeetechBus([1])
    with PtyBusServer(bus) as server:
        host = feetech.FeetechMotorsBus(server.port, {"gripper": Motor(1, "sts3215", MotorNormMode.DEGREES)})
        host.connect()
        try:
            assert host.read("Return_Delay_Time", "gripper", normalize=False) == 250
            assert bus.stats.replies >= 1 and bus.stats.reply_delay_s == 0.0
        finally:
            host.disconnect(disable_torque=False)


@pytest.mark.parametrize("reply_delay", [True, False])
def test_the_simulated_arm_answers_as_late_as_a_real_bus(tmp_path, reply_delay):
    """The simulated SO-101 (So101BusSim, what `sim so101-bus` runs) holds each answer back by what a real bus takes,
    as the bus tests' server does: LeRobot's sync read of the six positions never comes back sooner, after
    SOFollower's configure (Return_Delay_Time 0) and at the factory's 250. ``reply_delay=False`` answers at once."""
    import time
    from pathlib import Path

    pytest.importorskip("mujoco")
    from grounded_planner.sim.feetech import RETURN_DELAY_UNIT_S, USB_FRAME_S
    from grounded_planner.sim.so101_bus import So101BusSim

    scenario = Path(__file__).resolve().parents[1] / "config" / "scenarios" / "box_in_bowl_so101.yaml"
    with So101BusSim(scenario, seed=0, calibration_dir=tmp_path, reply_delay=reply_delay) as sim:
        host = feetech.FeetechMotorsBus(
            sim.port, {n: Motor(i + 1, "sts3215", MotorNormMode.DEGREES) for i, n in enumerate(NAMES)}
        )
        host.connect()
        try:
            host.configure_motors()  # as SOFollower.configure(): Return_Delay_Time 0
            started = time.monotonic()
            host.sync_read("Present_Position", normalize=False)
            configured = time.monotonic() - started
            configured_delay = sim.bus.stats.reply_delay_s
            for name in NAMES:
                host.write("Return_Delay_Time", name, 250)
            started = time.monotonic()
            host.sync_read("Present_Position", normalize=False)
            factory = time.monotonic() - started
            factory_delay = sim.bus.stats.reply_delay_s
        finally:
            host.disconnect(disable_torque=False)
    if not reply_delay:
        assert configured_delay == factory_delay == 0.0
        return
    assert configured_delay >= USB_FRAME_S and configured >= configured_delay
    assert factory_delay >= 6 * 250 * RETURN_DELAY_UNIT_S + USB_FRAME_S and factory >= factory_delay


def test_so101_bus_unplug_silences_that_servo_for_a_feetech_client():
    """`sim so101-bus --unplug 3:0.5` (a child process, as LeRobot's tests would start it): seen through scservo_sdk,
    the SDK LeRobot's FeetechMotorsBus drives, servo 3 stops answering its ping half a second after start while the
    others still answer. Default: every servo answers."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("mujoco")
    proc = subprocess.Popen(
        [sys.executable, "-m", "grounded_planner.cli.main", "sim", "so101-bus", "--unplug", "3:0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=30)[1]
        port = scs.PortHandler(json.loads(line)["port"])
        assert port.openPort() and port.setBaudRate(1_000_000)
        packets = scs.PacketHandler(0)
        try:
            deadline = time.monotonic() + 15.0
            while (result := packets.ping(port, 3)[1]) == scs.COMM_SUCCESS and time.monotonic() < deadline:
                time.sleep(0.1)
            assert result == scs.COMM_RX_TIMEOUT, packets.getTxRxResult(result)  # unplugged: no status packet
            assert [packets.ping(port, sid)[:2] for sid in (1, 2, 4, 5, 6)] == [(777, scs.COMM_SUCCESS)] * 5
        finally:
            port.closePort()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["packets"] > 0  # the bus still ends with its report
