"""OffsetIndex / TimeIndex: Kafka's byte layout, sparse lookups (seed S003 example), trimming, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kbroker.log.indexes import OffsetIndex, TimeIndex


def test_seed_s003_sparse_lookup(tmp_path: Path) -> None:
    # S003: in 00000000000000368769.index, entry "3,497" is offset 368772 at byte 497 of the .log and
    # "8,1686" is offset 368777 at byte 1686.
    base = 368769
    path = tmp_path / f"{base:020d}.index"
    idx = OffsetIndex(path, base, max_index_size=1024)
    idx.make_active(1024)
    idx.append(368772, 497)
    idx.append(368777, 1686)
    assert idx.lookup(368772) == (368772, 497)
    assert idx.lookup(368775) == (368772, 497)  # floor entry: scan the .log forward from byte 497
    assert idx.lookup(368777) == (368777, 1686)
    assert idx.lookup(999999) == (368777, 1686)
    assert idx.lookup(368770) == (base, 0)  # before the first entry: from the start of the segment
    idx.close()
    # Trimmed to the two entries; each is two big-endian int32: relative offset, position.
    assert path.read_bytes() == struct.pack(">iiii", 3, 497, 8, 1686)
    assert path.name == "00000000000000368769.index"


def test_offset_index_preallocated_and_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, max_index_size=1003)  # rounded down to whole 8-byte entries
    idx.make_active(1003)
    assert path.stat().st_size == 1000
    assert idx.max_entries == 125
    for i in range(125):
        idx.append(100 + 2 * i + 1, 10 * (i + 1))
    assert idx.is_full
    with pytest.raises(ValueError):
        idx.append(10_000, 99_999)
    idx.trim_to_valid_size()
    assert path.stat().st_size == 1000
    idx.truncate_to(100 + 2 * 10 + 1)  # removes entries with offset >= 121
    assert idx.entries == 10
    idx.close()
    assert path.stat().st_size == 80
    again = OffsetIndex(path, 100, max_index_size=1000)
    assert again.entries == 10
    assert again.lookup(120) == (119, 100)
    again.sanity_check()


def test_offset_index_rejects_non_increasing(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_index_size=80)
    idx.make_active(80)
    idx.append(5, 100)
    with pytest.raises(ValueError):
        idx.append(5, 200)


def test_appends_compare_with_the_last_entry_without_reading_the_map(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An append compares with the entry this index last wrote (one per 4 KiB a partition receives,
    issue 17's many-partitions path); after a truncation it reads the map again, and the checks hold."""
    offsets = OffsetIndex(tmp_path / "0.index", 0, max_index_size=800)
    offsets.make_active(800)
    times = TimeIndex(tmp_path / "0.timeindex", 0, max_index_size=1200)
    times.make_active(1200)
    for i in range(1, 6):
        offsets.append(10 * i, 100 * i)
        times.maybe_append(1000 * i, 10 * i)
    reads: list[int] = []
    for idx in (offsets, times):
        monkeypatch.setattr(idx, "entry", lambda n, idx=idx: reads.append(n) or type(idx).entry(idx, n))
    offsets.append(60, 600)
    times.maybe_append(6000, 60)
    assert reads == [] and offsets.last_offset == 60 and times.last_entry() == (6000, 60)
    # Truncated: the remembered entry is gone, the map answers (and the checks use it).
    offsets.truncate_to(35)
    times.truncate_to(35)
    assert offsets.last_offset == 30 and times.last_entry() == (3000, 30)
    assert reads
    with pytest.raises(ValueError):
        offsets.append(30, 999)
    with pytest.raises(ValueError):
        times.maybe_append(9000, 25)
    offsets.append(31, 310)
    times.maybe_append(2500, 31)  # not above 3000: ignored, as Kafka does
    times.maybe_append(3100, 31)
    assert offsets.lookup(1000) == (31, 310) and times.last_entry() == (3100, 31) and times.entries == 4


def test_untrimmed_preallocated_index_drops_zero_tail(tmp_path: Path) -> None:
    # A crash leaves the active index at its preallocated size with zeros after the real entries.
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 7, 4100) + struct.pack(">ii", 15, 8300) + bytes(8 * 50))
    idx = OffsetIndex(path, 0, max_index_size=1024)
    assert idx.entries == 2
    assert idx.lookup(100) == (15, 8300)


