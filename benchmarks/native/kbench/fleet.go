package main

// kbench fleet: many producers, each at a small fixed rate (issue 17's connections sweep,
// benchmarks/bench_sweep.py).
//
//	kbench fleet -bootstrap B -topic T -clients N -rate R -seconds S [-warmup 3] [-size 1024] [-acks 1]
//
// N independent franz-go clients (each its own connections to the broker: franz-go keeps one for
// metadata and one for produce requests per broker) each send R records/s of -size bytes, linger 0,
// round robin over the topic's partitions, on a fixed schedule: record i of client c is due at
// start + (c/N + i)/R, so the N clients are spread evenly over each 1/R interval rather than firing
// together. The latency of a record is the time its acknowledgement arrived minus the time it was
// due (free of coordinated omission, as kbench e2e): a client blocked behind a slow broker is
// charged, not silently slowed down. The first -warmup seconds (connections, metadata) are sent at
// the same rate and not measured. records_per_s and mb_per_s are the acknowledged records that
// were due in the measured window, over its length; failed counts records the broker refused.
//
// Before the schedule starts, every client connects and has one record acknowledged (ProduceSync:
// metadata, the produce connection, the idempotent producer's id), at most -connect-concurrency at a
// time; the time it took is connect_s, and those records are not counted. Without this phase (-connect-
// concurrency 0) all N clients open their ~2N connections within a tenth of a second: both brokers'
// listen queues (socket.listen.backlog.size, 50 by Kafka's default) overflow, the kernel drops the
// SYNs and handshakes it cannot queue, and the clients retry after 1, 3, 7 s (TCP's SYN backoff).
// That storm, not the steady cost of N connections, made the 1,000-client p99 (6.7 s kbroker, 4.3 s
// Kafka; thousands of ListenOverflows on both, benchmarks/bench_sweep.py records them). The sweep
// asks what N connections cost once they are open; how a broker absorbs a storm is another row.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fleet(args []string) {
	fs := flag.NewFlagSet("fleet", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	clients := fs.Int("clients", 10, "producer clients, each with its own connections")
	perSec := fs.Float64("rate", 10, "records per second per client")
	seconds := fs.Float64("seconds", 5, "measured seconds")
	warmup := fs.Float64("warmup", 3, "seconds sent at the same rate first, not measured")
	size := fs.Int("size", 1024, "record value size in bytes")
	acks := fs.String("acks", "1", "0, 1 or all")
	connectConcurrency := fs.Int("connect-concurrency", 25, "clients connecting at once before the schedule; 0: none, all at the first record")
	_ = fs.Parse(args)
	if *clients <= 0 || *perSec <= 0 {
		die("fleet: -clients and -rate must be positive")
	}
	perClient := int(*perSec * (*warmup + *seconds))
	interval := float64(time.Second) / *perSec
	cls := make([]*kgo.Client, *clients)
	for c := range cls {
		cl, err := kgo.NewClient(append([]kgo.Opt{
			kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.DefaultProduceTopic(*topic),
			kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		}, acksOpt(*acks)...)...)
		if err != nil {
			die("client %d: %v", c, err)
		}
		cls[c] = cl
	}
	value := make([]byte, *size)
	ctx := context.Background()
	connectS := 0.0
	if *connectConcurrency > 0 {
		connectS = connectAll(ctx, cls, value, *connectConcurrency)
	}
	var lat histogram // µs, measured records only
	var latMu sync.Mutex
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	cpu0 := cpuSeconds()
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	measureTo := measureFrom.Add(time.Duration(*seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for c, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offset := float64(c) / float64(*clients)
			for i := 0; i < perClient; i++ {
				due := start.Add(time.Duration((offset + float64(i)) * interval))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				measured := !due.Before(measureFrom) && due.Before(measureTo)
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						return
					}
					if measured {
						us := uint64(max(0, time.Since(due).Microseconds()))
						latMu.Lock()
						lat.record(us)
						latMu.Unlock()
						acked.Add(1)
					}
				})
			}
			_ = cl.Flush(ctx)
		}()
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	for _, cl := range cls {
		cl.Close()
	}
	ms := func(us uint64) float64 { return float64(us) / 1000 }
	n := float64(acked.Load())
	if errText, _ := firstErr.Load().(string); errText != "" {
		fmt.Fprintf(os.Stderr, "kbench fleet: %d records failed, the first: %s\n", failed.Load(), errText)
	}
	emit(map[string]any{
		"clients": *clients, "rate_per_client": *perSec, "offered_records_per_s": *perSec * float64(*clients),
		"records": acked.Load(), "failed": failed.Load(),
		"records_per_s": rate(n, *seconds), "mb_per_s": rate(n*float64(*size)/mib, *seconds),
		"p50_latency_ms": ms(lat.percentile(0.50)), "p99_latency_ms": ms(lat.percentile(0.99)),
		"p999_latency_ms": ms(lat.percentile(0.999)), "max_latency_ms": ms(lat.max),
		"gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, wall), "seconds": wall,
		"connect_s": connectS, "connect_concurrency": *connectConcurrency,
	})
}

// connectAll has one record of every client acknowledged, at most `concurrency` clients at a time;
// the seconds it took. A client that cannot produce its first record ends the run.
func connectAll(ctx context.Context, cls []*kgo.Client, value []byte, concurrency int) float64 {
	t0 := time.Now()
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for c, cl := range cls {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				firstErr.CompareAndSwap(nil, fmt.Sprintf("client %d: %v", c, err))
			}
		}()
	}
	wg.Wait()
	if e, _ := firstErr.Load().(string); e != "" {
		die("fleet: connecting the clients: %s", e)
	}
	return time.Since(t0).Seconds()
}
