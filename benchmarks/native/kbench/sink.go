package main

// ---- sink: the trivial broker the generators' ceilings are measured against -------------------
//
// `kbench sink` speaks just enough of the Kafka protocol for kbench (franz-go) to produce to it and
// consume from it, and does nothing else: a Produce is answered at once (each partition's base
// offset advances by the batch's record count, nothing is stored or validated), a Fetch is answered
// from a preloaded buffer of identical batches (-fetch-records records of -fetch-size bytes each,
// -fetch-buffer-mib MiB of them) at the offset asked for: as many whole batches as the request's
// PartitionMaxBytes and MaxBytes allow (at least one), their base offsets patched in place (the
// CRC does not cover them), consecutive from the fetch offset, the high watermark never reached.
// What a generator reaches against it is the generator's ceiling on this machine (issue 17: "the
// same generator against a trivial sink"), beside each broker row. It is not kbroker and shares no
// code with it: Go, one goroutine per connection, franz-go's kmsg for the message codecs.
//
// APIs: ApiVersions, Metadata (the sink is node 0 and leads every partition of any topic asked
// for, -partitions each), InitProducerId, Produce (v3-v12, topic names), ListOffsets, Fetch (v4-v12).
//
// Fetch v12 (what franz-go's consumer and `kbench fetch` send it) is answered without copying the
// batches: each connection keeps its own copy of the preloaded buffer per partition of a request,
// patches the base offsets and writes the response header pieces and those buffers with one
// writev, so the sink's cost per byte is the kernel's copy, as a broker's sendfile is close to; the
// older versions go through kmsg (one copy more). Against it `kbench fetch` measures its own ceiling.

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type sinkState struct {
	host       string
	port       int32
	partitions int32
	mu         sync.Mutex
	next       map[string][]int64 // produce: the next offset of each partition
	tmpl       []byte             // fetch: identical uncompressed v2 batches, base offsets patched per response
	batchLen   int
	batchCount int64 // records per batch
}

// sinkScratch is one connection's copies of the preloaded batches, one per partition slot of a
// Fetch response, patched in place (a connection answers one request at a time).
type sinkScratch struct{ slots [][]byte }

// setFetchTemplate preloads as many copies of batch (count records) as fit in total bytes (>= 1).
func (st *sinkState) setFetchTemplate(batch []byte, count int, total int) {
	k := max(1, total/len(batch))
	st.tmpl = make([]byte, 0, k*len(batch))
	for i := 0; i < k; i++ {
		st.tmpl = append(st.tmpl, batch...)
	}
	st.batchLen, st.batchCount = len(batch), int64(count)
}

// fetchBatches returns whole batches at offset, offset+count, ... of at most limit bytes (but at
// least one batch), in the connection's copy for response slot `slot`.
func (st *sinkState) fetchBatches(sc *sinkScratch, slot int, offset int64, limit int32) []byte {
	for len(sc.slots) <= slot {
		sc.slots = append(sc.slots, nil)
	}
	if sc.slots[slot] == nil {
		sc.slots[slot] = append([]byte(nil), st.tmpl...)
	}
	buf := sc.slots[slot]
	n := min(len(buf)/st.batchLen, max(1, int(limit)/st.batchLen))
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(buf[i*st.batchLen:], uint64(offset+int64(i)*st.batchCount))
	}
	return buf[:n*st.batchLen]
}

var supported = map[int16][2]int16{
	0: {3, 12}, 1: {4, 12}, 2: {1, 7}, 3: {0, 12}, 18: {0, 4}, 22: {0, 4},
}

