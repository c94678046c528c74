package main

// ---- produce-raw: pre-encoded Produce requests that measure the broker's writes, not the client's -
//
//	kbench produce-raw -bootstrap B -topic T [-records N | -seconds S] [-size 1024] [-batch-bytes 131072]
//	                   [-acks 1|all|-1] [-connections 1 (per leader)] [-in-flight 5] [-produce-version 9]
//	                   [-partitions P (0: all of the topic's)] [-idempotent] [-allow-errors] [-timeout 10m]
//
// Why: `kbench produce` (a franz-go producer) builds every batch record by record, checksums it and
// runs the producer's buffering and callbacks: at P7's 605 MB/s that took 0.80 of a core, on a
// 2-core machine whose two cores were the two kbroker nodes' (docs/benchmarks.md, "P7 on a quiet
// machine"), so P7 measured the generator sharing the brokers' cores. A broker's work for a produce
// starts when the request's bytes arrive: parse the request, check each batch's CRC and records,
// assign offsets, append to the log, answer. How a client batched and encoded the records is the
// client's work and not the broker's, so this mode does the least a producer must: send well-formed
// Produce requests and read their answers, with every byte encoded once before the run.
//
// What is sent: one record batch per partition per request, magic 2, no compression, `N` records of
// -size bytes (zero-filled values, no key, no headers: what `kbench produce` sends), N the most
// whose batch fits in -batch-bytes (126 records of 1 KiB in 128 KiB, as franz-go's batch.size fills
// a batch). The batch's CRC-32C (Castagnoli) is valid: the broker checks it as it checks any
// client's. Base offset 0, as clients send it (the broker assigns the offsets). By default not
// idempotent: producerId -1, epoch -1, base sequence -1, as `kbench produce` with acks=1 (franz-go
// and the Java producer turn idempotence off for acks=1), so the broker keeps no producer state.
// -idempotent gets a producer id from InitProducerId (through the kgo.Client) and sends each
// partition's batches with consecutive base sequences (0, N, 2N, ...; at most -in-flight per
// partition unanswered, within the 5 a broker tracks), as an idempotent producer does; a
// sequence error (or any other) fails the run, which cannot resend (-allow-errors is refused).
//
// Timestamps: the batch's firstTimestamp and maxTimestamp (record timestamp deltas are 0) are the
// wall clock's millisecond when the request is written, as a client stamps its records, so the
// brokers' time indexes and timestamp checks see what they would from a client.
//
// The CRC without a pass over the batch: timestamps and base sequence are covered by the CRC, but
// CRC-32C is affine over GF(2): for messages of one length, crc(a) ^ crc(b) = crc(a ^ b) ^ crc(0),
// so changing bytes at a fixed place changes the CRC by a term that depends only on the changed
// bits and on how many bytes follow them. crcPatch precomputes that term for each byte of a field
// and each of its 256 values (from one CRC per bit over a zero batch, at start); a new timestamp or
// sequence then costs 16 or 4 table lookups per batch instead of a CRC over 128 KiB.
//
// How: a kgo.Client for what is not measured (bootstrap, ApiVersions: the Produce version must be in
// the broker's range, Metadata: each partition's leader), then per leader broker -connections
// hand-rolled TCP connections, the leader's partitions dealt over them round robin. Each connection
// has its request encoded once by kmsg (one batch per partition); per request only the correlation
// id (and, on a new millisecond, the timestamps and CRC) is patched before one write. Up to
// -in-flight requests are pipelined per connection (Kafka answers a connection's requests in order;
// the producer's max.in.flight.requests.per.connection is 5): a writer goroutine sends while a reader
// goroutine reads the answers into one reused buffer and decodes them with kmsg.
//
// Counted: the records and batch bytes of each partition answered with error code 0 (acknowledged:
// acks=1 by the leader, acks=all by the in-sync replicas); any other error code counts in `errors`
// and fails the run (exit 1, after the JSON line) unless -allow-errors, with which the errored
// records are sent again. `mb_per_s` counts record values (records x -size), as `kbench produce`
// does; `bytes` are the acknowledged batch bytes. p50/p99/max_latency_ms: each record's
// send-to-acknowledgement time, i.e. the time from writing its request to reading its answer (all
// records of a request share it). -records N stops sending once N records are sent or in flight;
// the last request may take the count up to one request's records past N (`records` is what was
// acknowledged).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record-batch (magic 2) header offsets past lastOffsetDelta (see fetch.go for the first ones).
const (
	batchCrcAt       = 17 // int32 CRC-32C of attributes..end
	batchAttrsAt     = 21 // int16 attributes: the CRC covers from here
	firstTimestampAt = 27 // int64
	maxTimestampAt   = 35 // int64
	producerIDAt     = 43 // int64, then producerEpoch int16
	baseSequenceAt   = 53 // int32
	numRecordsAt     = 57 // int32
	batchHeaderSize  = 61
)

