"""Feetech STS3215 servos in software: their control tables and the STS serial protocol behind a pseudo-terminal.

What a host sees on the pty is what it sees on a Waveshare/Feetech bus adapter with STS3215 servos attached
(protocol 0, little-endian words, as ``scservo_sdk`` / feetech-servo-sdk 1.0 and LeRobot 0.4.4's
``FeetechMotorsBus`` speak it):

* instruction packet ``FF FF id len inst params... chk``, ``len = len(params) + 2``,
  ``chk = ~(id + len + inst + sum(params)) & 0xFF``; status packet ``FF FF id len err params... chk``.
* PING (1), READ (2), WRITE (3), REG_WRITE (4) / ACTION (5), SYNC_READ (0x82: every listed servo answers in
  turn with its own status packet), SYNC_WRITE (0x83: no answer). The broadcast id 0xFE never gets an answer.
* A packet whose checksum does not add up is discarded without an answer (the status error byte has no
  checksum bit in STS firmware; scservo_sdk's ERRBIT_* are voltage 1, angle 2, overheat 4, overcurrent 8,
  overload 32), so the host times out: "There is no status packet!".
* Words at the addresses LeRobot's ``STS_SMS_SERIES_ENCODINGS_TABLE`` names are sign-magnitude (bit 15 for
  positions and speeds, bit 11 for Homing_Offset, bit 10 for load). ``Present_Position = actual -
  Homing_Offset``; goals are clamped to [Min_Position_Limit, Max_Position_Limit] (both 0 = multi-turn, no
  clamp); Torque_Enable 0 lets the joint go limp. Lock only guards EEPROM persistence on a real servo (writes
  still take effect), so it is stored and otherwise ignored here.
* Answers come late by what the wire and the adapter take, deterministically (:func:`reply_delay_s`): the
  instruction's and the answers' bytes at 1 Mbps (10 us a byte, scservo_sdk's ``tx_time_per_byte``), each answering
  servo's ``Return_Delay_Time`` (2 us a unit: 500 us at the factory's 250, 0 once LeRobot's ``configure_motors()``
  wrote 0) and one USB full-speed frame (1 ms: the adapter's CH340/CH343 passes bytes on per frame). That is 1-5 ms
  a transaction, far inside LeRobot 0.4.4's budget: its patched ``setPacketTimeout`` gives a read or a sync read
  ``tx_time_per_byte * (length + 3) + 50`` ms, its broadcast ping about 790 ms. A sync read of six servos is one
  answer of six status packets after one summed delay, not six waits. ``PtyBusServer(bus, reply_delay=True)`` holds
  each answer that long from when its request was read, holding no lock (the simulated arm, so101_bus.py, and
  the bus tests run with it).
* An answer this process could only send after the host's timeout (it was kept off the CPU: a loaded machine) is
  dropped, as a lost packet. A real bus is never that late, and scservo_sdk 1.0.0 (``clearPort()`` flushes output,
  not input) would read a late answer as the answer to its next request, and stay one behind from then on.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import tty
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

INST_PING, INST_READ, INST_WRITE, INST_REG_WRITE, INST_ACTION = 1, 2, 3, 4, 5
INST_SYNC_READ, INST_SYNC_WRITE = 0x82, 0x83
BROADCAST_ID = 0xFE
STS3215_MODEL_NUMBER = 777  # LeRobot's MODEL_NUMBER_TABLE["sts3215"]
RESOLUTION = 4096  # encoder steps per turn

BYTE_TIME_S = 10e-6  # one byte (start, 8 data, stop bits) at 1 Mbps: scservo_sdk's tx_time_per_byte
RETURN_DELAY_UNIT_S = 2e-6  # one unit of the Return_Delay_Time register (STS3215 manual)
USB_FRAME_S = 1e-3  # a USB full-speed frame: the bus adapter hands bytes to the host once a frame
#: LeRobot 0.4.4's packet timeout for a read or sync read, s (patch_setPacketTimeout: bytes + 50 ms)
LEROBOT_PACKET_TIMEOUT_S = 0.050
#: LeRobot 0.4.4's wait for a broadcast ping's answers, s (FeetechMotorsBus._broadcast_ping: 6 bytes for each of
#: scservo_sdk's MAX_ID 252 ids at 10 us, + 3 ms per id + 16 ms)
LEROBOT_BROADCAST_PING_TIMEOUT_S = (6 * 252 * 0.010 + 3.0 * 252 + 16.0) / 1000

ERRBIT_VOLTAGE, ERRBIT_ANGLE, ERRBIT_OVERHEAT, ERRBIT_OVERELE, ERRBIT_OVERLOAD = 1, 2, 4, 8, 32

# control table addresses (LeRobot 0.4.4 motors/feetech/tables.py, STS_SMS_SERIES_CONTROL_TABLE)
ADDR = {
    "Firmware_Major_Version": 0,
    "Firmware_Minor_Version": 1,
    "Model_Number": 3,
    "ID": 5,
    "Baud_Rate": 6,
    "Return_Delay_Time": 7,
    "Response_Status_Level": 8,
    "Min_Position_Limit": 9,
    "Max_Position_Limit": 11,
    "Max_Temperature_Limit": 13,
    "Max_Voltage_Limit": 14,
    "Min_Voltage_Limit": 15,
    "Max_Torque_Limit": 16,
    "P_Coefficient": 21,
    "D_Coefficient": 22,
    "I_Coefficient": 23,
    "Protection_Current": 28,
    "Homing_Offset": 31,
    "Operating_Mode": 33,
    "Overload_Torque": 36,
    "Torque_Enable": 40,
    "Acceleration": 41,
    "Goal_Position": 42,
    "Goal_Time": 44,
    "Goal_Velocity": 46,
    "Torque_Limit": 48,
    "Lock": 55,
    "Present_Position": 56,
    "Present_Velocity": 58,
    "Present_Load": 60,
    "Present_Voltage": 62,
    "Present_Temperature": 63,
    "Status": 65,
    "Moving": 66,
    "Present_Current": 69,
    "Maximum_Acceleration": 85,
}
# the host cannot write these (the servo keeps its own values)
READ_ONLY = range(ADDR["Present_Position"], ADDR["Present_Current"] + 2)
SIGN_BITS = {
    ADDR["Homing_Offset"]: 11,
    ADDR["Goal_Position"]: 15,
    ADDR["Goal_Velocity"]: 15,
    ADDR["Present_Position"]: 15,
    ADDR["Present_Velocity"]: 15,
    ADDR["Present_Load"]: 10,
}


def checksum(body: bytes | bytearray | list[int]) -> int:
    """The STS checksum of a packet without its two header bytes and the checksum itself."""
    return ~sum(body) & 0xFF


def encode_sign_magnitude(value: int, sign_bit: int) -> int:
    return (-value | (1 << sign_bit)) if value < 0 else value


def decode_sign_magnitude(raw: int, sign_bit: int) -> int:
    return -(raw & ~(1 << sign_bit)) if raw & (1 << sign_bit) else raw


def instruction_packet(servo_id: int, instruction: int, params: list[int] | bytes = ()) -> bytes:
    """An instruction packet as scservo_sdk's ``txPacket`` builds it."""
    body = [servo_id, len(params) + 2, instruction, *params]
    return bytes([0xFF, 0xFF, *body, checksum(body)])


