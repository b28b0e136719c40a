#!/usr/bin/env python3
"""Writes small flight-recorder files into tests/fuzz/corpus-flight: seeds for the flight fuzz
target, laid out as src/track/flight_format.h says (version 4; "vmm" with a VMM table and the counters
region, "small" without either, as a writer may leave them; "facts" with the facts region: framework,
device, peak and two step samples). Run again after a layout change."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus-flight")

SLOT = 48
RING, JOURNAL, LIVE = 4096, 4096 + 16 * SLOT, 4096 + 16 * SLOT + 512
RING_HEAD = 4096 - 64  # the count of claimed slots
LIVE_BYTES = 64 * 40
SIZE = LIVE + LIVE_BYTES


def slot(s, time_ns, address, size, stack, kind, api, device=0, thread=1234):
    # src/track/event_slot.h: the state and small fields, time, address, size, stream, stack|thread
    word0 = (2 * s + 2) | (api << 32) | (kind << 48) | (device << 56)
    return struct.pack("<6Q", word0, time_ns, address, size, 0, stack | (thread << 32))


def record(kind, payload):
    head = struct.pack("<II", kind, len(payload))
    return head + payload + b"\0" * (-len(payload) % 8)


VMM, VMM_ENTRIES = SIZE, 4
COUNTERS = SIZE + VMM_ENTRIES * 56
VMM_SIZE = COUNTERS + 65 * 8


FACTS = VMM_SIZE + (-VMM_SIZE % 4096)
FACTS_BYTES = 90112                     # flight::kFactsBytes
PEAKS = FACTS + 4096 + 64 * 256         # kFactsPeaksAt
STEPS, STEP_BYTES = FACTS + FACTS_BYTES, 2048
FACTS_SIZE = STEPS + 2 * STEP_BYTES


def step_record(index, time_ns, tracked):
    out = bytearray(STEP_BYTES)
    struct.pack_into("<4QIHHH", out, 0, 2, 0, index, time_ns, 0, 1, 1, 0)
    struct.pack_into("<qQ7Q", out, 48, 0, 1 | 2, tracked, tracked, tracked + 4096, 0, 0, 0, 0)
    struct.pack_into("<IiQ", out, 48 + 8 * 72, 1, 0, tracked)
    return bytes(out)


def build(journal_cut=False, vmm=False, facts=False):
    data = bytearray(FACTS_SIZE if facts else VMM_SIZE if vmm else SIZE)
    journal = (record(1, struct.pack("<I", 1) + b"cudaMalloc") + record(1, struct.pack("<I", 2) + b"cudaFree") +
               record(4, struct.pack("<3Q", 0x400000, 0x401000, 0) + b"/bin/true") +
               record(3, struct.pack("<I", 0) + b"train.py\0step\0__main__") +
               record(2, struct.pack("<II", 1, 2) + struct.pack("<2Q", 0x400010, (1 << 63) | 42)))
    if journal_cut:
        journal = journal[:-8]
    header = bytearray(4096)
    header[0:8] = b"OOMSFLT1"
    struct.pack_into("<6I", header, 8, 4, 4096, 56, SLOT, 40, 64)
    struct.pack_into("<14Q", header, 32, 4321, 1, 10, 20, SIZE, RING, 16, JOURNAL, 512, len(journal), 0,
                     LIVE, LIVE_BYTES, LIVE_BYTES)
    struct.pack_into("<2Q", header, 32 + 14 * 8, LIVE, 64)  # shard 0: the whole arena
    struct.pack_into("<2Q", header, 32 + 14 * 8 + 16, 2 ** 64 - 1, 64)  # shard 1: in memory only
    host = 32 + 14 * 8 + 64 * 16
    header[host:host + 4] = b"seed"
    data[0:4096] = header
    for s, (t, addr, size, kind, api) in enumerate([(100, 0x7000, 4096, 0, 1), (200, 0x8000, 8192, 0, 1),
                                                    (300, 0x8000, 8192, 1, 2)]):
        data[RING + s * SLOT:RING + (s + 1) * SLOT] = slot(s, t, addr, size, 1, kind, api)
    struct.pack_into("<Q", data, RING_HEAD, 64)  # one block claimed
    data[JOURNAL:JOURNAL + len(journal)] = journal
    struct.pack_into("<4QIHbB", data, LIVE + 5 * 40, 0x7000, 4096, 100, 0, 1, 1, 0, 0)
    if vmm:
        # The VMM table (files made before it have none): a live handle mapped at 0x9000000, one
        # emptied slot, one half-made slot (no live mark).
        struct.pack_into("<4Q", data, 3792, VMM, VMM_ENTRIES, 1, COUNTERS)  # Header::vmmOffset, after cmdline
        struct.pack_into("<2q", data, COUNTERS, 0, 24 << 20)  # device 0's peak: 24 MiB
        struct.pack_into("<6QIHbB", data, VMM, 0x4c4956454d4d56, 0x51, 0x9000000, 2 << 20, 150, 0, 1, 1, 0, 0)
        struct.pack_into("<6QIHbB", data, VMM + 56, 0, 0x52, 0, 4 << 20, 160, 0, 1, 1, 0, 0)
        struct.pack_into("<6QIHbB", data, VMM + 112, 0, 0x53, 0, 8 << 20, 170, 0, 1, 1, 0, 0)
    if facts:
        struct.pack_into("<3Q", data, 3968, FACTS, STEPS, 2)  # Header::factsOffset, stepsOffset, stepCapacity
        struct.pack_into("<Q", data, FACTS, 2)
        data[FACTS + 8:FACTS + 13] = b"torch"
        struct.pack_into("<3Q", data, FACTS + 64, 2, 0, 1)  # stepHead, stepEpoch, devicesKnown
        struct.pack_into("<QqQQqqQ", data, FACTS + 4096, 2, 0, 1, 80 << 30, 0, 0, 0)
        data[FACTS + 4096 + 56:FACTS + 4096 + 64] = b"Fake GPU"
        struct.pack_into("<Qq4QIiQ", data, PEAKS, 2, 0, 24 << 20, 250, 0, 1, 1, 0, 24 << 20)  # the counters' peak
        data[STEPS:STEPS + STEP_BYTES] = step_record(1, 150, 4096)
        data[STEPS + STEP_BYTES:STEPS + 2 * STEP_BYTES] = step_record(2, 250, 12288)
    return bytes(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {"small": build(), "journal-cut": build(journal_cut=True), "truncated": build()[:6000],
             "vmm": build(vmm=True), "vmm-truncated": build(vmm=True)[:VMM_SIZE - 60],
             "facts": build(vmm=True, facts=True)}
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