// rawBatch encodes one magic-2 batch at base offset 0 of as many records of size bytes (zero
// values, no key, no headers, timestamp and offset deltas as a client writes them) as fit in
// batchBytes (at least one), stamped with timestamp ms and a valid CRC-32C. Returns it and its
// record count.
func rawBatch(size, batchBytes int, ms int64) ([]byte, int) {
	return rawBatchOf(size, batchBytes, ms, -1, -1, -1)
}

// rawBatchOf is rawBatch for a producer id, epoch and base sequence (an idempotent producer's).
func rawBatchOf(size, batchBytes int, ms int64, producerID int64, epoch int16, seq int32) ([]byte, int) {
	value := make([]byte, size)
	var recs []byte
	n := 0
	for {
		r := kmsg.Record{OffsetDelta: int32(n), Value: value} // a nil Key is written as length -1
		r.Length = int32(len(r.AppendTo(nil)) - 1)            // the rest after a one-byte Length of 0
		enc := r.AppendTo(nil)
		if n > 0 && batchHeaderSize+len(recs)+len(enc) > batchBytes {
			break
		}
		recs = append(recs, enc...)
		n++
	}
	rb := kmsg.RecordBatch{FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: ms, MaxTimestamp: ms, ProducerID: producerID, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(n), Records: recs}
	out := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(out[batchLengthAt:], uint32(len(out)-12)) // AppendTo writes Length and CRC as given
	binary.BigEndian.PutUint32(out[batchCrcAt:], crc32.Checksum(out[batchAttrsAt:], castagnoli))
	return out, n
}

// crcPatch rewrites a field of batches of one length and updates their CRC by table lookups: for
// byte k of the field and value v, tables[k][v] is what v at that byte, with the rest of the CRC'd
// bytes zero, adds to the CRC (crc(zeros with v there) ^ crc(zeros)).
type crcPatch struct {
	at     int // the field's offset in the batch
	tables [][256]uint32
}

func newCRCPatch(batchLen, at, width int) *crcPatch {
	zero := make([]byte, batchLen-batchAttrsAt)
	z := crc32.Checksum(zero, castagnoli)
	p := &crcPatch{at: at, tables: make([][256]uint32, width)}
	for k := 0; k < width; k++ {
		var cols [8]uint32
		for j := 0; j < 8; j++ {
			zero[at-batchAttrsAt+k] = 1 << j
			cols[j] = crc32.Checksum(zero, castagnoli) ^ z
		}
		zero[at-batchAttrsAt+k] = 0
		for v := 1; v < 256; v++ {
			for j := 0; j < 8; j++ {
				if v&(1<<j) != 0 {
					p.tables[k][v] ^= cols[j]
				}
			}
		}
	}
	return p
}

// write puts val into the field of batch b and updates b's CRC to match.
func (p *crcPatch) write(b []byte, val []byte) {
	crc := binary.BigEndian.Uint32(b[batchCrcAt:])
	for k, v := range val {
		crc ^= p.tables[k][b[p.at+k]^v]
		b[p.at+k] = v
	}
	binary.BigEndian.PutUint32(b[batchCrcAt:], crc)
}

// batchPatches are the two fields produce-raw changes per request: firstTimestamp and
// maxTimestamp (16 contiguous bytes), and the base sequence.
type batchPatches struct{ timestamps, sequence *crcPatch }

func newBatchPatches(batchLen int) batchPatches {
	return batchPatches{timestamps: newCRCPatch(batchLen, firstTimestampAt, 16),
		sequence: newCRCPatch(batchLen, baseSequenceAt, 4)}
}

func (bp batchPatches) setTimestamps(b []byte, ms int64) {
	var v [16]byte
	binary.BigEndian.PutUint64(v[:], uint64(ms))
	binary.BigEndian.PutUint64(v[8:], uint64(ms))
	bp.timestamps.write(b, v[:])
}

func (bp batchPatches) setSequence(b []byte, seq int32) {
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], uint32(seq))
	bp.sequence.write(b, v[:])
}

