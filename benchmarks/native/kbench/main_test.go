package main

import (
	"encoding/binary"
	"math/rand"
	"sort"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The histogram's percentiles against the exact ones: never below, and above by at most one
// bucket's width (1/1024 of the value above 2048 µs, exact below).
func TestHistogramPercentilesWithinOneBucket(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var h histogram
	vals := make([]uint64, 0, 100000)
	for i := 0; i < 100000; i++ {
		v := uint64(rng.ExpFloat64() * 5000) // µs: most under 20 ms, a tail to ~100 ms
		if i%1000 == 0 {
			v = uint64(rng.Int63n(10_000_000)) // up to 10 s
		}
		vals = append(vals, v)
		h.record(v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1.0} {
		idx := int(q*float64(len(vals))+0.999999) - 1
		exact := vals[idx]
		got := h.percentile(q)
		if got < exact || float64(got-exact) > float64(exact)/1024+1 {
			t.Errorf("p%v: got %d, exact %d", q*100, got, exact)
		}
	}
	if h.max != vals[len(vals)-1] || h.total != uint64(len(vals)) {
		t.Errorf("max %d total %d", h.max, h.total)
	}
}

func TestHistogramBucketsAreContiguous(t *testing.T) {
	var h histogram
	prev := -1
	for v := uint64(0); v < 1<<20; v++ {
		i := h.index(v)
		if i != prev && i != prev+1 {
			t.Fatalf("value %d: index %d after %d", v, i, prev)
		}
		if h.highest(i) < v {
			t.Fatalf("value %d above its bucket's highest %d", v, h.highest(i))
		}
		prev = i
	}
}

// batch builds a record-batch header of `size` bytes in all (batchLength = size - 12) at base with
// lastOffsetDelta delta; the rest (CRC, records) is left zero: walkBatches must not look at it.
func batch(base int64, delta int32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint32(b[8:], uint32(size-12))
	b[16] = 2
	binary.BigEndian.PutUint32(b[23:], uint32(delta))
	return b
}

func TestWalkBatchesAdvancesFromTheHeadersOnly(t *testing.T) {
	var b []byte
	b = append(b, batch(100, 9, 200)...)  // offsets 100..109
	b = append(b, batch(110, 0, 61)...)   // 110
	b = append(b, batch(111, 99, 900)...) // 111..210
	w := walkBatches(b)
	if w.records != 111 || w.bytes != 1161 || w.next != 211 || w.partial != 0 {
		t.Fatalf("got %+v", w)
	}
	if w := walkBatches(nil); w.records != 0 || w.next != -1 || w.partial != 0 {
		t.Fatalf("empty: %+v", w)
	}
}

// A broker may cut the last batch of a partition at the byte limit: the whole batches before it
// count, the partial one does not, and the next fetch offset is its base offset (refetched).
func TestWalkBatchesIgnoresATrailingPartialBatch(t *testing.T) {
	whole := append(batch(0, 511, 500), batch(512, 511, 500)...)
	next := batch(1024, 511, 500)
	for _, cut := range []int{1, 11, 12, 26, 27, 100, 499} {
		w := walkBatches(append(append([]byte{}, whole...), next[:cut]...))
		if w.records != 1024 || w.bytes != 1000 || w.next != 1024 || w.partial != cut {
			t.Fatalf("cut at %d: %+v", cut, w)
		}
	}
	// Only a partial batch: nothing counted, no next offset (the fetcher reports it, not loops).
	if w := walkBatches(next[:300]); w.records != 0 || w.next != -1 || w.partial != 300 {
		t.Fatalf("partial only: %+v", w)
	}
}

// The sink's Fetch answer (the generator's ceiling) is walked like a broker's: whole batches at
// consecutive offsets from the fetch offset, at most PartitionMaxBytes but at least one batch.
func TestSinkFetchBatchesAreConsecutiveAndWithinTheLimit(t *testing.T) {
	tmpl := buildBatch(16, 100)
	st := &sinkState{partitions: 2, next: map[string][]int64{}}
	st.setFetchTemplate(tmpl, 16, 64*len(tmpl))
	var scratch sinkScratch
	for _, tc := range []struct {
		offset  int64
		max     int32
		batches int
	}{
		{0, int32(10 * len(tmpl)), 10}, {4096, int32(10*len(tmpl) - 1), 9}, {7, 1, 1}, {0, 1 << 30, 64},
	} {
		b := st.fetchBatches(&scratch, 0, tc.offset, tc.max)
		w := walkBatches(b)
		if w.partial != 0 || w.records != int64(16*tc.batches) || w.next != tc.offset+int64(16*tc.batches) {
			t.Fatalf("%+v: %+v", tc, w)
		}
	}
}

// The sink's hand-encoded Fetch v12 response is what kmsg decodes: frame size, correlation id, each
// topic's partitions with their batches, the MaxBytes budget dealt over them.
func TestSinkFetchV12ResponseDecodes(t *testing.T) {
	tmpl := buildBatch(8, 100)
	st := &sinkState{partitions: 4, next: map[string][]int64{}}
	st.setFetchTemplate(tmpl, 8, 16*len(tmpl))
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxBytes = int32(5 * len(tmpl))
	for _, name := range []string{"a", "bb"} {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = name
		for p := int32(0); p < 2; p++ {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, 1000*int64(p), int32(2*len(tmpl))
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	var sc sinkScratch
	var frame []byte
	for _, b := range st.fetchV12(req, 77, &sc) {
		frame = append(frame, b...)
	}
	if int(binary.BigEndian.Uint32(frame)) != len(frame)-4 || binary.BigEndian.Uint32(frame[4:]) != 77 || frame[8] != 0 {
		t.Fatalf("header % x", frame[:9])
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(12)
	if err := resp.ReadFrom(frame[9:]); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for ti, rt := range resp.Topics {
		if rt.Topic != req.Topics[ti].Topic || len(rt.Partitions) != 2 {
			t.Fatalf("topic %d: %+v", ti, rt)
		}
		for _, rp := range rt.Partitions {
			w := walkBatches(rp.RecordBatches)
			got = append(got, w.records)
			if w.records > 0 && w.next != 1000*int64(rp.Partition)+w.records {
				t.Fatalf("partition %d: %+v", rp.Partition, w)
			}
		}
	}
	// 2 batches each (PartitionMaxBytes) until the 5-batch MaxBytes runs out: 2, 2, 1, 0.
	if len(got) != 4 || got[0] != 16 || got[1] != 16 || got[2] != 8 || got[3] != 0 {
		t.Fatalf("records per partition %v", got)
	}
}
