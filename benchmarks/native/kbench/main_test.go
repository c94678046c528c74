package main

import (
	"math/rand"
	"sort"
	"testing"
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
