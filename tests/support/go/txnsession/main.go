// txnsession: one member of a franz-go consume-transform-produce pipeline on kgo.GroupTransactSession
// (issue 14), for tests/transactions/test_franz_group_transact.py.
//
// Several of these run in one consumer group (the classic protocol, franz-go's default cooperative
// sticky balancer), each with its own transactional id. A member polls up to -poll-max records from
// the input topic, begins a transaction, produces one output record per input record to the same
// partition of the output topic (key: the input value, value: the input value and the member's
// transactional id), waits -hold-ms (the window in which a test kills it mid-transaction), then ends
// the transaction with End(ctx, kgo.TryCommit): the session commits the group's offsets inside the
// transaction (TxnOffsetCommit) and commits, or aborts if the group rebalanced meanwhile and rewinds
// to the committed offsets. Every -abort-every-th transaction is ended with kgo.TryAbort on purpose
// (its records are written, then aborted, then consumed and produced again).
//
// Every step is one JSON line on stdout (os.Stdout is unbuffered): "ready" (the finalized
// transaction.version from an ApiVersions request), "assigned" / "revoked" / "lost", "produced"
// (records are in the open transaction), "end" (wanted commit, committed, records), and "exit" with
// the totals, the producer id and epoch, and how many AddPartitionsToTxn / AddOffsetsToTxn / EndTxn
// / TxnOffsetCommit requests the client wrote (transactions version 2 sends no AddPartitionsToTxn and
// no AddOffsetsToTxn, and EndTxn v5 bumps the epoch once per transaction). SIGTERM stops it between
// transactions; it leaves the group and exits 0. A failed End (not retryable by franz-go's contract)
// exits 2.
//
//	txnsession -bootstrap B -group G -in T -out T -txn-id ID [-poll-max 20] [-abort-every 4]
//	           [-hold-ms 100] [-session-ms 6000] [-txn-timeout-ms 60000] [-log info]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var outMu sync.Mutex

func emit(event string, fields map[string]any) {
	fields["event"] = event
	fields["t"] = float64(time.Now().UnixNano()) / 1e9
	b, _ := json.Marshal(fields)
	outMu.Lock()
	defer outMu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}

func die(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "txnsession: "+format+"\n", args...)
	os.Exit(code)
}

// requestCounter counts the requests the client wrote, by API key (a kgo.HookBrokerWrite).
type requestCounter struct{ byKey [128]atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key >= 0 && int(key) < len(c.byKey) {
		c.byKey[key].Add(1)
	}
}

func (c *requestCounter) get(k kmsg.Key) int64 { return c.byKey[int16(k)].Load() }

// finalizedTransactionVersion asks one broker for ApiVersions and returns the finalized level of
// transaction.version (0 when the feature is not finalized) and the finalized-features epoch.
func finalizedTransactionVersion(ctx context.Context, cl *kgo.Client) (int16, int64, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "txnsession", "1"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel, resp.FinalizedFeaturesEpoch, nil
		}
	}
	return 0, resp.FinalizedFeaturesEpoch, nil
}

func partitionsOf(m map[string][]int32) map[string][]int32 {
	out := make(map[string][]int32, len(m))
	for t, ps := range m {
		out[t] = append([]int32(nil), ps...)
	}
	return out
}

