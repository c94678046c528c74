// kbench: the native load generator of kbroker's side-by-side benchmarks (benchmarks/run.py).
//
// One static Go binary on franz-go (a pure-Go Kafka client, pinned in go.mod / go.sum), so the load
// is not bound by a Python interpreter and is byte-for-byte the same against kbroker and Apache
// Kafka. Every mode prints one JSON line, including the generator's own CPU time (getrusage) and
// its share of the wall clock (gen_cpu_util, in cores): a reader sees from it whether the
// generator, rather than the broker, was the limit.
//
//	kbench produce -bootstrap B -topic T -partitions P -records N -size S [-acks 1] [-linger-ms 5] [-batch-bytes 131072]
//	               [-seconds S (stop sending after S s; the flush of what was sent is counted)] [-max-buffered 100000]
//	kbench consume -bootstrap B -topic T -partitions P -clients C -records N
//	kbench fetch   -bootstrap B -topic T -partitions P [-clients C] -records N (fetch.go: raw Fetch, no record decoding)
//	kbench produce-raw -bootstrap B -topic T -records N [-size 1024] [-batch-bytes 131072] [-acks 1] [-connections 1]
//	               [-in-flight 5] [-idempotent] (produceraw.go: pre-encoded Produce requests, pipelined; no client batching)
//	kbench e2e     -bootstrap B -topic T -rate R -seconds S [-warmup 2] [-size 1024] [-acks 1]
//	kbench txn     -bootstrap B -topic T -records N -per-txn K [-size 1024] (txn.go: transactional produce)
//	kbench fleet   -bootstrap B -topic T -clients N -rate R -seconds S (fleet.go: N producers at R records/s each)
//
// e2e is free of coordinated omission: record i of a run at R records/s has the intended send time
// start + i/R, carried in its first 8 bytes; its latency is (time the consumer got it) - (intended
// send time), so a sender that falls behind (a blocked buffer, a slow broker) is charged to the
// latency instead of silently lowering the rate. The sender's own lateness (now - intended when it
// hands the record to the client) is reported separately (send_lag_*) as the generator's floor.
// Latencies go into an HdrHistogram-style log-linear histogram (1 µs units, 2048 sub-buckets per
// power of two: 3 significant digits); percentiles are the highest value equivalent to the bucket,
// as HdrHistogram's getValueAtPercentile.
//
// MB means 2^20 bytes, as in Kafka's perf tools.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const mib = 1 << 20

// ---- HdrHistogram-style histogram --------------------------------------------------------------

const (
	subBucketBits  = 11 // 2048 sub-buckets: values are exact below 2048 µs, within 1/1024 above
	subBucketCount = 1 << subBucketBits
	subBucketHalf  = subBucketCount / 2
	bucketCount    = 64 - subBucketBits + 1
)

type histogram struct {
	counts [bucketCount * subBucketHalf * 2]uint64
	total  uint64
	max    uint64
}

func (h *histogram) index(v uint64) int {
	b := bits.Len64(v) - subBucketBits // the power-of-two bucket (0 for values below 2048)
	if b < 0 {
		b = 0
	}
	sub := int(v >> uint(b))
	if b == 0 {
		return sub
	}
	return (b+1)*subBucketHalf + (sub - subBucketHalf)
}

// highest returns the largest value that lands in the bucket at index i.
func (h *histogram) highest(i int) uint64 {
	if i < subBucketCount {
		return uint64(i)
	}
	b := i/subBucketHalf - 1
	sub := uint64(i%subBucketHalf + subBucketHalf)
	return ((sub + 1) << uint(b)) - 1
}

func (h *histogram) record(v uint64) {
	h.counts[h.index(v)]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

// recordN records value v n times (the records of one request share its latency).
func (h *histogram) recordN(v, n uint64) {
	if n == 0 {
		return
	}
	h.counts[h.index(v)] += n
	h.total += n
	if v > h.max {
		h.max = v
	}
}

// merge adds the counts of o.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

func (h *histogram) percentile(q float64) uint64 {
	if h.total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(h.total)))
	if want < 1 {
		want = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			v := h.highest(i)
			if v > h.max {
				v = h.max
			}
			return v
		}
	}
	return h.max
}

// ---- shared helpers ----------------------------------------------------------------------------

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func emit(out map[string]any) {
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kbench: "+format+"\n", args...)
	os.Exit(1)
}

func acksOpt(acks string) []kgo.Opt {
	switch acks {
	case "0":
		return []kgo.Opt{kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()}
	case "1":
		return []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}
	default:
		return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}
	}
}

func rate(n float64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return n / secs
}

// ---- produce -----------------------------------------------------------------------------------

