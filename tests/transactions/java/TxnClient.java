// A Java-client (kafka-clients 4.3.1) transactional producer against a broker:
// commit, abort, a zombie fenced by a new incarnation, then a read_committed consumer.
// Usage: java -cp <jars> TxnClient.java <bootstrap> <topic> <transactional.id>
// Prints one line per step ("fenced <exception>", "read <values>").
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnClient {
    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "30000");
        return new KafkaProducer<>(p);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2];
        KafkaProducer<String, String> first = producer(bootstrap, tid);
        first.initTransactions();
        first.beginTransaction();
        for (int i = 0; i < 3; i++) first.send(new ProducerRecord<>(topic, "c" + i));
        first.commitTransaction();
        first.beginTransaction();
        first.send(new ProducerRecord<>(topic, "aborted"));
        first.flush();
        first.abortTransaction();
        first.beginTransaction();
        first.send(new ProducerRecord<>(topic, "zombie")).get();
        KafkaProducer<String, String> second = producer(bootstrap, tid);
        second.initTransactions();
        System.out.println("second initialized");
        try {
            first.commitTransaction();
            System.out.println("zombie committed");
        } catch (Exception e) {
            System.out.println("fenced " + e.getClass().getSimpleName());
        }
        first.close(Duration.ofSeconds(5));
        second.beginTransaction();
        second.send(new ProducerRecord<>(topic, "fresh"));
        second.commitTransaction();
        second.close();

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 20000;
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) values.add(r.value());
            }
        }
        System.out.println("read " + String.join(",", values));
    }
}
