// A Kafka Streams 4.3.1 application with processing.guarantee=exactly_once_v2, for
// tests/transactions/test_streams_eos.py. Topology: every input record "<i>:<word>" is copied to the
// output topic as "<i>:<word>-out", and counted per word (selectKey -> a repartition topic -> count, a
// state store with a compacted changelog) into the counts topic.
// Usage: java -cp <clients jars>:<streams jars> StreamsEos.java <bootstrap> <application.id> <input>
//        <output> <counts> <state.dir>
// Prints "state <NEW_STATE>" on every state change; runs until killed.
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsEos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], counts = args[4];
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.consumerPrefix("max.poll.records"), 50);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> in = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        in.mapValues(v -> v + "-out").to(output, Produced.with(Serdes.String(), Serdes.String()));
        in.map((k, v) -> KeyValue.pair(v.substring(v.indexOf(':') + 1), v))
          .groupByKey()
          .count()
          .toStream()
          .mapValues(Object::toString)
          .to(counts, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("uncaught " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
