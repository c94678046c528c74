// One KafkaShareConsumer (kafka-clients 4.3.1, implicit acknowledgement) for
// tests/interop/test_share_group_configs.py, run with the JVM's source launcher:
//
//   consume BOOTSTRAP TOPIC GROUP RECORDS SECONDS
//       polls until RECORDS records arrived or SECONDS passed; prints {"offset":o,"delivery":d} per
//       record, then {"done":n}.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.serialization.*;

public class ShareConfigScenario {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[1], topic = args[2], group = args[3];
        int records = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(args[5]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int got = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (got < records && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("{\"offset\":" + r.offset() + ",\"delivery\":" + r.deliveryCount().orElse((short) -1) + "}");
                    got++;
                }
                consumer.commitSync();
            }
        }
        System.out.println("{\"done\":" + got + "}");
        System.out.flush();
    }
}