// rawProduceFrame encodes the Produce request of one connection: the batch once per partition,
// correlation id 0. Returns the frame (size prefix included) and where each batch copy starts.
func rawProduceFrame(version int16, acks int16, timeoutMs int32, topic string, topicID [16]byte,
	parts []int32, batch []byte) ([]byte, []int) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks, req.TimeoutMillis = acks, timeoutMs
	t := kmsg.NewProduceRequestTopic()
	t.Topic, t.TopicID = topic, topicID
	for _, p := range parts {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, batch
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("kbench")).AppendRequest(nil, req, 0)
	var at []int
	for from := 0; len(at) < len(parts); {
		i := bytes.Index(frame[from:], batch)
		if i < 0 {
			panic("batch not found in its encoded request")
		}
		at = append(at, from+i)
		from += i + len(batch)
	}
	return frame, at
}

// corrAt is the correlation id's place in a request frame: size int32, api key int16, version int16.
const corrAt = 8

type rawTotals struct {
	records, bytes, requests, errors, inFlight atomic.Int64
	codes                                      sync.Map // error code -> *atomic.Int64
}

func (t *rawTotals) countError(code int16) {
	t.errors.Add(1)
	v, _ := t.codes.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// rawConn is one connection to a partition leader, producing to its share of the partitions.
type rawConn struct {
	conn     net.Conn
	version  int16
	parts    []int32
	frame    []byte
	batchAt  []int
	perBatch int // records per batch
	batchLen int // bytes per batch
	lat      histogram
	lastMs   int64   // the timestamp stamped into frame
	seqs     []int32 // -idempotent: the next base sequence of each partition (parts' order); nil otherwise
	buf      []byte
}

type sentReq struct {
	corr int32
	at   time.Time
}

// readAnswer reads one Produce response and counts its partitions; the records of errored
// partitions are returned (to be sent again under -allow-errors).
func (c *rawConn) readAnswer(want int32, tot *rawTotals) (int64, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if n > cap(c.buf) {
		c.buf = make([]byte, n+n/4)
	}
	body := c.buf[:n]
	if _, err := io.ReadFull(c.conn, body); err != nil {
		return 0, err
	}
	if n < 4 || int32(binary.BigEndian.Uint32(body)) != want {
		return 0, errors.New("produce response out of order")
	}
	body = body[4:]
	if c.version >= 9 { // response header v1: tagged fields
		body = skipTags(body)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(c.version)
	if err := resp.ReadFrom(body); err != nil {
		return 0, fmt.Errorf("produce response v%d: %w", c.version, err)
	}
	var failed int64
	answered := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			answered++
			if p.ErrorCode != 0 {
				tot.countError(p.ErrorCode)
				failed += int64(c.perBatch)
				continue
			}
			tot.records.Add(int64(c.perBatch))
			tot.bytes.Add(int64(c.batchLen))
		}
	}
	if answered != len(c.parts) {
		for i := answered; i < len(c.parts); i++ {
			tot.countError(-2) // a partition not answered (not a Kafka code)
			failed += int64(c.perBatch)
		}
	}
	tot.requests.Add(1)
	return failed, nil
}

func skipTags(b []byte) []byte {
	count, k := binary.Uvarint(b)
	b = b[k:]
	for i := uint64(0); i < count; i++ {
		_, k = binary.Uvarint(b)
		l, k2 := binary.Uvarint(b[k:])
		b = b[k+k2+int(l):]
	}
	return b
}

