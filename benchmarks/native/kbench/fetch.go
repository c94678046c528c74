package main

// ---- fetch: a raw Fetch loop that measures the broker's serving, not the client's decoding -----
//
//	kbench fetch -bootstrap B -topic T -partitions P [-clients C (default P)] [-records N (0: to the
//	             high watermarks)] [-max-bytes 52428800] [-partition-max-bytes 8388608] [-max-wait-ms 500]
//	             [-fetch-version 12]
//
// Why: `kbench consume` (franz-go consumers) decodes every record batch it is sent: CRC-32C,
// decompression, one record object per record. On the generator's one core that costs more than a
// broker serving the same bytes by sendfile, so P3 measured the client (issue 17, "P3 is bound by
// the generator"). A broker's work for a consumer ends when the bytes of the log are on the socket;
// what the consumer does with them after is not the broker's, so this mode does the least a client
// must: read each response and walk the record-batch headers to learn the next fetch offset.
//
// How: C hand-rolled TCP connections (not kgo.Client.Broker(id).Request), each writing
// kmsg.FetchRequest frames and reading the responses into one receive buffer reused for the whole
// run, parsed in place by kmsg.FetchResponse.ReadFrom (which keeps sub-slices of the buffer: the
// record bytes are not copied). franz-go's request path reads every response into a freshly
// allocated buffer (tens of MiB per response here), whose zeroing and garbage collection would be
// a second pass over every byte on the generator's core; reading into a reused buffer leaves the
// one copy no TCP client avoids (kernel to user). A kgo.Client is still used for what is not
// measured: bootstrap, ApiVersions (the Fetch version must be in the broker's range) and Metadata
// (the partitions' leaders, and topic ids for Fetch v13+).
//
// One request in flight per connection, as a Kafka consumer has one fetch in flight per broker:
// the next fetch offset is only known from the previous response, so a connection cannot pipeline
// without guessing. C connections (default: one per partition, as P3's C consumers) keep the
// broker busy: while one connection reads a response, the others' requests wait at the broker.
//
// Fetch v12 by default (flexible, topic names): Kafka 4.3 (v4-v18), kbroker (v4-v18) and `kbench
// sink` (v4-v12) all accept it; -fetch-version 13..18 sends topic ids from Metadata instead. Every
// request is a full fetch (no fetch session: SessionEpoch -1) of the connection's partitions not
// yet at their high watermark, read_uncommitted, MinBytes 1, MaxWait -max-wait-ms (the consumer's
// fetch.max.wait.ms, 500). MaxBytes 50 MiB and PartitionMaxBytes 8 MiB by default: the consumer's
// fetch.max.bytes, and 8x its max.partition.fetch.bytes (1 MiB) so a response carries more bytes
// per round trip (both brokers honour the same limits; `fetch_responses` and `fetch_response_mib`
// let a reader compare what each sent per response).
//
// Offsets come from the record-batch headers only (walkBatches): baseOffset (int64, at 0),
// batchLength (int32, at 8: the bytes after it), lastOffsetDelta (int32, at 23); the next fetch
// offset is baseOffset + lastOffsetDelta + 1 of the last whole batch, and each whole batch counts
// lastOffsetDelta + 1 records. No CRC check, no record is decoded. A trailing partial batch (a
// broker may cut the last batch at the byte limit) is ignored and fetched again from its start by
// the next request. The bytes counted (`bytes`, `mb_per_s`) are those of the whole batches: the log
// bytes the broker served, batch and record headers included (for 1 KiB records about 1.5% more
// than `kbench consume`'s key+value bytes).

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchWalk is what the record-batch headers of one partition's bytes say.
type batchWalk struct {
	records int64 // lastOffsetDelta + 1, summed over the whole batches
	bytes   int64 // bytes of the whole batches
	next    int64 // baseOffset + lastOffsetDelta + 1 of the last whole batch; -1 if there is none
	partial int   // bytes of a trailing partial batch, ignored (refetched)
}

// Record-batch (magic 2) header offsets: baseOffset int64, batchLength int32, partitionLeaderEpoch
// int32, magic int8, crc int32, attributes int16, lastOffsetDelta int32.
const (
	batchLengthAt     = 8
	lastOffsetDeltaAt = 23
	batchHeaderMin    = lastOffsetDeltaAt + 4 // 27: enough to read lastOffsetDelta
)

// walkBatches walks the batch headers of b without decoding records or checking CRCs.
func walkBatches(b []byte) batchWalk {
	w := batchWalk{next: -1}
	for len(b) > 0 {
		if len(b) < batchHeaderMin {
			w.partial = len(b)
			break
		}
		size := 12 + int64(int32(binary.BigEndian.Uint32(b[batchLengthAt:])))
		if size < batchHeaderMin || size > int64(len(b)) {
			w.partial = len(b)
			break
		}
		base := int64(binary.BigEndian.Uint64(b))
		delta := int64(int32(binary.BigEndian.Uint32(b[lastOffsetDeltaAt:])))
		w.records += delta + 1
		w.bytes += size
		w.next = base + delta + 1
		b = b[size:]
	}
	return w
}

