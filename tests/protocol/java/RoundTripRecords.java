// Reads KRaft metadata records and coordinator records with Apache Kafka's own serdes and writes
// them back. Input (file named by args[0]), one record a line, hex-encoded:
//   metadata <TAB> value
//   group|transaction|share <TAB> key <TAB> value-or-"null"
// Output: the same line as Kafka re-serializes it (MetadataRecordSerde / *CoordinatorRecordSerde),
// or "error <TAB> message" when Kafka cannot read it. Run in source-file mode with the Kafka jars on
// the class path. Used by tests/protocol/test_records_java.py: equal lines prove Kafka reads our
// bytes and writes exactly them for the content it read.

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde;
import org.apache.kafka.coordinator.transaction.TransactionCoordinatorRecordSerde;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

public class RoundTripRecords {
    private static final HexFormat HEX = HexFormat.of();

    private static String metadata(String valueHex) {
        byte[] in = HEX.parseHex(valueHex);
        ApiMessageAndVersion record = MetadataRecordSerde.INSTANCE.read(new ByteBufferAccessor(ByteBuffer.wrap(in)), in.length);
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer out = ByteBuffer.allocate(MetadataRecordSerde.INSTANCE.recordSize(record, cache));
        MetadataRecordSerde.INSTANCE.write(record, cache, new ByteBufferAccessor(out));
        return "metadata\t" + HEX.formatHex(out.array());
    }

    private static String coordinator(String kind, String keyHex, String valueHex) {
        CoordinatorRecordSerde serde = switch (kind) {
            case "group" -> new GroupCoordinatorRecordSerde();
            case "transaction" -> new TransactionCoordinatorRecordSerde();
            case "share" -> new ShareCoordinatorRecordSerde();
            default -> throw new IllegalArgumentException(kind);
        };
        ByteBuffer value = valueHex.equals("null") ? null : ByteBuffer.wrap(HEX.parseHex(valueHex));
        CoordinatorRecord record = serde.deserialize(ByteBuffer.wrap(HEX.parseHex(keyHex)), value);
        byte[] v = serde.serializeValue(record);
        return kind + "\t" + HEX.formatHex(serde.serializeKey(record)) + "\t" + (v == null ? "null" : HEX.formatHex(v));
    }

    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String[] cols = line.split("\t", -1);
            try {
                System.out.println(cols[0].equals("metadata") ? metadata(cols[1]) : coordinator(cols[0], cols[1], cols[2]));
            } catch (RuntimeException e) {
                System.out.println("error\t" + e);
            }
        }
    }
}