func main() {
	fs := flag.NewFlagSet("txnsession", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	group := fs.String("group", "", "consumer group")
	in := fs.String("in", "", "input topic")
	out := fs.String("out", "", "output topic (at least as many partitions as the input)")
	txnID := fs.String("txn-id", "", "transactional id of this member")
	pollMax := fs.Int("poll-max", 20, "records per transaction at most")
	abortEvery := fs.Int("abort-every", 4, "end every n-th transaction with TryAbort on purpose (0: never)")
	holdMs := fs.Int("hold-ms", 100, "pause between producing and ending a transaction")
	sessionMs := fs.Int("session-ms", 6000, "group session.timeout.ms")
	txnTimeoutMs := fs.Int("txn-timeout-ms", 60000, "transaction.timeout.ms")
	logLevel := fs.String("log", "", "franz-go log level on stderr (debug, info, warn, error; empty: none)")
	_ = fs.Parse(os.Args[1:])
	if *bootstrap == "" || *group == "" || *in == "" || *out == "" || *txnID == "" {
		die(1, "-bootstrap, -group, -in, -out and -txn-id are required")
	}

	counter := &requestCounter{}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.TransactionalID(*txnID),
		kgo.TransactionTimeout(time.Duration(*txnTimeoutMs) * time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(time.Duration(*sessionMs) * time.Millisecond),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithHooks(counter),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("assigned", map[string]any{"partitions": partitionsOf(m)})
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("revoked", map[string]any{"partitions": partitionsOf(m)})
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("lost", map[string]any{"partitions": partitionsOf(m)})
		}),
	}
	switch *logLevel {
	case "debug":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	case "info":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	case "warn":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)))
	case "error":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelError, nil)))
	}
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		die(1, "session: %v", err)
	}

	// SIGTERM: stop polling; a transaction in progress is ended first (it never begins mid-poll).
	pollCtx, stop := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; stop() }()

	ctx := context.Background()
	tv, featuresEpoch, err := finalizedTransactionVersion(ctx, s.Client())
	if err != nil {
		die(1, "ApiVersions: %v", err)
	}
	emit("ready", map[string]any{"txn_id": *txnID, "transaction_version": tv, "finalized_features_epoch": featuresEpoch})

	var txns, commits, aborts, deliberate, consumed int64
	for pollCtx.Err() == nil {
		fetches := s.PollRecords(pollCtx, *pollMax)
		if fetches.IsClientClosed() || pollCtx.Err() != nil {
			break
		}
		for _, fe := range fetches.Errors() {
			fmt.Fprintf(os.Stderr, "txnsession: fetch %s/%d: %v\n", fe.Topic, fe.Partition, fe.Err)
		}
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			die(2, "begin: %v", err)
		}
		txns++
		wantCommit := *abortEvery <= 0 || txns%int64(*abortEvery) != 0
		var produceErr atomic.Value
		for _, r := range records {
			o := &kgo.Record{Topic: *out, Partition: r.Partition, Key: r.Value,
				Value: []byte(string(r.Value) + "|" + *txnID)}
			s.Produce(ctx, o, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErr.CompareAndSwap(nil, err.Error())
				}
			})
		}
		emit("produced", map[string]any{"txn": txns, "records": len(records)})
		time.Sleep(time.Duration(*holdMs) * time.Millisecond)
		if e := produceErr.Load(); e != nil && wantCommit {
			// A record that failed cannot be committed; End flushes and commits the rest otherwise.
			fmt.Fprintf(os.Stderr, "txnsession: produce failed, aborting: %v\n", e)
			wantCommit = false
		}
		committed, err := s.End(ctx, kgo.TransactionEndTry(wantCommit))
		fields := map[string]any{"txn": txns, "want_commit": wantCommit, "committed": committed, "records": len(records)}
		if err != nil {
			fields["err"] = err.Error()
			emit("end", fields)
			die(2, "end: %v", err)
		}
		emit("end", fields)
		switch {
		case committed:
			commits++
			consumed += int64(len(records))
		case wantCommit:
			aborts++ // the session aborted: a rebalance or a failed offset commit
		default:
			aborts++
			deliberate++
		}
	}
	id, epoch, err := s.Client().ProducerID(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "txnsession: producer id: %v\n", err)
	}
	emit("exit", map[string]any{
		"txn_id": *txnID, "transactions": txns, "commits": commits, "aborts": aborts,
		"deliberate_aborts": deliberate, "records_committed": consumed,
		"producer_id": id, "producer_epoch": epoch,
		"init_producer_id_requests":  counter.get(kmsg.InitProducerID),
		"add_partitions_requests":    counter.get(kmsg.AddPartitionsToTxn),
		"add_offsets_requests":       counter.get(kmsg.AddOffsetsToTxn),
		"txn_offset_commit_requests": counter.get(kmsg.TxnOffsetCommit),
		"end_txn_requests":           counter.get(kmsg.EndTxn),
	})
	s.Close()
}