type fetchPart struct {
	partition int32
	offset    int64
	done      bool
	stuck     int // responses in a row that held only a partial batch of it
}

// maxStuck responses in a row with only a partial batch for a partition mean it never gets a
// whole one (a batch above -partition-max-bytes on a broker that does not return the first batch
// whole, KIP-74): reported rather than fetched forever.
const maxStuck = 64

type fetchTotals struct {
	records, bytes, responses, responseBytes atomic.Int64
	partial, partialBytes                    atomic.Int64 // trailing partial batches, ignored
}

// fetcher is one connection to a partition leader, fetching its share of the partitions.
type fetcher struct {
	conn     net.Conn
	version  int16
	topic    string
	topicID  [16]byte
	parts    []*fetchPart
	maxBytes int32
	partMax  int32
	maxWait  int32
	buf      []byte
	req      []byte
	corr     int32
	turn     int // the partition the next request lists first (rotated, as a fetch session does)
}

func (f *fetcher) request(formatter *kmsg.RequestFormatter) (bool, []byte) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(f.version)
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, f.maxWait, 1, f.maxBytes
	req.IsolationLevel, req.SessionID, req.SessionEpoch = 0, 0, -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = f.topic, f.topicID
	f.turn++
	for i := range f.parts {
		p := f.parts[(f.turn+i)%len(f.parts)]
		if p.done {
			continue
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.FetchOffset, rp.LogStartOffset = p.partition, -1, p.offset, -1
		rp.PartitionMaxBytes = f.partMax
		t.Partitions = append(t.Partitions, rp)
	}
	if len(t.Partitions) == 0 {
		return false, nil
	}
	req.Topics = append(req.Topics, t)
	f.corr++
	f.req = formatter.AppendRequest(f.req[:0], req, f.corr)
	return true, f.req
}

// roundTrip sends one Fetch and walks its response; false when every partition is done.
func (f *fetcher) roundTrip(formatter *kmsg.RequestFormatter, tot *fetchTotals) (bool, error) {
	more, frame := f.request(formatter)
	if !more {
		return false, nil
	}
	if _, err := f.conn.Write(frame); err != nil {
		return false, err
	}
	var size [4]byte
	if _, err := io.ReadFull(f.conn, size[:]); err != nil {
		return false, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if n > cap(f.buf) {
		f.buf = make([]byte, n+n/4)
	}
	body := f.buf[:n]
	if _, err := io.ReadFull(f.conn, body); err != nil {
		return false, err
	}
	if n < 5 || int32(binary.BigEndian.Uint32(body)) != f.corr {
		return false, errors.New("response out of order")
	}
	body = body[4:]
	if f.version >= 12 { // response header v1: tagged fields
		count, k := binary.Uvarint(body)
		body = body[k:]
		for i := uint64(0); i < count; i++ {
			_, k = binary.Uvarint(body)
			l, k2 := binary.Uvarint(body[k:])
			body = body[k+k2+int(l):]
		}
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(f.version)
	if err := resp.ReadFrom(body); err != nil {
		return false, fmt.Errorf("fetch response v%d: %w", f.version, err)
	}
	if resp.ErrorCode != 0 {
		return false, fmt.Errorf("fetch error code %d", resp.ErrorCode)
	}
	tot.responses.Add(1)
	tot.responseBytes.Add(int64(4 + n))
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if rp.ErrorCode != 0 {
				return false, fmt.Errorf("partition %d: error code %d", rp.Partition, rp.ErrorCode)
			}
			var p *fetchPart
			for _, q := range f.parts {
				if q.partition == rp.Partition {
					p = q
				}
			}
			if p == nil {
				return false, fmt.Errorf("partition %d not asked for", rp.Partition)
			}
			w := walkBatches(rp.RecordBatches)
			if w.next > p.offset {
				p.offset, p.stuck = w.next, 0
			} else if w.partial > 0 && w.records == 0 {
				// Only a partial batch: a broker cuts a later partition of a response at its byte
				// limit (only the first gets a whole batch above the limit): fetched again, listed
				// first next time or after.
				if p.stuck++; p.stuck > maxStuck {
					return false, fmt.Errorf("partition %d: no whole batch at offset %d in %d responses (raise -partition-max-bytes)",
						rp.Partition, p.offset, p.stuck)
				}
			}
			if w.partial > 0 {
				tot.partial.Add(1)
				tot.partialBytes.Add(int64(w.partial))
			}
			tot.records.Add(w.records)
			tot.bytes.Add(w.bytes)
			if p.offset >= rp.HighWatermark {
				p.done = true
			}
		}
	}
	return true, nil
}

