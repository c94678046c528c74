// A group member (classic or KIP-848 consumer protocol) that stops polling for longer than max.poll.interval.ms, then
// tries to commit what it consumed (the seed question "a consumer that exceeds max.poll.interval.ms is
// removed from the group and its commit fails"). Run as a single-file source program:
//
//   java -cp <kafka-clients classpath> SlowConsumer.java BOOTSTRAP TOPIC GROUP MAX_POLL_INTERVAL_MS PROTOCOL
//
// PROTOCOL is classic or consumer (KIP-848: the broker sets the session timeout and heartbeat interval).
//
// It prints one line per step on stdout; the test drives it through stdin:
//   ASSIGNED <partitions> MEMBER <member id> GENERATION <generation>   after its first assignment
//   CONSUMED <count>                                                   records it now holds uncommitted
//   (reads a line "commit" from stdin: by then it has not polled for longer than the interval)
//   COMMIT_OK | COMMIT_FAILED <exception class> <message>
//   (reads a line "poll")
//   REJOINED <partitions> GENERATION <generation>                      after polling again
//   (keeps polling until it reads a line "close")
//   CLOSED
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.Collection;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class SlowConsumer {
    private static Set<Integer> partitions(Set<TopicPartition> tps) {
        Set<Integer> out = new TreeSet<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        return out;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.protocol", args[4]);
        props.put("client.id", "slow");
        props.put("max.poll.interval.ms", args[3]);
        if (args[4].equals("classic")) {
            props.put("session.timeout.ms", "6000");
            props.put("heartbeat.interval.ms", "500");
        }
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            AtomicBoolean assigned = new AtomicBoolean(false);
            consumer.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) { }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    assigned.set(true);
                }
            });
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            while (offsets.isEmpty()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records)
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            System.out.println("ASSIGNED " + partitions(consumer.assignment()) + " MEMBER "
                + consumer.groupMetadata().memberId() + " GENERATION " + consumer.groupMetadata().generationId());
            System.out.println("CONSUMED " + offsets.size());
            System.out.flush();
            // "Processing" outlives max.poll.interval.ms: the test says when to go on.
            if (!"commit".equals(stdin.readLine())) return;
            try {
                consumer.commitSync(offsets);
                System.out.println("COMMIT_OK");
            } catch (Exception e) {
                System.out.println("COMMIT_FAILED " + e.getClass().getName() + " " + e.getMessage().replace('\n', ' '));
            }
            System.out.flush();
            if (!"poll".equals(stdin.readLine())) return;
            // The old assignment is still listed until poll() notices it was lost: wait for a new one.
            assigned.set(false);
            while (!assigned.get() || consumer.assignment().isEmpty()) {
                consumer.poll(Duration.ofMillis(200));
            }
            System.out.println("REJOINED " + partitions(consumer.assignment()) + " GENERATION "
                + consumer.groupMetadata().generationId());
            System.out.flush();
            // A well-behaved member now: keep polling until told to close.
            while (!(stdin.ready() && "close".equals(stdin.readLine()))) {
                consumer.poll(Duration.ofMillis(100));
            }
        }
        System.out.println("CLOSED");
        System.out.flush();
    }
}