def status_packet(servo_id: int, error: int, params: list[int] | bytes = ()) -> bytes:
    body = [servo_id, len(params) + 2, error, *params]
    return bytes([0xFF, 0xFF, *body, checksum(body)])


class Sts3215:
    """One STS3215's memory (256 bytes: EEPROM then SRAM) with the factory defaults of a servo that LeRobot's
    ``lerobot-setup-motors`` has given its id (baud rate 1 Mbps)."""

    def __init__(self, servo_id: int):
        self.mem = bytearray(256)
        self.mem[ADDR["Firmware_Major_Version"]], self.mem[ADDR["Firmware_Minor_Version"]] = 3, 10
        self.set_word("Model_Number", STS3215_MODEL_NUMBER)
        self.mem[ADDR["ID"]] = servo_id
        self.mem[ADDR["Return_Delay_Time"]] = 250  # factory 500 us; LeRobot's configure() writes 0
        self.mem[ADDR["Response_Status_Level"]] = 1  # answer every instruction
        self.set_word("Max_Position_Limit", RESOLUTION - 1)
        self.mem[ADDR["Max_Temperature_Limit"]] = 70
        self.mem[ADDR["Max_Voltage_Limit"]], self.mem[ADDR["Min_Voltage_Limit"]] = 140, 40  # 0.1 V
        self.set_word("Max_Torque_Limit", 1000)
        self.mem[ADDR["P_Coefficient"]], self.mem[ADDR["D_Coefficient"]] = 32, 32
        self.set_word("Protection_Current", 500)
        self.mem[ADDR["Overload_Torque"]] = 80
        self.set_word("Torque_Limit", 1000)
        self.mem[ADDR["Lock"]] = 1
        self.mem[ADDR["Present_Voltage"]], self.mem[ADDR["Present_Temperature"]] = 120, 30
        self.pending: tuple[int, bytes] | None = None  # REG_WRITE waiting for ACTION
        self.error = 0  # status error bits

    @property
    def servo_id(self) -> int:
        return self.mem[ADDR["ID"]]

    # -- words ---------------------------------------------------------------------------------------
    def word(self, name: str) -> int:
        """A 2-byte register, sign-magnitude decoded where the STS encodes it so."""
        addr = ADDR[name]
        raw = self.mem[addr] | (self.mem[addr + 1] << 8)
        return decode_sign_magnitude(raw, SIGN_BITS[addr]) if addr in SIGN_BITS else raw

    def set_word(self, name: str, value: int) -> None:
        addr = ADDR[name]
        raw = encode_sign_magnitude(int(value), SIGN_BITS[addr]) if addr in SIGN_BITS else int(value)
        self.mem[addr], self.mem[addr + 1] = raw & 0xFF, (raw >> 8) & 0xFF

    # -- what the physics needs ------------------------------------------------------------------------
    @property
    def torque_enabled(self) -> bool:
        return bool(self.mem[ADDR["Torque_Enable"]])

    def goal_steps(self) -> int:
        """The goal in the servo's own encoder frame (Goal_Position + Homing_Offset), clamped to the limits."""
        goal = self.word("Goal_Position")
        lo, hi = self.word("Min_Position_Limit"), self.word("Max_Position_Limit")
        if lo or hi:  # 0/0 = multi-turn: no limits
            goal = min(max(goal, lo), hi)
        return goal + self.word("Homing_Offset")

    def set_present(self, actual_steps: float, velocity_steps_s: float, load_permille: float) -> None:
        """Update the read-only state from the physics (positions in the encoder frame, 4096 steps/turn)."""
        present = int(round(actual_steps)) - self.word("Homing_Offset")
        self.set_word("Present_Position", present)
        self.set_word("Present_Velocity", int(round(velocity_steps_s)))
        self.set_word("Present_Load", int(max(-1000, min(1000, round(load_permille)))))
        self.mem[ADDR["Moving"]] = int(abs(velocity_steps_s) > 20)
        self.set_word("Present_Current", int(abs(load_permille) * 0.5))

    # -- instructions -----------------------------------------------------------------------------------
    def read(self, addr: int, length: int) -> bytes:
        return bytes(self.mem[addr : addr + length])

    def write(self, addr: int, data: bytes) -> None:
        for i, byte in enumerate(data):
            a = addr + i
            if a in READ_ONLY or a < ADDR["ID"] or a > 0xFF:
                continue  # read-only registers keep their value (model number, present state)
            self.mem[a] = byte


