// Reads a file of concatenated v2 record batches with Apache Kafka's own client code
// (MemoryRecords / DefaultRecordBatch), validates each batch and prints every record as one
// tab-separated line. Run in source-file mode: java -cp <kafka-clients jars> ReadRecordBatches.java FILE
// Used by tests/protocol/test_records.py to prove Java consumers decode kbroker's batches.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;

public class ReadRecordBatches {
    private static String hex(ByteBuffer b) {
        if (b == null) return "null";
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return HexFormat.of().formatHex(out);
    }

    public static void main(String[] args) throws Exception {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(Files.readAllBytes(Path.of(args[0]))));
        for (RecordBatch batch : records.batches()) {
            batch.ensureValid();
            System.out.println("batch\t" + batch.baseOffset() + "\t" + batch.lastOffset() + "\t"
                + batch.compressionType().name + "\t" + batch.timestampType() + "\t" + batch.maxTimestamp() + "\t"
                + batch.producerId() + "\t" + batch.producerEpoch() + "\t" + batch.baseSequence() + "\t"
                + batch.isTransactional() + "\t" + batch.isControlBatch() + "\t" + batch.partitionLeaderEpoch());
            for (Record r : batch) {
                r.ensureValid();
                StringBuilder line = new StringBuilder("record\t" + r.offset() + "\t" + r.timestamp() + "\t"
                    + (r.hasKey() ? hex(r.key()) : "null") + "\t" + (r.hasValue() ? hex(r.value()) : "null"));
                for (Header h : r.headers()) {
                    line.append("\t").append(h.key()).append("=")
                        .append(h.value() == null ? "null" : HexFormat.of().formatHex(h.value()));
                }
                System.out.println(line);
            }
        }
    }
}