func produceRaw(args []string) {
	fs := flag.NewFlagSet("produce-raw", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic (it must exist)")
	partitions := fs.Int("partitions", 0, "produce to partitions 0..P-1 (0: all of the topic's)")
	records := fs.Int64("records", 0, "stop sending once this many records are sent (0: -seconds only)")
	limit := fs.Float64("seconds", 0, "stop sending after this many seconds (0: -records only)")
	size := fs.Int("size", 1024, "record value size in bytes")
	batchBytes := fs.Int("batch-bytes", 131072, "batch size limit (batch.size): records per batch are the most that fit")
	acksFlag := fs.String("acks", "1", "1 or all (-1); 0 has no answer to count")
	perLeader := fs.Int("connections", 1, "connections per leader broker, its partitions dealt round robin")
	inFlight := fs.Int("in-flight", 5, "requests pipelined per connection (max.in.flight.requests.per.connection)")
	version := fs.Int("produce-version", 9, "Produce version: 3-12 topic names, 13 topic ids")
	timeoutMs := fs.Int("request-timeout-ms", 30000, "the request's TimeoutMillis (acks=all)")
	allowErrors := fs.Bool("allow-errors", false, "count errored partitions and send their records again instead of failing")
	idempotent := fs.Bool("idempotent", false, "an idempotent producer: InitProducerId, consecutive base sequences per partition")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after")
	_ = fs.Parse(args)
	var acks int16
	switch *acksFlag {
	case "1":
		acks = 1
	case "all", "-1":
		acks = -1
	default:
		die("produce-raw: -acks 1 or all, not %q (acks=0 has no answer to count)", *acksFlag)
	}
	if *idempotent && *allowErrors {
		die("produce-raw: -idempotent cannot resend errored batches (their sequences): no -allow-errors")
	}
	if *records <= 0 && *limit <= 0 {
		die("produce-raw: -records or -seconds")
	}
	*perLeader, *inFlight = max(1, *perLeader), max(1, *inFlight)
	cpu0, t0 := cpuSeconds(), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// Not measured: versions and leaders through a kgo.Client (as fetch.go).
	cl := versionedClient(ctx, *bootstrap, "Produce", 0, *version, 3, int(kmsg.NewPtrProduceRequest().MaxVersion()))
	producerID, epoch := int64(-1), int16(-1)
	if *idempotent {
		ireq := kmsg.NewPtrInitProducerIDRequest()
		ireq.ProducerID, ireq.ProducerEpoch = -1, -1
		iresp, err := ireq.RequestWith(ctx, cl)
		if err != nil || iresp.ErrorCode != 0 {
			die("init producer id: %v (error code %d)", err, iresp.ErrorCode)
		}
		producerID, epoch = iresp.ProducerID, iresp.ProducerEpoch
	}
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(*topic)
	mreq.Topics = append(mreq.Topics, mt)
	meta, err := mreq.RequestWith(ctx, cl)
	cl.Close()
	if err != nil {
		die("metadata: %v", err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].ErrorCode != 0 {
		die("metadata of %s: %+v", *topic, meta.Topics)
	}
	addr := map[int32]string{}
	for _, b := range meta.Brokers {
		addr[b.NodeID] = net.JoinHostPort(b.Host, fmt.Sprint(b.Port))
	}
	byLeader := map[int32][]int32{}
	count := len(meta.Topics[0].Partitions)
	if *partitions > 0 {
		count = min(count, *partitions)
	}
	for _, p := range meta.Topics[0].Partitions {
		if int(p.Partition) < count {
			if p.Leader < 0 {
				die("partition %d of %s has no leader", p.Partition, *topic)
			}
			byLeader[p.Leader] = append(byLeader[p.Leader], p.Partition)
		}
	}
	leaders := make([]int32, 0, len(byLeader))
	for l := range byLeader {
		leaders = append(leaders, l)
		sort.Slice(byLeader[l], func(i, j int) bool { return byLeader[l][i] < byLeader[l][j] })
	}
	sort.Slice(leaders, func(i, j int) bool { return leaders[i] < leaders[j] })

	now := time.Now().UnixMilli()
	seq0 := int32(-1)
	if *idempotent {
		seq0 = 0
	}
	batch, perBatch := rawBatchOf(*size, *batchBytes, now, producerID, epoch, seq0)
	patches := newBatchPatches(len(batch))
	var conns []*rawConn
	for _, l := range leaders {
		parts := byLeader[l]
		for c := 0; c < min(*perLeader, len(parts)); c++ {
			var mine []int32
			for i := c; i < len(parts); i += *perLeader {
				mine = append(mine, parts[i])
			}
			conn, err := net.Dial("tcp", addr[l])
			if err != nil {
				die("connect to %s: %v", addr[l], err)
			}
			frame, at := rawProduceFrame(int16(*version), acks, int32(*timeoutMs), *topic, meta.Topics[0].TopicID, mine, batch)
			rc := &rawConn{conn: conn, version: int16(*version), parts: mine, frame: frame,
				batchAt: at, perBatch: perBatch, batchLen: len(batch), lastMs: now}
			if *idempotent {
				rc.seqs = make([]int32, len(mine)) // the first request's batches are at sequence 0
			}
			conns = append(conns, rc)
		}
	}

	var tot rawTotals
	var reserved atomic.Int64 // records sent or in flight, less those to send again
	var stop atomic.Bool
	var firstErr atomic.Value
	fail := func(err error) {
		firstErr.CompareAndSwap(nil, err.Error())
		stop.Store(true)
	}
	start := time.Now()
	deadline := start.Add(time.Duration(*limit * float64(time.Second)))
	var wg sync.WaitGroup
	for _, c := range conns {
		perReq := int64(c.perBatch * len(c.parts))
		sent := make(chan sentReq, *inFlight) // its capacity is the in-flight limit
		wg.Add(2)
		go func() { // writer
			defer wg.Done()
			defer close(sent)
			var corr int32
			for !stop.Load() && ctx.Err() == nil {
				if *limit > 0 && time.Now().After(deadline) {
					return
				}
				if *records > 0 {
					if reserved.Add(perReq)-perReq >= *records {
						reserved.Add(-perReq)
						return
					}
				}
				corr++
				binary.BigEndian.PutUint32(c.frame[corrAt:], uint32(corr))
				at := time.Now()
				if ms := at.UnixMilli(); ms != c.lastMs {
					for _, i := range c.batchAt {
						patches.setTimestamps(c.frame[i:], ms)
					}
					c.lastMs = ms
				}
				if c.seqs != nil && corr > 1 { // the next sequences (wrapping at 2^31 as Kafka's)
					for k, i := range c.batchAt {
						c.seqs[k] = int32((int64(c.seqs[k]) + int64(c.perBatch)) % (1 << 31))
						patches.setSequence(c.frame[i:], c.seqs[k])
					}
				}
				sent <- sentReq{corr: corr, at: at} // blocks while -in-flight requests are unanswered
				if _, err := c.conn.Write(c.frame); err != nil {
					fail(fmt.Errorf("write: %w", err))
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			for s := range sent {
				failed, err := c.readAnswer(s.corr, &tot)
				if err != nil {
					if !stop.Load() {
						fail(err)
					}
					for range sent { // let the writer finish
					}
					return
				}
				c.lat.recordN(uint64(time.Since(s.at).Microseconds()), uint64(perReq-failed))
				if failed > 0 {
					if !*allowErrors {
						fail(fmt.Errorf("%d records of a request errored", failed))
					}
					reserved.Add(-failed) // sent again
				}
			}
		}()
	}
	go func() { // the timeout: stop sending, and wake readers waiting for answers that will not come
		<-ctx.Done()
		stop.Store(true)
		for _, c := range conns {
			_ = c.conn.SetDeadline(time.Now())
		}
	}()
	wg.Wait()
	end := time.Now()
	for _, c := range conns {
		c.conn.Close()
	}
	cpu := cpuSeconds() - cpu0
	var lat histogram
	for _, c := range conns {
		lat.merge(&c.lat)
	}
	secs := end.Sub(start).Seconds()
	n := float64(tot.records.Load())
	acksOut := int(acks)
	emit(map[string]any{
		"records": tot.records.Load(), "bytes": tot.bytes.Load(), "seconds": secs,
		"seconds_with_connect": end.Sub(t0).Seconds(),
		"records_per_s":        rate(n, secs), "mb_per_s": rate(n*float64(*size)/mib, secs),
		"gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, end.Sub(t0).Seconds()),
		"p50_latency_ms": float64(lat.percentile(0.50)) / 1000, "p99_latency_ms": float64(lat.percentile(0.99)) / 1000,
		"max_latency_ms": float64(lat.max) / 1000,
		"connections":    len(conns), "leaders": len(leaders), "partitions": count, "in_flight": *inFlight,
		"produce_version": *version, "acks": acksOut, "records_per_batch": perBatch, "batch_bytes": len(batch),
		"requests": tot.requests.Load(), "errors": tot.errors.Load(), "idempotent": *idempotent,
		"producer_id": producerID,
	})
	if tot.errors.Load() > 0 {
		var codes []string
		tot.codes.Range(func(k, v any) bool {
			codes = append(codes, fmt.Sprintf("%d x%d", k.(int16), v.(*atomic.Int64).Load()))
			return true
		})
		fmt.Fprintf(os.Stderr, "kbench: produce-raw: %d errored partition answers (error code x count: %s)\n",
			tot.errors.Load(), strings.Join(codes, ", "))
	}
	if e := firstErr.Load(); e != nil {
		die("produce-raw: %v", e)
	}
	if tot.errors.Load() > 0 && !*allowErrors {
		os.Exit(1)
	}
	if *records > 0 && *limit <= 0 && tot.records.Load() < *records {
		die("produce-raw: %d of %d records acknowledged before the timeout", tot.records.Load(), *records)
	}
}