func sink(args []string) {
	fs := flag.NewFlagSet("sink", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	partitions := fs.Int("partitions", 4, "partitions of every topic")
	fetchRecords := fs.Int("fetch-records", 512, "records in the batch a Fetch returns per partition")
	fetchSize := fs.Int("fetch-size", 1024, "value size of those records")
	fetchBuffer := fs.Int("fetch-buffer-mib", 8, "MiB of preloaded batches: the most a partition gets per Fetch")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		die("listen: %v", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	st := &sinkState{host: addr.IP.String(), port: int32(addr.Port), partitions: int32(*partitions),
		next: map[string][]int64{}}
	st.setFetchTemplate(buildBatch(*fetchRecords, *fetchSize), *fetchRecords, *fetchBuffer*(1<<20))
	fmt.Printf("listening=%s:%d\n", st.host, st.port)
	_ = os.Stdout.Sync()
	for {
		c, err := ln.Accept()
		if err != nil {
			die("accept: %v", err)
		}
		go st.serve(c)
	}
}

// buildBatch encodes n records of size bytes (zero-filled values) as one v2 batch at offset 0.
func buildBatch(n, size int) []byte {
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{FirstOffset: 0, Magic: 2, LastOffsetDelta: int32(n - 1), FirstTimestamp: now,
		MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n),
		PartitionLeaderEpoch: -1}
	value := make([]byte, size)
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: value} // a nil Key is written as length -1
		r.Length = int32(len(r.AppendTo(nil)) - 1)            // the rest after a one-byte Length of 0
		recs = r.AppendTo(recs)
	}
	rb.Records = recs
	out := rb.AppendTo(nil)
	// AppendTo writes the Length and CRC fields as given: fix both.
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func (st *sinkState) serve(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 1<<20), bufio.NewWriterSize(c, 1<<20)
	var sizeBuf [4]byte
	var scratch sinkScratch
	for {
		if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(sizeBuf[:]))
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		resp, err := st.handle(frame, &scratch)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sink: %v\n", err)
			return
		}
		if len(resp) <= 1 { // one encoded response, or none after an acks=0 produce
			for _, b := range resp {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
		} else { // a Fetch v12 response in pieces: what is buffered first, then one writev
			if err := w.Flush(); err != nil {
				return
			}
			if _, err := resp.WriteTo(c); err != nil {
				return
			}
		}
		if !frameBuffered(r) { // answer now unless the next request is already here in full
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func frameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < 4 {
		return false
	}
	head, _ := r.Peek(4)
	return n >= 4+int(binary.BigEndian.Uint32(head))
}

func (st *sinkState) handle(frame []byte, sc *sinkScratch) (net.Buffers, error) {
	if len(frame) < 10 {
		return nil, errors.New("short frame")
	}
	key, version := int16(binary.BigEndian.Uint16(frame)), int16(binary.BigEndian.Uint16(frame[2:]))
	corr := binary.BigEndian.Uint32(frame[4:])
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, fmt.Errorf("api key %d", key)
	}
	req.SetVersion(version)
	pos := 8
	if n := int(int16(binary.BigEndian.Uint16(frame[pos:]))); n > 0 { // client id
		pos += n
	}
	pos += 2
	if req.IsFlexible() { // request header v2: tagged fields
		count, n := binary.Uvarint(frame[pos:])
		pos += n
		for i := uint64(0); i < count; i++ {
			_, n = binary.Uvarint(frame[pos:])
			pos += n
			l, n2 := binary.Uvarint(frame[pos:])
			pos += n2 + int(l)
		}
	}
	if err := req.ReadFrom(frame[pos:]); err != nil {
		return nil, fmt.Errorf("api %d v%d: %w", key, version, err)
	}
	if q, ok := req.(*kmsg.FetchRequest); ok && version == 12 {
		return st.fetchV12(q, corr, sc), nil
	}
	if q, ok := req.(*kmsg.FetchRequest); ok {
		return net.Buffers{st.fetchKmsg(q, corr, version, sc)}, nil
	}
	body := st.answer(req)
	if body == nil { // acks=0 produce: no response
		return nil, nil
	}
	body.SetVersion(version)
	out := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(out[4:], corr)
	if body.IsFlexible() && key != 18 { // response header v1, except ApiVersions (KIP-511)
		out = append(out, 0)
	}
	out = body.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return net.Buffers{out}, nil
}

// fetchPlan deals the request's byte limits over its partitions: each gets whole batches up to its
// PartitionMaxBytes, the response up to MaxBytes, the first partition at least one batch.
func (st *sinkState) fetchPlan(q *kmsg.FetchRequest, sc *sinkScratch, each func(t, p int, b []byte)) {
	budget, slot := int(q.MaxBytes), 0
	if q.MaxBytes <= 0 {
		budget = 1 << 30
	}
	for ti, t := range q.Topics {
		for pi, p := range t.Partitions {
			limit := min(int(p.PartitionMaxBytes), budget)
			var b []byte
			if limit >= st.batchLen || slot == 0 {
				b = st.fetchBatches(sc, slot, p.FetchOffset, int32(limit))
				budget -= len(b)
			}
			slot++
			each(ti, pi, b)
		}
	}
}

