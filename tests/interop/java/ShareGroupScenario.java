// Share-group scenarios with Kafka 4.3.1's KafkaShareConsumer, run by tests/interop/test_share_groups_java.py
// with the JVM's source launcher (java -cp <kafka jars> ShareGroupScenario.java MODE ...). Prints one JSON
// object per line; the Python test checks them.
//
//   spread BOOTSTRAP TOPIC GROUP CONSUMERS RECORDS
//       CONSUMERS share consumers (implicit acknowledgement, max.poll.records=5, record_limit acquire
//       mode) poll; once every one has polled for a while, RECORDS records are produced; the group's
//       share.auto.offset.reset is set to earliest first (with latest, a share-partition initialized
//       late on a loaded machine missed records produced before it) and its share.record.lock.duration.ms
//       to 30 s (the broker's is 1 s for the redelivery tests: on a loaded machine a poll-to-ack gap over
//       1 s redelivered records); each consumer sleeps 1 ms per record. Prints {"consumer":i,"offset":o,"delivery":d} per record and {"done":...} at the end.
//   redeliver BOOTSTRAP TOPIC GROUP RECORDS
//       one consumer, explicit acknowledgement: of the first records it gets, offsets 0-1 are RELEASEd,
//       offset 2 REJECTed, the rest ACCEPTed; it polls until it has accepted every record but offset 2.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class ShareGroupScenario {
    static Properties consumerProps(String bootstrap, String group, String ackMode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", ackMode);
        p.put("max.poll.records", "5");
        p.put("share.acquire.mode", "record_limit");
        return p;
    }

    static void produce(String bootstrap, String topic, int records) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            producer.flush();
        }
    }

    static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        if (mode.equals("spread")) spread(bootstrap, topic, group, Integer.parseInt(args[4]), Integer.parseInt(args[5]));
        else if (mode.equals("redeliver")) redeliver(bootstrap, topic, group, Integer.parseInt(args[4]));
        else throw new IllegalArgumentException(mode);
    }

    static void spread(String bootstrap, String topic, String group, int consumers, int records) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", "30000"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        }
        AtomicBoolean stop = new AtomicBoolean();
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch polled = new CountDownLatch(consumers);
        ExecutorService pool = Executors.newFixedThreadPool(consumers);
        List<Future<?>> futures = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            final int id = i;
            futures.add(pool.submit(() -> {
                try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(consumerProps(bootstrap, group, "implicit"))) {
                    c.subscribe(List.of(topic));
                    long start = System.currentTimeMillis();
                    boolean counted = false;
                    while (!stop.get()) {
                        ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                        if (!counted && System.currentTimeMillis() - start > 3000) { polled.countDown(); counted = true; }
                        for (ConsumerRecord<String, String> r : recs) {
                            seen.add(r.partition() + ":" + r.offset());
                            out("{\"consumer\":" + id + ",\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + ",\"delivery\":"
                                + r.deliveryCount().orElse((short) -1) + "}");
                            Thread.sleep(1);
                        }
                    }
                    c.commitSync();
                }
                return null;
            }));
        }
        polled.await(60, TimeUnit.SECONDS);
        produce(bootstrap, topic, records);
        long deadline = System.currentTimeMillis() + 60000;
        while (seen.size() < records && System.currentTimeMillis() < deadline) Thread.sleep(50);
        stop.set(true);
        for (Future<?> f : futures) f.get(60, TimeUnit.SECONDS);
        pool.shutdown();
        out("{\"done\":true,\"distinct\":" + seen.size() + "}");
    }

    static void redeliver(String bootstrap, String topic, String group, int records) throws Exception {
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(consumerProps(bootstrap, group, "explicit"))) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 3000;
            while (System.currentTimeMillis() < deadline) c.poll(Duration.ofMillis(200));  // initialize at latest
            produce(bootstrap, topic, records);
            Set<Long> accepted = new HashSet<>();
            deadline = System.currentTimeMillis() + 60000;
            while (accepted.size() < records - 1 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    short delivery = r.deliveryCount().orElse((short) -1);
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    if (delivery == 1 && r.offset() < 2) type = AcknowledgeType.RELEASE;
                    else if (r.offset() == 2) type = AcknowledgeType.REJECT;
                    c.acknowledge(r, type);
                    if (type == AcknowledgeType.ACCEPT) accepted.add(r.offset());
                    out("{\"offset\":" + r.offset() + ",\"delivery\":" + delivery + ",\"ack\":\"" + type + "\"}");
                }
                c.commitSync();
            }
            // Nothing else may come back: offset 2 was rejected, the rest accepted.
            deadline = System.currentTimeMillis() + 1500;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    out("{\"offset\":" + r.offset() + ",\"delivery\":" + r.deliveryCount().orElse((short) -1) + ",\"ack\":\"LATE\"}");
                }
                c.commitSync();
            }
            out("{\"done\":true,\"accepted\":" + accepted.size() + "}");
        }
    }
}
