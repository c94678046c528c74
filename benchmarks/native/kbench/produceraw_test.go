package main

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The pre-encoded batch is what a broker accepts: the standard CRC-32C (Castagnoli, computed here
// with Go's hash/crc32 tables, not the helper's) over attributes..end, batchLength = the bytes after
// it, lastOffsetDelta = records - 1, NumRecords, magic 2, not idempotent, and 126 records of 1 KiB
// in 128 KiB (franz-go fills a 131072-byte batch.size the same way).
func TestRawBatchHeaderAndCRC(t *testing.T) {
	b, n := rawBatch(1024, 131072, 1_700_000_000_123)
	if n != 126 || len(b) > 131072 || len(b)+1034 <= 131072 {
		t.Fatalf("%d records in %d bytes", n, len(b))
	}
	crc := crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))
	if got := binary.BigEndian.Uint32(b[17:]); got != crc {
		t.Fatalf("crc %08x, want %08x", got, crc)
	}
	if int(binary.BigEndian.Uint32(b[8:])) != len(b)-12 || b[16] != 2 {
		t.Fatalf("batchLength %d of %d bytes, magic %d", binary.BigEndian.Uint32(b[8:]), len(b), b[16])
	}
	if int(binary.BigEndian.Uint32(b[23:])) != n-1 || int(binary.BigEndian.Uint32(b[57:])) != n {
		t.Fatalf("lastOffsetDelta %d, records %d", binary.BigEndian.Uint32(b[23:]), binary.BigEndian.Uint32(b[57:]))
	}
	// kmsg reads it back: offsets 0..n-1, the timestamp, producer id -1, every value 1 KiB.
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if rb.FirstTimestamp != 1_700_000_000_123 || rb.MaxTimestamp != rb.FirstTimestamp || rb.ProducerID != -1 ||
		rb.FirstSequence != -1 || rb.Attributes != 0 || rb.FirstOffset != 0 {
		t.Fatalf("header %+v", rb)
	}
	recs := rb.Records
	for i := 0; i < n; i++ {
		var r kmsg.Record
		if err := r.ReadFrom(recs); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if int(r.OffsetDelta) != i || len(r.Value) != 1024 || r.Key != nil || r.TimestampDelta64 != 0 {
			t.Fatalf("record %d: delta %d value %d key %v", i, r.OffsetDelta, len(r.Value), r.Key)
		}
		recs = recs[r.Length+int32(varintLen(int64(r.Length))):]
	}
	if len(recs) != 0 {
		t.Fatalf("%d bytes after the records", len(recs))
	}
	// walkBatches (fetch.go) counts it as a broker's log would.
	if w := walkBatches(b); w.records != int64(n) || w.next != int64(n) || w.partial != 0 {
		t.Fatalf("walk %+v", w)
	}
	// At least one record, however small the limit.
	if _, n := rawBatch(1024, 100, 0); n != 1 {
		t.Fatalf("%d records under a 100-byte limit", n)
	}
}

func varintLen(v int64) int {
	var buf [10]byte
	return binary.PutVarint(buf[:], v)
}

// Patching the timestamps and the base sequence by table lookups leaves the CRC the standard one
// of the patched bytes (hash/crc32 over them again), for any values, in any order, and for the
// batch lengths produce-raw sends; kmsg reads the patched fields back.
func TestCRCPatchesMatchAFullCRC(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, shape := range [][2]int{{100, 4096}, {1024, 131072}, {10, 61 + 12}} {
		b, _ := rawBatchOf(shape[0], shape[1], 1000, 12345, 3, 0)
		bp := newBatchPatches(len(b))
		for i := 0; i < 200; i++ {
			ms, seq := rng.Int63(), rng.Int31()
			if i%2 == 0 {
				bp.setTimestamps(b, ms)
			} else {
				bp.setSequence(b, seq)
			}
			want := crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))
			if got := binary.BigEndian.Uint32(b[17:]); got != want {
				t.Fatalf("%v step %d: crc %08x, want %08x", shape, i, got, want)
			}
		}
		bp.setTimestamps(b, 1_700_000_000_000)
		bp.setSequence(b, 2_000_000_000)
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if rb.FirstTimestamp != 1_700_000_000_000 || rb.MaxTimestamp != rb.FirstTimestamp ||
			rb.FirstSequence != 2_000_000_000 || rb.ProducerID != 12345 || rb.ProducerEpoch != 3 ||
			int64(rb.CRC) != int64(int32(crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))) {
			t.Fatalf("%v: %+v", shape, rb)
		}
	}
}

// The pre-encoded request decodes through kmsg as a Produce request of that version: acks, timeout,
// the topic (name, or id from v13), one batch per partition, each at the place recorded for
// patching; the correlation id sits at byte 8.
func TestRawProduceFrameDecodes(t *testing.T) {
	b, _ := rawBatch(1024, 16384, 5)
	id := [16]byte{1, 2, 3}
	for _, v := range []int16{3, 7, 9, 12, 13} {
		frame, at := rawProduceFrame(v, -1, 30000, "p7", id, []int32{0, 2, 5}, b)
		binary.BigEndian.PutUint32(frame[corrAt:], 4242)
		if int(binary.BigEndian.Uint32(frame)) != len(frame)-4 || binary.BigEndian.Uint16(frame[4:]) != 0 ||
			int16(binary.BigEndian.Uint16(frame[6:])) != v {
			t.Fatalf("v%d header % x", v, frame[:12])
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		body := frame[12:]
		body = body[2+int(binary.BigEndian.Uint16(body)):] // client id
		if req.IsFlexible() {
			body = skipTags(body)
		}
		if err := req.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if binary.BigEndian.Uint32(frame[corrAt:]) != 4242 || req.Acks != -1 || req.TimeoutMillis != 30000 ||
			len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 3 {
			t.Fatalf("v%d: %+v", v, req)
		}
		if (v < 13 && req.Topics[0].Topic != "p7") || (v >= 13 && req.Topics[0].TopicID != id) {
			t.Fatalf("v%d topic %q %x", v, req.Topics[0].Topic, req.Topics[0].TopicID)
		}
		for i, p := range req.Topics[0].Partitions {
			if p.Partition != []int32{0, 2, 5}[i] || string(p.Records) != string(b) || string(frame[at[i]:at[i]+len(b)]) != string(b) {
				t.Fatalf("v%d partition %d", v, i)
			}
		}
	}
}

// The sink (the generator's ceiling) answers the raw request: every partition acknowledged, base
// offsets advancing by the batch's record count.
func TestSinkAnswersRawProduce(t *testing.T) {
	b, n := rawBatch(1024, 131072, 5)
	frame, _ := rawProduceFrame(9, 1, 30000, "p7", [16]byte{}, []int32{1, 3}, b)
	binary.BigEndian.PutUint32(frame[corrAt:], 7)
	st := &sinkState{partitions: 4, next: map[string][]int64{}}
	var sc sinkScratch
	for round := int64(0); round < 2; round++ {
		out, err := st.handle(frame[4:], &sc)
		if err != nil || len(out) != 1 {
			t.Fatalf("%v %d", err, len(out))
		}
		ans := out[0]
		if binary.BigEndian.Uint32(ans[4:]) != 7 {
			t.Fatalf("correlation id %d", binary.BigEndian.Uint32(ans[4:]))
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(9)
		if err := resp.ReadFrom(skipTags(ans[8:])); err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.BaseOffset != round*int64(n) {
				t.Fatalf("round %d: %+v", round, p)
			}
		}
	}
}