// fetchV12 encodes a Fetch v12 response by hand around the connection's batch buffers (no copy):
// bufs alternates encoded pieces and batch buffers, the first piece starting with the frame size.
func (st *sinkState) fetchV12(q *kmsg.FetchRequest, corr uint32, sc *sinkScratch) net.Buffers {
	cur := make([]byte, 8, 256)
	binary.BigEndian.PutUint32(cur[4:], corr)
	cur = append(cur, 0)                        // response header v1: no tagged fields
	cur = binary.BigEndian.AppendUint32(cur, 0) // ThrottleMillis
	cur = binary.BigEndian.AppendUint16(cur, 0) // ErrorCode
	cur = binary.BigEndian.AppendUint32(cur, 0) // SessionID
	cur = binary.AppendUvarint(cur, uint64(len(q.Topics)+1))
	var bufs net.Buffers
	batches := map[[2]int][]byte{}
	st.fetchPlan(q, sc, func(ti, pi int, b []byte) { batches[[2]int{ti, pi}] = b })
	for ti, t := range q.Topics {
		cur = binary.AppendUvarint(cur, uint64(len(t.Topic)+1))
		cur = append(cur, t.Topic...)
		cur = binary.AppendUvarint(cur, uint64(len(t.Partitions)+1))
		for pi, p := range t.Partitions {
			b := batches[[2]int{ti, pi}]
			cur = binary.BigEndian.AppendUint32(cur, uint32(p.Partition))
			cur = binary.BigEndian.AppendUint16(cur, 0)          // ErrorCode
			cur = binary.BigEndian.AppendUint64(cur, 1<<62)      // HighWatermark
			cur = binary.BigEndian.AppendUint64(cur, 1<<62)      // LastStableOffset
			cur = binary.BigEndian.AppendUint64(cur, 0)          // LogStartOffset
			cur = append(cur, 0)                                 // AbortedTransactions: null
			cur = binary.BigEndian.AppendUint32(cur, 0xffffffff) // PreferredReadReplica -1
			cur = binary.AppendUvarint(cur, uint64(len(b)+1))    // RecordBatches
			bufs = append(bufs, cur, b)
			cur = []byte{0} // the partition's tagged fields, then what follows
		}
		cur = append(cur, 0) // the topic's tagged fields
	}
	cur = append(cur, 0) // the response's tagged fields
	bufs = append(bufs, cur)
	size := -4
	for _, b := range bufs {
		size += len(b)
	}
	binary.BigEndian.PutUint32(bufs[0], uint32(size))
	return bufs
}

// fetchKmsg answers the other Fetch versions through kmsg (which copies the batches once more).
func (st *sinkState) fetchKmsg(q *kmsg.FetchRequest, corr uint32, version int16, sc *sinkScratch) []byte {
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(version)
	for _, t := range q.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		resp.Topics = append(resp.Topics, rt)
	}
	st.fetchPlan(q, sc, func(ti, pi int, b []byte) {
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = q.Topics[ti].Partitions[pi].Partition, 1<<62, 1<<62, 0
		rp.RecordBatches = b
		resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, rp)
	})
	out := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(out[4:], corr)
	if resp.IsFlexible() {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

func (st *sinkState) offsets(topic string) []int64 {
	o, ok := st.next[topic]
	if !ok {
		o = make([]int64, st.partitions)
		st.next[topic] = o
	}
	return o
}

func (st *sinkState) answer(req kmsg.Request) kmsg.Response {
	switch q := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := kmsg.NewPtrApiVersionsResponse()
		for k := int16(0); k < 100; k++ {
			if v, ok := supported[k]; ok {
				resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: v[0], MaxVersion: v[1]})
			}
		}
		return resp
	case *kmsg.MetadataRequest:
		resp := kmsg.NewPtrMetadataResponse()
		resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: st.host, Port: st.port}}
		resp.ControllerID = 0
		for _, t := range q.Topics {
			if t.Topic == nil {
				continue
			}
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic = kmsg.StringPtr(*t.Topic)
			id := sha256.Sum256([]byte(*t.Topic)) // a stable, non-zero topic id
			copy(mt.TopicID[:], id[:16])
			for p := int32(0); p < st.partitions; p++ {
				mp := kmsg.NewMetadataResponseTopicPartition()
				mp.Partition, mp.Leader, mp.LeaderEpoch, mp.Replicas, mp.ISR = p, 0, 0, []int32{0}, []int32{0}
				mt.Partitions = append(mt.Partitions, mp)
			}
			resp.Topics = append(resp.Topics, mt)
		}
		return resp
	case *kmsg.InitProducerIDRequest:
		resp := kmsg.NewPtrInitProducerIDResponse()
		resp.ProducerID, resp.ProducerEpoch = 1, 0
		return resp
	case *kmsg.ProduceRequest:
		resp := kmsg.NewPtrProduceResponse()
		st.mu.Lock()
		for _, t := range q.Topics {
			offs := st.offsets(t.Topic)
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				if p.Partition >= 0 && p.Partition < st.partitions {
					rp.BaseOffset = offs[p.Partition]
					offs[p.Partition] += recordCount(p.Records)
				} else {
					rp.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		st.mu.Unlock()
		if q.Acks == 0 {
			return nil // acks=0: Kafka sends no response
		}
		return resp
	case *kmsg.ListOffsetsRequest:
		resp := kmsg.NewPtrListOffsetsResponse()
		for _, t := range q.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.Offset, rp.Timestamp, rp.LeaderEpoch = p.Partition, 0, -1, 0
				if p.Timestamp == -1 { // latest
					rp.Offset = 1 << 62
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	return nil
}

// recordCount is the number of records in the batches of a produced partition (NumRecords summed).
func recordCount(b []byte) int64 {
	var n int64
	for len(b) >= 61 {
		size := int(int32(binary.BigEndian.Uint32(b[8:12]))) + 12
		if size > len(b) || size < 61 {
			break
		}
		n += int64(int32(binary.BigEndian.Uint32(b[57:61])))
		b = b[size:]
	}
	return n
}
