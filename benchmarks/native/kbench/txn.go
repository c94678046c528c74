package main

// kbench txn: transactional produce throughput (issue 14; benchmarks/run.py row P8).
//
//	kbench txn -bootstrap B -topic T -records N -per-txn K [-size 1024] [-linger-ms 5] [-batch-bytes 1000000]
//
// One transactional producer (a fresh random transactional.id) writes N records of -size bytes to
// the topic's partitions (round robin) in transactions of K records: Begin, K asynchronous
// produces, Flush, EndTransaction(TryCommit). One such transaction runs first, unmeasured (warmup_s:
// InitProducerId, FindCoordinator, metadata, connections); records/s and transactions/s are over the
// N records after it, every commit included; commit_p50/p99_ms is the time of Flush + EndTxn per
// transaction. producer_epoch counts the warm-up transaction too (N/K + 1 under version 2). It reports which transactions version ran, from both ends: the finalized
// transaction.version in the broker's ApiVersions answer (finalized_transaction_version), and what
// the client did (add_partitions_requests is 0 and producer_epoch equals the transactions + 1 under
// version 2, where Produce v12 adds the partition and EndTxn v5 bumps the epoch each time; version 1
// sends AddPartitionsToTxn and keeps epoch 0).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keyCounter counts the requests written, by API key.
type keyCounter struct{ byKey [128]atomic.Int64 }

func (c *keyCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key >= 0 && int(key) < len(c.byKey) {
		c.byKey[key].Add(1)
	}
}

func txn(args []string) {
	fs := flag.NewFlagSet("txn", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	records := fs.Int("records", 20000, "records to send (rounded down to whole transactions)")
	perTxn := fs.Int("per-txn", 100, "records per transaction")
	size := fs.Int("size", 1024, "record value size in bytes")
	linger := fs.Int("linger-ms", 5, "linger.ms")
	batch := fs.Int("batch-bytes", 1000000, "batch.size")
	logLevel := fs.String("log", "", "franz-go's log on stderr: info or debug (empty: none)")
	_ = fs.Parse(args)
	if *perTxn <= 0 || *records < *perTxn {
		die("txn: -records must be at least -per-txn > 0")
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	counter := &keyCounter{}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.DefaultProduceTopic(*topic),
		kgo.TransactionalID("kbench-txn-" + hex.EncodeToString(rnd[:])),
		kgo.ProducerLinger(time.Duration(*linger) * time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(*batch)), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(100000),
		kgo.WithHooks(counter),
	}
	switch *logLevel {
	case "info":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	case "debug":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		die("client: %v", err)
	}
	defer cl.Close()
	ctx := context.Background()

	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kbench", "1"
	av, err := req.RequestWith(ctx, cl)
	if err != nil {
		die("ApiVersions: %v", err)
	}
	tv := int16(0)
	for _, f := range av.FinalizedFeatures {
		if f.Name == "transaction.version" {
			tv = f.MaxVersionLevel
		}
	}

	value := make([]byte, *size)
	txns := *records / *perTxn
	var failed atomic.Int64
	var firstErr atomic.Value
	var commits histogram
	one := func() {
		if err := cl.BeginTransaction(); err != nil {
			die("begin: %v", err)
		}
		for i := 0; i < *perTxn; i++ {
			cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			})
		}
		c0 := time.Now()
		if err := cl.Flush(ctx); err != nil {
			die("flush: %v", err)
		}
		if failed.Load() > 0 {
			die("%d records failed: %v", failed.Load(), firstErr.Load())
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			die("commit: %v", err)
		}
		commits.record(uint64(time.Since(c0).Microseconds()))
	}
	// One transaction before the clock starts (InitProducerId, FindCoordinator, the topic's metadata,
	// the connections): not counted, its time reported as warmup_s.
	w0 := time.Now()
	one()
	warmup := time.Since(w0).Seconds()
	commits = histogram{}
	cpu0, t0 := cpuSeconds(), time.Now()
	for t := 0; t < txns; t++ {
		one()
	}
	secs, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	_, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		die("producer id: %v", err)
	}
	n := float64(txns * *perTxn)
	emit(map[string]any{
		"records": txns * *perTxn, "transactions": txns, "records_per_txn": *perTxn, "seconds": secs, "warmup_s": warmup,
		"records_per_s": rate(n, secs), "txn_per_s": rate(float64(txns), secs),
		"mb_per_s": rate(n*float64(*size)/mib, secs), "gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, secs),
		"commit_p50_ms":                 float64(commits.percentile(0.50)) / 1000,
		"commit_p99_ms":                 float64(commits.percentile(0.99)) / 1000,
		"finalized_transaction_version": tv, "producer_epoch": epoch,
		"add_partitions_requests": counter.byKey[int16(kmsg.AddPartitionsToTxn)].Load(),
		"end_txn_requests":        counter.byKey[int16(kmsg.EndTxn)].Load(),
	})
}