func produce(args []string) {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	records := fs.Int("records", 0, "records to send")
	size := fs.Int("size", 1024, "record value size in bytes")
	acks := fs.String("acks", "1", "0, 1 or all")
	linger := fs.Int("linger-ms", 5, "linger.ms")
	batch := fs.Int("batch-bytes", 131072, "batch.size")
	_ = fs.Int("partitions", 1, "unused: records go round robin over the topic's partitions")
	limit := fs.Float64("seconds", 0, "stop sending after this many seconds (0: send all -records)")
	maxBuffered := fs.Int("max-buffered", 100000, "records the client buffers before Produce blocks")
	inflight := fs.Int("inflight", 1, "Produce requests in flight per broker, acks 0 or 1 only (franz-go's default: 1)")
	_ = fs.Parse(args)
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.DefaultProduceTopic(*topic),
		kgo.ProducerLinger(time.Duration(*linger) * time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(*batch)), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(*maxBuffered),
		kgo.AllowAutoTopicCreation(),
	}, acksOpt(*acks)...)
	if *inflight != 1 {
		// franz-go allows more than one only without idempotence (acks 0 or 1 here).
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(*inflight))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		die("client: %v", err)
	}
	defer cl.Close()
	value := make([]byte, *size) // the same bytes every time: the producer only borrows them
	var failed atomic.Int64
	var firstErr atomic.Value
	cpu0, t0 := cpuSeconds(), time.Now()
	ctx := context.Background()
	// Send-to-acknowledgement latency of every record (µs), as kafka-producer-perf-test reports it.
	var lat histogram
	var latMu sync.Mutex
	deadline := t0.Add(time.Duration(*limit * float64(time.Second)))
	sentN := 0
	for i := 0; i < *records; i++ {
		if *limit > 0 && i%64 == 0 && time.Now().After(deadline) {
			break
		}
		sentN++
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			us := uint64(time.Since(sent).Microseconds())
			latMu.Lock()
			lat.record(us)
			latMu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		die("flush: %v", err)
	}
	secs, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	if failed.Load() > 0 {
		die("%d records failed: %v", failed.Load(), firstErr.Load())
	}
	n := float64(sentN)
	emit(map[string]any{
		"records": sentN, "seconds": secs, "records_per_s": rate(n, secs),
		"mb_per_s": rate(n*float64(*size)/mib, secs), "gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, secs),
		"p50_latency_ms": float64(lat.percentile(0.50)) / 1000, "p99_latency_ms": float64(lat.percentile(0.99)) / 1000,
		"max_latency_ms": float64(lat.max) / 1000, "inflight": *inflight,
	})
}

// ---- consume -----------------------------------------------------------------------------------

// fetchCounter counts the Fetch responses (API key 1) the clients read and their bytes, so a
// reader can check that both brokers answered the same requests with responses of the same size
// (max.partition.fetch.bytes honoured) rather than one broker sending more per round trip.
type fetchCounter struct{ n, bytes atomic.Int64 }

func (f *fetchCounter) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.n.Add(1)
		f.bytes.Add(int64(bytesRead))
	}
}