@dataclass
class BusStats:
    """What went over the bus (for tests and the final report line)."""

    packets: int = 0
    bad_checksums: int = 0
    unanswered: int = 0  # packets to a servo that does not answer (unplugged)
    replies: int = 0  # writes of answer bytes back to the host
    reply_delay_s: float = 0.0  # the delay the last reply was held back by (reply_delay_s), s
    late_dropped: int = 0  # answers dropped because the host had given up on them (PtyBusServer)


class FeetechBus:
    """The servos of one bus and the protocol that reaches them: feed bytes in, get the answer bytes out.

    ``lock`` guards every servo's memory: the physics thread takes it to apply goals and post present
    positions, the serial thread to answer packets.
    """

    def __init__(self, servo_ids: list[int]):
        self.servos = {i: Sts3215(i) for i in servo_ids}
        self.lock = threading.RLock()
        self.silent: set[int] = set()  # unplugged servos: never answer, ignore writes
        self.stats = BusStats()
        self.reply_delay_s = 0.0
        #: how long after its request LeRobot still waits for the last answer fed out (its packet timeout), s
        self.reply_budget_s = LEROBOT_PACKET_TIMEOUT_S
        self._return_delay_s = 0.0
        self._buffer = bytearray()
        #: called (servo_id, address, data) after every write that reached a servo
        self.write_listeners: list[Callable[[int, int, bytes], None]] = []

    def feed(self, data: bytes) -> bytes:
        """Bytes from the host in; the status packets the servos send back, in order. :attr:`reply_delay_s` then
        holds how long after ``data`` arrived they reach the host (:func:`reply_delay_s`)."""
        self._buffer.extend(data)
        out = bytearray()
        self._return_delay_s = 0.0
        self.reply_budget_s = LEROBOT_PACKET_TIMEOUT_S
        while True:
            packet = self._next_packet()
            if packet is None:
                self.reply_delay_s = reply_delay_s(len(data), len(out), self._return_delay_s)
                self.reply_budget_s += len(out) * BYTE_TIME_S
                return bytes(out)
            answer = self._handle(*packet)
            if answer and packet[0] == BROADCAST_ID and packet[1] == INST_PING:
                self.reply_budget_s = LEROBOT_BROADCAST_PING_TIMEOUT_S
            out.extend(answer)

    def _next_packet(self) -> tuple[int, int, bytes] | None:
        buf = self._buffer
        while True:
            start = buf.find(b"\xff\xff")
            if start < 0:
                del buf[: max(0, len(buf) - 1)]  # keep a trailing 0xFF: it may start the next header
                return None
            del buf[:start]
            if len(buf) < 6:
                return None
            servo_id, length = buf[2], buf[3]
            if servo_id == 0xFF or length < 2:  # a third 0xFF: the header starts one byte later
                del buf[0]
                continue
            total = length + 4
            if len(buf) < total:
                return None
            packet = bytes(buf[:total])
            del buf[:total]
            self.stats.packets += 1
            if checksum(packet[2:-1]) != packet[-1]:
                self.stats.bad_checksums += 1
                log.debug("feetech bus: dropped a packet with a bad checksum: %s", packet.hex(" "))
                continue
            return servo_id, packet[4], packet[5:-1]

    def _answer(self, servo: Sts3215, params: bytes = b"") -> bytes:
        if servo.servo_id in self.silent:
            self.stats.unanswered += 1
            return b""
        self._return_delay_s += servo.mem[ADDR["Return_Delay_Time"]] * RETURN_DELAY_UNIT_S
        return status_packet(servo.servo_id, servo.error, params)

    def _write(self, servo: Sts3215, addr: int, data: bytes) -> None:
        servo.write(addr, data)
        for listener in list(self.write_listeners):
            listener(servo.servo_id, addr, data)

    def _handle(self, servo_id: int, inst: int, params: bytes) -> bytes:
        with self.lock:
            if inst == INST_SYNC_WRITE and servo_id == BROADCAST_ID and len(params) >= 2:
                addr, length = params[0], params[1]
                for k in range(2, len(params) - length + 1, length + 1):
                    servo = self.servos.get(params[k])
                    if servo is not None and servo.servo_id not in self.silent:
                        self._write(servo, addr, params[k + 1 : k + 1 + length])
                return b""
            if inst == INST_SYNC_READ and servo_id == BROADCAST_ID and len(params) >= 2:
                addr, length = params[0], params[1]
                out = bytearray()
                for sid in params[2:]:
                    servo = self.servos.get(sid)
                    if servo is not None:
                        out.extend(self._answer(servo, servo.read(addr, length)))
                return bytes(out)
            if servo_id == BROADCAST_ID:
                targets = [s for s in self.servos.values() if s.servo_id not in self.silent]
                answer = inst == INST_PING  # a broadcast ping is the one broadcast every servo answers
            else:
                servo = self.servos.get(servo_id)
                if servo is None or servo_id in self.silent:
                    if servo is not None:
                        self.stats.unanswered += 1
                    return b""
                targets, answer = [servo], True
            out = bytearray()
            for servo in targets:
                if inst == INST_PING:
                    reply: bytes = b""
                elif inst == INST_READ and len(params) == 2:
                    reply = servo.read(params[0], params[1])
                elif inst == INST_WRITE and params:
                    self._write(servo, params[0], params[1:])
                    reply = b""
                elif inst == INST_REG_WRITE and params:
                    servo.pending = (params[0], bytes(params[1:]))
                    reply = b""
                elif inst == INST_ACTION:
                    if servo.pending is not None:
                        self._write(servo, *servo.pending)
                        servo.pending = None
                    reply = b""
                else:
                    continue  # an instruction the STS does not know: no answer
                # Response_Status_Level 0: only PING and READ are answered
                if answer and (servo.mem[ADDR["Response_Status_Level"]] or inst in (INST_PING, INST_READ)):
                    out.extend(self._answer(servo, reply))
            return bytes(out)


