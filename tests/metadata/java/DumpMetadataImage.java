// Replays framed metadata records (hex, one per line) with Apache Kafka's own MetadataDelta and
// prints the images and local replica changes in a canonical text form that
// tests/metadata/test_kafka_image_java.py also builds from kbroker.metadata. Input lines:
//   record <hex>           replay one record value (MetadataRecordSerde frame) into the current delta
//   local <brokerId>       print the current delta's TopicsDelta.localChanges(brokerId)
//   apply <offset> <epoch> apply the delta, print the image, start a new delta from it
// Run in source-file mode with the Kafka jars on the class path.

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.image.LocalReplicaChanges;
import org.apache.kafka.image.MetadataDelta;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.image.MetadataProvenance;
import org.apache.kafka.image.TopicImage;
import org.apache.kafka.metadata.BrokerRegistration;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.server.common.ApiMessageAndVersion;

public class DumpMetadataImage {
    static String uuid(Uuid u) {
        return new java.util.UUID(u.getMostSignificantBits(), u.getLeastSignificantBits()).toString();
    }

    static String ints(int[] a) {
        return Arrays.toString(a).replace(" ", "");
    }

    static String uuids(Uuid[] a) {
        return "[" + Arrays.stream(a).map(DumpMetadataImage::uuid).collect(Collectors.joining(",")) + "]";
    }

    static String uuids(List<Uuid> a) {
        return uuids(a.toArray(new Uuid[0]));
    }

    static String tp(TopicPartition t) {
        return t.topic() + "-" + t.partition();
    }

    static void dump(MetadataImage image) {
        System.out.println("image " + image.provenance().lastContainedOffset() + " " + image.provenance().lastContainedEpoch());
        image.features().metadataVersion().ifPresent(mv -> System.out.println("feature metadata.version " + mv.featureLevel()));
        new TreeMap<>(image.features().finalizedVersions()).forEach((k, v) -> {
            if (!k.equals("metadata.version")) System.out.println("feature " + k + " " + v);
        });
        for (BrokerRegistration b : new TreeMap<>(image.cluster().brokers()).values()) {
            String listeners = new TreeMap<>(b.listeners()).values().stream()
                .map(e -> e.listener() + ":" + e.host() + ":" + e.port() + ":" + e.securityProtocol().id)
                .collect(Collectors.joining(","));
            String features = new TreeMap<>(b.supportedFeatures()).entrySet().stream()
                .map(e -> e.getKey() + ":" + e.getValue().min() + "-" + e.getValue().max())
                .collect(Collectors.joining(","));
            System.out.println("broker " + b.id() + " epoch=" + b.epoch() + " incarnation=" + uuid(b.incarnationId())
                + " fenced=" + b.fenced() + " shutdown=" + b.inControlledShutdown() + " rack=" + b.rack().orElse("null")
                + " listeners=" + listeners + " features=" + features + " dirs=" + uuids(b.directories()) + " cordoned=" + (b.cordonedDirectories() == null ? "null" : uuids(b.cordonedDirectories())));
        }
        TreeMap<String, TopicImage> topics = new TreeMap<>(image.topics().topicsByName());
        for (TopicImage t : topics.values()) {
            System.out.println("topic " + t.name() + " " + uuid(t.id()));
            for (Map.Entry<Integer, PartitionRegistration> e : new TreeMap<>(t.partitions()).entrySet()) {
                PartitionRegistration p = e.getValue();
                System.out.println("partition " + t.name() + "-" + e.getKey() + " replicas=" + ints(p.replicas)
                    + " isr=" + ints(p.isr) + " removing=" + ints(p.removingReplicas) + " adding=" + ints(p.addingReplicas)
                    + " leader=" + p.leader + " lrs=" + p.leaderRecoveryState.value() + " le=" + p.leaderEpoch
                    + " pe=" + p.partitionEpoch + " dirs=" + uuids(p.directories) + " elr=" + ints(p.elr)
                    + " lkelr=" + ints(p.lastKnownElr));
            }
        }
        List<String> configs = new ArrayList<>();
        image.configs().resourceData().forEach((resource, config) -> config.data().forEach((k, v) ->
            configs.add("config " + resource.type().id() + " '" + resource.name() + "' " + k + "=" + v)));
        configs.stream().sorted().forEach(System.out::println);
        System.out.println("producerIds " + image.producerIds().nextProducerId());
    }

    static void local(MetadataDelta delta, int brokerId) {
        System.out.println("local " + brokerId);
        if (delta.topicsDelta() == null) return;
        LocalReplicaChanges c = delta.topicsDelta().localChanges(brokerId);
        List<String> lines = new ArrayList<>();
        c.deletes().forEach(t -> lines.add("delete " + tp(t)));
        c.leaders().forEach((t, info) -> lines.add("leader " + tp(t) + " elected=" + c.electedLeaders().containsKey(t)
            + " id=" + uuid(info.topicId()) + " le=" + info.partition().leaderEpoch + " pe=" + info.partition().partitionEpoch));
        c.followers().forEach((t, info) -> lines.add("follower " + tp(t) + " id=" + uuid(info.topicId())
            + " le=" + info.partition().leaderEpoch + " pe=" + info.partition().partitionEpoch));
        c.topicIds().forEach((name, id) -> lines.add("topicId " + name + " " + uuid(id)));
        c.directoryIds().forEach((tip, dir) -> lines.add("directory " + uuid(tip.topicId()) + "-" + tip.partition() + " " + uuid(dir)));
        lines.stream().sorted().forEach(System.out::println);
    }

    public static void main(String[] args) throws Exception {
        MetadataImage image = MetadataImage.EMPTY;
        MetadataDelta delta = new MetadataDelta.Builder().setImage(image).build();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String[] cols = line.split(" ");
            switch (cols[0]) {
                case "record" -> {
                    byte[] b = HexFormat.of().parseHex(cols[1]);
                    ApiMessageAndVersion r = MetadataRecordSerde.INSTANCE.read(new ByteBufferAccessor(ByteBuffer.wrap(b)), b.length);
                    delta.replay(r.message());
                }
                case "local" -> local(delta, Integer.parseInt(cols[1]));
                case "apply" -> {
                    image = delta.apply(new MetadataProvenance(Long.parseLong(cols[1]), Integer.parseInt(cols[2]), 0L, true));
                    dump(image);
                    delta = new MetadataDelta.Builder().setImage(image).build();
                }
                default -> throw new IllegalArgumentException(line);
            }
        }
    }
}