func consume(args []string) {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "partitions of the topic, read from the beginning")
	clients := fs.Int("clients", 1, "consumer clients (connections), partitions dealt round robin")
	records := fs.Int64("records", 0, "stop after this many records in total")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after")
	_ = fs.Parse(args)
	if *clients > *partitions {
		*clients = *partitions
	}
	var got, nbytes atomic.Int64
	var responses fetchCounter
	var firstAt atomic.Int64 // unix nanos of the first record, 0 before
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cpu0, t0 := cpuSeconds(), time.Now()
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		assign := map[int32]kgo.Offset{}
		for p := c; p < *partitions; p += *clients {
			assign[int32(p)] = kgo.NewOffset().AtStart()
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.WithHooks(&responses),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: assign}))
		if err != nil {
			die("client: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for got.Load() < *records && ctx.Err() == nil {
				fetches := cl.PollFetches(ctx)
				var n, b int64
				fetches.EachPartition(func(p kgo.FetchTopicPartition) {
					for _, r := range p.Records {
						b += int64(len(r.Value) + len(r.Key))
					}
					n += int64(len(p.Records))
				})
				if n > 0 {
					firstAt.CompareAndSwap(0, time.Now().UnixNano())
					got.Add(n)
					nbytes.Add(b)
				}
			}
			if got.Load() >= *records {
				cancel() // wake the other clients' PollFetches
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	cpu := cpuSeconds() - cpu0
	if got.Load() < *records {
		die("read %d of %d records before the timeout", got.Load(), *records)
	}
	start := time.Unix(0, firstAt.Load())
	secs := end.Sub(start).Seconds()
	emit(map[string]any{
		"records": got.Load(), "bytes": nbytes.Load(), "seconds": secs,
		"seconds_with_connect": end.Sub(t0).Seconds(),
		"records_per_s":        rate(float64(got.Load()), secs), "mb_per_s": rate(float64(nbytes.Load())/mib, secs),
		"clients": *clients, "partitions": *partitions,
		"fetch_responses": responses.n.Load(), "fetch_response_mib": float64(responses.bytes.Load()) / mib,
		"gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, end.Sub(t0).Seconds()),
	})
}

// ---- e2e ---------------------------------------------------------------------------------------

func e2e(args []string) {
	fs := flag.NewFlagSet("e2e", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "a fresh, empty one-partition topic")
	perSec := fs.Float64("rate", 1000, "records per second (fixed schedule)")
	seconds := fs.Float64("seconds", 10, "measured seconds")
	warmup := fs.Float64("warmup", 2, "seconds sent at the same rate first, not measured")
	size := fs.Int("size", 1024, "record value size in bytes (>= 8)")
	acks := fs.String("acks", "1", "0, 1 or all")
	_ = fs.Parse(args)
	if *size < 8 {
		*size = 8
	}
	base := time.Now() // monotonic clock: producer and consumer share this process
	total := int(math.Round(*perSec * (*warmup + *seconds)))
	warmN := int(math.Round(*perSec * *warmup))
	interval := float64(time.Second) / *perSec

	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		die("consumer: %v", err)
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.DefaultProduceTopic(*topic), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, acksOpt(*acks)...)...)
	if err != nil {
		die("producer: %v", err)
	}
	var lat histogram // µs, measured records only
	var received atomic.Int64
	start := time.Now()
	startNs := int64(start.Sub(base))
	measureFrom := startNs + int64(float64(warmN)*interval) // ns since base: first measured intended send
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for received.Load() < int64(total) && ctx.Err() == nil {
			fetches := cons.PollFetches(ctx)
			now := int64(time.Since(base))
			fetches.EachRecord(func(r *kgo.Record) {
				if len(r.Value) < 8 {
					return
				}
				intended := int64(binary.BigEndian.Uint64(r.Value))
				if intended >= measureFrom {
					lat.record(uint64(max(0, now-intended)) / 1000)
				}
				received.Add(1)
			})
		}
	}()

	var sendLag histogram // µs: how late the generator itself handed each measured record over
	var failed atomic.Int64
	cpu0 := cpuSeconds()
	for i := 0; i < total; i++ {
		intendedNs := startNs + int64(float64(i)*interval)
		now := int64(time.Since(base))
		if d := intendedNs - now; d > 0 {
			time.Sleep(time.Duration(d))
			now = int64(time.Since(base))
		}
		if i >= warmN {
			sendLag.record(uint64(max(0, now-intendedNs)) / 1000)
		}
		v := make([]byte, *size)
		binary.BigEndian.PutUint64(v, uint64(intendedNs))
		prod.Produce(ctx, &kgo.Record{Value: v, Partition: 0}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	sendSecs := time.Since(start).Seconds()
	_ = prod.Flush(ctx)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	cancel()
	<-done
	wall := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	prod.Close()
	cons.Close()
	ms := func(us uint64) float64 { return float64(us) / 1000 }
	measured := total - warmN
	emit(map[string]any{
		"rate": *perSec, "records": lat.total, "sent": measured, "lost": int64(measured) - int64(lat.total),
		"failed": failed.Load(), "achieved_rate": rate(float64(total), sendSecs),
		"p50_ms": ms(lat.percentile(0.50)), "p99_ms": ms(lat.percentile(0.99)),
		"p999_ms": ms(lat.percentile(0.999)), "max_ms": ms(lat.max),
		"send_lag_p99_ms": ms(sendLag.percentile(0.99)), "send_lag_max_ms": ms(sendLag.max),
		"gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, wall),
	})
}

func main() {
	if len(os.Args) < 2 {
		die("usage: kbench produce|produce-raw|consume|fetch|e2e|txn|fleet|sink [flags] (see the source's doc comment)")
	}
	switch os.Args[1] {
	case "produce":
		produce(os.Args[2:])
	case "consume":
		consume(os.Args[2:])
	case "fetch":
		fetchMode(os.Args[2:])
	case "produce-raw":
		produceRaw(os.Args[2:])
	case "e2e":
		e2e(os.Args[2:])
	case "sink":
		sink(os.Args[2:])
	case "txn":
		txn(os.Args[2:])
	case "fleet":
		fleet(os.Args[2:])
	default:
		die("unknown mode %q", os.Args[1])
	}
}