def reply_delay_s(bytes_in: int, bytes_out: int, return_delay_s: float) -> float:
    """How long after the host's bytes reach the adapter the answers reach the host, s: the instruction and the
    answers on the 1 Mbps wire, the servos' return delays, and one USB frame."""
    return (bytes_in + bytes_out) * BYTE_TIME_S + return_delay_s + USB_FRAME_S


class PtyBusServer:
    """A :class:`FeetechBus` behind a pseudo-terminal: ``port`` is the slave side a host opens like
    ``/dev/ttyACM0``. A thread answers packets as they arrive, after the bus's :attr:`FeetechBus.reply_delay_s`
    when ``reply_delay`` is set (at once otherwise); :meth:`close` stops it and frees the pty."""

    def __init__(self, bus: FeetechBus, reply_delay: bool = False):
        self.bus = bus
        self.reply_delay = bool(reply_delay)
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)  # no line discipline: 0x0D/0x0A/0x11 pass through untouched
        self.port = os.ttyname(self._slave)
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="feetech-pty", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            ready, _, _ = select.select([self._master, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: no process has the slave open right now
                continue
            arrived = time.monotonic()
            answer = self.bus.feed(data)
            if not answer:
                continue
            delay = self.bus.reply_delay_s if self.reply_delay else 0.0
            self._hold_until(arrived + delay)
            if (late_s := time.monotonic() - arrived) > self.bus.reply_budget_s:
                # this process was kept off the CPU past the host's timeout (a real bus answers within ms): the
                # host has reported "There is no status packet!" already, and a late answer would stay in its
                # input buffer (scservo_sdk 1.0.0's clearPort() flushes output only), where its next read would
                # take it for its own answer: one transaction behind, or another register's value, from then on
                self.bus.stats.late_dropped += 1
                log.warning("feetech bus: dropped an answer %.0f ms late, after the host's timeout", late_s * 1e3)
                continue
            self.bus.stats.replies += 1
            self.bus.stats.reply_delay_s = delay
            os.write(self._master, answer)

    @staticmethod
    def _hold_until(deadline: float) -> None:
        """Sleep until ``deadline`` (time.monotonic()); never less, and a thread woken late only adds to it.

        Holding no lock: the servos' lock is free for the physics thread meanwhile. Spinning instead (no second
        wake-up per transaction) measured no better under load (benchmarks/bench_feetech_bus.py) and burns a core
        and the GIL that the host in the same process needs.
        """
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(left)

    def close(self) -> None:
        if self._thread.is_alive():
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=2.0)
        for fd in (self._master, self._slave, self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "PtyBusServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