def test_time_index_layout_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    idx = TimeIndex(path, 50, max_index_size=120)
    idx.make_active(120)
    assert idx.max_entries == 10
    idx.maybe_append(1000, 52)
    idx.maybe_append(1000, 55)  # not larger: ignored, like Kafka
    idx.maybe_append(900, 56)  # smaller: ignored
    idx.maybe_append(2000, 60)
    assert idx.entries == 2
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1000) == (1000, 52)
    assert idx.lookup(1999) == (1000, 52)
    assert idx.lookup(5000) == (2000, 60)
    assert idx.last_entry() == (2000, 60)
    idx.close()
    assert path.read_bytes() == struct.pack(">qi", 1000, 2) + struct.pack(">qi", 2000, 10)


def test_time_index_keeps_last_slot_for_roll(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0, max_index_size=36)
    idx.make_active(36)
    idx.maybe_append(1, 1)
    idx.maybe_append(2, 2)
    assert idx.is_full  # 3 slots, the last reserved for the roll entry
    idx.maybe_append(3, 3, skip_full_check=True)
    assert idx.entries == 3
    idx.truncate_to(2)
    assert idx.entries == 1



def _vm_flags_of_mapping(path: Path) -> list[str]:
    """The VmFlags of this process's mapping of ``path`` (Linux /proc/self/smaps)."""
    flags: list[str] = []
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and not first.endswith(":"):  # a mapping's header line
            current = line.split()[-1] if len(line.split()) >= 6 else ""
        elif first == "VmFlags:" and current == str(path):
            flags = line.split()[1:]
    return flags


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("index_class", [OffsetIndex, TimeIndex])
def test_index_mapping_is_advised_random_so_a_fault_reads_no_read_around(tmp_path: Path, index_class) -> None:
    # Without MADV_RANDOM a page fault on the mapping reads the device's read_ahead_kb around it (8 MiB on
    # the CI machines): the first append to each of 1,000 fresh partitions zero-filled 16 MiB of page cache.
    path = tmp_path / f"{0:020d}{'.index' if index_class is OffsetIndex else '.timeindex'}"
    idx = index_class(path, 0, max_index_size=10 << 20)
    idx.make_active(10 << 20)
    if index_class is OffsetIndex:  # the first entry is a pwrite; the second maps the file
        idx.append(1, 100)
        idx.append(2, 200)
    else:
        idx.maybe_append(1000, 1)
        idx.maybe_append(2000, 2)
    try:
        flags = _vm_flags_of_mapping(path.resolve())
        assert flags, "the index is not mapped"
        assert "rr" in flags, flags  # "rr": random read advice (MADV_RANDOM)
    finally:
        idx.close()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("index_class", [OffsetIndex, TimeIndex])
def test_the_first_entry_is_written_without_mapping_the_file(tmp_path: Path, index_class) -> None:
    """Issue 17: a new segment's first index entry is one pwrite, not an fallocate, a mapping and a fault
    (a quarter of the broker's time when a load spreads over 10,000 new partitions). The entry is read
    back through the page cache by a lookup's mapping, the second entry maps, and a crash that leaves
    the preallocated file untrimmed keeps both."""
    path = tmp_path / f"{100:020d}{'.index' if index_class is OffsetIndex else '.timeindex'}"
    idx = index_class(path, 100, max_index_size=1 << 20)
    idx.make_active(1 << 20)

    def add(i: int) -> bool:
        if index_class is OffsetIndex:
            return idx.append(100 + 10 * i, 4096 * i)
        return idx.maybe_append(1000 * i, 100 + 10 * i)

    assert add(1) is True
    assert not idx.is_mapped and _vm_flags_of_mapping(path.resolve()) == []
    assert idx.entries == 1
    first = (110, 4096) if index_class is OffsetIndex else (1000, 110)
    assert idx.lookup(first[0] + 5) == first  # maps for the lookup: the pwritten entry is in the mapping
    idx.release()
    assert not idx.is_mapped
    assert add(2) is True and idx.is_mapped  # the second entry maps the file
    assert idx.lookup(10**9) == ((120, 8192) if index_class is OffsetIndex else (2000, 120))
    idx.flush()
    size = path.stat().st_size
    # A crash: nothing trimmed, the file is still preallocated; another broker process opens it.
    assert size == (1 << 20) - (1 << 20) % index_class.ENTRY.size
    again = index_class(path, 100, max_index_size=1 << 20)
    assert again.entries == 2 and again.lookup(first[0]) == first


def test_a_first_entry_after_a_truncation_to_nothing_is_written_again(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_index_size=800)
    idx.make_active(800)
    idx.append(10, 100)
    idx.truncate_to(5)  # reads the entry through a mapping
    idx.release()
    assert idx.entries == 0 and not idx.is_mapped
    idx.append(7, 70)
    idx.append(9, 90)
    assert idx.lookup(8) == (7, 70) and idx.lookup(100) == (9, 90) and idx.entries == 2
