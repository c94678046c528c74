// A Java-client (kafka-clients 4.3.1) consume-transform-produce loop against a broker that finalizes
// transaction.version 2 (the client then uses transactions version 2, KIP-890 part 2: no
// AddPartitionsToTxn / AddOffsetsToTxn, Produce v12, TxnOffsetCommit v5, EndTxn v5 with an epoch bump).
// Usage: java -cp <jars> TxnV2Client.java <bootstrap> <input> <output> <transactional.id> <group> <records>
// Prints: "ends <n>" (transactions ended by the first producer), "epoch <e>" (its epoch per
// DescribeTransactions after them), "fenced <exception>", "output <count> <distinct> <zombie?> <fresh?>"
// and "offset <committed offset of the group>".
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnV2Client {
    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        if (tid != null) p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "30000");
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        if (group != null) c.put("group.id", group);
        c.put("enable.auto.commit", "false");
        c.put("max.poll.records", "10");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], tid = args[3], group = args[4];
        int records = Integer.parseInt(args[5]);
        try (KafkaProducer<String, String> plain = producer(bootstrap, null)) {
            for (int i = 0; i < records; i++) plain.send(new ProducerRecord<>(input, "in-" + i));
        }
        TopicPartition in = new TopicPartition(input, 0);
        KafkaProducer<String, String> first = producer(bootstrap, tid);
        first.initTransactions();
        int outPartitions = first.partitionsFor(output).size();
        int ends = 0;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, group)) {
            c.assign(List.of(in));
            long done = 0;
            int txn = 0;
            long deadline = System.currentTimeMillis() + 120000;
            while (done < records && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = c.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) continue;
                first.beginTransaction();
                long next = 0;
                for (ConsumerRecord<String, String> r : batch) {
                    first.send(new ProducerRecord<>(output, (int) (r.offset() % outPartitions), null,
                                                    r.value() + "-out"));
                    next = r.offset() + 1;
                }
                first.sendOffsetsToTransaction(Map.of(in, new OffsetAndMetadata(next)), c.groupMetadata());
                if (txn++ % 3 == 2) {
                    first.abortTransaction();
                    OffsetAndMetadata committed = c.committed(Set.of(in)).get(in);
                    c.seek(in, committed == null ? 0 : committed.offset());
                } else {
                    first.commitTransaction();
                    done = next;
                }
                ends++;
            }
        }
        System.out.println("ends " + ends);
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            TransactionDescription d = admin.describeTransactions(List.of(tid)).description(tid).get();
            System.out.println("epoch " + d.producerEpoch());
        }
        first.beginTransaction();
        first.send(new ProducerRecord<>(output, "zombie")).get();
        KafkaProducer<String, String> second = producer(bootstrap, tid);
        second.initTransactions();
        try {
            first.commitTransaction();
            System.out.println("zombie committed");
        } catch (Exception e) {
            System.out.println("fenced " + e.getClass().getSimpleName());
        }
        first.close(Duration.ofSeconds(5));
        second.beginTransaction();
        second.send(new ProducerRecord<>(output, "fresh"));
        second.commitTransaction();
        second.close();

        List<String> values = new ArrayList<>();
        List<TopicPartition> outs = new ArrayList<>();
        for (int p = 0; p < outPartitions; p++) outs.add(new TopicPartition(output, p));
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null)) {
            c.assign(outs);
            c.seekToBeginning(outs);
            Map<TopicPartition, Long> end = c.endOffsets(outs);
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                boolean caughtUp = true;
                for (TopicPartition tp : outs) caughtUp &= c.position(tp) >= end.get(tp);
                if (caughtUp) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) values.add(r.value());
            }
        }
        Map<String, Integer> counts = new HashMap<>();
        for (String v : values) counts.merge(v, 1, Integer::sum);
        boolean exactlyOnce = true;
        for (int i = 0; i < records; i++) exactlyOnce &= counts.getOrDefault("in-" + i + "-out", 0) == 1;
        System.out.println("output " + values.size() + " " + new HashSet<>(values).size() + " exactly-once=" + exactlyOnce
                + " zombie=" + values.contains("zombie") + " fresh=" + values.contains("fresh"));
        try (KafkaConsumer<String, String> c = consumer(bootstrap, group)) {
            OffsetAndMetadata committed = c.committed(Set.of(in)).get(in);
            System.out.println("offset " + (committed == null ? -1 : committed.offset()));
        }
    }
}