func fetchMode(args []string) {
	fs := flag.NewFlagSet("fetch", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "partitions of the topic, read from offset 0")
	clients := fs.Int("clients", 0, "connections, partitions dealt round robin (0: one per partition)")
	records := fs.Int64("records", 0, "stop after this many records in total (0: at every high watermark)")
	maxBytes := fs.Int("max-bytes", 50*mib, "Fetch MaxBytes (the consumer's fetch.max.bytes)")
	partMax := fs.Int("partition-max-bytes", 8*mib, "Fetch PartitionMaxBytes (max.partition.fetch.bytes)")
	maxWait := fs.Int("max-wait-ms", 500, "Fetch MaxWaitMillis (fetch.max.wait.ms)")
	version := fs.Int("fetch-version", 12, "Fetch version: 4-12 topic names, 13+ topic ids")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after")
	_ = fs.Parse(args)
	if *clients <= 0 || *clients > *partitions {
		*clients = *partitions
	}
	cpu0, t0 := cpuSeconds(), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// Not measured: versions, leaders, topic id, through a kgo.Client.
	cl := versionedClient(ctx, *bootstrap, "Fetch", 1, *version, 4, int(kmsg.NewPtrFetchRequest().MaxVersion()))
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
	leader := map[int32]int32{}
	for _, p := range meta.Topics[0].Partitions {
		leader[p.Partition] = p.Leader
	}

	// Client c fetches partitions c, c+C, ...; one connection per (client, leader).
	var fetchers []*fetcher
	for c := 0; c < *clients; c++ {
		byLeader := map[int32]*fetcher{}
		for p := c; p < *partitions; p += *clients {
			l, ok := leader[int32(p)]
			if !ok {
				die("partition %d of %s has no leader in the metadata", p, *topic)
			}
			f := byLeader[l]
			if f == nil {
				conn, err := net.Dial("tcp", addr[l])
				if err != nil {
					die("connect to %s: %v", addr[l], err)
				}
				f = &fetcher{conn: conn, version: int16(*version), topic: *topic, topicID: meta.Topics[0].TopicID,
					maxBytes: int32(*maxBytes), partMax: int32(*partMax), maxWait: int32(*maxWait)}
				byLeader[l] = f
				fetchers = append(fetchers, f)
			}
			f.parts = append(f.parts, &fetchPart{partition: int32(p)})
		}
	}

	var tot fetchTotals
	var firstErr atomic.Value
	var stop atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for _, f := range fetchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.conn.Close()
			formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("kbench"))
			for !stop.Load() && ctx.Err() == nil {
				more, err := f.roundTrip(formatter, &tot)
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					stop.Store(true)
					return
				}
				if !more || (*records > 0 && tot.records.Load() >= *records) {
					break
				}
			}
			if *records > 0 && tot.records.Load() >= *records {
				stop.Store(true)
			}
		}()
	}
	go func() { <-ctx.Done(); stop.Store(true) }()
	wg.Wait()
	end := time.Now()
	cpu := cpuSeconds() - cpu0
	if e := firstErr.Load(); e != nil {
		die("fetch: %v", e)
	}
	if *records > 0 && tot.records.Load() < *records {
		die("read %d of %d records (every partition at its high watermark, or the timeout)", tot.records.Load(), *records)
	}
	secs := end.Sub(start).Seconds()
	emit(map[string]any{
		"records": tot.records.Load(), "bytes": tot.bytes.Load(), "seconds": secs,
		"seconds_with_connect": end.Sub(t0).Seconds(),
		"records_per_s":        rate(float64(tot.records.Load()), secs), "mb_per_s": rate(float64(tot.bytes.Load())/mib, secs),
		"clients": *clients, "connections": len(fetchers), "partitions": *partitions,
		"fetch_version": *version, "max_bytes": *maxBytes, "partition_max_bytes": *partMax,
		"partial_batches": tot.partial.Load(), "partial_batch_mib": float64(tot.partialBytes.Load()) / mib,
		"fetch_responses": tot.responses.Load(), "fetch_response_mib": float64(tot.responseBytes.Load()) / mib,
		"gen_cpu_s": cpu, "gen_cpu_util": rate(cpu, end.Sub(t0).Seconds()),
	})
}

// versionedClient is the unmeasured set-up of the raw modes (fetch, produce-raw): a kgo.Client on the
// bootstrap servers, and the end of the run unless the broker serves API `apiKey` at `version` and
// `version` is within [minVersion, maxVersion] (what the mode and kmsg can encode).
func versionedClient(ctx context.Context, bootstrap, name string, apiKey int16, version, minVersion, maxVersion int) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		die("client: %v", err)
	}
	apiResp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		die("api versions: %v", err)
	}
	inRange := false
	for _, k := range apiResp.ApiKeys {
		if k.ApiKey == apiKey && int16(version) >= k.MinVersion && int16(version) <= k.MaxVersion {
			inRange = true
		}
	}
	if !inRange || version < minVersion || version > maxVersion {
		die("%s v%d is not supported by the broker (or kmsg)", name, version)
	}
	return cl
}
